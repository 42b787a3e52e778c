"""The hostile suite: candidates written to break the sandbox, each with the exact verdict it gets, and proof that
nothing outlived its job: no process (``Sandbox.settle``, then no process of any job's uid; only the workers'
checker servers, trusted and one a worker, stay), no file on the host, no signal delivered outside the job, and no
secret in any verdict.

Inside the candidate's process an audit hook is a tripwire (it names what a candidate tried, for the reward-hacking
checks), not the wall. So most attacks come twice: as written, where the tripwire's refusal is the verdict, and past
the tripwire, where the kernel answers. Two ways past it, as a real attacker would go:

- ``PAST_TRIPWIRE``: the hook judges paths with ``os.path.realpath``, whose code a candidate may replace; after
  that every path looks like its own directory to the hook;
- ``unhooked(code)``: ``_posixsubprocess.fork_exec`` (which raises no audit event) starts a fresh interpreter with
  no hook at all, where ctypes and raw syscalls are at hand; it needs ``processes`` > 1 and keeps the job's uid,
  namespaces, rlimits and seccomp filter.

Secrets the candidates hunt for:

- ``CANARY``: set in this process's environment, and written to a file and a fake replay file in a temp directory
  and to a fake store under ``EVALKIT_HOME``, before any sandbox starts;
- ``SECRET``: a hidden expected value and a string inside hidden check programs; it never enters a candidate.

The sections follow the classes of issue 12 ("What was found"), then attacks nobody named, then jobs that try to
reach each other. Every sandbox here runs on the full wall (root and bubblewrap); elsewhere the module is skipped.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from evalkit import (
    CallTest,
    CheckTest,
    CodeTask,
    Sandbox,
    SandboxLimits,
    TypeSpec,
    Verdict,
    grade,
    grade_many,
)
from evalkit.wall._codec import TaggedError, tagged_decode
from evalkit.wall._exchange import call_result as _call_result
from evalkit.wall._policy import WallError
from evalkit.wall._sandbox import SandboxJob, user_processes
from evalkit_core import digest

pytestmark = pytest.mark.needs("bwrap", "seccomp", "root")  # it asserts the verdicts of the full wall

LIMITS = SandboxLimits(
    cpu_seconds=0.5, wall_seconds=1.5, memory_bytes=512 << 20, file_bytes=4 << 20, output_bytes=2048
)
# room for a candidate to start processes (the ways past the tripwire need one), and time to do harm with them
FORKING = attrs.evolve(LIMITS, processes=4, wall_seconds=3.0)
CANARY = "canary-" + uuid.uuid4().hex
CANARY_ENV = "EVALKIT_HOSTILE_CANARY"
SECRET = "hidden-" + uuid.uuid4().hex
MARK = "evalkit-hostile-" + uuid.uuid4().hex[:16]  # in the name of every file a candidate tries to leave
REPO = Path(__file__).resolve().parents[2]
HOST_PID = os.getpid()


@attrs.frozen
class Secrets:
    canary_file: Path
    replay_file: Path
    store_file: Path


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secrets]:
    """The canary, in the environment and in files, before any sandbox of this module starts."""
    base = tmp_path_factory.mktemp("canary")
    canary_file = base / "secret.txt"
    canary_file.write_text(CANARY)
    replay_file = base / "replay.jsonl"
    completion = f"def f(x):\n    return {CANARY!r}\n"
    replay_file.write_text(json.dumps({"task_id": "x", "completion": completion}) + "\n")
    store = Path(os.environ["EVALKIT_HOME"]) / f"store-{uuid.uuid4().hex[:8]}"
    store.mkdir()
    store_file = store / "evalkit.sqlite"
    store_file.write_text(CANARY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CANARY_ENV, CANARY)
        yield Secrets(canary_file, replay_file, store_file)
    shutil.rmtree(store)


@pytest.fixture(scope="module")
def sandbox(secrets: Secrets) -> Iterator[Sandbox]:
    box = Sandbox(LIMITS, workers=1)
    assert box.isolation.full, box.isolation
    yield box
    box.close()
    assert user_processes(box.uids) == []


@pytest.fixture(scope="module")
def forking(secrets: Secrets) -> Iterator[Sandbox]:
    """One worker whose jobs may start processes: jobs run one after the other on the same zygote."""
    with Sandbox(FORKING, workers=1) as box:
        yield box
    assert user_processes(box.uids) == []


@pytest.fixture(scope="module")
def pair(secrets: Secrets) -> Iterator[Sandbox]:
    """Two workers whose jobs may start processes: jobs run side by side."""
    with Sandbox(FORKING, workers=2) as box:
        yield box
    assert user_processes(box.uids) == []


# ------------------------------------------------------------------------------------------------- helpers


def code_task(public: list[CallTest | CheckTest], hidden: list[CallTest | CheckTest]) -> CodeTask:
    return CodeTask(
        id="code/hostile/001",
        description="hostile",
        entry_point="f",
        signature="def f(x):",
        arg_types=(TypeSpec("int"),),
        return_type=TypeSpec("int"),
        float_tolerance=None,
        public_tests=tuple(public),
        hidden_tests=tuple(hidden),
        reference="",
        digest="sha256:" + "0" * 64,
        raw={},
    )


DOUBLE = code_task([CallTest((1,), {}, 2)], [CallTest((2,), {}, 4), CallTest((5,), {}, 10)])
CHECK_DOUBLE = code_task(
    [CheckTest("def check(candidate):\n    assert candidate(1) == 2\n")],
    [CheckTest(f"def check(candidate):\n    assert candidate(2) == 4, {SECRET!r}\n")],
)


def one(expected: object, args: tuple[object, ...] = (1,)) -> CodeTask:
    """One public call test: its verdict shows what the candidate returned."""
    return code_task([CallTest(args, {}, expected)], [])  # type: ignore[arg-type]


def one_check(check: str) -> CodeTask:
    return code_task([CheckTest(textwrap.dedent(check))], [])


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# Ahead of a candidate's own code: the tripwire's path checks go blind (see the module's docstring).
PAST_TRIPWIRE = src("""
    import posixpath as _pp
    _fake = compile("def realpath(filename, *, strict=False): return '/job/_'", "<x>", "exec")
    _pp.realpath.__code__ = [c for c in _fake.co_consts if type(c).__name__ == "code"][0]
""")


def unhooked(code: str, *, wait: bool = True, linger: float = 0.0, before: str = "", after: str = "") -> str:
    """A candidate whose ``f`` runs ``code`` in a fresh interpreter it starts itself, with no audit hook (see the
    module's docstring), and returns what ``code`` printed, read as JSON (``result``). With ``wait=False`` it does
    not wait for the interpreter (a daemon): it stays ``linger`` seconds, then returns ``2 * x``. ``before`` and
    ``after`` are statements run in the candidate's own process before starting ``code`` and before returning."""
    return src(f"""
        import _posixsubprocess, json, os, sys, time
        CODE = {code!r}
        def f(x):
            exec({before!r})
            r, w = os.pipe()
            er, ew = os.pipe()
            exe = sys.executable.encode()
            pid = _posixsubprocess.fork_exec(
                [exe, b"-S", b"-c", CODE.encode()], [exe], True, (), None, [b"LANG=C.UTF-8"],
                -1, -1, -1, w, -1, w, er, ew, True, False, -1, None, None, None, -1, None, False)
            os.close(w)
            os.close(ew)
            if not {wait!r}:
                time.sleep({linger!r})
                return 2 * x
            out = b""
            while chunk := os.read(r, 65536):
                out += chunk
            os.waitpid(pid, 0)
            try:
                result = json.loads(out)
            except ValueError:
                return out.decode(errors="replace")[-300:]
            space = {{"result": result}}
            exec({after!r}, space)
            return space["result"]
    """)


def host_leftovers() -> list[str]:
    """Files named with MARK anywhere a candidate might try to leave one on the host."""
    places = [
        Path("/tmp"),
        Path("/var/tmp"),
        Path("/dev/shm"),
        Path("/"),
        REPO,
        REPO / "tests",
        Path(os.environ["EVALKIT_HOME"]),
        Path.cwd(),
    ]
    found: list[str] = []
    for place in places:
        with contextlib.suppress(OSError):
            found += [str(p) for p in place.iterdir() if MARK in p.name]
    return found


def checker_uids(box: Sandbox) -> list[int]:
    """The uids of the workers' checker servers: trusted processes that run checks and outlive jobs."""
    return [box.checker_uid(slot) for slot in range(box.workers)]


def job_uids(box: Sandbox) -> list[int]:
    return [uid for uid in box.uids if uid not in checker_uids(box)]


def assert_clean(box: Sandbox, *verdicts: Verdict) -> None:
    """Nothing of any job outlived it (only the checker servers stay, one a worker at most), and no verdict holds a
    secret or is an infrastructure error."""
    box.settle()
    assert user_processes(job_uids(box)) == [], "a process of a finished job survived"
    assert len(user_processes(checker_uids(box))) <= box.workers
    assert host_leftovers() == []
    for v in verdicts:
        assert v.infra_error is None, v.infra_error
        text = json.dumps(v.to_json()) + v.output
        assert CANARY not in text
        assert SECRET not in text


def run(box: Sandbox, source: str, task: CodeTask = DOUBLE) -> Verdict:
    verdict = grade(task, source, box, extract=False)
    assert_clean(box, verdict)
    return verdict


def returned(box: Sandbox, source: str, args: tuple[object, ...] = (1,)) -> str:
    """What the candidate returns for ``args``, whole (a verdict shows 200 characters): for failure messages."""
    run = box.run(SandboxJob(source, "f", ({"args": list(args), "kwargs": {}},)))  # type: ignore[dict-item]
    return json.dumps(run.tests[0].value, sort_keys=True) if run.tests[0].status == "value" else repr(run)


def reasons(v: Verdict) -> list[str]:
    return [t.reason for t in (*v.public, *v.hidden)]


def actual(v: Verdict) -> object:
    """What the candidate returned for the first public test."""
    assert v.public[0].actual is not None, v.public[0]
    return json.loads(v.public[0].actual)


@contextlib.contextmanager
def host_signals() -> Iterator[list[int]]:
    """Record every catchable signal this (the host) process receives meanwhile."""
    got: list[int] = []
    watched = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGALRM)
    old = {s: signal.signal(s, lambda n, _f: got.append(n)) for s in watched}
    try:
        yield got
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


