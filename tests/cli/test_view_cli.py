"""``evalkit view``: what it lists, the pages it serves (the report's, and the trajectory browser), that it only
reads, and its user errors."""

from __future__ import annotations

import hashlib
import html
import json
import re
import socket
import subprocess
import sys
import time
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
        # one row per run: the eval's results file is folded into the receipt that binds it
        assert kinds.count("pit") == 1 and kinds.count("campaign") == 1 and kinds.count("eval") == 1
        status, index = fetch(url)
        assert status == 200
        rows = {i["kind"]: i for i in _fetch_json(url + "index.json")[1]["items"]}
        receipt_of = {"pit": art["pit"], "eval": art["eval"],
                      "campaign": art["home"] / "campaigns" / "small" / "receipt.json"}  # fmt: skip
        for kind, row in rows.items():  # each row's date is its receipt's emitted_at; every run here is valid
            assert row["date"] == json.loads(receipt_of[kind].read_text())["emitted_at"], kind
            assert row["status"] == ("valid" if kind != "pit" or
                                     json.loads(art["pit"].read_text())["body"]["valid"] else "invalid"), kind
        assert rows["campaign"]["model"] == "sim/weak, sim/strong" and rows["campaign"]["score"] is not None
        assert rows["eval"]["score"] == json.loads(art["eval"].read_text())["body"]["summary"]["hidden_pass_rate"]
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
        rows = re.findall(r'<tr data-kind="([^"]+)" data-status="[^"]*"><td>[^<]*</td><td><a href="/item/(\d+)">([^<]*)</a>',
                          index)  # fmt: skip
        assert [(k, int(n), html.unescape(label)) for k, n, label in rows] == [
            (i["kind"], n, i["label"]) for n, i in enumerate(items)
        ]
        # the scores are the JSON line's (one per row that has one); every other digit is the JSON line's too
        assert assert_page_is_the_model(index, info) == sum(i["score"] is not None for i in items) >= 3
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
        # a cell runs the window's sessions; a served shifted cell its hidden days around them too
        served = (receipt.get("decoders") or {}).get("served") or {}
        window = receipt["window"]["sessions"]
        shifted = served.get("shifted_sessions", window)
        assert len(counted) == 10 and sum(len(c) for c in counted[:9]) == 6 * window + 3 * shifted
        assert [(int(c), int(s), d, int(t), int(p), int(r)) for c, s, d, t, p, r in shown_rows] == [
            (ci, si, *session) for ci, cell in enumerate(counted) for si, session in enumerate(cell)
        ]
        ci, si = 0, 0
        _, session = fetch(f"{url}item/{pit}/trajectory/{ci}/{si}")
        assert f"<p>{counted[ci][si][2]} picks accepted:" in session


def _fetch_json(url: str, host: str | None = None) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_index_has_one_row_per_run_with_status_score_and_date_and_follows_a_run_in_progress(tmp_path):
    """Runs of every status side by side: a valid eval (results folded into its receipt's row), an eval whose
    results were changed after signing (invalid), results without a receipt (unsigned), an eval in progress (its
    journal held by a writer) that then ends. /index.json follows it without a restart."""
    from evalkit import run_eval
    from evalkit.grading._eval_journal import Journal
    from evalkit_core import ensure_signing_key

    bank = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
    base = tmp_path / "runs"
    good = run_eval(bank, "reference", out=base / "good" / "results.jsonl", receipt=base / "good" / "receipt.json")
    bad = run_eval(bank, "reference", out=base / "bad" / "results.jsonl", receipt=base / "bad" / "receipt.json")
    assert bad.results_path is not None
    lines = bad.results_path.read_text().splitlines()
    flipped = json.loads(lines[0])
    flipped["hidden"]["passed"] = 0
    bad.results_path.write_text("\n".join([json.dumps(flipped), *lines[1:]]) + "\n")
    run_eval(bank, "reference", out=base / "bare" / "results.jsonl")
    journal = Journal(base / "live" / "results.jsonl.partial",
                      {"bank": "sha256:x", "settings": "sha256:y", "solver": {"name": "reference"}, "k": None,
                       "items": 4}, ensure_signing_key()[0])  # fmt: skip
    row = good.rollouts[0].to_json()
    journal.append("key-0", row)
    home = tmp_path / "home"
    home.mkdir()
    with running_view_json(base, home) as info:
        url = info["url"]
        status, index = _fetch_json(url + "index.json")
        assert status == 200
        rows = {Path(i["label"].split(": ", 1)[1]).parent.name: i for i in index["items"]}
        assert sorted(rows) == ["bad", "bare", "good", "live"]  # one row each: no results file listed twice
        assert rows["good"]["status"] == "valid" and rows["good"]["score"] == 1.0
        assert rows["good"]["date"] == json.loads((base / "good" / "receipt.json").read_text())["emitted_at"]
        assert rows["bad"]["status"] == "invalid"
        assert rows["bare"]["status"] == "unsigned" and rows["bare"]["kind"] == "eval"
        assert rows["live"]["status"] == "in progress" and rows["live"]["detail"] == "1 of 4 verdicts"
        assert rows["live"]["model"] == "reference"
        assert index["in_progress"] is True
        _, page = fetch(url)
        assert 'data-live="1"' in page and "refreshing every 2 s" in page
        assert page.count("<tr data-kind=") == 4
        # the run moves on, then is interrupted (its writer lets go): the index follows without a restart
        journal.append("key-1", row)
        time.sleep(1.1)  # the catalog is scanned again at most once a second
        _, index = _fetch_json(url + "index.json")
        live = next(i for i in index["items"] if "/live/" in i["label"])
        assert live["detail"] == "2 of 4 verdicts"
        journal.close()
        time.sleep(1.1)
        _, index = _fetch_json(url + "index.json")
        live = next(i for i in index["items"] if "/live/" in i["label"])
        assert live["status"] == "interrupted" and index["in_progress"] is False
        # a page of another site that re-points its name at 127.0.0.1 (DNS rebinding) is refused
        port = url.rsplit(":", 1)[1].strip("/")
        for host in (f"evil.example:{port}", "127.0.0.1", f"127.0.0.1.evil.example:{port}", f"localhost:{port}0"):
            assert _fetch_json(url + "index.json", host=host)[0] == 403, host
        assert _fetch_json(url + "index.json", host=f"localhost:{port}")[0] == 200
        with socket.create_connection(("127.0.0.1", int(port)), timeout=30) as raw:  # no Host header at all
            raw.sendall(b"GET /index.json HTTP/1.0\r\n\r\n")
            assert raw.recv(64).startswith(b"HTTP/1.0 403")
        assert fetch(url + "index.json", method="POST")[0] == 405


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "::", "example.org"])
def test_the_view_listens_on_loopback_only(tmp_path, host):
    result = subprocess.run([sys.executable, "-c", "from evalkit_cli import main; main()", "view", str(tmp_path),
                             "--host", host, "--port", "0"], capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --host {host}: the view serves this machine only (expected one of 127.0.0.1, ::1, localhost)"
    ]
