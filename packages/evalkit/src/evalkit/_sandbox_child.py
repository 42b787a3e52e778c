"""The sandbox template process and the per-candidate harness. Standard library only.

This file is not imported by evalkit: :mod:`evalkit._sandbox` reads its source and runs it as
``python -s -S -P -c <source> <settings-json>`` (with a stripped environment, optionally inside ``unshare``).
The process that starts is the *template*: it imports the modules candidates commonly use, then reads jobs
(one JSON line each) on stdin and answers each with one JSON line on stdout. It never runs candidate code
itself. For each job it forks a *child* that drops privileges, applies rlimits, installs an audit hook and only
then loads the candidate and runs the tests, reporting each result on a dedicated pipe with a nonce the
candidate cannot know. The template enforces the wall-clock deadlines, kills the child's process group, and
re-forks a fresh child for the tests after one that crashed or hung, so every test gets an honest verdict.
"""

# The template keeps to os-level calls: it runs in a bare interpreter and forks per job.
# ruff: noqa: PTH102, PTH106, PTH108, PTH118, PTH123, PTH202
# Everything this script handles is parsed JSON from its own protocol, checked where it matters; strict
# inference over those untyped dicts would only add casts. It is never imported by evalkit.
# pyright: basic

from __future__ import annotations

# Modules candidates often use; importing them once here makes every forked child start warm.
import bisect  # noqa: F401
import builtins
import collections  # noqa: F401
import contextlib
import fractions  # noqa: F401
import functools  # noqa: F401
import gc
import hashlib  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import json
import math  # noqa: F401
import os
import random  # noqa: F401
import re  # noqa: F401
import resource
import select
import shutil
import signal
import string  # noqa: F401
import sys
import time
import typing  # noqa: F401

_CHANNEL_FD = 3
_MAX_LINE = 1 << 20


