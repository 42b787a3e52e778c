"""Hostile agents against the agent's jail: each is written to the test's temp directory and named
``module:function``, so the harness never imports it; it runs only inside the wall, a fresh process per cell.

Every attack either fails inside the jail (and the agent's own report, recorded as its decision text, says so),
or is recorded by the harness and makes the run invalid. Network targets are TEST-NET-1 (192.0.2.1, unroutable by
design) and the reserved ``.invalid`` TLD; the only server any test starts is on loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import textwrap
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pit_agent_support import cfg, events, make_writer, texts  # pyright: ignore[reportImplicitRelativeImport]

from evalkit.pit import AgentLimits, AgentSpecError, RunConfig, from_callable, load_prices, resolve_agent, run
from evalkit_core import ConfigError, Release

RUN_START, RUN_END = "2023-03-01", "2023-03-02"


needs_wall = pytest.mark.needs("bwrap")  # without it the agent runs behind a weaker wall


@pytest.fixture
def write_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Write ``source`` as a module of its own under tmp and return its ``module:agent`` spec."""
    return make_writer(tmp_path, monkeypatch)


_cfg, _events, _texts = cfg, events, texts


def _report(result: Any) -> dict[str, str]:
    """The agent's first decision text, ``key=value`` pairs separated by `` | ``."""
    text = _texts(result)[0]
    return dict(item.split("=", 1) for item in text.split(" | ") if "=" in item)


# --- introspection: nothing of the harness's to find ------------------------------------------------------------

INTROSPECT = """
import gc, os, sys

MARKERS = {markers!r}


def _strings():
    out = list(sys.argv) + [f"{{k}}={{v}}" for k, v in os.environ.items()] + [str(p) for p in sys.path]
    out += [str(getattr(m, "__file__", "")) for m in list(sys.modules.values())]
    for path in ("/proc/self/cmdline", "/proc/self/environ", "/proc/self/mountinfo", "/proc/self/maps",
                 "/proc/1/cmdline", "/proc/1/environ"):
        try:
            out.append(open(path, "rb").read().decode("utf-8", "replace"))
        except OSError:
            pass
    frame = sys._getframe()
    while frame is not None:
        for v in list(frame.f_locals.values()):
            out.append(repr(v)[:100000])
        frame = frame.f_back
    for obj in gc.get_objects():
        try:
            if isinstance(obj, dict):
                out += [x for x in list(obj.keys()) + list(obj.values()) if isinstance(x, str)]
            elif isinstance(obj, (list, tuple, set, frozenset)):
                out += [x for x in obj if isinstance(x, str)]
            elif hasattr(obj, "__dict__"):
                out += [x for x in vars(obj).values() if isinstance(x, str)]
        except Exception:
            pass
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/dev")):
            dirs[:] = []
            continue
        out.append(root)
        out += [os.path.join(root, f) for f in files]
    return out


def agent(prompt, tools):
    hits = sorted({{s[:300] for s in _strings() if isinstance(s, str) and s not in MARKERS and any(m in s for m in MARKERS)}})
    return "hits=" + str(len(hits)) + " | first=" + "; ".join(hits[:3])
"""


@needs_wall
def test_introspection_finds_no_release_prices_cache_or_config_path(
    synth_release_dir: Path, synth_prices_path: Path, write_agent: Callable[..., str], in_tmp: Path, cli: Any
) -> None:
    cache, home = os.environ["EVALKIT_CACHE_DIR"], os.environ["EVALKIT_HOME"]
    # distinctive pieces of every path the agent must not learn (none of them is part of the agent's own path)
    markers = [
        synth_release_dir.parent.name,
        synth_prices_path.parent.name,
        Path(cache).parent.name,
        "secret-run-config",
    ]
    assert Path(home).parent.name == Path(cache).parent.name
    spec = write_agent(INTROSPECT.format(markers=markers))
    config = in_tmp / "secret-run-config.json"
    _cfg(
        synth_release_dir,
        agent=spec,
        prices_path=str(synth_prices_path),
        price_source="synthetic",
        trajectory_path="out/secret-traj.jsonl",
        receipt_path="out/secret-receipt.json",
    ).dump(config)
    code, out, err = cli(
        "run", "--config", str(config), "--json"
    )  # the harness's sys.argv holds the config path
    assert code == 0, err
    body = json.loads(out)
    events = _events(in_tmp / "out" / "secret-traj.jsonl")
    texts = [e["text"] for e in events if e["type"] == "decision"]
    assert texts and all(t.startswith("hits=0 | first=") for t in texts), texts[0][:2000]
    assert body["valid"] is True


