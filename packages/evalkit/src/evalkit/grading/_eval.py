"""``evalkit eval``: grade a solver over a bank, its results file and receipt.

The neighbours: task-bank validation (:mod:`evalkit.grading._validate`), the model solver and its response cache
(:mod:`evalkit.grading._eval_models`), the summary and the receipt's verification
(:mod:`evalkit.grading._eval_receipt`); their public names are re-exported here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import cast

import attrs

from evalkit.grading._eval_journal import (
    EvalInterrupted,
    Journal,
    grade_each,
    item_key,
    journal_path,
    verdict_from_json,
)
from evalkit.grading._eval_models import CACHE_DIR_NAME, model_completions, model_request
from evalkit.grading._eval_receipt import (
    RECEIPT_FORMAT,
    RECEIPT_KIND,
    summarize,
    summary_intervals,
    verify_eval_receipt,
)
from evalkit.grading._ray import GradingPool, RayCluster, check_executor
from evalkit.grading._tasks import JSON, Task, bank_digest, load_tasks
from evalkit.grading._validate import Problem, reference_solution, validate_bank
from evalkit.grading._verifiers import Verdict, VerifierSettings, safe_text
from evalkit.wall import Isolation, Sandbox, SandboxLimits
from evalkit_core import (
    ConfigError,
    atomic_write_bytes,
    canonical_bytes,
    check_output_path,
    ensure_signing_key,
    file_digest,
    make_receipt,
    write_receipt,
)

__all__ = [
    "CACHE_DIR_NAME",
    "RECEIPT_FORMAT",
    "RECEIPT_KIND",
    "EvalInterrupted",
    "EvalReport",
    "Problem",
    "Rollout",
    "model_completions",
    "model_request",
    "read_replay",
    "reference_solution",
    "run_eval",
    "summarize",
    "summary_intervals",
    "validate_bank",
    "verify_eval_receipt",
]


@attrs.frozen
class Rollout:
    """One graded sample: the task, its sample index (file order for replay), and the verdict. ``completion`` is
    the model's answer for a ``model:`` solver (the evidence the gate's reward-hacking checks read); the
    reference and replay solvers keep theirs in the bank and the replay file, so it is None for them."""

    task_id: str
    sample: int
    verdict: Verdict
    completion: str | None = None

    def to_json(self) -> dict[str, JSON]:
        body = self.verdict.to_json()
        if self.completion is None:
            return {"sample": self.sample, **body}
        return {"sample": self.sample, **body, "completion": safe_text(self.completion)}  # lone surrogates escaped


@attrs.frozen
class EvalReport:
    tasks: int
    bank_digest: str
    rollouts: tuple[Rollout, ...]
    summary: dict[str, JSON]
    settings: VerifierSettings
    isolation: Isolation
    results_path: Path | None
    receipt_path: Path | None
    solver: Mapping[str, JSON] = attrs.field(factory=dict[str, JSON])  # as in the receipt: calls, cached, cost
    resumed: int = 0  # verdicts taken from the journal of an interrupted run (see evalkit.grading._eval_journal)


def read_replay(path: Path, tasks: Mapping[str, Task]) -> list[tuple[str, str]]:
    """(task_id, completion) pairs from a replay JSONL file, in file order; ConfigError names file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{path}: replay file not found") from None
    out: list[tuple[str, str]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{n}: expected an object with task_id and completion")
        rowd = cast("dict[str, JSON]", row)
        task_id, completion = rowd.get("task_id"), rowd.get("completion")
        if not isinstance(task_id, str) or not isinstance(completion, str):
            raise ConfigError(f"{path}:{n}: fields 'task_id' and 'completion' must be strings")
        if task_id not in tasks:
            raise ConfigError(f"{path}:{n}: task_id {task_id!r} is not in the task bank")
        out.append((task_id, completion))
    return out


def run_eval(
    tasks_dir: str | Path,
    solver: str,
    *,
    k: int | None = None,
    out: str | Path | None = None,
    receipt: str | Path | None = None,
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache: bool = True,
    executor: str = "local",
    address: str | None = None,
) -> EvalReport:
    """Grade ``solver`` (``reference`` or ``replay:FILE.jsonl``) over the bank; write results and a receipt.

    ``k`` is the number of samples per task (the reference solver answers ``k`` times, default 1; replay keeps
    at most the first ``k`` lines of each task, default all). ``executor="ray"`` grades on a pool of
    sandbox-worker actors on the Ray cluster at ``address`` (default: a single-machine one started here with
    ``workers`` CPUs); the verdicts are the same.
    """
    check_executor(executor, address)
    if k is not None and k < 1:
        raise ConfigError(f"--k must be at least 1, got {k}")
    if receipt is not None and out is None:
        raise ConfigError("--receipt needs --out: the receipt binds the results file")
    if solver != "reference" and not solver.startswith(("replay:", "model:")):
        raise ConfigError(f"--solver must be 'reference', 'replay:FILE.jsonl' or 'model:<id>', got {solver!r}")
    if solver.startswith("model:"):  # an unknown model is refused before the store or any file is made
        from evalkit_core.models import load_registry

        load_registry().get(solver.removeprefix("model:"))
    if out is not None:
        check_output_path(out, "--out")
    if receipt is not None:
        check_output_path(receipt, "--receipt")
        if out is not None and Path(out).resolve() == Path(receipt).resolve():
            raise ConfigError(f"--out and --receipt are one path ({out}); they must differ")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if executor == "ray":
        with RayCluster(address, num_cpus=workers) as cluster, GradingPool(limits, workers=workers) as pool:
            del cluster
            return _run_eval(
                Path(tasks_dir), solver, pool, k=k, out=out, receipt=receipt, progress=progress, cache=cache
            )
    with Sandbox(limits, workers=workers) as sandbox:
        sandbox.prestart()  # the templates start while the bank loads and the solutions are gathered
        return _run_eval(
            Path(tasks_dir), solver, sandbox, k=k, out=out, receipt=receipt, progress=progress, cache=cache
        )


def _run_eval(
    bank: Path,
    solver: str,
    sandbox: Sandbox | GradingPool,
    *,
    k: int | None,
    out: str | Path | None,
    receipt: str | Path | None,
    progress: Callable[[int, int], None] | None,
    cache: bool = True,
) -> EvalReport:
    tasks = load_tasks(bank)
    by_id = {t.id: t for t in tasks}
    solver_json: dict[str, JSON]
    replay_path: Path | None = None
    items: list[tuple[Task, str]] = []
    samples: list[int] = []
    extract = True
    if solver == "reference":
        extract = False
        solver_json = {"name": "reference"}
        for t in tasks:
            for j in range(k or 1):
                items.append((t, reference_solution(t)))
                samples.append(j)
    elif solver.startswith("replay:"):
        replay_path = Path(solver.removeprefix("replay:"))
        solver_json = {"name": "replay", "file_digest": None}
        counts: dict[str, int] = {}
        for task_id, completion in read_replay(replay_path, by_id):
            j = counts.get(task_id, 0)
            counts[task_id] = j + 1
            if k is not None and j >= k:
                continue
            items.append((by_id[task_id], completion))
            samples.append(j)
        solver_json["file_digest"] = file_digest(replay_path)
    else:  # model:<id> (run_eval refused anything else)
        model_id = solver.removeprefix("model:")
        answers = model_completions(tasks, model_id, k or 1, cache=cache)
        calls = [c for _, _, c, _ in answers]
        reported: list[JSON] = [*sorted({c.reported_model for c in calls})]
        solver_json = {
            "name": "model",
            "model_id": model_id,
            "reported_models": reported,
            "simulated": any(c.simulated for c in calls),
            "calls": sum(1 for *_, hit in answers if not hit),
            "cached": sum(1 for *_, hit in answers if hit),
            "cost_usd": str(sum((c.cost for c in calls), Decimal(0))),
            "registry_digest": calls[0].registry_digest if calls else None,
        }
        for t, j, c, _ in answers:
            items.append((t, c.text))
            samples.append(j)
    order = sorted(range(len(items)), key=lambda i: (items[i][0].id, samples[i]))
    items = [items[i] for i in order]
    samples = [samples[i] for i in order]
    settings = VerifierSettings(sandbox.limits)
    isolation = sandbox.isolation
    digest_of_bank = bank_digest(tasks)
    keep = solver_json["name"] == "model"  # a model's answers are recorded nowhere else
    out_path = Path(out) if out is not None else None
    journal = None
    if out_path is not None:
        identity = {k: v for k, v in solver_json.items() if k in {"name", "file_digest", "model_id"}}
        header: dict[str, JSON] = {"bank": digest_of_bank, "settings": settings.digest, "solver": identity, "k": k,
                                   "items": len(items)}  # fmt: skip
        journal = Journal(journal_path(out_path), header, ensure_signing_key()[0])
    rows, encoded = _grade_rows(items, samples, sandbox, settings, extract=extract, keep=keep, journal=journal,
                                progress=progress)  # fmt: skip
    rollouts = tuple(
        Rollout(str(r["task_id"]), cast("int", r["sample"]), verdict_from_json(r), text if keep else None)
        for r, (_, text) in zip(rows, items, strict=True)
    )
    summary = summarize(rows, len(tasks))
    if out_path is not None:
        # a row the journal took is written as the journal encoded it (the same canonical bytes, made once)
        lines = ((e or canonical_bytes(r)) + b"\n" for r, e in zip(rows, encoded, strict=True))
        atomic_write_bytes(out_path, b"".join(lines))
    receipt_path = Path(receipt) if receipt is not None else None
    if receipt_path is not None and out_path is not None:
        binding: dict[str, JSON] = {"tasks": digest_of_bank, "results": file_digest(out_path)}
        # paths relative to the receipt's directory, so that the receipt verifies from any working directory
        base = receipt_path.resolve().parent
        files: dict[str, JSON] = {"tasks": _relative(bank, base), "results": _relative(out_path, base)}
        if replay_path is not None:
            binding["solver_file"] = solver_json["file_digest"]
            files["solver_file"] = _relative(replay_path, base)
        body: dict[str, JSON] = {
            "kind": RECEIPT_KIND,
            "format": RECEIPT_FORMAT,
            "solver": solver_json,
            "k": k,
            "tasks": {"count": len(tasks), "digest": digest_of_bank},
            "settings": settings.to_json(),
            "settings_digest": settings.digest,
            "isolation": isolation.to_json(),
            "summary": summary,
            "binding": binding,
            "files": files,
            "files_relative_to": "receipt",
        }
        write_receipt(receipt_path, make_receipt(body, key=ensure_signing_key()[0]))
    resumed = len(journal.kept) if journal is not None else 0
    if journal is not None:
        journal.discard()  # the results file holds every verdict now
    return EvalReport(
        len(tasks), digest_of_bank, rollouts, summary, settings, isolation, out_path, receipt_path, solver_json,
        resumed,
    )


def _grade_rows(
    items: Sequence[tuple[Task, str]],
    samples: Sequence[int],
    sandbox: Sandbox | GradingPool,
    settings: VerifierSettings,
    *,
    extract: bool,
    keep: bool,
    journal: Journal | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[dict[str, JSON]], list[bytes | None]]:
    """The results rows of ``items`` in order: those the journal kept, the rest graded now (each journaled as it
    is made), and beside each the canonical bytes the journal made of it when it appended it (else None). Ctrl-C
    raises :class:`EvalInterrupted` naming the journal and what it holds."""
    keys = [item_key(t.id, s, text) for (t, text), s in zip(items, samples, strict=True)]
    kept = journal.kept if journal is not None else {}
    rows: list[dict[str, JSON] | None] = [kept.get(key) for key in keys]
    encoded: list[bytes | None] = [None] * len(items)
    pending = [i for i, r in enumerate(rows) if r is None]
    done = [len(items) - len(pending)]
    if progress is not None and done[0]:
        progress(done[0], len(items))

    def record(n: int, verdict: Verdict) -> None:
        i = pending[n]
        row = Rollout(items[i][0].id, samples[i], verdict, items[i][1] if keep else None).to_json()
        if journal is not None:
            encoded[i] = journal.append(keys[i], row)
        rows[i] = row
        done[0] += 1
        if progress is not None:
            progress(done[0], len(items))

    todo = [items[i] for i in pending]
    try:
        if isinstance(sandbox, GradingPool):
            for n, verdict in enumerate(sandbox.grade_many(todo, settings, extract=extract)):
                record(n, verdict)
                if journal is not None:
                    journal.sync()
        else:
            grade_each(todo, sandbox, settings, extract=extract, on_verdict=record,
                       on_idle=journal.sync if journal is not None else None)  # fmt: skip
            sandbox.hang_up()  # every job is done: the jails end while the results are written
    except KeyboardInterrupt:
        if journal is None:
            raise
        journal.close()
        raise EvalInterrupted(journal.path, journal.count()) from None
    done_rows = [(r, e) for r, e in zip(rows, encoded, strict=True) if r is not None]
    return [r for r, _ in done_rows], [e for _, e in done_rows]


def _relative(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path.resolve(), base)).as_posix()
