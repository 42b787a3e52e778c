"""Whole runs against agents that try to end or swamp them (issue 29, item 5; seen examples 6 and 7).

Each agent runs in its jail like any other. Some speak the pipe protocol by hand (they write raw JSON lines to the
harness and read its answers), so they can send what the adapters never would: NaN, lone surrogates as JSON
escapes, integers of hundreds of digits, a query of a million characters. Every run here must end with its
trajectory and its signed receipt written, the failure (if any) recorded as its cell's with the cause, the
trajectory bounded, and ``verify`` agreeing with the receipt line for line (the replay re-serves every recorded
call). No run may raise.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunBounds, RunConfig, from_callable, run, verify_pit_receipt
from evalkit_core import ConfigError, Release

RUN_START, RUN_END = "2023-03-01", "2023-03-10"  # 8 sessions
_SESSIONS = 8


def _config(release_dir: Path, out: Path, **kw: Any) -> RunConfig:
    return RunConfig(
        bundle_path=str(release_dir),
        forms=("8-K",),
        start=RUN_START,
        end=RUN_END,
        arms=kw.pop("arms", ("main",)),
        clocks=kw.pop("clocks", ("pit",)),
        probe_items=kw.pop("probe_items", 0),
        trajectory_path=str(out / "t.jsonl"),
        receipt_path=str(out / "r.json"),
        **kw,
    )


def _run(release_dir: Path, out: Path, agent: Callable[..., Any], bounds: RunBounds | None = None, **kw: Any) -> dict[str, Any]:
    cfg = _config(release_dir, out, **kw)
    result = run(from_callable(agent), cfg, Release.load(release_dir), None, bounds=bounds)
    assert result.receipt_path.is_file() and result.trajectory_path.is_file()
    checks = verify_pit_receipt(result.receipt_path, trajectory=result.trajectory_path, bundle=release_dir)
    bad = [(c.name, c.detail) for c in checks if c.status == "MISMATCH"]
    assert not bad, bad
    return result.body


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "t.jsonl").read_text().splitlines()]


def _raw_agent(tool_lines: list[str], reply_line: str) -> Callable[..., Any]:
    """An agent that speaks the protocol by hand: each session it writes ``tool_lines`` (raw JSON, one message each)
    and reads each answer, then writes ``reply_line`` and waits for the next session itself (it never returns)."""

    def agent(prompt: str, tools: Any) -> Any:
        import marshal
        import os

        def send(line: str) -> None:
            data = line.encode() + b"\n"
            while data:
                data = data[os.write(4, data) :]

        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = os.read(3, min(n - len(buf), 1 << 20))
                if not chunk:
                    os._exit(0)
                buf += chunk
            return buf

        def frame() -> Any:
            return marshal.loads(read(int.from_bytes(read(8), "little")))

        while True:
            answers = []
            for line in tool_lines:
                send(line)
                answers.append(frame())
            send(reply_line)
            if frame()[0] != "session":
                os._exit(0)

    return agent


def _tool(name: str, args: str) -> str:
    return '["tool",' + json.dumps(name) + "," + args + "]"


_HOSTILE_CALLS = [
    _tool("pit_search", json.dumps({"query": "a" * 1_000_000})),  # the seen example 6
    _tool("pit_search", json.dumps({"query": "(" * 50_000 + ".*"})),
    _tool("pit_search", '{"query":"\\ud800acme","limit":5}'),
    _tool("pit_search", '{"query":"\\u0000","limit":NaN}'),
    _tool("pit_search", '{"query":"acme","limit":' + "9" * 4000 + "}"),
    _tool("pit_list", '{"limit":Infinity,"offset":-Infinity}'),
    _tool("pit_list", '{"limit":5.0,"offset":1e400,"form":"\\udfff"}'),
    _tool("pit_list", '{"limit":-5,"form":' + json.dumps(["8-K"] * 100_000) + "}"),
    _tool("pit_list", '{"limit":3,"offset":' + "1" * 300 + "}"),
    _tool("pit_read", '{"row_key":"\\ud83d"}'),
    _tool("pit_read", '{"row_key":' + "[" * 200 + "]" * 200 + "}"),
    _tool("pit_read", json.dumps({"row_key": "r" * 3_000_000})),
    _tool("pit_coverage", '{"x":NaN}'),
    _tool("\\ud800" * 10, "{}"),
    _tool("x" * 100_000, '{"a":NaN}'),
    _tool("pit_list", '{"limit":2}'),
]


def test_hostile_tool_calls_are_each_a_recorded_error_and_the_run_completes(synth_release_dir: Path, tmp_path: Path) -> None:
    body = _run(synth_release_dir, tmp_path, _raw_agent(_HOSTILE_CALLS, '["reply",[],"done"]'))
    assert body["valid"] is True
    assert body["completed"] is True
    calls = [e for e in _events(tmp_path) if e["type"] == "tool_call"]
    assert len(calls) == _SESSIONS * len(_HOSTILE_CALLS)
    per_session = [c["result"]["status"] for c in calls[: len(_HOSTILE_CALLS)]]
    # pit_coverage takes no arguments (whatever is sent is not read); the honest call after them all is answered
    want = ["ok" if ('"pit_coverage"' in c or c == _HOSTILE_CALLS[-1]) else "error" for c in _HOSTILE_CALLS]
    assert per_session == want
    assert "1000000 characters" in calls[0]["result"]["error"]
    # the trajectory holds descriptions of what was sent, not what was sent
    assert (tmp_path / "t.jsonl").stat().st_size < 400_000


def _flood(picks: Any, text: Any = "flood") -> Callable[..., Any]:
    def agent(prompt: str, tools: Any) -> Any:
        from evalkit.pit import AgentReply

        listed = tools.pit_list(limit=3)["rows"]
        real = [r["row_key"] for r in listed]
        return AgentReply(picks=[*real, *picks], text=text)

    return agent


@pytest.mark.parametrize(
    ("picks", "reason", "n"),
    [
        ([f"r{i:020x}" for i in range(300_000)], "unknown", 300_000),  # the seen example 7
        (["x" * 2_000_000], "unknown", 1),
        (["r" + "0" * 20] * 50_000, "unknown", 50_000),
        ([1, None, True, 2.5, [[["deep"]]], {"k": [1, 2]}] * 5000, "unknown", 30_000),
    ],
    ids=["made-up-keys", "huge-key", "one-fake-repeated", "not-strings"],
)
def test_a_pick_flood_is_refused_as_counts_and_the_trajectory_stays_small(
    synth_release_dir: Path, tmp_path: Path, picks: list[Any], reason: str, n: int
) -> None:
    bounds = RunBounds(picks_per_session=1000)
    body = _run(synth_release_dir, tmp_path, _flood(picks), bounds)
    assert body["valid"] is True
    assert body["bounds"]["picks_per_session"] == 1000
    (cell,) = body["cells"]
    rejected = cell["rejected_picks"]
    decisions = [e for e in _events(tmp_path) if e["type"] == "decision"]
    real = [len(e["picks"]) for e in decisions]  # the real rows listed first (fewer on the window's first days)
    assert len(real) == _SESSIONS and all(0 < r <= 3 for r in real)
    assert rejected[reason] == sum(min(n, 1000 - r) for r in real)
    assert rejected.get("over_limit", 0) == sum(n - min(n, 1000 - r) for r in real)
    assert cell["trades"] == sum(real)
    assert rejected["duplicate"] == rejected["not_yet_knowable"] == 0
    for e in decisions:
        assert len(e["rejected"]) <= 20
        assert len(json.dumps(e)) < 10_000
    assert (tmp_path / "t.jsonl").stat().st_size < 200_000


def test_duplicates_of_a_real_key_are_counted_as_duplicates(synth_release_dir: Path, tmp_path: Path) -> None:
    def agent(prompt: str, tools: Any) -> Any:
        rows = tools.pit_list(limit=1)["rows"]
        return [rows[0]["row_key"]] * 100_000 if rows else []

    body = _run(synth_release_dir, tmp_path, agent)
    (cell,) = body["cells"]
    assert cell["trades"] == _SESSIONS
    assert cell["rejected_picks"]["duplicate"] == _SESSIONS * (10_000 - 1)
    assert cell["rejected_picks"]["over_limit"] == _SESSIONS * 90_000
    assert cell["rejected_picks"]["unknown"] == 0


@pytest.mark.parametrize(
    ("reply", "error_type", "fragment"),
    [
        ('["reply",[],"' + "t" * 200_000 + '"]', "AgentLimit", "200000 characters"),
        ('["reply",[],"\\ud800 lone"]', "AgentProtocolError", "lone surrogate"),
        ('["reply",[NaN, Infinity, "\\udfff", ' + "9" * 1000 + "],null]", None, None),
        ('["error","\\ud800Boom","message \\udfff ' + "m" * 10_000 + '"]', "\ufffdBoom", "message \ufffd"),
        ('["reply",[],' + json.dumps("z" * 9_000_000) + "]", "AgentProtocolError", "8388608 bytes"),
    ],
    ids=["huge-text", "surrogate-text", "odd-picks", "surrogate-error", "oversized-message"],
)
def test_a_hostile_reply_fails_its_cell_with_the_cause_and_a_receipt(
    synth_release_dir: Path, tmp_path: Path, reply: str, error_type: str | None, fragment: str | None
) -> None:
    body = _run(synth_release_dir, tmp_path, _raw_agent([], reply), RunBounds(reply_chars=100_000))
    if error_type is None:  # odd picks in a raw reply: refused as unknown, the run goes on
        assert body["valid"] is True
        assert body["cells"][0]["rejected_picks"]["unknown"] == 4 * _SESSIONS
        return
    assert body["valid"] is False
    assert body["completed"] is False
    assert body["invalidated_by"] == ["agent_error"]
    (err,) = body["agent_errors"]
    assert err["error_type"] == error_type
    assert fragment in err["message"]
    assert len(err["message"]) <= 2000
    assert (tmp_path / "t.jsonl").stat().st_size < 20_000


def test_trajectory_growth_past_the_cell_bound_fails_the_cell(synth_release_dir: Path, tmp_path: Path) -> None:
    def agent(prompt: str, tools: Any) -> Any:
        for _ in range(10_000):
            tools.pit_list(limit=200)
        return []

    bound = 300_000
    body = _run(synth_release_dir, tmp_path, agent, RunBounds(trajectory_cell_bytes=bound), arms=("main", "redacted"))
    assert body["valid"] is False
    (err,) = body["agent_errors"]
    assert err["error_type"] == "TrajectoryLimit"
    assert err["arm"] == "main"
    assert str(bound) in err["message"]
    assert (tmp_path / "t.jsonl").stat().st_size < bound + 5_000
    assert body["cells"] == []  # the cell did not finish, and the run stopped there


def test_trajectory_growth_past_the_run_bound_fails_the_cell_it_happens_in(synth_release_dir: Path, tmp_path: Path) -> None:
    def agent(prompt: str, tools: Any) -> Any:
        tools.pit_list(limit=2)
        return []

    body = _run(
        synth_release_dir,
        tmp_path,
        agent,
        RunBounds(trajectory_cell_bytes=10**9, trajectory_run_bytes=40_000),
        arms=("main", "redacted", "shifted"),
        clocks=("dump", "pit"),
    )
    assert body["valid"] is False
    (err,) = body["agent_errors"]
    assert err["error_type"] == "TrajectoryLimit"
    assert "run's trajectory" in err["message"]
    assert 0 < len(body["cells"]) < 6
    assert (tmp_path / "t.jsonl").stat().st_size < 40_000 + 5_000


@pytest.mark.parametrize(
    "error",
    [
        KeyError("boom " + "x" * 100_000),
        RecursionError("boom"),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "boom surrogates not allowed"),
        OverflowError("boom"),
        ConfigError("boom: a harness ConfigError once the agent runs is the cell's, not the caller's"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_harness_failure_on_agent_input_is_the_cells_recorded_error(
    synth_release_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """By construction: an exception the harness's own code raises while handling what the agent sent (here the
    decision code, broken on purpose for one pick) is its cell's failure, with the type and a bounded message."""
    import evalkit.pit._runner as runner

    real = runner.decide

    def broken(picks: Any, *args: Any) -> Any:
        if "boom" in picks:
            raise error
        return real(picks, *args)

    monkeypatch.setattr(runner, "decide", broken)

    def agent(prompt: str, tools: Any) -> list[str]:
        return ["boom"] if "2023-03-06" in prompt else []

    cfg = _config(synth_release_dir, tmp_path)
    result = run(from_callable(agent), cfg, Release.load(synth_release_dir), None)
    body = result.body
    assert body["valid"] is False
    (err,) = body["agent_errors"]
    assert err["error_type"] == "HarnessError"
    assert err["message"].startswith(f"the harness failed on this agent's input: {type(error).__name__}: ")
    assert len(err["message"]) <= 2000
    assert err["session_date"] == "2023-03-06"
    assert json.loads((tmp_path / "r.json").read_text())["body"]["agent_errors"] == body["agent_errors"]


