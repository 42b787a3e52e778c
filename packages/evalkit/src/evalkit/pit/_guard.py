"""The network guard: a recorder of network attempts, installed inside the agent's jailed process.

It replaces the socket entry points: creating an AF_INET/AF_INET6 socket, ``socket.connect``/``connect_ex``,
``socket.create_connection``, DNS resolution (``getaddrinfo``, ``gethostbyname``, ``gethostbyname_ex``,
``gethostbyaddr``) and TLS wrapping (``SSLContext.wrap_socket``/``wrap_bio``). There is no allowlist and no
override.

Each attempt is recorded with its kind, target (where known) and the call site outside the harness and the
standard library, and handed to ``on_attempt``. In a PIT run the guard lives in the agent's jailed process
(:mod:`evalkit.pit._agent_child`), beside an audit hook, and ``on_attempt`` writes each attempt to the harness at
once; under policy ``abort`` it then ends the process, under ``continue`` the raised :class:`NetworkBlockedError`
(an ``OSError``, what network code expects) lets the agent go on. Used directly (``network_guard``), ``abort``
raises :class:`NetworkBlocked`, a ``BaseException`` that ``except Exception`` cannot swallow.

The guard is not the boundary: it patches Python names in one process, and code can go around it. In a PIT run
the kernel blocks (the jail's network namespace has no route, and seccomp ends a process that makes a socket of a
network family). ``AF_UNIX`` sockets are not patched: they reach nothing outside the jail.
"""

from __future__ import annotations

import _socket
import socket
import ssl
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import attrs

__all__ = ["EgressAttempt", "NetworkBlocked", "NetworkBlockedError", "NetworkGuard", "network_guard"]

_HARNESS_DIRS = tuple(
    str(Path(p).resolve())
    for p in {
        str(Path(__file__).resolve().parents[1]),  # the evalkit package
        str(Path(__file__).resolve().parents[2] / "pit_harness"),
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"],
    }
)


class NetworkBlocked(BaseException):
    # A signal, not an error an agent should handle: hence BaseException and no Error suffix.
    """Raised under policy ``abort``. A BaseException so that ``except Exception`` cannot swallow it."""


class NetworkBlockedError(OSError):
    """Raised under policy ``continue``: network code sees an ordinary connection failure."""


@attrs.frozen
class EgressAttempt:
    kind: str  # socket | connect | create_connection | getaddrinfo | gethostbyname | ... | tls_wrap
    target: str | None
    call_site: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"kind": self.kind, "target": self.target, "call_site": self.call_site}


def _call_site() -> str | None:
    frame = sys._getframe(2)  # pyright: ignore[reportPrivateUsage] - the documented way to walk the stack cheaply
    while frame is not None:
        filename = _resolved(frame.f_code.co_filename)
        if not filename.startswith(_HARNESS_DIRS) and "site-packages" not in filename:
            return f"{_display_path(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _resolved(name: str) -> str:
    """A code object's file name, resolved, as the harness can always write it. The agent chooses it
    (``compile(src, name, "exec")``): a lone surrogate or a NUL in it made resolving or writing the attempt raise,
    so the attempt went unrecorded while the connection was refused. Surrogates are escaped (``\\udxxx``); a name
    that cannot be resolved is kept as it is."""
    name = name.encode("utf-8", "backslashreplace").decode("utf-8")
    if name.startswith("<"):
        return name
    try:
        return str(Path(name).resolve())
    except (OSError, ValueError, RuntimeError):
        return name


def _display_path(filename: str) -> str:
    """Relative to the working directory when the file lies under it, else absolute: a run's trajectory must
    not depend on which directory it was started from unless the agent's own code lives there."""
    cwd = Path.cwd()
    path = Path(filename)
    return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else filename


def _target(address: Any) -> str | None:
    if isinstance(address, tuple):
        parts = cast("tuple[object, ...]", address)
        return f"{parts[0]}:{parts[1]}" if len(parts) >= 2 else str(parts)
    if address is None:
        return None
    return str(address)


def _is_inet(family: Any) -> bool:
    return family in (socket.AF_INET, socket.AF_INET6)