class _Tools:
    """The harness's own references, taken before any candidate code runs.

    A candidate can rebind names in ``builtins``, in ``json`` or in this very module (``import __main__``); the
    harness therefore never looks anything up after the candidate has loaded: it only calls these captured
    objects, and it writes results with its own small JSON encoder.
    """

    __slots__ = ("clean_builtins", "encode", "plain_py", "streams", "timeout", "unplain")

    def __init__(self) -> None:
        _type, _float_repr, _int_repr = type, float.__repr__, int.__repr__
        _enc_str = json.encoder.encode_basestring_ascii
        _list, _tuple, _dict, _set, _frozenset = list, tuple, dict, set, frozenset
        _bool, _int, _float, _str = bool, int, float, str
        atoms = (type(None), bool, int, float, str, bytes, complex)
        inf = float("inf")

        class Unplain(Exception):  # noqa: N818
            pass

        class Timeout(BaseException):
            pass

        def encode(v: object, depth: int = 0) -> str:
            if depth > 200:
                raise Unplain("return value nested too deeply")
            t = _type(v)
            if v is None:
                return "null"
            if t is _bool:
                return "true" if v else "false"
            if t is _int:
                try:
                    return _int_repr(v)  # type: ignore[arg-type]
                except ValueError:
                    raise Unplain("return value is an integer too large to write") from None
            if t is _float:
                if v != v or v in (inf, -inf):  # noqa: PLR0124
                    raise Unplain(f"return value contains a non-finite float ({_float_repr(v)})")  # type: ignore[arg-type]
                return _float_repr(v)  # type: ignore[arg-type]
            if t is _str:
                return _enc_str(v)  # type: ignore[arg-type]
            if t is _list or t is _tuple:
                return "[" + ",".join([encode(x, depth + 1) for x in v]) + "]"  # type: ignore[union-attr]
            if t is _dict:
                parts: list[str] = []
                for k, x in _dict.items(v):  # type: ignore[arg-type]
                    if _type(k) is not _str:
                        raise Unplain("return value has a dict key that is not a string")
                    parts.append(_enc_str(k) + ":" + encode(x, depth + 1))
                return "{" + ",".join(parts) + "}"
            raise Unplain("return value is not JSON (expected int, float, str, bool, None, list, dict)")

        def plain_py(v: object, depth: int = 0) -> object:
            """A copy made only of exact built-in types, for assert-style checks (defeats a custom ``__eq__``)."""
            if depth > 200:
                raise Unplain("return value nested too deeply")
            t = _type(v)
            if t in atoms:
                return v
            if t is _list:
                return [plain_py(x, depth + 1) for x in v]  # type: ignore[union-attr]
            if t is _tuple:
                return _tuple([plain_py(x, depth + 1) for x in v])  # type: ignore[union-attr]
            if t is _set:
                return _set([plain_py(x, depth + 1) for x in v])  # type: ignore[union-attr]
            if t is _frozenset:
                return _frozenset([plain_py(x, depth + 1) for x in v])  # type: ignore[union-attr]
            if t is _dict:
                return {plain_py(k, depth + 1): plain_py(x, depth + 1) for k, x in _dict.items(v)}  # type: ignore[arg-type]
            raise Unplain("return value is not a plain built-in type")

        self.encode = encode
        self.plain_py = plain_py
        self.unplain: type[Exception] = Unplain
        self.timeout: type[BaseException] = Timeout
        self.clean_builtins = dict(builtins.__dict__)
        # A child's stdout and stderr: fds 1 and 2, which the child points at its output file before use.
        # Line-buffered, so what a candidate printed survives a later crash or os._exit. Never written here.
        self.streams = tuple(
            open(fd, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
            for fd in (1, 2)
        )


# Compiled and run once by the template before it freezes its heap. A child's first compile costs about twice as
# much when the template has never compiled anything (fresh allocator arenas and parser state, faulted in per
# child); this snippet is ours, not a candidate's, and touches the syntax candidates commonly use.
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


def _install_audit_hook(workdir: str) -> None:
    """Refuse what a candidate has no business doing; a defence in depth under the OS limits."""
    realpath = os.path.realpath
    join = os.path.join
    getcwd = os.getcwd
    prefix = workdir.rstrip("/") + "/"
    blocked = frozenset(
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
    path_events = frozenset(
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
                    raise PermissionError(f"sandbox: reading {sp!r} is not allowed")
                if writing and not inside(path):
                    raise PermissionError(
                        f"sandbox: writing {sp!r} outside the sandbox directory is not allowed"
                    )
            return
        if event == "sys._getframe":
            raise ValueError("sandbox: frame access is not allowed")
        if event in blocked or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in path_events and not all(inside(a) for a in args if isinstance(a, str | bytes)):
            raise PermissionError(f"sandbox: {event} outside the sandbox directory is not allowed")

    sys.addaudithook(hook)


def _child_main(
    job: dict[str, object],
    settings: dict[str, object],
    tools: _Tools,
    workdir: str,
    wfd: int,
    out_fd: int,
    first: int,
) -> None:
    """Runs in the forked child. Never returns: always ends with ``os._exit``.

    ``tools`` was made in the template, before any candidate existed, and reaches here only as a local.
    """
    write, exit_now, setitimer, prof = os.write, os._exit, signal.setitimer, signal.ITIMER_PROF
    enc_str = json.encoder.encode_basestring_ascii
    _exec, _compile, _dict, _str, _type, _callable = exec, compile, dict, str, type, callable
    _len, _range, _int_repr, _base_exc = len, range, int.__repr__, BaseException
    channel, max_line = _CHANNEL_FD, _MAX_LINE
    encode, plain_py, clean_builtins = tools.encode, tools.plain_py, tools.clean_builtins
    timeout_exc, unplain_exc = tools.timeout, tools.unplain
    try:
        os.setsid()
        nullfd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nullfd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(wfd, _CHANNEL_FD)
        os.closerange(_CHANNEL_FD + 1, 65536)
        uid = settings.get("uid")
        if isinstance(uid, int):
            gid = settings["gid"]
            assert isinstance(gid, int)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        os.chdir(workdir)
        os.umask(0o077)
        cpu_total = int(job.get("cpu_total") or settings["cpu_total"])  # type: ignore[call-overload]
        for res, value in (
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_CPU, cpu_total),
            (resource.RLIMIT_AS, int(settings["memory_bytes"])),  # type: ignore[call-overload]
            (resource.RLIMIT_FSIZE, int(settings["file_bytes"])),  # type: ignore[call-overload]
            (resource.RLIMIT_NOFILE, int(settings["open_files"])),  # type: ignore[call-overload]
            (resource.RLIMIT_NPROC, int(settings["processes"])),  # type: ignore[call-overload]
        ):
            resource.setrlimit(res, (value, value))
        # the template already holds the stripped environment (PATH, LANG); the job adds its own directory
        os.environ["HOME"] = workdir
        os.environ["TMPDIR"] = workdir
        # SIGPIPE is already at its default (inherited from the template); the text streams were made there too
        streams = tools.streams
        sys.stdout, sys.stderr = streams
        nonce = os.urandom(16).hex()
    except BaseException as exc:  # setup failed: the template reports an infrastructure error
        try:
            write(
                wfd,
                (json.dumps({"t": "setup_error", "error": f"{type(exc).__name__}: {exc}"}) + "\n").encode(),
            )
        finally:
            os._exit(70)

    def line(body: str) -> str:
        # body: '"t":"...",...' fields already encoded; every message carries the nonce
        return "{" + body + ',"n":"' + nonce + '"}\n'

    def send(lines: str) -> None:
        # One write per point where the template must know where the child is (before candidate code runs
        # again), carrying every message due by then: fewer wake-ups of the template, same order and meaning.
        for stream in streams:
            # not contextlib.suppress: after the candidate loads, no module global may be looked up
            try:  # noqa: SIM105
                stream.flush()
            except _base_exc:
                pass
        raw = lines.encode()
        while raw:
            raw = raw[write(channel, raw) :]

    def text_of(exc: BaseException) -> str:
        try:
            name = _type(exc).__name__
            name = name if _type(name) is _str else "?"
        except _base_exc:
            name = "?"
        try:
            msg = _str(exc)
            msg = msg[:300] if _type(msg) is _str else ""
        except _base_exc:
            msg = "<unprintable>"
        return '"error_type":' + enc_str(name) + ',"error":' + enc_str(msg)

    armed = [False]

    def on_prof(_signum: int, _frame: object) -> None:
        if armed[0]:
            raise timeout_exc

    signal.signal(signal.SIGPROF, on_prof)
    cpu = float(settings["cpu_seconds"])  # type: ignore[arg-type]
    send(line('"t":"ready"'))
    _install_audit_hook(workdir)

    ns: dict[str, object] = {"__name__": "__candidate__", "__builtins__": builtins}
    source = job["source"]
    assert isinstance(source, str)
    entry = job["entry_point"]
    assert isinstance(entry, str)
    tests = job["tests"]
    assert isinstance(tests, list)
    n_tests = len(tests)  # pyright: ignore[reportUnknownArgumentType]
    loaded = '"status":"ok"'
    try:
        armed[0] = True
        setitimer(prof, cpu, 0.05)
        try:
            _exec(_compile(source, "<candidate>", "exec"), ns)
        finally:
            armed[0] = False
            setitimer(prof, 0, 0)
    except timeout_exc:
        loaded = '"status":"timeout"'
    except _base_exc as exc:
        loaded = '"status":"raised",' + text_of(exc)
    pending = line('"t":"loaded",' + loaded)  # written with the next message, before more candidate code runs
    if loaded != '"status":"ok"':
        send(pending)
        exit_now(0)
    func = _dict.get(ns, entry)
    if not _callable(func):
        missing = enc_str(f"the candidate does not define a callable {entry!r}")
        send(pending + line('"t":"loaded_missing","error":' + missing))
        exit_now(0)

    def wrapped(*args: object, **kwargs: object) -> object:
        return plain_py(func(*args, **kwargs))  # type: ignore[misc]

    for i in _range(first, n_tests):
        test: dict[str, object] = tests[i]  # pyright: ignore[reportUnknownVariableType]
        send(pending + line('"t":"start","i":' + _int_repr(i)))
        body: str
        try:
            armed[0] = True
            setitimer(prof, cpu, 0.05)
            try:
                if "check" in test:
                    check_ns = _dict(ns)
                    check_ns["__builtins__"] = _dict(clean_builtins)
                    check_ns["__name__"] = "__check__"
                    _exec(_compile(_str(test["check"]), "<check>", "exec"), check_ns)
                    check_ns["check"](wrapped)  # type: ignore[operator]
                    body = '"status":"done"'
                else:
                    result = func(*(test.get("args") or []), **(test.get("kwargs") or {}))  # type: ignore[misc]
                    armed[0] = False
                    setitimer(prof, 0, 0)
                    body = '"status":"value","value":' + encode(result)
            finally:
                armed[0] = False
                setitimer(prof, 0, 0)
        except timeout_exc:
            body = '"status":"timeout"'
        except unplain_exc as exc:
            body = '"status":"bad_return","error":' + enc_str(exc.args[0] if exc.args else "")
        except _base_exc as exc:
            body = '"status":"raised",' + text_of(exc)
        if _len(body) > max_line:
            body = '"status":"bad_return","error":"return value too large"'
        pending = line('"t":"res","i":' + _int_repr(i) + "," + body)
    send(pending + line('"t":"end"'))
    exit_now(0)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _run_job(
    job: dict[str, object], settings: dict[str, object], tools: _Tools, jobdir: str
) -> dict[str, object]:
    tests = job["tests"]
    assert isinstance(tests, list)
    n = len(tests)  # pyright: ignore[reportUnknownArgumentType]
    results: list[dict[str, object] | None] = [None] * n
    cpu = float(settings["cpu_seconds"])  # type: ignore[arg-type]
    wall = float(settings["wall_seconds"])  # type: ignore[arg-type]
    workdir = os.path.join(jobdir, "work")
    os.mkdir(workdir, 0o700)
    uid = settings.get("uid")
    if isinstance(uid, int):
        os.chown(workdir, uid, int(settings["gid"]))  # type: ignore[call-overload]
    out_path = os.path.join(jobdir, "output")
    out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    load: dict[str, object] = {"status": "ok"}
    infra: str | None = None
    first = 0
    children = 0
    while first < n or children == 0:  # one child, more only after a crash or a hang
        rfd, wfd = os.pipe()
        child_exit = os._exit  # a local: the child must never fall back into the template's loop
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.close(rfd)
                _child_main(job, settings, tools, workdir, wfd, out_fd, first)
            finally:
                child_exit(71)
        children += 1
        os.close(wfd)
        nonce: str | None = None
        loaded = False
        current: int | None = None
        deadline = time.monotonic() + wall + 1.0  # start-up and loading
        buf = b""
        ended = False
        corrupted = False
        timed_out = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([rfd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > _MAX_LINE + 4096 and b"\n" not in buf:
                corrupted = True
                break
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                    if not isinstance(msg, dict):
                        raise ValueError("not an object")  # noqa: TRY004, TRY301
                except ValueError:
                    corrupted = True
                    break
                kind = msg.get("t")
                if nonce is None:
                    if kind == "setup_error":
                        infra = str(msg.get("error"))
                        break
                    if kind != "ready" or not isinstance(msg.get("n"), str):
                        corrupted = True
                        break
                    nonce = msg["n"]
                    continue
                if msg.get("n") != nonce:
                    corrupted = True
                    break
                if kind == "loaded":
                    loaded = True
                    if msg.get("status") != "ok":
                        load = {k: v for k, v in msg.items() if k not in ("t", "n")}
                        ended = True
                    deadline = time.monotonic() + wall
                elif kind == "loaded_missing":
                    loaded = True
                    load = {"status": "missing", "error": msg.get("error")}
                    ended = True
                elif kind == "start":
                    current = msg.get("i")
                    deadline = time.monotonic() + wall
                elif kind == "res":
                    i = msg.get("i")
                    if not isinstance(i, int) or not 0 <= i < n or i != current:
                        corrupted = True
                        break
                    results[i] = {k: v for k, v in msg.items() if k not in ("t", "n", "i")}
                    current = None
                elif kind == "end":
                    ended = True
                else:
                    corrupted = True
                    break
            if corrupted or infra is not None or ended:
                break
        _kill_group(pid)
        _, status = os.waitpid(pid, 0)
        os.close(rfd)
        if infra is not None or nonce is None:
            infra = infra or f"sandbox child failed before it was ready ({_describe(status)})"
            break
        if not loaded:
            if timed_out:
                load = {"status": "timeout", "error": f"wall clock ({wall:g}s) exceeded while loading"}
            else:
                load = {"status": "crash", "error": _describe(status, corrupted=corrupted)}
            break
        if load.get("status") != "ok":
            break
        if current is not None and results[current] is None:
            if timed_out:
                results[current] = {"status": "timeout", "error": f"wall clock ({wall:g}s) exceeded"}
            elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
                results[current] = {"status": "timeout", "error": f"CPU limit ({cpu:g}s) exceeded"}
            else:
                results[current] = {"status": "crash", "error": _describe(status, corrupted=corrupted)}
        nxt = next((k for k in range(n) if results[k] is None), n)
        if nxt < n and nxt == first and current is None:
            # the child answered nothing more and was not inside a test: give up on the rest honestly
            for k in range(first, n):
                results[k] = {"status": "crash", "error": _describe(status, corrupted=corrupted)}
            break
        first = nxt
    os.close(out_fd)
    cap = int(settings["output_bytes"])  # type: ignore[call-overload]
    with open(out_path, "rb") as f:
        out = f.read(cap + 1)
    size = os.path.getsize(out_path)
    return {
        "results": results,
        "load": load,
        "infra": infra,
        "output": out[:cap].decode("utf-8", "replace"),
        "output_truncated": size > cap,
        "children": children,
    }


def _remove_jobdir(jobdir: str) -> None:
    try:  # what a job leaves when its candidate wrote no files: three calls instead of a tree walk
        os.unlink(os.path.join(jobdir, "output"))
        os.rmdir(os.path.join(jobdir, "work"))
        os.rmdir(jobdir)
    except OSError:
        shutil.rmtree(jobdir, ignore_errors=True)


def _describe(status: int, *, corrupted: bool = False) -> str:
    if corrupted:
        return "the result channel was corrupted by the candidate"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGXFSZ:
            return "killed by SIGXFSZ: file size limit exceeded"
        return f"killed by signal {name}"
    if os.WIFEXITED(status):
        return f"the process exited with code {os.WEXITSTATUS(status)} before answering"
    return f"the process ended with status {status}"


def main() -> None:
    settings = json.loads(sys.argv[1])
    jobs = settings["jobs"]
    out = 1
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    stdin = sys.stdin.buffer
    # What every child needs and no candidate can have touched yet is made once, here: the harness's captured
    # references (kept in a local, out of any candidate's reach) and the stripped environment.
    tools = _Tools()
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    for _ in range(3):  # see _WARM_UP
        exec(compile(_WARM_UP, "<warm-up>", "exec"), {"__name__": "__warm_up__"})  # noqa: S102
    # Move everything made so far out of the collector's reach: forked children then do not write to (and so
    # copy) every page of the template's heap when a collection runs.
    gc.collect()
    gc.freeze()
    os.write(out, b'{"t":"template-ready"}\n')
    count = 0
    while True:
        line = stdin.readline()
        if not line:
            return
        job = json.loads(line)
        count += 1
        jobdir = os.path.join(jobs, f"job-{settings['slot']}-{count}")
        os.mkdir(jobdir, 0o711)
        try:
            reply = _run_job(job, settings, tools, jobdir)
        except Exception as exc:
            reply = {"infra": f"template error: {type(exc).__name__}: {exc}"}
        finally:
            _remove_jobdir(jobdir)
        reply["id"] = job.get("id")
        del job
        data = (json.dumps(reply, ensure_ascii=True) + "\n").encode()
        while data:
            data = data[os.write(out, data) :]


if __name__ == "__main__":
    main()
