"""The budget guard: a global cap in USD kept in the store, read from the store on every call.

Before each request the client reserves the request's worst case (see ``worst_case_cost``) inside one
``BEGIN IMMEDIATE`` transaction: read cap, spent and outstanding reservations; refuse if
``spent + reserved + worst_case > cap``; else add the reservation. After the request it settles, in another
transaction, to the exact cost. Because the check and the reservation share one write-locked transaction, the
cap holds across tasks, threads, processes sharing the store, and restarts; there is no in-memory tally to go
stale.

The invariant is ``spent + reserved <= cap`` (for the cap in force when each reservation was made):

- **Settle never charges more than was reserved.** The client bounds what a reply may claim (see
  ``ModelClient``); :func:`settle` clamps anything above the reservation anyway and writes the clamp in the
  ledger as an anomaly.
- **Unknown outcomes are charged in full.** An attempt whose outcome is unknown (a timeout or a dropped
  connection after the request was sent, a reply that cannot be parsed) may still have been billed; it is
  settled at its full reservation, so the guard errs towards spending less.
- **Reservations have owners.** Each names the process that holds it (host, boot, pid and the pid's start
  time, with a heartbeat: ``evalkit_core.store._owner``). :func:`reconcile` finds reservations whose owner is
  gone (a SIGKILL, a power cut) and charges each at its worst case as an *unknown outcome*: the money may
  have been spent, so it is never released as zero. The call is marked ``unknown`` and listed by its id;
  :func:`settle_from_invoice` later replaces that conservative charge with what the provider's invoice export
  says the call cost. The client reconciles when it starts; ``evalkit budget show`` and ``evalkit budget
  reconcile`` do too.

:class:`BudgetScope` is a second, narrower cap for a group of calls (a campaign's ``budget_usd``): each attempt
reserves against it as well, so failed attempts count too. It is held in memory by one process, or shared by
many through the store (its ``label``: the group's own call record, read in the reserving transaction). It
lives in :mod:`evalkit_core.models._scope` and is re-exported here.
"""

from __future__ import annotations

import csv
import io
import json
import os
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit_core._errors import ConfigError
from evalkit_core.models._cost import plain
from evalkit_core.models._errors import BudgetExceeded
from evalkit_core.models._scope import BudgetScope, charged_for_label, label_totals
from evalkit_core.store import Connection, Store, utc_now
from evalkit_core.store._owner import Process, is_alive

__all__ = [
    "BudgetScope",
    "BudgetStatus",
    "UnknownOutcome",
    "budget_status",
    "charged_for_label",
    "label_totals",
    "parse_cap",
    "reconcile",
    "set_budget_cap",
    "settle_from_invoice",
    "unknown_outcomes",
]

Liveness = Callable[[str, Process, str], bool]
"""``alive(owner_id, process, heartbeat_at)``: whether an owner still runs (tests pass their own)."""


@attrs.frozen
class BudgetStatus:
    cap: Decimal | None  # None: no cap set (spending is recorded but not limited)
    spent: Decimal
    reserved: Decimal
    outstanding: int  # reservations not yet settled
    unknown: int = 0  # calls whose process died with a request in flight (charged at their worst case)
    unknown_charged: Decimal = Decimal(0)

    @property
    def remaining(self) -> Decimal | None:
        return None if self.cap is None else self.cap - self.spent - self.reserved


@attrs.frozen
class UnknownOutcome:
    """A call whose process died while a request was in flight: it may have been billed, so it is charged
    at its worst case until an invoice says otherwise."""

    call_id: str
    model_id: str
    label: str | None
    charged: Decimal  # what the call is charged in all (failed attempts before it included)
    pid: int | None
    started_at: str
    invoiced: str | None = None  # the invoice export that settled it, if any


def _totals(db: Connection) -> tuple[Decimal | None, Decimal, Decimal]:
    cap, spent, reserved = db.execute("SELECT cap, spent, reserved FROM budget WHERE id = 1").fetchone()
    return (None if cap is None else Decimal(cap)), Decimal(spent), Decimal(reserved)


def _ledger(
    db: Connection,
    kind: str,
    amount: Decimal,
    totals: tuple[Decimal | None, Decimal, Decimal],
    *,
    call_id: str | None = None,
    model_id: str | None = None,
    note: str | None = None,
    now: str,
) -> None:
    cap, spent, reserved = totals
    db.execute(
        "INSERT INTO budget_ledger (at, kind, call_id, model_id, amount, spent_after, reserved_after, cap_after, note)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            now,
            kind,
            call_id,
            model_id,
            str(plain(amount)),
            str(plain(spent)),
            str(plain(reserved)),
            None if cap is None else str(cap),
            note,
        ),
    )


