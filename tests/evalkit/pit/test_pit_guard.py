"""The network guard, driven from inside an agent.

Every target is unroutable by construction (TEST-NET-1 192.0.2.1, the reserved ``.invalid`` TLD), and the
session-wide test guard in tests/conftest.py blocks non-loopback connects as well, so even a guard that failed
would reach nothing real.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
import ssl
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import (
    NetworkBlocked,
    NetworkBlockedError,
    NetworkGuard,
    RunConfig,
    from_callable,
    network_guard,
    run,
)

THIS_FILE = Path(__file__).name
TARGET_IP = "192.0.2.1"
TARGET_HOST = "example.invalid"


def _here() -> int:
    """The line number of the caller's next line (where the attempt is made)."""
    return sys._getframe(1).f_lineno + 1


def _attempt_urllib(box: dict[str, Any]) -> None:
    box["line"] = _here()
    urllib.request.urlopen(f"http://{TARGET_IP}/", timeout=1)


def _attempt_http_client(box: dict[str, Any]) -> None:
    conn = http.client.HTTPConnection(TARGET_HOST, 80, timeout=1)
    box["line"] = _here()
    conn.request("GET", "/")


def _attempt_create_connection(box: dict[str, Any]) -> None:
    box["line"] = _here()
    socket.create_connection((TARGET_IP, 80), timeout=1)


def _attempt_socket(box: dict[str, Any]) -> None:
    box["line"] = _here()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.connect((TARGET_IP, 80))


def _attempt_connect(box: dict[str, Any]) -> None:
    # A socket made before the run: only connect() is left for the guard to stop.
    s = box["presocket"]
    box["line"] = _here()
    s.connect((TARGET_IP, 80))


def _attempt_getaddrinfo(box: dict[str, Any]) -> None:
    box["line"] = _here()
    socket.getaddrinfo(TARGET_HOST, 443)


def _attempt_gethostbyname(box: dict[str, Any]) -> None:
    box["line"] = _here()
    socket.gethostbyname(TARGET_HOST)


def _attempt_tls(box: dict[str, Any]) -> None:
    ctx = ssl.create_default_context()
    a, b = socket.socketpair(socket.AF_UNIX)
    box["cleanup"] = (a, b)
    box["line"] = _here()
    ctx.wrap_socket(a, server_hostname=TARGET_HOST)


def _attempt_asyncio(box: dict[str, Any]) -> None:
    async def go() -> None:
        await asyncio.open_connection(TARGET_IP, 80)

    box["line"] = None  # the attempt is made inside the event loop
    asyncio.run(go())


ATTEMPTS: dict[str, tuple[Callable[[dict[str, Any]], None], set[str], str | None]] = {
    # name: (attempt, acceptable first kinds, target substring)
    "urllib": (_attempt_urllib, {"create_connection", "getaddrinfo"}, TARGET_IP),
    "http.client": (_attempt_http_client, {"create_connection", "getaddrinfo"}, TARGET_HOST),
    "create_connection": (_attempt_create_connection, {"create_connection"}, TARGET_IP),
    "socket": (_attempt_socket, {"socket"}, "AF_INET"),
    "connect": (_attempt_connect, {"connect"}, TARGET_IP),
    "getaddrinfo": (_attempt_getaddrinfo, {"getaddrinfo"}, TARGET_HOST),
    "gethostbyname": (_attempt_gethostbyname, {"gethostbyname"}, TARGET_HOST),
    "tls": (_attempt_tls, {"tls_wrap"}, TARGET_HOST),
    "asyncio": (_attempt_asyncio, {"socket", "getaddrinfo", "connect"}, None),
}

GUARDED = (
    (socket.socket, "__init__"),
    (socket.socket, "connect"),
    (socket.socket, "connect_ex"),
    (socket, "create_connection"),
    (socket, "getaddrinfo"),
    (socket, "gethostbyname"),
    (socket, "gethostbyname_ex"),
    (socket, "gethostbyaddr"),
    (ssl.SSLContext, "wrap_socket"),
    (ssl.SSLContext, "wrap_bio"),
)


def _snapshot() -> list[object]:
    return [getattr(owner, name) for owner, name in GUARDED]


