"""The PIT run: arms x clocks cells, one agent call per session, the probe, scoring, trajectory and receipt.

The agent never runs in this process: it runs behind the wall, in a fresh jailed process per cell and one for
the probe (:mod:`evalkit.pit._jail`); this process serves its tool and model calls and records each of them.

Nothing wall-clock enters the trajectory or the receipt body: two runs of one configuration over one release
give byte-identical trajectories and bodies.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from evalkit.pit._agents import Agent, AgentReply, AgentSpecError, host_models
from evalkit.pit._bindings import agent_code, environment, harness_block
from evalkit.pit._bounds import ERROR_CHARS, RunBounds, harness_failure, safe_text
from evalkit.pit._config import RunConfig
from evalkit.pit._decide import decide
from evalkit.pit._entries import AnswerKey, EntryTables
from evalkit.pit._gateway import Gateway
from evalkit.pit._guard import EgressAttempt
from evalkit.pit._jail import AgentError, AgentJail, AgentJailError, AgentLimits, AgentProcess, EgressStop
from evalkit.pit._models_call import record_model_call
from evalkit.pit._prices import Prices
from evalkit.pit._probe import choose_items, probe_prompt, score_answer
from evalkit.pit._score import RECEIPT_VERSION, BodyInputs, ScoreInputs, Scorer, assemble_body
from evalkit.pit._serving import ServedMask, serve_mask
from evalkit.pit._toolbox import CellView, Toolbox, cell_views
from evalkit.pit._trajectory import Trajectory, TrajectoryLimit, result_json, tool_line
from evalkit.pit._trajfile import TrajectorySink, encoding_for
from evalkit_core import (
    ARMS,
    Calendar,
    Clock,
    ConfigError,
    Release,
    ReleaseError,
    Session,
    SigningKey,
    atomic_open,
    cache_dir,
    digest,
    ensure_signing_key,
    make_receipt,
    nyse,
    write_receipt,
)
from evalkit_core.models import Completion, Request

__all__ = ["RECEIPT_VERSION", "CellFailure", "RunResult", "result_json", "run", "tool_line"]


@attrs.frozen
class RunResult:
    """A finished run. ``timings`` (seconds, wall clock, never in the receipt) say where the time went:
    ``agent`` (the agent's own time, measured by the harness while it waited for the agent), ``jail_start``,
    ``spawn`` (making the agent processes) and ``processes`` (how many)."""

    receipt: dict[str, Any]
    receipt_path: Path
    trajectory_path: Path
    timings: Mapping[str, float] = attrs.field(factory=dict[str, float])

    @property
    def body(self) -> dict[str, Any]:
        return self.receipt["body"]

    @property
    def valid(self) -> bool:
        return bool(self.body["valid"])

    def cell(self, arm: str, clock: str) -> dict[str, Any]:
        for c in self.body["cells"]:
            if c["arm"] == arm and c["clock"] == clock:
                return c
        raise KeyError(f"no cell {arm}/{clock} in this run")

    def total_return(self, arm: str, clock: str) -> float | None:
        return self.cell(arm, clock)["total_return"]


class _Stop(Exception):  # noqa: N818 - internal control flow
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CellFailure(Exception):  # noqa: N818 - the cell fails; the name says so
    """The agent made its cell fail in a way the harness names (a bound passed, a reply the protocol refuses):
    recorded as the cell's ``agent_error`` with ``error_type`` and ``message``."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


def session_prompt(toolbox: Toolbox, hold: int) -> str:
    return (
        f"Trading session {toolbox.session_date} (arm {toolbox.arm}, clock {toolbox.clock}). "
        f"It is the opening bell, {toolbox.known_at}. You can call pit_list, pit_search, pit_read and pit_coverage "
        "to see SEC filings knowable now. Reply with the row_keys of filings whose issuers you want to buy at "
        f"today's open; each position is held {hold} sessions. An empty list is a valid answer."
    )


def _check_window(config: RunConfig, release: Release) -> tuple[dt.date, dt.date]:
    w0, w1 = release.window
    start = dt.date.fromisoformat(config.start) if config.start else w0
    end = dt.date.fromisoformat(config.end) if config.end else w1
    if start > end:
        raise config.error("start", f"{start} is after end {end}")
    if start < w0 or end > w1:
        field = "start" if start < w0 else "end"
        raise config.error(field, f"window {start}..{end} is outside the release window {w0}..{w1} ({release.root})")
    unknown = sorted(set(config.forms) - set(release.forms))
    if unknown:
        raise config.error("forms", f"{', '.join(unknown)} not in the release (it has {', '.join(release.forms)})")
    return start, end


def _protected_paths(config: RunConfig, bundle: Release | None) -> list[Path]:
    """What the agent's jail must never hold: the release, the prices, the outputs, the cache, the store and the
    working directory."""
    from evalkit_core.store import HOME_ENV

    paths = [Path(config.bundle_path), Path(config.trajectory_path).parent, Path(config.receipt_path).parent]
    paths += [cache_dir(), Path.cwd(), Path(os.environ.get(HOME_ENV) or ".evalkit")]
    if bundle is not None:
        paths.append(Path(bundle.root))
    if config.prices_path:
        paths.append(Path(config.prices_path))
    return [p.resolve() for p in paths]


def run(
    agent: Agent,
    config: RunConfig,
    bundle: Release | None = None,
    prices: Prices | None = None,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    key: SigningKey | None = None,
    limits: AgentLimits | None = None,
    require_network_namespace: bool = False,
    bounds: RunBounds | None = None,
) -> RunResult:
    """Run every (arm, clock) cell of ``config`` with ``agent`` and write the trajectory and the signed receipt.

    ``bundle`` defaults to ``Release.load(config.bundle_path)``; it is narrowed to the config's forms and window.
    ``prices`` may be None: every cell still runs and reports ``total_return: null``.
    ``key`` signs the receipt; by default the key in ``$EVALKIT_HOME``, created there on first use.
    The agent runs behind the wall with ``limits`` (:class:`AgentLimits`); with ``require_network_namespace``
    the run refuses to start (ConfigError) where the wall cannot give the agent a network namespace of its own.
    ``bounds`` (:class:`RunBounds`) caps what the agent can make the run write or hold; recorded in the receipt.
    Whatever the agent does, the run ends with its trajectory and receipt written: a failure the agent causes is
    its cell's, recorded with the cause (docs/pit-harness.md, "Bounds").
    """
    from evalkit.pit._recipe import recipe_for

    config.check_outputs()
    recipe = recipe_for(agent, _protected_paths(config, bundle))
    jail = AgentJail(recipe, network_policy=config.network_policy, limits=limits)
    jail.start_background()  # overlaps the loading below
    try:
        return _run(agent, config, bundle, prices, jail, progress, key, require_network_namespace, bounds or RunBounds())
    finally:
        jail.close()


def _run(
    agent: Agent,
    config: RunConfig,
    bundle: Release | None,
    prices: Prices | None,
    jail: AgentJail,
    progress: Callable[[str, int, int], None] | None,
    key: SigningKey | None,
    require_network_namespace: bool,
    bounds: RunBounds,
) -> RunResult:
    if bundle is not None:
        release = bundle
    else:
        try:
            release = Release.load(config.bundle_path)
        except ReleaseError as exc:
            raise config.error("bundle_path", str(exc)) from None
    start, end = _check_window(config, release)
    release = release.select(forms=list(config.forms) or None, start=start, end=end)
    calendar = nyse()
    sessions = calendar.between(start, end)
    if not sessions:
        raise config.error("start", f"window {start}..{end} holds no NYSE session")
    if prices is None and config.prices_path:
        from evalkit.pit._prices import load_prices

        prices = load_prices(config.prices_path, source=config.price_source or "", pulled_at=config.prices_pulled_at)
    signer = key if key is not None else ensure_signing_key()[0]
    config_sha = config.digest()
    run_id = run_id_for(config_sha, release.content_digest)
    traj_path = Path(config.trajectory_path)
    receipt_path = Path(config.receipt_path)
    served = served_for(config, release, (start, end), calendar)
    state = _RunState(config, release, calendar, sessions, prices, agent, bounds, served)
    state.jail, state.require_netns = jail, require_network_namespace
    with atomic_open(traj_path) as fh:
        sink = TrajectorySink(fh, encoding_for(traj_path))
        traj = Trajectory(sink, state.scorer, bounds)
        state.traj = traj
        traj.emit(run_start_event(run_id, config, release, agent.name, start, end, len(sessions)))
        state.gateway.hold_keys()
        try:
            state.run_cells(progress)
            if not state.stopped:
                state.run_probe()
        finally:
            state.end_process()
            state.gateway.stop()
        score = state.scorer.result()
        traj.emit_final({"type": "run_end", "valid": score.valid, "invalidated_by": score.invalidated_by})
        events = traj.events
        sink.finish()
    traj_sha = sink.digest  # of the canonical stream, as written (compressed or not)
    inputs = BodyInputs(
        run_id=run_id,
        config=config,
        config_sha256=config_sha,
        release=release,
        sessions=sessions,
        prices=prices.statement() if prices is not None else None,
        trajectory_path=str(traj_path),
        trajectory_events=events,
        trajectory_sha256=traj_sha,
        trajectory_encoding=sink.encoding,
        calendar_sha256=calendar.digest,
        network_scope=jail.wall.network,  # measured from the host when the jail started
        harness=harness_block(),
        agent={
            "spec": config.agent,
            "name": agent.name,
            "code": agent_code(config.agent, agent.name),
            "wall": jail.wall.to_json(),
            "limits": jail.limits.to_json(),
        },
        environment=environment(),
        bounds=bounds.to_json(),
        served=served,
    )
    receipt = make_receipt(assemble_body(inputs, state.scorer.result()), key=signer)
    write_receipt(receipt_path, receipt)
    timings = {
        "agent": jail.agent_seconds,
        "jail_start": jail.start_seconds,
        "spawn": jail.spawn_seconds,
        "processes": float(jail.processes),
    }
    return RunResult(receipt=receipt, receipt_path=receipt_path, trajectory_path=traj_path, timings=timings)


def run_id_for(config_sha256: str, bundle_content_digest: str) -> str:
    return "run-" + digest({"config_sha256": config_sha256, "bundle_content_digest": bundle_content_digest})[7:23]


def run_start_event(
    run_id: str, config: RunConfig, release: Release, agent_name: str, start: dt.date, end: dt.date, sessions: int
) -> dict[str, Any]:
    """The first event of a trajectory (``verify`` rebuilds it from the receipt's config and the release)."""
    return {
        "type": "run_start",
        "run_id": run_id,
        "config_sha256": config.digest(),
        "config": config.digest_view(),
        "bundle_content_digest": release.content_digest,
        "agent": agent_name,
        "window": {"start": start.isoformat(), "end": end.isoformat()},
        "sessions": sessions,
        "rows": release.arm("main").height,
    }


class _RunState:
    def __init__(
        self,
        config: RunConfig,
        release: Release,
        calendar: Calendar,
        sessions: Sequence[Any],
        prices: Prices | None,
        agent: Agent,
        bounds: RunBounds,
        served: ServedMask | None = None,
    ) -> None:
        self.config = config
        self.served = served  # the masked arms as served with decoys (RunConfig.mask_decoys), or None
        self.bounds = bounds
        self.release = release
        self.calendar = calendar
        self.sessions = sessions
        self.session_indices = [calendar.index_of(s.date) for s in sessions]
        self.prices = prices
        self.agent = agent
        self.traj: Trajectory
        self.egress: list[dict[str, Any]] = []
        self.stopped = False
        self.served_shifted: dict[str, None] = {}
        self.where: dict[str, Any] = {}
        self.toolbox: Toolbox | None = None  # the session's (or probe item's) toolbox: its calls are recorded
        answers = AnswerKey(release.answer_key)
        self.answers = answers
        self.tables = EntryTables(release, calendar, served)  # made as cells need them, dropped once none will
        self.probe_clock = probe_clock(config)
        self.gateway = Gateway(host_models(agent))
        self.jail: AgentJail
        self.require_netns = False
        self.proc: AgentProcess | None = None  # the agent's process for the current cell (or the probe)
        self.loaded = False  # whether an agent process has loaded the agent yet
        # Everything the body reports is computed from the events by the scorer (verify runs the same one).
        opens = opens_for(prices, answers)
        inputs = ScoreInputs(config, calendar, tuple(self.session_indices), answers, opens, served)
        self.scorer = Scorer(inputs)

    # -- models ----------------------------------------------------------------------------------------------

    def model_call(self, model_id: str, request: Request) -> Completion:
        """Forward one model call through the gateway process and record it (:func:`record_model_call`)."""
        return record_model_call(self.traj, self.where, self.gateway, model_id, request)

    # -- events ----------------------------------------------------------------------------------------------

    def record(self, tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        """Record one tool call of the current toolbox (its rows spliced in as the toolbox encoded them)."""
        event = {"type": "tool_call", **self.where, "tool": tool, "args": args, "result": result}
        # written once the answer is on its way to the agent (or before the next event, whichever comes first)
        self.traj.defer(event, self.toolbox.rows_json if self.toolbox is not None else None)

    def on_egress(self, attempt: EgressAttempt) -> None:
        if len(self.egress) >= self.bounds.egress_events:
            raise CellFailure("AgentLimit", f"more than {self.bounds.egress_events} network attempts in one run")
        fields = {k: (safe_text(v, 1000) if v is not None else None) for k, v in attempt.to_json().items()}
        event = {"type": "egress_attempt", **fields, **self.where}
        self.egress.append(event)
        self.traj.emit(event)

    def _call_agent(self, prompt: str, toolbox: Toolbox) -> AgentReply:
        """One session of the agent in its jailed process (a fresh one at the start of each cell and of the
        probe); record errors and egress. Raise _Stop when the run must end; CellFailure for a reply the run
        refuses (its text past the bound, or not text)."""
        try:
            if self.proc is None:
                self.proc = self._new_process()
            reply = self.proc.session(prompt, toolbox, self.on_egress, self.traj.flush)
        except EgressStop as stop:
            for attempt in stop.attempts:
                self.on_egress(attempt)
            self.stopped = True
            raise _Stop("network_egress_attempt") from None
        except AgentError as exc:
            self._record_failure(exc.error_type, exc.message, exc.raised_by)
            raise _Stop("agent_error") from None
        if self.egress and self.config.network_policy == "abort":
            self.stopped = True
            raise _Stop("network_egress_attempt")
        text = reply.text
        if text is not None:
            if type(text) is not str:
                raise CellFailure("AgentProtocolError", "the reply's text is not a string")
            if len(text) > self.bounds.reply_chars:
                raise CellFailure(
                    "AgentLimit", f"the reply's text has {len(text)} characters; the bound is {self.bounds.reply_chars}"
                )
            if safe_text(text, len(text)) != text:
                raise CellFailure("AgentProtocolError", "the reply's text holds a lone surrogate (it is not Unicode text)")
        return reply

    def _record_failure(self, error_type: str, message: str, raised_by: str = "harness") -> None:
        """The current cell (or probe item) failed: one bounded ``agent_error`` event, written even past the
        trajectory's bound; the run stops there and is invalid. ``raised_by`` says who named the cause: the harness
        (its own causes), or the agent (``error_type`` is then the class name of what it raised, which it chooses
        and may make read like one of the harness's)."""
        self.stopped = True
        event = {
            "type": "agent_error",
            "error_type": safe_text(error_type, 100) or "Error",
            "message": safe_text(message, ERROR_CHARS),
            "raised_by": "agent" if raised_by == "agent" else "harness",
            **self.where,
        }
        self.traj.emit_final(event)

    def contain(self, exc: Exception) -> None:
        """The one place a failure the agent caused in the harness's own code becomes its cell's: a CellFailure
        with its named cause, a trajectory past its bound, or any other exception, recorded with its type and a
        bounded message (a harness bug is recorded, never swallowed). A failure that is the caller's (the agent
        cannot be loaded, the wall never started, ``--netns`` cannot be had: all found before the agent first runs)
        is raised as it was."""
        if not self.loaded and isinstance(exc, ConfigError | AgentSpecError | AgentJailError):
            raise exc
        if isinstance(exc, CellFailure):
            self._record_failure(exc.error_type, exc.message)
        elif isinstance(exc, TrajectoryLimit):
            self._record_failure("TrajectoryLimit", str(exc))
        else:
            self._record_failure("HarnessError", "the harness failed on this agent's input: " + harness_failure(exc))

    def _new_process(self) -> AgentProcess:
        """A fresh agent process. The first one of the run proves the agent loads: if it cannot, or the wall
        cannot give what the caller required, that is the caller's error, raised out of the run before its
        trajectory is renamed into place (the jail started while the harness loaded; this waits for it)."""
        if self.loaded:
            return self.jail.process()
        self.jail.ready()
        if self.require_netns and not self.jail.wall.own_network_namespace:
            raise ConfigError(f"--netns: this machine cannot give the agent a network namespace ({self.jail.wall.network})")
        try:
            proc = self.jail.process()
        except AgentError as exc:
            raise AgentSpecError(
                f"agent {self.agent.name!r} cannot be loaded inside its jail: {exc.error_type}: {exc.message}"
            ) from None
        self.loaded = True
        return proc

    def end_process(self) -> None:
        """End the agent's process: nothing it remembers reaches the next cell."""
        if self.proc is not None:
            self.proc.close()
            self.proc = None

    # -- cells -----------------------------------------------------------------------------------------------

    def run_cells(self, progress: Callable[[str, int, int], None] | None) -> None:
        hidden = len(self.served.sessions) - len(self.sessions) if self.served is not None else 0
        total = (len(self.config.arms) * len(self.sessions) + hidden) * len(self.config.clocks)
        done = 0
        arms = [a for a in ARMS if a in self.config.arms]
        for view in cell_views(self.release, arms, self.config.clocks, self.calendar, self.served):
            self.tables.keep(arms[arms.index(view.arm) :])
            try:
                self._run_cell(view, progress, done, total)
            except _Stop:
                return
            except Exception as exc:  # contained: recorded as this cell's failure (or re-raised)
                self.contain(exc)
                return
            finally:
                done += len(self.sessions) + (hidden if view.arm == "shifted" else 0)
                self.end_process()
                self.toolbox = None
            # the next view is built while this one is unreferenced: a cell's memory is one view, not two
            del view

    def _run_cell(self, view: CellView, progress: Callable[[str, int, int], None] | None, done: int, total: int) -> None:
        arm, clock = view.arm, str(view.clock)
        # Facts about the cell taken before the agent holds the view: what it does to its tools changes nothing here.
        self.traj.new_cell()
        self.traj.emit(cell_start_event(view))
        sessions, indices = cell_sessions(view, self.sessions, self.session_indices, self.served)
        for n, (session, s_idx) in enumerate(zip(sessions, indices, strict=True)):
            shown_date = (view.shift.session_date(session.date) if view.shift is not None else session.date).isoformat()
            self.where = {"arm": arm, "clock": clock, "session_date": shown_date}
            served = self._serve_shifted if arm == "shifted" else None
            toolbox = self.toolbox = Toolbox(view, s_idx, self.record, served, self.model_call, render_rows=False)
            prompt = session_prompt(toolbox, self.config.hold_sessions)
            self.traj.emit({"type": "agent_call", **self.where, "prompt": prompt})
            reply = self._call_agent(prompt, toolbox)
            # The harness decides, from its own entry table (never from the toolbox the agent was handed): a row
            # that does not exist or is not knowable at this bell is refused, counted and never traded.
            decision = decide(reply.picks, self.entries(view), s_idx, self.bounds)
            self.traj.emit({"type": "decision", **self.where, **decision.to_json(), "text": reply.text})
            if progress is not None:
                progress(f"{arm}/{clock}", done + n + 1, total)

    def entries(self, view: CellView) -> Mapping[str, int]:
        """row_key -> entry session index under the view's clock, computed from the release's main arm (a served
        arm's: its main-side rows, decoys' or clones' included), never from anything the agent was handed."""
        return self.tables.of(view.arm, view.clock)

    def _serve_shifted(self, keys: Sequence[str]) -> None:
        for k in keys:
            if k in self.answers:  # a toolbox the agent tampered with may report keys that do not exist
                self.served_shifted.setdefault(k, None)

    # -- probe -----------------------------------------------------------------------------------------------

    def run_probe(self) -> None:
        """Ask the probe's questions; the verdict and the item scores are the scorer's (from the events). A failure
        the agent causes in an item is contained as a cell's is."""
        cfg = self.config
        if "shifted" not in cfg.arms or cfg.probe_items == 0:
            return
        served = list(self.served_shifted)
        items = choose_items(served, cfg.probe_items)
        clock = self.probe_clock
        # A view of the harness's own, not the one the shifted cell's agent held (and may have changed).
        view = probe_view(self.release, clock, self.calendar, self.served)
        last = self.served.indices[-1] if self.served is not None else self.session_indices[-1]
        shown = view.shift.session_date(self.calendar.all[last].date) if view.shift is not None else None
        self.traj.new_cell()
        for n, key in enumerate(items):
            row = view.render(view.position[key])
            self.where = {"arm": "shifted", "clock": str(clock), "session_date": str(shown), "probe_item": n}
            try:
                self._probe_item(view, last, n, key, row)
            except _Stop:
                break
            except Exception as exc:  # contained: recorded as the probe's failure (or re-raised)
                self.contain(exc)
                break

    def _probe_item(self, view: CellView, last: int, n: int, key: str, row: Mapping[str, Any]) -> None:
        toolbox = self.toolbox = Toolbox(view, last, self.record, None, self.model_call, render_rows=False)
        prompt = probe_prompt(dict(row))
        self.traj.emit({"type": "agent_call", **self.where, "prompt": prompt})
        reply = self._call_agent(prompt, toolbox)
        text = reply.text or ""
        # The whole answer goes in the trajectory (the body repeats its first characters): what was scored is
        # what a replay scores.
        self.traj.emit({"type": "probe_item", "item": n, "row_key": key, "answer": text, **score_answer(text, self.answers[key])})


def served_for(
    config: RunConfig, release: Release, window: tuple[dt.date, dt.date], calendar: Calendar
) -> ServedMask | None:
    """The masked arms as served when the config asks (``mask_decoys``, ``mask_redacted``) and runs the shifted
    arm; the config's error (naming ``mask_decoys``) for a release without a mask secret."""
    if not config.mask_decoys or "shifted" not in config.arms:
        return None
    try:
        return serve_mask(release, window, calendar, redacted=config.mask_redacted and "redacted" in config.arms)
    except ReleaseError as exc:
        raise config.error("mask_decoys", str(exc)) from None


def cell_sessions(
    view: CellView, sessions: Sequence[Session], indices: Sequence[int], served: ServedMask | None
) -> tuple[Sequence[Session], Sequence[int]]:
    """The sessions a cell runs: the window's, or for a served shifted arm the hidden days' around them too."""
    if view.arm == "shifted" and served is not None:
        return served.sessions, served.indices
    return sessions, indices


def probe_view(release: Release, clock: Clock, calendar: Calendar, served: ServedMask | None) -> CellView:
    """The probe's view of the shifted arm (as its cells served it), built by the harness, never the agent's."""
    if served is not None:
        return CellView("shifted", clock, served.arm, served.main, calendar, served.shift, by_shown=True)
    return CellView("shifted", clock, release.arm("shifted"), release.arm("main"), calendar, release.shift)


def cell_start_event(view: CellView) -> dict[str, Any]:
    return {"type": "cell_start", "arm": view.arm, "clock": str(view.clock), "rows": len(view), "fallback_rows": view.fallback_rows}


def probe_clock(config: RunConfig) -> Clock:
    """The clock whose shifted-arm cell the probe's rows come from: pit when the run has it, else the last."""
    return Clock("pit") if "pit" in config.clocks else Clock(config.clocks[-1])


def answers_by_key(release: Release) -> dict[str, dict[str, Any]]:
    """The answer key's rows by row_key (built from whole columns: polars' row iterator costs several times more)."""
    frame = release.answer_key
    names = frame.columns
    columns = [frame.get_column(name).to_list() for name in names]
    rows = [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    return dict(zip(frame.get_column("row_key").to_list(), rows, strict=True))


def opens_for(prices: Prices | None, answers: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, dt.date], float] | None:
    """Opening prices of every ticker the answer key names (looked up once for all cells); None without prices."""
    if prices is None:
        return None
    if isinstance(answers, AnswerKey):
        return prices.opens_for(answers.tickers())
    return prices.opens_for(t for a in answers.values() if (t := a.get("ticker")))