# ===================================================================================== the classic attacks


def test_honest_candidate_passes(sandbox):
    v = run(sandbox, "def f(x):\n    return 2 * x\n")
    assert reasons(v) == ["ok", "ok", "ok"]
    v = run(sandbox, "def f(x):\n    return 2 * x\n", CHECK_DOUBLE)
    assert reasons(v) == ["ok", "ok"]


def test_infinite_loop_is_a_timeout_per_test(sandbox):
    v = run(sandbox, "def f(x):\n    if x == 2:\n        while True:\n            pass\n    return 2 * x\n")
    assert reasons(v) == ["ok", "timeout", "ok"], "a hang in one test must not take the others with it"


def test_loop_that_swallows_the_timer_still_times_out(sandbox):
    source = src("""
        def f(x):
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    pass
    """)
    v = run(sandbox, source, code_task([CallTest((1,), {}, 2)], [CallTest((2,), {}, 4)]))
    assert reasons(v) == ["timeout", "timeout"]


def test_sleeping_candidate_hits_the_wall_clock(sandbox):
    v = run(sandbox, "import time\ndef f(x):\n    time.sleep(60)\n", one(2))
    assert reasons(v) == ["timeout"]
    assert v.public[0].detail == "wall clock (1.5s) exceeded"


def test_fork_bomb(sandbox):
    v = run(sandbox, "import os\ndef f(x):\n    while True:\n        os.fork()\n")
    assert reasons(v) == ["exception"] * 3
    assert v.public[0].detail == "PermissionError: sandbox: os.fork is not allowed"


def test_processes_made_by_other_means(sandbox):
    """The tripwire names the usual ways; the one it does not see (``_posixsubprocess``) meets RLIMIT_NPROC: the
    job's uid is its own, so the limit counts only the job's processes."""
    source = src("""
        import _posixsubprocess, os, pty, subprocess, sys
        def attempt(fn):
            try:
                return fn()
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
        def f(x):
            exe = sys.executable.encode()
            r, w = os.pipe()
            return [
                attempt(lambda: subprocess.Popen([sys.executable, '-c', 'pass']).pid),
                attempt(lambda: os.posix_spawn(sys.executable, [sys.executable, '-c', 'pass'], {})),
                attempt(lambda: pty.fork()),
                attempt(lambda: os.execv(sys.executable, [sys.executable])),
                attempt(lambda: _posixsubprocess.fork_exec([exe], [exe], True, (), None, None, -1, -1, -1, -1, -1,
                                                           -1, r, w, True, False, -1, None, None, None, -1, None,
                                                           False)),
            ]
    """)
    expected = [
        "PermissionError: sandbox: subprocess.Popen is not allowed",
        "PermissionError: sandbox: os.posix_spawn is not allowed",
        "PermissionError: sandbox: os.fork is not allowed",
        "PermissionError: sandbox: os.exec is not allowed",
        "BlockingIOError: [Errno 11] Resource temporarily unavailable",
    ]
    v = run(sandbox, source, one(expected))
    assert reasons(v) == ["ok"], returned(sandbox, source)


def test_memory_bomb(sandbox):
    source = "def f(x):\n    blocks = []\n    while True:\n        blocks.append(bytearray(50 << 20))\n"
    v = run(sandbox, source, one(2))
    # MemoryError at the address-space limit; on a loaded machine zeroing 512 MiB may meet the clock first
    assert reasons(v) in (["exception"], ["timeout"])
    assert v.public[0].reason != "exception" or v.public[0].detail == "MemoryError"


def test_huge_output_is_capped(sandbox):
    # a moderate amount of output is fine: the answer counts, the captured output is truncated
    v = run(sandbox, "def f(x):\n    print('y' * 100_000)\n    return 2 * x\n")
    assert reasons(v) == ["ok", "ok", "ok"]
    assert len(v.output) == LIMITS.output_bytes
    # an unbounded flood fills the pipe faster than anyone reads it: the candidate never answers (the output is a
    # pipe, not a file, so no file-size limit stops it), and the host keeps only output_bytes
    v = run(sandbox, "import os\ndef f(x):\n    while True:\n        os.write(1, b'z' * 65536)\n", one(2))
    assert reasons(v) == ["timeout"]
    assert v.output == "z" * LIMITS.output_bytes


def test_huge_file(sandbox):
    source = "def f(x):\n    with open('big.bin', 'wb') as fh:\n        while True:\n            fh.write(b'0' * (1 << 20))\n"
    v = run(sandbox, source, one(2))
    assert reasons(v) == ["exception"]
    assert v.public[0].detail == "OSError: [Errno 27] File too large"


def test_filling_the_disk_stops_at_the_private_tmpfs():
    """Many files, each under the file-size limit: the total is capped by ``disk_bytes`` (memory, none of the
    host's disk), and the job's files go with its mount namespace."""
    source = src("""
        def f(x):
            for k in range(100):
                with open(f'part{k}.bin', 'wb') as fh:
                    fh.write(b'0' * (2 << 20))
            return 2 * x
    """)
    with Sandbox(attrs.evolve(LIMITS, disk_bytes=6 << 20), workers=1) as box:
        v = run(box, source, one(2))
        assert "6291456 bytes" in box.isolation.filesystem
    assert reasons(v) == ["exception"]
    assert v.public[0].detail == "OSError: [Errno 28] No space left on device"


def test_reading_the_parent_environment(sandbox):
    reads = src(f"""
        import os
        def f(x):
            seen = dict(os.environ)
            for path in ('/proc/self/environ', '/proc/1/environ', '/proc/{HOST_PID}/environ'):
                try:
                    seen[path] = open(path, 'rb').read().decode('latin-1')
                except OSError as exc:
                    seen[path] = type(exc).__name__
            return seen
    """)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/job", "TMPDIR": "/job"}
    paths = ("/proc/self/environ", "/proc/1/environ", f"/proc/{HOST_PID}/environ")
    # as written, the tripwire refuses /proc; past it, the kernel does: the job's own environ is root's to read
    # (the job's process is not dumpable), the host's pid does not exist in the job's pid namespace
    v = run(sandbox, reads, one(env | dict.fromkeys(paths, "PermissionError")))
    assert reasons(v) == ["ok"], returned(sandbox, reads)
    expected = env | dict(
        zip(paths, ["PermissionError", "PermissionError", "FileNotFoundError"], strict=True)
    )
    v = run(sandbox, PAST_TRIPWIRE + reads, one(expected))
    assert reasons(v) == ["ok"], returned(sandbox, PAST_TRIPWIRE + reads)


def test_opening_a_socket(sandbox, forking):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(3)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            accepted.append(server.accept())

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        source = src(f"""
            import socket, _socket
            def f(x):
                out = []
                for make in (lambda: socket.create_connection(('127.0.0.1', {port}), timeout=1),
                             lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM),
                             lambda: _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM),
                             lambda: socket.socketpair()):
                    try:
                        make()
                        out.append('open')
                    except OSError as exc:
                        out.append(str(exc))
                return out
        """)
        v = run(
            sandbox,
            source,
            one(
                ["sandbox: socket.getaddrinfo is not allowed"]
                + ["sandbox: socket.__new__ is not allowed"] * 2
                + [
                    "[Errno 1] Operation not permitted"
                ]  # socketpair raises no audit event: the filter refuses it
            ),
        )
        assert reasons(v) == ["ok"], returned(sandbox, source)
        # past the tripwire the seccomp filter refuses socket() itself (EPERM), whatever the family
        raw = src(f"""
            import json, socket
            out = []
            for family, kind in ((socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_DGRAM),
                                 (socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW)):
                try:
                    s = socket.socket(family, kind)
                    s.connect(('127.0.0.1', {port}))
                    out.append('connected')
                except OSError as exc:
                    out.append(exc.errno)
            print(json.dumps(out))
        """)
        v = run(forking, unhooked(raw), one([1, 1, 1, 1]))
        assert reasons(v) == ["ok"], returned(forking, unhooked(raw))
    finally:
        server.close()
        thread.join()
    assert accepted == []


def test_sys_exit_before_the_tests(sandbox):
    v = run(sandbox, "import sys\nsys.exit(0)\ndef f(x):\n    return 2 * x\n")
    assert reasons(v) == ["exception"] * 3
    assert v.public[0].detail == "while loading the candidate: SystemExit: 0"


def test_sys_exit_inside_the_function(sandbox):
    v = run(sandbox, "import sys\ndef f(x):\n    sys.exit(0)\n")
    assert reasons(v) == ["exception"] * 3
    v = run(sandbox, "import sys\ndef f(x):\n    sys.exit(0)\n", CHECK_DOUBLE)
    assert reasons(v) == ["exception"] * 2
    assert v.public[0].detail == "CandidateError: SystemExit: 0"


def test_os_exit(sandbox):
    v = run(sandbox, "import os\nos._exit(0)\ndef f(x):\n    return 2 * x\n")
    assert reasons(v) == ["crash"] * 3
    v = run(sandbox, "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return 2 * x\n")
    assert reasons(v) == ["ok", "crash", "ok"]
    assert v.hidden[0].detail.startswith("crash (hidden test: detail withheld, hmac-sha256:")


def test_a_crash_costs_no_other_test(sandbox):
    """Consecutive call tests share one process, each on a freshly loaded module; a crash ends that process only,
    and the next test starts a new one (with a new /job): the log each process writes shows it."""
    source = src("""
        import os
        open('log', 'a').write('L')
        def f(x):
            open('log', 'a').write(str(x))
            if x == 2:
                os._exit(0)
            return open('log').read()
    """)
    task = code_task([CallTest((1,), {}, "L1")], [CallTest((2,), {}, 0), CallTest((5,), {}, "L5")])
    assert reasons(run(sandbox, source, task)) == ["ok", "crash", "ok"]


def test_state_outside_the_module_reaches_the_next_call_test(sandbox):
    """What really happens: the module is loaded afresh for each call test, so its globals and default arguments
    start over, but a job's call tests share one process, so its files, environment and builtins do not. A
    deliberate candidate can make a later test's answer depend on an earlier one (always in the same order, so the
    verdict stays deterministic); an honest one's accidental state (a mutable default) does not leak."""
    source = src("""
        import builtins, os
        def f(x, seen=[]):
            seen.append(x)
            builtins.calls = getattr(builtins, 'calls', 0) + 1
            os.environ['CALLS'] = os.environ.get('CALLS', '') + str(x)
            open('log', 'a').write(str(x))
            return [len(seen), builtins.calls, os.environ['CALLS'], open('log').read()]
    """)
    task = code_task([CallTest((1,), {}, [1, 1, "1", "1"]), CallTest((2,), {}, [1, 2, "12", "12"])], [])
    assert reasons(run(sandbox, source, task)) == ["ok", "ok"]


