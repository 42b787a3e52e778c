"""The sandbox's payloads: what runs inside the wall for one test. Standard library only.

This file is not imported by evalkit: :mod:`evalkit.wall._sandbox` appends its source to the wall's zygote (after the
tagged-JSON codec of :mod:`evalkit.wall._codec`), which calls ``PAYLOADS[name](settings, args)`` in a freshly jailed
process (see :mod:`evalkit.wall._zygote_child`). Two payloads:

``candidate``
    fds: 3 in (the job, then calls), 4 out (the load status, then replies). Reads the candidate's source and
    entry point, loads the module, reports ``["loaded", ...]``, then answers each call
    (``[args, kwargs]`` in tagged JSON) with ``["value", v]``, ``["raised", type, message]``, ``["unplain",
    why]`` or ``["timeout"]`` until end of file. It holds nothing secret: its inputs are the arguments of its
    calls, its outputs are data. Whatever it writes on its pipes can only claim the values it returned.

``checker``
    fds: 3 the job from the host, 4 to the host, 5 to the candidate, 6 from the candidate. Hands the candidate
    its source, relays its load status to the host (``["loaded", ...]``), then runs an
    assert-style check program (with the task's context, e.g. HumanEval's prompt helpers) in a process of its own,
    under a uid of its own, and hands ``check`` a proxy: each call goes to the candidate as data and the reply
    comes back as a value of built-in types (or the candidate's exception, re-raised as the same built-in
    exception type). The candidate never sees the check, its expected values or this process.
"""

# One piece: this is one program, not a module: its source is appended whole to the zygote's (after the codec), runs
# in the jail with the standard library only and cannot import a sibling; its payloads share one set of helpers.
# pyright: basic

from __future__ import annotations

# Modules candidates often use; imported once in the zygote, so every child starts warm. Not hashlib (OpenSSL)
# or fractions (decimal): few candidates import them, and each module here is memory every job's clone copies
# (together 0.85 MB of the zygote's 10 MB and 22 of its 148 mappings) and time every zygote's start pays.
import _socket  # the zygote's own control socket module (socket.py is not loaded: see _recv_fds)
import bisect  # noqa: F401
import builtins
import collections  # noqa: F401
import functools  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import math  # noqa: F401
import os
import re  # noqa: F401
import signal
import string  # noqa: F401
import sys
import typing


def _import_without_fork_hook(name: str) -> object:
    """Import ``name`` with ``os.register_at_fork`` made a no-op for the moment: ``random`` registers a reseed
    from ``os.urandom`` that would run in every cloned job (some 40 page faults and 0.2 ms a job), and left to it a
    candidate's random numbers would differ from run to run. Each candidate's process seeds it with its job's seed
    instead (``SandboxJob.seed``, an int: cheap); the checker server reseeds itself from the system's entropy
    (``_checker_server_main``)."""
    register = os.register_at_fork
    os.register_at_fork = lambda **_: None  # type: ignore[assignment]
    try:
        return __import__(name)
    finally:
        os.register_at_fork = register


random = _import_without_fork_hook("random")  # each candidate's process seeds it with its job's seed

if typing.TYPE_CHECKING:  # at run time the codec's and the zygote's sources come before this file's (evalkit.wall._zygote)

    def _child_signal(signum: int, handler: object) -> None: ...

    def _recv_fds(sock: _socket.socket, size: int, most: int) -> tuple[bytes, list[int]]: ...

    def tagged_encode(value: object, *, outer: int = ...) -> str: ...

    def tagged_decode(text: str | bytes, *, max_bytes: int = ...) -> typing.Any: ...

_MAX_MESSAGE = 1 << 20
_MAX_JOB = 4 << 20
_ERROR_CHARS = 300


class _Timeout(BaseException):
    pass


