"""Reward functions for TRL's ``GRPOTrainer``, graded in the evalkit sandbox.

```python
from datasets import load_dataset
from trl import GRPOTrainer
from evalkit_training.trl import reward

dataset = load_dataset("json", data_files="grpo.jsonl", split="train")   # from `evalkit rewards export --format grpo`
trainer = GRPOTrainer(model=..., reward_funcs=reward, train_dataset=dataset)
```

TRL calls ``reward(prompts=..., completions=..., completion_ids=..., **columns)`` where every other dataset
column arrives as a keyword holding one value per sample (``task_id=[...]``, ``task_digest=[...]``,
``tasks_dir=[...]``, ``provenance=[...]``) plus ``trainer_state``. Completions are strings (standard format) or
lists of ``{"role", "content"}`` messages (conversational format). The answer holds one reward per completion,
computed exactly as the export computes it (hidden + adversarial, gated on public, zero when flagged for reward
hacking) and ``None`` where the sandbox failed (TRL records ``None`` as NaN and ignores it).

It also answers ``None`` (and counts it in ``fn.stats["weaker_isolation"]``) for every completion when the
sandbox isolation in effect is weaker than the isolation required: ``make_reward(required_isolation=...)``, else
the ``isolation`` column (the campaign's recorded isolation, as the grpo export writes it). Training then never
mixes rewards of different trust.

The task bank is, in order: ``make_reward(tasks_dir=...)``, the ``tasks_dir`` column, ``$EVALKIT_TASKS``. The
adversarial tests come from the store in ``$EVALKIT_HOME`` when one exists there.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, cast

from evalkit import JSON, CallTest, Sandbox, SandboxLimits, Task, VerifierSettings, load_tasks
from evalkit_core.store import STORE_FILE, Store, evalkit_home
from evalkit_training._hacking import check_rollout
from evalkit_training._reward import (
    AdversarialSource,
    RewardError,
    banked_adversarial,
    compute_reward,
    grade_rollouts,
    isolation_missing,
    no_adversarial,
    weaker_isolation,
)

__all__ = ["TASKS_ENV", "RewardFunction", "completion_text", "make_reward", "reward"]

TASKS_ENV = "EVALKIT_TASKS"


class RewardFunction(Protocol):
    __name__: str
    stats: dict[str, int]
    log: list[dict[str, JSON]]
    settings: VerifierSettings

    def close(self) -> None: ...

    def isolation(self) -> str: ...

    def __call__(
        self,
        prompts: Sequence[object],
        completions: Sequence[object],
        task_id: object = None,
        **kwargs: object,
    ) -> list[float | None]: ...


def completion_text(completion: object) -> str:
    """The text of one completion: a string as is; a conversation's assistant turns joined (content given as a
    string or as a list of ``{"type": "text", "text": ...}`` parts)."""
    if isinstance(completion, str):
        return completion
    messages: Sequence[object]
    if isinstance(completion, Mapping):
        messages = [cast("object", completion)]
    elif isinstance(completion, Sequence):
        messages = cast("Sequence[object]", completion)
    else:
        raise RewardError(
            f"completion: expected a string or a list of messages, got {type(completion).__name__}"
        )
    texts: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise RewardError(
                "completion: a conversational completion is a list of {'role', 'content'} objects"
            )
        m = cast("Mapping[str, object]", message)
        if m.get("role", "assistant") != "assistant":
            continue
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, Sequence):
            for part in cast("Sequence[object]", content):
                if isinstance(part, Mapping):
                    text = cast("Mapping[str, object]", part).get("text")
                    if isinstance(text, str):
                        texts.append(text)
    return "\n".join(texts)


def _per_sample(name: str, value: object, n: int) -> list[object]:
    """A column as TRL passes it (a list, one per sample) or one value for every sample."""
    if isinstance(value, list | tuple):
        items = list(cast("Sequence[object]", value))
        if len(items) != n:
            raise RewardError(f"{name}: {len(items)} values for {n} completions")
        return items
    return [value] * n


class _Grader:
    """The state behind a reward function: banks by directory, one sandbox (started on first use)."""

    def __init__(
        self,
        tasks_dir: str | Path | None,
        limits: SandboxLimits | None,
        workers: int | None,
        adversarial: AdversarialSource | None,
        allow_flagged: bool,
        required_isolation: str | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self._tasks_dir = None if tasks_dir is None else Path(tasks_dir)
        self._settings = VerifierSettings(limits or (sandbox.limits if sandbox is not None else SandboxLimits()))
        self._own_sandbox = sandbox is None
        self._workers = workers
        self._adversarial = adversarial
        self._allow_flagged = allow_flagged
        self._banks: dict[Path, dict[str, Task]] = {}
        self._sandbox: Sandbox | None = sandbox
        self._isolation: str | None = None
        self._lock = threading.Lock()
        if required_isolation is not None:
            isolation_missing(required_isolation, "required_isolation")  # refuse a malformed one up front
        self._required = required_isolation
        # what the function did, for a trainer's log and a receipt: completions scored, refused for weaker
        # isolation, without a reward (sandbox failures), flagged for reward hacking
        self.stats: dict[str, int] = {"scored": 0, "weaker_isolation": 0, "no_reward": 0, "flagged": 0}
        # one entry per call: the trainer's step (when TRL passes its state), task ids, rewards, tripped checks
        self.log: list[dict[str, JSON]] = []

    def _bank(self, directory: object) -> dict[str, Task]:
        if self._tasks_dir is not None:
            directory = self._tasks_dir
        if directory in (None, ""):
            directory = os.environ.get(TASKS_ENV)
        if not isinstance(directory, str | Path) or not str(directory):
            raise RewardError(
                f"tasks_dir: no task bank (give make_reward(tasks_dir=...), a 'tasks_dir' column, or ${TASKS_ENV})"
            )
        path = Path(directory).resolve()
        with self._lock:
            if path not in self._banks:
                self._banks[path] = {t.id: t for t in load_tasks(path)}
            return self._banks[path]

    def _source(self) -> AdversarialSource:
        if self._adversarial is None:
            home = evalkit_home()
            self._adversarial = (
                banked_adversarial(Store.open(home)) if (home / STORE_FILE).exists() else no_adversarial
            )
        return self._adversarial

    def _box(self) -> Sandbox:
        with self._lock:
            if self._sandbox is None:
                self._sandbox = Sandbox(self._settings.limits, workers=self._workers)
                atexit.register(self.close)
            return self._sandbox

    @property
    def settings(self) -> VerifierSettings:
        return self._settings

    def isolation(self) -> str:
        """The sandbox isolation in effect (``Isolation.label``), measured once the sandbox has started."""
        box = self._box()
        with self._lock:
            if self._isolation is None:
                self._isolation = box.isolation.label
            return self._isolation

    def close(self) -> None:
        with self._lock:
            if self._sandbox is not None and self._own_sandbox:
                self._sandbox.close()
                self._sandbox = None

    def __call__(
        self,
        prompts: Sequence[object],  # noqa: ARG002 - TRL's signature; the prompt is re-rendered from the task
        completions: Sequence[object],
        task_id: object = None,
        **kwargs: object,
    ) -> list[float | None]:
        n = len(completions)
        if task_id is None:
            raise RewardError("task_id: the dataset needs a 'task_id' column (as the grpo export writes it)")
        ids = _per_sample("task_id", task_id, n)
        dirs = _per_sample("tasks_dir", kwargs.get("tasks_dir"), n)
        digests = _per_sample("task_digest", kwargs.get("task_digest"), n)
        required = _per_sample("isolation", self._required or kwargs.get("isolation"), n)
        have = self.isolation()
        weaker = [
            weaker_isolation(have, need if isinstance(need, str) and need else None) for need in required
        ]
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        entry: dict[str, JSON] = {
            "step": step if isinstance(step, int) else None,
            "task_ids": [str(t) for t in ids],
            "completions": [completion_text(c) for c in completions],
            "isolation": have,
            "weaker_isolation": list(weaker),
        }
        if all(weaker):
            with self._lock:
                self.stats["weaker_isolation"] += n
                self.log.append({**entry, "rewards": [None for _ in range(n)], "flags": [[] for _ in range(n)]})
            return [None] * n
        source = self._source()
        items: list[tuple[Task, str, Sequence[CallTest]]] = []
        for i in range(n):
            bank = self._bank(dirs[i])
            tid = ids[i]
            if not isinstance(tid, str) or tid not in bank:
                raise RewardError(f"task_id: {tid!r} is not in the task bank")
            task = bank[tid]
            want = digests[i]
            if isinstance(want, str) and want and want != task.digest:
                raise RewardError(
                    f"task_digest: the dataset was made for {tid} at {want}, the bank holds {task.digest}"
                )
            items.append((task, completion_text(completions[i]), tuple(source(task))))
        keep = [i for i in range(n) if not weaker[i]]
        gradings = grade_rollouts([items[i] for i in keep], self._box(), self._settings)
        out: list[float | None] = [None] * n
        counts = {"scored": 0, "weaker_isolation": n - len(keep), "no_reward": 0, "flagged": 0}
        flags: list[JSON] = [[] for _ in range(n)]
        for i, grading in zip(keep, gradings, strict=True):
            task, text, adversarial = items[i]
            report = check_rollout(task, text, grading, adversarial)
            flags[i] = list(report.tripped)
            value = compute_reward(grading, flagged=report.flagged, allow_flagged=self._allow_flagged).value
            out[i] = value
            counts["scored"] += 1
            counts["no_reward"] += value is None
            counts["flagged"] += report.flagged
        with self._lock:
            for key, value in counts.items():
                self.stats[key] += value
            rewards: list[JSON] = [*out]
            self.log.append({**entry, "rewards": rewards, "flags": flags})
        return out


def make_reward(
    tasks_dir: str | Path | None = None,
    *,
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    adversarial: AdversarialSource | None = None,
    allow_flagged: bool = False,
    required_isolation: str | None = None,
    sandbox: Sandbox | None = None,
    name: str = "evalkit_reward",
) -> RewardFunction:
    """A reward function with its own settings (task bank, sandbox limits and workers, adversarial source,
    whether flagged rollouts keep their reward, the isolation it requires: ``full`` or ``weaker: <missing
    layers>``, as ``Isolation.label``), and a sandbox of the caller's to grade in (it stays the caller's to
    close; default: one of its own, started on first use). ``adversarial=None``: the store in ``$EVALKIT_HOME`` if any. The function
    carries ``close()``, ``stats`` (counts), ``settings`` (its ``VerifierSettings``) and ``isolation()``."""
    grader = _Grader(tasks_dir, limits, workers, adversarial, allow_flagged, required_isolation, sandbox)

    def fn(
        prompts: Sequence[object], completions: Sequence[object], task_id: object = None, **kwargs: object
    ) -> list[float | None]:
        return grader(prompts, completions, task_id, **kwargs)

    fn.__name__ = name
    fn.__qualname__ = name
    attributes = cast("dict[str, object]", fn.__dict__)
    attributes["close"] = grader.close
    attributes["stats"] = grader.stats
    attributes["log"] = grader.log
    attributes["settings"] = grader.settings
    attributes["isolation"] = grader.isolation
    return cast("RewardFunction", fn)


_default: Callable[..., list[float | None]] | None = None
_default_lock = threading.Lock()


def reward(
    prompts: Sequence[object], completions: Sequence[object], task_id: object = None, **kwargs: object
) -> list[float | None]:
    """Grade each completion of ``task_id`` in the sandbox (see the module docstring): one float per completion,
    ``None`` on sandbox infrastructure errors."""
    global _default  # noqa: PLW0603 - one shared sandbox for the process, started on first call
    with _default_lock:
        if _default is None:
            _default = make_reward(name="reward")
        fn = _default
    return fn(prompts, completions, task_id, **kwargs)