class NetworkGuard:
    """Installs and removes the patches; records attempts. One may be active per process at a time."""

    _active_lock = threading.Lock()
    _active: NetworkGuard | None = None

    def __init__(self, policy: str = "abort", on_attempt: Callable[[EgressAttempt], None] | None = None) -> None:
        if policy not in ("abort", "continue"):
            raise ValueError(f"network policy must be abort or continue, not {policy!r}")
        self.policy = policy
        self.attempts: list[EgressAttempt] = []
        self._on_attempt = on_attempt
        self._saved: list[tuple[object, str, object]] = []

    @property
    def clean(self) -> bool:
        return not self.attempts

    def _block(self, kind: str, target: str | None) -> BaseException:
        try:
            site = _call_site()
        except Exception:  # a detail the agent can spoil (see _resolved): the attempt is recorded without it
            site = None
        attempt = EgressAttempt(kind=kind, target=target, call_site=site)
        self.attempts.append(attempt)
        if self._on_attempt is not None:
            self._on_attempt(attempt)
        msg = f"network access blocked by the evalkit network guard ({kind} {target or ''})".rstrip()
        if self.policy == "abort":
            return NetworkBlocked(msg)
        return NetworkBlockedError(msg)

    def _patch(self, owner: object, name: str, replacement: object) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def install(self) -> None:
        with NetworkGuard._active_lock:
            if NetworkGuard._active is not None:
                raise RuntimeError("a network guard is already active in this process")
            NetworkGuard._active = self
        guard = self
        orig_init = socket.socket.__init__
        orig_connect = socket.socket.connect
        orig_connect_ex = socket.socket.connect_ex

        def guarded_init(sock: socket.socket, family: Any = -1, type: Any = -1, proto: Any = -1, fileno: Any = None) -> None:  # noqa: A002
            fam = socket.AF_INET if family == -1 and fileno is None else family
            if _is_inet(fam) and fileno is None:
                raise guard._block("socket", f"family={socket.AddressFamily(fam).name}")
            orig_init(sock, family, type, proto, fileno)

        def guarded_connect(sock: socket.socket, address: Any) -> None:
            if _is_inet(sock.family):
                raise guard._block("connect", _target(address))
            orig_connect(sock, address)

        def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
            if _is_inet(sock.family):
                raise guard._block("connect", _target(address))
            return orig_connect_ex(sock, address)

        def guarded_create_connection(address: Any, *_args: Any, **_kwargs: Any) -> socket.socket:
            raise guard._block("create_connection", _target(address))

        def resolver(kind: str) -> Callable[..., Any]:
            def blocked(host: Any = None, *args: Any, **kwargs: Any) -> Any:
                port = args[0] if args else kwargs.get("port")
                raise guard._block(kind, f"{host}:{port}" if port is not None else str(host))

            return blocked

        def guarded_wrap_socket(_ctx: ssl.SSLContext, _sock: Any, *_args: Any, **kwargs: Any) -> Any:
            raise guard._block("tls_wrap", kwargs.get("server_hostname"))

        def guarded_wrap_bio(_ctx: ssl.SSLContext, *_args: Any, **kwargs: Any) -> Any:
            raise guard._block("tls_wrap", kwargs.get("server_hostname"))

        raw_base: type[Any] = _socket.socket
        raw_init: Callable[..., None] = raw_base.__init__

        class GuardedRawSocket(raw_base):  # code that reaches for _socket.socket directly
            def __init__(self, family: Any = -1, type: Any = -1, proto: Any = -1, fileno: Any = None) -> None:  # noqa: A002
                fam = socket.AF_INET if family == -1 and fileno is None else family
                if _is_inet(fam) and fileno is None:
                    raise guard._block("socket", f"family={socket.AddressFamily(fam).name}")
                # socket.socket.__init__ also calls _socket.socket.__init__ by name, with a socket.socket
                # instance, so call the original type's __init__ explicitly rather than through super().
                raw_init(self, family, type, proto, fileno)

        self._patch(_socket, "socket", GuardedRawSocket)
        for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
            self._patch(_socket, name, resolver(name))
        self._patch(socket.socket, "__init__", guarded_init)
        self._patch(socket.socket, "connect", guarded_connect)
        self._patch(socket.socket, "connect_ex", guarded_connect_ex)
        self._patch(socket, "create_connection", guarded_create_connection)
        for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
            self._patch(socket, name, resolver(name))
        self._patch(ssl.SSLContext, "wrap_socket", guarded_wrap_socket)
        self._patch(ssl.SSLContext, "wrap_bio", guarded_wrap_bio)

    def remove(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)
        with NetworkGuard._active_lock:
            if NetworkGuard._active is self:
                NetworkGuard._active = None


@contextmanager
def network_guard(policy: str = "abort", on_attempt: Callable[[EgressAttempt], None] | None = None) -> Iterator[NetworkGuard]:
    """Activate a guard for the block; it is removed when the block ends, even on error."""
    guard = NetworkGuard(policy, on_attempt)
    guard.install()
    try:
        yield guard
    finally:
        guard.remove()
