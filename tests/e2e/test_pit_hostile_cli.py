"""End to end, through real subprocesses: `evalkit run` against agents that try to end or swamp the run.

The seen examples of issue 29 (a pit_search of a million characters ended the run with a traceback and no
receipt; a flood of made-up row keys grew the trajectory past 2 GB), and their neighbours, named as
``module:function`` the way an untrusted agent is. Every run must print its table (never a traceback), write a
signed receipt that `evalkit verify` checks line for line, and keep the trajectory small.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

_AGENTS = """
import json
import marshal
import os


def long_query(prompt, tools):
    answer = tools.pit_search("a" * 1_000_000)
    assert answer["status"] == "error", answer
    tools.pit_search("(((((" * 2000)
    tools.pit_read("r" * 5_000_000)
    return [r["row_key"] for r in tools.pit_list(limit=2)["rows"]]


def flood(prompt, tools):
    return ["r%020x" % i for i in range(300_000)]


def huge_reply(prompt, tools):
    return "x" * 200_000


def raw(prompt, tools):
    def send(line):
        data = line.encode() + b"\\n"
        while data:
            data = data[os.write(4, data):]

    def read(n):
        buf = b""
        while len(buf) < n:
            chunk = os.read(3, n - len(buf))
            if not chunk:
                os._exit(0)
            buf += chunk
        return buf

    send('["tool","pit_list",{"limit":NaN,"form":"\\\\ud800"}]')
    marshal.loads(read(int.from_bytes(read(8), "little")))
    send('["tool","pit_search",{"query":"\\\\udfff","limit":' + "9" * 400 + '}]')
    marshal.loads(read(int.from_bytes(read(8), "little")))
    send('["reply",[NaN,"\\\\ud800"],"\\\\ud800"]')
    read(8)
    os._exit(0)
"""


def _env(cache: Path, agents: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update({"EVALKIT_CACHE_DIR": str(cache), "EVALKIT_HOME": str(cache.parent / "home"), "PYTHONPATH": str(agents)})
    return env


def _evalkit(*args: object, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "evalkit_cli", *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from evalkit_core._synth import write_synth_release

    base = tmp_path_factory.mktemp("e2e-hostile")
    rel = write_synth_release(base / "release", rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 17), seed=5)
    agents = base / "agents"
    agents.mkdir()
    (agents / "e2e_hostile_agents.py").write_text(textwrap.dedent(_AGENTS))
    return {"release": rel, "agents": agents, "cache": base / "cache"}


def _run(small: dict[str, Path], tmp_path: Path, agent: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    cfg = {"bundle_path": str(small["release"]), "forms": ["8-K"], "start": "2023-03-01", "end": "2023-03-08",
           "arms": ["main", "shifted"], "clocks": ["pit"], "probe_items": 2, "agent": f"e2e_hostile_agents:{agent}"}
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    env = _env(small["cache"], small["agents"])
    res = _evalkit("run", "--config", "run.json", cwd=tmp_path, env=env)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    assert (tmp_path / "receipt.json").is_file(), (res.stdout, res.stderr)
    ver = _evalkit("verify", "receipt.json", "--bundle", small["release"], "--config", "run.json", cwd=tmp_path, env=env)
    assert "MISMATCH" not in ver.stdout, ver.stdout
    assert ver.returncode == 0, ver.stdout + ver.stderr
    body = json.loads((tmp_path / "receipt.json").read_text())["body"]
    assert ver.stdout.splitlines()[-1] == f"run_valid {str(body['valid']).lower()} protocol_complete false"
    assert body["bounds"]["picks_per_session"] == 10_000
    return res, body


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "trajectory.jsonl").read_text().splitlines()]


def test_a_million_character_query_is_a_recorded_error_and_the_run_is_valid(small: dict[str, Path], tmp_path: Path) -> None:
    res, body = _run(small, tmp_path, "long_query")
    assert res.returncode == 0, res.stdout + res.stderr
    assert body["valid"] is True and body["completed"] is True
    searches = [e for e in _events(tmp_path) if e["type"] == "tool_call" and e["tool"] == "pit_search"]
    assert searches and all(e["result"]["status"] == "error" for e in searches)
    assert "query refused (string of 1000000 characters" in searches[0]["result"]["error"]
    assert (tmp_path / "trajectory.jsonl").stat().st_size < 300_000


def test_a_flood_of_made_up_keys_is_counted_and_the_trajectory_stays_small(small: dict[str, Path], tmp_path: Path) -> None:
    res, body = _run(small, tmp_path, "flood")
    assert res.returncode == 0, res.stdout + res.stderr
    for cell in body["cells"]:
        sessions = cell["sessions"]  # the window's; a served shifted cell's hidden days too
        assert sessions >= body["window"]["sessions"]
        assert cell["trades"] == 0
        assert cell["rejected_picks"]["unknown"] == sessions * 10_000
        assert cell["rejected_picks"]["over_limit"] == sessions * 290_000
    assert (tmp_path / "trajectory.jsonl").stat().st_size < 100_000  # was 2 GB in 45 s


def test_a_huge_reply_fails_its_cell_with_a_receipt_and_exit_1(small: dict[str, Path], tmp_path: Path) -> None:
    res, body = _run(small, tmp_path, "huge_reply")
    assert res.returncode == 1
    assert "valid=False" in res.stdout
    failed = [line for line in res.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and "main/pit" in failed[0] and "AgentLimit" in failed[0] and "100000" in failed[0], res.stdout
    assert body["agent_errors"][0]["error_type"] == "AgentLimit"


def test_a_raw_protocol_agent_sending_nan_and_surrogates_fails_its_cell_with_a_receipt(small: dict[str, Path], tmp_path: Path) -> None:
    res, body = _run(small, tmp_path, "raw")
    assert res.returncode == 1
    (err,) = body["agent_errors"]
    assert err["error_type"] == "AgentProtocolError"
    assert "lone surrogate" in err["message"]
    calls = [e for e in _events(tmp_path) if e["type"] == "tool_call"]
    assert [c["result"]["status"] for c in calls] == ["error", "error"]
    assert calls[0]["args"]["limit"] == {"refused": "number nan"}
