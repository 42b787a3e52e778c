"""The bounds' building blocks, attacked directly: recording any value, deciding any flood of picks, writing a
trajectory past its bound. (Whole runs against hostile agents are in test_pit_hostile_runs.py.)"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.pit._bounds import (
    RunBounds,
    describe,
    harness_failure,
    is_stand_in,
    pick_label,
    record_value,
    safe_text,
)
from evalkit.pit._decide import decide
from evalkit.pit._trajectory import Trajectory, TrajectoryLimit
from evalkit_core import canonical_bytes

_text = st.lists(st.integers(0, 0x10FFFF), max_size=40).map(lambda cps: "".join(map(chr, cps)))
_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**600), max_value=10**600)
    | st.floats()
    | _text
    | st.sampled_from(["a" * 5000, "\ud800" * 10, {"refused": "x"}])
)
_json = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=8) | st.dictionaries(_text, inner, max_size=8), max_leaves=40)


@settings(max_examples=500, deadline=None)
@given(value=_json, cap=st.sampled_from([1, 21, 64, 256, 1000]))
def test_record_value_is_writable_bounded_and_idempotent(value: Any, cap: int) -> None:
    recorded = record_value(value, cap)
    encoded = canonical_bytes(recorded)
    assert len(encoded) <= max(cap * 6, 600) + 20
    back = json.loads(encoded)
    again = record_value(back, cap)
    assert canonical_bytes(again) == encoded
    if not is_stand_in(recorded):
        assert canonical_bytes(value) == encoded  # kept only when it is the value itself


@settings(max_examples=300, deadline=None)
@given(value=_json, cap=st.integers(0, 3000))
def test_safe_text_and_pick_label_are_total_and_writable(value: Any, cap: int) -> None:
    text = safe_text(value, cap)
    assert isinstance(text, str)
    text.encode("utf-8")
    assert len(text) <= max(cap, 600)
    label = pick_label(value)
    label.encode("utf-8")
    assert len(label) <= 600
    describe(value).encode("utf-8")


def test_huge_values_are_described_in_constant_size() -> None:
    for value in (10**4000, "x" * 10_000_000, ["a"] * 1_000_000, {str(i): i for i in range(100_000)}, math.nan):
        recorded = record_value(value)
        assert is_stand_in(recorded)
        assert len(canonical_bytes(recorded)) < 200


def test_harness_failure_keeps_the_type_and_bounds_the_message() -> None:
    text = harness_failure(ValueError("\ud800" + "m" * 1_000_000))
    assert text.startswith("ValueError: \ufffd")
    assert len(text) <= 2000

    class UnprintableError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert harness_failure(UnprintableError()) == "UnprintableError: <unprintable>"


def test_run_bounds_refuse_nonsense() -> None:
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(ValueError, match="picks_per_session"):
            RunBounds(picks_per_session=bad)  # pyright: ignore[reportArgumentType]
    assert set(RunBounds().to_json()) >= {"picks_per_session", "trajectory_run_bytes", "tool_query_chars"}


# --- picks ------------------------------------------------------------------------------------------------------

_ENTRIES = {"r" + f"{i:020x}": i % 10 for i in range(100)}  # row_key -> entry session index
_KNOWN = [k for k, e in _ENTRIES.items() if e <= 5]
_FUTURE = [k for k, e in _ENTRIES.items() if e > 5]
_SMALL = RunBounds(picks_per_session=1000, rejected_sample=20)


def _size(d: Any) -> int:
    return len(canonical_bytes(d.to_json()))


@pytest.mark.parametrize(
    ("picks", "accepted", "counts"),
    [
        ([f"fake{i}" for i in range(300_000)], 0, {"unknown": 1000, "over_limit": 299_000}),
        (["x" * 5_000_000], 0, {"unknown": 1}),
        ([_KNOWN[0]] * 100_000, 1, {"duplicate": 999, "over_limit": 99_000}),
        ([1, 2.5, None, True, [], {}, [[[]]], {"a": [1]}, 10**400] * 10, 0, {"unknown": 90}),
        (_FUTURE * 50, 0, {"not_yet_knowable": 1000, "over_limit": len(_FUTURE) * 50 - 1000}),
        ([*_KNOWN, *_KNOWN, "\ud800", "nope"], len(_KNOWN), {"duplicate": len(_KNOWN), "unknown": 2}),
        ([], 0, {}),
    ],
    ids=["many-keys", "huge-key", "duplicates", "non-strings", "future", "mixed", "none"],
)
def test_a_flood_of_picks_is_refused_as_counts_with_a_bounded_record(picks: list[Any], accepted: int, counts: Mapping[str, int]) -> None:
    d = decide(picks, _ENTRIES, 5, _SMALL)
    assert len(d.picks) == accepted
    assert len(d.rejected) <= 20
    got: dict[str, int] = {}
    for r in d.rejected:
        got[r["reason"]] = got.get(r["reason"], 0) + 1
    for reason, n in d.omitted.items():
        got[reason] = got.get(reason, 0) + n
    assert got == dict(counts)
    assert _size(d) < 20_000 + 25 * accepted  # whatever the flood held
    canonical_bytes(d.to_json())


def test_a_decision_within_the_sample_reads_as_it_always_has() -> None:
    d = decide([_KNOWN[0], "nope", _FUTURE[0], _KNOWN[0], 7], _ENTRIES, 5, RunBounds())
    assert d.to_json() == {
        "picks": [_KNOWN[0]],
        "rejected": [
            {"row_key": "nope", "reason": "unknown"},
            {"row_key": _FUTURE[0], "reason": "not_yet_knowable"},
            {"row_key": _KNOWN[0], "reason": "duplicate"},
            {"row_key": "integer 7", "reason": "unknown"},
        ],
    }


def test_no_pick_past_the_bound_is_looked_up() -> None:
    looked: list[str] = []

    class Entries(dict[str, int]):
        def get(self, key: str, default: Any = None) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
            looked.append(key)
            return super().get(key, default)

    d = decide([f"k{i}" for i in range(5000)], Entries(_ENTRIES), 5, _SMALL)
    assert len(looked) == 1000
    assert d.omitted == {"unknown": 980, "over_limit": 4000}


# --- the trajectory ---------------------------------------------------------------------------------------------


class _Sink:
    def __init__(self) -> None:
        self.events: list[Mapping[str, Any]] = []

    def feed(self, event: Mapping[str, Any]) -> None:
        self.events.append(event)


def test_the_trajectory_refuses_an_event_past_the_cell_bound_and_writes_the_failure() -> None:
    fh = io.BytesIO()
    sink = _Sink()
    traj = Trajectory(fh, sink, RunBounds(trajectory_cell_bytes=2000, trajectory_run_bytes=10_000))
    traj.new_cell()
    traj.emit({"type": "cell_start"})
    def flood() -> None:
        for _ in range(100):
            traj.defer({"type": "tool_call", "result": {"rows": ["x" * 100]}})
            traj.flush()

    with pytest.raises(TrajectoryLimit, match="cell's trajectory"):
        flood()
    traj.emit_final({"type": "agent_error", "error_type": "TrajectoryLimit", "message": "m"})
    traj.emit_final({"type": "run_end"})
    data = fh.getvalue()
    assert len(data) <= 2000 + 300
    lines = data.splitlines()
    assert [json.loads(x)["seq"] for x in lines] == list(range(len(lines)))
    assert json.loads(lines[-2])["type"] == "agent_error"
    assert len(sink.events) == len(lines)


def test_the_run_bound_holds_across_cells() -> None:
    fh = io.BytesIO()
    traj = Trajectory(fh, _Sink(), RunBounds(trajectory_cell_bytes=1500, trajectory_run_bytes=4000))
    def cells() -> None:
        for _ in range(10):
            traj.new_cell()
            traj.emit({"type": "cell_start"})
            for _ in range(10):
                traj.emit({"type": "decision", "text": "y" * 100})

    with pytest.raises(TrajectoryLimit, match="run's trajectory"):
        cells()
    assert len(fh.getvalue()) <= 4000 + 100


def test_structural_events_are_never_refused_so_a_bound_is_passed_inside_a_call() -> None:
    fh = io.BytesIO()
    traj = Trajectory(fh, _Sink(), RunBounds(trajectory_cell_bytes=10, trajectory_run_bytes=10))
    traj.emit({"type": "cell_start"})
    traj.emit({"type": "agent_call", "prompt": "p" * 50})
    with pytest.raises(TrajectoryLimit):
        traj.emit({"type": "decision"})


# --- model requests -----------------------------------------------------------------------------------------------


class _NoGateway:
    def complete(self, model_id: str, request: Any) -> Any:
        raise AssertionError("a refused request must never reach the gateway")


@pytest.mark.parametrize(
    ("model_id", "request_fields", "fragment"),
    [
        ("m" * 1000, {}, "model id refused (string of 1000 characters"),
        ("\ud800model", {}, "model id refused"),
        ("ok-model", {"tools": "NAN_TOOL"}, "the request cannot be recorded: CanonicalError"),
        ("ok-model", {"system": "\udfff"}, "the request cannot be recorded: CanonicalError"),
        ("ok-model", {"max_tokens": 10**400}, "the request cannot be recorded: CanonicalError"),
    ],
)
def test_a_model_request_the_trajectory_cannot_hold_is_refused_and_recorded(
    model_id: str, request_fields: dict[str, Any], fragment: str
) -> None:
    from evalkit.pit._gateway import GatewayError
    from evalkit.pit._models_call import record_model_call
    from evalkit_core.models import Message, Request

    fh = io.BytesIO()
    traj = Trajectory(fh, _Sink())
    from evalkit_core.models import ToolSpec

    if request_fields.get("tools") == "NAN_TOOL":
        request_fields = {"tools": (ToolSpec("t", "d", {"default": math.nan}),)}
    request = Request(messages=(Message("user", "hi"),), **request_fields)
    with pytest.raises(GatewayError, match=r"refused|cannot be recorded"):
        record_model_call(traj, {"arm": "main"}, _NoGateway(), model_id, request)  # pyright: ignore[reportArgumentType]
    (line,) = fh.getvalue().splitlines()
    event = json.loads(line)
    assert event["type"] == "model_request"
    assert fragment in event["refused"], event["refused"]
    assert len(line) < 3000
