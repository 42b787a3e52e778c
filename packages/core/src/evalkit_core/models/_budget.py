"""The budget guard: a global cap in USD kept in the store, read from the store on every call.

Before each request the client reserves the request's worst case (see ``worst_case_cost``) inside one
``BEGIN IMMEDIATE`` transaction: read cap, spent and outstanding reservations; refuse if
``spent + reserved + worst_case > cap``; else add the reservation. After the request it settles, in another
transaction, to the exact cost. Because the check and the reservation share one write-locked transaction, the
cap
holds across tasks, threads, processes sharing the store, and restarts; there is no in-memory tally to go
stale.

An attempt whose outcome is unknown (a timeout or a dropped connection after the request was sent, a reply
that
cannot be parsed) may still have been billed; it is settled at its full reservation, so the guard errs towards
spending less. A reservation left by a crashed process keeps counting until :func:`release_stale_reservations`
drops it (again erring towards spending less).
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import uuid
from decimal import Decimal, InvalidOperation

import attrs

from evalkit_core._errors import ConfigError
from evalkit_core.models._cost import plain
from evalkit_core.models._errors import BudgetExceeded
from evalkit_core.store import Store, utc_now

__all__ = [
    "BudgetStatus",
    "budget_status",
    "parse_cap",
    "release_stale_reservations",
    "set_budget_cap",
]


@attrs.frozen
class BudgetStatus:
    cap: Decimal | None  # None: no cap set (spending is recorded but not limited)
    spent: Decimal
    reserved: Decimal
    outstanding: int  # reservations not yet settled

    @property
    def remaining(self) -> Decimal | None:
        return None if self.cap is None else self.cap - self.spent - self.reserved


def _totals(db: sqlite3.Connection) -> tuple[Decimal | None, Decimal, Decimal]:
    cap, spent, reserved = db.execute("SELECT cap, spent, reserved FROM budget WHERE id = 1").fetchone()
    return (None if cap is None else Decimal(cap)), Decimal(spent), Decimal(reserved)


def _ledger(
    db: sqlite3.Connection,
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
            str(amount),
            str(spent),
            str(reserved),
            None if cap is None else str(cap),
            note,
        ),
    )


def _write_totals(
    db: sqlite3.Connection, cap: Decimal | None, spent: Decimal, reserved: Decimal, now: str
) -> None:
    db.execute(
        "UPDATE budget SET cap = ?, spent = ?, reserved = ?, updated_at = ? WHERE id = 1",
        (None if cap is None else str(cap), str(plain(spent)), str(plain(reserved)), now),
    )


def try_reserve(
    db: sqlite3.Connection, *, call_id: str, model_id: str, amount: Decimal, now: str
) -> str | BudgetExceeded:
    """Inside a write transaction: reserve ``amount`` and return the reservation id, or return (not raise) the
    refusal so the caller can record it in the same transaction before raising it."""
    cap, spent, reserved = _totals(db)
    if cap is not None and spent + reserved + amount > cap:
        _ledger(db, "refuse", amount, (cap, spent, reserved), call_id=call_id, model_id=model_id, now=now)
        return BudgetExceeded(model_id, cap=cap, spent=spent, reserved=reserved, needed=amount)
    reservation_id = uuid.uuid4().hex
    db.execute(
        "INSERT INTO budget_reservations (reservation_id, call_id, model_id, amount, created_at, pid)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (reservation_id, call_id, model_id, str(amount), now, os.getpid()),
    )
    reserved += amount
    _write_totals(db, cap, spent, reserved, now)
    _ledger(db, "reserve", amount, (cap, spent, reserved), call_id=call_id, model_id=model_id, now=now)
    return reservation_id


def settle(
    db: sqlite3.Connection, reservation_id: str, charge: Decimal, *, note: str | None = None, now: str
) -> None:
    """Inside a write transaction: drop the reservation and add ``charge`` (the exact cost, or the reservation
    itself when the outcome is unknown) to spent."""
    row = db.execute(
        "SELECT amount, call_id, model_id FROM budget_reservations WHERE reservation_id = ?",
        (reservation_id,),
    ).fetchone()
    if row is None:  # released as stale meanwhile: still charge what was spent
        amount, call_id, model_id = Decimal(0), None, None
    else:
        amount, call_id, model_id = Decimal(row[0]), row[1], row[2]
        db.execute("DELETE FROM budget_reservations WHERE reservation_id = ?", (reservation_id,))
    cap, spent, reserved = _totals(db)
    reserved -= amount
    spent += charge
    _write_totals(db, cap, spent, reserved, now)
    _ledger(
        db, "settle", charge, (cap, spent, reserved), call_id=call_id, model_id=model_id, note=note, now=now
    )


def budget_status(store: Store) -> BudgetStatus:
    with store.snapshot() as db:
        cap, spent, reserved = _totals(db)
        (n,) = db.execute("SELECT count(*) FROM budget_reservations").fetchone()
    return BudgetStatus(cap=cap, spent=plain(spent), reserved=plain(reserved), outstanding=int(n))


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
    return plain(value)


def set_budget_cap(store: Store, cap: Decimal | None) -> BudgetStatus:
    """Set (or with None, remove) the global cap. Spend so far is kept; lowering the cap below it refuses
    every
    further call."""
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


def release_stale_reservations(store: Store, older_than: dt.timedelta) -> int:
    """Drop reservations older than ``older_than`` (left by a crashed process) and return how many."""
    cutoff = (dt.datetime.now(dt.UTC) - older_than).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    now = utc_now()
    with store.transaction() as db:
        rows = db.execute(
            "SELECT reservation_id, amount, call_id, model_id FROM budget_reservations WHERE created_at < ?",
            (cutoff,),
        ).fetchall()
        for rid, amount, call_id, model_id in rows:
            db.execute("DELETE FROM budget_reservations WHERE reservation_id = ?", (rid,))
            cap, spent, reserved = _totals(db)
            reserved -= Decimal(amount)
            _write_totals(db, cap, spent, reserved, now)
            _ledger(
                db,
                "release",
                Decimal(amount),
                (cap, spent, reserved),
                call_id=call_id,
                model_id=model_id,
                note="stale reservation released",
                now=now,
            )
    return len(rows)
