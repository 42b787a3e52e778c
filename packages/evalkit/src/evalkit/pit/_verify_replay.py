"""The replay behind ``verify``: a receipt's body recomputed from the trajectory, the release, the calendar and the
prices, with the runner's own scoring and body code.

The trajectory is read in one pass that hashes the stream, checks every line (JSON, canonical form, ``seq``),
feeds the scorer and walks the run (:mod:`evalkit.pit._replay`). With one worker the walk runs here, on the events
as they are read; with more (:mod:`evalkit.pit._verify_cells`) each cell's lines go to a worker process (or a Ray
actor) that checks and walks them, and the results are gathered in the run's order into the same :class:`Replay`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

from evalkit.pit._trajectory import spliced_line
from evalkit.pit._trajfile import TrajectoryFileError, line_bound, trajectory_lines
from evalkit_core import Calendar, EvalkitError, Release, Session, canonical_bytes

if TYPE_CHECKING:
    from evalkit.pit._config import RunConfig
    from evalkit.pit._score import Scorer
    from evalkit.pit._serving import ServedMask

__all__ = [
    "NOT_CANONICAL",
    "Pass",
    "Replay",
    "ReplaySetup",
    "Walker",
    "encode_event",
    "replay_body",
    "replay_setup",
    "seq_problem",
    "serial_pass",
]


class _EventReader:
    """The events of a trajectory file (plain or compressed), one line at a time, noting what is wrong with the
    lines (not JSON, not canonical, seq gaps, a damaged compressed file) in ``problems``. Reading stops at a line
    that is not a JSON object; :meth:`drain` then counts and hashes the rest of the stream, so that ``lines`` and
    ``digest`` are the whole stream's without reading the file again."""

    def __init__(self, path: Path, max_line: int | None = None) -> None:
        self.path = path
        self.problems: list[str] = []
        self.lines = 0
        self.first: dict[str, Any] | None = None
        self._hash = hashlib.sha256()
        self._raw = trajectory_lines(path, max_line)
        self.readable = True
        # the last tool_call event read, with its result's canonical bytes (encoded once, for the replay's compare)
        self.held: tuple[Mapping[str, Any], bytes] | None = None

    def encoded_result(self, event: Mapping[str, Any]) -> bytes:
        """``canonical_bytes(event["result"])``, taken from the line's own check when ``event`` is the last read."""
        held = self.held
        if held is not None and held[0] is event:
            return held[1]
        return canonical_bytes(event.get("result"))

    @property
    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()

    def drain(self) -> None:
        """Count and hash what was not read (after a line that stopped the reading)."""
        try:
            for raw in self._raw:
                self.lines += 1
                self._hash.update(raw)
        except TrajectoryFileError as exc:
            self._unreadable(exc)

    def _unreadable(self, exc: TrajectoryFileError) -> None:
        self.readable = False
        self.problems.append(str(exc))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            yield from self._events()
        except TrajectoryFileError as exc:
            self._unreadable(exc)

    def _events(self) -> Iterator[dict[str, Any]]:
        seq_reported = False
        for raw in self._raw:
            self.lines += 1
            n = self.lines
            self._hash.update(raw)
            if not raw.endswith(b"\n"):
                self.problems.append(f"line {n}: the file does not end with a newline")
            line = raw.rstrip(b"\n")
            try:
                event = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.problems.append(f"line {n}: not JSON")
                return
            if not isinstance(event, dict):
                self.problems.append(f"line {n}: not a JSON object")
                return
            ev = cast("dict[str, Any]", event)
            encoded, result = encode_event(ev)
            self.held = (ev, result) if result is not None else None
            if encoded != line:
                self.problems.append(NOT_CANONICAL.format(n=n))
            if ev.get("seq") != n - 1 and not seq_reported:
                seq_reported = True
                self.problems.append(seq_problem(n, ev))
            if self.first is None:
                self.first = ev
            yield ev


NOT_CANONICAL = "line {n}: not in canonical form (the harness writes RFC 8785 JSON)"


def seq_problem(n: int, ev: Mapping[str, Any]) -> str:
    """The problem of line ``n`` whose ``seq`` is not ``n - 1`` (reported for the first such line only)."""
    return f"line {n}: seq is {ev.get('seq')!r}, expected {n - 1} (a line was dropped, added or moved)"


