"""evalkit's task bank as an Inspect AI task, graded by evalkit's sandboxed verifiers (extra ``evalkit-harness[inspect]``).

    inspect eval evalkit/verifier_tasks -T bank=tasks --model openai/gpt-4o-mini
    inspect eval evalkit/verifier_tasks -T bank=tasks -T family=code --model mockllm/model

or from Python, ``evalkit_inspect_task(bank="tasks")``. One sample per task: its input is the prompt evalkit's own
solvers see (the description and the public tests only), its target is empty (the verifier holds the tests). The
scorer grades the answer exactly as ``evalkit eval`` does (the ```python block or the JSON object is extracted,
code runs in the sandbox behind the wall) and reports two Inspect metrics, ``public`` and ``hidden``: the share of
samples passing every public test and every hidden test. The verdict goes in the score's metadata as
``evalkit eval`` writes it to results.jsonl: hidden tests only by name, pass/fail, reason and keyed digests, never
their inputs or expected values. A sample whose grading failed for a reason of the machine (an infrastructure
error) is an Inspect sample error, not a score, as ``evalkit eval`` leaves it unscored.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai._util.package import get_installed_package_name  # pyright: ignore[reportPrivateImportUsage]
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver

from evalkit.grading._tasks import Task as BankTask
from evalkit.grading._tasks import load_tasks, render_prompt
from evalkit.grading._verifiers import VerifierSettings, grade
from evalkit.wall import Sandbox, SandboxLimits
from evalkit_core import ConfigError

__all__ = ["answer", "close_sandboxes", "evalkit_inspect_task", "verifier_scorer", "verifier_tasks"]

_FAMILIES = ("code", "structured")


def _samples(tasks: Sequence[BankTask]) -> list[Sample]:
    return [
        Sample(
            id=t.id,
            input=render_prompt(t),
            target="",
            metadata={"task_id": t.id, "family": t.family, "task_digest": t.digest},
        )
        for t in tasks
    ]


_OPEN: list[Sandbox] = []  # every scorer's sandbox still open in this process


def close_sandboxes() -> None:
    """Close every sandbox a scorer of this module opened in this process. They close at exit anyway; a long-lived
    process that ran an eval in-process (a notebook, a test) calls this when it is done, so that no jailed process
    of the scorer outlives the eval."""
    while _OPEN:
        _OPEN.pop().close()


class _Grader:
    """One sandbox for the scorer's life (its zygotes start on the first code answer), closed at exit (or by
    :func:`close_sandboxes`)."""

    def __init__(self, limits: SandboxLimits | None) -> None:
        self.limits = limits
        self.sandbox: Sandbox | None = None
        self.lock = threading.Lock()

    def grade(self, t: BankTask, completion: str) -> dict[str, Any]:
        with self.lock:
            if self.sandbox is None:
                self.sandbox = Sandbox(self.limits)
                atexit.register(self.sandbox.close)
                _OPEN.append(self.sandbox)
            sandbox = self.sandbox
        verdict = grade(t, completion, sandbox, VerifierSettings(sandbox.limits))
        return verdict.to_json()


@scorer(metrics={"public": [mean(), stderr()], "hidden": [mean(), stderr()]})
def verifier_scorer(bank: str = "tasks", limits: dict[str, Any] | None = None) -> Scorer:
    """Grade each answer with evalkit's verifier for the sample's task (``bank`` is the task directory)."""
    by_id = {t.id: t for t in load_tasks(bank)}
    grader = _Grader(SandboxLimits(**limits) if limits else None)

    async def score(state: TaskState, target: Target) -> Score:  # noqa: ARG001 - the verifier holds the tests
        task_id = str(state.metadata.get("task_id", state.sample_id))
        t = by_id.get(task_id)
        if t is None:
            raise ConfigError(f"{bank}: no task {task_id!r} in the bank the scorer was given")
        verdict = grader.grade(t, state.output.completion)
        if verdict["infra_error"] is not None:
            raise RuntimeError(f"evalkit verifier: infrastructure error on {task_id}: {verdict['infra_error']}")
        public, hidden = verdict["public"], verdict["hidden"]
        all_public = public["passed"] == public["total"]
        all_hidden = hidden["passed"] == hidden["total"]
        return Score(
            value={"public": float(all_public), "hidden": float(all_hidden)},
            explanation=(
                f"public {public['passed']}/{public['total']}, hidden {hidden['passed']}/{hidden['total']} "
                f"({verdict['isolation']})"
            ),
            metadata={"verdict": verdict},
        )

    return score


async def _about_four_characters_a_token(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


@solver
def answer() -> Solver:
    """``generate()``, and nothing else, except with Inspect's mock model (``mockllm/...``): an answer without usage
    makes the mock count its tokens with tiktoken, which downloads its encoding on first use, so the documented
    offline command (``--model mockllm/model``) would reach the network. This solver gives that one model instance
    an offline count instead, about four characters a token, as evalkit's gateway counts a mock answer. Outputs
    that carry their usage are left as they are, and every other model is untouched."""
    inner = generate()

    async def solve(state: TaskState, generate: Generate) -> TaskState:  # the name Inspect calls it by
        api = get_model().api
        if str(get_model()).startswith("mockllm/") and "count_text_tokens" not in vars(api):
            api.count_text_tokens = _about_four_characters_a_token  # pyright: ignore[reportAttributeAccessIssue]
        return await inner(state, generate)

    return solve


def evalkit_inspect_task(
    bank: str | Path = "tasks",
    *,
    family: str | None = None,
    ids: Sequence[str] | None = None,
    solver: Solver | None = None,
    limits: dict[str, Any] | None = None,
    epochs: int = 1,
) -> Task:
    """The bank's tasks (optionally one ``family`` or the given ``ids``) as an Inspect ``Task`` whose scorer is
    evalkit's verifier. ``solver`` defaults to :func:`answer` (``generate()``, counting a mock model's tokens
    offline)."""
    tasks = load_tasks(bank)
    if family is not None:
        if family not in _FAMILIES:
            raise ConfigError(f"family: expected one of {', '.join(_FAMILIES)}, got {family!r}")
        tasks = [t for t in tasks if t.family == family]
    if ids is not None:
        known = {t.id for t in tasks}
        missing = [i for i in ids if i not in known]
        if missing:
            raise ConfigError(f"{bank}: no task {missing[0]!r} (ids)")
        tasks = [t for t in tasks if t.id in set(ids)]
    return Task(
        dataset=MemoryDataset(_samples(tasks), name=f"evalkit:{Path(bank).name}"),
        solver=solver or answer(),
        scorer=verifier_scorer(bank=str(bank), limits=limits),
        epochs=epochs,
        name="evalkit_verifier_tasks",
    )


def _here() -> None: ...


# Inspect names a package's task "<package>/<name>" when the package is installed in site-packages or as an editable
# install of a distribution of the same name; evalkit's distribution is evalkit-harness, so an editable install
# (this repository) would register a bare "verifier_tasks". Give the full name there, so that
# `inspect eval evalkit/verifier_tasks` finds it either way.
_TASK_NAME = "verifier_tasks" if get_installed_package_name(_here) == "evalkit" else "evalkit/verifier_tasks"


@task(name=_TASK_NAME)
def verifier_tasks(bank: str = "tasks", family: str | None = None, ids: str | None = None) -> Task:
    """``inspect eval evalkit/verifier_tasks -T bank=DIR [-T family=code|structured] [-T ids=a,b]``."""
    chosen = [i for i in ids.split(",") if i] if ids else None
    return evalkit_inspect_task(bank, family=family, ids=chosen)
