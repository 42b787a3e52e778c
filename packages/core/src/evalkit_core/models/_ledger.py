"""The call's rows in the store: one transaction reserves an attempt's worst case (writing the pending call row
on the first attempt, refusing with ``BudgetExceeded`` past a cap), one settles it (the attempt row, the call row
finished or left pending for a retry, the shared rate-limit slot, and the caller's own rows on success). The
mutable state of a call across its attempts is :class:`Call`."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal

import attrs

from evalkit_core.models._budget import (
    BudgetScope,
    settle,
    try_reserve,
)
from evalkit_core.models._cost import plain
from evalkit_core.models._errors import BudgetExceeded
from evalkit_core.models._ratelimit import settle_slot
from evalkit_core.models._registry import ModelEntry
from evalkit_core.models._types import Completion
from evalkit_core.store import Connection, Store, utc_now

__all__ = ["Call", "RecordFn", "reserve", "settle_attempt"]

RecordFn = Callable[[Connection, Completion], None]
"""Called inside the transaction that settles a successful call, with that transaction's connection: what it
writes commits together with the settle or not at all (a campaign stores its rollout this way)."""


@attrs.define
class Call:
    """The mutable state of one call across its attempts (internal)."""

    call_id: str
    entry: ModelEntry
    request_digest: str
    worst: Decimal
    input_bound: int
    output_bound: int
    label: str | None = None
    attempt: int = 0
    charged: Decimal = Decimal(0)
    open: str | None = None  # the reservation of the attempt in flight, until it is settled
    slot: str | None = None  # the attempt's shared rate-limit slot (see _ratelimit.take_slot)

    def held(self) -> str | None:
        """The open reservation (a method, so a check after a settle is not narrowed away by the checker)."""
        return self.open



def reserve(store: Store, registry_digest: str, call: Call, scope: BudgetScope | None) -> str:
    """One transaction: (first attempt) the pending call row, and the attempt's budget reservation (global
    and, with ``scope``, the scope's). Raises ``BudgetExceeded`` after recording the refusal."""
    now = utc_now()
    e = call.entry
    owner = store.owner_id
    refusal: BudgetExceeded | None = None
    reservation = ""
    scoped = False
    try:
        with store.transaction() as db:
            if call.attempt == 1:
                db.execute(
                    "INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated,"
                    " status, attempts, request_digest, registry_digest, charged, label, worst_case,"
                    " owner_id) VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, '0', ?, ?, ?)",
                    (call.call_id, now, e.id, e.provider, e.api_model, int(e.simulated),
                     call.request_digest, registry_digest, call.label, str(call.worst), owner),
                )  # fmt: skip
            if scope is not None:
                refusal = scope.try_reserve(e.id, call.worst, db)
                scoped = refusal is None
            if refusal is None:
                got = try_reserve(
                    db,
                    call_id=call.call_id,
                    model_id=e.id,
                    amount=call.worst,
                    now=now,
                    owner_id=owner,
                    attempt=call.attempt,
                )
                if isinstance(got, BudgetExceeded):
                    refusal = got
                else:
                    reservation = got
            if refusal is not None:
                if scoped and scope is not None:
                    scope.settle(call.worst, Decimal(0))
                    scoped = False
                db.execute(
                    "UPDATE model_calls SET status = 'refused', error = ?, finished_at = ?, attempts = ?,"
                    " charged = ? WHERE call_id = ?",
                    (str(refusal), now, call.attempt - 1, str(plain(call.charged)), call.call_id),
                )
    except BaseException:
        if scoped and scope is not None:
            scope.settle(call.worst, Decimal(0))
        raise
    if refusal is not None:
        raise refusal
    return reservation

def settle_attempt(
    store: Store,
    call: Call,
    reservation: str,
    scope: BudgetScope | None,
    started: str,
    t0: float,
    charge: Decimal,
    *,
    outcome: str,
    error: str | None = None,
    status_code: int | None = None,
    completion: Completion | None = None,
    record: RecordFn | None = None,
) -> Decimal:
    """One transaction: settle the attempt's reservation, record the attempt, finish the call unless it
    will be retried, and (on success) run ``record``. Returns what the attempt was charged."""
    elapsed_ms = (time.perf_counter() - t0) * 1000
    now = utc_now()
    if completion is not None and status_code is None and not call.entry.simulated:
        status_code = 200
    with store.transaction() as db:
        note = None if outcome == "ok" else outcome
        if completion is not None and completion.anomaly is not None:
            note = f"anomaly: {completion.anomaly}"
        got = settle(db, reservation, charge, note=note, now=now)
        charged = call.worst if got is None else got  # None: a reconcile charged it in full already
        total = plain(call.charged + charged)
        db.execute(
            "INSERT INTO call_attempts (call_id, attempt, started_at, elapsed_ms, status_code, outcome, error,"
            " charged) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (call_id, attempt) DO UPDATE SET"
            " started_at = excluded.started_at, elapsed_ms = excluded.elapsed_ms, status_code ="
            " excluded.status_code, outcome = excluded.outcome, error = excluded.error, charged = excluded.charged",
            (call.call_id, call.attempt, started, elapsed_ms, status_code, outcome, error, str(plain(charged))),
        )  # fmt: skip
        if outcome == "retry":
            db.execute(
                "UPDATE model_calls SET status = 'pending', attempts = ?, charged = ? WHERE call_id = ?",
                (call.attempt, str(total), call.call_id),
            )
        elif completion is None:
            db.execute(
                "UPDATE model_calls SET status = 'error', error = ?, attempts = ?, charged = ?, finished_at = ?"
                " WHERE call_id = ?",
                (error, call.attempt, str(total), now, call.call_id),
            )
        else:
            u = completion.usage
            bounded = completion.anomaly is not None and completion.cost == call.worst
            db.execute(
                "UPDATE model_calls SET status = 'ok', reported_model = ?, attempts = ?, response_digest = ?,"
                " input_tokens = ?, output_tokens = ?, cache_read_tokens = ?, cache_write_tokens = ?, cost = ?,"
                " charged = ?, stop_reason = ?, finished_at = ?, anomaly = ?, error = NULL WHERE call_id = ?",
                (completion.reported_model[:500], call.attempt, completion.response_digest,
                 None if bounded else u.input_tokens, None if bounded else u.output_tokens,
                 None if bounded else u.cache_read_tokens, None if bounded else u.cache_write_tokens,
                 str(plain(charge)), str(total), None if completion.stop_reason is None else completion.stop_reason[:200],
                 now, completion.anomaly, call.call_id),
            )  # fmt: skip
            if call.slot is not None and completion.anomaly is None:  # the slot holds what was used
                settle_slot(db, call.slot, u.total_input_tokens + u.output_tokens)
            if record is not None:
                record(db, completion)
    call.charged = total
    call.open = None
    if scope is not None:
        scope.settle(call.worst, charged)
    return charged