def test_a_probe_answer_past_the_bound_fails_the_probe_with_a_receipt(synth_release_dir: Path, tmp_path: Path) -> None:
    def agent(prompt: str, tools: Any) -> Any:
        if "real filing date" in prompt:
            return "x" * 150_000
        tools.pit_list(limit=5)
        return []

    body = _run(synth_release_dir, tmp_path, agent, RunBounds(reply_chars=100_000), arms=("shifted",), probe_items=3)
    assert body["valid"] is False
    (err,) = body["agent_errors"]
    assert err["error_type"] == "AgentLimit"
    assert err["probe_item"] == 0
    assert len(body["cells"]) == 1  # the cell finished; the probe failed
    # no probe verdict: the masks are unproven, unless one of the harness's own decoders broke them
    assert body["masks"] == ("leak" if body["decoders"]["broken_by"] else "unproven")


def test_honest_agent_runs_and_verifies_under_tight_bounds(synth_release_dir: Path, tmp_path: Path) -> None:
    """Bounds do not get in an honest agent's way: a few calls and picks per session, well inside them."""

    def agent(prompt: str, tools: Any) -> list[str]:
        rows = tools.pit_list(limit=5)["rows"]
        tools.pit_search("inc")
        return [r["row_key"] for r in rows[:2]]

    body = _run(
        synth_release_dir, tmp_path, agent, RunBounds(picks_per_session=10, trajectory_cell_bytes=2_000_000), arms=("main", "shifted"), probe_items=2
    )
    assert body["valid"] is True
    assert body["completed"] is True
    assert all(c["rejected_picks"] == {"unknown": 0, "not_yet_knowable": 0, "duplicate": 0} for c in body["cells"])


