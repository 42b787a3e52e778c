"""Campaigns under faults: one runner per campaign, a budget that counts every charge, transient refusals,
answers with unusable usage, integrity of stored costs, deadlines, and keys that follow hosts.

The provider is the hostile loopback fake of ``tests/fake_provider.py`` (127.0.0.1 only, started here).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from campaign_support import SUBSET, write_campaign  # pyright: ignore[reportImplicitRelativeImport]
from typer.testing import CliRunner

import evalkit_core.models._client as client_module
import evalkit_router._campaign as campaign_module
import evalkit_router._campaign_store as lease_module
from evalkit_cli import app
from evalkit_core.models import (
    RegistryError,
    RetryPolicy,
    budget_status,
    list_calls,
    load_registry,
    set_budget_cap,
)
from evalkit_core.models._budget import settle, try_reserve
from evalkit_core.store import Store, utc_now
from evalkit_router import (
    CampaignError,
    CampaignIntegrityError,
    campaign_report,
    run_campaign,
    verify_campaign_receipt,
)
from fake_provider import FakeProvider, registry_toml  # pyright: ignore[reportImportCycles]

CANARY = "CANARY-7e1d3c5b9a0f2e4d6c8b0a1f3e5d7c9b"
runner = CliRunner()


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY", CANARY)
    # in-process runs retry without the production backoff (subprocess runs keep it)
    monkeypatch.setattr(
        client_module, "RetryPolicy", lambda: RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.002)
    )


def _evalkit(
    *args: str, home: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALKIT_HOME": str(home), "FAKE_KEY": CANARY, **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-c", "from evalkit_cli import main; main()", *args],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip


def _campaign(tmp_path: Path, provider: FakeProvider, scenarios: list[str], **kw: object) -> Path:
    reg = registry_toml(provider.base, scenarios, provider="openai")
    models = tuple(f"fake-openai/{s}" for s in scenarios)
    return write_campaign(tmp_path / "c", models=models, registry=reg, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ the lease


def test_a_second_runner_is_refused_with_one_line_naming_the_holder(tmp_path, provider):
    home = tmp_path / "home"
    path = _campaign(tmp_path, provider, ["ok"], k=1, ids=SUBSET[:1])
    with Store.open(home) as holder:  # this test process holds the lease, as a running campaign would
        lease_module.acquire_lease(holder, "c")
        refused = _evalkit("campaign", "run", str(path), home=home)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1
        assert f"campaign 'c' is already running: process {os.getpid()} on " in refused.stderr
        with pytest.raises(CampaignError, match="already running"):
            run_campaign(path, home=home)
        lease_module.release_lease(holder, "c")
    assert run_campaign(path, home=home).status == "done"


def test_a_lease_left_by_a_dead_process_is_taken_over(tmp_path, provider):
    home = tmp_path / "home"
    path = _campaign(tmp_path, provider, ["ok"], k=1, ids=SUBSET[:1])
    code = (
        "import sys, os\nfrom evalkit_core.store import Store\nimport evalkit_router._campaign_store as c\n"
        "s = Store.open(sys.argv[1])\nc.acquire_lease(s, 'c')\nos._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(home)], check=True, timeout=60)
    with Store.open(home) as store, store.snapshot() as db:
        assert db.execute("SELECT count(*) FROM campaign_leases").fetchone()[0] == 1
    assert run_campaign(path, home=home).status == "done"


# ------------------------------------------------------------------------------------------ the budget


def test_budget_usd_counts_failed_attempts_and_halts(tmp_path, provider):
    """A provider that always answers malformed JSON: every attempt may have been billed, so each is charged
    its worst case, and the campaign halts on its own budget instead of ending 'incomplete' far past it."""
    home = tmp_path / "home"
    path = _campaign(tmp_path, provider, ["badjson"], k=4, budget="0.01", extra="max_tokens = 64")
    before = provider.hits("badjson")
    outcome = run_campaign(path, home=home)
    assert outcome.status == "halted"
    assert outcome.halted_by is not None
    assert outcome.halted_by.startswith("campaign budget $0.01 reached")
    assert outcome.spent_total <= Decimal("0.01")
    with Store.open(home) as store:
        calls = list_calls(store)
        charged = sum((c.charged for c in calls), Decimal(0))
    assert charged == outcome.spent_total > 0  # the campaign's spend is the model layer's charges
    attempts = provider.hits("badjson") - before
    assert attempts == sum(c.attempts for c in calls)  # every attempt the provider saw is in the record...
    assert all(c.charged == c.worst_case * c.attempts for c in calls if c.worst_case)  # ...charged in full
    again = run_campaign(path, home=home)  # resuming with the same budget sends nothing more
    assert again.status == "halted"
    assert provider.hits("badjson") - before == attempts


def test_a_transient_global_refusal_is_retried_before_halting(tmp_path, provider, monkeypatch):
    monkeypatch.setattr(campaign_module, "REFUSAL_BACKOFF", 0.05)
    home = tmp_path / "home"
    path = _campaign(tmp_path, provider, ["ok"], k=1, ids=SUBSET[:1])
    with Store.open(home) as other:  # another live campaign holds most of the cap for a moment
        set_budget_cap(other, Decimal("0.05"))
        with other.transaction() as db:
            rid = try_reserve(
                db,
                call_id="other",
                model_id="m",
                amount=Decimal("0.0499"),
                now=utc_now(),
                owner_id=other.owner_id,
            )
        assert isinstance(rid, str)

        def release() -> None:
            time.sleep(0.4)
            with other.transaction() as db:
                settle(db, rid, Decimal(0), now=utc_now())

        t = threading.Thread(target=release)
        t.start()
        t0 = time.monotonic()
        outcome = run_campaign(path, home=home)
        t.join()
    assert outcome.status == "done"  # it waited for the reservation to settle, then ran
    assert time.monotonic() - t0 >= 0.4


def test_a_permanent_global_refusal_halts_at_once(tmp_path, provider, monkeypatch):
    monkeypatch.setattr(campaign_module, "REFUSAL_BACKOFF", 5.0)  # would be slow if it waited
    home = tmp_path / "home"
    path = _campaign(tmp_path, provider, ["ok"], k=1, ids=SUBSET[:1])
    with Store.open(home) as store:
        set_budget_cap(store, Decimal("0.000001"))
    t0 = time.monotonic()
    outcome = run_campaign(path, home=home)
    assert outcome.status == "halted"
    assert outcome.halted_by is not None
    assert "global budget cap" in outcome.halted_by
    assert time.monotonic() - t0 < 5


# ------------------------------------------------------------------------------------------ answers


def test_answers_with_unusable_usage_are_stored_flagged_not_thrown_away(tmp_path, provider):
    home = tmp_path / "home"
    path = _campaign(tmp_path, provider, ["nousage"], k=2)
    first = run_campaign(path, home=home)
    assert first.status == "done"
    assert first.flagged == first.called == 6
    with Store.open(home) as store:
        rows = store._db.execute("SELECT anomaly, cost FROM rollouts").fetchall()
        calls = {c.call_id: c for c in list_calls(store)}
        report = campaign_report(store, "c")  # the integrity check accepts a cost charged at the bound
    assert len(rows) == 6
    assert all(a is not None and "usage unusable" in a for a, _ in rows)
    assert all(c.cost == c.worst_case for c in calls.values())
    assert report.summary["rollouts"]["stored"] == 6  # type: ignore[index]
    before = provider.hits("nousage")
    assert run_campaign(path, home=home).called == 0  # paid once, never again
    assert provider.hits("nousage") == before


def test_calls_in_flight_when_a_run_died_are_reported_as_paid_answer_lost(tmp_path, provider):
    home = tmp_path / "home"
    path = _campaign(tmp_path, provider, ["ok"], k=1, ids=SUBSET[:1])
    code = (
        "import sys, os, uuid\nfrom decimal import Decimal\nfrom evalkit_core.store import Store, utc_now\n"
        "from evalkit_core.models._budget import try_reserve\n"
        "s = Store.open(sys.argv[1])\n"
        "with s.transaction() as db:\n"
        "    db.execute(\"INSERT INTO registries VALUES ('sha256:r', '{}', 'x')\")\n"
        '    db.execute("INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated,'
        " status, attempts, request_digest, registry_digest, charged, label, owner_id) VALUES ('lost1', ?,"
        " 'fake-openai/ok', 'openai', 'ok', 0, 'pending', 0, 'd', 'sha256:r', '0', 'campaign:c', ?)\","
        " (utc_now(), s.owner_id))\n"
        "    try_reserve(db, call_id='lost1', model_id='fake-openai/ok', amount=Decimal('0.002'), now=utc_now(),"
        " owner_id=s.owner_id)\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(home)], check=True, timeout=60)
    r = runner.invoke(app, ["campaign", "run", str(path), "--home", str(home), "--json"])
    assert r.exit_code == 0, r.output
    run = json.loads(r.stdout)["run"]
    assert run["lost"] == [
        {"call_id": "lost1", "model_id": "fake-openai/ok", "status": "unknown", "charged_usd": "0.002"}
    ]
    assert Decimal(run["spent_total_usd"]) >= Decimal("0.002")  # the lost call counts against the campaign
    text = runner.invoke(app, ["campaign", "run", str(path), "--home", str(home)])
    assert "paid, answer lost: 1 call(s) in flight when an earlier run died, $0.002" in text.output


def test_a_failing_record_keeps_the_payment(tmp_path, provider):
    """The rollout is written in the settle transaction; if writing it fails, the settle still lands."""
    import asyncio

    from evalkit_core.models import ModelClient, Request

    reg_file = tmp_path / "r.toml"
    reg_file.write_text(registry_toml(provider.base, ["ok"], provider="openai"))

    def record(db: sqlite3.Connection, _c: object) -> None:
        db.execute("INSERT INTO no_such_table VALUES (1)")

    with Store.open(tmp_path / "home") as store:

        async def go() -> None:
            async with ModelClient(registry=load_registry([reg_file], env={}), store=store) as c:
                await c.complete("fake-openai/ok", Request.of("x"), record=record)

        with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
            asyncio.run(go())
        [call] = list_calls(store)
        assert call.status == "ok"
        assert budget_status(store).spent == call.charged > 0
        assert budget_status(store).reserved == 0


# ------------------------------------------------------------------------------------------ integrity


DAMAGE = {
    "rollout": "UPDATE rollouts SET cost = '0.0000001' WHERE rowid = (SELECT min(rowid) FROM rollouts)",
    "call": "UPDATE model_calls SET cost = '0.0000001' WHERE call_id = (SELECT call_id FROM rollouts LIMIT 1)",
    "completion": "UPDATE rollouts SET completion = json_set(completion, '$.cost', '9')"
    " WHERE rowid = (SELECT min(rowid) FROM rollouts)",
    "ledger": "UPDATE budget_ledger SET amount = '1' WHERE kind = 'settle'"
    " AND call_id = (SELECT call_id FROM rollouts LIMIT 1)",
    "usage": "UPDATE model_calls SET output_tokens = output_tokens + 1"
    " WHERE call_id = (SELECT call_id FROM rollouts LIMIT 1)",
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, provider: FakeProvider) -> tuple[Path, Path]:
    """One finished campaign (store and receipt), copied by each test that damages it."""
    base = tmp_path_factory.mktemp("finished")
    path = _campaign(base, provider, ["ok"], k=1)
    r = runner.invoke(
        app, ["campaign", "run", str(path), "--home", str(base / "home")], env={"FAKE_KEY": CANARY}
    )
    assert r.exit_code == 0, r.output
    return path, base / "home"


def _damaged(tmp_path: Path, finished: tuple[Path, Path], where: str) -> Path:
    home = tmp_path / "home"
    shutil.copytree(finished[1], home)
    receipt = home / "campaigns" / "c" / "receipt.json"
    text = receipt.read_text().replace(str(finished[1]), str(home))  # the results file the copy holds
    receipt.write_text(text)
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        db.execute(DAMAGE[where])
    return home


@pytest.mark.parametrize("where", sorted(DAMAGE))
def test_silent_damage_to_a_stored_cost_is_an_error_naming_the_row(tmp_path, finished, where):
    home = _damaged(tmp_path, finished, where)
    with Store.open(home) as store:
        with pytest.raises(CampaignIntegrityError, match=r"rollout sha256:\w+ \(") as info:
            campaign_report(store, "c")
        assert "no report or receipt is made" in str(info.value)
        checks = {
            c.name: c for c in verify_campaign_receipt(home / "campaigns" / "c" / "receipt.json", store=store)
        }
    assert not checks["ledger"].ok
    assert checks["results"].ok  # the files alone cannot see it: only the ledger check does


def test_a_damaged_store_gets_no_new_receipt_and_the_cli_says_so_in_one_line(tmp_path, finished):
    home = _damaged(tmp_path, finished, "call")
    receipt = home / "campaigns" / "c" / "receipt.json"
    before = receipt.read_bytes()
    p = _evalkit("campaign", "run", str(finished[0]), home=home)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1
    assert "differs from the call record's $0.0000001" in p.stderr
    assert receipt.read_bytes() == before  # no new receipt over the damage
    v = runner.invoke(app, ["campaign", "verify", str(receipt), "--home", str(home)])
    assert v.exit_code == 1
    assert "FAIL ledger" in v.output
    clean = runner.invoke(app, ["campaign", "verify", str(finished[1] / "campaigns" / "c" / "receipt.json"),
                                "--home", str(finished[1])])  # fmt: skip
    assert clean.exit_code == 0, clean.output
    assert "ok   ledger" in clean.output


# ------------------------------------------------------------------------------------------ deadlines, keys


def test_deadlines_from_the_campaign_file_and_the_cli(tmp_path, provider):
    home = tmp_path / "home"
    path = _campaign(
        tmp_path, provider, ["slow:1"], k=1, ids=SUBSET[:1], extra="timeouts = { attempt = 0.3 }"
    )
    out = run_campaign(path, home=home)
    assert out.status == "incomplete"
    assert "within the attempt deadline of 0.3s" in out.model_errors[0]
    r = runner.invoke(
        app, ["campaign", "run", str(path), "--home", str(home), "--timeout", "attempt=0.2", "--json"]
    )
    assert r.exit_code == 0, r.output
    assert "attempt deadline of 0.2s" in json.loads(r.stdout)["run"]["model_errors"][0]
    bad = _evalkit("campaign", "run", str(path), "--timeout", "attempt=soon", home=home)
    assert bad.returncode == 2
    assert "--timeout" in bad.stderr
    bad_file = write_campaign(tmp_path / "bad", extra="timeouts = { wait = 3 }")
    with pytest.raises(CampaignError, match="field 'timeouts': unknown deadline"):
        run_campaign(bad_file, home=home)


def test_a_layer_cannot_send_a_shipped_models_key_to_another_host(tmp_path, provider):
    moved = tmp_path / "moved.toml"
    moved.write_text(f'[models."openai/gpt-4o"]\nbase_url = "{provider.base}/v1"\n')
    with pytest.raises(RegistryError, match=r"moves base_url .* without naming api_key_env"):
        load_registry([moved], env={})
    env_layer = _evalkit("models", "list", home=tmp_path / "home", extra_env={"EVALKIT_REGISTRY": str(moved)})
    assert env_layer.returncode == 2
    assert "without naming api_key_env" in env_layer.stderr
    path = write_campaign(
        tmp_path / "c", models=("openai/gpt-4o",), k=1, ids=SUBSET[:1], registry=moved.read_text()
    )
    p = _evalkit("campaign", "run", str(path), home=tmp_path / "home")
    assert p.returncode == 2
    assert "without naming api_key_env" in p.stderr
    # naming the key in the same table is allowed, and the run says which key goes where
    moved.write_text(f'[models."openai/gpt-4o"]\nbase_url = "{provider.base}/v1"\napi_key_env = "FAKE_KEY"\n')
    path = write_campaign(
        tmp_path / "c", models=("openai/gpt-4o",), k=1, ids=SUBSET[:1], registry=moved.read_text()
    )
    p = _evalkit("campaign", "run", str(path), home=tmp_path / "home")
    assert p.returncode == 0, p.stderr
    assert f"key FAKE_KEY -> {provider.base} (openai/gpt-4o)" in p.stderr


def test_a_canary_key_reaches_no_output_file_or_store(tmp_path, provider):
    """Every echo the fake can do, through the whole CLI: stdout, stderr, the store and the outputs stay clean."""
    home = tmp_path / "home"
    scenarios = [
        "echo:0",
        "echo:296",
        "echoraw:299",
        "echo200:290",
        "echousage",
        "redirect:302",
        "usage:-1:1",
    ]
    path = _campaign(tmp_path, provider, scenarios, k=1, ids=SUBSET[:1])
    p = _evalkit("campaign", "run", str(path), home=home)
    assert p.returncode == 0, p.stderr
    assert any(r["key"] == CANARY for r in provider.log())
    assert "[redacted]" in p.stderr  # the errors were there, scrubbed
    for text in (p.stdout, p.stderr):
        assert CANARY[:8] not in text
    for f in home.rglob("*"):
        if f.is_file():
            assert CANARY[:8].encode() not in f.read_bytes(), f
    calls = _evalkit("calls", "list", home=home)
    assert "ANOMALY" in calls.stdout
    assert CANARY[:8] not in calls.stdout + calls.stderr