class _LineReader:
    """Reads newline-terminated messages from an fd, refusing any longer than ``cap`` bytes."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap, self.buf = fd, cap, b""

    def line(self) -> bytes | None:
        while b"\n" not in self.buf:
            if len(self.buf) > self.cap:
                raise ValueError("message too long")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _error_text(exc: BaseException) -> tuple[str, str]:
    try:
        name = type(exc).__name__
        name = name if type(name) is str else "?"
    except BaseException:
        name = "?"
    try:
        msg = str(exc)
        msg = msg[:_ERROR_CHARS] if type(msg) is str else ""
    except BaseException:
        msg = "<unprintable>"
    return name, msg


def _arm(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.05)


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_PROF, 0, 0)


def _on_prof(_signum: int, _frame: object) -> None:
    raise _Timeout


# What the audit hook refuses (built once, in the zygote, rather than in every job)
_BLOCKED_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "subprocess.Popen",
        "os.kill",
        "os.killpg",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.sendto",
        "sys._current_frames",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "object.__getattr__",
        "sys.addaudithook",
        "sys.settrace",
        "sys.setprofile",
        "resource.setrlimit",
        "resource.prlimit",
        "os.setuid",
        "os.setgid",
        "os.chroot",
        "pty.spawn",
        "signal.pthread_kill",
        "os.unshare",
    }
)
_PATH_EVENTS = frozenset(
    {
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.utime",
        "os.chflags",
        "os.lchflags",
        "os.mkfifo",
        "os.mknod",
        "shutil.rmtree",
        "shutil.move",
        "shutil.copyfile",
        "shutil.copytree",
        "os.setxattr",
        "os.removexattr",
    }
)


# The evidence codes (evalkit.wall._evidence) of what the tripwire refused, or what a test ended with, during the
# current load or call: sent at the end of its reply, reset before the next. Codes only, never text.
_SEEN: set[str] = set()
_EVENT_CODES = {
    **dict.fromkeys(("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"), "refused:process"),
    **dict.fromkeys(("subprocess.Popen", "pty.spawn"), "refused:process"),
    **dict.fromkeys(("os.kill", "os.killpg", "signal.pthread_kill"), "refused:kill"),
    **dict.fromkeys(("sys._current_frames", "sys.settrace", "sys.setprofile", "object.__getattr__"), "refused:frame"),
    **dict.fromkeys(("gc.get_objects", "gc.get_referrers", "gc.get_referents"), "refused:frame"),
}
_EXITS = (SystemExit, KeyboardInterrupt)


def _evidence_of(exc: BaseException) -> None:
    """Note what an exception that ended a load or a call says of the attempt (its type, checked by the harness)."""
    try:
        if isinstance(exc, _EXITS):
            _SEEN.add("exit")
        elif isinstance(exc, OSError):
            name = exc.filename
            if type(name) is str and name.startswith("/"):
                _SEEN.add("absolute_path")
    except BaseException:  # noqa: S110 - a candidate's exception whose attributes raise says nothing more
        pass


def _seen() -> str:
    """The codes noted since the last reply, as the reply's last element, and a fresh start for the next."""
    codes = sorted(c for c in _SEEN if type(c) is str)
    _SEEN.clear()
    return tagged_encode(codes)


def _install_audit_hook(workdir: str) -> None:
    """Install the tripwire (:func:`_audit_hook`) for a job whose directory is ``workdir``."""
    sys.addaudithook(_audit_hook(workdir))


