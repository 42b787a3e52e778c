"""The budget cap holds: across calls, across processes sharing one store, and across restarts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from decimal import Decimal

import pytest

from evalkit_core.models import (
    BudgetExceeded,
    ModelClient,
    Request,
    SimContext,
    budget_status,
    list_calls,
    parse_cap,
    set_budget_cap,
    worst_case_cost,
)
from evalkit_core.models._client import _wire_bytes
from evalkit_core.store import Store


def test_tiny_cap_ten_calls_halts_after_the_first_that_would_cross(
    client_factory, fake_registry, fake_provider, store
):
    entry = fake_registry.get("fake-anthropic/small")
    requests = [Request.of(f"call number {i}", max_tokens=100) for i in range(10)]
    worst = [worst_case_cost(entry, len(_wire_bytes(entry, r)), 100) for r in requests]
    actual = Decimal("0.000330")  # (10*3 + 20*15) / 1e6
    cap = Decimal("0.0035")
    set_budget_cap(store, cap)
    # what the rule says: call i goes ahead iff spent + its worst case <= cap
    spent, expected_ok = Decimal(0), 0
    while expected_ok < 10 and spent + worst[expected_ok] <= cap:
        spent += actual
        expected_ok += 1
    assert 1 < expected_ok < 10  # the test is meaningful: some calls pass, then one is refused

    hits_before = fake_provider.hits("small")

    async def go() -> tuple[int, BudgetExceeded | None]:
        done = 0
        async with client_factory() as client:
            for r in requests:
                try:
                    c = await client.complete("fake-anthropic/small", r)
                except BudgetExceeded as exc:
                    return done, exc
                assert c.cost == actual
                done += 1
        return done, None

    done, refusal = asyncio.run(go())
    assert done == expected_ok
    assert refusal is not None
    assert "budget cap $0.0035 would be crossed" in str(refusal)
    assert fake_provider.hits("small") - hits_before == expected_ok  # the refused call sent nothing
    status = budget_status(store)
    assert status.spent == actual * expected_ok <= cap
    assert status.reserved == 0
    assert status.outstanding == 0
    calls = list_calls(store)
    assert [c.status for c in calls] == ["ok"] * expected_ok + ["refused"]


def test_restart_sees_earlier_spend(tmp_path):
    home = tmp_path / "home"
    req = Request.of("task", max_tokens=64, sim_context=SimContext(reference="def f(x):\n    return x + 1\n"))

    async def spend(n: int) -> Decimal:
        total = Decimal(0)
        async with ModelClient(home=home, env={}) as client:
            for _ in range(n):
                total += (await client.complete("sim/strong", req)).cost
        return total

    with Store.open(home) as s:
        set_budget_cap(s, Decimal("0.01"))
    first = asyncio.run(spend(3))
    # a new client, a new store connection: the spend is still there
    with Store.open(home) as s:
        assert budget_status(s).spent == first
        set_budget_cap(s, first)  # now nothing is left

    with pytest.raises(BudgetExceeded):
        asyncio.run(spend(1))
    with Store.open(home) as s:
        assert budget_status(s).spent == first


RACER = textwrap.dedent(
    """
    import asyncio, json, pathlib, sys, time
    from evalkit_core.models import BudgetExceeded, ModelClient, Request, SimContext

    home, tag, registry = sys.argv[1], sys.argv[2], sys.argv[3]
    other = {"a": "b", "b": "a"}[tag]
    base = pathlib.Path(home)
    both_started = False
    ref = "def clamp(x, lo, hi):\\n    if x < lo:\\n        return lo\\n    return min(x, hi)\\n"

    async def worker(client, w, out):
        global both_started
        i = 0
        while True:
            i += 1
            req = Request.of(f"{tag}-{w}-{i}", max_tokens=40, sim_context=SimContext(reference=ref, sample=i))
            try:
                c = await client.complete("sim/racer", req)
            except BudgetExceeded:
                out["refused"] += 1
                return
            out["ok"] += 1
            out["cost"].append(str(c.cost))
            # a second barrier: neither racer spends past its first call until the other has made one, so the
            # race for the rest of the cap is between two processes that both really started (a racer that
            # imported slower once found the cap spent before its first call)
            if not both_started:
                (base / f"first-{tag}").touch()
                while not (base / f"first-{other}").exists():
                    await asyncio.sleep(0.005)
                both_started = True

    async def main():
        out = {"ok": 0, "refused": 0, "cost": []}
        async with ModelClient(home=home, env={}, registry_paths=[registry]) as client:
            (base / f"ready-{tag}").touch()
            while not (base / "go").exists():  # start together
                time.sleep(0.005)
            await asyncio.gather(*(worker(client, w, out) for w in range(4)))
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def test_two_processes_racing_never_exceed_the_cap(tmp_path):
    home = tmp_path / "home"
    registry = tmp_path / "racer.toml"
    registry.write_text(
        '[models."sim/racer"]\nprovider = "sim"\napi_model = "racer"\nbase_url = ""\napi_key_env = ""\n'
        'context_window = 1000\nmax_output = 100\nsim = { success_rate = "0.5", latency_ms = 1 }\n'
        'prices = { input = "5", output = "20", cache_read = "0.5", cache_write = "6.25" }\n'
    )
    cap = Decimal("0.05")
    with Store.open(home) as s:
        set_budget_cap(s, cap)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(home), tag, str(registry)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for tag in ("a", "b")
    ]
    deadline = time.monotonic() + 60
    while not all((home / f"ready-{t}").exists() for t in ("a", "b")):
        assert time.monotonic() < deadline, "racers did not start"
        time.sleep(0.01)
    (home / "go").touch()
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr.decode()
        outs.append(json.loads(stdout))
    # Both really ran to the cap: each made calls (the racers wait for each other's first) and every one of its
    # workers ended on a refusal. How the rest of the calls split is the scheduler's business.
    assert all(o["ok"] >= 1 for o in outs), outs
    assert all(o["refused"] == 4 for o in outs), outs
    with Store.open(home) as s:
        status = budget_status(s)
        calls = list_calls(s)
    reported = sum(Decimal(c) for o in outs for c in o["cost"])
    assert status.spent == reported  # ledger and callers agree to the digit
    assert status.spent <= cap
    assert status.reserved == 0
    assert sum(c.cost or 0 for c in calls) == status.spent
    assert sum(1 for c in calls if c.status == "ok") == sum(o["ok"] for o in outs)


def test_cap_parse_set_and_clear(store):
    assert parse_cap("5") == Decimal(5)
    assert parse_cap("$0.25") == Decimal("0.25")
    assert parse_cap("none") is None
    with pytest.raises(Exception, match="budget cap: expected"):
        parse_cap("five dollars")
    with pytest.raises(Exception, match="non-negative"):
        parse_cap("-1")
    assert set_budget_cap(store, Decimal("1.50")).cap == Decimal("1.5")
    assert set_budget_cap(store, None).cap is None
    rows = store._db.execute("SELECT kind, amount, note FROM budget_ledger ORDER BY seq").fetchall()
    assert rows == [("set_cap", "1.5", None), ("set_cap", "0", "cap removed")]
