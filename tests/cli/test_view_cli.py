"""``evalkit view``: what it lists, the pages it serves (the report's, and the trajectory browser), that it only
reads, and its user errors."""

from __future__ import annotations

import hashlib
import html
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from report_support import make_artifacts, runner  # pyright: ignore[reportImplicitRelativeImport]
from view_support import fetch, running_view, running_view_json  # pyright: ignore[reportImplicitRelativeImport]

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


def _report_json(item: dict[str, Any]) -> dict[str, Any]:
    args = [item["target"], *(["--home", item["home"]] if item["home"] else []), "--json"]
    result = runner.invoke(app, ["report", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _sessions_in(trajectory: Path) -> list[list[tuple[str, int, int, int]]]:
    """Per cell (the probe's calls last, as one more cell), per session: (date, tool calls, picks, rejected),
    counted here from the trajectory the CLI wrote."""
    cells: list[list[list[Any]]] = []
    in_probe = False
    for line in trajectory.read_text().splitlines():
        e = json.loads(line)
        if e["type"] == "cell_start":
            cells.append([])
        elif e["type"] == "agent_call":
            if "probe_item" in e and not in_probe:
                in_probe = True
                cells.append([])
            cells[-1].append([e["session_date"], 0, 0, 0])
        elif cells and cells[-1] and e["type"] == "tool_call":
            cells[-1][-1][1] += 1
        elif cells and cells[-1] and e["type"] == "decision":
            cells[-1][-1][2:] = [len(e.get("picks") or []), len(e.get("rejected") or [])]
    return [[(str(d), int(t), int(p), int(r)) for d, t, p, r in cell] for cell in cells]


@pytest.mark.slow
def test_every_number_on_the_view_is_the_clis_json(art):
    """The list page is the catalog `view --json` printed; each item's page shows the numbers of `evalkit report
    TARGET --json` and no others; the trajectory browser's counts are the trajectory file's."""
    from report_support import assert_page_is_the_model  # pyright: ignore[reportImplicitRelativeImport]

    with running_view_json(art["base"], art["home"]) as info:
        url, items = info["url"], info["items"]
        _, index = fetch(url)
        rows = re.findall(r'<tr data-kind="([^"]+)"><td>[^<]*</td><td><a href="/item/(\d+)">([^<]*)</a>', index)
        assert [(k, int(n), html.unescape(label)) for k, n, label in rows] == [
            (i["kind"], n, i["label"]) for n, i in enumerate(items)
        ]
        assert assert_page_is_the_model(index, info) == 0  # no counter of its own: every digit is the JSON line's
        for n, item in enumerate(items):
            _, page = fetch(f"{url}item/{n}")
            assert assert_page_is_the_model(page, _report_json(item)) > 10, item
        pit = next(n for n, i in enumerate(items) if i["kind"] == "pit")
        receipt = json.loads(art["pit"].read_text())["body"]
        _, traj = fetch(f"{url}item/{pit}/trajectory")
        shown_rows = re.findall(
            r'<a href="/item/\d+/trajectory/(\d+)/(\d+)">([^<]*)</a></td><td class=r>(\d+)</td><td class=r>(\d+)</td>'
            r"<td class=r>(\d+)</td>", traj)  # fmt: skip
        counted = _sessions_in(Path(receipt["trajectory"]["path"]))
        assert len(counted) == 10 and sum(len(c) for c in counted[:9]) == 9 * receipt["window"]["sessions"]
        assert [(int(c), int(s), d, int(t), int(p), int(r)) for c, s, d, t, p, r in shown_rows] == [
            (ci, si, *session) for ci, cell in enumerate(counted) for si, session in enumerate(cell)
        ]
        ci, si = 0, 0
        _, session = fetch(f"{url}item/{pit}/trajectory/{ci}/{si}")
        assert f"<p>{counted[ci][si][2]} picks accepted:" in session