def _audit_hook(workdir: str) -> typing.Callable[[str, tuple[object, ...]], None]:
    """A tripwire, not a wall: refuse, with a message that names it, what a candidate has no business doing.

    The wall (namespaces, read-only root, uid, seccomp) is what stops these; PEP 578 says audit hooks are no
    security boundary, and this one is not used as one. It is kept because each refusal adds an evidence code
    (``refused:frame``, ... see evalkit.wall._evidence) to the test's reply, which the reward-hacking checks read;
    its words in the exception are for people, never read by the host."""
    realpath = os.path.realpath
    join = os.path.join
    getcwd = os.getcwd
    prefix = workdir.rstrip("/") + "/"
    blocked, path_events = _BLOCKED_EVENTS, _PATH_EVENTS
    note, codes = _SEEN.add, _EVENT_CODES

    def inside(p: object) -> bool:
        if isinstance(p, bytes):
            p = p.decode("utf-8", "surrogateescape")
        if not isinstance(p, str):
            return True  # file descriptors: already opened, inside the limits
        full = realpath(join(getcwd(), p))
        return full.startswith(prefix) or full == prefix[:-1]

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "open":
            path, mode, flags = ((*args, None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int)
                and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
            )
            if isinstance(path, str | bytes):
                sp = path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path
                if realpath(join(getcwd(), sp)).startswith(("/proc", "/sys/kernel")):
                    note("refused:read")
                    raise PermissionError(f"sandbox: reading {sp!r} is not allowed")
                if writing and not inside(path):
                    note("refused:write")
                    raise PermissionError(
                        f"sandbox: writing {sp!r} outside the sandbox directory is not allowed"
                    )
            return
        if event == "sys._getframe":
            note("refused:frame")
            raise ValueError("sandbox: frame access is not allowed")
        if event in blocked or event.startswith("ctypes."):
            note(codes.get(event, "refused:network" if event.startswith("socket.") else "refused:patch"))
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in path_events and not all(inside(a) for a in args if isinstance(a, str | bytes)):
            note("refused:write")
            raise PermissionError(f"sandbox: {event} outside the sandbox directory is not allowed")

    return hook


def _open_streams() -> tuple[typing.TextIO, typing.TextIO]:
    """Text streams over fds 1 and 2 (line-buffered UTF-8, undecodable text replaced): a job's output pipe."""
    return (
        open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False),
        open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False),
    )


# The candidate's sys.stdout and sys.stderr, made once by the zygote (see _make_streams): opening them in each job
# cost it some 40 page faults and a third of a millisecond.
_STREAMS: list[typing.TextIO] = []


def _make_streams() -> None:
    """Make the candidate's streams in the zygote, over a pipe put at fds 1 and 2 for the moment: a stream
    remembers what it found when it was opened (a pipe: not seekable, no position), so these are the streams a
    job would open over its output pipe, which is what fds 1 and 2 are in the job. The zygote never writes
    through them."""
    saved = os.dup(1), os.dup(2)
    r, w = os.pipe()
    try:
        os.dup2(w, 1)
        os.dup2(w, 2)
        _STREAMS[:] = _open_streams()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, r, w):
            os.close(fd)


