"""``evalkit view``: what it lists, the pages it serves (the report's, and the trajectory browser), that it only
reads, and its user errors."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from report_support import make_artifacts, runner  # pyright: ignore[reportImplicitRelativeImport]
from view_support import fetch, running_view  # pyright: ignore[reportImplicitRelativeImport]

from evalkit_cli import app


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return make_artifacts(tmp_path_factory.mktemp("view"))


def tree_digest(*roots: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() and not p.name.endswith(("-wal", "-shm")):
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.slow
def test_view_lists_serves_browses_and_changes_nothing(art):
    base, home = art["base"], art["home"]
    before = tree_digest(base)
    with running_view(base, home) as (url, items):
        kinds = sorted(i["kind"] for i in items)
        assert kinds.count("pit") == 1 and kinds.count("campaign") == 1 and kinds.count("eval") == 2
        status, index = fetch(url)
        assert status == 200
        for n in range(len(items)):
            assert f'href="/item/{n}"' in index
            status, page = fetch(f"{url}item/{n}")
            assert status == 200, page[:500]
            assert 'data-path="' in page and "Plotly.newPlot" in page
        pit = next(n for n, i in enumerate(items) if i["kind"] == "pit")
        status, traj = fetch(f"{url}item/{pit}/trajectory")
        assert status == 200
        receipt = json.loads(art["pit"].read_text())["body"]
        assert traj.count(f'href="/item/{pit}/trajectory/0/') == receipt["window"]["sessions"]
        status, session = fetch(f"{url}item/{pit}/trajectory/0/0")
        assert status == 200
        assert "Sent to the agent" in session and "tool call" in session and "Answer and picks" in session
        first = json.loads(Path(receipt["trajectory"]["path"]).read_text().splitlines()[2])
        assert first["type"] == "agent_call"
        assert first["prompt"].split(".")[0] in session  # what the model was sent, as the trajectory has it
        for bad in ("item/999", f"item/{pit}/trajectory/0/999", "etc/passwd", f"item/{pit}/trajectory/../../x"):
            assert fetch(url + bad)[0] == 404, bad
        assert fetch(url, method="POST")[0] == 405
        assert fetch(url, method="DELETE")[0] == 405
    assert tree_digest(base) == before  # read-only: the exported files and the store are unchanged


def test_view_errors_and_help(tmp_path):
    result = subprocess.run([sys.executable, "-c", "from evalkit_cli import main; main()", "view",
                             str(tmp_path / "missing")], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path / 'missing'}: not a directory (evalkit view DIR)"]
    helped = runner.invoke(app, ["view", "--help"])
    assert helped.exit_code == 0
    assert "--port" in helped.output and "read-only" in helped.output and "127.0.0.1" in helped.output
