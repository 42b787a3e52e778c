"""Reliability: SIGKILL a running campaign at random points and resume; halt on a budget cap and resume.

The campaign runs in a subprocess (``evalkit campaign run``) against a loopback fake provider that counts every
request per (model, prompt). Calls that are in flight when the process dies never deliver their answer, so
they are made again on resume; every other rollout must be called exactly once. The test checks that from both
ends: the fake server's counts agree with the store's call record (a request cut off before it left is in the
record but not at the server), every call that is not the one behind a stored rollout was cut off by a kill (at
most ``concurrency`` per kill) and started before that rollout's completion was stored, and a final run of a
finished campaign calls nothing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

from campaign_support import (  # pyright: ignore[reportImplicitRelativeImport]
    FakeModelServer,
    registry_toml,
    subset_tasks,
    teach,
    write_campaign,
)

from evalkit import render_prompt

MODELS = ("fake/good", "fake/spotty")
K = 3
CONCURRENCY = 3
KILLS = 4


def _cli(path: Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "EVALKIT_HOME": str(home)}
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from evalkit_cli import main; main()",
            "campaign",
            "run",
            str(path),
            "--json",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def _stored(home: Path) -> int:
    db_path = home / "evalkit.sqlite3"
    if not db_path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1) as db:
            return int(db.execute("SELECT count(*) FROM rollouts").fetchone()[0])
    except sqlite3.OperationalError:  # not migrated yet, or busy
        return 0


def _results(home: Path) -> bytes:
    return (home / "campaigns" / "c" / "results.jsonl").read_bytes()


def test_sigkill_at_random_points_then_resume_matches_an_uninterrupted_run(
    fake_server: FakeModelServer, tmp_path: Path
) -> None:
    teach(fake_server)
    registry = registry_toml(fake_server.base)
    planned = len(MODELS) * len(subset_tasks()) * K

    ref_home = tmp_path / "ref-home"
    ref_file = write_campaign(
        tmp_path / "ref", models=MODELS, k=K, concurrency=CONCURRENCY, registry=registry
    )
    fake_server.reset()
    ref = _finish(_cli(ref_file, ref_home))
    assert ref["status"] == "done"
    assert fake_server.total() == planned
    assert set(fake_server.calls.values()) == {K}

    home = tmp_path / "home"
    path = write_campaign(tmp_path / "run", models=MODELS, k=K, concurrency=CONCURRENCY, registry=registry)
    fake_server.reset()
    rng = random.Random(20251129)
    kills = 0
    for _ in range(KILLS):
        threshold = _stored(home) + rng.randint(1, 3)
        proc = _cli(path, home)
        deadline = time.monotonic() + 60
        while _stored(home) < threshold and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.15))  # land anywhere: mid-call, mid-grading, between the two
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        _, err = proc.communicate(timeout=30)
        assert proc.returncode in (0, -signal.SIGKILL), err
    assert kills >= KILLS - 1, "the campaign finished before it could be killed: make it slower"
    assert 0 < _stored(home) < planned
    final = _finish(_cli(path, home))
    assert final["status"] == "done"

    # identical results, byte for byte, and the same spend
    assert _results(home) == _results(ref_home)
    assert final["summary"] == ref["summary"]

    # Every call the server saw is in the store's call record. A rollout's request digest is its own (the
    # sample index rides in the request's sim context), so the record shows, per rollout, the one call behind
    # its stored completion and any earlier call that a kill cut off.
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        rollouts = db.execute(
            "SELECT r.model_id, r.task_id, r.call_id, c.request_digest, r.created_at FROM rollouts r"
            " JOIN model_calls c ON c.call_id = r.call_id"
        ).fetchall()
        calls = db.execute("SELECT call_id, request_digest, status, started_at FROM model_calls").fetchall()
    assert len(rollouts) == planned
    assert len({r[3] for r in rollouts}) == planned  # one request digest per rollout
    by_digest = {r[3]: r for r in rollouts}
    used = {r[2] for r in rollouts}
    extra = [c for c in calls if c[0] not in used]
    assert len(extra) <= kills * CONCURRENCY
    for call_id, request_digest, status, started_at in extra:
        model_id, task_id, _, _, stored_at = by_digest[request_digest]  # a re-call of a known rollout...
        assert started_at < stored_at, (
            model_id,
            task_id,
            call_id,
        )  # ...made before its completion was stored
        # the answer never reached the store: the process died with it in flight, and the next run charged
        # it at its worst case as an unknown outcome (the rollout is written with the settle, so never 'ok')
        assert status == "unknown"
    prompts = {t.id: render_prompt(t) for t in subset_tasks()}
    per_task: dict[tuple[str, str], int] = {}
    for _, request_digest, _, _ in calls:
        model_id, task_id = by_digest[request_digest][:2]
        per_task[(model_id.removeprefix("fake/"), prompts[task_id])] = (
            per_task.get((model_id.removeprefix("fake/"), prompts[task_id]), 0) + 1
        )
    # a call killed between the model layer recording it and the request leaving never reached the server
    assert set(per_task) == set(fake_server.calls)
    for group, at_server in fake_server.calls.items():
        assert K <= at_server <= per_task[group], group
    assert planned <= fake_server.total() <= planned + len(extra)

    # the money: every call the kills cut off was charged at its worst case as an unknown outcome, reported on
    # resume as "paid, answer lost", and the ledger adds up with nothing left reserved
    lost = {c["call_id"]: Decimal(c["charged_usd"]) for c in final["run"]["lost"]}  # type: ignore[index]
    assert set(lost) == {c[0] for c in extra}
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        spent, reserved = (Decimal(x) for x in db.execute("SELECT spent, reserved FROM budget").fetchone())
        charged = {r[0]: (Decimal(r[1]), Decimal(r[2])) for r in db.execute(
            "SELECT call_id, charged, worst_case FROM model_calls")}  # fmt: skip
        (outstanding,) = db.execute("SELECT count(*) FROM budget_reservations").fetchone()
    assert (reserved, outstanding) == (0, 0)
    assert spent == sum((c for c, _ in charged.values()), Decimal(0))
    for call_id, cost in lost.items():
        assert cost == charged[call_id][1] > 0  # charged at the worst case, never released as zero
    assert Decimal(final["run"]["spent_total_usd"]) == spent  # type: ignore[index]

    # a finished campaign calls nothing and changes nothing
    before = fake_server.total()
    again = _finish(_cli(path, home))
    assert fake_server.total() == before
    assert again["run"]["called"] == 0  # type: ignore[index]
    assert _results(home) == _results(ref_home)


def test_budget_halt_then_raised_cap_resumes_to_the_uninterrupted_spend(
    fake_server: FakeModelServer, tmp_path: Path
) -> None:
    teach(fake_server)
    registry = registry_toml(fake_server.base)
    planned = len(MODELS) * len(subset_tasks()) * K
    extra = "max_tokens = 64"

    ref_home = tmp_path / "ref-home"
    ref_file = write_campaign(tmp_path / "ref", models=MODELS, k=K, registry=registry, extra=extra)
    fake_server.reset()
    ref = _finish(_cli(ref_file, ref_home))
    ref_spend = Decimal(ref["summary"]["cost_usd"])  # type: ignore[index]
    assert ref_spend > 0

    home = tmp_path / "home"
    cap = (ref_spend / 2).quantize(Decimal("0.000001"))
    path = write_campaign(
        tmp_path / "run", models=MODELS, k=K, registry=registry, extra=extra, budget=str(cap)
    )
    fake_server.reset()
    proc = _cli(path, home)
    halted = _finish(proc)
    run = halted["run"]
    assert run["status"] == "halted"  # type: ignore[index]
    assert "campaign budget" in run["halted_by"]  # type: ignore[index]
    left = run["remaining"]  # type: ignore[index]
    assert 0 < left < planned
    assert Decimal(run["remaining_worst_case_usd"]) > 0  # type: ignore[index]
    spent_halted = Decimal(halted["summary"]["cost_usd"])  # type: ignore[index]
    assert spent_halted <= cap
    assert fake_server.total() == planned - left

    path = write_campaign(tmp_path / "run", models=MODELS, k=K, registry=registry, extra=extra, budget="1")
    resumed = _finish(_cli(path, home))
    assert resumed["status"] == "done"
    assert resumed["run"]["called"] == left  # type: ignore[index]
    assert Decimal(resumed["summary"]["cost_usd"]) == ref_spend  # type: ignore[index]
    assert fake_server.total() == planned
    assert set(fake_server.calls.values()) == {K}
    assert _results(home) == _results(ref_home)
    # the model layer's own ledger agrees: the store spent exactly what the uninterrupted run spent
    with sqlite3.connect(home / "evalkit.sqlite3") as db:
        (spent,) = db.execute("SELECT spent FROM budget WHERE id = 1").fetchone()
    assert Decimal(spent) == ref_spend
