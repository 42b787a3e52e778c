"""One rollout of a campaign: its key and its place in the plan, its row in the store (written in the call's
settle transaction, then graded), its grading on public, hidden and adversarial tests, and the adversary's mining
of the campaign's passing answers. The campaign's run (:mod:`evalkit_router._campaign`) and the Ray executor
(:mod:`evalkit_router._campaign_ray`) both build on these."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import cast

import attrs

from evalkit import (
    JSON,
    CallTest,
    CodeTask,
    ExtractionError,
    Sandbox,
    Task,
    TestVerdict,
    Verdict,
    VerifierSettings,
    adversarial_tests,
    bank_counterexamples,
    banked_counterexamples,
    extract_code,
    fuzz_proposals,
    grade_many,
    mine,
)
from evalkit_core import canonical_bytes, digest
from evalkit_core.models import Completion, completion_to_json
from evalkit_core.store import Connection, Store, utc_now

__all__ = [
    "MINE_BUDGET",
    "MINE_SEED",
    "Answer",
    "GradedUnder",
    "PlannedRollout",
    "adversarial_set",
    "grade_one",
    "graded_under_by_key",
    "insert_rollout",
    "mine_campaign",
    "plan_rollouts",
    "rollout_key",
    "set_digest",
    "store_verdict",
    "stored_text",
    "verdict_json",
]

MINE_BUDGET = 200  # fuzz proposals per mined candidate
MINE_SEED = 0


def rollout_key(campaign: str, model_id: str, task_id: str, task_digest: str, sample: int) -> str:
    """The key of one rollout: the digest of (campaign name, model id, task id, task content digest, sample)."""
    return digest(
        {
            "campaign": campaign,
            "model": model_id,
            "task": task_id,
            "task_digest": task_digest,
            "sample": sample,
        }
    )


@attrs.frozen
class PlannedRollout:
    key: str
    model_id: str
    task: Task
    sample: int


@attrs.frozen
class Answer:
    """What a campaign needs of a settled call: the text to grade, the usage anomaly (if any) and what the call
    was charged. ``stored``: found already stored (a worker that died after settling it), not called again."""

    text: str
    anomaly: str | None
    charged: Decimal
    stored: bool = False

def plan_rollouts(name: str, models: Sequence[str], tasks: Sequence[Task], k: int) -> list[PlannedRollout]:
    """Every rollout of a campaign, in a fixed order (sample, task, model): a halted campaign has spread its
    spend over all models and tasks rather than finishing one model first."""
    return [
        PlannedRollout(rollout_key(name, m, t.id, t.digest, s), m, t, s)
        for s in range(k)
        for t in tasks
        for m in models
    ]

# --------------------------------------------------------------------------------------------- adversary


def adversarial_set(store: Store, task: Task) -> tuple[CallTest, ...]:
    """The banked adversarial tests of ``task`` mined against this version of it (``evalkit.adversarial_tests``
    with the task's digest); empty for structured tasks. Never shown in prompts."""
    if not isinstance(task, CodeTask):
        return ()
    return tuple(adversarial_tests(store, task.id, task_digest=task.digest))


def set_digest(tests: Sequence[CallTest]) -> str:
    return digest({"tests": [t.to_json() for t in tests]})


def _mineable(task: Task) -> bool:
    return isinstance(task, CodeTask) and all(
        isinstance(t, CallTest) for t in (*task.public_tests, *task.hidden_tests)
    )


def mine_campaign(store: Store, name: str, tasks: Sequence[Task], sandbox: Sandbox) -> int:
    """Mine (fuzz, seeded) every distinct candidate of the campaign that passes all public and hidden tests of a
    call-based code task: those are the answers the static tests cannot tell from the reference. Banks what it
    finds and returns how many counterexamples were new."""
    new = 0
    for task in tasks:
        if not isinstance(task, CodeTask) or not _mineable(task):
            continue
        with store.snapshot() as db:
            rows = db.execute(
                "SELECT completion, result FROM rollouts WHERE campaign_id = ? AND task_id = ?"
                " AND status = 'graded' AND infra_error IS NULL",
                (name, task.id),
            ).fetchall()
        candidates: set[str] = set()
        for completion, result in rows:
            verdict = cast("dict[str, dict[str, int]]", json.loads(result))
            if any(verdict[p]["passed"] != verdict[p]["total"] for p in ("public", "hidden")):
                continue
            try:
                source = extract_code(cast("str", json.loads(completion)["text"]), task.entry_point)
            except ExtractionError:
                continue
            if source.strip() != task.reference.strip():
                candidates.add(source)
        for source in sorted(candidates):
            known = {c.input_digest for c in banked_counterexamples(store, task.id)}
            proposals = fuzz_proposals(task, budget=MINE_BUDGET, seed=MINE_SEED)
            _, found, _ = mine(task, source, proposals, sandbox, known=known)
            new += bank_counterexamples(store, found)
    return new


# --------------------------------------------------------------------------------------------- store


def graded_under_by_key(store: Store, name: str) -> dict[str, GradedUnder]:
    """key -> what each graded rollout of the campaign was graded under (rows graded before schema 3 have none)."""
    with store.snapshot() as db:
        rows = db.execute(
            "SELECT rollout_key, settings_digest, bank_digest, isolation FROM rollouts"
            " WHERE campaign_id = ? AND settings_digest IS NOT NULL AND bank_digest IS NOT NULL"
            " AND isolation IS NOT NULL",
            (name,),
        ).fetchall()
    return {str(k): GradedUnder(str(s), str(b), str(i)) for k, s, b, i in rows}


def insert_rollout(db: Connection, name: str, p: PlannedRollout, completion: Completion) -> None:
    """Inside the model layer's settle transaction: the rollout commits with the payment or not at all."""
    data = completion_to_json(completion)
    db.execute(
        "INSERT INTO rollouts (rollout_key, campaign_id, task_id, task_digest, model_id, sample, call_id,"
        " status, completion, cost, created_at, anomaly) VALUES (?, ?, ?, ?, ?, ?, ?, 'completed', ?, ?, ?, ?)",
        (p.key, name, p.task.id, p.task.digest, p.model_id, p.sample, completion.call_id,
         json.dumps(data, ensure_ascii=False, sort_keys=True), data["cost"], utc_now(), completion.anomaly),
    )  # fmt: skip


@attrs.frozen
class GradedUnder:
    """What a verdict was graded under, stored beside it (a rewards export reads the verdict instead of grading
    again, and refuses it when these no longer match): the verifier settings digest, the digest of the
    campaign's task bank (its selection) and the sandbox isolation in effect (``Isolation.label``)."""

    settings_digest: str
    bank_digest: str
    isolation: str


def store_verdict(
    store: Store, key: str, result: dict[str, JSON], infra_error: str | None, under: GradedUnder
) -> None:
    with store.transaction() as db:
        db.execute(
            "UPDATE rollouts SET status = 'graded', result = ?, infra_error = ?, graded_at = ?,"
            " settings_digest = ?, bank_digest = ?, isolation = ? WHERE rollout_key = ?",
            (canonical_bytes(result).decode(), infra_error, utc_now(), under.settings_digest,
             under.bank_digest, under.isolation, key),
        )  # fmt: skip


def stored_text(store: Store, key: str) -> str:
    with store.snapshot() as db:
        (raw,) = db.execute("SELECT completion FROM rollouts WHERE rollout_key = ?", (key,)).fetchone()
    return cast("str", json.loads(raw)["text"])


# --------------------------------------------------------------------------------------------- grading


def _rename(tests: Sequence[TestVerdict], prefix: str) -> list[dict[str, JSON]]:
    return [{**t.to_json(), "name": f"{prefix}/{i}"} for i, t in enumerate(tests)]


def _block(tests: list[dict[str, JSON]]) -> dict[str, JSON]:
    return {"passed": sum(1 for t in tests if t["passed"]), "total": len(tests), "tests": list(tests)}


def verdict_json(verdict: Verdict, n_hidden: int, adv_digest: str) -> dict[str, JSON]:
    hidden = verdict.hidden[:n_hidden]
    adversarial = verdict.hidden[n_hidden:]
    return {
        "task_digest": verdict.task_digest,
        "settings_digest": verdict.settings_digest,
        "public": _block(_rename(verdict.public, "public")),
        "hidden": _block(_rename(hidden, "hidden")),
        "adversarial": _block(_rename(adversarial, "adversarial")),
        "adversarial_set": adv_digest,
        "infra_error": verdict.infra_error,
    }


def grade_one(
    task: Task,
    text: str,
    adversarial: tuple[CallTest, ...],
    sandbox: Sandbox,
    settings: VerifierSettings,
) -> tuple[dict[str, JSON], str | None]:
    """Grade one completion on public, hidden and adversarial tests in one sandbox run (adversarial tests ride
    after the hidden ones and are split off the verdict)."""
    n_hidden = len(task.hidden_tests) if isinstance(task, CodeTask) else len(task.hidden_assertions)
    graded_task: Task = task
    if adversarial and isinstance(task, CodeTask):
        graded_task = attrs.evolve(task, hidden_tests=(*task.hidden_tests, *adversarial))
    verdict = grade_many([(graded_task, text)], sandbox, settings, extract=True)[0]
    return verdict_json(verdict, n_hidden, set_digest(adversarial)), verdict.infra_error


# --------------------------------------------------------------------------------------------- running