def _write_totals(
    db: Connection, cap: Decimal | None, spent: Decimal, reserved: Decimal, now: str
) -> None:
    db.execute(
        "UPDATE budget SET cap = ?, spent = ?, reserved = ?, updated_at = ? WHERE id = 1",
        (None if cap is None else str(cap), str(plain(spent)), str(plain(reserved)), now),
    )


def try_reserve(
    db: Connection,
    *,
    call_id: str,
    model_id: str,
    amount: Decimal,
    now: str,
    owner_id: str | None = None,
    attempt: int = 1,
) -> str | BudgetExceeded:
    """Inside a write transaction: reserve ``amount`` and return the reservation id, or return (not raise) the
    refusal so the caller can record it in the same transaction before raising it."""
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"a reservation must be a finite, non-negative amount, got {amount}")
    cap, spent, reserved = _totals(db)
    if cap is not None and spent + reserved + amount > cap:
        _ledger(db, "refuse", amount, (cap, spent, reserved), call_id=call_id, model_id=model_id, now=now)
        return BudgetExceeded(model_id, cap=cap, spent=spent, reserved=reserved, needed=amount)
    reservation_id = uuid.uuid4().hex
    db.execute(
        "INSERT INTO budget_reservations (reservation_id, call_id, model_id, amount, created_at, pid, owner_id,"
        " attempt) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (reservation_id, call_id, model_id, str(amount), now, os.getpid(), owner_id, attempt),
    )
    reserved += amount
    _write_totals(db, cap, spent, reserved, now)
    _ledger(db, "reserve", amount, (cap, spent, reserved), call_id=call_id, model_id=model_id, now=now)
    return reservation_id


def settle(
    db: Connection, reservation_id: str, charge: Decimal, *, note: str | None = None, now: str
) -> Decimal | None:
    """Inside a write transaction: drop the reservation and add ``charge`` (the exact cost, or the reservation
    itself when the outcome is unknown) to spent. Returns what was charged: ``charge``, or the reservation when
    ``charge`` claimed more (clamped, with an anomaly in the ledger). When the reservation was already charged
    at its worst case by :func:`reconcile` (its owner was taken for dead, but was only slow or cut off), the
    late answer is still recorded: the worst case is replaced by ``charge`` (never raised) and ``charge`` is
    returned. Returns None (nothing more charged) for a reservation it knows nothing of, or one settled late
    already."""
    row = db.execute(
        "SELECT amount, call_id, model_id FROM budget_reservations WHERE reservation_id = ?",
        (reservation_id,),
    ).fetchone()
    cap, spent, reserved = _totals(db)
    if row is None:
        late = db.execute(
            "SELECT amount, call_id, model_id, expired_at FROM budget_expired WHERE reservation_id = ?"
            " AND settled_at IS NULL",
            (reservation_id,),
        ).fetchone()
        if late is not None:
            return _settle_late(db, reservation_id, late, charge, (cap, spent, reserved), note=note, now=now)
        _ledger(
            db,
            "settle",
            Decimal(0),
            (cap, spent, reserved),
            note="already charged at its worst case as an unknown outcome; nothing more charged",
            now=now,
        )
        return None
    amount, call_id, model_id = Decimal(row[0]), row[1], row[2]
    db.execute("DELETE FROM budget_reservations WHERE reservation_id = ?", (reservation_id,))
    if not charge.is_finite() or charge < 0 or charge > amount:
        note = (
            f"anomaly: a charge of {charge} is outside [0, {amount}] (the reservation); charged {amount}"
            + (f"; {note}" if note else "")
        )
        charge = amount
    reserved -= amount
    spent += charge
    _write_totals(db, cap, spent, reserved, now)
    _ledger(
        db, "settle", charge, (cap, spent, reserved), call_id=call_id, model_id=model_id, note=note, now=now
    )
    return charge


