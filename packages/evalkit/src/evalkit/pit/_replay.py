"""Replaying a trajectory against the release: the harness's side of every event, done again.

The agent is not run again: its recorded actions are. For each cell and session the replay builds the same
:class:`CellView` and :class:`Toolbox` the runner built, checks that the recorded prompt is the one the harness
gives, re-serves every recorded tool call (same tool, same arguments) and compares the whole answer, checks every
accepted and rejected pick against what was knowable at that bell, checks the probe's items and prompts, and
checks that the events come in the order the runner writes them (no line dropped, added, reordered or moved to
another cell). Problems are returned as ``line N: ...`` strings; a structural one ends the walk. A decision's
refusals past its listed sample (``rejected_omitted``) are counts: their reasons are checked, their keys were never
recorded.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import attrs

from evalkit.pit._config import RunConfig
from evalkit.pit._entries import EntryTables
from evalkit.pit._probe import choose_items, probe_prompt
from evalkit.pit._runner import (
    cell_sessions,
    cell_start_event,
    probe_clock,
    probe_view,
    result_json,
    run_id_for,
    run_start_event,
    session_prompt,
)
from evalkit.pit._serving import ServedMask
from evalkit.pit._toolbox import CellView, Toolbox, cell_views
from evalkit_core import ARMS, Calendar, Release, canonical_bytes

__all__ = ["EVENT_TYPES", "Misaligned", "Walk", "replay_trajectory", "walk_cell", "walk_head", "walk_tail"]

EVENT_TYPES = frozenset(
    {
        "run_start",
        "cell_start",
        "agent_call",
        "tool_call",
        "model_request",
        "model_call",
        "egress_attempt",
        "agent_error",
        "decision",
        "probe_item",
        "run_end",
    }
)
_IN_CALL = frozenset({"tool_call", "model_request", "model_call", "egress_attempt"})
_MAX_PROBLEMS = 20
_OMITTED_REASONS = frozenset({"unknown", "not_yet_knowable", "duplicate", "over_limit"})


class Misaligned(Exception):  # noqa: N818 - control flow: the walk cannot go on
    """A structural problem (an event missing, added, reordered or moved): the walk cannot go on."""


def _same(a: object, b: object) -> bool:
    return canonical_bytes(a) == canonical_bytes(b)


def _short(value: object, limit: int = 100) -> str:
    text = canonical_bytes(value).decode("utf-8", "replace")
    return text if len(text) <= limit else text[: limit - 3] + "..."


@attrs.define
class Walk:
    """The state of a walk over a run's events: where it is (``pos``: events taken), what it found (``problems``,
    at most 20), what it re-served (``counts``; ``served``: the shifted arm's row_keys in first-served order) and
    whether the run stopped."""

    events: Iterator[Mapping[str, Any]]
    config: RunConfig
    calendar: Calendar
    problems: list[str] = attrs.Factory(list[str])
    pos: int = 0
    served: dict[str, None] = attrs.Factory(dict[str, None])
    stopped: bool = False
    counts: dict[str, int] = attrs.Factory(lambda: {"tool_calls": 0, "picks": 0, "probe_items": 0})
    known: frozenset[str] = frozenset()  # the answer key's row_keys: only those count as served
    # canonical_bytes(event["result"]) of a recorded tool call (the reader may have it encoded already)
    encoded_result: Callable[[Mapping[str, Any]], bytes] = attrs.field(default=lambda e: canonical_bytes(e.get("result")))
    _next: Mapping[str, Any] | None = None
    _ended: bool = False

    def problem(self, text: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(text)

    def peek(self) -> Mapping[str, Any] | None:
        """The next event without taking it (the walk streams: a trajectory is never held whole in memory)."""
        if self._next is None and not self._ended:
            self._next = next(self.events, None)
            self._ended = self._next is None
        return self._next

    def advance(self) -> None:
        self._next = None
        self.pos += 1

    def take(self, kind: str, expected: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
        event = self.peek()
        if event is None:
            raise Misaligned(f"line {self.pos + 1}: the trajectory ends where a {kind} event was expected")
        if event.get("type") != kind:
            raise Misaligned(
                f"line {self.pos + 1}: a {event.get('type')} event where the harness writes {kind}"
                + (f" ({_short(_where(expected))})" if expected else "")
            )
        if expected is not None:
            for k, v in expected.items():
                if k != "seq" and not _same(event.get(k), v):
                    raise Misaligned(
                        f"line {self.pos + 1}: {kind}.{k} is {_short(event.get(k))}, the harness would write {_short(v)}"
                    )
        self.advance()
        return event

    def here(self) -> int:
        return self.pos  # the 1-based line number of the event just taken


def _where(event: Mapping[str, Any] | None) -> dict[str, Any]:
    if event is None:
        return {}
    return {k: event[k] for k in ("arm", "clock", "session_date", "probe_item") if k in event}


def replay_trajectory(
    events: Iterable[Mapping[str, Any]],
    config: RunConfig,
    release: Release,
    calendar: Calendar,
    window: tuple[dt.date, dt.date],
    *,
    encoded_result: Callable[[Mapping[str, Any]], bytes] | None = None,
    served: ServedMask | None = None,
) -> tuple[list[str], dict[str, int]]:
    """Walk ``events`` as the runner would have written them for ``config`` over ``release`` (already narrowed
    to the run's forms and window). Returns (problems, counts of what was re-served). ``encoded_result``, when
    given, returns a recorded tool call's ``canonical_bytes(event["result"])`` (the reader's, encoded once).
    ``served``: the shifted arm as the run served it with decoys, rebuilt from the release's secret."""
    walk = Walk(
        iter(events), config, calendar, known=frozenset(release.answer_key.get_column("row_key").to_list())
    )
    if encoded_result is not None:
        walk.encoded_result = encoded_result
    try:
        _walk_run(walk, release, window, served)
    except Misaligned as exc:
        walk.problem(str(exc))
    return walk.problems, walk.counts


def _walk_run(walk: Walk, release: Release, window: tuple[dt.date, dt.date], served: ServedMask | None) -> None:
    indices = walk_head(walk, release, window)
    sessions = walk.calendar.between(*window)
    tables = EntryTables(release, walk.calendar, served)
    arms = [a for a in ARMS if a in walk.config.arms]
    for view in cell_views(release, arms, walk.config.clocks, walk.calendar, served):
        if walk.stopped:
            break
        tables.keep(arms[arms.index(view.arm) :])  # as the run drops them
        walk_cell(walk, view, cell_sessions(view, sessions, indices, served)[1], tables.of(view.arm, view.clock))
    walk_tail(walk, release, indices, served)


def walk_head(walk: Walk, release: Release, window: tuple[dt.date, dt.date]) -> list[int]:
    """Take the ``run_start`` event; returns the calendar indices of the window's sessions. A run is walked as
    ``walk_head``, then :func:`walk_cell` for each cell in the run's order while the walk has not stopped, then
    :func:`walk_tail`; each raises :class:`Misaligned` where the walk cannot go on."""
    cfg, calendar = walk.config, walk.calendar
    sessions = calendar.between(*window)
    indices = [calendar.index_of(s.date) for s in sessions]
    first = walk.peek()
    agent_name = str(first.get("agent")) if first is not None else ""
    run_id = run_id_for(cfg.digest(), release.content_digest)
    walk.take(
        "run_start", run_start_event(run_id, cfg, release, agent_name, window[0], window[1], len(sessions))
    )
    return indices


def walk_cell(walk: Walk, view: CellView, indices: Sequence[int], entries: Mapping[str, int]) -> None:
    """Walk one cell: its ``cell_start`` and every session it runs (``indices``: calendar indices), up to the
    cell's last decision or where the run stopped. It reads no event past the cell's last one unless the run
    stopped in it. ``entries``: the entry table of the cell's main rows under the view's clock."""
    walk.take("cell_start", cell_start_event(view))
    for s_idx in indices:
        if walk.stopped:
            break
        _walk_session(walk, view, s_idx, entries)


def walk_tail(walk: Walk, release: Release, indices: Sequence[int], served: ServedMask | None = None) -> None:
    """Walk what follows the cells: the probe (unless the run stopped) and ``run_end``, with nothing after it."""
    cfg, calendar = walk.config, walk.calendar
    if not walk.stopped and "shifted" in cfg.arms and cfg.probe_items > 0:
        view = probe_view(release, probe_clock(cfg), calendar, served)
        items = choose_items(list(walk.served), cfg.probe_items)
        last = served.indices[-1] if served is not None else indices[-1]
        for n, key in enumerate(items):
            if walk.stopped:
                break
            _walk_probe_item(walk, view, last, n, key)
    walk.take("run_end")
    if walk.peek() is not None:
        raise Misaligned(f"line {walk.pos + 1}: a {walk.peek().get('type')} event after run_end")  # pyright: ignore[reportOptionalMemberAccess]


def _recorder(sink: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> Any:
    def record(tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        sink.append((tool, args, result))

    return record


def _serve(walk: Walk) -> Any:
    def served(keys: Sequence[str]) -> None:
        for k in keys:
            if k in walk.known:
                walk.served.setdefault(k, None)

    return served


def _walk_session(walk: Walk, view: CellView, s_idx: int, entries: Mapping[str, int]) -> None:
    sink: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    toolbox = Toolbox(
        view, s_idx, _recorder(sink), _serve(walk) if view.arm == "shifted" else None, None, render_rows=False
    )
    where = {"arm": view.arm, "clock": str(view.clock), "session_date": toolbox.session_date}
    walk.take("agent_call", {**where, "prompt": session_prompt(toolbox, walk.config.hold_sessions)})
    if _walk_call(walk, toolbox, sink, where):
        return
    decision = walk.take("decision", where)
    _check_decision(walk, entries, s_idx, decision)


def _walk_call(
    walk: Walk,
    toolbox: Toolbox,
    sink: list[tuple[str, dict[str, Any], dict[str, Any]]],
    where: Mapping[str, Any],
) -> bool:
    """Consume the events of one agent call up to its outcome. True when the run stopped in this call."""
    stop_after = False
    while True:
        event = walk.peek()
        kind = event.get("type") if event is not None else None
        if event is None or kind not in _IN_CALL | {"agent_error"}:
            if stop_after:
                walk.stopped = True
                return True
            return False
        line = walk.pos + 1
        if kind not in EVENT_TYPES:
            raise Misaligned(f"line {line}: unknown event type {kind!r}")
        if not _same(_where(event), where) and kind != "egress_attempt":
            raise Misaligned(
                f"line {line}: a {kind} at {_short(_where(event))} inside the call at {_short(where)}"
            )
        walk.advance()
        if kind == "tool_call":
            _replay_tool_call(walk, toolbox, sink, event, line)
        elif kind == "egress_attempt" and walk.config.network_policy == "abort":
            stop_after = True  # the runner ends the run when this call returns, with no decision
        elif kind == "agent_error":
            walk.stopped = True
            return True


def _replay_tool_call(
    walk: Walk,
    toolbox: Toolbox,
    sink: list[tuple[str, dict[str, Any], dict[str, Any]]],
    event: Mapping[str, Any],
    line: int,
) -> None:
    walk.counts["tool_calls"] += 1
    tool, raw_args = event.get("tool"), event.get("args")
    if not isinstance(tool, str) or not isinstance(raw_args, dict):
        walk.problem(f"line {line}: tool_call without a tool name and an arguments object")
        return
    args = cast("dict[str, Any]", raw_args)
    sink.clear()
    toolbox.call(tool, args)
    if len(sink) != 1:
        walk.problem(f"line {line}: {tool} with {_short(args)} is not a call the toolbox answers")
        return
    got_tool, got_args, got_result = sink[0]
    if got_tool != tool or not _same(got_args, args):
        walk.problem(
            f"line {line}: recorded as {tool}({_short(args)}), the toolbox records {got_tool}({_short(got_args)})"
        )
    # the re-served answer's bytes joined from the view's pre-encoded rows, against the recorded answer's
    ours = canonical_bytes(got_result) if toolbox.rows_json is None else result_json(got_result, toolbox.rows_json).encode()
    if ours != walk.encoded_result(event):
        walk.problem(
            f"line {line}: the answer to {tool}({_short(args, 60)}) is not what the release serves at this bell"
        )


def _status(entries: Mapping[str, int], key: str, s_idx: int) -> str:
    entry = entries.get(key)
    return "unknown" if entry is None else ("ok" if entry <= s_idx else "not_yet_knowable")


def _check_decision(walk: Walk, entries: Mapping[str, int], s_idx: int, decision: Mapping[str, Any]) -> None:
    line = walk.here()
    picks = decision.get("picks")
    rejected = decision.get("rejected")
    if not isinstance(picks, list) or not isinstance(rejected, list):
        walk.problem(f"line {line}: decision without picks and rejected lists")
        return
    seen: set[str] = set()
    for key in cast("list[object]", picks):
        walk.counts["picks"] += 1
        status = _status(entries, str(key), s_idx)
        if status != "ok":
            walk.problem(f"line {line}: pick {key} was accepted, but at this bell it is {status}")
        elif str(key) in seen:
            walk.problem(f"line {line}: pick {key} was accepted twice")
        seen.add(str(key))
    for item in cast("list[object]", rejected):
        walk.counts["picks"] += 1
        entry: Mapping[str, Any] = cast("Mapping[str, Any]", item) if isinstance(item, dict) else {}
        key, reason = str(entry.get("row_key")), entry.get("reason")
        status = _status(entries, key, s_idx)
        want = "duplicate" if status == "ok" and key in seen else status
        if reason != want:
            walk.problem(
                f"line {line}: pick {key} was rejected as {reason}, the harness rejects it as {want}"
            )
    # Refusals past the listed sample are counts (docs/pit-harness.md, "Bounds"): their keys were never recorded,
    # so only their reasons and counts can be checked.
    omitted = decision.get("rejected_omitted", {})
    if not isinstance(omitted, dict) or not all(
        reason in _OMITTED_REASONS and type(n) is int and n > 0 for reason, n in cast("dict[str, object]", omitted).items()
    ):
        walk.problem(f"line {line}: rejected_omitted is not a count of refusals by reason")
        return
    walk.counts["picks"] += sum(cast("dict[str, int]", omitted).values())


def _walk_probe_item(walk: Walk, view: CellView, last: int, n: int, key: str) -> None:
    sink: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    toolbox = Toolbox(view, last, _recorder(sink), None, None, render_rows=False)
    where = {
        "arm": "shifted",
        "clock": str(view.clock),
        "session_date": toolbox.session_date,
        "probe_item": n,
    }
    walk.take("agent_call", {**where, "prompt": probe_prompt(view.render(view.position[key]))})
    if _walk_call(walk, toolbox, sink, where):
        return
    walk.take("probe_item", {"item": n, "row_key": key})
    walk.counts["probe_items"] += 1
