"""Scoring as a pure function of the trajectory's events, the answer key, the calendar and the prices.

The runner feeds every event it writes to a :class:`Scorer`; ``verify`` feeds the events it reads back from the
trajectory file to another one over the release and prices it holds. Both then build the receipt body with
:func:`assemble_body`, so the numbers in a receipt and the numbers a replay recomputes come from one piece of code
and cannot drift apart.

What the scorer reads from the events: ``cell_start`` (arm, clock, rows, fallback_rows), ``agent_call`` (one per
session, in window order; ``probe_item`` marks the probe's), ``decision`` (accepted ``picks`` and ``rejected``
reasons), ``tool_call`` (counts, rows served, the shifted arm's served keys), ``model_call`` (count, ``cost_usd``,
``reported_model``), ``egress_attempt``, ``agent_error`` and ``probe_item`` (its ``answer``; the scores in the
event are recomputed, not read). Everything else (trade entry sessions, look-ahead, returns, probe scores) comes
from the calendar, the answer key and the prices.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, cast

import attrs

from evalkit.pit._config import RECEIPT_NETWORK_POLICY, RunConfig
from evalkit.pit._decoders import run_decoders
from evalkit.pit._entries import AnswerKey
from evalkit.pit._holdout import post_cutoff as holdout_rule
from evalkit.pit._probe import score_answer
from evalkit.pit._serving import ServedMask
from evalkit_core import Calendar, Clock, Release, Session

__all__ = [
    "ENTRY_RULE",
    "HARNESS_NAME",
    "PLAIN_RECEIPT_VERSION",
    "PROBE_ANSWER_CHARS",
    "RECEIPT_KIND",
    "RECEIPT_VERSION",
    "REJECT_REASONS",
    "STRIDE_RULE",
    "AnswerKey",
    "BodyInputs",
    "RunScore",
    "ScoreInputs",
    "Scorer",
    "assemble_body",
    "score_events",
]

# The published shape (docs/pit-harness.md, "The receipt"): an integer, bumped with any change to the body. 3 is a
# run that served the shifted arm with decoys (its cells' decoy_picks, decoders.served); a run without them writes
# the shape of 2, which it still is.
RECEIPT_VERSION = 4  # both masked arms served (decoys, clones): mask_decoys and mask_redacted, the default
SHIFTED_RECEIPT_VERSION = 3  # the shifted arm served with decoys, the redacted arm as released
PLAIN_RECEIPT_VERSION = 2
RECEIPT_KIND = "pit_run"
HARNESS_NAME = "pit-harness"
ENTRY_RULE = (
    "long at the opening auction of the pick's session, exit at the open {hold} sessions later; "
    "no costs, no shorts; tickers from the answer key"
)
STRIDE_RULE = (
    "row_keys served in shifted-arm answers, first-served order, deduplicated; k=min(probe_items,n); "
    "stride=n//k; items served[0], served[stride], ..."
)
REJECT_REASONS = ("unknown", "not_yet_knowable", "duplicate")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
PROBE_ANSWER_CHARS = (
    2000  # how much of each probe answer the receipt body repeats (the trajectory has it whole)
)


@attrs.frozen
class ScoreInputs:
    """What scoring reads besides the events: the run's config, the calendar, the window's session indices,
    the answer key by row_key and, when the run has prices, the opening prices by (ticker, date)."""

    config: RunConfig
    calendar: Calendar
    session_indices: tuple[int, ...]
    answers: Mapping[str, Mapping[str, Any]]
    opens: Mapping[tuple[str, dt.date], float] | None
    # the shifted arm as served with decoys (its own sessions; its decoy picks counted apart)
    served: ServedMask | None = None

    def indices(self, arm: str) -> Sequence[int]:
        """The calendar indices of the sessions a cell of ``arm`` runs."""
        return self.served.indices if self.served is not None and arm == "shifted" else self.session_indices


@attrs.frozen
class RunScore:
    """Everything in a receipt body that is computed from the events."""

    cells: list[dict[str, Any]]
    probe: dict[str, Any]
    egress: list[dict[str, Any]]
    agent_errors: list[dict[str, Any]]
    tool_calls: int
    rows_served: int
    model_calls: int
    model_spend: Decimal
    reported_models: tuple[str, ...]
    fallback_rows: dict[str, int]
    completed: bool

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


@attrs.define
class _Cell:
    arm: str
    clock: str
    rows: int
    fallback_rows: int
    agent_calls: int = 0
    decisions: int = 0
    trades: int = 0
    # the cell's trades tallied as they are decided (a cell holds counts, never its trades): the exact sum of
    # the scored trades' returns (as partials, see _exact_add), how many there are, the unpriced, look-ahead and
    # per-form counts
    partials: list[float] = attrs.field(factory=list[float])
    specials: list[float] = attrs.field(factory=list[float])
    scored: int = 0
    unpriced: int = 0
    lookahead: int = 0
    lookahead_known: int = 0
    by_form: dict[str, int] = attrs.field(factory=dict[str, int])
    rejected: dict[str, int] = attrs.Factory(lambda: dict.fromkeys(REJECT_REASONS, 0))
    # a served shifted cell's picks of decoys or at hidden sessions (never traded); None for any other cell
    decoy_picks: int | None = None


class Scorer:
    """Consumes events in trajectory order (:meth:`feed`) and scores them (:meth:`result`)."""

    def __init__(self, inputs: ScoreInputs) -> None:
        self._in = inputs
        self._cells: list[_Cell] = []
        self._cell: _Cell | None = None
        self._in_probe = False
        self._stopped = False
        self._stopped_in_cells = False
        self._served: dict[str, None] = {}
        self._items: list[dict[str, Any]] = []
        self._egress: list[dict[str, Any]] = []
        self._errors: list[dict[str, Any]] = []
        self._tool_calls = 0
        self._rows_served = 0
        self._model_calls = 0
        self._spend = Decimal(0)
        self._models: set[str] = set()
        self._fallback: dict[str, int] = {}
        answers = inputs.answers
        self._facts: dict[str, tuple[str, int | None, Any]] = answers.facts() if isinstance(answers, AnswerKey) else {}

    def feed(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "cell_start":
            self._cell = _Cell(
                str(event["arm"]), str(event["clock"]), int(event["rows"]), int(event["fallback_rows"])
            )
            if self._in.served is not None and self._in.served.serves(self._cell.arm):
                self._cell.decoy_picks = 0
            self._cells.append(self._cell)
            self._fallback[self._cell.clock] = self._cell.fallback_rows
        elif kind == "agent_call":
            if "probe_item" in event:
                self._in_probe = True
            elif self._cell is not None:
                self._cell.agent_calls += 1
        elif kind == "decision" and self._cell is not None and not self._in_probe:
            cell = self._cell
            indices = self._in.indices(cell.arm)
            if not 0 < cell.agent_calls <= len(indices):
                cell.decisions = -1  # more calls than sessions (not a run the harness writes): never scored
                return
            index = indices[cell.agent_calls - 1]
            picks = [str(k) for k in cast("list[object]", event.get("picks") or [])]
            served = self._in.served
            if served is not None and cell.decoy_picks is not None:
                # accepted, never traded: a decoy, or any pick at a session of the hidden days
                decoys = served.apart(cell.arm)
                apart = [k for k in picks if k in decoys or index not in served.window]
                cell.decoy_picks += len(apart)
                picks = [k for k in picks if k not in decoys and index in served.window]
            self._tally(cell, picks, index)
            for r in cast("list[Mapping[str, Any]]", event.get("rejected") or []):
                reason = str(r.get("reason"))
                cell.rejected[reason] = cell.rejected.get(reason, 0) + 1
            # refusals past the decision's listed sample, counted by reason (docs/pit-harness.md, "Bounds")
            for reason, n in cast("dict[str, int]", event.get("rejected_omitted") or {}).items():
                cell.rejected[str(reason)] = cell.rejected.get(str(reason), 0) + int(n)
            if cell.decisions >= 0:
                cell.decisions += 1
        elif kind == "tool_call":
            self._tool_calls += 1
            if "probe_item" not in event:
                self._tool_call_in_cell(event)
        elif kind == "model_call":
            self._model_calls += 1
            self._spend += Decimal(str(event.get("cost_usd", "0")))
            self._models.add(str(event.get("reported_model")))
        elif kind == "egress_attempt":
            self._egress.append(dict(event))
            if self._in.config.network_policy == "abort":
                self._stop()
        elif kind == "agent_error":
            self._errors.append({k: v for k, v in event.items() if k not in {"type", "seq"}})
            self._stop()
        elif kind == "probe_item":
            self._items.append(dict(event))

    def _stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._stopped_in_cells = not self._in_probe

    def _tool_call_in_cell(self, event: Mapping[str, Any]) -> None:
        result = cast("Mapping[str, Any]", event.get("result") or {})
        listed = result.get("rows")  # pit_coverage's "rows" is a count, not a list of rows
        rows = cast("list[Mapping[str, Any]]", listed) if isinstance(listed, list) else []
        row = result.get("row")
        self._rows_served += len(rows) + (1 if row is not None else 0)
        if event.get("arm") == "shifted":
            keys = [r.get("row_key") for r in rows]
            if isinstance(row, dict):
                keys.append(cast("Mapping[str, Any]", row).get("row_key"))
            # A toolbox the agent tampered with may report keys that do not exist: only real rows count.
            for k in keys:
                if k in self._in.answers:
                    self._served.setdefault(str(k), None)

    # -- results ---------------------------------------------------------------------------------------------

    def result(self) -> RunScore:
        cells = [self._score_cell(c) for c in self._cells if c.decisions == len(self._in.indices(c.arm))]
        return RunScore(
            cells=cells,
            probe=self._probe(),
            egress=[
                {k: e[k] for k in ("kind", "target", "call_site", "arm", "clock", "session_date") if k in e}
                for e in self._egress
            ],
            agent_errors=list(self._errors),
            tool_calls=self._tool_calls,
            rows_served=self._rows_served,
            model_calls=self._model_calls,
            model_spend=self._spend,
            reported_models=tuple(sorted(self._models)),
            fallback_rows=dict(self._fallback),
            completed=not self._stopped,
        )

    def _score_cell(self, cell: _Cell) -> dict[str, Any]:
        opens = self._in.opens
        apart = {"decoy_picks": cell.decoy_picks} if cell.decoy_picks is not None else {}
        # fsum of the partials is the correctly rounded sum of every return: fmean's own sum, to the bit
        mean = round(math.fsum([*cell.partials, *cell.specials]) / cell.scored, 6) if cell.scored else None
        return {
            **apart,
            "arm": cell.arm,
            "clock": cell.clock,
            "reachable": Clock(cell.clock).reachable,
            "sessions": len(self._in.indices(cell.arm)),
            "agent_calls": cell.agent_calls,
            "trades": cell.trades,
            "scored_trades": cell.scored,
            "unpriced_trades": cell.unpriced if opens is not None else cell.trades,
            "total_return": mean,
            "lookahead_trades": cell.lookahead,
            "lookahead_checked": cell.lookahead_known,
            "rejected_picks": dict(cell.rejected),
            "trades_by_form": dict(sorted(cell.by_form.items())),
            "rows_in_cell": cell.rows,
            "pit_fallback_rows": cell.fallback_rows if cell.clock == "pit" else 0,
        }

    def _tally(self, cell: _Cell, picks: Sequence[str], entry_index: int) -> None:
        """Add one decision's trades (all entered at the session ``entry_index``) to the cell's counts: its
        returns, unpriced, look-ahead and per-form counts."""
        cfg, calendar, opens = self._in.config, self._in.calendar, self._in.opens
        sessions = calendar.all
        opened = calendar.opens_us()[entry_index]
        facts, fact = self._facts, self._fact
        by_form = cell.by_form
        exit_index = entry_index + cfg.hold_sessions
        priced = opens is not None and exit_index < len(sessions)
        day_in = sessions[entry_index].date
        day_out = sessions[exit_index].date if priced else day_in
        cell.trades += len(picks)
        for row_key in picks:
            form, accepted, ticker = facts.get(row_key) or fact(row_key)
            by_form[form] = by_form.get(form, 0) + 1
            if accepted is not None:
                cell.lookahead_known += 1
                if opened < accepted:  # the pick's bell came before the filing was accepted
                    cell.lookahead += 1
            if opens is None:
                continue
            if not ticker or not priced:
                cell.unpriced += 1
                continue
            p_in = opens.get((ticker, day_in))
            p_out = opens.get((ticker, day_out))
            if p_in is None or p_out is None:
                cell.unpriced += 1
                continue
            r = p_out / p_in - 1.0
            if math.isfinite(r):
                _exact_add(cell.partials, r)
            else:  # kept apart (fsum of them with the partials gives what fsum of every return gives)
                cell.specials.append(r)
            cell.scored += 1

    def _fact(self, row_key: str) -> tuple[str, int | None, Any]:
        """What scoring a trade of ``row_key`` reads from the answer key: its form, its ``acceptance_at`` in
        microseconds since the epoch (None without one) and its ticker; read once for all the run's cells."""
        truth = self._in.answers[row_key]
        accepted: dt.datetime | None = truth.get("acceptance_at")
        fact = (str(truth["form"]), None if accepted is None else (accepted - _EPOCH) // _MICROSECOND, truth.get("ticker"))
        self._facts[row_key] = fact
        return fact

    def _probe(self) -> dict[str, Any]:
        cfg = self._in.config
        if self._stopped_in_cells:
            return {
                "verdict": "not_run",
                "reason": "the run stopped before the probe",
                "items": [],
                "stride_rule": STRIDE_RULE,
            }
        if "shifted" not in cfg.arms or cfg.probe_items == 0:
            reason = "shifted arm not in this run" if "shifted" not in cfg.arms else "probe_items is 0"
            return {"verdict": "not_run", "reason": reason, "items": [], "stride_rule": STRIDE_RULE}
        scored: list[dict[str, Any]] = []
        for n, event in enumerate(self._items):
            key = str(event.get("row_key"))
            answer = str(event.get("answer") or "")
            score = score_answer(answer, self._in.answers[key])
            scored.append({"item": n, "row_key": key, "answer": answer[:PROBE_ANSWER_CHARS], **score})
        leaks = any(i["date_recovered"] or i["issuer_recovered"] for i in scored)
        probe: dict[str, Any] = {
            "verdict": "mask_leaks" if leaks else ("mask_holds" if scored else "not_run"),
            "stride_rule": STRIDE_RULE,
            "rows_served_in_shifted_arm": len(self._served),
            "items_asked": len(scored),
            "date_recovered": sum(i["date_recovered"] for i in scored),
            "year_only": sum(i["year_only"] for i in scored),
            "issuer_recovered": sum(i["issuer_recovered"] for i in scored),
            "items": scored,
        }
        if not scored:
            probe["reason"] = (
                "no rows were served to the agent in the shifted arm"
                if not self._served
                else "the run stopped before the first probe answer"
            )
        return probe


def _exact_add(partials: list[float], x: float) -> None:
    """Add the finite ``x`` to ``partials``, non-overlapping floats whose sum is exactly the sum of everything added
    so far (Shewchuk's algorithm, the one ``math.fsum`` runs): ``math.fsum(partials)`` is then the correctly rounded
    sum of every ``x``, as ``math.fsum`` of them all gives, in memory that does not grow with their number."""
    i = 0
    for p in partials:
        big, small = (p, x) if abs(x) < abs(p) else (x, p)
        hi = big + small
        lo = small - (hi - big)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


def score_events(events: Iterable[Mapping[str, Any]], inputs: ScoreInputs) -> RunScore:
    """Score a whole event sequence (what ``verify`` does with a trajectory file)."""
    scorer = Scorer(inputs)
    for event in events:
        scorer.feed(event)
    return scorer.result()


# --- the body ------------------------------------------------------------------------------------------------


@attrs.frozen
class BodyInputs:
    """What the body holds besides the score: identities, bindings and the environment of the run."""

    run_id: str
    config: RunConfig
    config_sha256: str
    release: Release  # narrowed to the run's forms and window
    sessions: Sequence[Session]
    prices: Mapping[str, Any] | None  # the price statement: source, pulled_at, sha256
    trajectory_path: str
    trajectory_events: int
    trajectory_sha256: str
    calendar_sha256: str
    network_scope: str
    harness: Mapping[str, Any]
    agent: Mapping[str, Any]
    environment: Mapping[str, Any]
    bounds: Mapping[str, Any] | None = None  # RunBounds.to_json(); None for a receipt written before it existed
    # How the trajectory is stored ("jsonl" or "jsonl+zstd"; the digest is over the canonical stream either way);
    # None for a receipt written before it was recorded (its trajectory is plain JSONL).
    trajectory_encoding: str | None = None
    served: ServedMask | None = None  # the shifted arm as served with decoys (receipt version 3), or None


_MASKS = {"mask_holds": "hold", "mask_leaks": "leak", "not_run": "unproven"}


def _total(cells: Sequence[Mapping[str, Any]], arm: str, clock: str) -> float | None:
    for c in cells:
        if c["arm"] == arm and c["clock"] == clock:
            return c["total_return"]
    return None


def _delta(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return round(a - b, 6)


def _version(served: ServedMask | None) -> int:
    if served is None:
        return PLAIN_RECEIPT_VERSION
    return RECEIPT_VERSION if served.redacted is not None else SHIFTED_RECEIPT_VERSION


def assemble_body(inp: BodyInputs, score: RunScore) -> dict[str, Any]:
    """The receipt body of a run (the runner's) or of its replay (``verify``'s): one function for both."""
    cfg = inp.config
    cells = score.cells
    contamination: dict[str, dict[str, float | None]] = {}
    for clock in cfg.clocks:
        main = _total(cells, "main", clock)
        contamination[clock] = {
            "main_minus_shifted": _delta(main, _total(cells, "shifted", clock)),
            "main_minus_redacted": _delta(main, _total(cells, "redacted", clock)),
        }
    first, window_end = inp.sessions[0].date, inp.sessions[-1].date
    masked = [a for a in cfg.arms if a != "main"]
    decoders = run_decoders(inp.release, masked, (first, window_end), served=inp.served)
    # A mask a decoder breaks does not hold, whatever the agent answered; otherwise the probe decides.
    masks = "leak" if decoders["broken_by"] else _MASKS[score.probe["verdict"]]
    cutoff = dt.date.fromisoformat(cfg.training_cutoff) if cfg.training_cutoff else None
    ends_before_cutoff = (window_end < cutoff) if cutoff else None
    # A holdout only when the whole window comes after the cutoff: a window that touches it is never one.
    post_cutoff = holdout_rule(first, cutoff)
    holdout_models = (
        [{"model": cfg.model_version, "training_cutoff": cfg.training_cutoff,
          "source": cfg.training_cutoff_source, "post_cutoff": post_cutoff}]
        if cutoff
        else []
    )
    gaps: list[str] = []
    if not cfg.model_version:
        gaps.append("P1_model_version")
    if not cfg.training_cutoff:
        gaps.append("P2_training_cutoffs")
    manifest = inp.release.manifest
    prov: Mapping[str, Any] = manifest.get("provenance", {})
    price_statement = dict(inp.prices) if inp.prices is not None else None
    bounds = {"bounds": dict(inp.bounds)} if inp.bounds is not None else {}
    return {
        **bounds,
        "receipt_version": _version(inp.served),
        "kind": RECEIPT_KIND,
        "run_id": inp.run_id,
        "harness": dict(inp.harness),
        "agent": dict(inp.agent),
        "environment": dict(inp.environment),
        "valid": score.valid,
        "invalidated_by": score.invalidated_by,
        "completed": score.completed,
        # What the decoders and the probe showed about the control arms' masks: "leak" when a decoder breaks one
        # or the probe recovered a date or an issuer; "unproven" when no decoder breaks them and the probe did
        # not run (an agent that read nothing through the tools, say): a valid run whose masks were not tested.
        "masks": masks,
        "binding": {
            "bundle_content_digest": inp.release.content_digest,
            "config_sha256": inp.config_sha256,
            "trajectory_sha256": inp.trajectory_sha256,
            "prices_sha256": price_statement["sha256"] if price_statement else None,
            "calendar_sha256": inp.calendar_sha256,
            "harness_source_sha256": inp.harness["source_sha256"],
            "mask_secret_sha256": inp.release.masks.secret_sha256,
        },
        "config": cfg.digest_view(),
        "network": {
            "guard": "recorder_in_agent_jail",  # the guard and an audit hook inside the jail; the kernel blocks
            "policy": RECEIPT_NETWORK_POLICY[cfg.network_policy],
            "clean": not score.egress,
            "egress_attempts": len(score.egress),
            "attempts": score.egress,
            "scope": inp.network_scope,
        },
        "trajectory": {
            "path": inp.trajectory_path,
            "events": inp.trajectory_events,
            "sha256": inp.trajectory_sha256,
            **({"encoding": inp.trajectory_encoding} if inp.trajectory_encoding is not None else {}),
        },
        "window": {"start": first.isoformat(), "end": window_end.isoformat(), "sessions": len(inp.sessions)},
        "cells": cells,
        "contamination": contamination,
        "probe": score.probe,
        "decoders": decoders,
        "prices": price_statement,
        "agent_errors": score.agent_errors,
        "protocol": {
            "P1_model_version": {"declared": cfg.model_version, "reported": list(score.reported_models)},
            "P2_training_cutoff": {
                "declared": cfg.training_cutoff,
                "source": cfg.training_cutoff_source,
                "window_start": first.isoformat(),
                "window_end": window_end.isoformat(),
                "window_ends_before_cutoff": ends_before_cutoff,
                "post_cutoff": post_cutoff,
                "models": holdout_models,
            },
            "P3_retrieval_timestamps": {
                "tool_calls": score.tool_calls,
                "rows_served": score.rows_served,
                "every_answer_carries": ["known_at", "clock", "arm", "session_date"],
                "every_row_carries": ["known_at", "entry_session"],
                "pit_fallback_rows": score.fallback_rows.get("pit", 0),
            },
            "P4_costs_and_frictions": {
                "entry_rule": ENTRY_RULE.format(hold=cfg.hold_sessions),
                "hold_sessions": cfg.hold_sessions,
                "costs": "none modelled",
                "shorts": "none",
                "price_source": price_statement,
                "model_spend_usd": str(score.model_spend),
                "model_calls": score.model_calls,
            },
            "P5_window_provenance": {
                "release": inp.release.name,
                "content_digest": inp.release.content_digest,
                "release_window": dict(manifest["window"]),
                "run_window": {"start": first.isoformat(), "end": window_end.isoformat()},
                "forms": list(cfg.forms) or list(inp.release.forms),
                "rows": inp.release.arm("main").height,
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
