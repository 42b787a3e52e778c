"""The host's side of one test's pipes: a bounded reader per pipe, the non-blocking exchange that moves bytes until
the test is answered or its deadline passes, and the reading of the job's replies into :class:`TestRun` values
(every reply is decoded with the codec's size and depth caps; anything else is that test's verdict)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import time
from collections.abc import Callable, Mapping
from typing import cast

import attrs

from evalkit.wall._codec import TaggedError, tagged_decode, tagged_to_json
from evalkit.wall._evidence import evidence_codes
from evalkit.wall._jobs import JSON, MAX_MESSAGE, LoadStatus, SandboxRun, TestRun
from evalkit.wall._policy import describe_status

__all__ = [
    "LOAD_ARITY",
    "Exchange",
    "Reader",
    "call_result",
    "check_result",
    "decode_reply",
    "drain",
    "exit_evidence",
    "infra_run",
    "monotonic",
    "split_evidence",
    "status_verdict",
    "text_of",
    "write_all",
]


def monotonic() -> float:
    return time.monotonic()


class Reader:
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


class Exchange:
    """The pipes of one test: what to write (non-blocking, each closed when written) and what to read."""

    def __init__(self) -> None:
        self.readers: dict[int, Reader] = {}
        self.writes: dict[int, bytearray] = {}
        self.closing: set[int] = set()
        self.fds: list[int] = []

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.fds += [r, w]
        return r, w

    def read(self, fd: int, *, cap: int, lines: bool) -> Reader:
        os.set_blocking(fd, False)
        reader = Reader(fd, cap=cap, lines=lines)
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
            remaining = deadline - monotonic()
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


def decode_reply(raw: bytes) -> list[object] | None:
    try:
        value = tagged_decode(raw, max_bytes=MAX_MESSAGE)
    except TaggedError:
        return None
    return cast("list[object]", value) if type(value) is list and value else None


def text_of(value: object) -> str:
    return value if isinstance(value, str) else ""


def write_all(fd: int, data: bytes, deadline: float) -> bool:
    """Write all of ``data`` to a pipe before ``deadline`` (the pipe is enlarged first, so a source of up to 1 MiB
    goes in at once); False when the reader is gone or too slow."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, 1031, min(max(len(data), 1 << 16), 1 << 20))  # F_SETPIPE_SZ
    os.set_blocking(fd, False)
    view = memoryview(data)
    while view:
        remaining = deadline - monotonic()
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


def drain(out: Reader) -> None:
    """Read what is left of the output pipe: what the killed job wrote before it ended. Non-blocking: a job
    killed but not yet torn down may still hold the write end."""
    for _ in range(64):
        ready, _, _ = select.select([out.fd], [], [], 0)
        if not ready or out.eof:
            return
        out.feed()


def status_verdict(status: int | None) -> tuple[LoadStatus, str]:
    if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == 24:  # SIGXCPU
        return "timeout", "CPU limit exceeded (killed by SIGXCPU)"
    return "crash", describe_status(status)


def exit_evidence(status: int | None) -> tuple[str, ...]:
    """``("exit",)`` when the kernel says the job's process ended itself (an exit code, not a signal)."""
    return ("exit",) if status is not None and os.WIFEXITED(status) else ()


def split_evidence(msg: list[object], arity: Mapping[str, int]) -> tuple[list[object], tuple[str, ...]]:
    """A reply without its evidence codes (its last element, when it has one more than ``arity`` says), and the
    known codes in it (see :mod:`evalkit.wall._evidence`)."""
    base = arity.get(msg[0], -1) if isinstance(msg[0], str) else -1
    if len(msg) == base + 1:
        return msg[:-1], evidence_codes(msg[-1])
    return msg, ()


_CALL_ARITY = {"value": 2, "raised": 3, "unplain": 2, "timeout": 1}
_CHECK_ARITY = {"done": 1, "raised": 3, "check_error": 3, "candidate_timeout": 1, "unplain": 2, "candidate_gone": 1}
LOAD_ARITY = {"ok": 2, "timeout": 2, "missing": 3, "raised": 4, "gone": 2}


def call_result(raw: bytes) -> TestRun:
    msg = decode_reply(raw)
    if msg is None:
        return TestRun("bad_return", error="the reply is not a tagged JSON value (too large, too deep or garbled)")
    msg, evidence = split_evidence(msg, _CALL_ARITY)
    return attrs.evolve(_call_run(msg), evidence=evidence)


def _call_run(msg: list[object]) -> TestRun:
    kind = msg[0]
    if kind == "value" and len(msg) == 2:
        try:
            return TestRun("value", value=cast("JSON", tagged_to_json(msg[1])))
        except TaggedError as exc:
            return TestRun("bad_return", error=str(exc))
    if kind == "raised" and len(msg) == 3:
        return TestRun("raised", error_type=text_of(msg[1])[:100], error=text_of(msg[2])[:300])
    if kind == "unplain" and len(msg) == 2:
        return TestRun("bad_return", error=text_of(msg[1])[:300])
    if kind == "timeout":
        return TestRun("timeout", error="CPU time limit exceeded")
    return TestRun("bad_return", error="the reply is not one the protocol knows")


def check_result(raw: bytes | None, candidate_exit: int | None, checker_exit: int | None) -> TestRun:
    msg = decode_reply(raw) if raw is not None else None
    if msg is None:
        # the checker ended without a verdict: what the candidate handed it (a value too large for the check's
        # memory, say) ended it; the candidate's own end says more when it ended first
        verdict = status_verdict(checker_exit)
        return TestRun("crash", error=f"the check could not finish: {verdict[1]}")
    msg, evidence = split_evidence(msg, _CHECK_ARITY)
    run = _check_run(msg, candidate_exit)
    if msg[0] == "candidate_gone":
        evidence = tuple(sorted({*evidence, *exit_evidence(candidate_exit)}))
    return attrs.evolve(run, evidence=evidence)


def _check_run(msg: list[object], candidate_exit: int | None) -> TestRun:
    kind = msg[0]
    if kind == "done":
        return TestRun("done")
    if kind == "raised" and len(msg) == 3:
        return TestRun("raised", error_type=text_of(msg[1])[:100], error=text_of(msg[2])[:300])
    if kind == "check_error" and len(msg) == 3:
        return TestRun("raised", error_type=text_of(msg[1])[:100], error=f"the check program failed: {text_of(msg[2])[:300]}")
    if kind == "candidate_timeout":
        return TestRun("timeout", error="CPU time limit exceeded")
    if kind == "unplain" and len(msg) == 2:
        return TestRun("bad_return", error=text_of(msg[1])[:300])
    if kind == "candidate_gone":
        status, detail = status_verdict(candidate_exit)
        return TestRun("timeout" if status == "timeout" else "crash", error=detail)
    return TestRun("crash", error="the checker answered something unknown")


def infra_run(n: int, reason: str) -> SandboxRun:
    return SandboxRun(
        tests=tuple(TestRun("not_run") for _ in range(n)),
        load_status="infra",
        load_error=reason,
        infra_error=reason,
    )