def _settle_late(
    db: Connection,
    reservation_id: str,
    late: tuple[str, str, str, str],
    charge: Decimal,
    totals: tuple[Decimal | None, Decimal, Decimal],
    *,
    note: str | None,
    now: str,
) -> Decimal:
    """The answer of a reservation that expired (its owner was taken for dead and it was charged at its worst
    case) arrived after all: record it, and correct the worst case to the exact charge (never upwards)."""
    amount, call_id, model_id, expired_at = Decimal(late[0]), late[1], late[2], late[3]
    if not charge.is_finite() or charge < 0 or charge > amount:
        note = f"anomaly: a charge of {charge} is outside [0, {amount}]; charged {amount}" + (f"; {note}" if note else "")
        charge = amount
    cap, spent, reserved = totals
    why = (
        f"late answer: the reservation expired at {expired_at} and was charged its worst case ${plain(amount)}"
    )
    # two rows, so the ledger still adds up to spent: the worst-case charge reversed, then the exact settle
    spent -= amount
    _ledger(
        db, "unknown", -amount, (cap, spent, reserved), call_id=call_id, model_id=model_id,
        note=f"{why}; reversed by the late settle that follows", now=now,
    )  # fmt: skip
    spent += charge
    _write_totals(db, cap, spent, reserved, now)
    _ledger(
        db, "settle", charge, (cap, spent, reserved), call_id=call_id, model_id=model_id,
        note=f"{why}; settled at the exact ${plain(charge)}" + (f"; {note}" if note else ""), now=now,
    )  # fmt: skip
    db.execute("UPDATE budget_expired SET settled_at = ? WHERE reservation_id = ?", (now, reservation_id))
    return charge


def budget_status(store: Store) -> BudgetStatus:
    with store.snapshot() as db:
        cap, spent, reserved = _totals(db)
        (n,) = db.execute("SELECT count(*) FROM budget_reservations").fetchone()
        unknown = [
            Decimal(c)
            for (c,) in db.execute("SELECT charged FROM model_calls WHERE status = 'unknown'").fetchall()
        ]
    return BudgetStatus(
        cap=cap,
        spent=plain(spent),
        reserved=plain(reserved),
        outstanding=int(n),
        unknown=len(unknown),
        unknown_charged=plain(sum(unknown, Decimal(0))),
    )


MAX_CAP = Decimal(10**9)  # a cap beyond any real spend; larger numbers are typing mistakes


def parse_cap(text: str) -> Decimal | None:
    """``"5"``, ``"0.25"`` -> Decimal; ``"none"`` -> None (no cap). Raises ``ConfigError`` otherwise."""
    if text.strip().lower() in ("none", "off", "unlimited"):
        return None
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        raise ConfigError(
            f"budget cap: expected a decimal amount in USD such as 5.00 (or 'none'), got {text!r}"
        ) from None
    if not value.is_finite() or value < 0:
        raise ConfigError(f"budget cap: expected a non-negative amount in USD, got {text!r}")
    if value > MAX_CAP:
        raise ConfigError(f"budget cap: expected at most {MAX_CAP} USD, got {text!r}")
    return plain(value)


def set_budget_cap(store: Store, cap: Decimal | None) -> BudgetStatus:
    """Set (or with None, remove) the global cap. Spend so far is kept; lowering the cap below it refuses
    every further call."""
    if cap is not None and (not cap.is_finite() or cap < 0):
        raise ConfigError(f"budget cap: expected a non-negative amount in USD, got {cap}")
    cap = None if cap is None else plain(cap)
    now = utc_now()
    with store.transaction() as db:
        _, spent, reserved = _totals(db)
        _write_totals(db, cap, spent, reserved, now)
        _ledger(
            db,
            "set_cap",
            cap if cap is not None else Decimal(0),
            (cap, spent, reserved),
            now=now,
            note=None if cap is not None else "cap removed",
        )
    return budget_status(store)


# ------------------------------------------------------------------------------------------ dead owners


def _default_alive(_owner_id: str, owner: Process, heartbeat_at: str) -> bool:
    return is_alive(owner, heartbeat_at)


def _dead_owners(db: Connection, alive: Liveness) -> set[str]:
    rows = db.execute("SELECT owner_id, host, boot_id, pid, start_ticks, heartbeat_at FROM owners").fetchall()
    return {
        str(oid)
        for oid, host, boot, pid, ticks, beat in rows
        if not alive(str(oid), Process(str(host), str(boot), int(pid), int(ticks)), str(beat))
    }


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def reconcile(store: Store, *, alive: Liveness = _default_alive) -> list[UnknownOutcome]:
    """Charge every reservation whose owner is gone at its worst case, as an unknown outcome, and finish the
    calls those owners left ``pending``. Returns the calls newly marked ``unknown`` (empty when every owner
    lives). One transaction: another process sees all of it or none of it."""
    with store.transaction() as db:
        return reap(db, alive=alive, now=utc_now())