def test_a_flood_of_egress_reports_is_bounded(synth_release_dir: Path, tmp_path: Path) -> None:
    """Under policy ``continue`` every reported attempt is recorded (and listed in the receipt); past the bound the
    cell fails. The reports are written by hand (no socket is made), with targets the host cannot encode."""
    egress = '["egress","connect","\\ud800' + "h" * 5000 + '","\\udfff:1"]'

    def flooder(prompt: str, tools: Any) -> Any:
        import os

        for _ in range(50):
            data = (egress + "\n").encode()
            while data:
                data = data[os.write(4, data) :]
        return []

    body = _run(synth_release_dir, tmp_path, flooder, RunBounds(egress_events=10), network_policy="continue")
    assert body["valid"] is False
    assert body["network"]["egress_attempts"] == 10
    assert body["agent_errors"][0]["error_type"] == "AgentLimit"
    assert "more than 10 network attempts" in body["agent_errors"][0]["message"]
    for attempt in body["network"]["attempts"]:
        assert attempt["target"].startswith("\ufffd") and len(attempt["target"]) <= 1000


def test_hostile_model_requests_are_the_calls_errors(synth_release_dir: Path, tmp_path: Path) -> None:
    valid = '{"messages":[{"role":"user","text":"hi"}],"max_tokens":5}'
    calls = [
        '["complete","' + "m" * 1000 + '",' + valid + "]",
        '["complete","\\ud800",' + valid + "]",
        '["complete","m",{"messages":5}]',
        '["complete","m",{"messages":[],"max_tokens":5,"sim_context":5}]',
        '["complete","m",{"messages":[{"role":"user","text":"hi"}],"max_tokens":5,"sim_context":7}]',
        '["complete","m",{"messages":[{"role":"user","text":"\\ud800"}],"max_tokens":5}]',
    ]
    body = _run(synth_release_dir, tmp_path, _raw_agent(calls, '["reply",[],null]'))
    assert body["valid"] is True and body["completed"] is True
    requests = [e for e in _events(tmp_path) if e["type"] == "model_request"]
    refused = [e for e in requests if "refused" in e]
    assert len(refused) == 3 * _SESSIONS  # the long id, the surrogate id, the surrogate text
    assert all(len(json.dumps(e)) < 3000 for e in requests)


