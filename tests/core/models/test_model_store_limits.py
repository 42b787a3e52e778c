"""The store (migrations, WAL, transactions), rate-limit buckets, retry timing, and the pinned public API."""

from __future__ import annotations

import asyncio
import random
import sqlite3

import pytest

import evalkit_core.models as models
import evalkit_core.store as store_pkg
from evalkit_core.models import (
    RetryPolicy,
    TokenBucket,
    backoff_delay,
    is_retryable_status,
    retry_after_seconds,
)
from evalkit_core.store import SCHEMA_VERSION, Store, StoreError


def test_store_schema_and_wal(tmp_path):
    with Store.open(tmp_path) as s:
        assert s.schema_version == SCHEMA_VERSION == 4
        assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in s._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"model_calls", "call_attempts", "budget", "budget_ledger", "budget_reservations", "registries",
                "campaigns", "rollouts", "counterexamples", "schema_migrations", "owners",
                "campaign_leases", "rate_events", "budget_expired"} <= tables  # fmt: skip
    with Store.open(tmp_path) as s:  # reopening does not migrate twice
        assert s._db.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == 4


def test_store_home_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "h"))
    with Store.open() as s:
        assert s.path == tmp_path / "h" / "evalkit.sqlite3"


def test_newer_schema_and_garbage_are_refused(tmp_path):
    with Store.open(tmp_path) as s:
        s._db.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="schema version 99 is newer"):
        Store.open(tmp_path)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "evalkit.sqlite3").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not an evalkit store"):
        Store.open(junk)


def test_transaction_is_all_or_nothing(tmp_path):
    with Store.open(tmp_path) as s:

        def crash() -> None:
            with s.transaction() as db:
                db.execute("INSERT INTO campaigns VALUES ('c1', 'now', 'n', 'sha256:x', '{}', 'open')")
                raise RuntimeError("crash mid-write")

        with pytest.raises(RuntimeError):
            crash()
        assert s._db.execute("SELECT count(*) FROM campaigns").fetchone()[0] == 0
        with s.transaction() as db:
            db.execute("INSERT INTO campaigns VALUES ('c1', 'now', 'n', 'sha256:x', '{}', 'open')")
    # committed data survives a new connection
    with Store.open(tmp_path) as s, pytest.raises(sqlite3.IntegrityError):
        s._db.execute("INSERT INTO campaigns VALUES ('c1', 'now', 'n', 'sha256:x', '{}', 'open')")


def test_token_bucket_paces_with_a_fake_clock():
    now = [0.0]
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)
        now[0] += d

    bucket = TokenBucket(60, burst_seconds=2, clock=lambda: now[0], sleep=sleep)  # 1/s, holds 2

    async def go():
        for _ in range(5):
            await bucket.acquire(1)

    asyncio.run(go())
    assert slept == [1.0, 1.0, 1.0]
    bucket.refund(10)
    assert bucket.available == 2  # never above capacity
    big = TokenBucket(6000, burst_seconds=1, clock=lambda: now[0], sleep=sleep)
    assert big.take(10**9) == 0.0  # a request larger than the bucket takes one bucketful, it does not hang


def test_retry_rules():
    assert [s for s in (400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 529) if is_retryable_status(s)] == [
        408, 409, 429, 500, 502, 503, 529,
    ]  # fmt: skip
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "150"}) == 0.15
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_seconds({}) is None
    p = RetryPolicy(base_delay=1, max_delay=8, max_retry_after=60)
    rng = random.Random(0)
    for attempt, hi in ((1, 1), (2, 2), (3, 4), (4, 8), (9, 8)):
        d = backoff_delay(attempt, p, None, rng)
        assert hi / 2 <= d <= hi
    assert backoff_delay(1, p, 3.0, rng) == 3.0
    assert backoff_delay(1, p, 600.0, rng) == 60


def test_public_api_is_pinned():
    assert models.__all__ == sorted(models.__all__, key=lambda n: (not n.isupper(), n))
    assert set(models.__all__) == {
        "DEFAULT_TIMEOUTS", "PROVIDERS", "REGISTRY_ENV", "BudgetExceeded", "BudgetScope", "BudgetStatus",
        "CallAttempt", "CallRecord", "Completion", "JsonValue", "Message", "MissingKeyError", "ModelBackend",
        "ModelClient", "ModelEntry", "ModelError", "Prices", "RecordFn", "Registry", "RegistryError", "Request",
        "RetryPolicy", "SimContext", "SimSpec", "Timeouts", "TokenBucket", "ToolCall", "ToolSpec",
        "UnknownOutcome", "Usage", "backoff_delay", "budget_status", "call_attempts", "charged_for_label",
        "complete", "completion_from_json", "completion_to_json", "cost_of", "is_retryable_status",
        "json_mutants", "key_routes", "list_calls", "load_registry", "parse_cap", "parse_since", "parse_timeouts",
        "recompute_cost", "reconcile", "redact", "request_from_json", "request_to_json", "retry_after_seconds",
        "set_budget_cap", "settle_from_invoice", "text_mutants", "unknown_outcomes", "worst_case_cost",
    }  # fmt: skip
    assert store_pkg.__all__ == sorted(store_pkg.__all__, key=lambda n: (not n.isupper(), n))
    for name in models.__all__:
        assert hasattr(models, name)