def reap(db: Connection, *, alive: Liveness = _default_alive, now: str) -> list[UnknownOutcome]:
    """Inside a write transaction: what :func:`reconcile` does. Each reservation it charges is kept in
    ``budget_expired``, so the late answer of an owner that was only taken for dead (a heartbeat lost to a
    partition) still settles at its exact cost (see :func:`settle`)."""
    out: list[UnknownOutcome] = []
    dead = _dead_owners(db, alive)
    known = {str(o) for (o,) in db.execute("SELECT owner_id FROM owners")}
    rows = db.execute(
        "SELECT reservation_id, call_id, model_id, amount, created_at, pid, owner_id, attempt"
        " FROM budget_reservations ORDER BY created_at, reservation_id"
    ).fetchall()
    for rid, call_id, model_id, amount_text, created, pid, owner_id, attempt in rows:
        # a reservation written before owners existed (schema 1), or whose owner row was lost with a
        # rolled-back transaction, has only its pid to go by
        gone = owner_id in dead if owner_id in known else _pid_gone(int(pid))
        if not gone:
            continue
        amount = Decimal(amount_text)
        db.execute("DELETE FROM budget_reservations WHERE reservation_id = ?", (rid,))
        db.execute(
            "INSERT INTO budget_expired (reservation_id, call_id, model_id, amount, owner_id, expired_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (rid, call_id, model_id, amount_text, owner_id, now),
        )
        cap, spent, reserved = _totals(db)
        reserved -= amount
        spent += amount
        _write_totals(db, cap, spent, reserved, now)
        why = (
            f"process {pid} died during attempt {attempt} with the request possibly sent: outcome unknown, "
            f"charged at its worst case ${plain(amount)}"
        )
        _ledger(
            db,
            "unknown",
            amount,
            (cap, spent, reserved),
            call_id=call_id,
            model_id=model_id,
            note=why,
            now=now,
        )
        call = db.execute(
            "SELECT status, charged, label, started_at FROM model_calls WHERE call_id = ?", (call_id,)
        ).fetchone()
        if call is None:  # a bare reservation (tests, or a caller of try_reserve without a call row)
            continue
        charged = plain(Decimal(call[1]) + amount)
        db.execute(
            "UPDATE model_calls SET status = 'unknown', error = ?,"
            " attempts = CASE WHEN attempts > ? THEN attempts ELSE ? END, charged = ?,"
            " finished_at = ? WHERE call_id = ?",
            (why, attempt, attempt, str(charged), now, call_id),
        )
        db.execute(
            "INSERT INTO call_attempts (call_id, attempt, started_at, elapsed_ms, status_code, outcome, error,"
            " charged) VALUES (?, ?, ?, 0, NULL, 'unknown', ?, ?) ON CONFLICT (call_id, attempt) DO UPDATE"
            " SET started_at = excluded.started_at, elapsed_ms = excluded.elapsed_ms, status_code = NULL,"
            " outcome = excluded.outcome, error = excluded.error, charged = excluded.charged",
            (call_id, attempt, created, why, str(plain(amount))),
        )
        out.append(UnknownOutcome(call_id, model_id, call[2], charged, int(pid), str(call[3])))
    # calls a dead owner left pending between attempts (nothing reserved, nothing in flight)
    for oid in sorted(dead):
        db.execute(
            "UPDATE model_calls SET status = 'error', finished_at = ?,"
            " error = 'the process making this call died between attempts (nothing was in flight)'"
            " WHERE owner_id = ? AND status = 'pending'",
            (now, oid),
        )
    for oid in sorted(dead):
        db.execute(
            "DELETE FROM owners WHERE owner_id = ?"
            " AND NOT EXISTS (SELECT 1 FROM budget_reservations WHERE owner_id = ?)",
            (oid, oid),
        )
        db.execute("DELETE FROM campaign_leases WHERE owner_id = ?", (oid,))
    return out


def unknown_outcomes(store: Store, *, label: str | None = None) -> list[UnknownOutcome]:
    """Every call marked ``unknown`` (optionally only those with ``label``), oldest first."""
    sql = (
        "SELECT c.call_id, c.model_id, c.label, c.charged, c.started_at, c.invoiced"
        " FROM model_calls c WHERE c.status = 'unknown'"
    )
    args: list[object] = []
    if label is not None:
        sql += " AND c.label = ?"
        args.append(label)
    sql += " ORDER BY c.started_at, c.call_id"
    with store.snapshot() as db:
        rows = db.execute(sql, args).fetchall()
    return [
        UnknownOutcome(str(cid), str(mid), lab, Decimal(ch), None, str(start), inv)
        for cid, mid, lab, ch, start, inv in rows
    ]


