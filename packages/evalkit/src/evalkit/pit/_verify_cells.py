"""Verify's replay over several processes: each cell's lines checked and walked by a worker, gathered in order.

This process reads the trajectory once, as the one-worker replay does: it hashes and counts the stream, checks
each line's newline, JSON and ``seq``, and feeds the scorer. It cuts the events at the cells: a cell's lines run
from its ``cell_start`` to the next ``cell_start`` (the last cell's, to the probe's first ``agent_call`` or
``run_end``). Each cell goes to a worker (a process of a local pool, or a Ray actor) holding the release, which
checks its lines' canonical form and walks it with the one-worker replay's own code
(:func:`evalkit.pit._replay.walk_cell`), numbering lines from the cell's first.

Results are taken in the run's order. A cell whose walk ended at its last line, with no structural problem and
the run not stopped, is exactly what the one-worker walk finds there (a cell's walk reads nothing past its last
decision, and what it carries to the next cell is its problems, counts and served keys, which are joined on in
order). At the first cell that is not so (a line missing, added or moved, a run that stopped, a cut in the wrong
place), this process walks on from that cell itself over the same lines (kept until their cell's result is in)
and the rest of the stream, as the one-worker replay would. A worker that is lost (its process killed, its actor
gone) is such a cell too: its cell and every later one are walked here, with one line on standard error saying so.
The probe, ``run_end`` and anything after are walked
here. Lines' problems are sorted back into line order. The report is therefore the one-worker report, byte for
byte, whatever the workers; a worker holds one cell's lines at a time, and this process at most one per worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs

from evalkit.pit._entries import EntryTables, side_of
from evalkit.pit._replay import Misaligned, Walk, walk_cell, walk_head, walk_tail
from evalkit.pit._runner import cell_sessions
from evalkit.pit._toolbox import ArmRows, CellView, clock_order
from evalkit.pit._trajfile import TrajectoryFileError, line_bound, trajectory_lines
from evalkit.pit._verify_replay import (
    NOT_CANONICAL,
    Pass,
    ReplaySetup,
    encode_event,
    replay_setup,
    seq_problem,
)
from evalkit_core import ARMS, Clock, Release, canonical_bytes

if TYPE_CHECKING:
    import polars as pl

    from evalkit.pit._score import Scorer

__all__ = [
    "CellJob",
    "CellPool",
    "CellReplayer",
    "CellResult",
    "CellViews",
    "WorkerLostError",
    "parallel_pass",
    "ship_setup",
]


class WorkerLostError(Exception):
    """Raised by a pool's result handle when the worker that held the cell is gone (killed, crashed, out of
    memory): the cell is walked again in the verifying process. Nothing else a worker raises is caught."""


_LAST = sys.maxsize  # the line number that sorts a damaged stream's problem after every line's


@attrs.frozen
class CellJob:
    """One cell to replay: its place in the run's order, the number of its first line, and its lines (each ending
    in a newline but perhaps the stream's last)."""

    index: int
    first_line: int
    data: bytes


@attrs.frozen
class CellResult:
    """What a worker found in a cell: whether its walk ended cleanly at the cell's last line (``clean``), the walk's
    problems, what it re-served, the shifted arm's served row_keys in first-served order, and the lines not in
    canonical form."""

    index: int
    clean: bool
    problems: list[str]
    counts: dict[str, int]
    served: list[str]
    not_canonical: list[int]