def test_killing_itself(sandbox):
    """A candidate is pid 1 of its pid namespace: the kernel drops signals it sends itself whose action is the
    default (SIGKILL and SIGSEGV included), so these calls simply return. A real fault still ends it: abort's
    SIGABRT is dropped too, and the C library then ends the process with a fault."""
    v = run(sandbox, "import signal\ndef f(x):\n    signal.raise_signal(signal.SIGKILL)\n")
    assert reasons(v) == ["wrong_answer"] * 3
    assert v.public[0].actual == "null"
    source = src("""
        import faulthandler, signal
        def f(x):
            signal.raise_signal(signal.SIGTERM)
            faulthandler._sigsegv()
            return 2 * x
    """)
    assert reasons(run(sandbox, source)) == ["ok"] * 3
    v = run(sandbox, "import os\ndef f(x):\n    return os.kill(os.getpid(), 9)\n", one(2))
    assert v.public[0].detail == "PermissionError: sandbox: os.kill is not allowed"
    v = run(sandbox, "import os\ndef f(x):\n    os.abort()\n", one(2))
    assert reasons(v) == ["crash"]
    assert v.public[0].detail == "killed by signal SIGSEGV"


def test_printing_fake_pass_lines(sandbox):
    source = src("""
        import os, sys
        def f(x):
            print('PASSED all tests')
            print('["value", 4]')
            print('{"t":"res","i":0,"status":"value","value":2}')
            sys.stdout.flush()
            for fd in range(3, 10):
                try:
                    os.write(fd, b'{"t":"res","i":1,"status":"value","value":4}\\n')
                except OSError:
                    pass
            return -1
    """)
    v = run(sandbox, source)
    # what it wrote on its reply pipe (fd 4) is its answer, and not one the protocol knows
    assert reasons(v) == ["wrong_answer"] * 3
    assert v.public[0].detail == "the reply is not a tagged JSON value (too large, too deep or garbled)"
    assert "PASSED all tests" in v.output


def test_always_equal_object(sandbox):
    source = "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\ndef f(x):\n    return Yes()\n"
    v = run(sandbox, source)
    assert reasons(v) == ["wrong_answer"] * 3
    assert v.public[0].detail == "a value of type Yes cannot be returned (only built-in data types)"
    v = run(sandbox, source, CHECK_DOUBLE)
    assert reasons(v) == ["wrong_answer"] * 2
    # subclasses of built-in types are refused too: they could carry an __eq__ of their own
    source = "class Two(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\ndef f(x):\n    return Two(0)\n"
    assert reasons(run(sandbox, source, CHECK_DOUBLE)) == ["wrong_answer"] * 2


def test_monkeypatching_builtins_and_the_harness(sandbox):
    source = src("""
        import builtins, json, __main__
        builtins.abs = lambda v: 0
        builtins.isinstance = lambda *a: True
        builtins.type = lambda *a: int
        json.dumps = lambda *a, **k: '["done"]'
        json.encoder.JSONEncoder.encode = lambda *a, **k: '["done"]'
        for name in list(vars(__main__)):
            if not name.startswith('__'):
                setattr(__main__, name, None)
        def f(x):
            return 0.0
    """)
    check = "def check(candidate):\n    assert abs(candidate(1) - 2.0) < 1e-9\n"
    # the payload in the candidate's process uses json, isinstance and its own globals: patching them breaks only
    # the candidate's own process, which cannot then say it loaded (with its module's ``os`` gone it cannot even
    # call os._exit: the exception ends it, code 1)
    v = run(sandbox, source, code_task([CheckTest(check)], [CallTest((2,), {}, 4)]))
    assert reasons(v) == ["crash", "crash"]
    assert v.public[0].detail == "while loading the candidate: the process exited with code 1"


def test_recursion_bomb(sandbox):
    v = run(sandbox, "def f(x):\n    return f(x)\n")
    assert reasons(v) == ["exception"] * 3
    assert v.public[0].detail == "RecursionError: maximum recursion depth exceeded"
    v = run(sandbox, "import sys\nsys.setrecursionlimit(10**9)\ndef f(x):\n    return f(x) + 1\n", one(2))
    # 3.11 keeps Python frames off the C stack: the frames fill memory until the CPU or the wall clock runs out
    assert reasons(v)[0] in ("exception", "crash", "timeout")


def test_an_infrastructure_failure_is_never_a_fail(monkeypatch):
    box = Sandbox(LIMITS, workers=1)
    try:

        def broken(*_a: object, **_k: object) -> list[str]:
            raise WallError("simulated: cannot start the zygote")

        monkeypatch.setattr(box._workers[0].zygote, "start", broken)  # pyright: ignore[reportPrivateUsage]
        v = grade(DOUBLE, "def f(x):\n    return 2 * x\n", box, extract=False)
    finally:
        monkeypatch.undo()
        box.close()
    assert v.infra_error == "sandbox infrastructure error: simulated: cannot start the zygote"
    assert reasons(v) == ["infra_error"] * 3
    assert not v.all_public
    assert not v.all_hidden


def test_runs_as_its_own_unprivileged_user(sandbox):
    source = "import os\ndef f(x):\n    return [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()]\n"
    uids = []
    for _ in range(2):
        v = run(sandbox, source, one(0))
        uid, euid, gid, groups = actual(v)  # type: ignore[misc]
        assert uid == euid == gid
        assert uid in job_uids(sandbox)
        assert groups == []
        uids.append(uid)
    assert uids[0] != uids[1], "two jobs never share a uid"


def test_the_standard_library_is_importable(sandbox):
    """The root holds the interpreter's prefix and the system libraries, reachable by a job's uid: a candidate may
    import any standard module, also one whose C extension loads a system library the zygote never loaded (sqlite3,
    lzma). bubblewrap makes the parents of its binds (/usr, /etc, /root, ...) mode 0700 unless told otherwise."""
    source = src("""
        import datetime, decimal, lzma, sqlite3, statistics, unicodedata, zoneinfo
        def f(x):
            return [str(datetime.date(2024, 2, 28) + datetime.timedelta(days=x)), statistics.median([1, 5, x]),
                    unicodedata.name('a'), str(decimal.Decimal('1.10') + 1), len(lzma.compress(b'a')) > 0,
                    sqlite3.connect(':memory:').execute('select 6 * 7').fetchone()[0]]
    """)
    v = run(sandbox, source, one(["2024-02-29", 1, "LATIN SMALL LETTER A", "2.10", True, 42]))
    assert reasons(v) == ["ok"], returned(sandbox, source)


# ========================================================= 1: secrets reachable inside the candidate's process

# A candidate that looks everywhere its process lets it: from a signal handler (which receives the interrupted frame
# and raises no audit event) up every frame to the payload's and the zygote's, their locals and globals, every
# module's namespace, and from each of those every object reachable through containers, instances, classes,
# closures and defaults; its environment and the files it knows of. It plants one string of the shape it hunts
# (so the hunt is shown to work) and reports what it found.
SCAN = r"""
import os, re, signal, sys

PATTERN = re.compile("(hidden|canary)-[0-9a-f]{32}")
PLANTED = "hidden-" + "ab" * 16
found = set()
seen = {"signals": 0, "frames": 0, "objects": 0}
visited = set()


def look(root):
    todo = [root]
    while todo:
        value = todo.pop()
        if id(value) in visited:
            continue
        visited.add(id(value))
        seen["objects"] += 1
        try:
            if isinstance(value, (bytes, bytearray)):
                value = bytes(value).decode("latin-1")
            if isinstance(value, str):
                found.update(m.group(0) for m in PATTERN.finditer(value))
            elif isinstance(value, dict):
                todo.extend(value.keys())
                todo.extend(value.values())
            elif isinstance(value, (list, tuple, set, frozenset)):
                todo.extend(value)
            elif callable(getattr(value, "__call__", None)) and hasattr(value, "__closure__"):
                todo.extend(c.cell_contents for c in value.__closure__ or ())
                todo.extend([value.__defaults__, value.__kwdefaults__, value.__globals__])
            elif hasattr(value, "__dict__"):
                todo.append(vars(value))
        except Exception:
            pass


def walk(frame):
    while frame is not None:
        seen["frames"] += 1
        look(frame.f_locals)
        look(frame.f_globals)
        frame = frame.f_back


def on_signal(signum, frame):
    seen["signals"] += 1
    try:
        walk(frame)  # the interrupted frame, and every frame above it: the payload's, the zygote's
    except BaseException:  # never break the payload it interrupted
        pass
    if signum == signal.SIGALRM and seen["signals"] < 20:
        signal.setitimer(signal.ITIMER_REAL, 0.001)  # once more, after this walk (a periodic timer can livelock)


signal.signal(signal.SIGALRM, on_signal)
signal.signal(signal.SIGUSR1, on_signal)
signal.setitimer(signal.ITIMER_REAL, 0.001)  # fires while loading, or while the payload waits for the call


def f(x):
    signal.setitimer(signal.ITIMER_REAL, 0, 0)
    signal.raise_signal(signal.SIGUSR1)  # a handler makes it count even for pid 1
    look(dict(sys.modules))
    look(dict(os.environ))
    look(list(sys.argv) + list(getattr(sys, "orig_argv", [])))
    for path in (CANARY_FILE, REPLAY_FILE, STORE_FILE):
        try:
            look(open(path, "rb").read())
        except OSError:
            pass
    others = sorted(found - {PLANTED})
    if x == 0:
        return {"planted_found": PLANTED in found, "others": others, "signals": seen["signals"] > 0,
                "frames": seen["frames"] > 3, "objects": seen["objects"] > 5000}
    return others[0] if others else None
"""

SCAN_REPORT = {"planted_found": True, "others": [], "signals": True, "frames": True, "objects": True}


def scan_source(secrets: Secrets) -> str:
    paths = f"CANARY_FILE = {str(secrets.canary_file)!r}\nREPLAY_FILE = {str(secrets.replay_file)!r}\n"
    return paths + f"STORE_FILE = {str(secrets.store_file)!r}\n" + SCAN


