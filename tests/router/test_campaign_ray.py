"""Campaigns on Ray (``--executor ray``): the same rollouts, verdicts, spend and report as the local executor,
through killed workers and a killed driver; a budget cap and a rate limit shared by every worker process.

The cluster is the session's two-node local Ray cluster (``ray_cluster`` in tests/conftest.py: two raylets on
127.0.0.1, one CPU each). The provider is a loopback fake that counts every request it receives per (model,
prompt) (``campaign_support.FakeModelServer``); "paid" below is what that log says, checked against the store.
Workers are killed by pids they report themselves (``pid()`` on the campaign's named actors).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from campaign_support import (  # pyright: ignore[reportImplicitRelativeImport]
    FakeModelServer,
    registry_toml,
    subset_tasks,
    teach,
    write_campaign,
)

import evalkit_router._campaign as campaign_module
from evalkit import model_request, render_prompt
from evalkit_core.models import ModelClient, load_registry, set_budget_cap
from evalkit_core.store import Store
from evalkit_router import campaign_report, run_campaign, write_campaign_outputs

MODELS = ("fake/good", "fake/spotty")
MAX_TOKENS = 200  # room for the fake's answer (its reported usage stays within what was reserved)


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


# A wrong answer that takes a while to grade (it sleeps while it loads): grading then lasts well past the moment
# the last completion is stored, however fast the sandbox is, so a driver killed at that moment is mid-grading.
SLOW_WRONG = "```python\nimport time\ntime.sleep(0.4)\nx = 1\n```\n"


def _teach(fake: FakeModelServer, *, slow: bool) -> None:
    teach(fake)
    if slow:
        for i, task in enumerate(subset_tasks()):
            if i:  # spotty answers every task but the first wrongly: slowly, here
                fake.answers[("spotty", render_prompt(task))] = SLOW_WRONG


def _reference(fake: FakeModelServer, tmp_path: Path, k: int, *, slow: bool = False) -> tuple[bytes, Decimal, dict[str, Any]]:
    """The undisturbed local run: its results file, its spend and its summary (``slow``: see SLOW_WRONG)."""
    _teach(fake, slow=slow)
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


def _driver(path: Path, home: Path, address: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "EVALKIT_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-c", "from evalkit_cli import main; main()", "campaign", "run", str(path),
         "--executor", "ray", "--address", address, "--json", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_a_killed_driver_resumes_without_paying_twice(
    ray_cluster: Any, fake_server: FakeModelServer, tmp_path: Path
) -> None:
    """The driver (``evalkit campaign run --executor ray --address ...``) is SIGKILLed once every completion is
    stored and grading is under way; its actors die with it. The next run pays nothing more, grades what was
    left, and ends with the undisturbed run's results and spend."""
    k = 3
    ref_results, ref_spent, _ = _reference(fake_server, tmp_path, k, slow=True)
    planned = len(MODELS) * len(subset_tasks()) * k
    home = tmp_path / "home"
    path = write_campaign(tmp_path / "c", models=MODELS, k=k, concurrency=8, registry=registry_toml(fake_server.base))
    fake_server.reset()
    proc = _driver(path, home, ray_cluster.address)
    deadline = time.monotonic() + 240
    while _count(home, "SELECT count(*) FROM rollouts") < planned:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the driver stored nothing"
        time.sleep(0.005)
    graded = _count(home, "SELECT count(*) FROM rollouts WHERE status = 'graded'")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert graded < planned, "grading finished before the kill: make it slower"
    assert fake_server.total() == planned
    final = _finish(_driver(path, home, ray_cluster.address))
    assert final["run"]["status"] == "done"
    assert final["run"]["called"] == 0
    assert final["run"]["regraded"] + final["run"]["skipped"] == planned
    assert final["run"]["lost"] == []
    assert fake_server.total() == planned  # nothing paid twice
    assert set(fake_server.calls.values()) == {k}
    assert (home / "campaigns" / "c" / "results.jsonl").read_bytes() == ref_results
    assert _spent(home) == ref_spent


def test_four_workers_on_two_nodes_never_spend_past_a_shared_cap(
    ray_cluster: Any, fake_server: FakeModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two campaigns, each driven at once with one caller actor per node: four caller processes on two nodes
    make calls against one global cap of N calls' worst case. Neither the store's ledger nor the provider's own
    request log goes past it, and the cap is what stopped them (answers cost less than their worst case, so more
    than N calls may fit; never more than the cap)."""
    teach(fake_server)
    n = 3
    task = subset_tasks()[0]
    home = tmp_path / "home"
    registry = registry_toml(fake_server.base)
    paths = [
        write_campaign(tmp_path / name, name=name, models=("fake/good",), k=8, ids=(task.id,), concurrency=4,
                       registry=registry, extra=f"max_tokens = {MAX_TOKENS}")
        for name in ("left", "right")
    ]  # fmt: skip
    loaded = load_registry([paths[0].parent / "registry.toml"])
    with Store.open(home) as store:
        worst = ModelClient(registry=loaded, store=store).worst_case(
            "fake/good", model_request(task, 0, max_tokens=MAX_TOKENS, temperature=0.0)
        )
        cap = worst * n
        set_budget_cap(store, cap)
    fake_server.reset()
    monkeypatch.setattr(campaign_module, "REFUSAL_BACKOFF", 0.01)  # halting on the cap need not take 25 s
    with ThreadPoolExecutor(max_workers=2) as drivers:  # two drivers at once, each with its own event loop
        outs = list(drivers.map(lambda p: run_campaign(p, home=home, executor="ray", workers=1), paths))
    halted = [o for o in outs if o.status == "halted"]
    assert halted, outs
    assert all(o.halted_by is not None and "global budget cap" in o.halted_by for o in halted)
    assert _count(home, "SELECT count(*) FROM rollouts") < 16
    with _db(home) as db:
        owners = {r[0] for r in db.execute("SELECT DISTINCT owner_id FROM model_calls")}
    assert len(owners) == 4  # the calls were made by four processes
    spent = _spent(home)
    assert spent <= cap
    assert _provider_cost(fake_server) <= cap
    assert fake_server.total() >= n  # the cap held N calls' worst cases, and they were made
    assert fake_server.total() < 16  # ... and it stopped the rest


def test_a_shared_rate_limit_holds_across_worker_processes(
    ray_cluster: object, fake_server: FakeModelServer, tmp_path: Path
) -> None:
    """A limit of R requests per minute on the model, two caller processes on two nodes: the provider sees R
    requests in the window, not R per process; the calls left waiting give up at their deadline."""
    del ray_cluster
    teach(fake_server)
    r = 3
    registry = registry_toml(fake_server.base).replace(
        'api_model = "good"', 'api_model = "good"\nlimits = { requests_per_minute = 3 }'
    )
    path = write_campaign(tmp_path / "c", models=("fake/good",), k=3, concurrency=8, registry=registry,
                          extra="timeouts = { attempt = 4, call = 4 }")  # fmt: skip
    home = tmp_path / "home"
    fake_server.reset()
    started = time.monotonic()
    outcome = run_campaign(path, home=home, executor="ray")
    elapsed = time.monotonic() - started
    assert elapsed < 60  # the whole run sits inside one window of the limit
    assert fake_server.total() == r
    assert outcome.status == "incomplete"
    assert outcome.called == r
    assert len(outcome.model_errors) == 9 - r
    assert all("rate limit" in e for e in outcome.model_errors)

