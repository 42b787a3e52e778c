"""The network guard: as a recorder inside the agent's jail (driven from agents), and as a context manager.

Every target is unroutable by construction (TEST-NET-1 192.0.2.1, the reserved ``.invalid`` TLD); inside the
jail the agent has no route and no socket at all, and the session-wide test guard in tests/conftest.py blocks
non-loopback connects in this process as well, so even a guard that failed would reach nothing real.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

from evalkit.pit import (
    NetworkBlocked,
    NetworkBlockedError,
    NetworkGuard,
    RunConfig,
    network_guard,
    resolve_agent,
    run,
)

TARGET_IP = "192.0.2.1"
TARGET_HOST = "example.invalid"

# Each attempt runs inside the agent's jailed process, from a module written to the test's temp directory; the
# line marked ``# ATTEMPT`` is where the call site must point. (name: code, acceptable first kinds, target part)
ATTEMPTS: dict[str, tuple[str, set[str], str | None]] = {
    "urllib": (
        f"urllib.request.urlopen('http://{TARGET_IP}/', timeout=1)  # ATTEMPT",
        {"create_connection", "getaddrinfo"},
        TARGET_IP,
    ),
    "http.client": (
        f"conn = http.client.HTTPConnection('{TARGET_HOST}', 80, timeout=1)\nconn.request('GET', '/')  # ATTEMPT",
        {"create_connection", "getaddrinfo"},
        TARGET_HOST,
    ),
    "create_connection": (
        f"socket.create_connection(('{TARGET_IP}', 80), timeout=1)  # ATTEMPT",
        {"create_connection"},
        TARGET_IP,
    ),
    "socket": ("socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # ATTEMPT", {"socket"}, "AF_INET"),
    "getaddrinfo": (f"socket.getaddrinfo('{TARGET_HOST}', 443)  # ATTEMPT", {"getaddrinfo"}, TARGET_HOST),
    "gethostbyname": (f"socket.gethostbyname('{TARGET_HOST}')  # ATTEMPT", {"gethostbyname"}, TARGET_HOST),
    "tls": (
        f"ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname='{TARGET_HOST}')  # ATTEMPT",
        {"tls_wrap"},
        TARGET_HOST,
    ),
}

AGENT = """
import http.client, socket, ssl, urllib.request


def attempt():
{code}


def abort_agent(prompt, tools):
    tools.pit_list(limit=5)
    try:  # the agent tries to swallow whatever the guard raises
        attempt()
    except Exception:
        pass
    return "after the attempt"


def continue_agent(prompt, tools):
    try:
        attempt()
        seen = "no error"
    except OSError as exc:
        seen = type(exc).__name__
    return {{"picks": [r["row_key"] for r in tools.pit_list(limit=3)["rows"]], "seen": seen}}


def wrapped(prompt, tools):
    from evalkit.pit import AgentReply
    out = continue_agent(prompt, tools)
    return AgentReply(picks=tuple(out["picks"]), text=out["seen"])
"""


@pytest.fixture
def attempt_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], tuple[str, Path, int]]:
    """Write the agent module for one attempt; returns (module name, its file, the attempt's line)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    counter = iter(range(100))

    def write(name: str) -> tuple[str, Path, int]:
        code = ATTEMPTS[name][0]
        module = f"guard_agent_{next(counter)}_{abs(hash((name, str(tmp_path)))) % 10**8}"
        source = AGENT.format(code="\n".join("    " + ln for ln in code.splitlines()))
        path = tmp_path / f"{module}.py"
        path.write_text(source)
        line = next(i for i, ln in enumerate(source.splitlines(), start=1) if "# ATTEMPT" in ln)
        return module, path, line

    return write


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
            "network_policy": policy, "probe_items": 2, "mask_decoys": False}  # the window's sessions only: the masks as released (a served shifted cell runs hidden days too)
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_abort_stops_at_the_first_attempt_even_if_swallowed(
    name, synth_release_dir, in_tmp, events_of, attempt_agent
):
    _, kinds, target = ATTEMPTS[name]
    module, path, line = attempt_agent(name)
    before = _snapshot()
    result = run(resolve_agent(f"{module}:abort_agent"), _cfg(synth_release_dir, "abort"))
    _assert_guard_removed(before)  # the harness's own process was never patched
    body = result.body
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    assert body["completed"] is False
    assert body["network"]["policy"] == "fail_closed"  # the receipt's name for the config's abort
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
    assert ev["call_site"] == f"{path}:{line}", ev  # the agent's own line, inside the jail
    assert (ev["arm"], ev["clock"], ev["session_date"]) == ("main", "leaky", "2023-03-01")
    types_ = [e["type"] for e in events]
    assert types_.count("agent_call") == 1
    assert "decision" not in types_  # stopped inside the first call: "after the attempt" never came back
    assert events[-1] == {
        **events[-1],
        "type": "run_end",
        "valid": False,
        "invalidated_by": ["network_egress_attempt"],
    }
    assert body["network"]["attempts"][0]["kind"] == ev["kind"]


