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

Ray is started or joined by :class:`RayCluster`. Started here (no ``--address``) it is a single-machine
instance bound to the loopback interface, without the dashboard, with usage statistics off, a small object
store, and the CPUs it is given; joined (``--address HOST:PORT``) it is the operator's cluster as configured.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

from evalkit.grading._verifiers import Verdict, VerifierSettings, grade_many
from evalkit.wall import Isolation, Sandbox, SandboxLimits
from evalkit_core import ConfigError

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

EXECUTORS = ("local", "ray")
RAY_INSTALL_HINT = "install the extra: uv pip install 'evalkit-harness[ray]' (or pip install 'evalkit-harness[ray]')"
READY_SECONDS = 60.0  # how long a new pool waits for all its workers to be placed and started
OBJECT_STORE_BYTES = 150 * 1024 * 1024  # rollouts and verdicts are small; Ray's default is 30% of memory

# Set before Ray starts in this process (and inherited by what it starts): no usage report to the Ray project,
# and no `uv run` wrapping of worker processes (Ray's uv hook would start each worker in another environment).
_RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
# A single-machine instance started here: every Ray process listens on 127.0.0.1 (Ray's own switch for a
# machine that is not part of a cluster), and a loaded machine gets time to start the node's agents.
_LOCAL_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_agent_register_timeout_ms": "120000",
    "RAY_raylet_start_wait_time_s": "120",
}


def check_executor(executor: str, address: str | None, option: str = "--executor") -> None:
    """Refuse an unknown executor, an ``--address`` without ``--executor ray``, and ``ray`` without Ray."""
    if executor not in EXECUTORS:
        raise ConfigError(f"{option}: expected one of {', '.join(EXECUTORS)}, got {executor!r}")
    if address is not None and executor != "ray":
        raise ConfigError("--address: only with --executor ray (it names the Ray cluster to join)")
    if address is not None and not address.strip():
        raise ConfigError("--address: expected HOST:PORT of a Ray cluster's head (or 'auto'), got an empty value")
    if executor == "ray":
        import_ray(f"{option} ray")


def import_ray(option: str = "--executor ray") -> ModuleType:
    """The ``ray`` module, or a :class:`ConfigError` saying what to install."""
    for name, value in _RAY_ENV.items():
        os.environ.setdefault(name, value)
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{option}: Ray is not installed; {RAY_INSTALL_HINT}") from None
    return ray


class RayCluster:
    """Join the Ray cluster at ``address``, or start a single-machine one with ``num_cpus`` CPUs (default: the
    machine's). Use as a context manager: a cluster started here is shut down on exit; one that was already
    initialised in this process (a test's, a notebook's) is used as it is and left running."""

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus
        self.started = False
        self._ray: ModuleType | None = None

    def __enter__(self) -> Self:
        ray = import_ray()
        self._ray = ray
        if ray.is_initialized():
            return self
        common: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.ERROR,  # Ray's start-up chatter stays off the command's stderr
            "namespace": "evalkit",
        }
        if self.address is None:
            for name, value in _LOCAL_ENV.items():
                os.environ.setdefault(name, value)
            ray.init(
                address="local",  # never join a cluster found on the machine: start our own
                num_cpus=self.num_cpus or os.cpu_count() or 1,
                object_store_memory=OBJECT_STORE_BYTES,
                _node_ip_address="127.0.0.1",
                **common,
            )
        else:
            try:
                ray.init(address=self.address, **common)
            except ConnectionError as exc:
                raise ConfigError(f"--address {self.address}: no Ray cluster answers there ({exc})") from None
        self.started = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.started and self._ray is not None:
            self._ray.shutdown()
            self.started = False

    def nodes(self) -> list[str]:
        """The ids of the cluster's live nodes."""
        assert self._ray is not None
        return [str(n["NodeID"]) for n in cast("list[dict[str, Any]]", self._ray.nodes()) if n.get("Alive")]

    def cpus(self) -> int:
        assert self._ray is not None
        return max(1, int(cast("dict[str, float]", self._ray.cluster_resources()).get("CPU", 1)))


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