# ------------------------------------------------------------------------------------------ invoices


def _invoice_rows(path: Path) -> list[tuple[int, str, Decimal]]:
    """(line, call_id, cost) from a CSV with header columns ``call_id`` and ``cost_usd`` (others ignored), or
    JSON lines with those keys. Raises ``ConfigError`` naming the file, the line and the field."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{path}: invoice export not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the invoice export ({exc})") from None
    items: list[tuple[int, dict[str, Any]]] = []
    if text.lstrip().startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise ConfigError(f"{path}: line {n}: not a JSON object") from None
            if not isinstance(obj, dict):
                raise ConfigError(f"{path}: line {n}: not a JSON object")
            items.append((n, cast("dict[str, Any]", obj)))
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or not {"call_id", "cost_usd"} <= set(reader.fieldnames):
            raise ConfigError(
                f"{path}: expected a CSV header with columns call_id and cost_usd (or JSON lines with those keys)"
            )
        items = [(n + 2, dict(row)) for n, row in enumerate(reader)]
    out: list[tuple[int, str, Decimal]] = []
    for n, row in items:
        call_id = row.get("call_id")
        if not isinstance(call_id, str) or not call_id.strip():
            raise ConfigError(f"{path}: line {n}: field 'call_id': expected a call id")
        raw = row.get("cost_usd")
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise ConfigError(
                f"{path}: line {n}: field 'cost_usd': expected a decimal string such as \"0.0123\""
            )
        try:
            cost = Decimal(str(raw).strip().removeprefix("$"))
        except InvalidOperation:
            raise ConfigError(
                f"{path}: line {n}: field 'cost_usd': expected a decimal amount, got {raw!r}"
            ) from None
        if not cost.is_finite() or cost < 0:
            raise ConfigError(
                f"{path}: line {n}: field 'cost_usd': expected a non-negative amount, got {raw!r}"
            )
        out.append((n, call_id.strip(), plain(cost)))
    return out


def settle_from_invoice(store: Store, path: str | Path) -> list[UnknownOutcome]:
    """Replace the worst-case charge of unknown outcomes with what the provider's invoice export says each call
    cost. All rows or none: a row naming a call that is not ``unknown``, was settled from an invoice already,
    or claims more than the worst case charged for it is an error naming the row (``ConfigError``)."""
    p = Path(path)
    rows = _invoice_rows(p)
    now = utc_now()
    out: list[UnknownOutcome] = []
    seen: set[str] = set()
    with store.transaction() as db:
        for n, call_id, cost in rows:
            where = f"{p}: line {n}: call {call_id}"
            if call_id in seen:
                raise ConfigError(f"{where}: listed twice")
            seen.add(call_id)
            call = db.execute(
                "SELECT status, charged, invoiced, model_id, label, started_at FROM model_calls WHERE call_id = ?",
                (call_id,),
            ).fetchone()
            if call is None:
                raise ConfigError(f"{where}: no such call in the store {store.path}")
            status, charged_text, invoiced, model_id, label, started = call
            if status != "unknown":
                raise ConfigError(
                    f"{where}: status is {status!r}; only unknown outcomes are settled from an invoice"
                )
            if invoiced is not None:
                raise ConfigError(f"{where}: already settled from {invoiced}")
            charged = Decimal(charged_text)
            if cost > charged:
                raise ConfigError(
                    f"{where}: the invoice says ${cost}, more than the ${charged} worst case charged for it; "
                    "the provider billed more than the request could cost: check the export"
                )
            cap, spent, reserved = _totals(db)
            spent += cost - charged
            _write_totals(db, cap, spent, reserved, now)
            _ledger(
                db,
                "invoice",
                cost - charged,
                (cap, spent, reserved),
                call_id=call_id,
                model_id=model_id,
                note=f"unknown outcome settled from {p} at ${cost} (was ${charged})",
                now=now,
            )
            db.execute(
                "UPDATE model_calls SET charged = ?, invoiced = ? WHERE call_id = ?",
                (str(cost), str(p), call_id),
            )
            out.append(UnknownOutcome(call_id, model_id, label, cost, None, started, str(p)))
    return out
