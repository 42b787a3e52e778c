"""The PIT run: arms x clocks cells, one agent call per session, the probe, scoring, trajectory and receipt.

The agent never runs in this process: it runs behind the wall, in a fresh jailed process per cell and one for
the probe (:mod:`evalkit.pit._jail`); this process serves its tool and model calls and records each of them.

Nothing wall-clock enters the trajectory or the receipt body: two runs of one configuration over one release
give byte-identical trajectories and bodies.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, cast

import attrs

from evalkit.pit._agents import Agent, AgentReply, AgentSpecError
from evalkit.pit._config import RunConfig
from evalkit.pit._gateway import Gateway
from evalkit.pit._guard import EgressAttempt
from evalkit.pit._jail import AgentError, AgentJail, AgentLimits, AgentProcess, AgentWall, EgressStop
from evalkit.pit._prices import Prices
from evalkit.pit._probe import choose_items, probe_prompt, score_answer
from evalkit.pit._toolbox import CellView, Toolbox
from evalkit_core import (
    ARMS,
    Calendar,
    Clock,
    ConfigError,
    Release,
    atomic_open,
    cache_dir,
    canonical_bytes,
    digest,
    file_digest,
    make_receipt,
    nyse,
    shift_date,
    write_receipt,
)
from evalkit_core.models import Completion, Request

__all__ = ["RECEIPT_VERSION", "RunResult", "run"]

RECEIPT_VERSION = "evalkit-pit-receipt/1"
HARNESS_NAME = "evalkit-pit"
ENTRY_RULE = (
    "long at the opening auction of the pick's session, exit at the open {hold} sessions later; "
    "no costs, no shorts; tickers from the answer key"
)


def _harness_version() -> str:
    try:
        return importlib.metadata.version("evalkit")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


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


class _Trajectory:
    """Canonical JSONL events, written to a temp file renamed into place when the run ends (even on error)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.events = 0

    def emit(self, event: Mapping[str, Any]) -> None:
        self._fh.write(canonical_bytes({"seq": self.events, **event}) + b"\n")
        self.events += 1


class _Stop(Exception):  # noqa: N818 - internal control flow
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _session_prompt(toolbox: Toolbox, hold: int) -> str:
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
        raise ConfigError(f"start {start} is after end {end}")
    if start < w0 or end > w1:
        raise ConfigError(f"window {start}..{end} is outside the release window {w0}..{w1} ({release.root})")
    unknown = sorted(set(config.forms) - set(release.forms))
    if unknown:
        raise ConfigError(f"forms: {', '.join(unknown)} not in the release (it has {', '.join(release.forms)})")
    return start, end


def _protected_paths(config: RunConfig, bundle: Release | None) -> list[Path]:
    """What the agent's jail must never hold: the release, the prices, the outputs, the cache, the store and the
    working directory."""
    from evalkit_core.store import HOME_ENV

    paths = [
        Path(config.bundle_path),
        Path(config.trajectory_path).parent,
        Path(config.receipt_path).parent,
        cache_dir(),
        Path.cwd(),
    ]
    if bundle is not None:
        paths.append(Path(bundle.root))
    if config.prices_path:
        paths.append(Path(config.prices_path))
    paths.append(Path(os.environ.get(HOME_ENV) or ".evalkit"))
    return [p.resolve() for p in paths]


def run(
    agent: Agent,
    config: RunConfig,
    bundle: Release | None = None,
    prices: Prices | None = None,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    limits: AgentLimits | None = None,
    require_network_namespace: bool = False,
) -> RunResult:
    """Run every (arm, clock) cell of ``config`` with ``agent`` and write the trajectory and the receipt.

    ``bundle`` defaults to ``Release.load(config.bundle_path)``; it is narrowed to the config's forms and window.
    ``prices`` may be None: every cell still runs and reports ``total_return: null``. The agent runs behind the
    wall with ``limits`` (:class:`AgentLimits`); with ``require_network_namespace`` the run refuses to start
    (ConfigError) where the wall cannot give the agent a network namespace of its own.
    """
    from evalkit.pit._recipe import recipe_for

    recipe = recipe_for(agent, _protected_paths(config, bundle))
    jail = AgentJail(recipe, network_policy=config.network_policy, limits=limits)
    jail.start_background()
    try:
        return _run(agent, config, bundle, prices, jail, progress, require_network_namespace)
    finally:
        jail.close()


