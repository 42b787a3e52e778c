"""Campaigns on Ray (``--executor ray``): the same rollouts, verdicts, spend and report as the local executor,
through killed workers and a killed driver; a budget cap and a rate limit shared by every worker process.

The cluster is the session's two-node local Ray cluster (``ray_cluster`` in tests/conftest.py: two raylets on
127.0.0.1, one CPU each). The provider is a loopback fake that counts every request it receives per (model,
prompt) (``campaign_support.FakeModelServer``); "paid" below is what that log says, checked against the store.
Workers are killed by pids they report themselves (``pid()`` on the campaign's named actors).
"""

from __future__ import annotations

import os
import signal
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

from campaign_support import (  # pyright: ignore[reportImplicitRelativeImport]
    FakeModelServer,
    registry_toml,
    subset_tasks,
    teach,
    write_campaign,
)

from evalkit_core.store import Store
from evalkit_router import campaign_report, run_campaign, write_campaign_outputs

MODELS = ("fake/good", "fake/spotty")


def _ray() -> Any:
    import ray

    return ray


def _actor_pids(kind: str) -> list[int]:
    """The pids the campaign's live ``kind`` actors (grader, caller) report, in name order."""
    ray = _ray()
    names = sorted(
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if f"/{kind}/" in a["name"]
    )
    return [int(ray.get(ray.get_actor(n, namespace="evalkit").pid.remote(), timeout=60)) for n in names]


def _db(home: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{home / 'evalkit.sqlite3'}?mode=ro", uri=True, timeout=10)


def _count(home: Path, sql: str) -> int:
    if not (home / "evalkit.sqlite3").exists():
        return 0
    try:
        with _db(home) as db:
            return int(db.execute(sql).fetchone()[0])
    except sqlite3.OperationalError:  # not migrated yet
        return 0


def _spent(home: Path) -> Decimal:
    with _db(home) as db:
        spent, reserved = db.execute("SELECT spent, reserved FROM budget").fetchone()
        assert Decimal(reserved) == 0
        return Decimal(spent)


def _provider_cost(fake: FakeModelServer) -> Decimal:
    """What the provider would bill for every request it received (its usage rule and the registry's prices:
    input $3, output $15 per million tokens), whether or not the answer reached the store."""
    total = Decimal(0)
    with fake.lock:
        seen = dict(fake.calls)
    for (model, prompt), n in seen.items():
        text = fake.answers.get((model, prompt), "I cannot help with that.")
        cost = (Decimal(len(prompt) // 4 + 1) * 3 + Decimal(len(text) // 4 + 1) * 15) / 1_000_000
        total += cost * n
    return total


def _reference(fake: FakeModelServer, tmp_path: Path, k: int) -> tuple[bytes, Decimal, dict[str, Any]]:
    """The undisturbed local run: its results file, its spend and its summary."""
    teach(fake)
    home = tmp_path / "ref-home"
    path = write_campaign(tmp_path / "ref", models=MODELS, k=k, concurrency=4, registry=registry_toml(fake.base))
    fake.reset()
    outcome = run_campaign(path, home=home, workers=1)
    assert outcome.status == "done"
    assert fake.total() == outcome.planned
    return _results(home).read_bytes(), _spent(home), {"called": outcome.called}


def _results(home: Path) -> Path:
    """Write the campaign's outputs as ``campaign run`` does and return its results file."""
    with Store.open(home) as store:
        report = campaign_report(store, "c")
    results, _, _ = write_campaign_outputs(report, home / "campaigns" / "c", home=home)
    return results


def test_ray_campaign_matches_local_through_killed_grader_and_caller(
    ray_cluster: object, fake_server: FakeModelServer, tmp_path: Path
) -> None:
    """A grader and a caller SIGKILLed mid-campaign: Ray restarts both and retries what they held. Grading is
    free to redo, so the grader's death costs nothing. The caller may die with a request in flight: that request
    is the only one the provider sees twice, and it is in the store as a paid, answer-lost call charged at its
    worst case (the model layer's rule), reported by the next run. Every rollout has exactly one completion and
    one verdict, and the results file is the undisturbed local run's, byte for byte."""
    del ray_cluster
    k = 2
    ref_results, ref_spent, _ = _reference(fake_server, tmp_path, k)
    home = tmp_path / "home"
    # concurrency 1: at most one call in flight when the caller dies
    path = write_campaign(tmp_path / "c", models=MODELS, k=k, concurrency=1, registry=registry_toml(fake_server.base))
    fake_server.reset()
    killed: dict[str, int] = {}

    def progress(done: int, total: int, spent: Decimal) -> None:
        del total, spent
        if done == 2 and "grader" not in killed:
            killed["grader"] = _actor_pids("grader")[0]
            os.kill(killed["grader"], signal.SIGKILL)
        if done == 5 and "caller" not in killed:
            killed["caller"] = _actor_pids("caller")[0]
            os.kill(killed["caller"], signal.SIGKILL)

    outcome = run_campaign(path, home=home, executor="ray", progress=progress)
    assert set(killed) == {"grader", "caller"}
    assert outcome.status == "done", outcome
    planned = len(MODELS) * len(subset_tasks()) * k
    # none lost, none stored twice: one completion and one verdict per rollout
    assert _count(home, "SELECT count(*) FROM rollouts") == planned
    assert _count(home, "SELECT count(DISTINCT call_id) FROM rollouts") == planned
    assert _count(home, "SELECT count(*) FROM rollouts WHERE status = 'graded' AND infra_error IS NULL") == planned
    assert _results(home).read_bytes() == ref_results
    # the next run calls nothing, and names what the caller's death cost
    again = run_campaign(path, home=home, executor="ray")
    assert (again.status, again.called, again.skipped) == ("done", 0, planned)
    assert len(again.lost) <= 1
    extra = fake_server.total() - planned
    assert 0 <= extra <= len(again.lost)  # a lost call's request may not have left before the kill
    assert all(fake_server.calls[key] in (k, k + 1) for key in fake_server.calls)
    worst = sum((c.charged for c in again.lost), Decimal(0))
    assert all(c.status == "unknown" and c.charged > 0 for c in again.lost)
    assert _spent(home) == ref_spent + worst == again.spent_total
    assert _results(home).read_bytes() == ref_results