def _assert_guard_removed(before: list[object]) -> None:
    after = _snapshot()
    for (owner, name), b, a in zip(GUARDED, before, after, strict=True):
        assert a is b, f"{getattr(owner, '__name__', owner)}.{name} was not restored"
    assert NetworkGuard._active is None


def _cfg(release_dir, policy: str, **kw) -> RunConfig:
    base = {"bundle_path": str(release_dir), "forms": ("8-K",), "start": "2023-03-01", "end": "2023-03-03",
            "network_policy": policy, "probe_items": 2}
    return RunConfig(**{**base, **kw})


@pytest.fixture
def presocket():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    yield s
    s.close()


def _close(box: dict[str, Any]) -> None:
    for s in box.get("cleanup", ()):
        s.close()


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_abort_stops_at_the_first_attempt_even_if_swallowed(name, synth_release_dir, in_tmp, events_of, presocket):
    attempt, kinds, target = ATTEMPTS[name]
    box: dict[str, Any] = {"presocket": presocket}
    calls = {"n": 0, "after": 0}

    def agent(prompt, tools):
        calls["n"] += 1
        tools.pit_list(limit=5)
        try:  # noqa: SIM105 - spelled out: the agent tries to swallow the guard's error
            attempt(box)
        except Exception:
            pass
        calls["after"] += 1
        return []

    before = _snapshot()
    result = run(from_callable(agent, name="egress"), _cfg(synth_release_dir, "abort"))
    _assert_guard_removed(before)
    _close(box)
    body = result.body
    assert calls == {"n": 1, "after": 0}  # stopped inside the first call, not after it
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    assert body["completed"] is False
    assert body["network"]["policy"] == "abort"
    assert body["network"]["clean"] is False
    assert body["network"]["egress_attempts"] == 1
    assert body["cells"] == []  # the run stopped inside the first cell
    assert body["probe"]["verdict"] == "not_run"
    events = events_of(result.trajectory_path)
    egress = [e for e in events if e["type"] == "egress_attempt"]
    assert len(egress) == 1
    ev = egress[0]
    assert ev["kind"] in kinds
    if target is not None:
        assert target in (ev["target"] or "")
    if box.get("line") is not None:
        assert ev["call_site"] is not None, ev
        assert ev["call_site"].endswith(f"{THIS_FILE}:{box['line']}"), ev
    assert (ev["arm"], ev["clock"], ev["session_date"]) == ("main", "leaky", "2023-03-01")
    assert [e["type"] for e in events].count("agent_call") == 1
    assert events[-1] == {**events[-1], "type": "run_end", "valid": False, "invalidated_by": ["network_egress_attempt"]}
    assert body["network"]["attempts"][0]["kind"] == ev["kind"]


def test_abort_holds_even_against_a_bare_except(synth_release_dir, in_tmp, events_of):
    calls = {"n": 0}

    def stubborn(prompt, tools):
        calls["n"] += 1
        with contextlib.suppress(BaseException):
            socket.getaddrinfo(TARGET_HOST, 80)
        return []

    before = _snapshot()
    result = run(from_callable(stubborn), _cfg(synth_release_dir, "abort"))
    _assert_guard_removed(before)
    assert calls["n"] == 1
    assert result.body["valid"] is False
    assert result.body["completed"] is False
    assert result.body["network"]["egress_attempts"] == 1
    assert [e["type"] for e in events_of(result.trajectory_path)].count("agent_call") == 1


def test_abort_error_is_a_base_exception_and_continue_error_an_oserror():
    assert not issubclass(NetworkBlocked, Exception)
    assert issubclass(NetworkBlocked, BaseException)
    assert issubclass(NetworkBlockedError, OSError)


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_continue_lets_the_agent_go_on_but_the_run_is_invalid(name, synth_release_dir, in_tmp, events_of, presocket):
    attempt, kinds, _ = ATTEMPTS[name]
    box: dict[str, Any] = {"presocket": presocket}
    seen: list[str] = []

    def agent(prompt, tools):
        try:
            attempt(box)
        except OSError as exc:
            seen.append(type(exc).__name__)
        _close(box)
        return [r["row_key"] for r in tools.pit_list(limit=3)["rows"]]

    before = _snapshot()
    result = run(from_callable(agent, name="egress"), _cfg(synth_release_dir, "continue"))
    _assert_guard_removed(before)
    body = result.body
    n_calls = 9 * 3 + body["probe"]["items_asked"]
    assert len(seen) == n_calls
    assert body["completed"] is True
    assert len(body["cells"]) == 9
    assert body["probe"]["items_asked"] == 2
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    assert body["network"]["egress_attempts"] >= n_calls
    events = events_of(result.trajectory_path)
    egress = [e for e in events if e["type"] == "egress_attempt"]
    assert len(egress) == body["network"]["egress_attempts"]
    assert all(e["kind"] in kinds | {"socket", "connect", "getaddrinfo", "create_connection"} for e in egress)
    assert {(e["arm"], e["clock"]) for e in egress} >= {(a, c) for a in ("main", "redacted", "shifted") for c in ("leaky", "dump", "pit")}