def _run(
    agent: Agent,
    config: RunConfig,
    bundle: Release | None,
    prices: Prices | None,
    jail: AgentJail,
    progress: Callable[[str, int, int], None] | None,
    require_network_namespace: bool,
) -> RunResult:
    release = bundle if bundle is not None else Release.load(config.bundle_path)
    start, end = _check_window(config, release)
    release = release.select(forms=list(config.forms) or None, start=start, end=end)
    calendar = nyse()
    sessions = calendar.between(start, end)
    if not sessions:
        raise ConfigError(f"window {start}..{end} holds no NYSE session")
    if prices is None and config.prices_path:
        from evalkit.pit._prices import load_prices

        prices = load_prices(config.prices_path, source=config.price_source or "", pulled_at=config.prices_pulled_at)
    config_sha = config.digest()
    run_id = "run-" + digest({"config_sha256": config_sha, "bundle_content_digest": release.content_digest})[7:23]
    traj_path = Path(config.trajectory_path)
    receipt_path = Path(config.receipt_path)
    state = _RunState(config, release, calendar, sessions, prices, agent)
    state.jail, state.require_netns = jail, require_network_namespace
    with atomic_open(traj_path) as fh:
        traj = _Trajectory(fh)
        state.traj = traj
        traj.emit(
            {
                "type": "run_start",
                "run_id": run_id,
                "config_sha256": config_sha,
                "config": config.digest_view(),
                "bundle_content_digest": release.content_digest,
                "agent": agent.name,
                "window": {"start": start.isoformat(), "end": end.isoformat()},
                "sessions": len(sessions),
                "rows": release.arm("main").height,
            }
        )
        state.gateway.hold_keys()
        try:
            state.run_cells(progress)
            if not state.stopped:
                state.run_probe()
        finally:
            state.end_process()
            state.gateway.stop()
        traj.emit({"type": "run_end", "valid": state.valid, "invalidated_by": state.invalidated_by})
        events = traj.events
    body = state.body(run_id, config_sha, traj_path, events, file_digest(traj_path), jail.wall, jail.limits)
    receipt = make_receipt(body)
    write_receipt(receipt_path, receipt)
    timings = {
        "agent": jail.agent_seconds,
        "jail_start": jail.start_seconds,
        "spawn": jail.spawn_seconds,
        "processes": float(jail.processes),
    }
    return RunResult(receipt=receipt, receipt_path=receipt_path, trajectory_path=traj_path, timings=timings)


@attrs.define
class _Trade:
    row_key: str
    entry_index: int


