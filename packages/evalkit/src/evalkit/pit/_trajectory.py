"""The trajectory writer: canonical JSONL events, each fed to the scorer as it is written, within its bounds.

A run writes at most ``RunBounds.trajectory_cell_bytes`` per cell (the probe counts as one) and
``RunBounds.trajectory_run_bytes`` in all. An event that would pass either is not written: :class:`TrajectoryLimit`
is raised instead, and the runner records the cell's failure with :meth:`Trajectory.emit_final`, which (with the
run's closing ``run_end``) is the only writing allowed past the bound: a few hundred bytes, bounded by the message
caps. The events the harness makes of its own, one per cell or session (``cell_start``, ``agent_call``), are
never refused (the configuration bounds their number), so a bound is always passed inside an agent's call, where
the replay expects its failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

from evalkit.pit._bounds import RunBounds
from evalkit_core import canonical_bytes, canonical_object

__all__ = ["Trajectory", "TrajectoryLimit", "result_json", "spliced_line", "tool_line"]


_STRUCTURAL = frozenset({"run_start", "cell_start", "agent_call", "agent_error", "run_end"})


class _Feed(Protocol):
    def feed(self, event: Mapping[str, Any]) -> None: ...


class _Out(Protocol):
    def write(self, data: bytes, /) -> object: ...


class TrajectoryLimit(Exception):  # noqa: N818 - the name is what the trajectory records
    """Writing an event would pass the trajectory's bound for the cell or the run."""


class Trajectory:
    """Canonical JSONL events, written to ``fh`` (the runner's :class:`~evalkit.pit._trajfile.TrajectorySink` over
    the file it opens, and renames into place when the run ends). The bounds count the stream's bytes.

    Every event written is also fed to the scorer, which computes the body's numbers from the events alone
    (as ``verify`` does from the file)."""

    def __init__(self, fh: _Out, scorer: _Feed, bounds: RunBounds | None = None) -> None:
        self._fh = fh
        self._scorer = scorer
        self._bounds = bounds or RunBounds()
        self._deferred: list[tuple[Mapping[str, Any], str | None]] = []
        self.events = 0
        self.bytes = 0
        self.cell_bytes = 0

    def new_cell(self) -> None:
        """A cell (or the probe) starts: its own budget of bytes starts again."""
        self.cell_bytes = 0

    def emit(self, event: Mapping[str, Any], rows_json: str | None = None) -> None:
        """Write ``event`` as the next line (after any deferred ones). ``rows_json``: for a tool call, the canonical
        JSON of its result's ``rows`` or ``row`` (:attr:`Toolbox.rows_json`), spliced in instead of encoding the
        rows again."""
        self.flush()
        self._write(event, rows_json)

    def emit_final(self, event: Mapping[str, Any]) -> None:
        """Write a failure record or ``run_end`` even past the bound, after the events still deferred that fit in
        it (the rest are dropped: they were never written, and the failure says why)."""
        try:
            self.flush()
        except Exception:  # past the bound, or not encodable: the record that follows says what failed
            self._deferred.clear()
        self._write(event, None, final=True)

    def defer(self, event: Mapping[str, Any], rows_json: str | None = None) -> None:
        """Emit ``event`` at the next :meth:`flush` or :meth:`emit`, whichever comes first: the order of the lines
        is the order of the calls."""
        self._deferred.append((event, rows_json))

    def flush(self) -> None:
        deferred, self._deferred = self._deferred, []
        for event, rows_json in deferred:
            self._write(event, rows_json)

    def _write(self, event: Mapping[str, Any], rows_json: str | None, *, final: bool = False) -> None:
        line = {"seq": self.events, **event}
        data = (canonical_bytes(line) if rows_json is None else tool_line(line, rows_json)) + b"\n"
        bounds = self._bounds
        if not final and event.get("type") not in _STRUCTURAL:
            if self.cell_bytes + len(data) > bounds.trajectory_cell_bytes:
                raise TrajectoryLimit(
                    f"the cell's trajectory would pass its bound of {bounds.trajectory_cell_bytes} bytes "
                    f"(a {event.get('type')} event of {len(data)} bytes after {self.cell_bytes})"
                )
            if self.bytes + len(data) > bounds.trajectory_run_bytes:
                raise TrajectoryLimit(
                    f"the run's trajectory would pass its bound of {bounds.trajectory_run_bytes} bytes "
                    f"(a {event.get('type')} event of {len(data)} bytes after {self.bytes})"
                )
        self._fh.write(data)
        self.bytes += len(data)
        self.cell_bytes += len(data)
        self._scorer.feed(line)
        self.events += 1


def tool_line(event: Mapping[str, Any], rows_json: str) -> bytes:
    """``canonical_bytes(event)`` for a tool call whose ``result`` holds ``rows`` (a list) or ``row`` (an object)
    whose canonical JSON is ``rows_json``: every other member is encoded here, the rows are not encoded again."""
    return spliced_line(event, result_json(cast("Mapping[str, Any]", event["result"]), rows_json))


def spliced_line(event: Mapping[str, Any], result_text: str) -> bytes:
    """``canonical_bytes(event)`` for an event whose ``result`` encodes as ``result_text`` (canonical JSON, made
    once by the caller): every other member is encoded here, the result is not encoded again."""
    outer = {k: canonical_bytes(v).decode() for k, v in event.items() if k != "result"}
    outer["result"] = result_text
    return canonical_object(outer).encode()


def result_json(result: Mapping[str, Any], rows_json: str) -> str:
    """``canonical_bytes(result).decode()`` for a tool answer whose ``rows`` (or ``row``) encode as ``rows_json``."""
    field = "rows" if isinstance(result.get("rows"), list) else "row"
    members = {k: canonical_bytes(v).decode() for k, v in result.items() if k != field}
    members[field] = rows_json
    return canonical_object(members)