def encode_event(ev: Mapping[str, Any]) -> tuple[bytes, bytes | None]:
    """``canonical_bytes(ev)``, and for a tool call its result's canonical bytes too (the replay compares them with
    the answer it re-serves: the biggest value of the trajectory is then encoded once, not twice)."""
    result = ev.get("result")
    if ev.get("type") != "tool_call" or not isinstance(result, dict):
        return canonical_bytes(ev), None
    result_bytes = canonical_bytes(cast("dict[str, Any]", result))
    try:
        return spliced_line(ev, result_bytes.decode()), result_bytes
    except ValueError:  # a key canonical_object does not take (not a line the harness writes)
        return canonical_bytes(ev), None


@attrs.frozen
class Replay:
    """What a replay recomputed: the body (None when it could not run), what is wrong with the trajectory,
    how much was re-served, and whether returns were recomputed (a price file was given)."""

    body: dict[str, Any] | None
    problems: list[str]
    counts: dict[str, int]
    cells: int
    events: int
    error: str | None = None
    priced: bool = False
    digest: str | None = None  # of the whole stream, when the replay read it to its end
    unreadable: str | None = None  # why the file could not be read to its end (a damaged compressed stream)


@attrs.frozen
class ReplaySetup:
    """What a replay walks against: the receipt's config, the release narrowed to the run's forms and window, the
    calendar (from the library, never a cache), the window's sessions, and the shifted arm as the run served it
    with decoys (``mask_decoys``: rebuilt from the release's secret; None otherwise)."""

    config: RunConfig
    release: Release
    window: tuple[Any, Any]
    calendar: Calendar
    sessions: list[Session]
    served: ServedMask | None = None


def replay_setup(body: Mapping[str, Any], bundle: str | Path) -> ReplaySetup:
    """The config the receipt records, over the release at ``bundle`` (read from its JSONL, never the cache)."""
    from evalkit.pit._config import RunConfig
    from evalkit.pit._runner import _check_window, served_for  # pyright: ignore[reportPrivateUsage]
    from evalkit_core import nyse

    recorded = cast("dict[str, Any]", body["config"])
    config = RunConfig.from_recorded({**recorded, "bundle_path": str(bundle)})
    release = Release.load(bundle, use_cache=False)
    start, end = _check_window(config, release)
    release = release.select(forms=list(config.forms) or None, start=start, end=end)
    calendar = nyse(use_cache=False)
    served = served_for(config, release, (start, end), calendar)
    return ReplaySetup(config, release, (start, end), calendar, list(calendar.between(start, end)), served)


@attrs.define
class Pass:
    """What the one pass over the trajectory found: the lines' problems then the walk's, what was re-served, the
    stream's line count and digest (None when it could not be read to its end, and then ``unreadable`` says why),
    the first event, and why the events could not be scored (empty when they could)."""

    problems: list[str]
    counts: dict[str, int]
    lines: int
    digest: str | None
    unreadable: str | None
    first: dict[str, Any] | None
    score_error: list[str]


# The one pass over the trajectory: (receipt body, setup, trajectory, scorer) -> what it found.
Walker = Callable[[Mapping[str, Any], ReplaySetup, Path, "Scorer"], Pass]


def serial_pass(body: Mapping[str, Any], setup: ReplaySetup, traj: Path, scorer: Scorer) -> Pass:
    """The pass with the walk in this process, on the events as they are read."""
    from evalkit.pit._replay import replay_trajectory

    reader = _EventReader(traj, line_bound(body))
    score_error: list[str] = []

    def scored() -> Iterator[dict[str, Any]]:
        # One pass over the file feeds the walk and the scorer alike.
        for event in reader:
            if not score_error:
                try:
                    scorer.feed(event)
                except (KeyError, TypeError, ValueError, IndexError, ArithmeticError) as exc:
                    score_error.append(f"the events cannot be scored ({type(exc).__name__}: {exc})")
            yield event

    stream = scored()
    walk_problems, counts = replay_trajectory(
        stream,
        setup.config,
        setup.release,
        setup.calendar,
        setup.window,
        encoded_result=reader.encoded_result,
        served=setup.served,
    )
    for _ in stream:  # the walk may stop early: the scorer still sees every event
        pass
    reader.drain()
    return Pass(
        reader.problems + walk_problems,
        counts,
        reader.lines,
        reader.digest if reader.readable else None,
        None if reader.readable else reader.problems[-1],
        reader.first,
        score_error,
    )


