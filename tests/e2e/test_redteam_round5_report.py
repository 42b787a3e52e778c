"""Round five: a candidate's code cannot break the report page it is shown on.

``evalkit report`` embeds each replayed candidate's code in the page as JSON inside a ``<script
type="application/json">`` element. Only ``</`` was escaped, so a completion holding ``<!--<script>`` (in a comment
or a string: valid Python) put the HTML tokenizer in the "script data double escaped" state: the element's own
closing tag no longer closed it, and the page's scripts after it were swallowed (headless Chromium drew 0 of the 3
charts). Every ``<`` in the embedded JSON is now written ``\\u003c``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit_cli import app

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
runner = CliRunner()
HOSTILE = [
    "def double(n):\n    # <!--<script>\n    return 2 * n\n",
    "def double(n):\n    s = '<!-- <SCRIPT x> </script> <\\\\/script>'\n    return 2 * n\n",
    "def double(n):\n    return '</script><script>document.title=1</script>'\n",
]


def _report(tmp_path: Path, completion: str) -> str:
    replay = tmp_path / "replay.jsonl"
    lines = [{"task_id": "code/double/001", "completion": completion},
             {"task_id": "code/mean/001", "completion": "def mean(xs):\n    return 0\n"}]  # fmt: skip
    replay.write_text("".join(json.dumps(x) + "\n" for x in lines))
    receipt = tmp_path / "receipt.json"
    args = ["eval", "--tasks", str(BANK), "--solver", f"replay:{replay}", "--out", str(tmp_path / "results.jsonl"),
            "--receipt", str(receipt)]  # fmt: skip
    assert runner.invoke(app, args).exit_code == 0
    page = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(receipt), "--out", str(page)])
    assert result.exit_code == 0, result.output
    return page.read_text(encoding="utf-8")


@pytest.mark.parametrize("completion", HOSTILE, ids=["comment", "string", "closing-tag"])
def test_embedded_code_cannot_change_how_the_page_is_tokenised(tmp_path: Path, completion: str) -> None:
    html = _report(tmp_path, completion)
    m = re.search(r'<script type="application/json" id="code-data">(.*?)</script>', html, re.DOTALL)
    assert m is not None
    data = m.group(1)
    # the HTML spec's restrictions on a script's contents: no "<!--", no "<script", no "</script" (any case)
    for bad in ("<!--", "<script", "</script"):
        assert bad not in data.lower(), bad
    assert completion in json.loads(data).values()  # JSON.parse gives the code back, as written
    # every script element is closed by its own tag
    assert html.count("</script>") == html.lower().count("<script")


@pytest.mark.slow
@pytest.mark.integration  # a real browser
@pytest.mark.needs("chromium")
def test_the_charts_are_drawn_whatever_the_code_says(tmp_path: Path) -> None:
    html = _report(tmp_path, HOSTILE[0])
    page = tmp_path / "report.html"
    assert html
    chromium = machine.which("chromium") or machine.which("chromium-browser")
    assert chromium is not None
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout  # fmt: skip
    assert dom.count('class="main-svg"') >= 3, "the page's charts were not drawn"
