"""One worker of the sandbox: a zygote, its checker server, and the running of one job's tests in jailed processes
(a call group in one candidate process, each assert-style check with the checker), with the next job's process
started ahead (:class:`Spare`)."""

from __future__ import annotations

import contextlib
import os
import socket
from functools import cache
from typing import Protocol, cast

import attrs

from evalkit.wall._codec import tagged_encode
from evalkit.wall._evidence import evidence_codes
from evalkit.wall._exchange import (
    LOAD_ARITY,
    Exchange,
    call_result,
    check_result,
    decode_reply,
    drain,
    exit_evidence,
    infra_run,
    monotonic,
    status_verdict,
    text_of,
    write_all,
)
from evalkit.wall._jobs import JSON, MAX_MESSAGE, LoadStatus, SandboxJob, SandboxLimits, SandboxRun, TestRun
from evalkit.wall._policy import Spawned, WallError, WallPolicy
from evalkit.wall._program import sandbox_payload_source
from evalkit.wall._zygote import Zygote, adopt_early

__all__ = ["Spare", "Worker"]


class _Box(Protocol):
    """What a worker needs of its sandbox (:class:`evalkit.wall._sandbox.Sandbox`)."""

    @property
    def limits(self) -> SandboxLimits: ...

    @property
    def without(self) -> frozenset[str]: ...

    def next_uid(self) -> int: ...

    def free_uid(self, uid: int) -> None: ...

    def checker_uid(self, slot: int) -> int: ...

    def note_degraded(self, layer: str) -> None: ...


@cache
def _payload_source() -> str:
    return sandbox_payload_source()


@attrs.define
class Spare:
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