def replay_body(
    body: Mapping[str, Any],
    trajectory: str | Path,
    bundle: str | Path,
    prices: str | Path | None = None,
    *,
    walker: Walker | None = None,
) -> Replay:
    """Recompute a receipt body from the trajectory, the release (read from its JSONL, never the cache), the
    calendar (from the library), the prices and the config the receipt records, with the runner's own scoring
    and body code. Fields the run measured and a replay cannot (network scope, harness, environment, the agent's
    spec and code, the trajectory's path) are copied from ``body``.

    ``walker`` makes the pass over the trajectory (default: in this process, on one core);
    :func:`evalkit.pit._verify_pools.walker` gives one that walks the cells on several processes or Ray actors,
    with the same result."""
    from evalkit.pit._entries import AnswerKey
    from evalkit.pit._prices import load_prices
    from evalkit.pit._runner import opens_for, run_id_for
    from evalkit.pit._score import BodyInputs, ScoreInputs, Scorer, assemble_body

    traj = Path(trajectory)
    try:
        setup = replay_setup(body, bundle)
        statement = body.get("prices")
        loaded = None
        if prices is not None and isinstance(statement, dict):
            stmt = cast("dict[str, Any]", statement)
            loaded = load_prices(
                prices, source=str(stmt.get("source") or ""), pulled_at=stmt.get("pulled_at")
            )
    except (KeyError, TypeError, AttributeError, EvalkitError) as exc:
        return Replay(None, [], {}, 0, 0, error=f"cannot replay: {exc}")
    config, release, calendar, sessions = setup.config, setup.release, setup.calendar, setup.sessions

    answers = AnswerKey(release.answer_key)
    session_indices = tuple(calendar.index_of(s.date) for s in sessions)
    scorer = Scorer(ScoreInputs(config, calendar, session_indices, answers, opens_for(loaded, answers), setup.served))
    found = (walker if walker is not None else serial_pass)(body, setup, traj, scorer)
    problems, score_error = found.problems, found.score_error
    if found.unreadable is not None and not score_error:
        score_error.append(found.unreadable)
    score = None
    if not score_error:
        try:
            score = scorer.result()
        except (KeyError, TypeError, ValueError, IndexError, ArithmeticError) as exc:
            score_error.append(f"the events cannot be scored ({type(exc).__name__}: {exc})")
    digest_read, unreadable = found.digest, found.unreadable
    if score is None:
        return Replay(
            None,
            problems,
            found.counts,
            0,
            found.lines,
            error=score_error[0],
            digest=digest_read,
            unreadable=unreadable,
        )
    first = found.first or {}
    agent = dict(cast("dict[str, Any]", body.get("agent") or {}))
    # The name the trajectory recorded; the spec and code are the receipt's.
    agent["name"] = first.get("agent")
    inputs = BodyInputs(
        run_id=run_id_for(config.digest(), release.content_digest),
        config=config,
        config_sha256=config.digest(),
        release=release,
        sessions=sessions,
        prices=loaded.statement() if loaded is not None else None,
        trajectory_path=str(_get(body, "trajectory", "path")),
        trajectory_events=found.lines,
        trajectory_sha256=cast("str", digest_read),
        trajectory_encoding=cast("str | None", _get(body, "trajectory", "encoding")),  # how the run stored it
        calendar_sha256=calendar.digest,
        network_scope=str(_get(body, "network", "scope")),
        harness=cast("dict[str, Any]", body.get("harness") or {"source_sha256": None}),
        agent=agent,
        environment=cast("dict[str, Any]", body.get("environment") or {}),
        bounds=cast("dict[str, Any]", body["bounds"]) if isinstance(body.get("bounds"), dict) else None,
        served=setup.served,
    )
    replayed = assemble_body(inputs, score)
    return Replay(replayed, problems, found.counts, len(score.cells), found.lines, priced=loaded is not None,
                  digest=digest_read, unreadable=unreadable)  # fmt: skip


def _get(body: Mapping[str, Any], *path: str) -> Any:
    value: Any = body
    for p in path:
        if not isinstance(value, dict):
            return None
        value = cast("dict[str, Any]", value).get(p)
    return value
