"""A narrower cap for a group of calls, beside the global budget (:mod:`evalkit_core.models._budget`): a
campaign's ``budget_usd``. In memory for one process, or shared through the store by its label (the group's own
call record, read in the write transaction that reserves)."""

from __future__ import annotations

from decimal import Decimal

from evalkit_core.models._cost import plain
from evalkit_core.models._errors import BudgetExceeded
from evalkit_core.store import Connection, Store

__all__ = ["BudgetScope", "charged_for_label", "label_totals"]


class BudgetScope:
    """A cap for a group of calls (a campaign's ``budget_usd``).

    Every attempt the client makes for a call in the scope reserves its worst case here as well as in the
    global budget, and settles here what the global budget was charged: failed attempts count. ``spent``
    starts from what the group was charged before (from the call record), so a resumed group keeps its total.

    Held in memory (``label`` None), the scope belongs to one process: only one may hold a scope for a group at a
    time (a campaign holds a lease for that). With ``label``, the scope is *shared* through the store instead:
    each reservation reads the group's charges and outstanding reservations (the calls recorded under
    ``label``) inside the client's write transaction, the same one that records the reservation, so many
    processes on many machines (a campaign's Ray workers) hold one cap between them. No second ledger: the
    numbers are the model layer's own call record.
    """

    def __init__(
        self, name: str, cap: Decimal | None, *, spent: Decimal = Decimal(0), label: str | None = None
    ) -> None:
        self.name = name
        self.cap = cap
        self.spent = spent
        self.reserved = Decimal(0)
        self.label = label

    def try_reserve(
        self, model_id: str, amount: Decimal, db: Connection | None = None
    ) -> BudgetExceeded | None:
        """Reserve ``amount`` or return the refusal. A shared scope needs ``db``, the write transaction that
        records the reservation in the global budget."""
        if self.label is not None:
            if db is None:
                raise ValueError(f"the shared budget scope {self.name!r} reserves inside a write transaction")
            if self.cap is None:
                return None
            spent, reserved = label_totals(db, self.label)
            self.spent = spent
            if spent + reserved + amount > self.cap:
                return BudgetExceeded(
                    model_id, cap=self.cap, spent=spent, reserved=reserved, needed=amount, scope=self.name
                )
            return None
        if self.cap is not None and self.spent + self.reserved + amount > self.cap:
            return BudgetExceeded(
                model_id,
                cap=self.cap,
                spent=self.spent,
                reserved=self.reserved,
                needed=amount,
                scope=self.name,
            )
        self.reserved += amount
        return None

    def settle(self, reserved: Decimal, charged: Decimal) -> None:
        if self.label is None:
            self.reserved -= reserved
        self.spent += charged  # a shared scope's figure is only this process's view (the store holds the truth)

    @property
    def remaining(self) -> Decimal | None:
        return None if self.cap is None else self.cap - self.spent - self.reserved


def label_totals(db: Connection, label: str) -> tuple[Decimal, Decimal]:
    """``(charged, reserved)`` of the calls recorded under ``label``: everything charged so far (failed attempts
    and unknown outcomes included) and the worst cases of their attempts in flight."""
    charged = sum(
        (Decimal(r[0]) for r in db.execute("SELECT charged FROM model_calls WHERE label = ?", (label,))),
        Decimal(0),
    )
    reserved = sum(
        (
            Decimal(r[0])
            for r in db.execute(
                "SELECT r.amount FROM budget_reservations r JOIN model_calls c ON c.call_id = r.call_id"
                " WHERE c.label = ?",
                (label,),
            )
        ),
        Decimal(0),
    )
    return plain(charged), plain(reserved)


def charged_for_label(store: Store, label: str) -> Decimal:
    """Everything charged for calls made under ``label`` (failed attempts and unknown outcomes included)."""
    with store.snapshot() as db:
        rows = db.execute("SELECT charged FROM model_calls WHERE label = ?", (label,)).fetchall()
    return plain(sum((Decimal(r[0]) for r in rows), Decimal(0)))