class _RunState:
    def __init__(
        self,
        config: RunConfig,
        release: Release,
        calendar: Calendar,
        sessions: Sequence[Any],
        prices: Prices | None,
        agent: Agent,
    ) -> None:
        self.config = config
        self.release = release
        self.calendar = calendar
        self.sessions = sessions
        self.session_indices = [calendar.index_of(s.date) for s in sessions]
        self.prices = prices
        self.agent = agent
        self.traj: _Trajectory
        self.cell_results: list[dict[str, Any]] = []
        self.egress: list[dict[str, Any]] = []
        self.agent_errors: list[dict[str, Any]] = []
        self.stopped = False
        self.served_shifted: dict[str, None] = {}
        self.tool_calls = 0
        self.rows_served = 0
        self.probe: dict[str, Any] = {"verdict": "not_run", "items": []}
        self.where: dict[str, Any] = {}
        answer = release.answer_key
        self.answers: dict[str, dict[str, Any]] = {r["row_key"]: r for r in answer.iter_rows(named=True)}
        # Opening prices of every ticker the answer key names, looked up once for all cells.
        self.opens = prices.opens_for(t for a in self.answers.values() if (t := a.get("ticker"))) if prices else {}
        self.probe_clock = Clock("pit") if "pit" in config.clocks else Clock(config.clocks[-1])
        self.probe_view: CellView | None = None  # the shifted arm's view under the probe clock, kept from its cell
        self.fallback_rows: dict[str, int] = {}
        self.gateway = Gateway()
        self.jail: AgentJail
        self.require_netns = False
        self.proc: AgentProcess | None = None  # the agent's process for the current cell (or the probe)
        self.loaded = False  # whether an agent process has loaded the agent yet
        self.model_spend = Decimal(0)
        self.model_calls = 0
        self.reported_models: set[str] = set()

    # -- models ----------------------------------------------------------------------------------------------

    def model_call(self, model_id: str, request: Request) -> Completion:
        """Forward one model call through the gateway process and record it (no wall-clock, no call id)."""
        from evalkit_core.models import completion_from_json, request_to_json

        self.traj.emit({"type": "model_request", **self.where, "model_id": model_id, "request_sha256": digest(request_to_json(request))})
        completion = completion_from_json(self.gateway.complete(model_id, request_to_json(request)))
        usage = completion.usage
        self.model_spend += completion.cost
        self.model_calls += 1
        self.reported_models.add(completion.reported_model)
        self.traj.emit(
            {
                "type": "model_call",
                **self.where,
                "model_id": completion.model_id,
                "reported_model": completion.reported_model,
                "simulated": completion.simulated,
                "request_digest": completion.request_digest,
                "response_digest": completion.response_digest,
                "registry_digest": completion.registry_digest,
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cache_read_tokens": usage.cache_read_tokens,
                    "cache_write_tokens": usage.cache_write_tokens,
                },
                "cost_usd": str(completion.cost),
                "attempts": completion.attempts,
                "text": completion.text,
                "tool_calls": [{"id": t.id, "name": t.name, "arguments": t.raw_arguments} for t in completion.tool_calls],
            }
        )
        return completion

    # -- events ----------------------------------------------------------------------------------------------

    def on_egress(self, attempt: EgressAttempt) -> None:
        event = {"type": "egress_attempt", **attempt.to_json(), **self.where}
        self.egress.append(event)
        self.traj.emit(event)

    @property
    def valid(self) -> bool:
        return not self.egress and not self.agent_errors

    @property
    def invalidated_by(self) -> list[str]:
        reasons: list[str] = []
        if self.egress:
            reasons.append("network_egress_attempt")
        if self.agent_errors:
            reasons.append("agent_error")
        return reasons

    def _agent_failed(self, exc: AgentError) -> _Stop:
        event = {
            "type": "agent_error",
            "error_type": exc.error_type,
            "message": exc.message[:2000],
            **self.where,
        }
        self.agent_errors.append(event)
        self.traj.emit(event)
        self.stopped = True
        return _Stop("agent_error")

    def _call_agent(self, prompt: str, toolbox: Toolbox) -> AgentReply | None:
        """One session of the agent in its jailed process (a fresh one at the start of each cell and of the
        probe); record errors and egress. Raise _Stop when the run must end."""
        try:
            if self.proc is None:
                self.proc = self._new_process()
            reply = self.proc.session(prompt, toolbox, self.on_egress)
        except EgressStop as stop:
            for attempt in stop.attempts:
                self.on_egress(attempt)
            self.stopped = True
            raise _Stop("network_egress_attempt") from None
        except AgentError as exc:
            raise self._agent_failed(exc) from None
        if self.egress and self.config.network_policy == "abort":
            self.stopped = True
            raise _Stop("network_egress_attempt")
        return reply

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
        main = self.release.arm("main")
        total = len(self.config.arms) * len(self.config.clocks) * len(self.sessions)
        done = 0
        for arm in (a for a in ARMS if a in self.config.arms):
            for clock_name in self.config.clocks:
                clock = Clock(clock_name)
                view = CellView(arm, clock, self.release.arm(arm), main, self.calendar)
                if arm == "shifted" and clock is self.probe_clock:
                    self.probe_view = view
                self.fallback_rows[str(clock)] = view.fallback_rows
                try:
                    result = self._run_cell(view, progress, done, total)
                except _Stop:
                    return
                finally:
                    done += len(self.sessions)
                    self.end_process()
                self.cell_results.append(result)

    def _run_cell(
        self, view: CellView, progress: Callable[[str, int, int], None] | None, done: int, total: int
    ) -> dict[str, Any]:
        arm, clock = view.arm, str(view.clock)
        self.traj.emit({"type": "cell_start", "arm": arm, "clock": clock, "rows": len(view)})
        trades: list[_Trade] = []
        rejected = {"unknown": 0, "not_yet_knowable": 0, "duplicate": 0}
        agent_calls = 0
        for n, (session, s_idx) in enumerate(zip(self.sessions, self.session_indices, strict=True)):
            shown_date = (shift_date(session.date) if arm == "shifted" else session.date).isoformat()
            self.where = {"arm": arm, "clock": clock, "session_date": shown_date}

            def record(tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
                self.tool_calls += 1
                listed = result.get("rows")  # pit_coverage's "rows" is a count, not a list of rows
                n_listed = len(cast("list[object]", listed)) if isinstance(listed, list) else 0
                self.rows_served += n_listed + (1 if "row" in result else 0)
                self.traj.emit({"type": "tool_call", **self.where, "tool": tool, "args": args, "result": result})

            served = self._serve_shifted if arm == "shifted" else None
            toolbox = Toolbox(view, s_idx, record, served, self.model_call)
            prompt = _session_prompt(toolbox, self.config.hold_sessions)
            self.traj.emit({"type": "agent_call", **self.where, "prompt": prompt})
            agent_calls += 1
            reply = self._call_agent(prompt, toolbox)
            assert reply is not None
            accepted: list[str] = []
            refused: list[dict[str, str]] = []
            seen: set[str] = set()
            for key in reply.picks:
                status = toolbox.is_knowable(key)
                if status == "ok" and key in seen:
                    status = "duplicate"
                if status == "ok":
                    seen.add(key)
                    accepted.append(key)
                    trades.append(_Trade(key, s_idx))
                else:
                    rejected[status] += 1
                    refused.append({"row_key": key, "reason": status})
            self.traj.emit({"type": "decision", **self.where, "picks": accepted, "rejected": refused, "text": reply.text})
            if progress is not None:
                progress(f"{arm}/{clock}", done + n + 1, total)
        return self._score_cell(arm, clock, trades, rejected, agent_calls, view)

    def _serve_shifted(self, keys: Sequence[str]) -> None:
        for k in keys:
            self.served_shifted.setdefault(k, None)

    # -- scoring ---------------------------------------------------------------------------------------------

    def _score_cell(
        self, arm: str, clock: str, trades: list[_Trade], rejected: Mapping[str, int], agent_calls: int, view: CellView
    ) -> dict[str, Any]:
        hold = self.config.hold_sessions
        returns: list[float] = []
        unpriced = 0
        lookahead = lookahead_known = 0
        by_form: dict[str, int] = {}
        opens = self.opens
        for t in trades:
            truth = self.answers[t.row_key]
            form = str(truth["form"])
            by_form[form] = by_form.get(form, 0) + 1
            entry = self.calendar.all[t.entry_index]
            accepted: dt.datetime | None = truth.get("acceptance_at")
            if accepted is not None:
                lookahead_known += 1
                if entry.open < accepted:
                    lookahead += 1
            if self.prices is None:
                continue
            exit_index = t.entry_index + hold
            ticker = truth.get("ticker")
            if not ticker or exit_index >= len(self.calendar):
                unpriced += 1
                continue
            p_in = opens.get((ticker, entry.date))
            p_out = opens.get((ticker, self.calendar.all[exit_index].date))
            if p_in is None or p_out is None:
                unpriced += 1
                continue
            returns.append(p_out / p_in - 1.0)
        total_return = round(statistics.fmean(returns), 6) if returns else None
        return {
            "arm": arm,
            "clock": clock,
            "reachable": Clock(clock).reachable,
            "sessions": len(self.sessions),
            "agent_calls": agent_calls,
            "trades": len(trades),
            "scored_trades": len(returns),
            "unpriced_trades": unpriced if self.prices is not None else len(trades),
            "total_return": total_return,
            "lookahead_trades": lookahead,
            "lookahead_checked": lookahead_known,
            "rejected_picks": dict(rejected),
            "trades_by_form": dict(sorted(by_form.items())),
            "rows_in_cell": len(view),
            "pit_fallback_rows": view.fallback_rows if clock == "pit" else 0,
        }

    # -- probe -----------------------------------------------------------------------------------------------

    def run_probe(self) -> None:
        cfg = self.config
        if "shifted" not in cfg.arms or cfg.probe_items == 0:
            reason = "shifted arm not in this run" if "shifted" not in cfg.arms else "probe_items is 0"
            self.probe = {"verdict": "not_run", "reason": reason, "items": [], "stride_rule": _STRIDE_RULE}
            return
        served = list(self.served_shifted)
        items = choose_items(served, cfg.probe_items)
        clock = self.probe_clock
        view = self.probe_view or CellView("shifted", clock, self.release.arm("shifted"), self.release.arm("main"), self.calendar)
        last = self.session_indices[-1]
        scored: list[dict[str, Any]] = []
        for n, key in enumerate(items):
            row = view.render(view.position[key])
            self.where = {"arm": "shifted", "clock": str(clock), "session_date": shift_date(self.sessions[-1].date).isoformat(), "probe_item": n}

            def record(tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
                self.tool_calls += 1
                self.traj.emit({"type": "tool_call", **self.where, "tool": tool, "args": args, "result": result})

            toolbox = Toolbox(view, last, record, None, self.model_call)
            prompt = probe_prompt(row)
            self.traj.emit({"type": "agent_call", **self.where, "prompt": prompt})
            try:
                reply = self._call_agent(prompt, toolbox)
            except _Stop:
                break
            assert reply is not None
            text = reply.text or ""
            score = score_answer(text, self.answers[key])
            item = {"item": n, "row_key": key, "answer": text[:2000], **score}
            scored.append(item)
            self.traj.emit({"type": "probe_item", **item})
        leaks = any(i["date_recovered"] or i["issuer_recovered"] for i in scored)
        self.probe = {
            "verdict": "mask_leaks" if leaks else ("mask_holds" if scored else "not_run"),
            "stride_rule": _STRIDE_RULE,
            "rows_served_in_shifted_arm": len(served),
            "items_asked": len(scored),
            "date_recovered": sum(i["date_recovered"] for i in scored),
            "year_only": sum(i["year_only"] for i in scored),
            "issuer_recovered": sum(i["issuer_recovered"] for i in scored),
            "items": scored,
        }
        if not scored:
            self.probe["reason"] = "no rows were served to the agent in the shifted arm"

    # -- receipt ---------------------------------------------------------------------------------------------

    def body(
        self,
        run_id: str,
        config_sha: str,
        traj_path: Path,
        events: int,
        traj_sha: str,
        wall: AgentWall,
        limits: AgentLimits,
    ) -> dict[str, Any]:
        cfg = self.config
        cells = self.cell_results
        contamination: dict[str, dict[str, float | None]] = {}
        for clock in cfg.clocks:
            main = _total(cells, "main", clock)
            contamination[clock] = {
                "main_minus_shifted": _delta(main, _total(cells, "shifted", clock)),
                "main_minus_redacted": _delta(main, _total(cells, "redacted", clock)),
            }
        window_end = self.sessions[-1].date
        cutoff = dt.date.fromisoformat(cfg.training_cutoff) if cfg.training_cutoff else None
        ends_before_cutoff = (window_end < cutoff) if cutoff else None
        gaps: list[str] = []
        if not cfg.model_version:
            gaps.append("P1_model_version")
        if not cfg.training_cutoff:
            gaps.append("P2_training_cutoffs")
        manifest = self.release.manifest
        prov: Mapping[str, Any] = manifest.get("provenance", {})
        price_statement = self.prices.statement() if self.prices else None
        body: dict[str, Any] = {
            "receipt_version": RECEIPT_VERSION,
            "kind": "pit_run",
            "run_id": run_id,
            "harness": {"name": HARNESS_NAME, "version": _harness_version()},
            "agent": {
                "spec": cfg.agent,
                "name": self.agent.name,
                "wall": wall.to_json(),
                "limits": limits.to_json(),
            },
            "valid": self.valid,
            "invalidated_by": self.invalidated_by,
            "completed": not self.stopped,
            "binding": {
                "bundle_content_digest": self.release.content_digest,
                "config_sha256": config_sha,
                "trajectory_sha256": traj_sha,
                "prices_sha256": self.prices.sha256 if self.prices else None,
            },
            "config": cfg.digest_view(),
            "network": {
                "guard": "recorder_in_agent_jail",
                "policy": cfg.network_policy,
                "clean": not self.egress,
                "egress_attempts": len(self.egress),
                "attempts": [
                    {
                        k: e[k]
                        for k in ("kind", "target", "call_site", "arm", "clock", "session_date")
                        if k in e
                    }
                    for e in self.egress
                ],
                "scope": wall.network,
            },
            "trajectory": {"path": str(traj_path), "events": events, "sha256": traj_sha},
            "window": {"start": self.sessions[0].date.isoformat(), "end": window_end.isoformat(), "sessions": len(self.sessions)},
            "cells": cells,
            "contamination": contamination,
            "probe": self.probe,
            "prices": price_statement,
            "agent_errors": [{k: v for k, v in e.items() if k != "type"} for e in self.agent_errors],
            "protocol": {
                "P1_model_version": {"declared": cfg.model_version, "reported": sorted(self.reported_models)},
                "P2_training_cutoff": {
                    "declared": cfg.training_cutoff,
                    "window_end": window_end.isoformat(),
                    "window_ends_before_cutoff": ends_before_cutoff,
                },
                "P3_retrieval_timestamps": {
                    "tool_calls": self.tool_calls,
                    "rows_served": self.rows_served,
                    "every_answer_carries": ["known_at", "clock", "arm", "session_date"],
                    "every_row_carries": ["known_at", "entry_session"],
                    "pit_fallback_rows": self.fallback_rows.get("pit", 0),
                },
                "P4_costs_and_frictions": {
                    "entry_rule": ENTRY_RULE.format(hold=cfg.hold_sessions),
                    "hold_sessions": cfg.hold_sessions,
                    "costs": "none modelled",
                    "shorts": "none",
                    "price_source": price_statement,
                    "model_spend_usd": str(self.model_spend),
                    "model_calls": self.model_calls,
                },
                "P5_window_provenance": {
                    "release": self.release.name,
                    "content_digest": self.release.content_digest,
                    "release_window": dict(manifest["window"]),
                    "run_window": {"start": self.sessions[0].date.isoformat(), "end": window_end.isoformat()},
                    "forms": list(cfg.forms) or list(self.release.forms),
                    "rows": self.release.arm("main").height,
                    "provenance_kind": prov.get("kind"),
                    "provenance_statement": prov.get("statement"),
                },
                "P6_disaggregation": {
                    "cells": [f"{c['arm']}/{c['clock']}" for c in cells],
                    "trades_by_cell_and_form": {f"{c['arm']}/{c['clock']}": c["trades_by_form"] for c in cells},
                },
            },
            "protocol_complete": not gaps,
            "protocol_gaps": gaps,
            "window_ends_before_cutoff": ends_before_cutoff,
        }
        return body


_STRIDE_RULE = "row_keys served in shifted-arm answers, first-served order, deduplicated; k=min(probe_items,n); stride=n//k; items served[0], served[stride], ..."


def _total(cells: Sequence[Mapping[str, Any]], arm: str, clock: str) -> float | None:
    for c in cells:
        if c["arm"] == arm and c["clock"] == clock:
            return c["total_return"]
    return None


def _delta(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return round(a - b, 6)
