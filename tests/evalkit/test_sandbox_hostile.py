"""The hostile suite: each attack gets the right verdict and leaves no process or file behind."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from pathlib import Path

import attrs
import pytest

from evalkit import CallTest, CheckTest, CodeTask, Sandbox, SandboxLimits, TypeSpec, Verdict, grade
from evalkit._sandbox import user_processes

LIMITS = SandboxLimits(
    cpu_seconds=0.5, wall_seconds=1.5, memory_bytes=512 << 20, file_bytes=4 << 20, output_bytes=2048
)


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox(LIMITS, workers=1)
    yield box
    base = box.base_dir
    box.close()
    assert not base.exists(), "the sandbox base directory must be removed on close"
    for uid in box.uids:
        assert user_processes(uid) == []


def make_task(tests_public, tests_hidden, entry="f") -> CodeTask:
    return CodeTask(
        id="code/hostile/001",
        description="hostile",
        entry_point=entry,
        signature=f"def {entry}(x):",
        arg_types=(TypeSpec("int"),),
        return_type=TypeSpec("int"),
        float_tolerance=None,
        public_tests=tuple(tests_public),
        hidden_tests=tuple(tests_hidden),
        reference="",
        digest="sha256:" + "0" * 64,
        raw={},
    )


DOUBLE = make_task([CallTest((1,), {}, 2)], [CallTest((2,), {}, 4), CallTest((5,), {}, 10)])


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def assert_host_clean(box: Sandbox) -> None:
    for uid in box.uids:
        assert user_processes(uid) == [], f"processes of sandbox uid {uid} survived"
    for t in box._templates:
        if t.proc is not None:
            assert descendants(t.proc.pid) == [], "the template still has children"
    leftovers = [p.name for p in box.job_dirs()]
    assert leftovers == [], f"job directories left behind: {leftovers}"
    assert not [p for p in box.base_dir.iterdir() if p.name.startswith("job-")]


def run(box: Sandbox, source: str, task: CodeTask = DOUBLE) -> Verdict:
    verdict = grade(task, source, box, extract=False)
    assert_host_clean(box)
    return verdict


def reasons(v: Verdict) -> list[str]:
    return [t.reason for t in (*v.public, *v.hidden)]


def test_honest_candidate_passes(sandbox):
    v = run(sandbox, "def f(x):\n    return 2 * x\n")
    assert v.all_public
    assert v.all_hidden
    assert reasons(v) == ["ok", "ok", "ok"]


def test_infinite_loop_is_a_timeout_per_test(sandbox):
    v = run(sandbox, "def f(x):\n    if x == 2:\n        while True:\n            pass\n    return 2 * x\n")
    assert reasons(v) == ["ok", "timeout", "ok"], "a hang in one test must not take the others with it"
    assert v.hidden[0].passed is False


def test_loop_that_swallows_the_timer_still_times_out(sandbox):
    src = "def f(x):\n    while True:\n        try:\n            while True:\n                pass\n        except BaseException:\n            pass\n"
    v = run(sandbox, src, make_task([CallTest((1,), {}, 2)], [CallTest((2,), {}, 4)]))
    assert reasons(v) == ["timeout", "timeout"]


def test_sleeping_candidate_hits_the_wall_clock(sandbox):
    v = run(sandbox, "import time\ndef f(x):\n    time.sleep(60)\n", make_task([], [CallTest((2,), {}, 4)]))
    assert reasons(v) == ["timeout"]
    assert "wall clock" in v.hidden[0].detail


def test_fork_bomb(sandbox):
    v = run(sandbox, "import os\ndef f(x):\n    while True:\n        os.fork()\n")
    assert not any(t.passed for t in (*v.public, *v.hidden))
    assert set(reasons(v)) == {"exception"}


def test_fork_bomb_below_the_audit_hook_meets_the_process_limit(sandbox):
    if not sandbox.uids:
        pytest.skip("RLIMIT_NPROC isolation needs a dedicated uid (harness not root)")
    src = (
        "import _posixsubprocess, os, sys\n"
        "def f(x):\n"
        "    r, w = os.pipe()\n"
        "    for _ in range(50):\n"
        "        _posixsubprocess.fork_exec([b'/bin/sleep'], [b'/bin/sleep'], True, (), None, [b'A=1'],\n"
        "            -1, -1, -1, -1, -1, -1, r, w, True, False, None, None, None, -1, None, False)\n"
        "    return 2 * x\n"
    )
    v = run(sandbox, src)
    assert not any(t.passed for t in (*v.public, *v.hidden))


def test_memory_bomb(sandbox):
    v = run(
        sandbox, "def f(x):\n    blocks = []\n    while True:\n        blocks.append(bytearray(50 << 20))\n"
    )
    assert not any(t.passed for t in (*v.public, *v.hidden))
    # MemoryError at the address-space limit; on a loaded machine zeroing 512 MiB may meet the clock first
    assert set(reasons(v)) <= {"exception", "crash", "timeout"}
    for t in (*v.public, *v.hidden):
        assert t.reason != "exception" or "MemoryError" in t.detail


def test_huge_output_is_capped_and_limited(sandbox):
    # a moderate amount of output is fine: the answer counts, the captured output is truncated
    v = run(sandbox, "def f(x):\n    print('y' * 100_000)\n    return 2 * x\n")
    assert v.all_public
    assert v.all_hidden
    assert len(v.output) <= LIMITS.output_bytes
    # an unbounded flood hits the file-size limit (EFBIG: Python ignores SIGXFSZ) and fails, it never passes
    v = run(sandbox, "import sys\ndef f(x):\n    while True:\n        sys.stdout.write('z' * 65536)\n")
    assert set(reasons(v)) <= {"exception", "crash"}
    assert all("File too large" in t.detail or t.reason == "crash" for t in (*v.public, *v.hidden))
    assert len(v.output) <= LIMITS.output_bytes


def test_huge_file(sandbox):
    src = "def f(x):\n    with open('big.bin', 'wb') as fh:\n        while True:\n            fh.write(b'0' * (1 << 20))\n"
    v = run(sandbox, src)
    assert not any(t.passed for t in (*v.public, *v.hidden))
    assert set(reasons(v)) <= {"crash", "exception"}
    assert "File too large" in v.public[0].detail or v.public[0].reason == "crash"


def test_reading_the_parent_environment(monkeypatch):
    monkeypatch.setenv("EVALKIT_TEST_SECRET", "hunter2-secret-value")
    src = (
        "import os\n"
        "def f(x):\n"
        "    seen = dict(os.environ)\n"
        "    try:\n"
        "        seen['proc'] = open(f'/proc/{os.getppid()}/environ', 'rb').read().decode('latin-1')\n"
        "    except Exception as exc:\n"
        "        seen['proc'] = repr(exc)\n"
        "    return str(sorted(seen.items()))\n"
    )
    with Sandbox(LIMITS, workers=1) as box:  # started after the secret was set
        v = run(box, src, make_task([], [CallTest((1,), {}, "")]))
    actual = v.hidden[0].actual or ""
    assert v.hidden[0].reason == "wrong_answer"
    assert "hunter2" not in actual
    assert "hunter2" not in v.output
    assert "EVALKIT_TEST_SECRET" not in actual


def test_opening_a_socket(sandbox):
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
        src = (
            "import socket, _socket\n"
            "def f(x):\n"
            "    try:\n"
            f"        socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            "    except Exception:\n"
            "        pass\n"
            "    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n"
            f"    s.connect(('127.0.0.1', {port}))\n"
            "    return 2 * x\n"
        )
        v = run(sandbox, src)
    finally:
        server.close()
        thread.join()
    assert accepted == []
    assert not any(t.passed for t in (*v.public, *v.hidden))
    assert set(reasons(v)) == {"exception"}


def test_writing_outside_its_directory(sandbox, tmp_path):
    target = Path("/tmp") / f"evalkit-hostile-{uuid.uuid4().hex}"
    src = (
        "import os\n"
        "def f(x):\n"
        "    for attempt in (\n"
        f"        lambda: open({str(target)!r}, 'w').write('pwned'),\n"
        f"        lambda: os.close(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)),\n"
        "        lambda: open('../escape.txt', 'w').write('pwned'),\n"
        f"        lambda: os.symlink({str(target)!r}, 'link'),\n"
        "    ):\n"
        "        try:\n"
        "            attempt()\n"
        "        except PermissionError:\n"
        "            pass\n"
        "    with open('inside.txt', 'w') as fh:\n"
        "        fh.write('fine')\n"
        "    return 2 * x\n"
    )
    v = run(sandbox, src)
    assert v.all_public, "writing inside its own directory is allowed"
    assert v.all_hidden
    assert not target.exists()


def test_sys_exit_before_the_tests(sandbox):
    v = run(sandbox, "import sys\nsys.exit(0)\ndef f(x):\n    return 2 * x\n")
    assert reasons(v) == ["exception"] * 3
    assert "SystemExit" in v.public[0].detail


def test_sys_exit_inside_the_function(sandbox):
    v = run(sandbox, "import sys\ndef f(x):\n    sys.exit(0)\n")
    assert reasons(v) == ["exception"] * 3


def test_os_exit(sandbox):
    v = run(sandbox, "import os\nos._exit(0)\ndef f(x):\n    return 2 * x\n")
    assert reasons(v) == ["crash"] * 3
    v = run(sandbox, "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return 2 * x\n")
    assert reasons(v) == ["ok", "crash", "ok"]


def test_a_crash_loses_no_answer_and_reruns_no_test(sandbox):
    """Each test's result travels with the start of the next; a child that dies in test i has already delivered
    test i-1, and the fresh child runs only the tests after i (the log shows every load and every call)."""
    src = (
        "import os\n"
        "open('log', 'a').write('L')\n"
        "def f(x):\n"
        "    open('log', 'a').write(str(x))\n"
        "    if x == 2:\n"
        "        os._exit(0)\n"
        "    return open('log').read()\n"
    )
    v = run(
        sandbox,
        src,
        make_task([CallTest((1,), {}, "L1")], [CallTest((2,), {}, 0), CallTest((5,), {}, "L12L5")]),
    )
    assert reasons(v) == ["ok", "crash", "ok"]


def test_killing_itself(sandbox):
    v = run(sandbox, "import signal, os\ndef f(x):\n    signal.raise_signal(signal.SIGKILL)\n")
    assert reasons(v) == ["crash"] * 3


def test_printing_fake_pass_lines(sandbox):
    src = (
        "import os, sys\n"
        "def f(x):\n"
        '    print(\'PASSED all tests\'); print(\'{"t":"res","i":0,"status":"value","value":2}\')\n'
        "    sys.stdout.flush()\n"
        "    for fd in range(3, 10):\n"
        "        try:\n"
        '            os.write(fd, b\'{"t":"res","i":1,"status":"value","value":4}\\n\')\n'
        "        except OSError:\n"
        "            pass\n"
        "    return -1\n"
    )
    v = run(sandbox, src)
    assert not any(t.passed for t in (*v.public, *v.hidden))


def test_always_equal_object(sandbox):
    src = "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\ndef f(x):\n    return Yes()\n"
    v = run(sandbox, src)
    assert reasons(v) == ["wrong_answer"] * 3
    check_task = make_task(
        [CheckTest("def check(candidate):\n    assert candidate(1) == 2\n")],
        [CheckTest("def check(candidate):\n    assert candidate(2) == 4\n")],
    )
    v = run(sandbox, src, check_task)
    assert not any(t.passed for t in (*v.public, *v.hidden))


def test_monkeypatching_builtins_and_the_harness(sandbox):
    src = (
        "import builtins, json, __main__\n"
        "builtins.abs = lambda v: 0\n"
        "builtins.isinstance = lambda *a: True\n"
        "builtins.type = lambda *a: int\n"
        'json.dumps = lambda *a, **k: \'{"status":"done"}\'\n'
        'json.encoder.JSONEncoder.encode = lambda *a, **k: \'{"status":"done"}\'\n'
        "for name in list(vars(__main__)):\n"
        "    if not name.startswith('__'):\n"
        "        setattr(__main__, name, None)\n"
        "def f(x):\n"
        "    return 0.0\n"
    )
    check = "def check(candidate):\n    assert abs(candidate(1) - 2.0) < 1e-9\n"
    task = make_task([CheckTest(check)], [CallTest((2,), {}, 4)])
    v = run(sandbox, src, task)
    assert reasons(v) == ["wrong_answer", "wrong_answer"]


def test_recursion_bomb(sandbox):
    v = run(sandbox, "def f(x):\n    return f(x)\n")
    assert set(reasons(v)) == {"exception"}
    assert "RecursionError" in v.public[0].detail
    v = run(sandbox, "import sys\nsys.setrecursionlimit(10**9)\ndef f(x):\n    return f(x) + 1\n")
    assert not any(t.passed for t in (*v.public, *v.hidden))
    assert set(reasons(v)) <= {"exception", "crash", "timeout"}


def test_ctypes_and_frame_introspection_are_refused(sandbox):
    v = run(sandbox, "import ctypes\ndef f(x):\n    return 2 * x\n")
    assert set(reasons(v)) == {"exception"}
    src = "import sys\ndef f(x):\n    sys._getframe(1)\n    return 2 * x\n"
    v = run(sandbox, src)
    assert set(reasons(v)) == {"exception"}
    src = "def f(x):\n    try:\n        raise ValueError\n    except ValueError as e:\n        e.__traceback__.tb_frame.f_back\n    return 2 * x\n"
    v = run(sandbox, src)
    assert set(reasons(v)) == {"exception"}


def test_infra_error_is_not_a_fail(sandbox, monkeypatch):
    box = Sandbox(LIMITS, workers=1)
    try:

        def broken(*_a, **_k):
            raise OSError("simulated: cannot start the template")

        monkeypatch.setattr(box._templates[0], "start", broken)
        v = grade(DOUBLE, "def f(x):\n    return 2 * x\n", box, extract=False)
    finally:
        monkeypatch.undo()
        box.close()
    assert v.infra_error is not None
    assert "simulated" in v.infra_error
    assert reasons(v) == ["infra_error"] * 3
    assert not v.all_public
    assert not v.all_hidden


def test_runs_as_unprivileged_user_when_root(sandbox):
    v = run(
        sandbox,
        "import os\ndef f(x):\n    return [os.getuid(), os.getgid(), os.getgroups()]\n",
        make_task([], [CallTest((1,), {}, 0)]),
    )
    if os.geteuid() != 0 or not sandbox.uids:
        pytest.skip("not root, or the interpreter is not reachable by an unprivileged user here")
    assert v.hidden[0].actual == f"[{sandbox.uids[0]}, {sandbox.uids[0]}, []]"


def test_filling_the_disk_stops_at_the_private_tmpfs(sandbox):
    """Many files, each under the file-size limit: where job directories live on a private tmpfs, the total is
    capped by ``disk_bytes`` (at most that much memory, and none of the host's disk), and the job's files go with it."""
    if not sandbox._plan.tmpfs:
        pytest.skip("no private tmpfs here (needs root and unshare --mount)")
    limits = attrs.evolve(LIMITS, disk_bytes=6 << 20)
    src = (
        "def f(x):\n"
        "    for k in range(100):\n"
        "        with open(f'part{k}.bin', 'wb') as fh:\n"
        "            fh.write(b'0' * (2 << 20))\n"
        "    return 2 * x\n"
    )
    with Sandbox(limits, workers=1) as box:
        v = run(box, src, make_task([CallTest((1,), {}, 2)], []))
        assert "6291456 bytes" in box.isolation.filesystem
    assert v.public[0].reason == "exception"
    assert "No space left on device" in v.public[0].detail


def test_job_directories_are_visible_to_the_host_while_a_job_runs(sandbox):
    """The leftover checks above look where jobs really live (through the template's /proc/<pid>/root when the
    directories are on a private tmpfs); this shows that view is not empty by construction."""
    seen: list[list[str]] = []

    def watch() -> None:
        for _ in range(200):
            dirs = sandbox.job_dirs()
            if dirs:
                seen.append(sorted(p.name for p in dirs[0].iterdir()))
                return
            threading.Event().wait(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    v = run(sandbox, "import time\ndef f(x):\n    time.sleep(0.4)\n    return 2 * x\n", DOUBLE)
    watcher.join()
    assert v.all_public
    assert seen == [["output", "work"]]