def test_af_unix_keeps_working_inside_the_agent(synth_release_dir, in_tmp, tmp_path_factory):
    sock_dir = tmp_path_factory.mktemp("unix")
    path = str(sock_dir / "s")
    got: list[bytes] = []

    def chatty(prompt, tools):
        a, b = socket.socketpair()
        with a, b:
            a.sendall(b"ping")
            got.append(b.recv(4))
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with server:
            server.bind(path)
            server.listen(1)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with client:
                client.connect(path)
                conn, _ = server.accept()
                with conn:
                    client.sendall(b"pong")
                    got.append(conn.recv(4))
        Path(path).unlink()
        return []

    result = run(from_callable(chatty), _cfg(synth_release_dir, "abort", arms=("main",), clocks=("pit",)))
    assert result.body["valid"] is True
    assert result.body["network"]["clean"] is True
    assert result.body["network"]["egress_attempts"] == 0
    assert got == [b"ping", b"pong"] * 3


def test_guard_is_removed_after_a_run_that_raised(synth_release_dir, in_tmp):
    class Escape(BaseException):
        pass

    def escaping(prompt, tools):
        raise Escape

    before = _snapshot()
    with pytest.raises(Escape):
        run(from_callable(escaping), _cfg(synth_release_dir, "abort"))
    _assert_guard_removed(before)
    # A run that raised leaves no half-written trajectory or receipt behind.
    assert not Path("receipt.json").exists()
    # The network works as before the run (a loopback socket can be made again).
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.close()


def test_guard_is_removed_after_keyboard_interrupt(synth_release_dir, in_tmp):
    def interrupted(prompt, tools):
        raise KeyboardInterrupt

    before = _snapshot()
    with pytest.raises(KeyboardInterrupt):
        run(from_callable(interrupted), _cfg(synth_release_dir, "continue"))
    _assert_guard_removed(before)


def test_network_guard_context_manager_blocks_and_restores():
    before = _snapshot()
    with pytest.raises(NetworkBlocked), network_guard("abort") as guard:
        socket.create_connection((TARGET_IP, 443))
    assert guard.attempts[0].kind == "create_connection"
    assert guard.attempts[0].target == f"{TARGET_IP}:443"
    _assert_guard_removed(before)
    with network_guard("continue") as guard:
        for fn in (lambda: socket.gethostbyname_ex(TARGET_HOST), lambda: socket.gethostbyaddr(TARGET_IP)):
            with pytest.raises(NetworkBlockedError):
                fn()
        with pytest.raises(NetworkBlockedError):
            socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    assert [a.kind for a in guard.attempts] == ["gethostbyname_ex", "gethostbyaddr", "socket"]
    _assert_guard_removed(before)


def test_only_one_guard_at_a_time():
    with network_guard("abort"), pytest.raises(RuntimeError):
        NetworkGuard("abort").install()
    assert NetworkGuard._active is None


def test_low_level_socket_module_is_blocked_too():
    """`_socket.socket` and `_socket.getaddrinfo` bypass the `socket` module's names; they are guarded as well."""
    import _socket

    before = [_socket.socket, _socket.getaddrinfo, *_snapshot()]
    with network_guard("continue") as guard:
        with pytest.raises(NetworkBlockedError):
            _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        with pytest.raises(NetworkBlockedError):
            _socket.getaddrinfo(TARGET_HOST, 80)
        unix = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)  # AF_UNIX still works
        unix.close()
    assert [a.kind for a in guard.attempts] == ["socket", "getaddrinfo"]
    after = [_socket.socket, _socket.getaddrinfo, *_snapshot()]
    assert all(a is b for a, b in zip(before, after, strict=True))