@pytest.fixture(scope="module")
def roomy(secrets: Secrets) -> Iterator[Sandbox]:
    """A sandbox with room for a walk over every reachable object (2 CPU seconds a test)."""
    with Sandbox(attrs.evolve(LIMITS, cpu_seconds=2.0, wall_seconds=4.0), workers=1) as box:
        yield box
    assert user_processes(box.uids) == []


def test_a_walk_from_signal_frames_finds_no_secret_in_call_tests(roomy, secrets):
    task = code_task([CallTest((0,), {}, SCAN_REPORT)], [CallTest((1,), {}, SECRET)])
    v = run(roomy, scan_source(secrets), task)
    assert reasons(v) == ["ok", "wrong_answer"], returned(roomy, scan_source(secrets), (0,))


def test_a_walk_from_signal_frames_finds_no_check_and_no_secret_in_checks(roomy, secrets):
    """The check (and the hidden value inside it) lives in the checker's process; the candidate's process holds
    only the arguments of its calls."""
    task = code_task(
        [CheckTest(f"def check(candidate):\n    assert candidate(0) == {SCAN_REPORT!r}\n")],
        [CheckTest(f"SECRET = {SECRET!r}\n\ndef check(candidate):\n    assert candidate(1) == SECRET\n")],
    )
    v = run(roomy, scan_source(secrets), task)
    assert reasons(v) == ["ok", "wrong_answer"], returned(roomy, scan_source(secrets), (0,))