def _candidate_main(_settings: dict[str, object], _args: dict[str, object]) -> None:
    encode, decode = tagged_encode, tagged_decode
    write, exit_now = _write, os._exit
    reader = _LineReader(3, _MAX_JOB)
    raw = reader.line()
    if raw is None:
        exit_now(0)
    job = decode(raw, max_bytes=_MAX_JOB)
    source, entry, cpu = job["source"], job["entry_point"], float(job["cpu_seconds"])
    random.seed(job.get("seed", 0))  # type: ignore[attr-defined]  # the job's numbers, the same every run
    sys.stdout, sys.stderr = _STREAMS or _open_streams()
    _child_signal(signal.SIGPROF, _on_prof)
    ns: dict[str, object] = {"__name__": "__candidate__", "__builtins__": builtins}
    status: list[object]
    _install_audit_hook(os.getcwd())  # noqa: PTH109 - the module keeps to os-level calls
    code = None
    left = cpu  # of the first test's CPU budget, once loading took its share
    try:
        _arm(cpu)
        try:
            code = compile(source, "<candidate>", "exec")
            exec(code, ns)  # noqa: S102
        finally:
            left = signal.getitimer(signal.ITIMER_PROF)[0]
            _disarm()
        func = ns.get(entry)
        status = ["loaded", "ok"] if callable(func) else ["loaded", "missing", f"the candidate does not define a callable {entry!r}"]
    except _Timeout:
        status = ["loaded", "timeout"]
    except BaseException as exc:
        _evidence_of(exc)
        status = ["loaded", "raised", *_error_text(exc)]
    seen = _seen()
    write(4, (encode(status)[:-1] + "," + seen + "]\n").encode())
    if status[1] != "ok":
        exit_now(0)
    reader.cap = _MAX_MESSAGE
    used = False
    while True:
        raw = reader.line()
        if raw is None:
            exit_now(0)
        args, kwargs, reload = decode(raw)
        _SEEN.clear()
        try:
            # one budget a test, loading included: a later test reloads inside its own budget, so the first one
            # has what loading left of its own (else the same work passes first and times out after)
            _arm(cpu if used or not reload else max(left, 0.001))
            try:
                if reload and used and code is not None:
                    # a freshly loaded module for this test: new globals, new functions, new default arguments
                    ns = {"__name__": "__candidate__", "__builtins__": builtins}
                    exec(code, ns)  # noqa: S102
                    func = ns.get(entry)
                used = True
                result = func(*args, **kwargs)  # type: ignore[misc]
            finally:
                _disarm()
            try:
                reply = '["value",' + encode(result, outer=1) + "]"  # inside the reply's brackets
            except BaseException as exc:
                why = _error_text(exc)[1]
                if why.endswith("(only built-in data types)"):  # the codec's own refusal of an object
                    _SEEN.add("not_data")
                reply = encode(["unplain", why])
        except _Timeout:
            reply = '["timeout"]'
        except BaseException as exc:
            _evidence_of(exc)
            reply = encode(["raised", *_error_text(exc)])
        if len(reply) > _MAX_MESSAGE:
            reply = encode(["unplain", f"return value larger than {_MAX_MESSAGE} bytes"])
        reply = reply[:-1] + "," + _seen() + "]"  # the evidence codes, last
        for stream in (sys.stdout, sys.stderr):
            try:  # noqa: SIM105
                stream.flush()
            except BaseException:  # noqa: S110
                pass
        write(4, (reply + "\n").encode())


class CandidateGone(BaseException):
    """The candidate's process ended (or garbled its replies) during a call: the check cannot go on."""


class CandidateTimeout(BaseException):
    """The candidate ran out of CPU time in a call."""


class CandidateReturnError(BaseException):
    """The candidate returned something that is not data (a class of its own, a function, ...)."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a built-in type; its name and message are kept."""


# Exceptions that change a check's control flow instead of failing it (a StopIteration raised through ``map`` ends
# a loop early and skips the asserts after it): never re-raised as themselves.
_FLOW = ("StopIteration", "StopAsyncIteration")


def _exception_for(name: str, message: str) -> BaseException:
    cls = getattr(builtins, name, None) if name.isidentifier() and name not in _FLOW else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except BaseException:  # noqa: S110
            pass
    return CandidateError(f"{name}: {message}")


# How many elements each reply of the candidate has before its evidence codes.
_ARITY = {"value": 2, "raised": 3, "unplain": 2, "timeout": 1}


