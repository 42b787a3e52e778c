"""Sandboxed grading on a Ray cluster: a pool of sandbox-worker actors, spread over the nodes.

Ray is optional (the extra ``evalkit-harness[ray]``); nothing here imports it before a Ray executor is asked
for, and asking for one without it installed is a :class:`~evalkit_core.ConfigError` (one line, exit 2) naming
what to install.

Each :class:`GradingPool` actor holds one :class:`~evalkit.Sandbox` slot for its whole life, so the wall's
template interpreter (its zygote) is started once per actor and reused for every candidate it grades, as in a
local sandbox. An actor takes one CPU from Ray, so a node holds as many as it has CPUs: the pool is a pool of
sandbox workers per node. A worker process that dies (a SIGKILL, an OOM kill) is restarted by Ray and the
grading it had in hand is run again on the new one: grading is a pure function of (task, completion,
settings), so a second run gives the same verdict and costs no model call.

Ray is started or joined by :class:`RayCluster` (:mod:`evalkit._ray`, shared with verify's replay): started here
(no ``--address``) it is a single-machine instance bound to the loopback interface; joined (``--address
HOST:PORT``) it is the operator's cluster as configured.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

from evalkit._ray import EXECUTORS, RAY_INSTALL_HINT, RayCluster, check_executor, import_ray
from evalkit.grading._verifiers import Verdict, VerifierSettings, grade_many
from evalkit.wall import Isolation, Sandbox, SandboxLimits

if TYPE_CHECKING:
    import asyncio

    from evalkit.grading._tasks import Task

__all__ = [
    "EXECUTORS",
    "RAY_INSTALL_HINT",
    "GradingPool",
    "RayCluster",
    "check_executor",
    "import_ray",
]

READY_SECONDS = 60.0  # how long a new pool waits for all its workers to be placed and started


class _SandboxWorker:
    """One sandbox slot in one Ray worker process (the actor behind :class:`GradingPool`)."""

    def __init__(self, limits: SandboxLimits, env: Mapping[str, str]) -> None:
        os.environ.update(env)
        self.sandbox = Sandbox(limits, workers=1)
        self.sandbox.prestart()

    def pid(self) -> int:
        return os.getpid()

    def isolation(self) -> Isolation:
        return self.sandbox.isolation

    def grade(self, items: list[tuple[Task, str]], settings: VerifierSettings, extract: bool) -> list[Verdict]:
        return grade_many(items, self.sandbox, settings, extract=extract)

    def close(self) -> None:
        self.sandbox.close()


class GradingPool:
    """A pool of sandbox-worker actors on the Ray cluster joined by a :class:`RayCluster`: ``workers`` of them
    (default one per CPU of the cluster), spread over the nodes, each restarted by Ray if its process dies. Those
    Ray cannot place within :data:`READY_SECONDS` (their CPUs are held by other work) are given back, keeping at
    least one: :attr:`workers` says how many the pool has.

    ``grade_many`` has the meaning of :func:`evalkit.grade_many` over a local sandbox; ``grade`` grades one
    batch from asyncio (a campaign's driver). Use as a context manager."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        workers: int | None = None,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        ray = import_ray()
        self._ray = ray
        self.limits = limits or SandboxLimits()
        self.workers = workers or max(1, int(cast("dict[str, float]", ray.cluster_resources()).get("CPU", 1)))
        actor = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=-1)(_SandboxWorker)
        options: dict[str, Any] = {"scheduling_strategy": "SPREAD"}
        self._actors: list[Any] = [
            actor.options(**options, **({"name": f"{name}/grader/{i}"} if name else {})).remote(
                self.limits, dict(env or {})
            )
            for i in range(self.workers)
        ]
        # Keep the workers Ray could place. On a cluster busy with other work (another campaign's pool holding
        # the CPUs), a worker may wait for a CPU forever; one handed grading then would hang the run. So: wait
        # a while for all, then at least one, and give back the rest.
        refs = [a.pid.remote() for a in self._actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=READY_SECONDS)
        if not ready:
            ready, _ = ray.wait(refs, num_returns=1)
        placed = {refs.index(r) for r in ready}
        for i, a in enumerate(self._actors):
            if i not in placed:
                ray.kill(a, no_restart=True)
        self._actors = [a for i, a in enumerate(self._actors) if i in placed]
        self.workers = len(self._actors)
        self._free: asyncio.Queue[Any] | None = None
        self._isolation: Isolation | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for a in self._actors:
            self._ray.kill(a, no_restart=True)  # the sandbox's zygotes die with their parent's process group
        self._actors = []

    @property
    def isolation(self) -> Isolation:
        """What isolation the pool's sandboxes have (measured in one worker; the nodes are alike)."""
        if self._isolation is None:
            self._isolation = cast("Isolation", self._ray.get(self._actors[0].isolation.remote()))
        return self._isolation

    def pids(self) -> list[int]:
        """The process ids of the pool's workers, on their nodes."""
        return [int(p) for p in self._ray.get([a.pid.remote() for a in self._actors])]

    def grade_many(
        self,
        items: Sequence[tuple[Task, str]],
        settings: VerifierSettings | None = None,
        *,
        extract: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Verdict]:
        """Grade ``(task, completion)`` pairs on the pool, in order (see :func:`evalkit.grade_many`): batches of
        a few candidates go to whichever worker is free."""
        settings = settings or VerifierSettings(self.limits)
        n = len(items)
        size = max(1, min(16, n // (4 * len(self._actors)) or 1))
        batches = [list(range(i, min(n, i + size))) for i in range(0, n, size)]
        out: list[Verdict | None] = [None] * n
        idle = list(self._actors)
        running: dict[Any, tuple[Any, list[int]]] = {}
        pending = list(reversed(batches))
        done = 0
        while pending or running:
            while pending and idle:
                batch = pending.pop()
                actor = idle.pop()
                ref = actor.grade.remote([items[i] for i in batch], settings, extract)
                running[ref] = (actor, batch)
            ready, _ = self._ray.wait(list(running), num_returns=1)
            for ref in ready:
                actor, batch = running.pop(ref)
                idle.append(actor)
                for i, v in zip(batch, cast("list[Verdict]", self._ray.get(ref)), strict=True):
                    out[i] = v
                    done += 1
                    if progress is not None:
                        progress(done, n)
        return [v for v in out if v is not None]

    async def grade(
        self, items: list[tuple[Task, str]], settings: VerifierSettings, *, extract: bool = True
    ) -> list[Verdict]:
        """Grade one batch on the next free worker, from asyncio."""
        import asyncio  # here, not at import: evalkit eval imports this module and must not load asyncio

        if self._free is None:
            self._free = asyncio.Queue()
            for a in self._actors:
                self._free.put_nowait(a)
        actor = await self._free.get()
        try:
            return cast("list[Verdict]", await actor.grade.remote(items, settings, extract))
        finally:
            self._free.put_nowait(actor)