def test_abort_holds_even_against_a_bare_except(synth_release_dir, in_tmp, events_of, tmp_path, monkeypatch):
    (tmp_path / "stubborn_guard_agent.py").write_text(
        "import contextlib, socket\n\n"
        "def agent(prompt, tools):\n"
        "    for _ in range(3):\n"
        "        with contextlib.suppress(BaseException):\n"
        f"            socket.getaddrinfo('{TARGET_HOST}', 80)\n"
        "    return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run(resolve_agent("stubborn_guard_agent:agent"), _cfg(synth_release_dir, "abort"))
    assert result.body["valid"] is False
    assert result.body["completed"] is False
    assert result.body["network"]["egress_attempts"] == 1
    assert [e["type"] for e in events_of(result.trajectory_path)].count("agent_call") == 1


def test_abort_error_is_a_base_exception_and_continue_error_an_oserror():
    assert not issubclass(NetworkBlocked, Exception)
    assert issubclass(NetworkBlocked, BaseException)
    assert issubclass(NetworkBlockedError, OSError)


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_continue_lets_the_agent_go_on_but_the_run_is_invalid(
    name, synth_release_dir, in_tmp, events_of, attempt_agent
):
    _, kinds, _ = ATTEMPTS[name]
    module, _, _ = attempt_agent(name)
    result = run(resolve_agent(f"{module}:wrapped"), _cfg(synth_release_dir, "continue"))
    body = result.body
    n_calls = 9 * 3 + body["probe"]["items_asked"]
    texts = [e["text"] for e in events_of(result.trajectory_path) if e["type"] == "decision"]
    expected = "URLError" if name == "urllib" else "NetworkBlockedError"  # urllib wraps the guard's OSError
    assert texts == [expected] * 27
    assert body["completed"] is True
    assert len(body["cells"]) == 9
    assert body["probe"]["items_asked"] == 2
    assert body["valid"] is False
    assert body["invalidated_by"] == ["network_egress_attempt"]
    assert body["network"]["policy"] == "record_and_continue"
    assert body["network"]["egress_attempts"] >= n_calls
    events = events_of(result.trajectory_path)
    egress = [e for e in events if e["type"] == "egress_attempt"]
    assert len(egress) == body["network"]["egress_attempts"]
    assert all(e["kind"] in kinds | {"socket", "connect", "getaddrinfo", "create_connection"} for e in egress)
    assert {(e["arm"], e["clock"]) for e in egress} >= {(a, c) for a in ("main", "redacted", "shifted") for c in ("leaky", "dump", "pit")}


def test_the_harness_process_is_never_patched(synth_release_dir, in_tmp, attempt_agent):
    """The guard runs inside the agent's jail: the harness's own socket module is the same before, during and
    after a run, also one that an egress attempt stopped."""
    before = _snapshot()
    module, _, _ = attempt_agent("getaddrinfo")
    result = run(resolve_agent(f"{module}:abort_agent"), _cfg(synth_release_dir, "abort"))
    assert result.body["invalidated_by"] == ["network_egress_attempt"]
    _assert_guard_removed(before)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # the harness's own network is untouched
    s.close()


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
