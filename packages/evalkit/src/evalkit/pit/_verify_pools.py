"""Where verify's cells are walked when there is more than one worker: a pool of local processes, or Ray actors.

Both hold a :class:`~evalkit.pit._verify_cells.CellReplayer` per worker (the release once per worker: a local
worker maps the verifying process's own frames, written to a private temporary directory as Arrow IPC; a Ray actor
reads the release from its JSONL as the one-worker replay does) and answer :meth:`submit` with a handle that waits for the cell's
result. The local pool's processes are started with ``spawn`` (a fresh interpreter: nothing of this process's
threads is inherited). The Ray pool starts or joins a cluster as ``evalkit eval --executor ray`` does
(:class:`evalkit._ray.RayCluster`); each actor loads the release from the path given, so on a cluster of
several machines the release must be at that path on each (a shared file system).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

from evalkit._ray import RayCluster, check_executor, import_ray
from evalkit.pit._verify_cells import (
    CellJob,
    CellReplayer,
    CellResult,
    WorkerLostError,
    parallel_pass,
    ship_setup,
)
from evalkit.pit._verify_replay import Pass, ReplaySetup, Walker, serial_pass
from evalkit_core import ConfigError

if TYPE_CHECKING:
    from evalkit.pit._score import Scorer

__all__ = ["AUTO_MIN_BYTES", "LocalPool", "RayPool", "walker"]

# With the default worker count, a trajectory smaller than this on disk is replayed in the verifying process:
# starting workers (an interpreter each, the release handed over) costs more than they save on a small run.
AUTO_MIN_BYTES = 16 << 20


def walker(
    bundle: str | Path, workers: int | None = None, executor: str = "local", address: str | None = None
) -> Walker | None:
    """The pass that walks the cells on ``workers`` local processes (None: one per core) or, with ``executor``
    ``ray``, on Ray actors (None: one per CPU of the cluster at ``address``, or of a single-machine one started
    here); None when that is one local worker (the replay's own pass, in this process). With the default count
    (None, local), a trajectory under :data:`AUTO_MIN_BYTES` on disk is replayed in this process. A
    :class:`ConfigError` for an unknown executor, an address without Ray, a count below 1, or Ray asked for and not
    installed."""
    check_executor(executor, address)
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers: expected a count of at least 1, got {workers}")
    auto = workers is None and executor != "ray"
    if executor != "ray":
        workers = workers or os.cpu_count() or 1
        if workers == 1:
            return None
    where = str(bundle)

    def cells_on_workers(body: Mapping[str, Any], setup: ReplaySetup, traj: Path, scorer: Scorer) -> Pass:
        if auto and traj.stat().st_size < AUTO_MIN_BYTES:
            return serial_pass(body, setup, traj, scorer)
        config = cast("dict[str, Any]", body["config"])
        cells = len(setup.config.arms) * len(setup.config.clocks)
        if executor == "ray":
            with RayPool(config, where, workers, address, cells) as pool:
                return parallel_pass(body, setup, traj, scorer, pool)
        # local workers start from this process's release, already read from its JSONL and checked
        with tempfile.TemporaryDirectory(prefix="evalkit-verify-") as shipped:
            ship_setup(setup, Path(shipped))
            with LocalPool(config, where, max(1, min(cast("int", workers), cells)), shipped) as pool:
                return parallel_pass(body, setup, traj, scorer, pool)

    return cells_on_workers


READY_SECONDS = 60.0  # how long a Ray pool waits for all its actors to be placed and started
# in a pool's process: its replayer, made with its first cell
_REPLAYER: dict[tuple[str, str | None], CellReplayer] = {}


def _replay_in_process(config: dict[str, Any], bundle: str, shipped: str | None, job: CellJob) -> CellResult:
    key = (bundle, shipped)
    replayer = _REPLAYER.get(key)
    if replayer is None:
        _REPLAYER.clear()
        replayer = _REPLAYER[key] = CellReplayer(config, bundle, shipped)
    return replayer.replay(job)


class LocalPool:
    """``workers`` processes of this machine (started when the first cells are sent)."""

    def __init__(self, config: dict[str, Any], bundle: str, workers: int, shipped: str | None = None) -> None:
        self.workers = workers  # processes are started as cells are sent: never more than the cells
        self._config = config
        self._bundle = bundle
        self._shipped = shipped
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, job: CellJob) -> Callable[[], CellResult]:
        try:
            future: Future[CellResult] = self._pool.submit(
                _replay_in_process, self._config, self._bundle, self._shipped, job
            )
        except BrokenProcessPool as exc:  # a worker died before this cell was sent
            return _lost(exc)

        def result() -> CellResult:
            try:
                return future.result()
            except BrokenProcessPool as exc:  # its process ended abruptly (killed, out of memory)
                raise WorkerLostError(f"a replay worker ended abruptly ({exc})") from exc

        return result

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _lost(exc: BaseException) -> Callable[[], CellResult]:
    def result() -> CellResult:
        raise WorkerLostError(f"a replay worker ended abruptly ({exc})") from exc

    return result


class RayPool:
    """``workers`` actors (default: one per CPU of the cluster; never more than ``cells``) on the Ray cluster at
    ``address``, or on a single-machine one started here (on 127.0.0.1) with ``workers`` CPUs. Actors Ray cannot
    place within a minute (their CPUs held by other work) are given back, keeping at least one, as the grading
    pool does. A cell goes to an actor with no cell in hand; the caller keeps at most ``workers`` in hand."""

    def __init__(
        self, config: dict[str, Any], bundle: str, workers: int | None, address: str | None, cells: int
    ) -> None:
        self._ray = import_ray("--executor ray")
        self._cluster = RayCluster(address, num_cpus=workers)
        self._config = config
        self._bundle = bundle
        self._asked = workers
        self._cells = cells
        self.workers = 0
        self._free: deque[Any] = deque()
        self._actors: list[Any] = []

    def __enter__(self) -> Self:
        self._cluster.__enter__()
        ray = self._ray
        asked = max(1, min(self._asked or self._cluster.cpus(), self._cells))
        actor = ray.remote(num_cpus=1, max_restarts=0)(CellReplayer)
        actors = [
            actor.options(scheduling_strategy="SPREAD").remote(self._config, self._bundle)
            for _ in range(asked)
        ]
        refs = [a.pid.remote() for a in actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=READY_SECONDS)
        if not ready:
            ready, _ = ray.wait(refs, num_returns=1)
        placed = {refs.index(r) for r in ready}
        for i, a in enumerate(actors):
            if i not in placed:
                ray.kill(a, no_restart=True)
        self._actors = [a for i, a in enumerate(actors) if i in placed]
        self.workers = len(self._actors)
        self._free = deque(self._actors)
        return self

    def submit(self, job: CellJob) -> Callable[[], CellResult]:
        actor = self._free.popleft()
        ref = actor.replay.remote(job)

        def result() -> CellResult:
            try:
                return cast("CellResult", self._ray.get(ref))
            except self._ray.exceptions.RayActorError as exc:  # the actor died (its process or its node)
                raise WorkerLostError(f"a Ray replay actor was lost ({type(exc).__name__})") from exc
            finally:
                self._free.append(actor)

        return result

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for a in self._actors:
            self._ray.kill(a, no_restart=True)
        self._actors = []
        self._cluster.__exit__(t, e, tb)
