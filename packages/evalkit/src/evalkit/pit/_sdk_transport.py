"""Inside the agent's jail: the endpoint of :mod:`evalkit.pit._endpoint` mounted on every ``httpx``/``httpx2`` client.

Installed by the agent process (:mod:`evalkit.pit._agent_child`) before any agent code runs. Each client made
afterwards gets one more mount, ``all://pit-gateway.invalid``, on a transport that answers in process (no socket:
the request goes to the harness over the agent's pipe, as ``tools.complete`` does); a mount the agent gives for that
host itself wins, and every other host uses the client's own transport, where the network recorders see it. The
modules are patched when they are imported (a finder on ``sys.meta_path``), or at once when already loaded.
"""

# pyright: basic

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any

from evalkit.pit._endpoint import ENDPOINT_HOST, Complete, answer

__all__ = ["install", "patch", "set_session", "transports"]

_NAMES = ("httpx", "httpx2")
_SESSION: list[Complete | None] = [None]


def set_session(complete: Complete | None) -> None:
    """The open session's way to the harness (None between sessions: a call then is refused, status 400)."""
    _SESSION[0] = complete


def transports(hx: Any) -> tuple[Any, Any]:
    """A sync and an async transport of ``hx`` (``httpx`` or ``httpx2``) that answer as the endpoint."""

    class EndpointTransport(hx.BaseTransport):
        """The PIT gateway's endpoint (answered through the harness)."""

        def handle_request(self, request: Any) -> Any:
            status, data = answer(request.method, request.url.path, request.read(), _SESSION[0])
            return hx.Response(status, json=data, request=request)

    class AsyncEndpointTransport(hx.AsyncBaseTransport):
        """The PIT gateway's endpoint for async clients (the call blocks the loop only while the harness answers)."""

        async def handle_async_request(self, request: Any) -> Any:
            body = await request.aread()
            status, data = answer(request.method, request.url.path, body, _SESSION[0])
            return hx.Response(status, json=data, request=request)

    return EndpointTransport(), AsyncEndpointTransport()


def patch(hx: ModuleType) -> None:
    """Mount the endpoint on every client ``hx`` (``httpx`` or ``httpx2``) makes from now on."""
    if getattr(hx, "_evalkit_pit_endpoint", False):
        return
    sync_transport, async_transport = transports(hx)
    pattern = f"all://{ENDPOINT_HOST}"
    for cls, transport in ((hx.Client, sync_transport), (hx.AsyncClient, async_transport)):  # type: ignore[attr-defined]
        original = cls.__init__

        def init(self: Any, *args: Any, _original: Any = original, _transport: Any = transport, **kwargs: Any) -> None:
            mounts = dict(kwargs.get("mounts") or {})
            mounts.setdefault(pattern, _transport)
            kwargs["mounts"] = mounts
            _original(self, *args, **kwargs)

        cls.__init__ = init
    hx._evalkit_pit_endpoint = True  # type: ignore[attr-defined]


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches ``httpx``/``httpx2`` right after their import ran."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:  # noqa: ARG002 - the finder protocol
        if fullname not in _NAMES or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def run(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = run  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Patch what is loaded, and what will be."""
    for name in _NAMES:
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport())