def test_verify_names_a_forged_count_of_omitted_refusals(synth_release_dir: Path, tmp_path: Path) -> None:
    body = _run(synth_release_dir, tmp_path, _flood(["nope"] * 100), RunBounds(picks_per_session=50))
    assert body["cells"][0]["rejected_picks"]["over_limit"] > 0
    out: list[str] = []
    for line in (tmp_path / "t.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "decision":
            event["rejected_omitted"] = {"made_up": 5}
        out.append(json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    (tmp_path / "forged.jsonl").write_text("\n".join(out) + "\n")
    checks = verify_pit_receipt(tmp_path / "r.json", trajectory=tmp_path / "forged.jsonl", bundle=synth_release_dir)
    mismatches = [c.detail for c in checks if c.status == "MISMATCH"]
    assert any("rejected_omitted is not a count of refusals by reason" in d for d in mismatches), mismatches


def test_the_schema_takes_a_body_with_bounds_and_one_without(synth_release_dir: Path, tmp_path: Path) -> None:
    import jsonschema

    from evalkit.pit import receipt_schema

    body = _run(synth_release_dir, tmp_path, lambda prompt, tools: [])
    validator = jsonschema.Draft202012Validator(receipt_schema())
    assert not list(validator.iter_errors(body))
    assert body["bounds"] == RunBounds().to_json()
    old = {k: v for k, v in body.items() if k != "bounds"}  # a receipt written before the bounds existed
    assert not list(validator.iter_errors(old))
    for change in ({"picks_per_session": 0}, {"reply_chars": "many"}, {"made_up": 1}):
        assert list(validator.iter_errors({**body, "bounds": {**body["bounds"], **change}})), change
    missing = {k: v for k, v in body["bounds"].items() if k != "trajectory_run_bytes"}
    assert list(validator.iter_errors({**body, "bounds": missing}))