class Worker:
    """One zygote and the uids it hands out; used by one thread at a time.

    While a job runs, the next job's candidate process is already being cloned and jailed (:class:`Spare`): the
    zygote's clone and the child's setup overlap the running job instead of starting after it."""

    def __init__(self, sandbox: _Box, slot: int) -> None:
        self._box = sandbox
        self.slot = slot
        early = adopt_early(_payload_source()) if not sandbox.without else None
        self.zygote = early or self._zygote(namespaces="namespaces" not in sandbox.without)
        self.zygote.on_uid_free = sandbox.free_uid  # for an adopted one; _zygote sets it on those it makes
        self.checked = False
        self._checker: Spawned | None = None
        self._checker_sock: socket.socket | None = None
        self._checker_exit: int | None = None
        self._spare: Spare | None = None
        self.load_evidence: tuple[str, ...] = ()  # of the last load outcome read (see _load_outcome)
        # set by hang_up and close: the worker never starts a zygote again. A thread that was still inside a job
        # when the sandbox closed (a grading thread the caller abandoned) must not start a new jail whose uids are
        # given back with the sandbox's block while its processes live on.
        self.ended = False

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
        if self.ended:
            raise WallError("the sandbox is closed: no new jail is started")
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
            return infra_run(n, f"sandbox infrastructure error: {exc}")
        results: list[TestRun | None] = [None] * n
        output = bytearray()
        total_output = 0
        load: tuple[LoadStatus, str] | None = None
        load_evidence: tuple[str, ...] = ()
        i = 0
        while i < n:
            test = job.tests[i]
            group = [i]  # a check alone; consecutive call tests share a process (each on a fresh module)
            while "check" not in test and group[-1] + 1 < n and "check" not in job.tests[group[-1] + 1]:
                group.append(group[-1] + 1)
            try:
                runs, status, detail, out, out_total = self._attempt(job, group)
            except WallError as exc:
                return infra_run(n, f"sandbox infrastructure error: {exc}")
            output += out[: max(0, limits.output_bytes - len(output))]
            total_output += out_total
            if status != "ok":
                if i == 0 or load is None:
                    load = (status, detail)
                    load_evidence = self.load_evidence
                    break
                # loading failed now, after it worked for an earlier test: that test's verdict
                results[i] = TestRun(
                    "crash" if status == "crash" else "raised",
                    error=f"while loading: {detail}",
                    evidence=self.load_evidence,
                )
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
            load_evidence=load_evidence,
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
        """What loading came to, from the candidate's first message (or its absence); its evidence codes are left in
        :attr:`load_evidence`."""
        self.load_evidence = ()
        if line is not None:
            msg = decode_reply(line)
            if msg is None or msg[0] != "loaded" or len(msg) < 2:
                return "crash", "the candidate's process wrote garbage where its load status belongs"
            if len(msg) == LOAD_ARITY.get(msg[1] if isinstance(msg[1], str) else "", -1) + 1:
                self.load_evidence = evidence_codes(msg[-1])
                msg = msg[:-1]
            kind = msg[1]
            if kind == "ok":
                return "ok", ""
            if kind == "timeout":
                return "timeout", f"CPU limit ({self._box.limits.cpu_seconds:g}s) exceeded while loading"
            if kind == "missing":
                return "missing", text_of(msg[2])[:300] if len(msg) > 2 else "missing entry point"
            if kind == "raised" and len(msg) >= 4:
                return "raised", f"{text_of(msg[2])[:100]}: {text_of(msg[3])[:300]}"
            if kind != "gone":
                return "crash", "the candidate's process wrote an unknown load status"
        if timed_out:
            return "timeout", f"wall clock ({self._box.limits.wall:g}s) exceeded while loading"
        self.load_evidence = exit_evidence(exit_status)
        return status_verdict(exit_status)

    def _calls(self, job: SandboxJob, group: list[int]) -> tuple[list[TestRun], LoadStatus, str, bytes, int]:
        """One candidate process answering the calls of ``group`` (one test when the job is fresh)."""
        limits = self._box.limits
        ex = Exchange()
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
            replies = ex.read(rep_r, cap=MAX_MESSAGE, lines=True)
            start = monotonic()
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
                        (start if want == 2 and job.fresh else monotonic()) + limits.wall,
                        lambda w=want: len(replies.messages) >= w or replies.eof or replies.overflow,
                    )
                    if len(replies.messages) >= want:
                        runs.append(call_result(replies.messages[want - 1]))
                        if runs[-1].status == "timeout":
                            break
                        continue
                    if replies.overflow:
                        runs.append(TestRun("bad_return", error=f"reply larger than {MAX_MESSAGE} bytes"))
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
            drain(out)
            if outcome is None:
                outcome = self._load_outcome(None, timed_out=not loaded, exit_status=exit_status)
            if runs and runs[-1].status == "crash" and not runs[-1].error:
                verdict = status_verdict(exit_status)
                runs[-1] = TestRun(
                    "timeout" if verdict[0] == "timeout" else "crash", error=verdict[1], evidence=exit_evidence(exit_status)
                )
            return runs, outcome[0], outcome[1], bytes(out.buf), out.total
        finally:
            if spawned is not None:
                self.zygote.release(spawned)
            ex.close_all()

    def _check(self, job: SandboxJob, k: int) -> tuple[list[TestRun], LoadStatus, str, bytes, int]:
        """An assert-style check: the checker (its own process and uid) calls the candidate over a pipe pair."""
        limits = self._box.limits
        test = job.tests[k]
        ex = Exchange()
        spawned: list[Spawned] = []
        try:
            candidate, out_r, cin_w, cout_r = self._take_candidate(ex)  # cin: checker -> candidate; cout: back
            spawned.append(candidate)
            kin_r, kin_w = ex.pipe()  # host -> checker
            kout_r, kout_w = ex.pipe()  # checker -> host
            # the candidate's source goes in before the checker gets the pipe: it starts loading while the checker
            # is handed the check, and the checker never relays (or holds) the source
            if not write_all(cin_w, self._job_line(job), monotonic() + limits.wall):
                raise WallError("the candidate's process did not take its source")
            self._send_check([kin_r, kout_w, cin_w, cout_r])
            for fd in (kin_r, kout_w, cin_w, cout_r):
                ex.close(fd)
            body = {"check": test["check"], "context": test.get("context") or "", "entry_point": job.entry_point}
            ex.write(kin_w, (tagged_encode(body) + "\n").encode(), close=True)
            out = ex.read(out_r, cap=limits.output_bytes, lines=False)
            verdict = ex.read(kout_r, cap=MAX_MESSAGE, lines=True)
            loaded = ex.pump(monotonic() + limits.wall, lambda: bool(verdict.messages) or verdict.eof or verdict.overflow)
            first = verdict.messages[0] if verdict.messages else None
            outcome = self._load_outcome(first, timed_out=False, exit_status=None) if first is not None else None
            finished = True
            if outcome is not None and outcome[0] == "ok":
                finished = ex.pump(
                    monotonic() + limits.wall, lambda: len(verdict.messages) >= 2 or verdict.eof or verdict.overflow
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
            drain(out)
            if outcome is None or (outcome[0] == "crash" and first is not None and first.startswith(b'["loaded","gone"')):
                outcome = self._load_outcome(None, timed_out=not loaded, exit_status=exits[0])
            if outcome[0] != "ok":
                return [], outcome[0], outcome[1], bytes(out.buf), out.total
            if not finished:
                run = TestRun("timeout", error=f"wall clock ({limits.wall:g}s) exceeded")
            elif verdict.overflow:
                run = TestRun("crash", error="the checker's verdict was garbled")
            else:
                run = check_result(final, exits[0], exits[1])
            return [run], "ok", "", bytes(out.buf), out.total
        finally:
            for s in spawned:
                self.zygote.release(s)
            ex.close_all()

    # ------------------------------------------------------------------------------------------- candidates

    def _spawn_candidate(self) -> Spare:
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
        return Spare(spawned, out_r, in_w, rep_r)

    def _take_candidate(self, ex: Exchange) -> tuple[Spawned, int, int, int]:
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
        if self.ended:
            raise WallError("the sandbox is closed: no new checker is started")
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
        self.ended = True
        sock = self._checker_sock
        self._checker = self._checker_sock = None
        if sock is not None:
            sock.close()
        self.drop_spare(kill=False)  # the zygote kills it with every other job of its own
        self.zygote.hang_up()

    def close(self) -> None:
        self.ended = True
        self._drop_checker()
        self.drop_spare(kill=False)
        self.zygote.stop()
