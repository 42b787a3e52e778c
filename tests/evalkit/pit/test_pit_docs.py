"""docs/pit-harness.md runs as written: every python and bash block, in order, in an empty directory."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "pit-harness.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in BLOCK.finditer(DOC.read_text())]


def test_doc_has_both_adapters_receipt_verify_jail_and_threat_model_sections():
    text = DOC.read_text()
    for needle in ("from_callable", "from_tool_loop", "## The receipt", "## Verify", "## Where the agent runs",
                   "## The network recorder", "## Threat model", "--netns", "subprocess", "by value"):
        assert needle in text
    kinds = [k for k, _ in _blocks()]
    assert kinds.count("python") >= 4
    assert kinds.count("bash") >= 3


@pytest.mark.slow
def test_doc_examples_run_in_order(in_tmp, capsys):
    namespace: dict[str, object] = {"__name__": "pit_harness_doc"}
    last_stdout = ""
    for n, (kind, code) in enumerate(_blocks()):
        if kind == "python":
            exec(compile(code, f"{DOC.name}[block {n}]", "exec"), namespace)
        elif kind == "bash":
            for line in code.strip().splitlines():
                argv = shlex.split(line)
                assert argv[:3] == ["uv", "run", "evalkit"], line
                res = subprocess.run([sys.executable, "-m", "evalkit_cli", *argv[3:]], cwd=in_tmp, capture_output=True,
                                     text=True, timeout=300, check=False)
                assert res.returncode == 0, (line, res.stdout, res.stderr)
                last_stdout = res.stdout
        elif kind == "text":
            # The shown output of the command just before it.
            assert [ln.split() for ln in last_stdout.splitlines()] == [ln.split() for ln in code.strip().splitlines()]
    out = capsys.readouterr().out
    assert "blocked:" in out
    assert (in_tmp / "samples.jsonl").is_file()
    assert (in_tmp / "loop" / "receipt.json").is_file()
