"""Agents as people write them run behind the wall: asyncio, anyio, socket pairs, threads, thread pools. A run that
uses them is valid and picks what the stub picks; AF_UNIX reaches nothing outside the jail (a host's abstract or
filesystem socket); every network family is still ended and recorded; no process of the agent's own may start."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pit_agent_support import RUN_START, cfg, kinds, make_writer, needs_wall, texts

from evalkit.pit import resolve_agent, run, stub_agent


@pytest.fixture
def write_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    return make_writer(tmp_path, monkeypatch)


FRESH = """
def fresh(tools):
    page = tools.pit_list(limit=200)
    return [r["row_key"] for r in page["rows"] if r["entry_session"] == page["session_date"]]
"""

SHAPES = {
    "asyncio_run": """
import asyncio

def agent(prompt, tools):
    async def go():
        await asyncio.sleep(0)
        return fresh(tools)
    return asyncio.run(go())
""",
    "asyncio_executor_and_gather": """
import asyncio

def agent(prompt, tools):
    async def go():
        loop = asyncio.get_running_loop()
        a, b = await asyncio.gather(loop.run_in_executor(None, fresh, tools), asyncio.sleep(0, result=1))
        return a
    return asyncio.run(go())
""",
    "anyio_run_and_to_thread": """
import anyio

def agent(prompt, tools):
    async def go():
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep, 0)
        return await anyio.to_thread.run_sync(fresh, tools)
    return anyio.run(go)
""",
    "socketpair_roundtrip": """
import socket

def agent(prompt, tools):
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"ping")
        assert b.recv(4) == b"ping"
    c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with c, d:
        c.send(b"x")
        assert d.recv(1) == b"x"
    return fresh(tools)
""",
    "unix_server_in_job_dir": """
import os, socket, threading

