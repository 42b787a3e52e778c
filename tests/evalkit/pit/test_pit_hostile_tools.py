"""Hostile tool arguments: every tool is total over every argument the protocol admits, and more.

The agent's tool calls reach the harness as JSON values of any shape (the agent can write its pipe by hand): a
query of a million characters, regex syntax, lone surrogates, NUL, integers of hundreds of digits, NaN, floats
where integers go, nested and wide containers, names of tools that do not exist. Each call here must come back
as an answer (``ok``, ``error`` or ``not_yet_knowable``) with the envelope, be recorded exactly once with arguments
canonical JSON can write and of bounded size, and be answered the same way when its recorded arguments are
served again (what ``verify``'s replay does). Nothing may raise.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.pit._toolbox import CellView, Toolbox
from evalkit_core import Clock, Release, canonical_bytes, nyse

_SESSION = dt.date(2023, 3, 8)
_RECORD_BYTES = 4096  # far above what a recorded call's arguments may hold (bounds: 1,000 characters at most)


@pytest.fixture(scope="module")
def view(synth_release: Release) -> CellView:
    cal = nyse()
    return CellView("main", Clock("pit"), synth_release.arm("main"), synth_release.arm("main"), cal, synth_release.shift)


@pytest.fixture(scope="module")
def shifted_view(synth_release: Release) -> CellView:
    cal = nyse()
    return CellView("shifted", Clock("pit"), synth_release.arm("shifted"), synth_release.arm("main"), cal, synth_release.shift)


def _serve(view: CellView, name: Any, args: Any) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any], dict[str, Any]]]]:
    log: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    box = Toolbox(view, nyse().index_of(_SESSION), lambda t, a, r: log.append((t, a, r)))
    answer = box.call(name, args)
    return answer, log


def _check_total(view: CellView, name: Any, args: Any) -> dict[str, Any]:
    """One call: an answer with the envelope, one record that canonical JSON writes, bounded, and served again
    from its record with the same record and the same answer."""
    answer, log = _serve(view, name, args)
    assert answer["status"] in {"ok", "error", "not_yet_knowable"}, answer
    assert answer["arm"] == view.arm and answer["clock"] == "pit" and answer["session_date"]
    assert len(log) == 1
    tool, recorded, result = log[0]
    assert result is answer
    assert isinstance(tool, str) and len(tool) <= 64
    encoded = canonical_bytes({"tool": tool, "args": recorded})
    assert len(encoded) <= _RECORD_BYTES, len(encoded)
    canonical_bytes(answer)  # the answer can be written, whatever was asked
    # the replay: the recorded call, served again (after a JSON round trip, as it is read from the file)
    again, log2 = _serve(view, tool, json.loads(encoded)["args"])
    assert len(log2) == 1
    assert log2[0][0] == tool
    assert canonical_bytes(log2[0][1]) == canonical_bytes(recorded)
    assert canonical_bytes(again) == canonical_bytes(answer)
    return answer


_HUGE_INT = 10**400
_STRINGS = [
    "a" * 1_000_000,  # the seen example: polars' regex compiler refused it and the run ended
    "a" * 1001,
    "(" * 5000,
    ".*" * 600,
    "x{1000000}",
    "[",
    "\\",
    "(?i)acme",
    "\ud800",
    "acme\udfff",
    "\x00",
    "acme\x00corp",
    "\u202eevil",
    "e\u0301",
    "İ",
    "🦄" * 300,
    "\n\t\r",
    " ",
]
_NUMBERS: list[Any] = [_HUGE_INT, -_HUGE_INT, 2**53, 2**63, -1, 0, math.nan, math.inf, -math.inf, 5.0, 5.5, 1e-7, 1e308, True, False]
_CONTAINERS: list[Any] = [
    [],
    {},
    ["a"] * 100_000,
    {str(i): i for i in range(10_000)},
    {"refused": "a stand-in, sent by the agent itself"},
    {"refused": 5},
]


def _deep(n: int) -> Any:
    v: Any = []
    for _ in range(n):
        v = [v]
    return v


_VALUES: list[Any] = [*_STRINGS, *_NUMBERS, *_CONTAINERS, None, _deep(500), {"a": _deep(50)}]


@pytest.mark.parametrize("value", _VALUES, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize(
    ("tool", "param"),
    [("pit_search", "query"), ("pit_search", "limit"), ("pit_list", "limit"), ("pit_list", "offset"), ("pit_list", "form"), ("pit_read", "row_key"), ("pit_coverage", "anything")],
)
def test_every_argument_of_every_tool_is_answered_and_recorded_in_bounds(view: CellView, tool: str, param: str, value: Any) -> None:
    base: dict[str, Any] = {"pit_search": {"query": "acme"}, "pit_list": {}, "pit_read": {}, "pit_coverage": {}}[tool]
    answer = _check_total(view, tool, {**base, param: value})
    if tool == "pit_coverage":
        assert answer["status"] == "ok"


@pytest.mark.parametrize("name", ["pit_frobnicate", "x" * 100_000, "\ud800", "", "pit_list\x00", 5, None, ["pit_list"], "PIT_LIST"])
def test_unknown_tools_are_an_error_whatever_their_name(view: CellView, name: Any) -> None:
    answer = _check_total(view, name, {"query": "a" * 10_000, "n": math.nan})
    assert answer["status"] == "error"
    assert "unknown tool" in answer["error"]


@pytest.mark.parametrize("arguments", [None, 5, "limit=5", ["limit", 5], b"{}", {1: 2}, {"\ud800": 1}])
def test_arguments_that_are_not_an_object(view: CellView, arguments: Any) -> None:
    answer = _check_total(view, "pit_list", arguments)
    assert answer["status"] in {"ok", "error"}


def test_the_million_character_query_is_refused_with_its_size_not_echoed(view: CellView) -> None:
    answer, log = _serve(view, "pit_search", {"query": "acme " * 200_000})
    assert answer["status"] == "error"
    assert "1000000 characters" in answer["error"]
    assert "at most 1000 characters" in answer["error"]
    assert len(canonical_bytes(log[0][1])) < 300  # the record holds a description, not the query


@pytest.mark.parametrize("query", [".", ".*", "(", ")", "[", "]", "\\", "^", "$", "|", "+", "?", "{", "}", "\\d", "a|b", "8-k", "K "])
def test_search_is_a_literal_substring_never_a_regex(view: CellView, query: str) -> None:
    answer, _ = _serve(view, "pit_search", {"query": query, "limit": 200})
    assert answer["status"] == "ok", answer
    visible = view.visible_count(nyse().index_of(_SESSION))
    hay = view.haystack().head(visible).to_list()
    needle = query.strip().lower()
    expected = [i for i, h in enumerate(hay) if needle in h]
    assert answer["total"] == len(expected)
    assert [r["row_key"] for r in answer["rows"]] == [view.row_keys[i] for i in expected[::-1][:200]]


def test_search_of_nul_and_unicode_finds_nothing_it_should_not(view: CellView) -> None:
    for query in ("\x00", "🦄", "e\u0301", "\u202e"):
        answer, _ = _serve(view, "pit_search", {"query": query})
        assert answer["status"] == "ok"
        assert answer["total"] == 0
        assert answer["query"] == query  # echoed as given: it is short and writable


def test_a_query_at_the_bound_is_searched_and_one_past_it_is_refused(view: CellView) -> None:
    at, _ = _serve(view, "pit_search", {"query": "a" * 1000})
    past, _ = _serve(view, "pit_search", {"query": "a" * 1001})
    assert at["status"] == "ok" and at["total"] == 0
    assert past["status"] == "error"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"limit": _HUGE_INT}, "integer of"),
        ({"limit": math.nan}, "nan"),
        ({"offset": -1}, "between 0 and any"),
        ({"offset": 2**60}, "offset refused (integer 1152921504606846976)"),
        ({"limit": 5.0}, "number 5.0"),
        ({"limit": 5.5}, "must be an integer, got 5.5"),
        ({"form": "8-K" * 100}, "form refused"),
        ({"form": "\ud800"}, "form refused"),
    ],
)
def test_list_refusals_say_what_was_refused(view: CellView, args: dict[str, Any], fragment: str) -> None:
    answer, _ = _serve(view, "pit_list", args)
    assert answer["status"] == "error"
    assert fragment in answer["error"], answer["error"]


def test_read_of_an_unwritable_key_is_an_error_and_of_a_plain_odd_key_not_yet_knowable(shifted_view: CellView) -> None:
    for key in ("\ud800", "r" * 300, [1] * 1000, _HUGE_INT, math.nan):
        answer, _ = _serve(shifted_view, "pit_read", {"row_key": key})
        assert answer["status"] == "error", key
        assert "row_key refused" in answer["error"]
    for key in ("r" + "0" * 20, "nope", 7, None, ["r"]):
        answer, _ = _serve(shifted_view, "pit_read", {"row_key": key})
        assert answer["status"] == "not_yet_knowable"
        assert answer["row_key"] == key


def test_honest_calls_record_exactly_what_they_recorded_before(view: CellView) -> None:
    """The recorded arguments of honest calls are what the toolbox has always written (old receipts replay)."""
    _, log = _serve(view, "pit_list", {"limit": 5, "offset": 0, "form": None})
    assert log[0][1] == {"limit": 5, "offset": 0, "form": None}
    _, log = _serve(view, "pit_list", {})
    assert log[0][1] == {"limit": 20, "offset": 0, "form": None}
    _, log = _serve(view, "pit_search", {"query": "acme"})
    assert log[0][1] == {"query": "acme", "limit": 20}
    _, log = _serve(view, "pit_read", {"row_key": "nope"})
    assert log[0][1] == {"row_key": "nope"}
    _, log = _serve(view, "pit_coverage", {"ignored": math.nan})
    assert log[0][1] == {}
    box = Toolbox(view, nyse().index_of(_SESSION), lambda *_: None)
    assert box.pit_list(limit=3)["status"] == "ok"
    assert len(box.pit_list(limit=3)["rows"]) == 3
    assert box.pit_search("a", limit=2)["status"] == "ok"


def test_a_harness_failure_inside_a_tool_is_that_calls_recorded_error(view: CellView, monkeypatch: pytest.MonkeyPatch) -> None:
    """By construction: whatever the tool's own code raises on an input is the call's answer, with the exception's
    type and a bounded message; the next call is answered as usual."""

    def broken(self: Toolbox, query: str, lim: int) -> Any:
        raise RuntimeError("boom " + "x" * 100_000 + "\ud800")

    monkeypatch.setattr(Toolbox, "_search", broken)
    answer, log = _serve(view, "pit_search", {"query": "acme"})
    assert answer["status"] == "error"
    assert answer["error"].startswith("the harness failed on this call: RuntimeError: boom")
    assert len(answer["error"]) <= 2000
    canonical_bytes(log[0][2])
    listed, _ = _serve(view, "pit_list", {"limit": 2})
    assert listed["status"] == "ok"


# --- properties: any JSON value the protocol admits, anywhere ------------------------------------------------------

_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**500), max_value=10**500)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.lists(st.integers(0, 0x10FFFF), max_size=30).map(lambda cps: "".join(map(chr, cps)))  # surrogates too
    | st.sampled_from(["", "a" * 2000, "\ud800", "pit_list", "r" + "0" * 20, "8-K"])
)
_json = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["pit_list", "pit_search", "pit_read", "pit_coverage", "other"]) | st.text(max_size=80),
    args=st.dictionaries(st.sampled_from(["limit", "offset", "form", "query", "row_key", "x"]) | st.text(max_size=8), _json, max_size=6),
)
def test_property_every_call_is_answered_recorded_and_replayed(view: CellView, name: str, args: dict[str, Any]) -> None:
    _check_total(view, name, args)