def _run_check(job_fd: int, host_fd: int, to_candidate: int, from_candidate: int) -> None:
    """One check: the job from ``job_fd``, the verdict to ``host_fd``, the candidate on the other two."""
    encode, decode = tagged_encode, tagged_decode
    job = decode(_LineReader(job_fd, _MAX_JOB).line() or b"null", max_bytes=_MAX_JOB)
    replies = _LineReader(from_candidate, _MAX_MESSAGE)
    try:  # the host wrote the candidate its source; its first line is how loading went
        raw = replies.line()
    except (OSError, ValueError):
        raw = None
    _write(host_fd, (raw + b"\n") if raw is not None else b'["loaded","gone"]\n')  # the host judges the load status
    try:
        loaded = raw is not None and decode(raw)[1] == "ok"
    except Exception:
        loaded = False
    if not loaded:
        return
    entry = job["entry_point"]
    seen: set[str] = set()  # the evidence codes of every call relayed, for the verdict

    def candidate(*args: object, **kwargs: object) -> object:
        try:
            line = encode([list(args), kwargs, False])
        except Exception as exc:
            raise TypeError(f"the check passed an argument that cannot reach the candidate: {exc}") from None
        try:
            _write(to_candidate, (line + "\n").encode())
            raw = replies.line()
        except (OSError, ValueError):
            raise CandidateGone from None
        if raw is None:
            raise CandidateGone
        try:
            reply = decode(raw)
        except Exception as exc:  # too deep, members that collide in their hash, garbled: not a value
            raise CandidateReturnError(
                f"the reply is not a tagged JSON value ({_error_text(exc)[1]})"
            ) from None
        if type(reply) is not list or not reply:
            raise CandidateGone
        kind = reply[0]
        if len(reply) == _ARITY.get(kind, -1) + 1:  # the evidence codes, last
            codes = reply.pop()
            if type(codes) is list:
                seen.update(c for c in codes[:64] if type(c) is str and len(c) < 64)
        if kind == "value" and len(reply) == 2:
            return reply[1]
        if kind == "raised" and len(reply) == 3:
            raise _exception_for(str(reply[1]), str(reply[2]))
        if kind == "timeout":
            raise CandidateTimeout
        if kind == "unplain":
            raise CandidateReturnError(str(reply[1]) if len(reply) > 1 else "")
        raise CandidateGone

    ns: dict[str, object] = {"__name__": "__check__"}
    verdict: list[object]
    try:
        stage = "context"
        exec(compile(str(job.get("context") or ""), "<context>", "exec"), ns)  # noqa: S102
        # the check may call the entry point by name (HumanEval/033 does): that name is the candidate too
        ns[str(entry)] = candidate
        stage = "check"
        exec(compile(str(job["check"]), "<check>", "exec"), ns)  # noqa: S102
        stage = "run"
        ns["check"](candidate)  # type: ignore[operator]
        verdict = ["done"]
    except CandidateGone:
        verdict = ["candidate_gone"]
    except CandidateTimeout:
        verdict = ["candidate_timeout"]
    except CandidateReturnError as exc:
        verdict = ["unplain", _error_text(exc)[1]]
    except BaseException as exc:
        verdict = ["raised" if stage == "run" else "check_error", *_error_text(exc)]
    verdict.append(sorted(seen))
    _write(host_fd, (encode(verdict) + "\n").encode())


def _checker_main(_settings: dict[str, object], _args: dict[str, object]) -> None:
    _run_check(3, 4, 5, 6)
    os._exit(0)


def _checker_server_main(_settings: dict[str, object], _args: dict[str, object]) -> None:
    """A checker that stays: each check's four pipe ends arrive on the socket at fd 3. It runs trusted code only
    (the task's check and context), each check in a namespace of its own; the host replaces it after any check
    that did not finish in time, and it ends at end of file on its socket."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a host that gave up on a check closed its end: not fatal
    random.seed()  # type: ignore[attr-defined]  # checks draw from a state no candidate's job seed can give
    sock = _socket.socket(fileno=3)
    while True:
        try:
            data, fds = _recv_fds(sock, 16, 4)
        except OSError:
            os._exit(0)
        if not data or len(fds) != 4:
            os._exit(0)
        try:
            _run_check(*fds)
        except OSError:
            pass
        finally:
            for fd in fds:
                try:  # noqa: SIM105
                    os.close(fd)
                except OSError:
                    pass


# Compiled and run once by the zygote before it freezes its heap: a child's first compile costs about twice as
# much in an interpreter that has never compiled anything. This snippet is ours, never a candidate's.
_WARM_UP = """
from typing import Dict, List, Optional, Tuple
import math


