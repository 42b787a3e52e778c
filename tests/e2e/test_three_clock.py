"""tools/three_clock.py, the experiment of docs/benchmarks.md: run on the real EDGAR sample where it is present
(skips with the reason where it is not), held to its own independent recount and to the figures the page quotes."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
DOC = ROOT / "docs" / "benchmarks.md"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("three_clock", ROOT / "tools" / "three_clock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["three_clock"] = module
    spec.loader.exec_module(module)
    return module


def test_missing_data_is_one_line_and_exit_2(tmp_path, capsys):
    tool = _tool()
    assert tool.main(["--data", str(tmp_path / "nowhere"), "--work", str(tmp_path / "work")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert "edgar-submissions-sample: not found" in err
    assert not (tmp_path / "work").exists()  # nothing written


@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.integration  # the whole experiment of docs/benchmarks.md
def test_three_clocks_on_the_real_sample(tmp_path):
    tool = _tool()
    try:
        tool.inputs(DATA)
    except tool.MissingDataError as exc:
        pytest.skip(f"the real-data directory is absent: {exc}")
    result = tool.three_clock(DATA, tmp_path)
    assert result["valid"] is True
    assert result["release"]["rows"] == 142  # the sample's 8-Ks in the window (its README's count)
    cells = result["cells"]
    assert [cells[c]["trades"] for c in tool.CLOCKS] == [
        142,
        141,
        141,
    ]  # a 2023-03-31 filing enters after the window
    for clock in tool.CLOCKS:
        c, r = cells[clock], cells[clock]["recount"]
        # the runner's figures and the recount from the files alone agree on every count and the return
        assert (c["trades"], c["scored"], c["lookahead"], c["stamped"]) == (
            r["trades"],
            r["scored"],
            r["bought_after_open"],
            r["stamped"],
        ), clock
        assert c["total_return"] == pytest.approx(r["total_return"], abs=1e-6), clock
    assert cells["leaky"]["lookahead"] > 0
    assert cells["dump"]["lookahead"] == cells["pit"]["lookahead"] == 0
    assert cells["pit"]["pit_fallback_rows"] == 1  # the flagged Nikola stamp
    # the page quotes exactly what the script prints
    quoted = re.search(r"## What it printed\n\n```text\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    assert quoted is not None
    assert tool.table(result) == quoted[1]