# --- files: the release, the prices, the cache, the config, the store, the harness's /proc ------------------------

FILES = """
import os

TARGETS = {targets!r}


def _try(path):
    try:
        if os.path.isdir(path):
            return "LISTED:" + ",".join(sorted(os.listdir(path))[:5])
        with open(path, "rb") as fh:
            return "READ:" + str(len(fh.read(100)))
    except Exception as exc:
        return type(exc).__name__


def _write(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return "WROTE"
    except Exception as exc:
        return type(exc).__name__


def agent(prompt, tools):
    out = [f"{{p}}={{_try(p)}}" for p in TARGETS]
    out += [f"write:{{p}}={{_write(p)}}" for p in ("/tmp/x", os.path.join(TARGETS[0], "x"), "/job/x", "/x")]
    out.append("root=" + ",".join(sorted(os.listdir("/"))))
    return " | ".join(out)
"""


@needs_wall
def test_files_of_the_harness_cannot_be_opened(
    synth_release_dir: Path, synth_prices_path: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    cache, home = Path(os.environ["EVALKIT_CACHE_DIR"]), Path(os.environ["EVALKIT_HOME"])
    Release.load(synth_release_dir)  # make sure the Parquet cache exists
    cached = sorted(str(p) for p in cache.rglob("*") if p.is_file())
    assert any(p.endswith(".parquet") for p in cached)
    (home / "store.sqlite").write_bytes(b"not a real store")
    config = in_tmp / "run.json"
    config.write_text("{}")
    targets = [
        str(in_tmp),
        str(synth_release_dir),
        str(synth_release_dir / "release.json"),
        str(synth_release_dir / "arms" / "main.jsonl"),
        str(synth_release_dir / "answer_key.jsonl"),
        str(synth_prices_path),
        str(cache),
        *cached[:20],
        str(config),
        str(home),
        str(home / "store.sqlite"),
        f"/proc/{os.getpid()}/environ",
        f"/proc/{os.getpid()}/cmdline",
        f"/proc/{os.getpid()}/mem",
        str(in_tmp / "trajectory.jsonl"),
    ]
    spec = write_agent(FILES.format(targets=targets))
    result = run(
        resolve_agent(spec),
        _cfg(synth_release_dir, agent=spec, prices_path=str(synth_prices_path), price_source="synthetic"),
    )
    assert result.body["valid"] is True
    report = _report(result)
    # the working directory exists in the jail only as the (empty) parent of the agent's own module directory
    assert report.pop(str(in_tmp)) == "LISTED:agentsrc"
    for t in targets[1:]:
        assert report[t] in ("FileNotFoundError", "PermissionError"), (t, report[t])
    assert report["write:/job/x"] == "WROTE"  # its own private tmpfs
    for p in ("/tmp/x", targets[0] + "/x", "/x"):
        assert report[f"write:{p}"] in ("FileNotFoundError", "PermissionError", "OSError"), (
            p,
            report[f"write:{p}"],
        )
    # the root holds the interpreter's and the libraries' directories, /proc, /dev, /job and the bound paths' parents
    assert "job" in report["root"].split(",")


# --- memory across cells ------------------------------------------------------------------------------------------

MEMORY = """
import json, os

MEMORY = {{}}   # row_key -> issuer, filled in the main arm; cell -> sessions seen
SEEN = {{}}


def _disk():
    found = {{}}
    for path in ("/job/memory.json", os.path.expanduser("~/memory.json"), "/tmp/memory.json"):
        try:
            with open(path) as fh:
                found.update(json.load(fh))
        except Exception:
            pass
    return found


def agent(prompt, tools):
    cell = tools.arm + "/" + tools.clock
    other = [c for c in SEEN if c != cell] + [c for c in _disk().get("cells", []) if c != cell]
    SEEN[cell] = SEEN.get(cell, 0) + 1
    rows = tools.pit_list(limit=200)["rows"]
    fresh = [r for r in rows if r["entry_session"] == tools.session_date]
    if tools.arm == "main":
        for r in rows:
            MEMORY[r["row_key"]] = r.get("issuer", "")
    for path in ("/job/memory.json", os.path.expanduser("~/memory.json"), "/tmp/memory.json"):
        try:
            with open(path, "w") as fh:
                json.dump({{"cells": list(SEEN), "memory": MEMORY}}, fh)
        except Exception:
            pass
    {rule}
    return {{"picks": picks, "text": "other_cells=" + str(len(other)) + " | remembered=" + str(len(MEMORY))}}


def wrapped(prompt, tools):
    from evalkit.pit import AgentReply
    out = agent(prompt, tools)
    return AgentReply(picks=tuple(out["picks"]), text=out["text"])
"""

# Picks issuers in the first half of the alphabet: by the row's own issuer in the main arm; in the control arms by
# the issuer remembered from the main arm when it can (the memorising agent), else every fresh row.
RULE_MEMORY = (
    'picks = [r["row_key"] for r in fresh if (r.get("issuer") or MEMORY.get(r["row_key"]) or "A")[0] <= "M"]'
)
RULE_HONEST = 'picks = [r["row_key"] for r in fresh if (r.get("issuer") or "A")[0] <= "M"]'


@needs_wall
def test_memory_does_not_cross_cells(
    synth_release_dir: Path, synth_prices_path: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    prices = load_prices(synth_prices_path, source="synthetic")
    cfg = _cfg(
        synth_release_dir, arms=("main", "redacted", "shifted"), clocks=("leaky", "pit"), end="2023-03-10"
    )
    remembering = write_agent(MEMORY.format(rule=RULE_MEMORY), "wrapped")
    honest = write_agent(MEMORY.format(rule=RULE_HONEST), "wrapped")
    mem = run(resolve_agent(remembering), cfg, prices=prices)
    ref = run(
        resolve_agent(honest),
        RunConfig(**{**cfg.to_json(), "trajectory_path": "h.jsonl", "receipt_path": "h.json"}),
        prices=prices,
    )
    texts = _texts(mem)
    assert texts and all(t.startswith("other_cells=0 | ") for t in texts), sorted(set(texts))[:3]
    # in the control arms it remembers nothing: every cell starts from an empty module and an empty /job
    for e in _events(mem.trajectory_path):
        if e["type"] == "decision" and e["arm"] != "main":
            assert e["text"] == "other_cells=0 | remembered=0"
    assert mem.body["contamination"] == ref.body["contamination"]
    assert mem.body["contamination"]["pit"]["main_minus_shifted"] is not None
    assert [c["trades"] for c in mem.body["cells"]] == [c["trades"] for c in ref.body["cells"]]


def test_a_closure_is_sent_by_value_and_its_copy_starts_afresh_in_every_cell(
    synth_release_dir: Path, in_tmp: Path
) -> None:
    calls = {"n": 0}

    def counting(prompt: str, tools: Any) -> str:
        calls["n"] += 1
        tools.pit_list(limit=1)
        return f"call {calls['n']} in {tools.arm}/{tools.clock}"

    cfg = _cfg(
        synth_release_dir, arms=("main", "shifted"), clocks=("pit", "dump"), end="2023-03-03", probe_items=1
    )
    result = run(from_callable(counting), cfg)
    assert calls["n"] == 0  # the harness's copy is never called
    by_cell: dict[str, list[str]] = {}
    for e in _events(result.trajectory_path):
        if e["type"] == "decision":
            by_cell.setdefault(f"{e['arm']}/{e['clock']}", []).append(e["text"])
    assert by_cell == {
        c: [f"call {i} in {c}" for i in (1, 2, 3)]
        for c in ("main/dump", "main/pit", "shifted/dump", "shifted/pit")
    }
    probe = result.body["probe"]["items"]
    assert [i["answer"] for i in probe] == ["call 1 in shifted/pit"]  # the probe's process is fresh too


def test_what_cannot_cross_the_wall_is_refused_with_its_name(
    synth_release_dir: Path, synth_prices_path: Path, in_tmp: Path
) -> None:
    bundle = Release.load(synth_release_dir)
    prices = load_prices(synth_prices_path, source="synthetic")

    def peeks(prompt: str, tools: Any) -> object:
        return [bundle.root, prices.sha256]

    with pytest.raises(
        AgentSpecError, match=r"'bundle'.*a Release .*cannot be sent into the agent's jail.*module:function"
    ):
        run(from_callable(peeks), _cfg(synth_release_dir))
    holder = {"release": bundle}
    with pytest.raises(AgentSpecError, match=r"'holder'.*a Release"):
        run(from_callable(lambda p, t: holder["release"]), _cfg(synth_release_dir))

    class Custom:
        def __call__(self, prompt: str, tools: Any) -> list[str]:
            return []

    with pytest.raises(AgentSpecError, match="Custom"):
        run(from_callable(Custom()), _cfg(synth_release_dir))
    assert not (in_tmp / "receipt.json").exists()
    assert not (in_tmp / "trajectory.jsonl").exists()


def test_an_agent_module_beside_the_release_is_refused(
    tmp_path: Path, synth_release_dir: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "agentpkg_beside"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def agent(prompt, tools):\n    return []\n")
    shutil.copytree(synth_release_dir, pkg / "release")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AgentSpecError, match="must not see"):
        run(resolve_agent("agentpkg_beside:agent"), _cfg(pkg / "release", agent="agentpkg_beside:agent"))


# --- guard undoing: blocked by the kernel, recorded by the harness --------------------------------------------------

UNDO = {
    "mro": (
        "import socket\nsocket.socket.__mro__[1](socket.AF_INET, socket.SOCK_STREAM)",
        "socket",
        "family=AF_INET",
    ),
    "clear_guard_then_connect": (
        (
            "import gc, socket\n"
            "for g in [o for o in gc.get_objects() if type(o).__name__ == 'NetworkGuard']:\n"
            "    g.attempts.clear(); g.remove(); type(g)._active = None\n"
            "socket.create_connection(('192.0.2.1', 80), timeout=1)"
        ),
        "getaddrinfo",
        "192.0.2.1:80",
    ),
    "af_packet": (
        "import socket\nsocket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
        "socket",
        "family=AF_PACKET",
    ),
    "getnameinfo": ("import socket\nsocket.getnameinfo(('192.0.2.1', 80), 0)", "getnameinfo", "192.0.2.1:80"),
    # AF_UNIX is no attempt (it reaches nothing outside the jail): see test_pit_agent_shapes.py
    "raw_module_resolver": (
        (
            "import _socket, gc\n"
            "for g in [o for o in gc.get_objects() if type(o).__name__ == 'NetworkGuard']:\n"
            "    g.remove()\n"
            "_socket.gethostbyname('example.invalid')"
        ),
        "gethostbyname",
        "example.invalid",
    ),
    "reload_socket_module": (
        (
            "import importlib, socket, gc\n"
            "for g in [o for o in gc.get_objects() if type(o).__name__ == 'NetworkGuard']:\n"
            "    g.remove()\n"
            "importlib.reload(socket).create_connection(('192.0.2.1', 443))"
        ),
        "getaddrinfo",
        "192.0.2.1:443",
    ),
    "ctypes_libc_socket": (
        "import ctypes\nctypes.CDLL(None).socket(2, 1, 0)",
        "ctypes_dlsym",
        "socket",
    ),
    "raw_syscall": (  # past both recorders: the kernel ends the process, the harness sees SIGSYS
        "import ctypes\nctypes.CDLL(None).syscall(41, 2, 1, 0)",
        "seccomp_kill",
        "socket() of a network family",
    ),
    "replace_the_recorders_channel": (
        "import os, socket\nkeep = os.dup(4)\nr, w = os.pipe()\nos.dup2(w, 4)\nsocket.getaddrinfo('example.invalid', 80)",
        "recorder_channel_replaced",
        None,
    ),
}

UNDO_AGENT = """
def agent(prompt, tools):
    try:
{code}
    except BaseException as exc:  # swallow whatever the attempt raised
        pass
    return "went on"
"""


@needs_wall
@pytest.mark.parametrize("name", list(UNDO))
def test_undoing_the_guard_is_blocked_and_recorded(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    code, kind, target = UNDO[name]
    spec = write_agent(UNDO_AGENT.format(code=textwrap.indent(code, " " * 8)))
    result = run(resolve_agent(spec), _cfg(synth_release_dir, agent=spec))
    body = result.body
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    assert body["completed"] is False
    assert body["network"]["clean"] is False
    egress = [e for e in _events(result.trajectory_path) if e["type"] == "egress_attempt"]
    assert [e["kind"] for e in egress][:1] == [kind], egress
    if target is not None:
        assert target in (egress[0]["target"] or ""), egress
    assert (egress[0]["arm"], egress[0]["clock"], egress[0]["session_date"]) == ("main", "pit", RUN_START)
    assert _texts(result) == []  # stopped inside the session: "went on" never reached the harness


@needs_wall
def test_under_continue_attempts_are_recorded_and_clearing_the_guard_changes_nothing(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(
        """
        import gc, socket

        def agent(prompt, tools):
            seen = []
            for attempt in (lambda: socket.getaddrinfo("example.invalid", 80),
                            lambda: socket.socket.__mro__[1](socket.AF_INET6, socket.SOCK_DGRAM),
                            lambda: socket.getnameinfo(("192.0.2.1", 80), 0)):
                try:
                    attempt()
                except OSError as exc:
                    seen.append(type(exc).__name__)
            for g in [o for o in gc.get_objects() if type(o).__name__ == "NetworkGuard"]:
                g.attempts.clear()
            return ",".join(seen)
        """
    )
    result = run(resolve_agent(spec), _cfg(synth_release_dir, agent=spec, network_policy="continue"))
    body = result.body
    assert body["completed"] is True
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    sessions = body["window"]["sessions"]
    assert _texts(result) == ["NetworkBlockedError,NetworkBlockedError,NetworkBlockedError"] * sessions
    kinds = [e["kind"] for e in _events(result.trajectory_path) if e["type"] == "egress_attempt"]
    assert kinds == ["getaddrinfo", "socket", "getnameinfo"] * sessions
    assert body["network"]["egress_attempts"] == 3 * sessions


@needs_wall
@pytest.mark.parametrize("policy", ["abort", "continue"])
def test_an_attempt_while_the_agent_is_imported_is_recorded(
    policy: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(
        """
        import socket

        try:
            socket.getaddrinfo("example.invalid", 443)  # at import time, in every process
        except OSError:
            pass

        def agent(prompt, tools):
            return "loaded"
        """
    )
    cfg = _cfg(synth_release_dir, agent=spec, network_policy=policy, arms=("main", "shifted"))
    result = run(resolve_agent(spec), cfg)
    body = result.body
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    egress = [e for e in _events(result.trajectory_path) if e["type"] == "egress_attempt"]
    assert {e["kind"] for e in egress} == {"getaddrinfo"}
    assert all(e["target"] == "example.invalid:443" for e in egress)
    if policy == "abort":
        assert len(egress) == 1
        assert body["completed"] is False
        assert _texts(result) == []
    else:  # one attempt per process: two cells
        assert [(e["arm"], e["clock"]) for e in egress] == [("main", "pit"), ("shifted", "pit")]
        assert body["completed"] is True
        assert set(_texts(result)) == {"loaded"}


BLOCKED_QUIETLY = {
    # each is refused by the kernel before anything could leave; none reaches a network call (seccomp refuses
    # a process of the agent's own: threads may run, see test_pit_agent_shapes.py)
    "subprocess": (
        (
            "import subprocess, sys\n"
            "subprocess.run([sys.executable, '-c', 'import socket; socket.create_connection((\"192.0.2.1\", 80))'])"
        ),
        "PermissionError",
    ),
    "fork": ("import os\nos.fork()", "PermissionError"),
    "fork_by_raw_clone": (  # clone(SIGCHLD): a process, not a thread
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nreturn f'{libc.syscall(56, 17, 0, 0, 0, 0)}:{ctypes.get_errno()}'",
        "-1:1",
    ),
    # past both recorders, a socket pair of a network family is refused (EPERM), without a record (AF_UNIX pairs
    # work: they reach nothing outside the jail)
    "inet_socketpair_by_raw_syscall": (
        (
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "pair = (ctypes.c_int * 2)()\nreturn f'{libc.syscall(53, 2, 1, 0, pair)}:{ctypes.get_errno()}'"
        ),
        "-1:1",
    ),
    "netlink_socketpair_by_raw_syscall": (
        (
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "pair = (ctypes.c_int * 2)()\nreturn f'{libc.syscall(53, 16, 3, 0, pair)}:{ctypes.get_errno()}'"
        ),
        "-1:1",
    ),
    "unshare_network": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nreturn f'{libc.unshare(0x40000000)}:{ctypes.get_errno()}'",
        "-1:1",
    ),
    "setns_into_pid_1": (
        (
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "fd = os.open('/proc/1/ns/net', os.O_RDONLY)\nreturn f'{libc.setns(fd, 0)}:{ctypes.get_errno()}'"
        ),
        "-1:1",
    ),
}

QUIET_AGENT = """
def agent(prompt, tools):
    try:
{code}
        return "no error"
    except BaseException as exc:
        return type(exc).__name__
"""


@needs_wall
@pytest.mark.parametrize("name", list(BLOCKED_QUIETLY))
def test_ways_around_the_recorders_are_refused_by_the_kernel(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    code, expected = BLOCKED_QUIETLY[name]
    spec = write_agent(QUIET_AGENT.format(code=textwrap.indent(code, " " * 8)))
    result = run(resolve_agent(spec), _cfg(synth_release_dir, agent=spec, end=RUN_START))
    assert _texts(result) == [expected]
    assert result.body["network"]["egress_attempts"] == 0


# --- the gateway and the provider key --------------------------------------------------------------------------------

KEY_ENV = "EVALKIT_TEST_CANARY_API_KEY"
KEY = "sk-canary-7f3a9c-DO-NOT-LEAK"


class _Scripted(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits: list[str] = []

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        json.loads(self.rfile.read(length))
        _Scripted.hits.append(self.headers.get("Authorization", ""))
        message = {"role": "assistant", "content": "nothing today"}
        data = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "canary-model",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def scripted_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    registry = tmp_path / "registry.toml"
    registry.write_text(
        '[models."canary/one"]\nprovider = "openai-compatible"\napi_model = "canary"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\napi_key_env = "{KEY_ENV}"\n'
        "context_window = 100000\nmax_output = 4096\n"
        'prices = { input = "1", output = "1", cache_read = "1", cache_write = "1" }\n'
    )
    monkeypatch.setenv("EVALKIT_REGISTRY", str(registry))
    monkeypatch.setenv(KEY_ENV, KEY)
    _Scripted.hits = []
    try:
        yield "canary/one", port
    finally:
        server.shutdown()
        server.server_close()


GATEWAY_AGENT = """
import gc, os, sys

from evalkit.pit import AgentReply, from_model

MODEL = from_model({model!r})
MARK = "DO-NOT-LEAK"


def _found():
    places = [f"{{k}}={{v}}" for k, v in os.environ.items()]
    for path in ("/proc/self/environ", "/proc/1/environ", "/proc/self/cmdline"):
        try:
            places.append(open(path, "rb").read().decode("utf-8", "replace"))
        except OSError:
            pass
    for obj in gc.get_objects():
        try:
            if isinstance(obj, dict):
                places += [x for x in list(obj.keys()) + list(obj.values()) if isinstance(x, str)]
            elif hasattr(obj, "__dict__"):
                places += [x for x in vars(obj).values() if isinstance(x, str)]
                if type(obj).__name__ == "Gateway":
                    places += [str(getattr(obj, "_saved_keys", ""))]
        except Exception:
            pass
    return sum(1 for s in places if MARK in s and s != MARK)


def _direct():
    try:
        from evalkit.pit import Gateway
        Gateway().complete({model!r}, {{"messages": [{{"role": "user", "text": "hi"}}]}})
        return "reached"
    except BaseException as exc:
        return type(exc).__name__


def agent(prompt, tools):
    leaks, direct = _found(), _direct()
    reply = MODEL(prompt, tools)
    return AgentReply(picks=reply.picks, text=f"leaks={{leaks}} | direct={{direct}} | model={{reply.text}}")
"""


@needs_wall
def test_the_key_stays_outside_and_every_model_call_is_on_the_record(
    scripted_model: tuple[str, int], synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    model, _ = scripted_model
    spec = write_agent(GATEWAY_AGENT.format(model=model))
    result = run(
        resolve_agent(spec), _cfg(synth_release_dir, agent=spec, arms=("main", "shifted"), probe_items=1)
    )
    body = result.body
    assert body["valid"] is True, body["agent_errors"]
    texts = _texts(result)
    # Gateway() inside the jail may make its socket pair, but cannot start its process (refused by the kernel)
    assert texts and all(t == "leaks=0 | direct=PermissionError | model=nothing today" for t in texts), texts
    calls = [e for e in _events(result.trajectory_path) if e["type"] == "model_call"]
    requests = [e for e in _events(result.trajectory_path) if e["type"] == "model_request"]
    # every request that reached the provider is a trajectory event: none went around the harness
    assert (
        len(_Scripted.hits)
        == len(calls)
        == len(requests)
        == body["protocol"]["P4_costs_and_frictions"]["model_calls"]
    )
    assert all(h == f"Bearer {KEY}" for h in _Scripted.hits)  # the gateway, outside, holds the key
    for path in (result.trajectory_path, result.receipt_path):
        assert KEY not in path.read_text()
        assert "DO-NOT-LEAK" not in path.read_text()


@needs_wall
def test_reaching_the_provider_around_the_gateway_is_recorded(
    scripted_model: tuple[str, int], synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    _, port = scripted_model
    spec = write_agent(
        f"""
        import http.client

        def agent(prompt, tools):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", {port}, timeout=1)
                conn.request("POST", "/v1/chat/completions", body="{{}}")
            except BaseException:
                pass
            return "went on"
        """
    )
    result = run(resolve_agent(spec), _cfg(synth_release_dir, agent=spec))
    assert result.body["valid"] is False
    assert result.body["invalidated_by"] == ["network_egress_attempt"]
    egress = [e for e in _events(result.trajectory_path) if e["type"] == "egress_attempt"]
    assert egress[0]["target"] == f"127.0.0.1:{port}"
    assert _Scripted.hits == []


# --- limits: hangs, crashes and garbage are the agent's failure, with the cause --------------------------------------

FAILURES = {
    "sleeps": (
        "import time\ntime.sleep(60)",
        AgentLimits(session_seconds=1.5),
        "AgentTimeout",
        "more than 1.5 s",
    ),
    "spins": (
        "while True:\n    pass",
        AgentLimits(cpu_seconds=1, session_seconds=30),
        "AgentCPULimit",
        "1 s of CPU time",
    ),
    "allocates": ("x = bytearray(8 << 30)", AgentLimits(), "MemoryError", ""),
    "exits": ("import os\nos._exit(3)", AgentLimits(), "AgentCrashed", "exited with code 3"),
    "segfaults": ("import ctypes\nctypes.string_at(0)", AgentLimits(), "AgentCrashed", "SIGSEGV"),
    "garbage": (
        "import os\nos.write(4, b'{not json\\n')\nimport time\ntime.sleep(5)",
        AgentLimits(),
        "AgentProtocolError",
        "not JSON",
    ),
    "endless_line": (
        "import os\nwhile True:\n    os.write(4, b'x' * 65536)",
        AgentLimits(),
        "AgentProtocolError",
        "longer than",
    ),
    "floods_requests": (
        "while True:\n    tools.pit_coverage()",
        AgentLimits(session_requests=50),
        "AgentLimit",
        "more than 50 requests",
    ),
    "keyboard_interrupt": ("raise KeyboardInterrupt", AgentLimits(), "KeyboardInterrupt", ""),
    "system_exit": ("raise SystemExit(4)", AgentLimits(), "SystemExit", "4"),
    "prints_then_dies": (
        "import ctypes\nprint('last words', flush=True)\nctypes.string_at(0)",
        AgentLimits(),
        "AgentCrashed",
        "last words",
    ),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_an_agent_that_hangs_or_dies_fails_its_cell_with_the_cause(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    code, limits, error_type, needle = FAILURES[name]
    if name == "endless_line":
        limits = AgentLimits(message_bytes=1 << 20)
    spec = write_agent("def agent(prompt, tools):\n" + textwrap.indent(code, "    ") + "\n")
    result = run(resolve_agent(spec), _cfg(synth_release_dir, agent=spec), limits=limits)
    body = result.body
    assert body["valid"] is False
    assert body["invalidated_by"] == ["agent_error"]
    assert body["completed"] is False
    (err,) = body["agent_errors"]
    assert err["error_type"] == error_type, err
    assert needle in err["message"], err
    assert (err["arm"], err["clock"], err["session_date"]) == ("main", "pit", RUN_START)
    assert "Traceback" not in err["message"]


def test_an_agent_that_cannot_be_loaded_is_the_callers_error_and_nothing_is_written(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent("def agent(prompt, tools):\n    return []\nNOT_CALLABLE = 3\n")
    missing = spec.replace(":agent", ":missing")
    with pytest.raises(AgentSpecError, match="has no attribute 'missing'"):
        run(resolve_agent(missing), _cfg(synth_release_dir, agent=missing))
    with pytest.raises(AgentSpecError, match="not callable"):
        run(resolve_agent(spec.replace(":agent", ":NOT_CALLABLE")), _cfg(synth_release_dir))
    broken = write_agent("raise RuntimeError('import-time failure')\n")
    with pytest.raises(AgentSpecError, match="RuntimeError: import-time failure"):
        run(resolve_agent(broken), _cfg(synth_release_dir))
    assert not (in_tmp / "receipt.json").exists()
    assert not (in_tmp / "trajectory.jsonl").exists()


# --- the wall the machine gives, measured and said in one line ------------------------------------------------------


def test_without_bubblewrap_the_agent_runs_behind_a_weaker_wall_and_says_so(
    synth_release_dir: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    import evalkit.wall._zygote

    real_which = shutil.which
    monkeypatch.setattr(
        evalkit.wall._zygote.shutil,
        "which",
        lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k),
    )
    result = run(resolve_agent("stub"), _cfg(synth_release_dir))
    body = result.body
    assert body["valid"] is True
    assert body["agent"]["wall"]["full"] is False
    assert body["network"]["scope"].startswith(
        "NOT isolated: the agent shares the harness's network namespace"
    )
    assert any("filesystem is visible" in w for w in body["agent"]["wall"]["weaker"])
    config = in_tmp / "run.json"
    _cfg(synth_release_dir).dump(config)
    code, out, err = cli("run", "--config", str(config))
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("wall ")]
    assert len(lines) == 1
    assert lines[0].startswith("wall        WEAKER than designed: ")
    code, out, err = cli("run", "--config", str(config), "--netns")
    assert code == 2
    assert err.startswith("error: --netns") and err.count("\n") == 1, err


@needs_wall
def test_with_bubblewrap_the_scope_is_measured_not_declared(
    synth_release_dir: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALKIT_INSIDE_NETNS", "1")  # an environment variable claims nothing any more
    body = run(resolve_agent("stub"), _cfg(synth_release_dir)).body
    assert (
        body["network"]["scope"]
        == "network namespace without routes (interfaces: lo; measured from the host)"
    )
    assert body["network"]["guard"] == "recorder_in_agent_jail"
    wall = body["agent"]["wall"]
    assert wall["network"] == body["network"]["scope"]
    if os.geteuid() == 0:
        assert wall["full"] is True, wall
    assert body["agent"]["limits"]["processes"] == 1


def test_the_jail_leaves_no_process_behind(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent("import time\ndef agent(prompt, tools):\n    time.sleep(30)\n")
    before = _descendants()
    result = run(resolve_agent(spec), _cfg(synth_release_dir), limits=AgentLimits(session_seconds=0.5))
    assert result.body["agent_errors"][0]["error_type"] == "AgentTimeout"
    assert _descendants() == before


def _descendants() -> set[int]:
    me = os.getpid()
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    out: set[int] = set()
    frontier = {me}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - out
        out |= frontier
    return out


_ = (signal, ConfigError)