def _warm(numbers: List[float], threshold: float = 0.5, *rest: int, **named: str) -> Optional[Tuple[int, str]]:
    '''A docstring, as candidates write them.

    >>> _warm([1.0, 2.0])
    '''
    seen: Dict[str, int] = {}
    total = sum(x * x for x in numbers if x > threshold) + len(rest) + len(named)
    pairs = [(i, j) for i in range(3) for j in range(i)]
    words = {w: len(w) for w in "a bb ccc".split()}
    text = f"{total:.3f}-{len(pairs)}" + str(sorted(words, key=lambda w: (-words[w], w)))
    try:
        while total > 1:
            total //= 2
        else:
            pass
    except (ValueError, ZeroDivisionError) as exc:
        raise RuntimeError("never") from exc
    finally:
        seen["x"] = 1
    for i, ch in enumerate(text[::-1]):
        if ch.isdigit() and not i % 2:
            continue
        elif ch in "-.":
            break
    return (int(math.floor(total)), text) if seen else None


class _Warm:
    def __init__(self, value: int) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"_Warm({self.value!r})"


def check(candidate):
    assert candidate([1.0, 2.0, 3.0], 0.5) == candidate([1.0, 2.0, 3.0], 0.5)
    assert abs(1.5 - 1.0) < 1.0, "message"
    assert repr(_Warm(1)) == "_Warm(1)"


check(_warm)
"""


# How often the zygote runs each function every job runs: CPython 3.11 counts a code object's first 8 calls (and
# loop iterations) in the code object itself, then rewrites its bytecode in place ("quickening"). Left to the jobs,
# each job would write those counters and that bytecode into pages it shares with the zygote, every page a fault and
# a copy, and quicken the same functions again, job after job. Run here past the threshold, before the heap is
# frozen, they are quickened once, in the zygote, and a job only reads them.
_QUICKEN_CALLS = 12


def _warm_job_paths() -> None:
    """Run the code every job runs (the codec both ways, the line reader, the reply's evidence codes, the tripwire's
    hook, the CPU timer, the seed) past the quickening threshold, with harmless inputs, leaving no state behind:
    the hook is made and called but never installed, the timer is only ever disarmed, and the evidence codes noted
    meanwhile are cleared."""
    hook = _audit_hook("/job")
    nested = "[" * 60 + "]" * 60
    values = (
        [[1, 2.5, "x", (1,), {1: 2}, {"a": [1.0, None, True]}, {3}, frozenset(), b"b", float("inf")], {"k": "v"}, True],
        {"source": "def f(x):\n    return x\n", "entry_point": "f", "cpu_seconds": 3.0, "seed": 0},
        ["loaded", "ok"],
        [[[1, 2], "ab"], {}, False],
    )
    r, w = os.pipe()
    try:
        for _ in range(_QUICKEN_CALLS):
            for value in values:
                tagged_decode(tagged_encode(value))
                tagged_decode(tagged_encode(value, outer=1).encode())
            tagged_decode("[" + nested + "," + nested + "]")  # the bracket scan past its quick count
            _write(w, b'["value",1,[]]\n')
            _LineReader(r, _MAX_MESSAGE).line()
            _seen()
            _error_text(ValueError("warm"))
            _evidence_of(ValueError("warm"))
            _evidence_of(OSError(2, "warm", "job-file"))
            for event, args in (("compile", (None, "<candidate>")), ("exec", (None,)), ("open", ("x", "r", 0))):
                hook(event, args)
            random.seed(0)  # type: ignore[attr-defined]  # every job seeds again, with its own seed
            _disarm()
    finally:
        os.close(r)
        os.close(w)
        _SEEN.clear()


def _warm() -> None:
    _make_streams()
    for _ in range(3):
        exec(compile(_WARM_UP, "<warm-up>", "exec"), {"__name__": "__warm_up__"})  # noqa: S102
    _warm_job_paths()


PAYLOADS = {
    "candidate": _candidate_main,
    "checker": _checker_main,
    "checker_server": _checker_server_main,
    "__warm__": (_warm,),
}
