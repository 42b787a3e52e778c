"""Property: whatever an agent does, the run ends with its trajectory and receipt written, within its bounds, and
``verify`` agrees with the receipt.

The jail is replaced by a fake one whose agent process plays a generated script inside this process (the wall is
not what is tested here: the harness's handling of what comes through it is). A script's sessions call tools with
any JSON value (NaN, lone surrogates, integers of hundreds of digits, deep and wide containers), report network
attempts with text the host cannot encode, fail with such text, or reply with picks of any type and text of any
size. The real jail delivers exactly these values (it parses the agent's JSON lines), so what holds here holds for
any agent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evalkit.pit._runner as runner
from evalkit.pit import RunBounds, RunConfig, from_callable, run, verify_pit_receipt
from evalkit.pit._agents import AgentReply
from evalkit.pit._guard import EgressAttempt
from evalkit.pit._jail import AgentError, AgentLimits, AgentWall
from evalkit_core import Release

_text = st.lists(st.integers(0, 0x10FFFF), max_size=12).map(lambda cps: "".join(map(chr, cps))) | st.sampled_from(
    ["a" * 2000, "\ud800", "r" + "0" * 20, "acme", "8-K", "\x00", "(.*"]
)
_leaf = st.none() | st.booleans() | st.integers(-(10**400), 10**400) | st.floats() | _text
_value = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4), max_leaves=12)
_call = st.tuples(
    st.sampled_from(["pit_list", "pit_search", "pit_read", "pit_coverage"]) | _text,
    st.dictionaries(st.sampled_from(["limit", "offset", "form", "query", "row_key"]) | _text, _value, max_size=4),
)


@attrs.frozen
class Step:
    calls: tuple[tuple[Any, Any], ...] = ()
    egress: tuple[tuple[str, str | None, str | None], ...] = ()
    error: tuple[str, str] | None = None
    picks: tuple[Any, ...] = ()
    text: Any = None
    real_picks: int = 0


_step = st.builds(
    Step,
    calls=st.lists(_call, max_size=4).map(tuple),
    egress=st.lists(st.tuples(_text, _text | st.none(), _text | st.none()), max_size=2).map(tuple),
    error=st.none() | st.none() | st.tuples(_text, _text),
    picks=st.lists(_value, max_size=6).map(tuple)
    | st.sampled_from([("x" * 100_000,), tuple(f"k{i}" for i in range(3000)), (["nested"] * 2000,)]),
    text=st.none() | _text | st.sampled_from(["t" * 200, "\udfff text", 5, ["x"]]),
    real_picks=st.integers(0, 3),
)


class _FakeProcess:
    def __init__(self, steps: Iterator[Step]) -> None:
        self.steps = steps

    def session(self, prompt: str, toolbox: Any, on_egress: Callable[[EgressAttempt], None], after: Callable[[], None]) -> AgentReply:
        step = next(self.steps, Step())
        for name, args in step.calls:
            toolbox.call(name, args)
            after()
        real = [r["row_key"] for r in toolbox.call("pit_list", {"limit": 3})["rows"]][: step.real_picks]
        after()
        for kind, target, site in step.egress:
            on_egress(EgressAttempt(kind, target, site))
        if step.error is not None:
            raise AgentError(*step.error)
        return AgentReply(picks=(*real, *step.picks), text=step.text)

    def close(self) -> None:
        pass


class _FakeJail:
    """What the runner uses of AgentJail, with processes that play the script."""

    script: list[Step] = []  # set per example

    def __init__(self, recipe: Any, *, network_policy: str, limits: AgentLimits | None = None) -> None:
        self.limits = limits or AgentLimits()
        self.wall = AgentWall("fake", "fake", "fake", "fake", "fake network (a test)", full=False, own_network_namespace=False, weaker=("a test",))
        self.agent_seconds = self.start_seconds = self.spawn_seconds = 0.0
        self.processes = 0
        self._steps = iter(type(self).script)

    def start_background(self) -> None:
        pass

    def ready(self) -> None:
        pass

    def process(self) -> _FakeProcess:
        self.processes += 1
        return _FakeProcess(self._steps)

    def close(self) -> None:
        pass


def _honest(prompt: str, tools: Any) -> list[str]:
    return []


@pytest.fixture
def fake_jail(monkeypatch: pytest.MonkeyPatch) -> type[_FakeJail]:
    monkeypatch.setattr(runner, "AgentJail", _FakeJail)
    return _FakeJail


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(script=st.lists(_step, min_size=1, max_size=9), policy=st.sampled_from(["abort", "continue"]))
def test_property_any_agent_behaviour_ends_in_a_receipt_that_verifies(
    fake_jail: type[_FakeJail], synth_release_dir: Path, tmp_path_factory: pytest.TempPathFactory, script: list[Step], policy: str
) -> None:
    out = tmp_path_factory.mktemp("prop")
    fake_jail.script = script
    cfg = RunConfig(
        bundle_path=str(synth_release_dir),
        forms=("8-K",),
        start="2023-03-01",
        end="2023-03-03",
        arms=("main", "shifted"),
        clocks=("pit",),
        probe_items=1,
        network_policy=policy,
        trajectory_path=str(out / "t.jsonl"),
        receipt_path=str(out / "r.json"),
    )
    bounds = RunBounds(picks_per_session=1000, reply_chars=1000, trajectory_cell_bytes=200_000, trajectory_run_bytes=300_000, egress_events=3)
    result = run(from_callable(_honest), cfg, Release.load(synth_release_dir), None, bounds=bounds)
    body = json.loads((out / "r.json").read_text())["body"]
    assert body == result.body
    assert (out / "t.jsonl").stat().st_size <= 300_000 + 10_000
    assert body["valid"] is (not body["agent_errors"] and not body["network"]["attempts"])
    for err in body["agent_errors"]:
        assert len(err["message"]) <= 2000
    checks = verify_pit_receipt(out / "r.json", trajectory=out / "t.jsonl", bundle=synth_release_dir)
    bad = [(c.name, c.detail) for c in checks if c.status == "MISMATCH"]
    assert not bad, bad


def test_the_fake_jail_drives_the_runner(fake_jail: type[_FakeJail], synth_release_dir: Path, tmp_path: Path) -> None:
    """The property's harness is meaningful: a scripted error is recorded as the cell's, with its text made writable."""
    fake_jail.script = [Step(calls=(("pit_search", {"query": "a" * 10**6, "limit": math.nan}),)), Step(error=("\ud800X", "m\udfff"))]
    cfg = RunConfig(
        bundle_path=str(synth_release_dir), forms=("8-K",), start="2023-03-01", end="2023-03-03", arms=("main",),
        clocks=("pit",), probe_items=0, trajectory_path=str(tmp_path / "t.jsonl"), receipt_path=str(tmp_path / "r.json"),
    )
    body = run(from_callable(_honest), cfg, Release.load(synth_release_dir), None).body
    assert body["agent_errors"][0]["error_type"] == "\ufffdX"
    assert body["agent_errors"][0]["message"] == "m\ufffd"
    assert body["agent_errors"][0]["session_date"] == "2023-03-02"
