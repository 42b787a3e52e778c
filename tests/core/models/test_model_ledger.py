"""The budget ledger under faults: owners and leases, dead processes, reconciliation, invoices, migration.

The invariant, checked after every step of random interleavings: ``spent + reserved <= cap``; ``reserved`` is
the sum of outstanding reservations; ``spent`` is the sum of everything the ledger charged; and once reconciled,
no reservation of a dead process is left.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from evalkit_core import ConfigError
from evalkit_core.models import (
    BudgetExceeded,
    budget_status,
    list_calls,
    reconcile,
    set_budget_cap,
    settle_from_invoice,
    unknown_outcomes,
)
from evalkit_core.models._budget import settle, try_reserve
from evalkit_core.store import MIGRATIONS, SCHEMA_VERSION, Process, Store, is_alive, this_process, utc_now
from evalkit_core.store import _store as store_module
from fake_provider import FakeProvider, registry_toml  # pyright: ignore[reportImportCycles]

CAP = Decimal(10)
AMOUNTS = [Decimal("0.5"), Decimal("1.25"), Decimal(2), Decimal("3.5"), Decimal(6), Decimal("0.01")]
# what a settle claims, as a share of its reservation: honest (<= 1), or lying (> 1, negative)
SHARES = [Decimal(0), Decimal("0.5"), Decimal(1), Decimal("1.5"), Decimal(40), Decimal(-1)]
KINDS = ["reserve", "reserve", "reserve", "settle", "settle", "crash", "reconcile", "zombie"]
OPS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 2), st.integers(0, 5)).map(
        lambda t: (t[0], t[1], AMOUNTS[t[2]] if t[0] == "reserve" else SHARES[t[2]])
    ),
    min_size=5,
    max_size=30,
)


def _totals(store: Store) -> tuple[Decimal, Decimal, Decimal, Decimal]:
    with store.snapshot() as db:
        spent, reserved = (Decimal(x) for x in db.execute("SELECT spent, reserved FROM budget").fetchone())
        outstanding = sum(
            (Decimal(a) for (a,) in db.execute("SELECT amount FROM budget_reservations")), Decimal(0)
        )
        charged = sum(
            (
                Decimal(a)
                for (a,) in db.execute(
                    "SELECT amount FROM budget_ledger WHERE kind IN ('settle', 'unknown', 'invoice')"
                )
            ),
            Decimal(0),
        )
    return spent, reserved, outstanding, charged


@given(OPS)
@example([("reserve", 0, Decimal(2)), ("settle", 0, Decimal(40))])
@example(
    [
        ("reserve", 1, Decimal(6)),
        ("crash", 1, Decimal(0)),
        ("reconcile", 0, Decimal(0)),
        ("zombie", 2, Decimal(1)),
    ]
)
def test_settled_plus_reserved_never_passes_the_cap_under_any_interleaving(
    ops: list[tuple[str, int, Decimal]],
):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        alive: dict[str, bool] = {}
        stores = [Store.open(home) for _ in range(3)]  # three "processes": three connections, three owners
        open_: list[list[tuple[str, Decimal]]] = [[], [], []]
        orphans: list[tuple[str, Decimal]] = []  # reservations of crashed processes
        set_budget_cap(stores[0], CAP)

        def liveness(owner_id: str, _p: Process, _hb: str) -> bool:
            return alive.get(owner_id, True)

        try:
            for op, p, value in ops:
                s = stores[p]
                if op == "reserve":
                    with s.transaction() as db:
                        got = try_reserve(
                            db, call_id=uuid.uuid4().hex, model_id="m", amount=value, now=utc_now(),
                            owner_id=s.owner_id,
                        )  # fmt: skip
                    if isinstance(got, str):
                        open_[p].append((got, value))
                    else:
                        assert isinstance(got, BudgetExceeded)
                        assert got.spent + got.reserved + value > CAP
                elif op == "settle" and open_[p]:
                    rid, amount = open_[p].pop(0)
                    with s.transaction() as db:
                        charged = settle(db, rid, amount * value, now=utc_now())
                    assert charged is not None
                    assert 0 <= charged <= amount  # never more than was reserved, whatever was claimed
                elif op == "crash":
                    alive[s.owner_id] = False
                    orphans.extend(open_[p])
                    open_[p] = []
                    s.close()  # its owner row stays: its reservations name it
                    stores[p] = Store.open(home)  # the process is restarted
                elif op == "reconcile":
                    found = reconcile(s, alive=liveness)
                    assert {u.charged for u in found} <= {a for _, a in orphans}
                    with s.snapshot() as db:
                        left = {r for (r,) in db.execute("SELECT reservation_id FROM budget_reservations")}
                    assert not left & {rid for rid, _ in orphans}  # no dead process's reservation survives
                elif op == "zombie" and orphans:
                    # a process taken for dead settles late: already charged in full if reconciled, so no more
                    rid, amount = orphans[0]
                    before = _totals(s)[0]
                    with s.transaction() as db:
                        charged = settle(db, rid, amount * value, now=utc_now())
                    if charged is None:
                        assert _totals(s)[0] == before
                    else:
                        orphans.pop(0)
                        assert charged <= amount
                spent, reserved, outstanding, charged_sum = _totals(stores[0])
                assert spent + reserved <= CAP
                assert reserved == outstanding
                assert spent == charged_sum
        finally:
            for s in stores:
                s.close()


# ------------------------------------------------------------------------------------------ owners


def test_owner_liveness_by_pid_start_time_boot_and_heartbeat():
    me = this_process()
    now = utc_now()
    assert is_alive(me, now)
    assert not is_alive(Process(me.host, me.boot_id, me.pid, me.start_ticks + 1), now)  # a reused pid
    assert not is_alive(Process(me.host, "another-boot", me.pid, me.start_ticks), now)  # before a reboot
    other = Process("elsewhere", "b", 1, 1)
    assert is_alive(other, now)  # another host: the heartbeat decides
    assert not is_alive(other, "2000-01-01T00:00:00.000000Z")


def test_a_dead_processes_reservation_is_charged_at_its_worst_case_never_released(tmp_path):
    # a real process that reserves and dies without settling
    code = textwrap.dedent(
        """
        import sys, uuid
        from decimal import Decimal
        from evalkit_core.models._budget import try_reserve
        from evalkit_core.store import Store, utc_now
        s = Store.open(sys.argv[1])
        with s.transaction() as db:
            db.execute("INSERT INTO registries VALUES ('sha256:r', '{}', 'x')")
            db.execute("INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated,"
                       " status, attempts, request_digest, registry_digest, charged, owner_id, label)"
                       " VALUES ('c1', ?, 'm', 'openai', 'm', 0, 'pending', 0, 'd', 'sha256:r', '0', ?, 'campaign:x')",
                       (utc_now(), s.owner_id))
            try_reserve(db, call_id='c1', model_id='m', amount=Decimal('0.75'), now=utc_now(), owner_id=s.owner_id)
        import os; os._exit(0)  # gone without a word
        """
    )
    home = tmp_path / "home"
    with Store.open(home) as store:
        set_budget_cap(store, Decimal(1))
    subprocess.run([sys.executable, "-c", code, str(home)], check=True)
    with Store.open(home) as store:
        status = budget_status(store)
        assert (status.spent, status.reserved, status.outstanding) == (0, Decimal("0.75"), 1)
        [found] = reconcile(store)
        assert (found.call_id, found.charged, found.label) == ("c1", Decimal("0.75"), "campaign:x")
        status = budget_status(store)
        assert (status.spent, status.reserved, status.unknown, status.unknown_charged) == (
            Decimal("0.75"), 0, 1, Decimal("0.75"),
        )  # fmt: skip
        assert reconcile(store) == []  # once
        [record] = list_calls(store)
        assert record.status == "unknown"
        assert "died during attempt 1" in (record.error or "")
        with store.snapshot() as db:
            assert db.execute("SELECT count(*) FROM owners").fetchone()[0] == 0  # the dead owner is reaped
        # the invoice says it cost less: the worst case is replaced, all rows or none
        good = tmp_path / "invoice.csv"
        good.write_text("date,call_id,cost_usd\n2025-06-01,c1,0.0123\n")
        [settled] = settle_from_invoice(store, good)
        assert settled.charged == Decimal("0.0123")
        assert budget_status(store).spent == Decimal("0.0123")
        with pytest.raises(ConfigError, match="already settled"):
            settle_from_invoice(store, good)
        assert [u.invoiced for u in unknown_outcomes(store)] == [str(good)]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("call_id,cost_usd\nnope,0.1\n", "line 2: call nope: no such call"),
        ("call_id,cost_usd\nc1,0.1\nc1,0.1\n", "line 3: call c1: listed twice"),
        ("call_id,cost_usd\nc1,5\n", "more than the $0.75 worst case"),
        ("call_id,cost_usd\nc1,-1\n", "expected a non-negative amount"),
        ("call_id,cost_usd\nc1,lots\n", "expected a decimal amount"),
        ("id,amount\nc1,1\n", "expected a CSV header with columns call_id and cost_usd"),
        ('{"call_id": "c2", "cost_usd": "0.1"}\n', "status is 'ok'; only unknown outcomes"),
        ('{"call_id": "c1"}\n', "field 'cost_usd'"),
    ],
)
def test_invoice_errors_name_the_line_and_change_nothing(tmp_path, text, needle):
    with Store.open(tmp_path / "home") as store:
        with store.transaction() as db:
            db.execute("INSERT INTO registries VALUES ('sha256:r', '{}', 'x')")
            for cid, status in (("c1", "unknown"), ("c2", "ok")):
                db.execute(
                    "INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated, status,"
                    " attempts, request_digest, registry_digest, charged) VALUES (?, 'x', 'm', 'openai', 'm', 0, ?,"
                    " 1, 'd', 'sha256:r', '0.75')",
                    (cid, status),
                )
        path = tmp_path / "invoice.txt"
        path.write_text(text)
        with pytest.raises(ConfigError, match=needle.replace("$", r"\$")) as info:
            settle_from_invoice(store, path)
        assert str(path) in str(info.value)
        assert budget_status(store).spent == 0


def test_the_heartbeat_keeps_an_owner_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "HEARTBEAT_SECONDS", 0.05)
    with Store.open(tmp_path) as store:
        owner = store.owner_id
        with store.snapshot() as db:
            (first,) = db.execute("SELECT heartbeat_at FROM owners WHERE owner_id = ?", (owner,)).fetchone()
        time.sleep(0.3)
        with store.snapshot() as db:
            (later,) = db.execute("SELECT heartbeat_at FROM owners WHERE owner_id = ?", (owner,)).fetchone()
        assert later > first
    with Store.open(tmp_path) as store, store.snapshot() as db:  # a clean close leaves no owner row
        assert db.execute("SELECT count(*) FROM owners").fetchone()[0] == 0


def test_a_version_1_store_migrates_and_its_leaked_reservations_are_reconciled(tmp_path):
    path = tmp_path / "evalkit.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    for statement in MIGRATIONS[0].statements:
        db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO registries VALUES ('sha256:r', '{}', 'x')")
    db.execute(
        "INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated, status, attempts,"
        " request_digest, registry_digest, charged) VALUES ('old', 'x', 'm', 'openai', 'm', 0, 'pending', 0, 'd',"
        " 'sha256:r', '0')"
    )
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    db.execute(
        "INSERT INTO budget_reservations VALUES ('r1', 'old', 'm', '0.5', 'x', ?)", (int(dead.stdout),)
    )
    db.execute("UPDATE budget SET reserved = '0.5'")
    db.close()
    with Store.open(tmp_path) as store:
        assert store.schema_version == SCHEMA_VERSION
        [found] = reconcile(store)  # schema 1 had no owners: a pid that is gone is enough
        assert found.call_id == "old"
        assert budget_status(store).spent == Decimal("0.5")
        assert [c.status for c in list_calls(store)] == ["unknown"]


# ------------------------------------------------------------------------------------------ SIGKILL


KILLED = textwrap.dedent(
    """
    import asyncio, sys
    from evalkit_core.models import ModelClient, Request, load_registry
    home, registry, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

    async def main():
        async with ModelClient(home=home, registry=load_registry([registry], env={}), env={"FAKE_KEY": "k"}) as c:
            await asyncio.gather(*(c.complete("fake-openai/slow:30", Request.of(f"call {i}", max_tokens=10))
                                   for i in range(n)))

    asyncio.run(main())
    """
)


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


def test_sigkill_with_calls_in_flight_the_store_accounts_for_every_request_the_provider_saw(
    provider, tmp_path
):
    """Kill a process with 6 calls in flight; the provider's own log and the store must agree: every request
    it received is a call charged at its worst case as an unknown outcome, and nothing is left reserved."""
    home = tmp_path / "home"
    registry = tmp_path / "fake.toml"
    registry.write_text(registry_toml(provider.base, ["slow:30"], provider="openai"))
    with Store.open(home) as store:
        set_budget_cap(store, Decimal(1))
    before = provider.hits("slow:30")
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(home), str(registry), "6"])
    try:
        deadline = time.monotonic() + 30
        while provider.hits("slow:30") - before < 6:
            assert time.monotonic() < deadline, "the requests never arrived"
            time.sleep(0.02)
        with Store.open(home) as store:  # while it lives, its reservations are its own
            assert budget_status(store).outstanding == 6
            assert reconcile(store) == []
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    seen = [r["prompt"] for r in provider.log()[before:]]
    assert len(seen) == 6
    from typer.testing import CliRunner

    from evalkit_cli import app

    shown = CliRunner().invoke(app, ["budget", "show", "--json", "--home", str(home)])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert len(data["reconciled_now"]) == 6  # listed with their call ids
    assert data["reserved"] == "0"
    assert data["outstanding_reservations"] == 0
    with Store.open(home) as store:
        calls = list_calls(store)
        status = budget_status(store)
    assert sorted(c.status for c in calls) == ["unknown"] * 6
    assert {c.call_id for c in calls} == {u["call_id"] for u in data["reconciled_now"]}
    assert all(c.charged == c.worst_case for c in calls)
    assert status.spent == sum((c.charged for c in calls), Decimal(0)) <= Decimal(1)


def test_a_refused_eval_settles_every_call_in_flight(tmp_path):
    """`evalkit eval --solver model:...` when the cap refuses mid-run: one line, exit 2, nothing left reserved
    (it used to die with 'Cannot operate on a closed database')."""
    home = tmp_path / "home"
    registry = tmp_path / "slow.toml"
    registry.write_text(
        '[models."sim/slow"]\nprovider = "sim"\napi_model = "slow"\nbase_url = ""\napi_key_env = ""\n'
        'context_window = 32000\nmax_output = 4096\nsim = { success_rate = "0.5", latency_ms = 50 }\n'
        'prices = { input = "1.00", output = "4.00", cache_read = "0.10", cache_write = "1.25" }\n'
    )
    with Store.open(home) as store:
        set_budget_cap(store, Decimal("0.05"))
    env = {**os.environ, "EVALKIT_HOME": str(home), "EVALKIT_REGISTRY": str(registry)}
    bank = Path(__file__).resolve().parents[3] / "tasks"
    p = subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "eval", "--tasks", str(bank), "--solver", "model:sim/slow", "--k", "1"],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1
    assert "budget cap $0.05 would be crossed" in p.stderr
    with Store.open(home) as store:
        status = budget_status(store)
        assert (status.reserved, status.outstanding) == (0, 0)
        assert status.spent <= Decimal("0.05")
        assert {c.status for c in list_calls(store)} <= {"ok", "error", "refused"}
