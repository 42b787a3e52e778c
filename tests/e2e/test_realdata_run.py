"""Issue 4's real-data check: a stub run over the real 8-K rows of the EDGAR sample, scored with real prices.

Skips (with a reason) where ../shared/data is absent.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from evalkit.pit import RunConfig, load_prices, run, stub_agent
from evalkit_core import Release
from evalkit_core.edgar import build_edgar_release

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
PRICES = DATA / "prices" / "daily_2022-10-03_2023-06-30.csv.gz"

pytestmark = [
    pytest.mark.realdata,
    pytest.mark.slow,
    pytest.mark.integration,  # a release built from the real sample, then a whole run over it
    pytest.mark.skipif(not (DATA / "edgar-submissions-sample").is_dir() or not PRICES.is_file(), reason="../shared/data is absent"),
]


def test_stub_over_real_8k_rows_scores_every_reachable_cell(tmp_path: Path) -> None:
    out = tmp_path / "release"
    build_edgar_release(
        out,
        submissions=DATA / "edgar-submissions-sample",
        tickers=DATA / "company_tickers.json",
        start=dt.date(2022, 11, 1),
        end=dt.date(2023, 3, 31),
        name="edgar-sample",
    )
    release = Release.load(out, forms=["8-K"])
    assert release.arm("main").height == 142
    prices = load_prices(PRICES, source="dieperdev/yfinance-stock-data a342efb7 (Yahoo-style, split-adjusted)", pulled_at="2024-03-01")
    cfg = RunConfig(
        bundle_path=str(out), forms=("8-K",), trajectory_path=str(tmp_path / "t.jsonl"), receipt_path=str(tmp_path / "r.json")
    )
    result = run(stub_agent, cfg, release, prices)
    body = result.body
    assert body["valid"] is True
    assert len(body["cells"]) == 9
    for cell in body["cells"]:
        if cell["reachable"]:
            assert cell["total_return"] is not None, cell
            assert cell["scored_trades"] > 100
            # a reachable clock never enters before EDGAR accepted the filing
            assert cell["lookahead_trades"] == 0, cell
        else:
            assert cell["clock"] == "leaky"
            assert cell["lookahead_trades"] > 0
    # The stub's picks do not depend on what it is shown, so the control arms match the main arm exactly.
    for clock in ("leaky", "dump", "pit"):
        assert body["contamination"][clock] == {"main_minus_shifted": 0, "main_minus_redacted": 0}
    assert body["prices"]["sha256"].startswith("sha256:")
