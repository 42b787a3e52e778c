"""Agents: the stub, the two adapters, agent specs, and an agent that raises.

Agents run in their own jailed process (a fresh one per cell): a closure travels there by value, so what it
changes in what it closes over stays there. These tests observe agents through the trajectory and their replies.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit.pit import (
    AgentReply,
    AgentSpecError,
    RunConfig,
    from_callable,
    from_tool_loop,
    resolve_agent,
    run,
    stub_agent,
)
from evalkit_core import ConfigError, read_receipt


def _cfg(release_dir, **kw) -> RunConfig:
    base = {"bundle_path": str(release_dir), "forms": ("8-K",), "start": "2023-03-01", "end": "2023-03-10"}
    return RunConfig(**{**base, **kw})


def test_agent_that_raises_is_recorded_and_the_run_is_invalid(synth_release_dir, in_tmp, events_of):
    calls = {"n": 0}

    def flaky(prompt, tools):
        calls["n"] += 1
        tools.pit_list(limit=2)
        if calls["n"] == 3:
            raise ValueError("boom at the third bell")
        return []

    result = run(from_callable(flaky, name="flaky"), _cfg(synth_release_dir))
    body = result.body
    assert calls["n"] == 0  # the agent ran in its jail, with its own copy of `calls`
    assert body["valid"] is False
    assert body["invalidated_by"] == ["agent_error"]
    assert body["completed"] is False
    assert body["agent_errors"] == [
        {"error_type": "ValueError", "message": "boom at the third bell", "raised_by": "agent", "arm": "main",
         "clock": "leaky", "session_date": "2023-03-03"}
    ]
    # The trajectory is kept, with every event up to the error, and the receipt binds it.
    assert result.trajectory_path.is_file()
    assert result.receipt_path.is_file()
    events = events_of(result.trajectory_path)
    types = [e["type"] for e in events]
    assert types.count("agent_call") == 3
    assert types.count("tool_call") == 3
    assert types.count("decision") == 2
    err = next(e for e in events if e["type"] == "agent_error")
    assert err["message"] == "boom at the third bell"
    assert types[-1] == "run_end"
    assert events[-1]["valid"] is False
    assert read_receipt(result.receipt_path)["body"]["valid"] is False
    from evalkit_core import file_digest

    assert body["binding"]["trajectory_sha256"] == file_digest(result.trajectory_path)


def test_agent_returning_garbage_is_an_agent_error(synth_release_dir, in_tmp):
    result = run(from_callable(lambda p, t: {"picks": []}), _cfg(synth_release_dir))
    assert result.body["valid"] is False
    assert result.body["agent_errors"][0]["error_type"] == "TypeError"


def test_stub_picks_exactly_the_rows_entering_at_each_bell(synth_release_dir, synth_release, in_tmp, events_of):
    result = run(stub_agent, _cfg(synth_release_dir, arms=("main",), probe_items=3))
    decisions = [e for e in events_of(result.trajectory_path) if e["type"] == "decision"]
    from evalkit_core import entry_session

    # The run holds the 8-K rows whose partition_date lies in the window.
    main = synth_release.select(forms=["8-K"], start="2023-03-01", end="2023-03-10").arm("main")
    for clock in ("leaky", "dump", "pit"):
        want: dict[str, set[str]] = {}
        for r in main.iter_rows(named=True):
            d = entry_session(r, clock).date.isoformat()
            want.setdefault(d, set()).add(r["row_key"])
        for dec in (d for d in decisions if d["clock"] == clock):
            assert set(dec["picks"]) == want.get(dec["session_date"], set())
            assert dec["rejected"] == []
            assert dec["text"] == (
                f"I am the evalkit stub agent and this answer was written at the session of {dec['session_date']}."
            )


def test_stub_pages_through_more_than_one_page_of_fresh_rows(synth_release_dir, in_tmp):
    """Form 4 under the leaky clock: far more than 100 rows enter at some bells."""
    result = run(stub_agent, _cfg(synth_release_dir, forms=("4",), arms=("main",), clocks=("leaky",), probe_items=0))
    cell = result.cell("main", "leaky")
    from evalkit_core import Release

    main = Release.load(synth_release_dir, forms=["4"], start="2023-03-01", end="2023-03-10").arm("main")
    assert cell["trades"] == main.height  # every row's leaky entry session lies inside the window


def test_tool_loop_adapter_runs_calls_and_submits(synth_release_dir, in_tmp, events_of):
    def step(messages, tool_specs):
        names = ",".join(s["function"]["name"] for s in tool_specs)
        assert messages[0]["role"] == "user"
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        if not tool_msgs:
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "pit_list", "arguments": json.dumps({"limit": 2})}},
                {"id": "c2", "type": "function", "function": {"name": "pit_coverage", "arguments": "{}"}},
            ]}
        listing = json.loads(tool_msgs[0]["content"])
        keys = [r["row_key"] for r in listing["rows"]]
        return {
            "role": "assistant",
            "content": f"buying; tools {names}",
            "tool_calls": [
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "submit", "arguments": json.dumps({"row_keys": keys})},
                }
            ],
        }

    result = run(
        from_tool_loop(step, name="scripted"),
        _cfg(synth_release_dir, arms=("main",), clocks=("pit",), probe_items=0),
    )
    assert result.body["valid"] is True
    events = events_of(result.trajectory_path)
    tools_called = [e["tool"] for e in events if e["type"] == "tool_call"]
    assert tools_called == ["pit_list", "pit_coverage"] * 8
    decisions = [e for e in events if e["type"] == "decision"]
    listed = [e for e in events if e["type"] == "tool_call" and e["tool"] == "pit_list"]
    for dec, lst in zip(decisions, listed, strict=True):
        want = [r["row_key"] for r in lst["result"]["rows"]]
        assert dec["picks"] == want
        assert dec["text"] == "buying; tools pit_list,pit_search,pit_read,pit_coverage,submit"
    assert result.cell("main", "pit")["trades"] == sum(len(d["picks"]) for d in decisions) > 0


def test_tool_loop_plain_content_ends_with_text_and_bad_arguments_are_answered(
    synth_release_dir, in_tmp, events_of
):
    def step(messages, tool_specs):
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        if not tool_msgs:
            return {
                "role": "assistant",
                "tool_calls": [
                    {"id": "x", "function": {"name": "pit_list", "arguments": "{not json"}},
                    {"id": "y", "function": {"name": "pit_nope", "arguments": "{}"}},
                    {"id": "z", "function": {"name": "pit_read", "arguments": "[1, 2]"}},
                ],
            }
        replies = ",".join(json.loads(m["content"])["status"] for m in tool_msgs)
        return {"role": "assistant", "content": f"nothing today ({replies})"}

    result = run(from_tool_loop(step), _cfg(synth_release_dir, arms=("main",), clocks=("pit",), end="2023-03-01",
                                            probe_items=0))
    assert result.body["valid"] is True
    dec = next(e for e in events_of(result.trajectory_path) if e["type"] == "decision")
    assert dec["picks"] == []
    assert dec["text"] == "nothing today (error,error,error)"


def test_tool_loop_stops_after_max_turns(synth_release_dir, in_tmp, events_of):
    def step(messages, tool_specs):
        return {
            "role": "assistant",
            "tool_calls": [{"id": "a", "function": {"name": "pit_coverage", "arguments": "{}"}}],
        }

    result = run(
        from_tool_loop(step, max_turns=4),
        _cfg(synth_release_dir, arms=("main",), clocks=("pit",), end="2023-03-01", probe_items=0),
    )
    assert result.body["valid"] is True
    events = events_of(result.trajectory_path)
    assert [e["tool"] for e in events if e["type"] == "tool_call"] == ["pit_coverage"] * 4
    assert [e["text"] for e in events if e["type"] == "decision"] == [
        "tool loop ended after 4 turns without submit"
    ]


def test_from_callable_coerces_replies(synth_release_dir, in_tmp, events_of):
    def texty(prompt, tools):
        return "I would rather not."

    def replying(prompt, tools):
        return AgentReply(picks=(), text="explicit")

    for fn, text in ((texty, "I would rather not."), (replying, "explicit"), (lambda p, t: None, None)):
        result = run(from_callable(fn), _cfg(synth_release_dir, arms=("main",), clocks=("pit",), end="2023-03-01",
                                             probe_items=0))
        dec = next(e for e in events_of(result.trajectory_path) if e["type"] == "decision")
        assert dec["text"] == text
        assert dec["picks"] == []


# --- agent specs ------------------------------------------------------------------------------------------------


def test_resolve_agent_specs(tmp_path, monkeypatch, synth_release_dir, in_tmp):
    mod = tmp_path / "pit_spec_agents_mod.py"
    mod.write_text(textwrap.dedent("""
        def pick_nothing(prompt, tools):
            return []
        class Holder:
            @staticmethod
            def agent(prompt, tools):
                return "hi"
        NOT_CALLABLE = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resolve_agent("stub") is stub_agent
    assert resolve_agent("pit_spec_agents_mod:pick_nothing").name == "plain:pit_spec_agents_mod:pick_nothing"
    assert callable(resolve_agent("pit_spec_agents_mod:Holder.agent"))
    # resolving never imports the agent's module in this process: only the jailed process does
    assert "pit_spec_agents_mod" not in sys.modules
    with pytest.raises(AgentSpecError, match="cannot import"):
        resolve_agent("no_such_module_xyz:agent")
    # what only importing can tell is told when the run starts, before anything is written
    cfg = _cfg(synth_release_dir, arms=("main",), clocks=("pit",), end="2023-03-01", probe_items=0)
    with pytest.raises(AgentSpecError, match="no attribute 'missing'"):
        run(resolve_agent("pit_spec_agents_mod:missing"), cfg)
    with pytest.raises(AgentSpecError, match="not callable"):
        run(resolve_agent("pit_spec_agents_mod:NOT_CALLABLE"), cfg)
    assert not (in_tmp / "receipt.json").exists()
    result = run(resolve_agent("pit_spec_agents_mod:Holder.agent"), cfg)
    assert result.body["valid"] is True
    assert "pit_spec_agents_mod" not in sys.modules
    for bad in ("nocolon", ":fn", "mod:"):
        with pytest.raises(ConfigError, match="agent"):
            resolve_agent(bad)


def test_failed_agent_run_writes_an_invalid_receipt_only(synth_release_dir, in_tmp):
    """A receipt exists after an agent error, and it never claims validity."""

    def broken(prompt, tools):
        raise RuntimeError("nope")

    result = run(from_callable(broken), _cfg(synth_release_dir))
    on_disk = json.loads(Path(result.receipt_path).read_text())
    assert on_disk["body"]["valid"] is False
    assert on_disk["body"]["cells"] == []
