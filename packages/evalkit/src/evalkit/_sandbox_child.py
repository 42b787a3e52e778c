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

from __future__ import annotations

import builtins
import json
import os
import resource
import select
import shutil
import signal
import sys
import time

# Modules candidates often use; importing them once here makes every forked child start warm.
import bisect  # noqa: F401
import collections  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import math  # noqa: F401
import random  # noqa: F401
import re  # noqa: F401
import string  # noqa: F401
import typing  # noqa: F401

_CHANNEL_FD = 3
_MAX_LINE = 1 << 20


class _Timeout(BaseException):
    """Raised inside the child by the CPU-time timer."""


class _Unplain(Exception):  # noqa: N818
    """A return value is not made of plain built-in types."""


def _plain_json(value: object, depth: int = 0) -> object:
    """A copy of ``value`` made only of exact JSON types; refuses anything else (and NaN)."""
    if depth > 200:
        raise _Unplain("return value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is str or t is int:
        return value
    if t is float:
        f: float = value  # type: ignore[assignment]
        if f != f or f in (float("inf"), float("-inf")):
            raise _Unplain(f"return value contains a non-finite float ({f!r})")
        return f
    if t is list or t is tuple:
        return [_plain_json(v, depth + 1) for v in value]  # type: ignore[union-attr]
    if t is dict:
        out: dict[str, object] = {}
        for k, v in value.items():  # type: ignore[union-attr]
            if type(k) is not str:
                raise _Unplain(f"return value has a non-string dict key of type {type(k).__name__}")
            out[k] = _plain_json(v, depth + 1)
        return out
    raise _Unplain(f"return value of type {t.__name__} is not JSON (expected int, float, str, bool, None, list, dict)")


_PLAIN_ATOMS = (type(None), bool, int, float, str, bytes, complex)


def _plain_py(value: object, depth: int = 0) -> object:
    """A copy of ``value`` made only of exact built-in types, for assert-style checks (defeats custom ``__eq__``)."""
    if depth > 200:
        raise _Unplain("return value nested too deeply")
    t = type(value)
    if t in _PLAIN_ATOMS:
        return value
    if t is list:
        return [_plain_py(v, depth + 1) for v in value]  # type: ignore[union-attr]
    if t is tuple:
        return tuple(_plain_py(v, depth + 1) for v in value)  # type: ignore[union-attr]
    if t is set:
        return {_plain_py(v, depth + 1) for v in value}  # type: ignore[union-attr]
    if t is frozenset:
        return frozenset(_plain_py(v, depth + 1) for v in value)  # type: ignore[union-attr]
    if t is dict:
        return {_plain_py(k, depth + 1): _plain_py(v, depth + 1) for k, v in value.items()}  # type: ignore[union-attr]
    raise _Unplain(f"return value of type {t.__name__} is not a plain built-in type")


def _install_audit_hook(workdir: str) -> None:
    """Refuse what a candidate has no business doing; a defence in depth under the OS limits."""
    realpath = os.path.realpath
    join = os.path.join
    getcwd = os.getcwd
    prefix = workdir.rstrip("/") + "/"
    blocked = frozenset(
        {
            "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
            "os.kill", "os.killpg", "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
            "socket.gethostbyname", "socket.gethostbyaddr", "socket.sendto", "sys._current_frames",
            "gc.get_objects", "gc.get_referrers", "gc.get_referents", "object.__getattr__",
            "sys.addaudithook", "sys.settrace", "sys.setprofile", "resource.setrlimit", "resource.prlimit",
            "os.setuid", "os.setgid", "os.chroot", "pty.spawn", "signal.pthread_kill", "os.unshare",
        }
    )
    path_events = frozenset(
        {
            "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.chmod", "os.chown",
            "os.truncate", "os.utime", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod", "shutil.rmtree",
            "shutil.move", "shutil.copyfile", "shutil.copytree", "os.setxattr", "os.removexattr",
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
            path, mode, flags = (args + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
            )
            if isinstance(path, str | bytes):
                sp = path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path
                if realpath(join(getcwd(), sp)).startswith(("/proc", "/sys/kernel")):
                    raise PermissionError(f"sandbox: reading {sp!r} is not allowed")
                if writing and not inside(path):
                    raise PermissionError(f"sandbox: writing {sp!r} outside the sandbox directory is not allowed")
            return
        if event == "sys._getframe":
            raise ValueError("sandbox: frame access is not allowed")
        if event in blocked or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in path_events and not all(inside(a) for a in args if isinstance(a, str | bytes)):
            raise PermissionError(f"sandbox: {event} outside the sandbox directory is not allowed")

    sys.addaudithook(hook)


def _child_main(job: dict[str, object], settings: dict[str, object], workdir: str, wfd: int, out_fd: int, first: int) -> None:
    """Runs in the forked child. Never returns: always ends with ``os._exit``."""
    write = os.write
    dumps = json.dumps
    setitimer = signal.setitimer
    prof = signal.ITIMER_PROF
    clean_builtins = dict(builtins.__dict__)
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
        os.environ.clear()
        os.environ.update({"HOME": workdir, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TMPDIR": workdir})
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        nonce = os.urandom(16).hex()
    except BaseException as exc:  # setup failed: the template reports an infrastructure error
        try:
            write(wfd, (dumps({"t": "setup_error", "error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
        finally:
            os._exit(70)

    def send(msg: dict[str, object]) -> None:
        msg["n"] = nonce
        try:
            data = dumps(msg, allow_nan=False, ensure_ascii=True)
        except (ValueError, TypeError, RecursionError) as exc:
            data = dumps({"t": msg.get("t"), "i": msg.get("i"), "status": "bad_return", "error": str(exc)[:300], "n": nonce})
        if len(data) > _MAX_LINE:
            data = dumps({"t": msg.get("t"), "i": msg.get("i"), "status": "bad_return", "error": "return value too large", "n": nonce})
        data += "\n"
        raw = data.encode()
        while raw:
            raw = raw[write(_CHANNEL_FD, raw):]

    armed = [False]

    def on_prof(_signum: int, _frame: object) -> None:
        if armed[0]:
            raise _Timeout

    signal.signal(signal.SIGPROF, on_prof)
    cpu = float(settings["cpu_seconds"])  # type: ignore[arg-type]
    send({"t": "ready"})
    _install_audit_hook(workdir)

    ns: dict[str, object] = {"__name__": "__candidate__", "__builtins__": builtins}
    source = job["source"]
    assert isinstance(source, str)
    load: dict[str, object]
    try:
        armed[0] = True
        setitimer(prof, cpu, 0.05)
        try:
            exec(compile(source, "<candidate>", "exec"), ns)  # noqa: S102
        finally:
            armed[0] = False
            setitimer(prof, 0, 0)
        load = {"t": "loaded", "status": "ok"}
    except _Timeout:
        load = {"t": "loaded", "status": "timeout"}
    except BaseException as exc:
        load = {"t": "loaded", "status": "raised", "error_type": type(exc).__name__, "error": str(exc)[:300]}
    send(load)
    if load["status"] != "ok":
        os._exit(0)

    entry = job["entry_point"]
    assert isinstance(entry, str)
    func = ns.get(entry)
    if not callable(func):
        send({"t": "loaded_missing", "error": f"the candidate does not define a callable {entry!r}"})
        os._exit(0)

    def wrapped(*args: object, **kwargs: object) -> object:
        return _plain_py(func(*args, **kwargs))

    tests = job["tests"]
    assert isinstance(tests, list)
    for i in range(first, len(tests)):  # pyright: ignore[reportUnknownArgumentType]
        test: dict[str, object] = tests[i]  # pyright: ignore[reportUnknownVariableType]
        send({"t": "start", "i": i})
        msg: dict[str, object]
        try:
            armed[0] = True
            setitimer(prof, cpu, 0.05)
            try:
                if "check" in test:
                    check_ns = dict(ns)
                    check_ns["__builtins__"] = dict(clean_builtins)
                    check_ns["__name__"] = "__check__"
                    exec(compile(str(test["check"]), "<check>", "exec"), check_ns)  # noqa: S102
                    check = check_ns["check"]
                    check(wrapped)  # type: ignore[operator]
                    msg = {"status": "done"}
                else:
                    args = test.get("args") or []
                    kwargs = test.get("kwargs") or {}
                    result = func(*args, **kwargs)  # type: ignore[misc]
                    msg = {"status": "value", "value": _plain_json(result)}
            finally:
                armed[0] = False
                setitimer(prof, 0, 0)
        except _Timeout:
            msg = {"status": "timeout"}
        except _Unplain as exc:
            msg = {"status": "bad_return", "error": str(exc)[:300]}
        except BaseException as exc:
            try:
                text = str(exc)[:300]
            except BaseException:
                text = "<unprintable>"
            msg = {"status": "raised", "error_type": type(exc).__name__, "error": text}
        msg["t"] = "res"
        msg["i"] = i
        send(msg)
    send({"t": "end"})
    os._exit(0)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _run_job(job: dict[str, object], settings: dict[str, object], jobdir: str) -> dict[str, object]:
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
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(rfd)
            _child_main(job, settings, workdir, wfd, out_fd, first)
            os._exit(71)
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
    base = settings["base"]
    out = 1
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    stdin = sys.stdin.buffer
    os.write(out, b'{"t":"template-ready"}\n')
    count = 0
    while True:
        line = stdin.readline()
        if not line:
            return
        job = json.loads(line)
        count += 1
        jobdir = os.path.join(base, f"job-{settings['slot']}-{count}")
        os.mkdir(jobdir, 0o711)
        try:
            reply = _run_job(job, settings, jobdir)
        except Exception as exc:
            reply = {"infra": f"template error: {type(exc).__name__}: {exc}"}
        finally:
            shutil.rmtree(jobdir, ignore_errors=True)
        reply["id"] = job.get("id")
        del job
        data = (json.dumps(reply, ensure_ascii=True) + "\n").encode()
        while data:
            data = data[os.write(out, data):]


if __name__ == "__main__":
    main()
