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
import errno
import fcntl
import math
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from types import TracebackType
from typing import Literal, Self, TypeAlias, cast

import attrs

from evalkit.wall._codec import TaggedError, tagged_decode, tagged_encode, tagged_to_json
from evalkit.wall._zygote import (
    Spawned,
    WallError,
    WallPolicy,
    Zygote,
    adopt_early,
    describe_status,
    refused_layers,
    release_uid_block,
    sandbox_payload_source,
    uid_block,
)

__all__ = [
    "JSON",
    "Isolation",
    "Sandbox",
    "SandboxJob",
    "SandboxLimits",
    "SandboxRun",
    "TestRun",
]

# What a job's tests carry and a call test returns: JSON data (the tagged codec carries more, see _codec).
JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"

RunStatus = Literal["value", "done", "raised", "timeout", "crash", "bad_return", "not_run"]
LoadStatus = Literal["ok", "raised", "timeout", "crash", "missing", "infra"]

_MAX_MESSAGE = 1 << 20
_MAX_JOB = 4 << 20


@attrs.frozen
class SandboxLimits:
    """Per-test CPU seconds, the wall-clock allowance, and the rlimits of every sandboxed process."""

    cpu_seconds: float = 3.0
    wall_seconds: float | None = (
        None  # default: 3 x cpu + 2 (generous: CPU time is the fair measure under load)
    )
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    open_files: int = 64
    processes: int = 1
    output_bytes: int = 4096
    # all of a test's files together: its private tmpfs /job
    disk_bytes: int = 128 << 20

    @property
    def wall(self) -> float:
        return self.wall_seconds if self.wall_seconds is not None else 3 * self.cpu_seconds + 2

    def to_json(self) -> dict[str, JSON]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "wall_seconds": self.wall,
            "memory_bytes": self.memory_bytes,
            "file_bytes": self.file_bytes,
            "open_files": self.open_files,
            "processes": self.processes,
            "output_bytes": self.output_bytes,
            "disk_bytes": self.disk_bytes,
        }

    def rlimits(self) -> dict[str, int]:
        # CPU: loading and the test each get cpu_seconds; the kernel's limit is the backstop (SIGXCPU)
        return {
            "core": 0,
            "cpu": math.ceil(2 * self.cpu_seconds) + 1,
            "as": self.memory_bytes,
            "fsize": self.file_bytes,
            "nofile": self.open_files,
            "nproc": self.processes,
        }


@attrs.frozen
class Isolation:
    """What isolation was in effect, measured when the sandbox started (see :class:`evalkit.wall._zygote.WallReport`)."""

    user: str
    network: str
    filesystem: str
    interpreter: str
    processes: str = ""
    seccomp: str = ""
    full: bool = False

    def to_json(self) -> dict[str, JSON]:
        return {
            "user": self.user,
            "network": self.network,
            "filesystem": self.filesystem,
            "processes": self.processes,
            "seccomp": self.seccomp,
            "interpreter": self.interpreter,
            "full": self.full,
        }

    @property
    def weaker(self) -> list[str]:
        """The layers missing from the full wall, for a one-line warning."""
        return [s for s in (self.user, self.network, self.filesystem, self.processes, self.seccomp) if "NOT" in s]

    @property
    def missing(self) -> tuple[str, ...]:
        """The names of the layers missing from the full wall (``user``, ``network``, ``filesystem``,
        ``processes``, ``seccomp``), sorted."""
        layers = {
            "user": self.user,
            "network": self.network,
            "filesystem": self.filesystem,
            "processes": self.processes,
            "seccomp": self.seccomp,
        }
        return tuple(sorted(name for name, text in layers.items() if "NOT" in text))

    @property
    def label(self) -> str:
        """The isolation in a short, comparable form: ``full``, or ``weaker: <missing layers>`` (what a campaign
        records with each verdict; compare two with ``evalkit_training.weaker_isolation``)."""
        return "full" if not self.missing else "weaker: " + ", ".join(self.missing)


