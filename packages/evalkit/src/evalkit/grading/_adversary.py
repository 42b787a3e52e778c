"""The adversary: proposes inputs a candidate may get wrong, validates them in the sandbox, banks counterexamples.

It proposes; it never decides. A proposal becomes a :class:`Counterexample` only when the task's reference, run
twice in the sandbox (once in proposal order, once in reverse order, under two seeds of ``random``, so neither
hidden state nor randomness passes), succeeds both times with the same JSON-representable result (NaN and infinities refused), and the
candidate's output differs (``json_equal`` with the task's tolerance), or it raises, crashes or times out. A third
reference run confirms every disagreement before it counts. The expected value always comes from the reference.

Proposers:

- ``fuzz``: edge values per argument type and neighbours of the public examples, then inputs drawn by a seeded
  hypothesis run from strategies built from the task's ``arg_types``; the whole batch runs through the
  reference and the candidate in a few sandbox jobs (not one process per input); each kept counterexample is
  then shrunk greedily, one sandbox batch of simpler inputs per round.
- ``model:<id>``: asks a model (through :class:`evalkit_core.models.ModelClient`, so budgeted and recorded) for
  a JSON array of ``{"args", "kwargs", "category", "hint"}``. A simulated model answers from a
  :class:`SimContext` whose reference is the fuzz seed inputs, so the offline path is exercised end to end.

Banked counterexamples live in the store's ``counterexamples`` table, one row per (task, input digest);
:func:`adversarial_tests` returns a task's adversarial test set. Nothing here feeds ``render_prompt``.

This module holds the bank and the driver over a task bank (:func:`mine_bank`); the values, the validation, the
proposers and the mining of one candidate are in :mod:`evalkit.grading._proposals`, re-exported here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import cast

from evalkit.grading._eval import read_replay
from evalkit.grading._extract import ExtractionError, extract_code
from evalkit.grading._fuzz import CATEGORIES, Category
from evalkit.grading._proposals import (
    INVALID_REASONS,
    MINING_LIMITS,
    Counterexample,
    InvalidReason,
    MiningResult,
    Proposal,
    Rejection,
    candidate_digest,
    fuzz_proposals,
    mine,
    model_proposals,
    parse_model_proposals,
    validate_proposals,
)
from evalkit.grading._tasks import JSON, CallTest, CodeTask, Task, load_tasks, render_prompt
from evalkit.wall import Sandbox, SandboxLimits
from evalkit_core import ConfigError, digest
from evalkit_core.models import BudgetExceeded, ModelClient, Request, SimContext, load_registry
from evalkit_core.store import Store, utc_now

__all__ = [
    "CATEGORIES",
    "INVALID_REASONS",
    "MINING_LIMITS",
    "Category",
    "Counterexample",
    "InvalidReason",
    "MiningResult",
    "Proposal",
    "Rejection",
    "adversarial_tests",
    "bank_counterexamples",
    "banked_counterexamples",
    "candidate_digest",
    "fuzz_proposals",
    "mine",
    "mine_bank",
    "model_proposals",
    "parse_model_proposals",
    "validate_proposals",
]

# --------------------------------------------------------------------------------------------- the bank


def bank_counterexamples(store: Store, counterexamples: Iterable[Counterexample]) -> int:
    """Bank counterexamples (one row per task and input digest); returns how many were new."""
    new = 0
    with store.transaction() as db:
        for c in counterexamples:
            expected = json.dumps(c.expected, ensure_ascii=False, allow_nan=False)
            cur = db.execute(
                "INSERT INTO counterexamples (counterexample_id, task_id, task_digest, input, "
                "input_digest, expected, category, hint, found_by, candidate_digest, actual, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    digest({"task_id": c.task_id, "input_digest": c.input_digest}),
                    c.task_id,
                    c.task_digest,
                    json.dumps(c.input_json, ensure_ascii=False, allow_nan=False),
                    c.input_digest,
                    expected,
                    c.category,
                    c.hint,
                    c.found_by,
                    c.candidate_digest,
                    c.actual,
                    utc_now(),
                ),
            )
            new += cur.rowcount
    return new


def banked_counterexamples(store: Store, task_id: str | None = None) -> list[Counterexample]:
    """Banked counterexamples (of one task, or all), in the order they were banked."""
    sql = (
        "SELECT task_id, task_digest, input, expected, category, hint, found_by, candidate_digest, actual "
        "FROM counterexamples"
    )
    params: tuple[str, ...] = ()
    if task_id is not None:
        sql += " WHERE task_id = ?"
        params = (task_id,)
    with store.snapshot() as db:
        rows = db.execute(sql + " ORDER BY created_at, counterexample_id", params).fetchall()
    out: list[Counterexample] = []
    for tid, tdig, inp, exp, cat, hint, found_by, cdig, actual in rows:
        data = cast("dict[str, JSON]", json.loads(inp))
        out.append(
            Counterexample(
                task_id=tid,
                task_digest=tdig,
                args=tuple(cast("list[JSON]", data.get("args") or [])),
                kwargs=cast("dict[str, JSON]", data.get("kwargs") or {}),
                expected=cast("JSON", json.loads(exp)),
                category=cat if cat in CATEGORIES else "other",
                hint=hint,
                found_by=found_by,
                candidate_digest=cdig,
                actual=actual,
            )
        )
    return out


def adversarial_tests(store: Store, task_id: str, *, task_digest: str | None = None) -> list[CallTest]:
    """The task's adversarial test set (never shown in prompts). With ``task_digest``, only the tests mined
    against that version of the task (an edited reference may have changed the expected values)."""
    return [
        c.to_test()
        for c in banked_counterexamples(store, task_id)
        if task_digest is None or c.task_digest == task_digest
    ]


def _banked_digests(store: Store, task_id: str) -> set[str]:
    with store.snapshot() as db:
        rows = db.execute("SELECT input_digest FROM counterexamples WHERE task_id = ?", (task_id,)).fetchall()
    return {str(r[0]) for r in rows}


# --------------------------------------------------------------------------------------------- the driver


async def _candidates(
    tasks: Sequence[CodeTask], solver: str, client: ModelClient | None
) -> list[tuple[CodeTask, str, str | None, str]]:
    """``(task, label, source or None, note)`` per candidate; ``None`` when no code could be extracted."""
    out: list[tuple[CodeTask, str, str | None, str]] = []
    if solver == "reference":
        return [(t, "reference", t.reference, "") for t in tasks]
    if solver.startswith("replay:"):
        by_id: dict[str, Task] = {t.id: t for t in tasks}
        counts: dict[str, int] = {}
        for task_id, completion in read_replay(Path(solver.removeprefix("replay:")), by_id):
            task = cast("CodeTask", by_id[task_id])
            j = counts.get(task_id, 0)
            counts[task_id] = j + 1
            try:
                out.append((task, f"replay/{j}", extract_code(completion, task.entry_point), ""))
            except ExtractionError as exc:
                out.append((task, f"replay/{j}", None, str(exc)))
        return out
    if solver.startswith("model:"):
        assert client is not None
        model_id = solver.removeprefix("model:")
        for t in tasks:
            request = Request.of(
                render_prompt(t), max_tokens=2048, sim_context=SimContext(reference=t.reference)
            )
            completion = await client.complete(model_id, request)
            try:
                out.append((t, f"{model_id}/0", extract_code(completion.text, t.entry_point), ""))
            except ExtractionError as exc:
                out.append((t, f"{model_id}/0", None, str(exc)))
        return out
    raise ConfigError(f"--solver must be 'reference', 'replay:FILE.jsonl' or 'model:<id>', got {solver!r}")


def mine_bank(
    tasks_dir: str | Path,
    solver: str,
    *,
    proposer: str = "fuzz",
    budget: int = 200,
    seed: int = 0,
    store: Store | None = None,
    task_ids: Sequence[str] = (),
    max_counterexamples: int | None = 3,
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[MiningResult], str | None]:
    """Mine every call-based code task of the bank against each candidate of ``solver`` and bank the finds.

    Returns the results and, when the model layer's budget cap refused a call, its message (mining stops
    there; what was banked stays banked).
    """
    if budget < 1:
        raise ConfigError(f"--budget must be at least 1, got {budget}")
    if proposer != "fuzz" and not proposer.startswith("model:"):
        raise ConfigError(f"--proposer must be 'fuzz' or 'model:<id>', got {proposer!r}")
    tasks = [
        t for t in load_tasks(tasks_dir) if isinstance(t, CodeTask) and not t.id.startswith("structured/")
    ]
    tasks = [t for t in tasks if all(isinstance(x, CallTest) for x in (*t.public_tests, *t.hidden_tests))]
    if task_ids:
        wanted = set(task_ids)
        unknown = wanted - {t.id for t in tasks}
        if unknown:
            raise ConfigError(f"--task: {sorted(unknown)} not among the call-based code tasks of {tasks_dir}")
        tasks = [t for t in tasks if t.id in wanted]
    # bad input before any work: a solver that cannot be, or a replay file that does not read, is refused before
    # the store (a fresh $EVALKIT_HOME's database) is made
    if solver != "reference" and not solver.startswith(("replay:", "model:")):
        raise ConfigError(f"--solver must be 'reference', 'replay:FILE.jsonl' or 'model:<id>', got {solver!r}")
    if solver.startswith("replay:"):
        read_replay(Path(solver.removeprefix("replay:")), {t.id: t for t in tasks})
    for spec in (solver, proposer):
        if spec.startswith("model:"):
            load_registry().get(spec.removeprefix("model:"))  # an unknown model: one line naming the known ones
    own_store = store is None
    db = store if store is not None else Store.open()
    try:
        return asyncio.run(
            _mine_bank(
                tasks, solver, proposer, budget, seed, db, max_counterexamples, limits, workers, progress
            )
        )
    finally:
        if own_store:
            db.close()


async def _mine_bank(
    tasks: Sequence[CodeTask],
    solver: str,
    proposer: str,
    budget: int,
    seed: int,
    store: Store,
    max_counterexamples: int | None,
    limits: SandboxLimits | None,
    workers: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[MiningResult], str | None]:
    needs_model = solver.startswith("model:") or proposer.startswith("model:")
    client = ModelClient(store=store) if needs_model else None
    results: list[MiningResult] = []
    try:
        try:
            candidates = await _candidates(tasks, solver, client)
        except BudgetExceeded as exc:
            return results, str(exc)
        with Sandbox(limits or MINING_LIMITS, workers=workers) as sandbox:
            for k, (task, label, source, note) in enumerate(candidates):
                if progress:
                    progress(k, len(candidates))
                if source is None:
                    results.append(
                        MiningResult(task.id, label, "", proposer, 0, (), 0, (), f"no code: {note}")
                    )
                    continue
                known = _banked_digests(store, task.id)
                rejections: list[Rejection] = []
                if proposer == "fuzz":
                    proposals = fuzz_proposals(task, budget=budget, seed=seed)
                else:
                    assert client is not None
                    try:
                        proposals, rejections = await model_proposals(
                            task, client, proposer.removeprefix("model:"), budget=budget, sample=seed
                        )
                    except BudgetExceeded as exc:
                        return results, str(exc)
                ran, found, more = mine(
                    task,
                    source,
                    proposals,
                    sandbox,
                    known=known,
                    shrink=proposer == "fuzz",
                    max_counterexamples=max_counterexamples,
                )
                banked = bank_counterexamples(store, found)
                results.append(
                    MiningResult(
                        task.id,
                        label,
                        candidate_digest(source),
                        proposer,
                        ran + len(rejections),
                        tuple(found),
                        banked,
                        tuple(rejections + more),
                    )
                )
            if progress:
                progress(len(candidates), len(candidates))
    finally:
        if client is not None:
            await client.aclose()
    return results, None
