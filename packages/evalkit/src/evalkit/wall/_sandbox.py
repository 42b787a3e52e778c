"""The sandbox: grades candidate code behind the wall (:mod:`evalkit.wall._zygote`), one jailed process per test.

For each test the host asks its worker's zygote for a fresh jailed process (own pid, mount and IPC namespaces,
a read-only root holding only the interpreter, a private ``/job`` tmpfs, no network, a uid no other running job
has, rlimits, seccomp) that loads the candidate's module from scratch, so no test's verdict depends on which
tests ran before it. The host sends the candidate its source and then the call's arguments on pipes made for
that test, and reads back data (tagged JSON, see :mod:`evalkit.wall._codec`):

- a **call test** is one call whose reply the verifier compares with the expected value, outside;
- an **assert-style check** runs in a second jailed process (the checker, another uid) that holds the check
  program and calls the candidate through a proxy over a pipe pair; the candidate process never holds the check,
  its expected values, or anything that could vouch for a pass.

The host enforces every wall-clock limit (loading, then the test), end to end, and kills a job through its pidfd:
pid 1 of a pid namespace takes every process of the job with it. Every reply is read with a size cap and decoded
with a depth cap; whatever a candidate's process does (garbage, silence, a crash, a huge or deeply nested value)
becomes that test's verdict. Only a failure of the wall itself is an infrastructure error, and only after a
known-good canary job on the same worker confirms it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Self

from evalkit.wall._hosterror import host_error
from evalkit.wall._jobs import JSON, Isolation, SandboxJob, SandboxLimits, SandboxRun, TestRun
from evalkit.wall._policy import WallError, refused_layers, release_uid_block, uid_block
from evalkit.wall._worker import Worker
from evalkit.wall._zygote import default_workers

__all__ = [
    "JSON",
    "Isolation",
    "Sandbox",
    "SandboxJob",
    "SandboxLimits",
    "SandboxRun",
    "TestRun",
]


def user_processes(uids: Sequence[int] | int) -> list[int]:
    """Pids of the processes owned by any of ``uids`` (for tests that check nothing is left behind)."""
    wanted = {uids} if isinstance(uids, int) else set(uids)
    out: list[int] = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid in wanted:
                    out.append(int(entry.name))
    return out


class Sandbox:
    """A pool of wall workers (one zygote each). Use as a context manager; it is thread-safe.

    ``run`` grades one candidate; ``run_many`` spreads candidates over the workers.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        workers: int | None = None,
        uid_base: int | None = None,
        without: frozenset[str] = frozenset(),
    ) -> None:
        """``without`` leaves layers of the wall out (``bwrap``, ``namespaces``, ``seccomp``): for tests of the
        weaker paths, and for a machine where a layer misbehaves. :attr:`isolation` says what was left out."""
        unknown = set(without) - {"bwrap", "namespaces", "seccomp"}
        if unknown:
            raise ValueError(f"unknown wall layers: {sorted(unknown)}")
        self.without = frozenset(without)
        self.limits = limits or SandboxLimits()
        self.workers = max(1, min(8, workers or default_workers()))
        self._own_block = uid_base is None
        self._uid_base = uid_base if uid_base is not None else uid_block()
        self._uid_next = 0
        self._uid_lock = threading.Lock()
        self._uids_taken: set[int] = set()
        self._degraded: set[str] = set()
        self._workers = [Worker(self, slot) for slot in range(self.workers)]
        self._free: queue.Queue[Worker] = queue.Queue()
        for w in self._workers:
            self._free.put(w)
        self._closed = False
        self._starters: list[threading.Thread] = []

    def next_uid(self) -> int:
        """A job's uid: the block's first 8 belong to the workers' checker servers, which outlive jobs; the other
        1016 go round, skipping every uid whose job the zygote has not yet reported gone (:meth:`free_uid`), so no
        two jobs that exist at once share a uid however long one of them runs."""
        with self._uid_lock:
            for _ in range(1016):
                uid = self._uid_base + 8 + self._uid_next % 1016
                self._uid_next += 1
                if uid not in self._uids_taken:
                    self._uids_taken.add(uid)
                    return uid
        raise WallError("every uid of this sandbox belongs to a job that still exists")

    def free_uid(self, uid: int) -> None:
        """The job that had ``uid`` is gone (its zygote reaped it, or ended)."""
        with self._uid_lock:
            self._uids_taken.discard(uid)

    def checker_uid(self, slot: int) -> int:
        return self._uid_base + slot

    def note_degraded(self, layer: str) -> None:
        self._degraded.add(layer)

    @property
    def uids(self) -> tuple[int, ...]:
        """Every uid this sandbox may hand to a job (as root), for checks that nothing outlived a job."""
        return tuple(range(self._uid_base, self._uid_base + 1024)) if os.geteuid() == 0 else ()

    def prestart(self) -> None:
        """Start every worker's zygote and checker server now, in the background, so that start-up overlaps the
        caller's own work. A worker that fails to start here is started again, and the failure reported, by its
        first job."""
        if self._closed or self._starters:
            return
        for _ in self._workers:
            thread = threading.Thread(target=self._start_one, name="evalkit-sandbox-start", daemon=True)
            thread.start()
            self._starters.append(thread)

    def _start_one(self) -> None:
        worker = self._free.get()
        try:
            if not self._closed:
                worker.ensure()
                worker.start_checker()  # a check's first job then finds it ready
        except (OSError, ValueError):
            pass
        finally:
            self._free.put(worker)

    @property
    def isolation(self) -> Isolation:
        worker = self._free.get()
        try:
            with contextlib.suppress(OSError):
                worker.ensure()
            z = worker.zygote
        finally:
            self._free.put(worker)
        root = os.geteuid() == 0
        bwrap = z.uses_bwrap
        namespaces = z.namespaces
        seccomp = z.seccomp_library is not None
        why_bwrap = (
            "left out by the caller"
            if "bwrap" in self.without
            else "refused by EVALKIT_WALL_WITHOUT"
            if "bwrap" in refused_layers()
            else "bubblewrap is not installed"
        )
        if z.separate_uids:
            user = "own uid per job (no other running job shares it)"
        elif root:
            user = f"NOT separated: the harness's own uid (another uid cannot read the interpreter; {why_bwrap})"
        else:
            user = "NOT separated: the harness's own uid (not root)"
        network = "network namespace without routes (bubblewrap)" if bwrap else f"NOT isolated: {why_bwrap}"
        if bwrap and namespaces:
            filesystem = (
                "read-only root of the interpreter and system libraries only; private /job tmpfs"
                f" ({self.limits.disk_bytes} bytes) per job"
            )
        elif bwrap:
            why_ns = "left out by the caller" if "namespaces" in self.without else "the machine refused them"
            filesystem = f"read-only root, but NOT a private /job per job (no mount namespace: {why_ns})"
        elif namespaces:
            filesystem = f"NOT isolated: the host's filesystem is visible ({why_bwrap}); private tmpfs per job"
        else:
            filesystem = f"NOT isolated: the host's filesystem is visible ({why_bwrap}, no mount namespace)"
        processes = (
            "own pid, mount and IPC namespaces and /proc per job; every process ends with the job"
            if namespaces
            else "NOT isolated: no pid namespace per job ("
            + ("left out by the caller" if "namespaces" in self.without else "the machine refused them")
            + ")"
        )
        seccomp_text = (
            f"libseccomp filter: {len(z.denied)} syscalls refused, kill of other process groups refused"
            if seccomp
            else "NOT in effect: "
            + (
                "left out by the caller"
                if "seccomp" in self.without
                else "refused by EVALKIT_WALL_WITHOUT"
                if "seccomp" in refused_layers()
                else "libseccomp not found"
            )
        )
        full = z.separate_uids and bwrap and namespaces and seccomp
        return Isolation(
            user=user,
            network=network,
            filesystem=filesystem,
            interpreter=os.path.realpath(os.sys.executable),  # type: ignore[attr-defined]
            processes=processes,
            seccomp=seccomp_text,
            full=full,
        )

    def run(self, job: SandboxJob) -> SandboxRun:
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        worker = self._free.get()
        try:
            return worker.run(job)
        except Exception as exc:
            # Whatever the host raised while it handled this job's replies is this job's failure, not the run's: the
            # worker is proved again before its next job, and the exception's type and place are recorded.
            worker.checked = False
            return SandboxRun(
                tests=tuple(TestRun("not_run") for _ in job.tests),
                load_status="crash",
                load_error="the host could not handle this candidate's output",
                host_error=host_error(exc),
            )
        finally:
            self._free.put(worker)

    def run_many(
        self, jobs: Sequence[SandboxJob], *, on_done: Callable[[], None] | None = None
    ) -> list[SandboxRun]:
        """Run ``jobs`` over the workers; results in order. ``on_done`` is called (from a worker thread) as
        each job finishes, in whatever order they finish."""

        def one(job: SandboxJob) -> SandboxRun:
            run = self.run(job)
            if on_done is not None:
                on_done()
            return run

        if len(jobs) <= 1 or self.workers == 1:
            return [one(j) for j in jobs]
        # here, not at import: concurrent.futures brings logging, some 8 ms of CPU on the way to `evalkit eval`'s
        # first job, which grades through grade_each and never comes here
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(one, jobs))

    def settle(self) -> None:
        """Wait until every process of every job that has returned is gone (jobs are killed when their verdict is
        known; the kernel's teardown of their namespaces is collected in the background)."""
        for _ in self._workers:
            worker = self._free.get()
            try:
                worker.drop_spare()  # a process started for a job that never came is a process all the same
                worker.zygote.settle()
            finally:
                self._free.put(worker)

    def hang_up(self) -> None:
        """Take no more jobs and tell every zygote to end, without waiting: a caller whose jobs are all done calls
        this before its own last work (writing results), so that the jails' teardown overlaps it. :meth:`close`
        then waits until every process of every job is gone."""
        if self._closed:
            return
        self._closed = True
        for thread in self._starters:
            thread.join()
        for w in self._workers:  # every zygote ends at once; close() waits for each
            w.hang_up()

    def close(self) -> None:
        self.hang_up()
        for w in self._workers:  # each waits for its zygote; a worker already closed returns at once
            w.close()
        if self._own_block:  # every job of this sandbox is gone: its uids may serve another
            self._own_block = False
            release_uid_block(self._uid_base)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextlib.contextmanager
def open_sandbox(limits: SandboxLimits | None = None, *, workers: int | None = None) -> Iterator[Sandbox]:
    box = Sandbox(limits, workers=workers)
    try:
        yield box
    finally:
        box.close()