@attrs.frozen
class SandboxJob:
    """One candidate and the inputs of its tests: ``{"args": [...], "kwargs": {...}}`` for a call, or
    ``{"check": src, "context": src}`` for an assert-style check (``context`` is task code the check may use,
    such as HumanEval's prompt helpers; it runs with the check, outside the candidate).

    Expected values never enter the sandbox. Consecutive call tests share one jailed process (a fresh one after
    any crash or timeout); with ``fresh`` (the default) the candidate's module is loaded again before each test,
    so no test sees globals, functions or default arguments another test left; ``fresh=False`` keeps one module
    (the adversary's reference runs, where only speed matters). Each check runs with a process of its own.

    ``seed`` seeds the candidate's ``random`` module before its code loads (in each of its processes): the same job
    draws the same numbers every time it runs. The adversary runs the reference under two seeds to see whether it
    depends on them.
    """

    source: str
    entry_point: str
    tests: tuple[Mapping[str, JSON], ...]
    fresh: bool = True
    seed: int = 0


@attrs.frozen
class TestRun:
    """The raw outcome of one test inside the sandbox (before any comparison)."""

    status: RunStatus
    value: JSON = None
    error_type: str = ""
    error: str = ""


@attrs.frozen
class SandboxRun:
    tests: tuple[TestRun, ...]
    load_status: LoadStatus
    load_error: str = ""
    output: str = ""
    output_truncated: bool = False
    infra_error: str | None = None


@cache
def _payload_source() -> str:
    return sandbox_payload_source()


def _monotonic() -> float:
    return time.monotonic()