def _lines_of(data: bytes) -> Iterator[bytes]:
    """The lines of ``data``, each with its newline (the last perhaps without), one at a time."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        yield data[start:end]
        start = end


_SETUP_FILE = "setup.pickle"
_FRAMES = (*ARMS, "answer_key")


def ship_setup(setup: ReplaySetup, where: Path) -> None:
    """Write what a local worker needs of ``setup`` into the private directory ``where``: the release's frames as
    Arrow IPC files and the rest pickled, so that a worker starts without reading and checking the release again."""
    release = setup.release
    for name in _FRAMES:
        frame = release.answer_key if name == "answer_key" else release.arm(name)
        frame.write_ipc(where / f"{name}.arrow")
    rest = (
        setup.config,
        setup.window,
        setup.calendar,
        setup.sessions,
        release.root,
        release.manifest,
        release.masks,
        setup.served,  # the masked arms as served (their frames pickle as Arrow IPC)
    )
    (where / _SETUP_FILE).write_bytes(pickle.dumps(rest))


def _shipped(where: Path) -> ReplaySetup:
    import polars as pl

    data = (
        where / _SETUP_FILE
    ).read_bytes()  # written by ship_setup in the verifying process, a private directory
    config, window, calendar, sessions, root, manifest, masks, served = pickle.loads(data)  # noqa: S301
    frames = {name: pl.read_ipc(where / f"{name}.arrow") for name in _FRAMES}
    release = Release(root, manifest, {a: frames[a] for a in ARMS}, frames["answer_key"], masks)
    return ReplaySetup(config, release, window, calendar, sessions, served)


class CellViews:
    """The cells of a run by their place in its order, each view made when it is asked for, as
    :func:`evalkit.pit._toolbox.cell_views` makes it: an arm's rendered rows kept for its next cells (cells come arm
    by arm), a clock's order and lookups, each clock's entry table, and a served mask's arms (decoys, clones) as the
    run served them (``setup.served``)."""

    def __init__(self, setup: ReplaySetup) -> None:
        self.setup = setup
        cfg = setup.config
        self.cells = [(arm, clock) for arm in ARMS if arm in cfg.arms for clock in cfg.clocks]
        self.indices = [setup.calendar.index_of(s.date) for s in setup.sessions]
        self._rows: tuple[str, ArmRows] | None = None
        self._orders: dict[tuple[str, Clock], pl.DataFrame] = {}
        self._lookups: dict[Clock, Any] = {}
        self.tables = EntryTables(setup.release, setup.calendar, setup.served)

    def view(self, index: int) -> CellView:
        """The view of the run's ``index``-th cell."""
        arm, name = self.cells[index]
        clock = Clock(name)
        served, release, calendar = self.setup.served, self.setup.release, self.setup.calendar
        kind = side_of(served, arm)
        frame, main = served.frames(arm) if served is not None and kind else (release.arm(arm), release.arm("main"))
        if self._rows is None or self._rows[0] != arm:
            self._rows = (arm, ArmRows(frame))
        order = self._orders.get((kind, clock))
        if order is None:
            order = self._orders[kind, clock] = clock_order(main, clock, calendar)
        shift = served.shift if served is not None and arm == "shifted" else release.shift
        view = CellView(
            arm, clock, frame, main, calendar, shift, self._rows[1], order, like=self._lookups.get(clock), by_shown=bool(kind)
        )
        self._lookups.setdefault(clock, view.lookups)
        return view

    def sessions(self, view: CellView) -> Sequence[int]:
        """The calendar indices of the sessions ``view``'s cell runs (a served shifted arm's: its hidden days' too)."""
        return cell_sessions(view, self.setup.sessions, self.indices, self.setup.served)[1]

    def entries(self, view: CellView) -> Mapping[str, int]:
        """The entry table of ``view``'s cell (:class:`evalkit.pit._entries.EntryTables`)."""
        return self.tables.of(view.arm, view.clock)


class CellReplayer:
    """A worker's side: the receipt's config over the release (loaded once per worker), and its cells' views. The
    release is read from ``bundle`` as the one-worker replay reads it, or, with ``shipped``, from the directory
    :func:`ship_setup` wrote (the verifying process's own, already read and checked)."""

    def __init__(self, config: Mapping[str, Any], bundle: str, shipped: str | None = None) -> None:
        self.setup = setup = (
            replay_setup({"config": config}, bundle) if shipped is None else _shipped(Path(shipped))
        )
        self.views = CellViews(setup)
        self.known = frozenset(setup.release.answer_key.get_column("row_key").to_list())

    def pid(self) -> int:
        return os.getpid()

    def replay(self, job: CellJob) -> CellResult:
        """Check the cell's lines and walk it from its first line (the one-worker replay's walk of this cell)."""
        setup = self.setup
        not_canonical: list[int] = []
        held: list[tuple[Mapping[str, Any], bytes] | None] = [None]

        def events() -> Iterator[dict[str, Any]]:
            for i, raw in enumerate(_lines_of(job.data)):
                line = raw.rstrip(b"\n")
                # the verifying process's reader took it for a JSON object
                ev = cast("dict[str, Any]", json.loads(line))
                encoded, result = encode_event(ev)
                held[0] = (ev, result) if result is not None else None
                if encoded != line:
                    not_canonical.append(job.first_line + i)
                yield ev

        stream = events()
        walk = Walk(stream, setup.config, setup.calendar, known=self.known, pos=job.first_line - 1)
        walk.encoded_result = lambda event: _held_or_encoded(held[0], event)
        view = self.views.view(job.index)
        try:
            walk_cell(walk, view, self.views.sessions(view), self.views.entries(view))
            clean = not walk.stopped and walk.peek() is None
        except Misaligned:
            clean = False
        for _ in stream:  # every line is checked, wherever the walk ended
            pass
        return CellResult(job.index, clean, walk.problems, walk.counts, list(walk.served), not_canonical)