def agent(prompt, tools):
    path = os.path.join(os.environ["TMPDIR"], "own.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    def serve():
        conn, _ = srv.accept()
        conn.sendall(conn.recv(5).upper())
        conn.close()
    t = threading.Thread(target=serve)
    t.start()
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cli.connect(path)
    cli.sendall(b"hello")
    assert cli.recv(5) == b"HELLO"
    t.join(); cli.close(); srv.close(); os.unlink(path)
    return fresh(tools)
""",
    "thread": """
import threading

def agent(prompt, tools):
    out = []
    t = threading.Thread(target=lambda: out.extend(fresh(tools)))
    t.start()
    t.join()
    return out
""",
    "thread_pool_parallel_tool_calls": """
from concurrent.futures import ThreadPoolExecutor

def agent(prompt, tools):
    with ThreadPoolExecutor(max_workers=16) as pool:
        pages = list(pool.map(lambda off: tools.pit_list(limit=1, offset=off), range(200)))
    keys = [p["rows"][0]["row_key"] for p in pages if p["rows"] and p["rows"][0]["entry_session"] == p["session_date"]]
    assert len(set(keys)) == len(keys)  # every answer went to the thread that asked for it
    return keys
""",
    "threads_and_loop_together": """
import asyncio, threading

def agent(prompt, tools):
    done = threading.Event()
    out = []
    def worker():
        out.extend(asyncio.run(asyncio.to_thread(fresh, tools)))
        done.set()
    threading.Thread(target=worker).start()
    done.wait(60)
    return out
""",
}


@pytest.fixture(scope="module")
def stub_picks(synth_release_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    where = tmp_path_factory.mktemp("stub")
    old = Path.cwd()
    os.chdir(where)
    try:
        result = run(stub_agent, cfg(synth_release_dir))
        return [e["picks"] for e in kinds(result, "decision")]
    finally:
        os.chdir(old)


@needs_wall
@pytest.mark.parametrize("name", list(SHAPES))
def test_an_agent_of_every_shape_runs_valid_and_picks_what_the_stub_picks(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path, stub_picks: list[list[str]]
) -> None:
    spec = write_agent(FRESH + SHAPES[name])
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, arms=("main", "shifted")))
    body = result.body
    assert body["valid"] is True, body["agent_errors"]
    assert body["network"]["egress_attempts"] == 0
    assert body["agent"]["wall"]["full"] is True
    picks = [e["picks"] for e in kinds(result, "decision")]
    main = picks[: len(stub_picks)]
    assert main == stub_picks  # the same rows as the stub, in the main arm
    assert any(main), "the window must have fresh rows for this test to mean anything"


# --- AF_UNIX reaches nothing outside the jail --------------------------------------------------------------------


@pytest.fixture
def host_sockets(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A host abstract-namespace socket and a host filesystem socket (world-writable), both listening, and proof
    that the host itself reaches them (so the jail's failure to is the jail's doing)."""
    name = f"evalkit-test-{os.getpid()}-{threading.get_ident()}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + name)
    abstract.listen(8)
    sockdir = tmp_path / "hostsock"
    sockdir.mkdir(mode=0o777)
    sockdir.chmod(0o777)
    path = sockdir / "host.sock"
    filesystem = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    filesystem.bind(str(path))
    path.chmod(0o777)
    filesystem.listen(8)
    for target in ("\0" + name, str(path)):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(target)  # the host reaches both
        probe.close()
    try:
        yield {"abstract": name, "path": str(path), "dir": str(sockdir)}
    finally:
        abstract.close()
        filesystem.close()


REACH = """
import os, socket

TARGETS = {targets!r}

def _try(target):
    s = socket.socket(socket.AF_UNIX, {kind})
    try:
        s.settimeout(5)
        if {kind} == socket.SOCK_DGRAM:
            s.sendto(b"x", target)
        else:
            s.connect(target)
        return "CONNECTED"
    except OSError as exc:
        return type(exc).__name__
    finally:
        s.close()

def agent(prompt, tools):
    return " | ".join(f"{{k}}=" + _try(v) for k, v in TARGETS.items())
"""


@needs_wall
@pytest.mark.parametrize("kind", ["socket.SOCK_STREAM", "socket.SOCK_SEQPACKET", "socket.SOCK_DGRAM"])
def test_af_unix_in_the_jail_reaches_no_socket_of_the_host(
    kind: str, host_sockets: dict[str, str], synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    targets = {
        "abstract": "\0" + host_sockets["abstract"],
        "path": host_sockets["path"],
        "dir_listing": host_sockets["dir"],
        # the host's usual service sockets, whatever this machine has
        "dbus": "/run/dbus/system_bus_socket",
        "journal": "/run/systemd/journal/socket",
        "docker": "/var/run/docker.sock",
        "nscd": "/var/run/nscd/socket",
        "devlog": "/dev/log",
    }
    spec = write_agent(REACH.format(targets=targets, kind=kind))
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    (text,) = texts(result)
    report = dict(item.split("=", 1) for item in text.split(" | "))
    assert set(report) == set(targets)
    assert "CONNECTED" not in report.values(), report
    # abstract names live in the jail's own network namespace: nobody listens there
    assert report["abstract"] == "ConnectionRefusedError", report
    assert report["path"] == "FileNotFoundError", report  # the host's filesystem is not in the jail's root
    assert result.body["valid"] is True  # AF_UNIX is no egress attempt
    assert result.body["network"]["egress_attempts"] == 0


NETWORK = {
    # each still ends the process or is refused, and is recorded as today
    "asyncio_open_connection": (
        "import asyncio\nasyncio.run(asyncio.open_connection('192.0.2.1', 80))",
        "socket",
        "family=AF_INET",
    ),
    "asyncio_getaddrinfo_in_the_default_executor": (
        ("import asyncio\nasync def go():\n    await asyncio.get_running_loop().getaddrinfo('example.invalid', 80)\n"
        "asyncio.run(go())"),
        "getaddrinfo",
        "example.invalid:80",
    ),
    "thread_connects": (
        ("import threading, socket\nerr = []\n"
        "def go():\n    try:\n        socket.create_connection(('192.0.2.1', 443), timeout=1)\n    except BaseException as e:\n        err.append(e)\n"
        "t = threading.Thread(target=go)\nt.start()\nt.join()"),
        "create_connection",
        "192.0.2.1:443",
    ),
    "inet6": ("import socket\nsocket.socket(socket.AF_INET6, socket.SOCK_STREAM)", "socket", "family=AF_INET6"),
    "netlink": (
        "import socket\nsocket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)",
        "socket",
        "family=AF_NETLINK",
    ),
    "packet_by_raw_syscall_from_a_thread": (
        ("import ctypes, threading\nt = threading.Thread(target=lambda: ctypes.CDLL(None).syscall(41, 17, 3, 0))\n"
        "t.start()\nt.join()"),
        "seccomp_kill",
        "socket() of a network family",
    ),
    "inet_by_raw_syscall": (
        "import ctypes\nctypes.CDLL(None).syscall(41, 2, 1, 0)",
        "seccomp_kill",
        "socket() of a network family",
    ),
}

NETWORK_AGENT = """
def agent(prompt, tools):
    try:
{code}
    except BaseException:
        pass
    return "went on"
"""


@needs_wall
@pytest.mark.parametrize("name", list(NETWORK))
def test_network_families_are_still_ended_and_recorded(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    import textwrap

    code, kind, target = NETWORK[name]
    spec = write_agent(NETWORK_AGENT.format(code=textwrap.indent(code, " " * 8)))
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec))
    body = result.body
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    egress = kinds(result, "egress_attempt")
    assert egress[0]["kind"] == kind, egress
    assert target in (egress[0]["target"] or ""), egress
    assert texts(result) == []  # stopped in the session


PROCESSES = """
import ctypes, os, subprocess, sys, threading
from concurrent.futures import ProcessPoolExecutor

def _fork():
    os.fork()

def _spawn():
    subprocess.run([sys.executable, "-c", "pass"])

def _pool():
    with ProcessPoolExecutor(1) as pool:
        pool.submit(print).result()

def _raw_vfork():
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(58)  # vfork

def _posix_spawn():
    os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], {{}})

def _try(fn):
    box = []
    def run():
        try:
            box.append(str(fn()))
        except BaseException as exc:
            box.append(type(exc).__name__)
    t = threading.Thread(target=run)  # from a thread too: a thread is no way to a process
    t.start()
    t.join()
    return box[0]

def agent(prompt, tools):
    out = {{name: _try(fn) for name, fn in [("fork", _fork), ("spawn", _spawn), ("pool", _pool),
                                          ("vfork", _raw_vfork), ("posix_spawn", _posix_spawn)]}}
    return " | ".join(f"{{k}}={{v}}" for k, v in out.items()) + f" | pid={{os.getpid()}}"
"""


@needs_wall
def test_threads_start_but_no_process_of_the_agents_own(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(PROCESSES.format())
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    (text,) = texts(result)
    report = dict(item.split("=", 1) for item in text.split(" | "))
    assert report["pid"] == "1"  # pid 1 of its own namespace: its end is the end of every thread
    for name in ("fork", "spawn", "posix_spawn"):
        assert report[name] == "PermissionError", report
    assert report["pool"] in {"PermissionError", "OSError"}, report  # its semaphore or its fork, whichever first
    assert report["vfork"] == "-1", report
    assert result.body["valid"] is True


@needs_wall
def test_threads_are_capped_by_the_kernel(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(
        """
        import threading

        def agent(prompt, tools):
            stop = threading.Event()
            started = 0
            try:
                for _ in range(1000):
                    threading.Thread(target=stop.wait, daemon=True).start()
                    started += 1
            except RuntimeError as exc:
                err = type(exc).__name__
            else:
                err = "none"
            stop.set()
            return f"started={started} | error={err}"
        """
    )
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    (text,) = texts(result)
    report = dict(item.split("=", 1) for item in text.split(" | "))
    assert report["error"] == "RuntimeError", report  # "can't start new thread": the rlimit on the uid's tasks
    assert 0 < int(report["started"]) < 64, report
    assert result.body["valid"] is True


WEAKER = """
import asyncio, socket, threading

def _try(fn):
    try:
        return str(fn())
    except OSError as exc:
        return type(exc).__name__

def _pair():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"k")
        return b.recv(1).decode()

def _named(target):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with s:
        s.connect(target)
        return "CONNECTED"

def agent(prompt, tools):
    box = []
    t = threading.Thread(target=lambda: box.append("thread"))
    t.start(); t.join()
    loop = asyncio.run(asyncio.sleep(0, result="loop"))
    return " | ".join(["pair=" + _try(_pair), "abstract=" + _try(lambda: _named({abstract!r})),
                       "path=" + _try(lambda: _named({path!r})), "loop=" + loop, "thread=" + box[0]])
"""


@pytest.mark.needs("seccomp")  # without bubblewrap, the seccomp filter is what refuses socket(AF_UNIX)
def test_without_bubblewrap_only_socket_pairs_are_allowed(
    host_sockets: dict[str, str], synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind the weaker wall the job shares the host's filesystem (and, without namespaces, its network
    namespace): a named AF_UNIX socket could reach the host's, so only socket pairs (unnamed) are allowed."""
    import shutil

    import evalkit.wall._zygote

    real_which = shutil.which
    monkeypatch.setattr(
        evalkit.wall._zygote.shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k)
    )
    spec = write_agent(WEAKER.format(abstract="\0" + host_sockets["abstract"], path=host_sockets["path"]))
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    assert result.body["agent"]["wall"]["full"] is False
    (text,) = texts(result)
    assert text == "pair=k | abstract=PermissionError | path=PermissionError | loop=loop | thread=thread", text
    assert result.body["valid"] is True