class _Reader:
    """Bytes from one pipe: whole lines (bounded) for a message pipe, or a capped capture for output."""

    def __init__(self, fd: int, *, cap: int, lines: bool) -> None:
        self.fd, self.cap, self.lines = fd, cap, lines
        self.buf = bytearray()
        self.total = 0
        self.eof = False
        self.overflow = False
        self.messages: list[bytes] = []

    def feed(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
            return
        self.total += len(chunk)
        if not self.lines:
            room = self.cap - len(self.buf)
            if room > 0:
                self.buf += chunk[:room]
            return
        if self.overflow:
            return
        self.buf += chunk
        while True:
            cut = self.buf.find(b"\n")
            if cut < 0:
                break
            self.messages.append(bytes(self.buf[:cut]))
            del self.buf[: cut + 1]
        if len(self.buf) > self.cap:
            self.overflow = True
            self.buf.clear()


class _Exchange:
    """The pipes of one test: what to write (non-blocking, each closed when written) and what to read."""

    def __init__(self) -> None:
        self.readers: dict[int, _Reader] = {}
        self.writes: dict[int, bytearray] = {}
        self.closing: set[int] = set()
        self.fds: list[int] = []

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.fds += [r, w]
        return r, w

    def read(self, fd: int, *, cap: int, lines: bool) -> _Reader:
        os.set_blocking(fd, False)
        reader = _Reader(fd, cap=cap, lines=lines)
        self.readers[fd] = reader
        return reader

    def write(self, fd: int, data: bytes, *, close: bool) -> None:
        """Queue ``data`` for ``fd``; with ``close`` the fd is closed once all of it is written."""
        os.set_blocking(fd, False)
        self.writes.setdefault(fd, bytearray()).extend(data)
        if close:
            self.closing.add(fd)

    def close(self, fd: int) -> None:
        if fd in self.fds:
            self.fds.remove(fd)
            os.close(fd)

    def close_all(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def pump(self, deadline: float, done: Callable[[], bool]) -> bool:
        """Move bytes until ``done()`` or every reader is at end of file; False when the deadline passed first."""
        while not done():
            live = [fd for fd, r in self.readers.items() if not r.eof]
            if not live and not self.writes:
                return True
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return False
            wfds = list(self.writes)
            ready_r, ready_w, _ = select.select(live, wfds, [], remaining)
            for fd in ready_w:
                buf = self.writes[fd]
                try:
                    n = os.write(fd, buf[: 1 << 16])
                except BlockingIOError:
                    continue
                except OSError as exc:  # the reader is gone (EPIPE): it ended; what it said is read below
                    if exc.errno != errno.EPIPE:
                        raise
                    n = len(buf)
                del buf[:n]
                if not buf:
                    del self.writes[fd]
                    if fd in self.closing:
                        self.close(fd)
            for fd in ready_r:
                self.readers[fd].feed()
        return True


def _decode(raw: bytes) -> list[object] | None:
    try:
        value = tagged_decode(raw, max_bytes=_MAX_MESSAGE)
    except TaggedError:
        return None
    return cast("list[object]", value) if type(value) is list and value else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


@attrs.define
class _Spare:
    """A candidate's process started ahead of its job: cloned, jailed and blocked reading its (empty) input pipe. It
    has been given nothing (the job's source goes in when it is taken), holds a uid of its own, and is killed
    unused when its worker settles, restarts or closes. ``out_r``, ``in_w`` and ``rep_r`` are this process's ends
    of its output, input and reply pipes."""

    spawned: Spawned
    out_r: int
    in_w: int
    rep_r: int

    def close_fds(self) -> None:
        for fd in (self.out_r, self.in_w, self.rep_r):
            with contextlib.suppress(OSError):
                os.close(fd)


class _Worker:
    """One zygote and the uids it hands out; used by one thread at a time.

    While a job runs, the next job's candidate process is already being cloned and jailed (:class:`_Spare`): the
    zygote's clone and the child's setup overlap the running job instead of starting after it."""

    def __init__(self, sandbox: Sandbox, slot: int) -> None:
        self._box = sandbox
        self.slot = slot
        early = adopt_early(_payload_source()) if not sandbox.without else None
        self.zygote = early or self._zygote(namespaces="namespaces" not in sandbox.without)
        self.zygote.on_uid_free = sandbox.free_uid  # for an adopted one; _zygote sets it on those it makes
        self.checked = False
        self._checker: Spawned | None = None
        self._checker_sock: socket.socket | None = None
        self._checker_exit: int | None = None
        self._spare: _Spare | None = None

    def _zygote(self, *, namespaces: bool) -> Zygote:
        without = self._box.without
        zygote = Zygote(
            WallPolicy(),
            _payload_source(),
            label=f"sandbox-{self.slot}",
            bwrap="bwrap" not in without,
            namespaces=namespaces,
            seccomp="seccomp" not in without,
        )
        zygote.on_uid_free = self._box.free_uid  # a uid comes back only once its job is reported gone
        return zygote

    def _uid(self) -> int:
        return self._box.next_uid()

    def ensure(self) -> None:
        """Start the zygote and prove it with a canary job; drop a layer the machine cannot give (recorded)."""
        if self.zygote.running and self.checked:
            return
        self._checker = self._checker_sock = None
        self.drop_spare(kill=False)  # it belonged to the zygote that is being replaced
        self.zygote.start()
        if self._canary():
            self.checked = True
            return
        self.zygote.stop()
        self.zygote = self._zygote(namespaces=False)
        self.zygote.start()
        if not self._canary():
            self.zygote.stop()
            raise WallError("the sandbox's canary job failed even without namespaces")
        self.checked = True
        self._box.note_degraded("namespaces")

    def _canary(self) -> bool:
        job = SandboxJob("def canary(x):\n    return [x, x * 2]\n", "canary", ({"args": [21], "kwargs": {}},))
        try:
            run = self._calls(job, [0])
        except WallError:
            return False
        return run[1] == "ok" and run[0][0] == TestRun("value", [21, 42])

    # ------------------------------------------------------------------------------------------- one job

    def run(self, job: SandboxJob) -> SandboxRun:
        n = len(job.tests)
        limits = self._box.limits
        try:
            self.ensure()
        except WallError as exc:
            return _infra(n, f"sandbox infrastructure error: {exc}")
        results: list[TestRun | None] = [None] * n
        output = bytearray()
        total_output = 0
        load: tuple[LoadStatus, str] | None = None
        i = 0
        while i < n:
            test = job.tests[i]
            group = [i]  # a check alone; consecutive call tests share a process (each on a fresh module)
            while "check" not in test and group[-1] + 1 < n and "check" not in job.tests[group[-1] + 1]:
                group.append(group[-1] + 1)
            try:
                runs, status, detail, out, out_total = self._attempt(job, group)
            except WallError as exc:
                return _infra(n, f"sandbox infrastructure error: {exc}")
            output += out[: max(0, limits.output_bytes - len(output))]
            total_output += out_total
            if status != "ok":
                if i == 0 or load is None:
                    load = (status, detail)
                    break
                # loading failed now, after it worked for an earlier test: that test's verdict
                results[i] = TestRun("crash" if status == "crash" else "raised", error=f"while loading: {detail}")
                i += 1
                continue
            load = load or ("ok", "")
            for k, r in zip(group, runs, strict=False):
                results[k] = r
            answered = len(runs)
            i = group[0] + max(1, answered)
        if load is None:
            load = ("ok", "")
        if load[0] != "ok":
            results = [TestRun("not_run")] * n
        return SandboxRun(
            tests=tuple(r or TestRun("not_run") for r in results),
            load_status=load[0],
            load_error=load[1],
            output=output.decode("utf-8", "replace"),
            output_truncated=total_output > limits.output_bytes,
        )

    def _attempt(
        self, job: SandboxJob, group: list[int]
    ) -> tuple[list[TestRun], LoadStatus, str, bytes, int]:
        """Run one group of tests; a wall failure is retried once after a canary job proves the worker."""
        for attempt in range(2):
            try:
                if "check" in job.tests[group[0]]:
                    return self._check(job, group[0])
                return self._calls(job, group)
            except WallError:
                self.checked = False
                self.drop_spare(kill=False)
                self.zygote.stop()
                if attempt == 1:
                    raise
                self.ensure()
        raise AssertionError("unreachable")  # pragma: no cover

    def _job_line(self, job: SandboxJob) -> bytes:
        body = {
            "source": job.source,
            "entry_point": job.entry_point,
            "cpu_seconds": self._box.limits.cpu_seconds,
            "seed": job.seed,
        }
        return (tagged_encode(body) + "\n").encode()

    def _load_outcome(self, line: bytes | None, *, timed_out: bool, exit_status: int | None) -> tuple[LoadStatus, str]:
        """What loading came to, from the candidate's first message (or its absence)."""
        if line is not None:
            msg = _decode(line)
            if msg is None or msg[0] != "loaded" or len(msg) < 2:
                return "crash", "the candidate's process wrote garbage where its load status belongs"
            kind = msg[1]
            if kind == "ok":
                return "ok", ""
            if kind == "timeout":
                return "timeout", f"CPU limit ({self._box.limits.cpu_seconds:g}s) exceeded while loading"
            if kind == "missing":
                return "missing", _text(msg[2]) if len(msg) > 2 else "missing entry point"
            if kind == "raised" and len(msg) >= 4:
                return "raised", f"{_text(msg[2])}: {_text(msg[3])}"
            if kind != "gone":
                return "crash", "the candidate's process wrote an unknown load status"
        if timed_out:
            return "timeout", f"wall clock ({self._box.limits.wall:g}s) exceeded while loading"
        return _status_verdict(exit_status)

    def _calls(self, job: SandboxJob, group: list[int]) -> tuple[list[TestRun], LoadStatus, str, bytes, int]:
        """One candidate process answering the calls of ``group`` (one test when the job is fresh)."""
        limits = self._box.limits
        ex = _Exchange()
        spawned: Spawned | None = None
        try:
            spawned, out_r, in_w, rep_r = self._take_candidate(ex)
            # the job and every call go in at once: the candidate loads, reports, then answers the calls in turn,
            # with no round trip between them (each answer still has its own deadline)
            calls = b"".join(
                (
                    tagged_encode(
                        [
                            list(cast("list[JSON]", job.tests[k].get("args") or [])),
                            dict(cast("dict[str, JSON]", job.tests[k].get("kwargs") or {})),
                            job.fresh,
                        ]
                    )
                    + "\n"
                ).encode()
                for k in group
            )
            ex.write(in_w, self._job_line(job) + calls, close=True)
            out = ex.read(out_r, cap=limits.output_bytes, lines=False)
            replies = ex.read(rep_r, cap=_MAX_MESSAGE, lines=True)
            start = _monotonic()
            loaded = ex.pump(start + limits.wall, lambda: bool(replies.messages) or replies.eof or replies.overflow)
            first = replies.messages[0] if replies.messages else None
            runs: list[TestRun] = []
            outcome: tuple[LoadStatus, str] | None = None
            if first is not None:
                outcome = self._load_outcome(first, timed_out=False, exit_status=None)
            if outcome is not None and outcome[0] == "ok":
                for _ in group:
                    want = len(runs) + 2
                    # one wall clock a test, loading included (later tests reload inside theirs)
                    answered = ex.pump(
                        (start if want == 2 and job.fresh else _monotonic()) + limits.wall,
                        lambda w=want: len(replies.messages) >= w or replies.eof or replies.overflow,
                    )
                    if len(replies.messages) >= want:
                        runs.append(_call_result(replies.messages[want - 1]))
                        if runs[-1].status == "timeout":
                            break
                        continue
                    if replies.overflow:
                        runs.append(TestRun("bad_return", error=f"reply larger than {_MAX_MESSAGE} bytes"))
                    elif not answered:
                        runs.append(TestRun("timeout", error=f"wall clock ({limits.wall:g}s) exceeded"))
                    else:
                        runs.append(TestRun("crash"))  # its cause comes from the exit status below
                    break
            need_status = outcome is None or (runs and runs[-1].status == "crash" and not runs[-1].error)
            self.zygote.confirm(spawned)  # a job the wall could not start is the wall's failure, not a verdict
            self.zygote.kill(spawned)
            exit_status = self.zygote.exit_status(spawned) if need_status else None
            if not need_status:
                self.zygote.release(spawned)
            spawned = None
            _drain(out)
            if outcome is None:
                outcome = self._load_outcome(None, timed_out=not loaded, exit_status=exit_status)
            if runs and runs[-1].status == "crash" and not runs[-1].error:
                verdict = _status_verdict(exit_status)
                runs[-1] = TestRun("timeout" if verdict[0] == "timeout" else "crash", error=verdict[1])
            return runs, outcome[0], outcome[1], bytes(out.buf), out.total
        finally:
            if spawned is not None:
                self.zygote.release(spawned)
            ex.close_all()

    def _check(self, job: SandboxJob, k: int) -> tuple[list[TestRun], LoadStatus, str, bytes, int]:
        """An assert-style check: the checker (its own process and uid) calls the candidate over a pipe pair."""
        limits = self._box.limits
        test = job.tests[k]
        ex = _Exchange()
        spawned: list[Spawned] = []
        try:
            candidate, out_r, cin_w, cout_r = self._take_candidate(ex)  # cin: checker -> candidate; cout: back
            spawned.append(candidate)
            kin_r, kin_w = ex.pipe()  # host -> checker
            kout_r, kout_w = ex.pipe()  # checker -> host
            # the candidate's source goes in before the checker gets the pipe: it starts loading while the checker
            # is handed the check, and the checker never relays (or holds) the source
            if not _write_all(cin_w, self._job_line(job), _monotonic() + limits.wall):
                raise WallError("the candidate's process did not take its source")
            self._send_check([kin_r, kout_w, cin_w, cout_r])
            for fd in (kin_r, kout_w, cin_w, cout_r):
                ex.close(fd)
            body = {"check": test["check"], "context": test.get("context") or "", "entry_point": job.entry_point}
            ex.write(kin_w, (tagged_encode(body) + "\n").encode(), close=True)
            out = ex.read(out_r, cap=limits.output_bytes, lines=False)
            verdict = ex.read(kout_r, cap=_MAX_MESSAGE, lines=True)
            loaded = ex.pump(_monotonic() + limits.wall, lambda: bool(verdict.messages) or verdict.eof or verdict.overflow)
            first = verdict.messages[0] if verdict.messages else None
            outcome = self._load_outcome(first, timed_out=False, exit_status=None) if first is not None else None
            finished = True
            if outcome is not None and outcome[0] == "ok":
                finished = ex.pump(
                    _monotonic() + limits.wall, lambda: len(verdict.messages) >= 2 or verdict.eof or verdict.overflow
                )
            final = verdict.messages[1] if len(verdict.messages) >= 2 else None
            if final is None:  # the check did not finish (or its server died): the server is replaced
                self._drop_checker()
            for s in spawned:
                self.zygote.confirm(s)  # a job the wall could not start is the wall's failure, not a verdict
                self.zygote.kill(s)
            need_status = outcome is None or outcome[0] != "ok" or final is None or final.startswith(b'["candidate_gone"')
            exits: list[int | None] = [None, self._checker_exit]
            if need_status:
                exits[0] = self.zygote.exit_status(spawned[0])
            else:
                for s in spawned:
                    self.zygote.release(s)
            spawned.clear()
            _drain(out)
            if outcome is None or (outcome[0] == "crash" and first is not None and first.startswith(b'["loaded","gone"')):
                outcome = self._load_outcome(None, timed_out=not loaded, exit_status=exits[0])
            if outcome[0] != "ok":
                return [], outcome[0], outcome[1], bytes(out.buf), out.total
            if not finished:
                run = TestRun("timeout", error=f"wall clock ({limits.wall:g}s) exceeded")
            elif verdict.overflow:
                run = TestRun("crash", error="the checker's verdict was garbled")
            else:
                run = _check_result(final, exits[0], exits[1])
            return [run], "ok", "", bytes(out.buf), out.total
        finally:
            for s in spawned:
                self.zygote.release(s)
            ex.close_all()

    # ------------------------------------------------------------------------------------------- candidates

    def _spawn_candidate(self) -> _Spare:
        """Ask the zygote for a candidate's process (it returns at once; the clone happens meanwhile)."""
        limits = self._box.limits
        out_r, out_w = os.pipe()
        in_r, in_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            spawned = self.zygote.spawn(
                "candidate", [out_w, in_r, rep_w], uid=self._uid(), limits=limits.rlimits(), disk_bytes=limits.disk_bytes
            )
        except BaseException:
            for fd in (out_r, in_w, rep_r):
                os.close(fd)
            raise
        finally:
            for fd in (out_w, in_r, rep_w):
                os.close(fd)
        return _Spare(spawned, out_r, in_w, rep_r)

    def _take_candidate(self, ex: _Exchange) -> tuple[Spawned, int, int, int]:
        """A candidate's process for this job (the spare when there is one), its pipe ends now the exchange's; and
        the next job's spare asked for at once, so that its clone overlaps this job."""
        spare, self._spare = self._spare, None
        if spare is None:
            spare = self._spawn_candidate()
        ex.fds += [spare.out_r, spare.in_w, spare.rep_r]
        try:
            self._spare = self._spawn_candidate()
        except WallError:
            self._spare = None  # this job then finds the zygote gone too, and says so
        return spare.spawned, spare.out_r, spare.in_w, spare.rep_r

    def drop_spare(self, *, kill: bool = True) -> None:
        """Forget the spare: killed (``kill``) while its zygote lives on, else only its pipes closed (its zygote is
        stopping and takes it along)."""
        spare, self._spare = self._spare, None
        if spare is None:
            return
        spare.close_fds()
        if kill and self.zygote.running:
            self.zygote.release(spare.spawned)

    # ------------------------------------------------------------------------------------------- the checker

    def start_checker(self) -> None:
        """Start this worker's checker server, unless it runs (a check starts it on first use; :meth:`Sandbox.prestart`
        starts it ahead, while the caller is still loading its tasks)."""
        if self._checker is None:
            host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                limits = {k: v for k, v in self._box.limits.rlimits().items() if k != "cpu"}  # it outlives checks
                self._checker = self.zygote.spawn(
                    "checker_server", [null, child.fileno()], uid=self._box.checker_uid(self.slot), limits=limits,
                    disk_bytes=0, namespaces=False,
                )
            finally:
                os.close(null)
                child.close()
            self._checker_sock = host
            self._checker_exit = None

    def _send_check(self, fds: list[int]) -> None:
        """Hand one check's pipe ends to this worker's checker server (started on first use)."""
        self.start_checker()
        assert self._checker_sock is not None
        try:
            socket.send_fds(self._checker_sock, [b"c"], fds)
        except OSError as exc:
            self._drop_checker()
            raise WallError(f"the checker is gone: {exc}") from exc

    def _drop_checker(self) -> None:
        checker, sock = self._checker, self._checker_sock
        self._checker = self._checker_sock = None
        if sock is not None:
            sock.close()
        if checker is not None:
            self.zygote.kill(checker)
            self._checker_exit = self.zygote.exit_status(checker)

    def hang_up(self) -> None:
        """Close this worker's sockets to its checker and its zygote: the zygote kills every job of its own (the
        checker among them) and ends; :meth:`close` then waits for it."""
        sock = self._checker_sock
        self._checker = self._checker_sock = None
        if sock is not None:
            sock.close()
        self.drop_spare(kill=False)  # the zygote kills it with every other job of its own
        self.zygote.hang_up()

    def close(self) -> None:
        self._drop_checker()
        self.drop_spare(kill=False)
        self.zygote.stop()


def _write_all(fd: int, data: bytes, deadline: float) -> bool:
    """Write all of ``data`` to a pipe before ``deadline`` (the pipe is enlarged first, so a source of up to 1 MiB
    goes in at once); False when the reader is gone or too slow."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, 1031, min(max(len(data), 1 << 16), 1 << 20))  # F_SETPIPE_SZ
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        remaining = deadline - _monotonic()
        if remaining <= 0:
            return False
        _, ready, _ = select.select([], [fd], [], remaining)
        if not ready:
            continue
        try:
            view = view[os.write(fd, view[: 1 << 16]) :]
        except BlockingIOError:
            continue
        except OSError:
            return False
    return True


def _drain(out: _Reader) -> None:
    """Read what is left of the output pipe: what the killed job wrote before it ended. Non-blocking: a job
    killed but not yet torn down may still hold the write end."""
    for _ in range(64):
        ready, _, _ = select.select([out.fd], [], [], 0)
        if not ready or out.eof:
            return
        out.feed()


def _status_verdict(status: int | None) -> tuple[LoadStatus, str]:
    if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == 24:  # SIGXCPU
        return "timeout", "CPU limit exceeded (killed by SIGXCPU)"
    return "crash", describe_status(status)


def _call_result(raw: bytes) -> TestRun:
    msg = _decode(raw)
    if msg is None:
        return TestRun("bad_return", error="the reply is not a tagged JSON value (too large, too deep or garbled)")
    kind = msg[0]
    if kind == "value" and len(msg) == 2:
        try:
            return TestRun("value", value=cast("JSON", tagged_to_json(msg[1])))
        except TaggedError as exc:
            return TestRun("bad_return", error=str(exc))
    if kind == "raised" and len(msg) == 3:
        return TestRun("raised", error_type=_text(msg[1])[:100], error=_text(msg[2])[:300])
    if kind == "unplain" and len(msg) == 2:
        return TestRun("bad_return", error=_text(msg[1])[:300])
    if kind == "timeout":
        return TestRun("timeout", error="CPU time limit exceeded")
    return TestRun("bad_return", error="the reply is not one the protocol knows")


def _check_result(raw: bytes | None, candidate_exit: int | None, checker_exit: int | None) -> TestRun:
    msg = _decode(raw) if raw is not None else None
    if msg is None:
        # the checker ended without a verdict: what the candidate handed it (a value too large for the check's
        # memory, say) ended it; the candidate's own end says more when it ended first
        verdict = _status_verdict(checker_exit)
        return TestRun("crash", error=f"the check could not finish: {verdict[1]}")
    kind = msg[0]
    if kind == "done":
        return TestRun("done")
    if kind == "raised" and len(msg) == 3:
        return TestRun("raised", error_type=_text(msg[1])[:100], error=_text(msg[2])[:300])
    if kind == "check_error" and len(msg) == 3:
        return TestRun("raised", error_type=_text(msg[1])[:100], error=f"the check program failed: {_text(msg[2])[:300]}")
    if kind == "candidate_timeout":
        return TestRun("timeout", error="CPU time limit exceeded")
    if kind == "unplain" and len(msg) == 2:
        return TestRun("bad_return", error=_text(msg[1])[:300])
    if kind == "candidate_gone":
        status, detail = _status_verdict(candidate_exit)
        return TestRun("timeout" if status == "timeout" else "crash", error=detail)
    return TestRun("crash", error="the checker answered something unknown")


def _infra(n: int, reason: str) -> SandboxRun:
    return SandboxRun(
        tests=tuple(TestRun("not_run") for _ in range(n)),
        load_status="infra",
        load_error=reason,
        infra_error=reason,
    )


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
        # one per CPU by default: measured on HumanEval (164 checks), 2 workers on 2 CPUs beat 4 and 6
        self.workers = max(1, min(8, workers or (os.cpu_count() or 1)))
        self._own_block = uid_base is None
        self._uid_base = uid_base if uid_base is not None else uid_block()
        self._uid_next = 0
        self._uid_lock = threading.Lock()
        self._uids_taken: set[int] = set()
        self._degraded: set[str] = set()
        self._workers = [_Worker(self, slot) for slot in range(self.workers)]
        self._free: queue.Queue[_Worker] = queue.Queue()
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
