"""The budget and the rate limits hold across processes sharing one store, on SQLite and on PostgreSQL.

Counted where the money is spent: at the loopback fake provider's own request log (``tests/fake_provider.py``),
not from what the clients say they did.

- 4 processes (2 concurrent calls each) share a cap: what the provider was asked for, priced from its log,
  never exceeds the cap, and equals the store's spend to the digit.
- A worker killed with a request in flight (the provider saw it) holds a reservation; the next process to start
  releases it, charged at its worst case as an unknown outcome (never as zero: it may have been billed); the
  late answer of a worker only taken for dead is still settled, at its exact cost.
- A shared limit of R requests per minute: 4 processes trying 6 calls each get exactly R requests through to
  the provider within the minute; the rest give up at their call deadline, charged nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from evalkit_core.models import (
    ModelClient,
    Request,
    Usage,
    budget_status,
    cost_of,
    list_calls,
    load_registry,
    reconcile,
    set_budget_cap,
)
from evalkit_core.models._ratelimit import RateLimit, settle_slot, take_slot
from evalkit_core.store import Store
from fake_provider import FakeProvider  # pyright: ignore[reportImplicitRelativeImport]

KEY_ENV = "SHARED_FAKE_KEY"
KEY = "sk-shared-limits-0123456789"
PRICES = 'prices = { input = "3", output = "15", cache_read = "0.30", cache_write = "3.75" }\n'


@pytest.fixture(scope="module")
def provider() -> Any:
    with FakeProvider() as fake:
        yield fake


def _registry(tmp: Path, base: str, extra: str = "") -> Path:
    path = tmp / "registry.toml"
    body = ['[registry]\nprices_as_of = "2025-06-01"\n']
    for name, scenario, limits in (("fake/ok", "ok", ""), ("fake/slow", "slow:1.5", ""), ("fake/limited", "ok", extra)):
        body.append(
            f'[models."{name}"]\nprovider = "anthropic"\napi_model = "{scenario}"\nbase_url = "{base}"\n'
            f'api_key_env = "{KEY_ENV}"\ncontext_window = 200000\nmax_output = 4096\n{PRICES}{limits}'
        )
    path.write_text("\n".join(body))
    return path


WORKER = textwrap.dedent(
    """
    import asyncio, json, os, pathlib, sys, time
    from evalkit_core.models import BudgetExceeded, ModelClient, ModelError, Request, RetryPolicy, Timeouts

    registry, tag, model, calls, lanes, call_deadline, gate = sys.argv[1:8]

    async def lane(client, n, out):
        for i in range(int(calls)):
            req = Request.of(f"{tag}{n}-{i:06d}", max_tokens=40)  # fixed width: every request costs the same
            try:
                c = await client.complete(model, req)
            except BudgetExceeded:
                out["refused"] += 1
                return
            except ModelError as e:
                out["gave_up"].append(str(e)[:200])
                continue
            out["ok"] += 1
            out["cost"].append(str(c.cost))

    async def main():
        out = {"ok": 0, "refused": 0, "gave_up": [], "cost": []}
        async with ModelClient(
            registry_paths=[registry], env={"SHARED_FAKE_KEY": "sk-shared-limits-0123456789"},
            retry=RetryPolicy(max_attempts=1), timeouts=Timeouts(call=float(call_deadline)),
        ) as client:
            pathlib.Path(gate, f"ready-{tag}").touch()
            while not pathlib.Path(gate, "go").exists():
                time.sleep(0.005)
            await asyncio.gather(*(lane(client, n, out) for n in range(int(lanes))))
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _workers(
    location: str, registry: Path, gate: Path, model: str, *, calls: int, lanes: int = 2, deadline: float = 60
) -> list[dict[str, Any]]:
    env = {**os.environ, "EVALKIT_STORE": location}
    tags = ("a", "b", "c", "d")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(registry), t, model, str(calls), str(lanes), str(deadline), str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for t in tags
    ]
    try:
        limit = time.monotonic() + 120
        while not all((gate / f"ready-{t}").exists() for t in tags):
            assert time.monotonic() < limit, "workers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.02)
        (gate / "go").touch()
        outs = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=180)
            assert p.returncode == 0, stderr.decode()
            outs.append(json.loads(stdout))
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _provider_cost(entries: list[dict[str, Any]], registry: Path, model: str) -> Decimal:
    """What the provider billed, from its own log: the honest usage it reported (body bytes // 4 in, 5 out)."""
    entry = load_registry([registry], env={}).get(model)
    return sum((cost_of(Usage(input_tokens=e["bytes"] // 4, output_tokens=5), entry.prices) for e in entries), Decimal(0))


def test_four_processes_sharing_a_cap_never_settle_more_than_it(store_location, provider, tmp_path):
    registry = _registry(tmp_path, provider.base)
    gate = tmp_path / "gate"
    gate.mkdir()
    entry = load_registry([registry], env={}).get("fake/ok")
    with Store(store_location) as s:
        worst = ModelClient(registry=load_registry([registry], env={}), store=s, env={}).worst_case(
            "fake/ok", Request.of("a0-000000", max_tokens=40)
        )
        # room for 30 calls at their worst case, about 90 at their real cost: enough that every one of the four
        # gets at least one call in before the cap, however unfairly the store's lock serves them (with room for
        # 10, SQLite's busy lock once starved one worker of every call: a CI failure that was no budget bug)
        cap = worst * 30
        set_budget_cap(s, cap)
    seen = len(provider.log())
    outs = _workers(store_location, registry, gate, "fake/ok", calls=1000)
    log = [e for e in provider.log()[seen:] if e["scenario"] == "ok"]
    billed = _provider_cost(log, registry, "fake/ok")
    with Store(store_location) as s:
        status = budget_status(s)
        calls = list_calls(s)
    assert billed <= cap  # the provider never billed past the cap
    assert status.spent == billed  # and the store's spend is what it billed, to the digit
    assert status.reserved == 0
    assert len(log) == sum(o["ok"] for o in outs) == sum(1 for c in calls if c.status == "ok")
    assert all(o["ok"] >= 1 for o in outs), outs  # all four really competed
    assert all(o["refused"] == 2 for o in outs)  # every lane ended on a refusal, none on an error
    assert len(log) >= 10  # the cap was used: at least the calls that fit at their worst case
    assert cap - billed < worst  # and stopped only when one more worst case no longer fit
    assert sum(Decimal(c) for o in outs for c in o["cost"]) == billed
    assert entry.id == "fake/ok"


KILLED = textwrap.dedent(
    """
    import asyncio, sys
    from evalkit_core.models import ModelClient, Request
    async def main():
        async with ModelClient(registry_paths=[sys.argv[1]], env={"SHARED_FAKE_KEY": "sk-shared-limits-0123456789"}) as c:
            await c.complete("fake/slow", Request.of("k0-000000", max_tokens=40))
    asyncio.run(main())
    """
)


def test_a_killed_workers_reservation_is_charged_at_its_worst_case_by_the_next_process(
    store_location, provider, tmp_path
):
    registry = _registry(tmp_path, provider.base)
    reg = load_registry([registry], env={})
    with Store(store_location) as s:
        worst = ModelClient(registry=reg, store=s, env={}).worst_case("fake/slow", Request.of("k0-000000", max_tokens=40))
        set_budget_cap(s, worst * 3)
    seen = len(provider.log())
    victim = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(registry)], env={**os.environ, "EVALKIT_STORE": store_location}
    )
    try:
        limit = time.monotonic() + 60
        while not any(e["scenario"] == "slow:1.5" for e in provider.log()[seen:]):  # its request is in flight
            assert time.monotonic() < limit and victim.poll() is None
            time.sleep(0.01)
        os.kill(victim.pid, signal.SIGKILL)
    finally:
        victim.wait()

    async def next_worker() -> Decimal:
        with Store(store_location) as s:
            assert budget_status(s).reserved == worst  # the dead worker's reservation still holds the money
            async with ModelClient(registry=reg, store=s, env={KEY_ENV: KEY}) as client:
                assert [u.model_id for u in client.reconciled] == ["fake/slow"]  # found dead on start
                return (await client.complete("fake/ok", Request.of("n0-000000", max_tokens=40))).cost

    cost = asyncio.run(next_worker())
    with Store(store_location) as s:
        status = budget_status(s)
        calls = {c.model_id: c for c in list_calls(s)}
    assert status.reserved == 0
    assert status.spent == worst + cost  # the lost call at its worst case (it may have been billed), the new one exactly
    assert calls["fake/slow"].status == "unknown"
    assert calls["fake/ok"].status == "ok"


def test_the_late_answer_of_a_worker_taken_for_dead_is_settled_at_its_exact_cost(store_location, provider, tmp_path):
    registry = _registry(tmp_path, provider.base)
    reg = load_registry([registry], env={})

    async def go() -> tuple[Decimal, Decimal, list[Any]]:
        with Store(store_location) as mine, Store(store_location) as other:
            client = ModelClient(registry=reg, store=mine, env={KEY_ENV: KEY})
            async with client:
                req = Request.of("late-000000", max_tokens=40)
                worst = client.worst_case("fake/slow", req)
                task = asyncio.ensure_future(client.complete("fake/slow", req))
                while budget_status(other).reserved == 0:  # noqa: ASYNC110 - polls another connection
                    await asyncio.sleep(0.01)
                # its heartbeat lease ran out (say, a network partition): another process charges it in full
                lost = reconcile(other, alive=lambda *_: False)
                assert budget_status(other).spent == worst
                completion = await task
            return worst, completion.cost, lost

    worst, cost, lost = asyncio.run(go())
    assert len(lost) == 1
    assert cost < worst
    with Store(store_location) as s:
        status = budget_status(s)
        (call,) = list_calls(s)
        with s.snapshot() as db:
            kinds = [r[0] for r in db.execute("SELECT kind FROM budget_ledger WHERE call_id = ? ORDER BY seq", (call.call_id,))]
            note = db.execute("SELECT note FROM budget_ledger WHERE call_id = ? AND kind = 'settle'", (call.call_id,)).fetchone()[0]
    assert kinds == ["reserve", "unknown", "unknown", "settle"]  # charged, reversed, settled exactly
    assert "late answer" in note
    assert status.spent == cost  # the worst case was corrected to the exact cost
    assert status.reserved == 0
    assert (call.status, call.cost) == ("ok", cost)


# ------------------------------------------------------------------------------------------ rate limits


def test_a_sliding_window_of_one_minute_on_the_stores_clock(any_store):
    limit = RateLimit("p/m", 3, 100.0)

    def take(tokens: float, now: float) -> tuple[str | None, float]:
        with any_store.transaction() as db:
            return take_slot(db, limit, tokens, now=now)

    t0 = 1_000_000.0
    assert take(10, t0)[0] is not None
    assert take(10, t0 + 1)[0] is not None
    big, _ = take(70, t0 + 2)
    assert big is not None
    assert take(1, t0 + 3) == (None, pytest.approx(57.0))  # 3 requests in the window: wait for the first to leave
    event, wait = take(1, t0 + 60.0)
    assert event is not None and wait == 0.0  # the first has left the window: 3 requests, 81 tokens
    assert take(40, t0 + 61) == (None, pytest.approx(1.0))  # 2 requests but 71 + 40 tokens: wait for the 70
    # an answer that used fewer tokens than estimated gives the rest back
    with any_store.transaction() as db:
        settle_slot(db, big, 5)
    assert take(40, t0 + 61)[0] is not None  # 5 + 1 + 40 <= 100
    assert take(500, t0 + 200)[0] is not None  # larger than the whole limit: counts as the limit, does not hang
    with any_store.transaction() as db:
        assert any_store.clock(db) == pytest.approx(time.time(), abs=5)


def test_a_shared_requests_per_minute_limit_holds_across_processes(store_location, provider, tmp_path):
    rpm = 8
    registry = _registry(tmp_path, provider.base, f"limits = {{ requests_per_minute = {rpm} }}\n")
    gate = tmp_path / "gate"
    gate.mkdir()
    seen = len(provider.log())
    t0 = time.monotonic()
    outs = _workers(store_location, registry, gate, "fake/limited", calls=3, lanes=2, deadline=3.0)
    log = provider.log()[seen:]
    assert time.monotonic() - t0 < 60  # every request below fell in one window of a minute
    assert len(log) == rpm  # the limit held across 4 processes, and was used up, not merely blocked
    assert sum(o["ok"] for o in outs) == rpm
    gave_up = [g for o in outs for g in o["gave_up"]]
    assert len(gave_up) == 4 * 3 * 2 - rpm
    assert all("waiting for the rate limit" in g for g in gave_up), gave_up[:3]
    with Store(store_location) as s:
        assert budget_status(s).spent == _provider_cost(log, registry, "fake/limited")