def _memory_holds(pid: int, needles: tuple[bytes, ...]) -> set[bytes]:
    """Which needles are anywhere in the readable memory of process ``pid`` (read as root, from the host)."""
    found: set[bytes] = set()
    with Path(f"/proc/{pid}/maps").open() as maps, Path(f"/proc/{pid}/mem").open("rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if fields[1][0] != "r" or (len(fields) > 5 and fields[5].startswith("[v")):
                continue
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            with contextlib.suppress(OSError, ValueError):
                mem.seek(lo)
                data = mem.read(hi - lo)
                found.update(n for n in needles if n in data)
    return found


def test_no_secret_anywhere_in_the_candidates_memory(sandbox):
    """The definitive look, from outside: while the candidate is in a hidden check's call, the host reads every
    byte of its memory (which holds the zygote's too: the candidate is its copy). Neither the canary of the host's
    environment nor the hidden value is there; the checker server, where the check runs, holds the hidden value
    (the search works)."""
    task = code_task(
        [],
        [
            CheckTest(
                f"SECRET = {SECRET!r}\n\ndef check(candidate):\n    assert candidate(1) == len(SECRET)\n"
            )
        ],
    )
    seen: dict[str, set[bytes]] = {}

    def look() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not seen:
            pids = user_processes(job_uids(sandbox))
            if pids:
                time.sleep(0.2)  # in the call now
                needles = (SECRET.encode(), CANARY.encode())
                seen["candidate"] = set().union(*(_memory_holds(p, needles) for p in pids))
                checkers = user_processes(checker_uids(sandbox))
                seen["checker"] = set().union(*(_memory_holds(p, needles) for p in checkers))
            time.sleep(0.01)

    watcher = threading.Thread(target=look)
    watcher.start()
    v = run(sandbox, "import time\ndef f(x):\n    time.sleep(0.8)\n    return 0\n", task)
    watcher.join()
    assert reasons(v) == ["wrong_answer"]
    assert seen == {"candidate": set(), "checker": {SECRET.encode()}}


def test_the_tripwire_names_introspection(sandbox):
    """As written, frame and object introspection meet the tripwire, whose words are the verdict (evidence for the
    reward-hacking checks). Nothing secret lies behind it (the tests above go past it)."""
    cases = {
        "sys._getframe(1)": "ValueError: sandbox: frame access is not allowed",
        "gc.get_objects()": "PermissionError: sandbox: gc.get_objects is not allowed",
        "gc.get_referrers(f)": "PermissionError: sandbox: gc.get_referrers is not allowed",
        "sys._current_frames()": "PermissionError: sandbox: sys._current_frames is not allowed",
        "ctypes.CDLL(None)": "PermissionError: sandbox: ctypes.dlopen is not allowed",
        "f.__code__": "PermissionError: sandbox: object.__getattr__ is not allowed",
        "sys.settrace(print)": "PermissionError: sandbox: sys.settrace is not allowed",
    }
    for expr, detail in cases.items():
        v = run(sandbox, f"import ctypes, gc, sys\ndef f(x):\n    return str({expr})\n", one(2))
        assert [v.public[0].reason, v.public[0].detail] == ["exception", detail], expr


def test_forging_done_from_a_signal_handler(sandbox):
    """The old attack: from a signal handler, find the channel and write a pass for the pending check. The
    candidate's own pipe leads only to the checker, which reads it as a reply, never as a verdict."""
    source = src("""
        import os, signal
        def forge(signum, frame):
            for fd in range(3, 20):
                for line in (b'["done"]\\n', b'["loaded","ok"]\\n["done"]\\n', b'["value",2]\\n'):
                    try:
                        os.write(fd, line)
                    except OSError:
                        pass
        signal.signal(signal.SIGUSR1, forge)
        def f(x):
            signal.raise_signal(signal.SIGUSR1)
            return -1
    """)
    v = run(sandbox, source, CHECK_DOUBLE)
    assert reasons(v) == ["crash", "crash"]
    # (the checker gave up on the garbled reply; the candidate had ended, or was killed, by the time it was asked)
    assert v.public[0].detail in ("killed by signal SIGKILL", "the process exited with code 0")


# ======================================================================= 2: the check's namespace is its own

SHADOW = src("""
    import builtins, sys
    len = lambda *a: 3
    all = any = lambda *a: True
    sorted = lambda *a, **k: [1, 2, 3]
    abs = lambda v: 0
    isinstance = lambda *a: True
    def check(candidate):
        pass
    candidate = check
    # builtins the payload in the candidate's process does not use (patching those only breaks the candidate)
    for name in ('all', 'any', 'sorted'):
        setattr(builtins, name, globals()[name])
    builtins.AssertionError = type('AssertionError', (Exception,), {})
    sys.modules['builtins'].__dict__['sum'] = lambda *a: 6
    def f(x):
        return [0]
""")

SHADOWED_CHECK = """
def check(candidate):
    r = candidate(3)
    assert len(r) == 3
    assert sorted(r) == [1, 2, 3]
    assert all(isinstance(v, int) and v > 0 for v in r)
    assert abs(sum(r) - 6) < 1e-9
"""


def test_candidate_globals_and_builtins_do_not_reach_the_check(sandbox):
    v = run(sandbox, SHADOW, one_check(SHADOWED_CHECK))
    assert reasons(v) == ["wrong_answer"]
    assert v.public[0].detail == "AssertionError"


def test_stop_iteration_does_not_end_the_checks_loops(sandbox):
    """A candidate's StopIteration, re-raised inside ``map``, would end the iteration: ``all(map(...))`` would
    hold for a candidate that only raises it. It reaches the check as a CandidateError instead."""
    checks = [
        "def check(candidate):\n    assert all(map(lambda x: candidate(x) == 2 * x, [1, 2, 3]))\n",
        "def check(candidate):\n    assert list(map(candidate, [1, 2])) == [2, 4]\n",
        "def check(candidate):\n    assert not any(map(lambda x: candidate(x) != 2 * x, [1, 2]))\n",
    ]
    task = code_task([CheckTest(c) for c in checks], [])
    for exc in ("StopIteration", "StopAsyncIteration"):
        v = run(sandbox, f"def f(x):\n    raise {exc}\n", task)
        assert reasons(v) == ["exception"] * 3
        assert v.public[0].detail == f"CandidateError: {exc}"
    assert reasons(run(sandbox, "def f(x):\n    return 2 * x\n", task)) == ["ok"] * 3


def test_values_carry_no_behaviour_and_no_tag_confusion(sandbox):
    """A dict whose key looks like a tag stays a dict; a tuple stays a tuple; NaN is not equal to anything."""
    check = """
        def check(candidate):
            assert candidate(1) == (1, 2)
    """
    for body, reason in (
        ("return {'$t': [1, 2]}", "wrong_answer"),
        ("return [1, 2]", "wrong_answer"),
        ("return (1, 2)", "ok"),
        ("return float('nan')", "wrong_answer"),
        ("return {1, 2}", "wrong_answer"),
    ):
        v = run(sandbox, f"def f(x):\n    {body}\n", one_check(check))
        assert reasons(v) == [reason], body


# ====================================================================================== 3: the filesystem


def test_host_files_are_out_of_reach(sandbox, secrets):
    """The task bank, the replay file, the project tree, the store, the canary file, the host's /tmp, /var/tmp,
    /work, /root and /home: none is in the candidate's root (the tripwire lets reads through; the kernel answers)."""
    targets = {
        "bank": str(REPO / "tasks" / "code" / "add-days" / "001" / "task.json"),
        "fixture_bank": str(Path(__file__).parent / "fixtures" / "tasks"),
        "project": str(REPO / "pyproject.toml"),
        "replay": str(secrets.replay_file),
        "store": str(secrets.store_file),
        "store_dir": str(secrets.store_file.parent),
        "canary": str(secrets.canary_file),
        "tmp": "/tmp",
        "var_tmp": "/var/tmp",
        "home": "/home",
        "work": "/work",
        "root_history": "/root/.bash_history",
        "passwd": "/etc/passwd",
    }
    source = src(f"""
        import os
        TARGETS = {targets!r}
        def f(x):
            out = {{}}
            for name, path in TARGETS.items():
                try:
                    if os.path.isdir(path):
                        out[name] = os.listdir(path)
                    else:
                        with open(path, 'rb') as fh:
                            out[name] = fh.read().decode('latin-1')
                except OSError as exc:
                    out[name] = type(exc).__name__
            return out
    """)
    v = run(sandbox, source, one(dict.fromkeys(targets, "FileNotFoundError")))
    assert reasons(v) == ["ok"], returned(sandbox, source)


WRITES = src(f"""
    import os, sqlite3
    MARK = {MARK!r}
    def attempt(fn):
        try:
            fn()
            return 'done'
        except Exception as exc:
            return type(exc).__name__
    def f(x):
        root = os.open('/', os.O_RDONLY)
        job = os.open('/job', os.O_RDONLY)
        return {{
            'tmp': attempt(lambda: open('/tmp/' + MARK, 'w')),
            'var_tmp': attempt(lambda: open('/var/tmp/' + MARK, 'w')),
            'dev_shm': attempt(lambda: open('/dev/shm/' + MARK, 'w')),
            'dev': attempt(lambda: open('/dev/' + MARK, 'w')),
            'root': attempt(lambda: open('/' + MARK, 'w')),
            'usr': attempt(lambda: open('/usr/lib/' + MARK, 'w')),
            'dir_fd_root': attempt(lambda: os.open(MARK, os.O_CREAT | os.O_WRONLY, dir_fd=root)),
            'dir_fd_dotdot': attempt(lambda: os.open('../tmp/' + MARK, os.O_CREAT | os.O_WRONLY, dir_fd=job)),
            'mkdir_tmp': attempt(lambda: os.mkdir('/tmp')),
            'sqlite_tmp': attempt(lambda: sqlite3.connect('/tmp/' + MARK + '.db').execute('create table t(x)')),
            'sqlite_shm': attempt(lambda: sqlite3.connect('/dev/shm/' + MARK).execute('create table t(x)')),
            'symlink_out': attempt(lambda: os.symlink('/tmp/' + MARK, 'out') or open('out', 'w')),
            'symlink_root': attempt(lambda: os.symlink('/', 'r') or open('r/' + MARK, 'w')),
            'symlink_proc': attempt(lambda: os.symlink('/proc/1/root/usr', 'u') or open('u/' + MARK, 'w')),
            'hardlink': attempt(lambda: os.link('/etc/ld.so.cache', 'x')),
            'rename_out': attempt(lambda: open('a', 'w').close() or os.rename('a', '/' + MARK)),
            'job_file': attempt(lambda: open('/job/' + MARK, 'w').write('left behind')),
            'job_sqlite': attempt(lambda: sqlite3.connect('/job/' + MARK + '.db').execute('create table t(x)')),
        }}
""")


def test_writes_outside_the_job_fail_and_leave_nothing(sandbox):
    """Writes by path, by dir_fd, by sqlite3 (which opens files in C, past any audit hook), by symlink, hard link
    and rename: as written the tripwire refuses most; past it the kernel refuses all (no /tmp, a read-only root,
    no link across mounts). Only /job is writable, and /job dies with the job."""
    tripwire = {
        "tmp": "PermissionError",
        "var_tmp": "PermissionError",
        "dev_shm": "PermissionError",
        "dev": "PermissionError",
        "root": "PermissionError",
        "usr": "PermissionError",
        "dir_fd_root": "OSError",
        "dir_fd_dotdot": "PermissionError",
        "mkdir_tmp": "PermissionError",
        "sqlite_tmp": "OperationalError",
        "sqlite_shm": "OperationalError",
        "symlink_out": "PermissionError",
        "symlink_root": "PermissionError",
        "symlink_proc": "PermissionError",
        "hardlink": "PermissionError",
        "rename_out": "PermissionError",
        "job_file": "done",
        "job_sqlite": "done",
    }
    v = run(sandbox, WRITES, one(tripwire))
    assert reasons(v) == ["ok"], returned(sandbox, WRITES)
    kernel = tripwire | {
        "tmp": "FileNotFoundError",
        "var_tmp": "FileNotFoundError",
        "dev_shm": "OSError",
        "dev": "OSError",
        "root": "OSError",
        "usr": "OSError",
        "dir_fd_dotdot": "FileNotFoundError",
        "mkdir_tmp": "OSError",
        "symlink_out": "FileNotFoundError",
        "symlink_root": "OSError",
        "symlink_proc": "OSError",
        "hardlink": "OSError",
        "rename_out": "OSError",
    }
    v = run(sandbox, PAST_TRIPWIRE + WRITES, one(kernel))
    assert reasons(v) == ["ok"], returned(sandbox, PAST_TRIPWIRE + WRITES)
    assert host_leftovers() == []


def test_proc_shows_only_the_job(sandbox):
    """/proc (past the tripwire, by path or through a dir_fd) is the job's own: one process, no way to the host's
    pids or to host paths."""
    source = PAST_TRIPWIRE + src(f"""
        import os
        def f(x):
            proc = os.open('/proc', os.O_RDONLY)
            pids = sorted(n for n in os.listdir(proc) if n.isdigit())
            mountinfo = open('/proc/self/mountinfo').read()
            def attempt(fn):
                try:
                    return fn()
                except OSError as exc:
                    return type(exc).__name__
            return {{
                'pids': pids,
                'host': attempt(lambda: os.open('{HOST_PID}', os.O_RDONLY, dir_fd=proc)),
                'root_of_1': sorted(os.listdir('/proc/1/root')) == sorted(os.listdir('/')),
                'mem': attempt(lambda: open('/proc/1/mem', 'rb').read(1)),
                'writable_mounts': sorted(line.split()[4] for line in mountinfo.splitlines()
                                          if line.split()[5].startswith('rw')),
                'host_paths': [p for p in ('/work', '/home', '/tmp', 'pytest') if p in mountinfo],
            }}
    """)
    expected = {
        "pids": ["1"],
        "host": "FileNotFoundError",
        "root_of_1": True,
        "mem": "PermissionError",
        # /proc (the job's own), the device nodes bubblewrap binds (null, zero, ...), /dev/pts, /job
        "writable_mounts": [
            *("/dev/full", "/dev/null", "/dev/pts", "/dev/random", "/dev/tty", "/dev/urandom", "/dev/zero"),
            *("/job", "/proc", "/proc"),
        ],
        "host_paths": [],
    }
    v = run(sandbox, source, one(expected))
    assert reasons(v) == ["ok"], returned(sandbox, source)


def test_devices(sandbox):
    """The device nodes there are behave as devices; none can be made, and there is no terminal to reach."""
    source = PAST_TRIPWIRE + src("""
        import os
        def attempt(fn):
            try:
                return fn()
            except OSError as exc:
                return type(exc).__name__
        def f(x):
            return {
                'null': attempt(lambda: open('/dev/null', 'w').write('x')),
                'full': attempt(lambda: os.write(os.open('/dev/full', os.O_WRONLY), b'x')),
                'zero': attempt(lambda: len(open('/dev/zero', 'rb').read(8))),
                'tty': attempt(lambda: os.open('/dev/tty', os.O_RDWR)),
                'mknod': attempt(lambda: os.mknod('/job/n')),
                'mkfifo': attempt(lambda: os.mkfifo('/job/p')),
                'listing': sorted(os.listdir('/dev')),
            }
    """)
    devices = [
        "core",
        "fd",
        "full",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
    ]
    expected = {
        "null": 1,
        "full": "OSError",
        "zero": 8,
        "tty": "OSError",
        "mknod": "PermissionError",
        "mkfifo": "PermissionError",
        "listing": sorted([*devices, "urandom", "zero"]),
    }
    v = run(sandbox, source, one(expected))
    assert reasons(v) == ["ok"], returned(sandbox, source)


def test_a_deep_directory_tree_is_not_an_infrastructure_error(sandbox):
    """1,500 nested directories (the old sandbox's recursive cleanup died on them): the job passes, and its tree
    goes with its tmpfs, whatever its shape."""
    source = src("""
        import os
        def f(x):
            fd = os.open('/job', os.O_RDONLY)
            for i in range(1500):
                os.mkdir('d', dir_fd=fd)
                new = os.open('d', os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd = new
            open('leaf', 'w', opener=lambda p, fl: os.open(p, fl, dir_fd=fd)).write('x')
            return 2 * x
    """)
    start = time.monotonic()
    v = run(sandbox, source, one(2))
    assert reasons(v) == ["ok"], v.public[0]
    assert time.monotonic() - start < 5


# ============================================== 4: whatever a candidate does is its verdict, never the harness's

# (an expression for what the candidate writes on its reply pipe, fd 4, in place of its answer; the reason in a call
# test; the reason in a check, where the checker reads it)
_COLLIDING = "b','.join(b'%d' % (k * ((1 << 61) - 1)) for k in range(1, 40_000))"
GARBAGE = {
    "deep": ("b'[' * 200_000 + b'\\n'", "wrong_answer", "wrong_answer"),
    "deep_objects": ("b'{\"a\":' * 5000 + b'1' + b'}' * 5000 + b'\\n'", "wrong_answer", "wrong_answer"),
    "nan_literal": ("b'[\"value\",NaN]\\n'", "wrong_answer", "wrong_answer"),
    "nan_tag": ('b\'["value",{"$f":"nan"}]\\n\'', "wrong_answer", "wrong_answer"),
    "huge_float": ("b'[\"value\",1e999]\\n'", "wrong_answer", "wrong_answer"),
    "huge_int": ("b'[\"value\",1' + b'0' * 5000 + b']\\n'", "wrong_answer", "wrong_answer"),
    "not_utf8": ("b'\\xff\\xfe\\x00garbage\\n'", "wrong_answer", "wrong_answer"),
    "empty_list": ("b'[]\\n'", "wrong_answer", "crash"),
    "short": ("b'[\"value\"]\\n'", "wrong_answer", "crash"),
    "forged_done": ("b'[\"done\"]\\n'", "wrong_answer", "crash"),
    "unknown_tag": ('b\'["value",{"$x":1}]\\n\'', "wrong_answer", "wrong_answer"),
    "bad_base64": ('b\'["value",{"$b":"!!!"}]\\n\'', "wrong_answer", "wrong_answer"),
    "unhashable": ('b\'["value",{"$s":[[1]]}]\\n\'', "wrong_answer", "wrong_answer"),
    "newlines": ("b'\\n' * 100_000", "wrong_answer", "wrong_answer"),
    "oversized": ("b'7' * (2 << 20)", "wrong_answer", "crash"),
    "colliding_set": (
        f"b'[\"value\",{{\"$s\":[' + {_COLLIDING} + b']}}]\\n'",
        "wrong_answer",
        "wrong_answer",
    ),
    "colliding_dict": (
        "b'[\"value\",{\"$d\":[' + b','.join(b'[%d,0]' % (k * ((1 << 61) - 1)) for k in range(1, 30_000)) + b']}]\\n'",
        "wrong_answer",
        "wrong_answer",
    ),
}


def garbage_source(payload: str, *, at_load: bool = False) -> str:
    if at_load:
        return f"import os, time\nos.write(4, {payload})\ntime.sleep(30)\ndef f(x):\n    return 2 * x\n"
    return f"import os, time\ndef f(x):\n    os.write(4, {payload})\n    time.sleep(30)\n"


@pytest.mark.parametrize("name", list(GARBAGE))
def test_garbage_on_the_reply_pipe(sandbox, name):
    """Every malformed reply is the candidate's failing verdict, decided at once (no wall clock waited out) and
    in linear time (a set of ints that all hash alike cost the host seconds of CPU with the GIL held)."""
    payload, call_reason, check_reason = GARBAGE[name]
    start = time.monotonic()
    v = run(sandbox, garbage_source(payload), one(2))
    assert reasons(v) == [call_reason], v.public[0]
    v = run(sandbox, garbage_source(payload), CHECK_DOUBLE)
    assert reasons(v) == [check_reason] * 2, v.public[0]
    assert time.monotonic() - start < 2 * LIMITS.wall


@pytest.mark.parametrize("name", ["deep", "not_utf8", "forged_done", "oversized", "colliding_set"])
def test_garbage_in_place_of_the_load_status(sandbox, name):
    payload = GARBAGE[name][0]
    v = run(sandbox, garbage_source(payload, at_load=True), DOUBLE)
    assert reasons(v) == ["crash"] * 3
    v = run(sandbox, garbage_source(payload, at_load=True), CHECK_DOUBLE)
    assert reasons(v) == ["crash"] * 2


def test_returned_values_that_cannot_cross(sandbox):
    cases = {
        "eval('[' * 150 + ']' * 150)": "value nested too deeply",
        "float('nan')": "return value contains a non-finite float (nan)",
        "10 ** 5000": "integer too large",
        "'x' * (2 << 20)": f"return value larger than {1 << 20} bytes",
        "{1: 2}": "return value has a dict key that is not a string",
        "lambda: 1": "a value of type function cannot be returned (only built-in data types)",
    }
    for expr, detail in cases.items():
        v = run(sandbox, f"def f(x):\n    return {expr}\n", one(2))
        assert reasons(v) == ["wrong_answer"], expr
        assert v.public[0].detail == detail, expr


def test_sleeps_that_outlast_the_budget(sandbox):
    # sleeping while loading: one wall clock for loading, then every test has the load's verdict
    v = run(sandbox, "import time\ntime.sleep(60)\ndef f(x):\n    return 2 * x\n")
    assert reasons(v) == ["timeout"] * 3
    assert v.public[0].detail == "while loading the candidate: wall clock (1.5s) exceeded while loading"
    # sleeping after replying (in a signal handler that runs once the reply is written): the reply counts
    source = src("""
        import signal, time
        signal.signal(signal.SIGALRM, lambda *a: time.sleep(60))
        def f(x):
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return 2 * x
    """)
    start = time.monotonic()
    assert reasons(run(sandbox, source, one(2))) == ["ok"]
    assert time.monotonic() - start < LIMITS.wall


def test_one_budget_a_test_loading_included(sandbox):
    """Consecutive call tests share a process and reload the module inside their own budget; the first test's
    budget must cover its loading too, or the same work passes as the first test and times out as the second (it
    did: 0.35 s of CPU to load and 0.35 s to answer, with 0.5 s a test, gave ok, timeout, ok)."""
    spin = "import time\ndef spin(s):\n    end = time.process_time() + s\n    while time.process_time() < end:\n        pass\n"
    heavy = spin + "spin(0.35)\ndef f(x):\n    spin(0.35)\n    return 2 * x\n"
    light = spin + "spin(0.15)\ndef f(x):\n    spin(0.15)\n    return 2 * x\n"
    # the CPU budget alone: a wall clock too long to matter, so a loaded machine (0.3 s of CPU can take more than
    # 1.5 s of wall time there) does not turn the light candidate's ok into a wall-clock timeout
    with Sandbox(attrs.evolve(LIMITS, wall_seconds=60.0), workers=1) as cpu_only:
        v = run(cpu_only, heavy)
        assert reasons(v) == ["timeout"] * 3
        assert v.public[0].detail == "CPU time limit exceeded"
        assert reasons(run(cpu_only, light)) == ["ok"] * 3
    # the same for the wall clock: 0.9 s asleep to load and 0.9 s to answer, with 1.5 s a test
    slow = "import time\ntime.sleep(0.9)\ndef f(x):\n    time.sleep(0.9)\n    return 2 * x\n"
    v = run(sandbox, slow, code_task([CallTest((1,), {}, 2)], [CallTest((2,), {}, 4)]))
    assert reasons(v) == ["timeout"] * 2
    assert v.public[0].detail == "wall clock (1.5s) exceeded"


def test_descriptor_tricks(sandbox):
    cases = [
        # the reply pipe closed: the payload cannot answer and ends
        ("import os\ndef f(x):\n    os.close(4)\n    return 2 * x\n", ["crash"]),
        # the reply pipe moved onto stdout: the answer goes to the output, the reply pipe is closed
        ("import os\ndef f(x):\n    os.dup2(1, 4)\n    return 2 * x\n", ["crash"]),
        # stdout moved onto the reply pipe: what it prints is its reply
        (
            "import os\ndef f(x):\n    os.dup2(4, 1)\n    print('hello', flush=True)\n    return 2 * x\n",
            ["wrong_answer"],
        ),
        # the call pipe closed after the call arrived: nothing more to read, the answer counts
        ("import os\ndef f(x):\n    os.close(3)\n    return 2 * x\n", ["ok"]),
        # every descriptor closed, then it waits
        ("import os, time\ndef f(x):\n    os.closerange(0, 64)\n    time.sleep(30)\n", ["crash"]),
    ]
    for source, expected in cases:
        v = run(sandbox, source, one(2))
        assert reasons(v) == expected, source



# Every descriptor below 4096, with what it is.
DESCRIPTORS = src("""
    import os
    def f(x):
        fds = {}
        for fd in range(4096):
            try:
                os.fstat(fd)
            except OSError:
                continue
            try:
                fds[str(fd)] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError as exc:
                fds[str(fd)] = repr(exc)
        return fds
""")


def test_a_candidate_holds_no_descriptor_but_its_job_s(sandbox):
    """A candidate's process has its job's descriptors and nothing else: not its zygote's control socket, nor the
    memory file the zygote's compiled program came in, nor a descriptor of another job (in a call test and under
    a check, where fds 3 and 4 lead to the checker)."""
    fds = json.loads(returned(sandbox, DESCRIPTORS))
    assert sorted(fds) == ["0", "1", "2", "3", "4"], fds
    assert fds["0"] == "/dev/null"
    assert all(fds[k].startswith("pipe:") for k in ("1", "2", "3", "4")), fds
    check = """
        def check(candidate):
            fds = candidate(1)
            assert sorted(fds) == ["0", "1", "2", "3", "4"], fds
            assert fds["0"] == "/dev/null", fds
            assert all(fds[k].startswith("pipe:") for k in "1234"), fds
    """
    v = run(sandbox, DESCRIPTORS, one_check(check))
    assert reasons(v) == ["ok"], v

# =============================================================== 5: candidates harming other candidates

# Started past the tripwire: a daemon (double fork, new session) that holds 200 MiB and, for as long as it lives,
# signals every pid it can name (its namespace's, the host's), every process group, and tries pidfds.
HARM = src(f"""
    import ctypes, os, signal, time
    libc = ctypes.CDLL(None, use_errno=True)
    def harm():
        for pid in list(range(1, 400)) + [{HOST_PID}]:
            for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGUSR1):
                try:
                    if pid != os.getpid():
                        os.kill(pid, sig)
                except OSError:
                    pass
        for target in (-1, -{HOST_PID}):
            libc.kill(target, signal.SIGUSR1)
        for pid in (1, 2, {HOST_PID}):
            libc.syscall(434, pid, 0)  # pidfd_open
            libc.syscall(424, pid, 9, None, 0)  # pidfd_send_signal
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            hold = bytearray(200 << 20)
            for i in range(0, len(hold), 4096):
                hold[i] = 1
            while True:
                harm()
                time.sleep(0.01)
        os._exit(0)
    harm()
""")
ATTACKER = unhooked(HARM, wait=False, linger=1.0)
VICTIM = "import time\ndef f(x):\n    time.sleep(0.8)\n    return 2 * x\n"


def test_a_job_cannot_signal_other_jobs_or_the_host(pair):
    with host_signals() as got:
        runs = grade_many(
            [(one(2), ATTACKER), (DOUBLE, VICTIM), (DOUBLE, VICTIM), (one(2), ATTACKER)], pair, extract=False
        )
    assert got == []
    assert [reasons(v) for v in runs] == [["ok"], ["ok"] * 3, ["ok"] * 3, ["ok"]]
    assert_clean(pair, *runs)


def test_the_zygote_s_program_and_the_interpreter_s_bytecode_are_out_of_reach(forking):
    """Past every recorder in the process (a fresh interpreter of its own, no audit hook): the kernel alone keeps a
    job from evalkit's own directory, where the zygote's compiled program is cached (it does not exist in the
    jail), and from the interpreter's bytecode, which a job could otherwise poison for the jobs after it."""
    import sysconfig

    import evalkit.wall._zygote

    package = Path(evalkit.wall._zygote.__file__).parent
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    targets = [
        (str(package), "os.O_RDONLY"),
        (str(package / "__pycache__" / "wall-zygote.bin"), "os.O_WRONLY | os.O_CREAT"),
        (str(stdlib / "__pycache__" / "random.cpython-311.pyc"), "os.O_WRONLY | os.O_CREAT"),
        (str(stdlib / "random.py"), "os.O_WRONLY | os.O_APPEND"),
    ]
    code = "import json, os\nout = {}\n" + "".join(
        f"try:\n    os.close(os.open({path!r}, {mode}, 0o644))\n    out[{path!r}] = 'opened'\n"
        f"except OSError as e:\n    out[{path!r}] = e.errno\n"
        for path, mode in targets
    ) + "print(json.dumps(out))\n"
    got = json.loads(returned(forking, unhooked(code)))
    assert got[str(package)] == errno.ENOENT, got
    assert got[targets[1][0]] == errno.ENOENT, got
    assert got[targets[2][0]] in (errno.EACCES, errno.EROFS), got
    assert got[targets[3][0]] in (errno.EACCES, errno.EROFS), got

def test_a_daemon_dies_with_its_job(forking):
    """The daemon (setsid, double fork, 200 MiB held) is gone once the job's verdict is in: its pid namespace went
    down with the job's first process."""
    v = grade(one(2), ATTACKER, forking, extract=False)
    assert reasons(v) == ["ok"]
    assert_clean(forking, v)


def test_exhausting_processes(forking):
    """Past the tripwire a fork bomb meets RLIMIT_NPROC at ``processes`` (the candidate, its interpreter and two
    more); the next job on the worker starts as usual, and none of the bomb's processes is left."""
    bomb = src("""
        import json, os, time
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    os.close(1)
                    os.close(2)
                    time.sleep(30)
                n += 1
        except OSError as exc:
            print(json.dumps([n, exc.errno]))
    """)
    runs = [
        grade(one(v), s, forking, extract=False)
        for v, s in (([2, 11], unhooked(bomb)), (2, "def f(x):\n    return 2 * x\n"))
    ]
    assert [reasons(v) for v in runs] == [["ok"], ["ok"]], returned(forking, unhooked(bomb))
    assert_clean(forking, *runs)


def test_workers_outlive_the_threads_that_started_them():
    """A zygote started from a thread (prestart's, or a thread-pool worker of run_many) must not end with that
    thread: bubblewrap's --die-with-parent signals when the starting *thread* ends, which killed every zygote after
    each run_many, and its jobs were then torn down after ``settle`` had returned."""
    job = SandboxJob("def f(x):\n    return 2 * x\n", "f", ({"args": [1], "kwargs": {}},))
    with Sandbox(LIMITS, workers=2) as box:
        box.prestart()
        for thread in box._starters:  # pyright: ignore[reportPrivateUsage]
            thread.join()
        time.sleep(0.2)
        zygotes = [w.zygote for w in box._workers]  # pyright: ignore[reportPrivateUsage]
        assert [z.running for z in zygotes] == [True, True]
        first = [z._proc.pid for z in zygotes if z._proc is not None]  # pyright: ignore[reportPrivateUsage]
        for _ in range(2):
            assert [r.tests[0].value for r in box.run_many([job] * 4)] == [2] * 4
            time.sleep(0.2)
            assert [z.running for z in zygotes] == [True, True]
        assert [z._proc.pid for z in zygotes if z._proc is not None] == first  # pyright: ignore[reportPrivateUsage]
    assert user_processes(box.uids) == []


def test_closing_a_sandbox_ends_every_zygote_checker_and_job():
    """close() hangs up on every zygote at once, then waits for each: when it returns, no zygote, checker server
    or job of the sandbox is left. Jobs whose verdict is known are killed but not yet collected; these hold memory,
    so that their end takes a while (a zygote that ended without waiting for its killed jobs left them dying after
    close had returned, in most runs)."""
    big = "BIG = bytearray(150 << 20)\ndef f(x):\n    return 2 * x\n"
    check = SandboxJob(big, "f", ({"check": "def check(c):\n    assert c(1) == 2\n"},))
    call = SandboxJob(big, "f", ({"args": [1], "kwargs": {}},))
    # time enough to fill 150 MiB on a loaded machine: the verdicts are not what this test is about
    with Sandbox(attrs.evolve(LIMITS, cpu_seconds=3.0, wall_seconds=20.0), workers=2) as box:
        runs = box.run_many([check, call] * 3)
        assert [r.tests[0].status for r in runs] == ["done", "value"] * 3
        zygotes = [w.zygote.pid for w in box._workers]  # pyright: ignore[reportPrivateUsage]
        assert all(pid is not None and Path(f"/proc/{pid}").exists() for pid in zygotes)
        if box.uids:
            assert user_processes(box.uids)  # the checker servers, at least
    assert [pid for pid in zygotes if Path(f"/proc/{pid}").exists()] == []
    assert user_processes(box.uids) == []


def test_a_thread_still_inside_a_job_when_the_sandbox_closes_starts_no_new_jail():
    """A grading thread its caller abandoned (an interrupt, an error elsewhere) may reach a worker after close():
    the worker must not start a zygote or a checker again. Such a jail outlived its sandbox, and its uids, given
    back with the sandbox's block, were then another sandbox's: seen as processes of later jobs, in a full run."""
    call = SandboxJob("def f(x):\n    return 2 * x\n", "f", ({"args": [1], "kwargs": {}},))
    box = Sandbox(LIMITS, workers=1)
    assert box.run(call).tests[0].status == "value"
    box.close()
    worker = box._workers[0]  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(WallError, match="closed"):
        worker.ensure()
    with pytest.raises(WallError, match="closed"):
        worker.start_checker()
    late = worker.run(call)  # what the abandoned thread gets: an infrastructure verdict, and no process
    assert late.infra_error is not None and "closed" in late.infra_error
    assert worker.zygote.pid is None or not Path(f"/proc/{worker.zygote.pid}").exists()
    assert user_processes(box.uids) == []


HOST_DIES = """
import json, threading, time
from evalkit.wall._sandbox import Sandbox, SandboxJob, SandboxLimits, user_processes
box = Sandbox(SandboxLimits(cpu_seconds=0.5, wall_seconds=60), workers=1)
job = SandboxJob("import time\\ndef f(x):\\n    time.sleep(600)\\n", "f", ({"args": [1], "kwargs": {}},))
threading.Thread(target=box.run, args=(job,), daemon=True).start()
while not user_processes(box.uids):
    time.sleep(0.05)
print(json.dumps([box.uids[0], box.uids[-1]]), flush=True)
time.sleep(600)
"""


def test_jobs_end_when_the_host_ends():
    """The harness killed outright (no close, no finally): its zygote sees end of file on its control socket and
    ends, and every job with it."""
    with subprocess.Popen([sys.executable, "-c", HOST_DIES], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready, "the harness did not start its job"
            lo, hi = json.loads(proc.stdout.readline())
            uids = range(lo, hi + 1)
            assert user_processes(uids) != []
        finally:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while user_processes(uids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert user_processes(uids) == []


# Left behind by the first job, looked for by the second. The SysV segment, the POSIX message queue and the pty are
# made in an unhooked interpreter (ctypes), which stays while the other job looks when LINGER is set.
LEAVE = src(f"""
    import ctypes, json, os, time
    libc = ctypes.CDLL(None, use_errno=True)
    MARK = {MARK!r}
    shm = libc.shmget(0xE7A1, 4096, 0o1000 | 0o666)  # IPC_CREAT
    pty = os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY)
    mq = libc.mq_open(('/' + MARK).encode(), os.O_CREAT | os.O_RDWR, 0o666, None)
    try:  # POSIX shared memory lives in /dev/shm, read-only here
        import _posixshmem
        posix_shm = _posixshmem.shm_open('/' + MARK, os.O_CREAT | os.O_RDWR, 0o666) >= 0
    except OSError as exc:
        posix_shm = exc.errno
    open('/job/' + MARK, 'w').write(MARK)
    print(json.dumps([shm >= 0, pty >= 0, mq >= 0 or ctypes.get_errno(), posix_shm]), flush=True)
    if os.environ.get('LINGER'):
        time.sleep(1.0)
""")
LEFT = [True, True, True, 30]  # (30: EROFS)

LOOK = src(f"""
    import ctypes, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    print(json.dumps({{
        'shm': libc.shmget(0xE7A1, 0, 0),
        'mq': libc.mq_open(('/' + {MARK!r}).encode(), os.O_RDWR),
        'sysvipc': open('/proc/sysvipc/shm').read().count(chr(10)),
        'pts': sorted(os.listdir('/dev/pts')),
        'procs': sorted(p for p in os.listdir('/proc') if p.isdigit()),
        'job': os.listdir('/job'),
    }}))
""")

# (what the second job sees in its own process, added to LOOK's findings)
LOOK_HERE = src("""
    import os, signal
    result['env'] = sorted(k for k in os.environ if k not in ('PATH', 'LANG', 'HOME', 'TMPDIR'))
    result['usr1'] = signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
""")


def leave(*, linger: bool) -> str:
    """The first job: an environment variable and a signal disposition in its own process, the rest via LEAVE."""
    here = f"os.environ['LEFT_BEHIND'] = {MARK!r}\nimport signal\nsignal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
    code = ("import os\nos.environ['LINGER'] = '1'\n" if linger else "") + LEAVE
    return unhooked(code, before=here)


# the second job's process is pid 1, its unhooked interpreter pid 2; the first line of /proc/sysvipc/shm is a header
NOTHING_FOUND = {
    "shm": -1,
    "mq": -1,
    "sysvipc": 1,
    "pts": ["ptmx"],
    "procs": ["1", "2"],
    "job": [],
    "env": [],
    "usr1": True,
}


def test_a_job_leaves_nothing_for_the_next_one(forking):
    """In sequence on one worker: a file in /job, environment variables, a signal disposition, a SysV segment, a
    POSIX message queue, a pty; the next job finds none of them."""
    first = grade(one(LEFT), leave(linger=False), forking, extract=False)
    second = grade(one(NOTHING_FOUND), unhooked(LOOK, after=LOOK_HERE), forking, extract=False)
    assert reasons(first) == ["ok"], returned(forking, leave(linger=False))
    assert reasons(second) == ["ok"], returned(forking, unhooked(LOOK, after=LOOK_HERE))
    assert_clean(forking, first, second)


def test_jobs_running_side_by_side_cannot_meet(pair):
    """Side by side on two workers: the first keeps its SysV segment, queue, pty and files alive while the second
    looks; IPC and mount namespaces are per job, and sockets (abstract unix ones included) cannot be made at all."""
    sockets = src(f"""
        import json, socket
        out = []
        for make in (lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind('\\0' + {MARK!r}),
                     lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).connect('\\0' + {MARK!r})):
            try:
                make()
                out.append('done')
            except OSError as exc:
                out.append(exc.errno)
        print(json.dumps(out))
    """)
    seeker = unhooked(LOOK, before="time.sleep(0.3)", after=LOOK_HERE)
    runs = grade_many(
        [
            (one(LEFT), leave(linger=True)),
            (one(NOTHING_FOUND, (2,)), seeker),
            (one([1, 1]), unhooked(sockets)),
        ],
        pair,
        extract=False,
    )
    assert [reasons(v) for v in runs] == [["ok"]] * 3, [v.public[0] for v in runs]
    assert_clean(pair, *runs)


# ============================================================ 6: the result reader (the host) on hostile replies

_M61 = (1 << 61) - 1


def test_the_result_reader_refuses_colliding_members_in_linear_time():
    """Ints that are multiples of 2**61 - 1 all hash to 0; 40,000 of them in a set cost about 10 s of CPU in one
    C call holding the GIL. The reader refuses them before building anything."""
    line = ('["value",{"$s":[' + ",".join(str(k * _M61) for k in range(1, 40_000)) + "]}]").encode()
    start = time.process_time()
    run = _call_result(line)
    assert time.process_time() - start < 0.5
    assert run.status == "bad_return"
    with pytest.raises(TaggedError, match="more than 32 set members or dict keys with one hash"):
        tagged_decode(line)
    # values of honest sets and dicts are untouched (1 and True are equal, -1 and -2 share a hash)
    assert tagged_decode('{"$s":[-1,-2,3]}') == {-1, -2, 3}
    assert tagged_decode('{"$d":[[1,"a"],[-1,"b"],[-2,"c"]]}') == {1: "a", -1: "b", -2: "c"}


def test_colliding_replies_do_not_stall_the_grader(pair):
    """Decoding such a set took one C call holding the GIL for about 10 s, during which no worker of the grader
    moved: two of them cost this grade_many about two minutes; refused, they cost nothing."""
    attacker = garbage_source(GARBAGE["colliding_set"][0])
    start = time.monotonic()
    runs = grade_many(
        [(one(2), attacker), (one(2), VICTIM), (one(2), attacker), (one(2), VICTIM)], pair, extract=False
    )
    assert time.monotonic() - start < 3 * FORKING.wall
    assert [reasons(v) for v in runs] == [["wrong_answer"], ["ok"], ["wrong_answer"], ["ok"]]
    assert_clean(pair, *runs)


# ============================================================================ 7: hidden values stay hidden


def test_hidden_expected_values_cannot_be_recovered_from_results(sandbox):
    """Hidden verdicts carry digests keyed with the hidden tests: trying values against them finds nothing (a
    plain digest of "expected 777", or of a passed test's output "778", gives the value away)."""
    task = code_task([], [CallTest((1,), {}, 777), CallTest((2,), {}, 778)])
    v = run(sandbox, "def f(x):\n    return 776 + x if x == 2 else 0\n", task)
    assert reasons(v) == ["wrong_answer", "ok"]
    failed, passed = v.hidden
    assert re.fullmatch(
        r"wrong_answer \(hidden test: detail withheld, hmac-sha256:[0-9a-f]{64}\)", failed.detail
    )
    assert re.fullmatch(r"hmac-sha256:[0-9a-f]{64}", failed.actual or "")
    assert re.fullmatch(r"hmac-sha256:[0-9a-f]{64}", passed.actual or "")
    text = json.dumps(v.to_json())
    for n in range(-1000, 1001):
        for guess in (f"expected {n}", str(n)):
            assert digest(guess) not in text
            assert hashlib.sha256(guess.encode()).hexdigest() not in text
    again = grade(task, "def f(x):\n    return 776 + x if x == 2 else 0\n", sandbox, extract=False)
    assert again.to_json() == v.to_json(), "the keyed digests are deterministic"


def test_what_a_candidate_says_in_hidden_tests_is_withheld(sandbox):
    """A hidden test's arguments, a hidden check's messages and whatever the candidate raised or returned stay out
    of the results (the captured output is not part of them)."""
    task = code_task(
        [],
        [
            CallTest((SECRET,), {}, 0),
            CheckTest(f"def check(candidate):\n    assert candidate(1) == 2, {SECRET!r}\n"),
        ],
    )
    for source, expected in (
        ("def f(x):\n    raise ValueError(repr(x))\n", ["exception", "exception"]),
        ("def f(x):\n    return x\n", ["wrong_answer", "wrong_answer"]),
    ):
        v = grade(task, source, sandbox, extract=False)
        assert reasons(v) == expected
        assert SECRET not in json.dumps(v.to_json())
    assert_clean(sandbox)


# ====================================================================================== not named anywhere


def test_syscalls_the_filter_refuses(forking):
    """Past the tripwire, with ctypes: ptrace, process_vm_readv, io_uring, unshare, setns, mount, chroot, bpf,
    keyctl, perf_event_open, userfaultfd, pidfd_*, kcmp, socket, mknod, the new mount API: each answered EPERM by
    the seccomp filter; clone3 ENOSYS, clone into a new namespace EPERM, kill(-1) EPERM; no higher priority and no
    real-time scheduling (no capability left)."""
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers are x86_64's")
    calls = {
        "ptrace": (101, 16, 1, 0, 0),  # PTRACE_ATTACH pid 1
        "process_vm_readv": (310, 1, 0, 0, 0),
        "io_uring_setup": (425, 8, 0, 0, 0),
        "unshare": (272, 0x10000000, 0, 0, 0),  # CLONE_NEWUSER
        "setns": (308, 0, 0, 0, 0),
        "mount": (165, 0, 0, 0, 0),
        "chroot": (161, 0, 0, 0, 0),
        "bpf": (321, 0, 0, 0, 0),
        "keyctl": (250, 0, 0, 0, 0),
        "perf_event_open": (298, 0, 0, 0, 0),
        "userfaultfd": (323, 0, 0, 0, 0),
        "pidfd_open": (434, 1, 0, 0, 0),
        "pidfd_getfd": (438, 0, 0, 0, 0),
        "kcmp": (312, 1, 1, 0, 0),
        "clone3": (435, 0, 0, 0, 0),
        "clone_newpid": (56, 0x20000000 | 17, 0, 0, 0),
        "kill_all": (62, -1, 10, 0, 0),
        "socket": (41, 1, 1, 0, 0),
        "mknod": (133, 0, 0, 0, 0),
        "open_tree": (428, 0, 0, 0, 0),
        "fsopen": (430, 0, 0, 0, 0),
        "setpriority": (141, 0, 0, -5, 0),  # a higher priority than the host's
    }
    code = src(f"""
        import ctypes, json, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        out = {{}}
        for name, (nr, *args) in {calls!r}.items():
            rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
            out[name] = 'ok' if rc >= 0 else ctypes.get_errno()
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except OSError as exc:
            out['sched_fifo'] = exc.errno
        print(json.dumps(out))
    """)
    expected = dict.fromkeys(calls, 1) | {"clone3": 38, "setpriority": 13, "sched_fifo": 1}
    v = run(forking, unhooked(code), one(expected))
    assert reasons(v) == ["ok"], returned(forking, unhooked(code))


def test_pidfds_are_refused_even_as_written(sandbox):
    """os.pidfd_open and signal.pidfd_send_signal raise no audit event: the seccomp filter is what answers."""
    source = src("""
        import os, signal
        def attempt(fn):
            try:
                return fn()
            except OSError as exc:
                return exc.errno
        def f(x):
            return [attempt(lambda: os.pidfd_open(1)), attempt(lambda: signal.pidfd_send_signal(0, 9))]
    """)
    v = run(sandbox, source, one([1, 1]))
    assert reasons(v) == ["ok"], returned(sandbox, source)


def test_the_same_call_twice(sandbox):
    """Time-of-check tricks: a candidate's state lives as long as its module. Call tests each get a fresh module
    (a counter starts over); one check's calls share one, so the check sees what it really returns each time."""
    source = "calls = []\ndef f(x):\n    calls.append(x)\n    return 2 * x if len(calls) == 1 else -1\n"
    assert reasons(run(sandbox, source)) == ["ok"] * 3
    check = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(1) == 2\n"
    assert reasons(run(sandbox, source, one_check(check))) == ["wrong_answer"]


def test_a_huge_value_handed_back_to_the_candidate(sandbox):
    """The check passes what the candidate returned back to it, doubled: more than a call may carry. The
    candidate's process ends on it (a crash), never the harness."""
    source = "def f(x):\n    return 'x' * 700_000 if x == 1 else len(x)\n"
    check = "def check(candidate):\n    big = candidate(1)\n    assert candidate([big, big]) == 2\n"
    v = run(sandbox, source, one_check(check))
    assert reasons(v) == ["crash"]


def test_a_candidates_random_numbers_are_the_same_every_job(sandbox):
    """A job's process seeds ``random`` with the job's seed (no reseed from the system's entropy in each clone): the
    same job draws the same numbers every time it runs, so a grade does not depend on luck; another seed, others."""
    source = "import random\ndef f(x):\n    return [random.random(), random.randrange(10**9)]\n"
    first, second = returned(sandbox, source), returned(sandbox, source)
    assert first == second, (first, second)
    call = ({"args": [1], "kwargs": {}},)
    seeded = [sandbox.run(SandboxJob(source, "f", call, seed=s)).tests[0].value for s in (0, 1, 1)]  # type: ignore[arg-type]
    assert json.dumps(seeded[0]) == first
    assert seeded[1] == seeded[2] != seeded[0]


def test_a_check_draws_from_a_random_state_no_candidate_shares(sandbox):
    """HumanEval's checks draw their inputs from the module-level ``random`` (HumanEval/038, /050): the checker
    reseeds from the system's entropy when it starts, so a candidate that knows the candidates' seed cannot replay
    the check's draws. The check compares its own next numbers with the candidate's."""
    source = "import random\ndef f(x):\n    return [random.random() for _ in range(3)]\n"
    check = src("""
        import random
        def check(candidate):
            assert candidate(1) != [random.random() for _ in range(3)]
    """)
    v = run(sandbox, source, one_check(check))
    assert reasons(v) == ["ok"], v


def test_the_next_candidates_process_waits_with_nothing_and_goes_at_settle(sandbox):
    """While a job runs, the worker starts the next job's process (cloned and jailed ahead, given nothing). Once the
    finished job's processes are gone (the kernel tears its namespaces down after the kill) there is that one
    process and no other: not the finished job's uid, blocked reading its empty job pipe; settling ends it."""
    source = "import os\ndef f(x):\n    return os.getuid()\n"
    v = grade(one(0), source, sandbox, extract=False)
    job_uid = actual(v)

    def waiting() -> list[int]:
        left = user_processes(job_uids(sandbox))
        return left if len(left) == 1 and "pipe" in Path(f"/proc/{left[0]}/wchan").read_text() else []

    deadline = time.monotonic() + 10
    while not (left := waiting()) and time.monotonic() < deadline:
        time.sleep(0.02)  # the spare still being set up, or the killed job still being torn down
    assert left, user_processes(job_uids(sandbox))
    assert Path(f"/proc/{left[0]}").stat().st_uid != job_uid
    sandbox.settle()
    assert user_processes(job_uids(sandbox)) == []
