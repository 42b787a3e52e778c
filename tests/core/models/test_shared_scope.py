"""A budget scope shared through the store (``BudgetScope(label=...)``, a campaign's ``budget_usd`` on Ray): each
reservation reads the label's charges and outstanding reservations from the call record in the reserving
transaction, on SQLite and PostgreSQL, so scopes held by different processes see each other."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from evalkit_core.models import BudgetScope
from evalkit_core.models._budget import label_totals, try_reserve
from evalkit_core.store import utc_now


def _call(db: Any, call_id: str, label: str, charged: str) -> None:
    db.execute(
        "INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated, status, attempts,"
        " request_digest, registry_digest, charged, label) VALUES (?, ?, 'm', 'openai', 'm', 0, 'ok', 1, 'd',"
        " 'sha256:r', ?, ?)",
        (call_id, utc_now(), charged, label),
    )


def test_a_shared_scope_counts_every_process_charges_and_reservations(any_store: Any) -> None:
    with any_store.transaction() as db:
        db.execute("INSERT INTO registries VALUES ('sha256:r', '{}', 'x')")
        _call(db, "a", "campaign:c", "0.30")
        _call(db, "b", "campaign:c", "0.20")
        _call(db, "other", "campaign:d", "5")  # another campaign's spend is not this scope's
        _call(db, "inflight", "campaign:c", "0")
        try_reserve(db, call_id="inflight", model_id="m", amount=Decimal("0.25"), now=utc_now())
    mine = BudgetScope("campaign 'c'", Decimal("1.00"), label="campaign:c")
    theirs = BudgetScope("campaign 'c'", Decimal("1.00"), label="campaign:c")  # as another process holds it
    with any_store.transaction() as db:
        assert label_totals(db, "campaign:c") == (Decimal("0.50"), Decimal("0.25"))
        assert mine.try_reserve("m", Decimal("0.25"), db) is None  # 0.50 + 0.25 + 0.25 = 1.00: fits
        refused = theirs.try_reserve("m", Decimal("0.26"), db)
    assert refused is not None
    assert (refused.spent, refused.reserved, refused.needed, refused.scope) == (
        Decimal("0.50"), Decimal("0.25"), Decimal("0.26"), "campaign 'c'",
    )  # fmt: skip
    with pytest.raises(ValueError, match="inside a write transaction"):
        mine.try_reserve("m", Decimal("0.01"))


def test_a_scope_in_memory_is_unchanged() -> None:
    scope = BudgetScope("campaign 'c'", Decimal(1), spent=Decimal("0.5"))
    assert scope.try_reserve("m", Decimal("0.4")) is None
    assert scope.try_reserve("m", Decimal("0.2")) is not None
    scope.settle(Decimal("0.4"), Decimal("0.1"))
    assert (scope.spent, scope.reserved) == (Decimal("0.6"), Decimal(0))