def _held_or_encoded(held: tuple[Mapping[str, Any], bytes] | None, event: Mapping[str, Any]) -> bytes:
    if held is not None and held[0] is event:
        return held[1]
    return canonical_bytes(event.get("result"))


# --- this process's side -------------------------------------------------------------------------------------

_Item = tuple[int, bytes, dict[str, Any]]  # a line's number, its bytes, its event


class _Lines:
    """The one pass over the stream: each line hashed, counted and checked (all but its canonical form) and its
    event fed to the scorer, in order. Problems are kept with (line, rank) to be sorted back into the order the
    one-worker reader reports them in (a line's newline, JSON, canonical form, then ``seq``)."""

    def __init__(self, path: Path, bound: int, scorer: Scorer) -> None:
        self._raw = trajectory_lines(path, bound)
        self._hash = hashlib.sha256()
        self._scorer = scorer
        self._back: list[_Item] = []
        self._seq_reported = False
        self.lines = 0
        self.problems: list[tuple[int, int, str]] = []
        self.first: dict[str, Any] | None = None
        self.readable = True
        self.ended = False  # no more events: the stream's end, a line that is not a JSON object, or damage
        self.score_error: list[str] = []

    @property
    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()

    def push(self, item: _Item) -> None:
        self._back.append(item)

    def next(self) -> _Item | None:
        if self._back:
            return self._back.pop()
        if self.ended:
            return None
        try:
            raw = next(self._raw, None)
        except TrajectoryFileError as exc:
            self._unreadable(exc)
            return None
        if raw is None:
            self.ended = True
            return None
        self.lines += 1
        n = self.lines
        self._hash.update(raw)
        if not raw.endswith(b"\n"):
            self.problems.append((n, 0, f"line {n}: the file does not end with a newline"))
        try:
            event = json.loads(raw.rstrip(b"\n"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._stop(n, "not JSON")
        if not isinstance(event, dict):
            return self._stop(n, "not a JSON object")
        ev = cast("dict[str, Any]", event)
        if ev.get("seq") != n - 1 and not self._seq_reported:
            self._seq_reported = True
            self.problems.append((n, 3, seq_problem(n, ev)))
        if self.first is None:
            self.first = ev
        if not self.score_error:
            try:
                self._scorer.feed(ev)
            except (KeyError, TypeError, ValueError, IndexError, ArithmeticError) as exc:
                self.score_error.append(f"the events cannot be scored ({type(exc).__name__}: {exc})")
        return n, raw, ev

    def _stop(self, n: int, what: str) -> None:
        self.problems.append((n, 1, f"line {n}: {what}"))
        self.ended = True

    def _unreadable(self, exc: TrajectoryFileError) -> None:
        self.readable = False
        self.ended = True
        self.problems.append((_LAST, 0, str(exc)))

    def drain(self) -> None:
        """Count and hash what was not read (after a line that stopped the reading)."""
        try:
            for raw in self._raw:
                self.lines += 1
                self._hash.update(raw)
        except TrajectoryFileError as exc:
            self._unreadable(exc)


class _Checked:
    """The events this process walks itself, each line's canonical form checked as it is taken; first those of
    cells a worker checked already (given again from their bytes), then the rest of the stream."""

    def __init__(self, lines: _Lines) -> None:
        self._lines = lines
        self._checked: Iterator[dict[str, Any]] = iter(())
        self.held: tuple[Mapping[str, Any], bytes] | None = None

    def before(self, cells: list[bytes]) -> None:
        self._checked = (
            cast("dict[str, Any]", json.loads(r.rstrip(b"\n"))) for data in cells for r in _lines_of(data)
        )

    def encoded_result(self, event: Mapping[str, Any]) -> bytes:
        return _held_or_encoded(self.held, event)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        ev = next(self._checked, None)
        if ev is not None:
            return ev
        item = self._lines.next()
        if item is None:
            raise StopIteration
        n, raw, ev = item
        line = raw.rstrip(b"\n")
        encoded, result = encode_event(ev)
        self.held = (ev, result) if result is not None else None
        if encoded != line:
            self._lines.problems.append((n, 2, NOT_CANONICAL.format(n=n)))
        return ev


class CellPool(Protocol):
    """Workers that walk cells: :meth:`submit` sends one and returns a handle that waits for its result. The caller
    keeps at most ``workers`` cells in hand."""

    workers: int

    def submit(self, job: CellJob) -> Callable[[], CellResult]: ...


def _ends_cell(ev: Mapping[str, Any], last: bool) -> bool:
    kind = ev.get("type")
    if kind == "cell_start":
        return True
    return last and (kind == "run_end" or (kind == "agent_call" and "probe_item" in ev))


def _dispatch(walk: Walk, lines: _Lines, checked: _Checked, pool: CellPool, cells: int) -> int:
    """Send the cells to the workers and join their results on in order; returns the first cell this process must
    walk itself (``cells`` when the workers walked them all), with ``walk`` where the one-worker walk is there."""
    # each cell in hand: its place, its first line, its line count, its lines, its result
    inflight: deque[tuple[int, int, int, bytes, Callable[[], CellResult]]] = deque()
    redo: list[bytes] = []  # the lines of the cells from the first one this process walks itself
    start: int | None = None

    def gather() -> None:
        nonlocal start
        index, first, count, data, handle = inflight.popleft()
        try:
            result: CellResult | None = handle()
        except WorkerLostError as exc:
            if start is None:
                sys.stderr.write(
                    f"verify: {exc}; cell {index + 1} and those after it are replayed in this process\n"
                )
            result = None
        if result is None:
            if start is None:
                start = index
                walk.pos = first - 1
            redo.append(data)
            return
        lines.problems.extend((n, 2, NOT_CANONICAL.format(n=n)) for n in result.not_canonical)
        if start is None and result.clean:
            for problem in result.problems:
                walk.problem(problem)
            for name, n in result.counts.items():
                walk.counts[name] += n
            for key in result.served:
                walk.served.setdefault(key, None)
            walk.pos = first - 1 + count
            return
        if start is None:
            start = index
            walk.pos = first - 1
        redo.append(data)

    j = 0
    while j < cells and start is None:
        item = lines.next()
        if item is None or item[2].get("type") != "cell_start":
            if item is not None:
                lines.push(item)
            break
        first, raw = item[0], [item[1]]
        count = 1
        while (nxt := lines.next()) is not None:
            if _ends_cell(nxt[2], j == cells - 1):
                lines.push(nxt)
                break
            raw.append(nxt[1])
            count += 1
        data = b"".join(raw)
        del raw[:]
        inflight.append((j, first, count, data, pool.submit(CellJob(j, first, data))))
        j += 1
        while inflight and (len(inflight) >= pool.workers or start is not None):
            gather()
    while inflight:
        gather()
    checked.before(redo)
    return j if start is None else start


def parallel_pass(
    body: Mapping[str, Any], setup: ReplaySetup, traj: Path, scorer: Scorer, pool: CellPool
) -> Pass:
    """The replay's one pass with the cells walked by the workers of ``pool`` (see the module docstring)."""
    cfg, release, calendar = setup.config, setup.release, setup.calendar
    lines = _Lines(traj, line_bound(body), scorer)
    checked = _Checked(lines)
    walk = Walk(checked, cfg, calendar, known=frozenset(release.answer_key.get_column("row_key").to_list()))
    walk.encoded_result = checked.encoded_result
    try:
        indices = walk_head(walk, release, setup.window)
        views = CellViews(setup)
        start = _dispatch(walk, lines, checked, pool, len(views.cells))
        for index in range(start, len(views.cells)):  # from the first cell not walked cleanly by a worker
            if walk.stopped:
                break
            view = views.view(index)
            walk_cell(walk, view, views.sessions(view), views.entries(view))
        walk_tail(walk, release, indices, setup.served)
    except Misaligned as exc:
        walk.problem(str(exc))
    for _ in checked:  # the walk may stop early: every line is still checked and scored
        pass
    lines.drain()
    problems = [text for _, _, text in sorted(lines.problems, key=lambda p: (p[0], p[1]))]
    unreadable = None if lines.readable else problems[-1]
    return Pass(
        problems + walk.problems,
        walk.counts,
        lines.lines,
        lines.digest if lines.readable else None,
        unreadable,
        lines.first,
        lines.score_error,
    )
