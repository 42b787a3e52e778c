"""The PIT model gateway: the only way an agent inside a run reaches its model.

The agent runs behind the wall with no network; its model calls are requests over its pipe to the harness, which
hands each to this gateway and records it (request and response digests, reported model id, usage, cost; the
receipt fills P1 from the reported model ids and P4 with the measured spend). The gateway is a separate process
started by the harness (``python -m evalkit.pit._gateway_process FD``), outside every jail, in the harness's own
network namespace: it holds the provider keys (the harness removes them from its own environment while it runs)
and forwards each request through the model layer (:class:`evalkit_core.models.ModelClient`: registry, exact cost,
budget, retries, the store). It is reached through a socket it inherits from the harness, never through a path,
so nothing else can connect to it. It refuses requests that turn on provider-side tools that reach the internet
(web search, web fetch, code execution) with a clear error, and stops when the run ends.

A run may also have the gateway serve a model itself, on the host side, instead of through the registry: a
:class:`HostModel`, which the agent names (Inspect's ``mockllm/model`` with custom outputs, see
:mod:`evalkit.pit._inspect_mock`). Its calls take the same path from the agent and are recorded the same way.

Wire format: one JSON object per line each way. Request ``{"op": "complete", "model": id, "request": {...}}``
(the JSON form of :class:`evalkit_core.models.Request`); answer ``{"ok": true, "completion": {...}}`` or
``{"ok": false, "error_type": ..., "error": ...}``. Before the first request, the harness sends
``{"op": "host", "model": id, "kind": ..., "args": {...}}`` for each host model (answer ``{"ok": true}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs

from evalkit_core import EvalkitError

if TYPE_CHECKING:
    from evalkit_core.models import Completion, Request

__all__ = ["FORBIDDEN_TOOLS", "Gateway", "GatewayError", "HostModel", "forbidden_tools"]

FORBIDDEN_TOOLS = frozenset(
    {
        "web_search",
        "websearch",
        "web_fetch",
        "webfetch",
        "browser",
        "browse",
        "code_execution",
        "code_interpreter",
        "computer",
        "computer_use",
        "bash",
        "text_editor",
        "file_search",
        "retrieval",
    }
)
_MAX_LINE = 64 * 1024 * 1024
KEY_SUFFIXES = ("_API_KEY",)


class GatewayError(EvalkitError):
    """The gateway refused a request, or could not be started or reached."""


@attrs.frozen
class HostModel:
    """A model the gateway answers itself instead of through the registry: ``kind`` names how
    (``inspect-mockllm``: Inspect's ``mockllm``), ``args`` is plain JSON data for it."""

    model_id: str
    kind: str
    args: Mapping[str, Any] = attrs.field(factory=dict[str, Any])


class _Served(Protocol):
    async def complete(self, request: Request) -> Completion: ...


def _host(msg: Mapping[str, Any]) -> _Served:
    kind = str(msg.get("kind"))
    if kind == "inspect-mockllm":
        from evalkit.pit._inspect_mock import MockModel

        return MockModel(str(msg["model"]), cast("Mapping[str, Any]", msg.get("args") or {}))
    raise GatewayError(f"unknown host model kind {kind!r}")


def forbidden_tools(request_json: Mapping[str, Any]) -> list[str]:
    """Names (or types) of provider-side internet tools a request tries to turn on."""
    found: list[str] = []
    tools = cast("list[Any]", request_json.get("tools") or [])
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        spec = cast("dict[str, Any]", tool)
        name = str(spec.get("name", "")).lower()
        kind = str(spec.get("type", "function")).lower()
        if name in FORBIDDEN_TOOLS or any(name.startswith(f) for f in FORBIDDEN_TOOLS):
            found.append(name)
        elif kind not in ("function", "custom") and any(f in kind for f in FORBIDDEN_TOOLS | {"web", "code"}):
            found.append(kind)
    for field in ("server_tools", "web_search_options", "plugins"):
        if request_json.get(field):
            found.append(field)
    return found


# --- the server process ---------------------------------------------------------------------------------------


async def _answer(client: Any, hosted: dict[str, _Served], line: bytes) -> dict[str, Any]:
    from evalkit_core.models import completion_to_json, request_from_json

    try:
        msg = json.loads(line)
        if msg.get("op") == "host":
            try:
                hosted[str(msg["model"])] = _host(msg)
            except Exception as exc:  # the user's mock script failed to load: the run is told why
                return {"ok": False, "error_type": type(exc).__name__, "error": str(exc)}
            return {"ok": True}
        raw = cast("dict[str, Any]", msg.get("request") or {})
        refused = forbidden_tools(raw)
        if refused:
            return {
                "ok": False,
                "error_type": "GatewayError",
                "error": "the PIT gateway refuses provider-side tools that reach the internet: "
                + ", ".join(refused),
            }
        model = str(msg["model"])
        served = hosted.get(model)
        if served is not None:
            request = request_from_json(raw)
            try:
                completion = await served.complete(request)
            except Exception as exc:  # the user's mock script failed (ran out, raised): this call's error
                return {"ok": False, "error_type": "ModelError", "error": f"{model}: {type(exc).__name__}: {exc}"}
        else:
            completion = await client.complete(model, request_from_json(raw))
        return {"ok": True, "completion": completion_to_json(completion)}
    except EvalkitError as exc:
        return {"ok": False, "error_type": type(exc).__name__, "error": str(exc)}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return {"ok": False, "error_type": "GatewayError", "error": f"malformed gateway request: {exc}"}


async def _serve(fd: int) -> None:
    """Answer one request a line on the inherited socket ``fd`` until the harness closes it."""
    from evalkit_core.models import ModelClient

    client = ModelClient()
    hosted: dict[str, _Served] = {}
    reader, writer = await asyncio.open_connection(sock=socket.socket(fileno=fd), limit=_MAX_LINE)
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            answer = await _answer(client, hosted, line)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
    finally:
        writer.close()
        await client.aclose()


def main() -> None:
    fd = int(sys.argv[1])
    with contextlib.suppress(KeyboardInterrupt, ConnectionError):
        asyncio.run(_serve(fd))


# --- the run side ---------------------------------------------------------------------------------------------


class Gateway:
    """Starts the gateway process on first use (handing it the run's host models) and stops it at the end of
    the run."""

    def __init__(self, host_models: Sequence[HostModel] = ()) -> None:
        self.host_models = tuple(host_models)
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._file: Any = None
        self._saved_keys: dict[str, str] = {}
        self._held = False

    def hold_keys(self) -> None:
        """Take the provider keys (``*_API_KEY``) out of this process's environment until :meth:`stop`.

        Called when a run starts: only the gateway process gets them (agents run in jails whose environment the
        wall clears in any case).
        """
        if self._held:
            return
        self._held = True
        for name in list(os.environ):
            if name.endswith(KEY_SUFFIXES):
                self._saved_keys[name] = os.environ.pop(name)

    def start(self) -> None:
        if self._proc is not None:
            return
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {**os.environ, **self._saved_keys}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "evalkit.pit._gateway_process", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stderr=None,
                env=env,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self._sock = mine
        self._file = mine.makefile("rwb")
        for host in self.host_models:
            answer = self._send({"op": "host", "model": host.model_id, "kind": host.kind, "args": dict(host.args)})
            if not answer.get("ok"):
                raise GatewayError(
                    f"the model gateway cannot serve {host.model_id} ({answer.get('error_type')}): {answer.get('error')}"
                )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        if self._sock is not None:
            self._sock.close()  # end of file: the gateway process ends
            self._sock = None
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        os.environ.update(self._saved_keys)
        self._saved_keys.clear()
        self._held = False

    def _send(self, message: Mapping[str, Any]) -> dict[str, Any]:
        f = self._file
        if f is None:
            raise GatewayError("the model gateway is not running")
        try:
            f.write(json.dumps(message).encode() + b"\n")
            f.flush()
            raw = f.readline(_MAX_LINE)
        except OSError as exc:
            raise GatewayError(f"the model gateway could not be reached: {exc}") from None
        if not raw:
            raise GatewayError("the model gateway ended without an answer (see its error output above)")
        return cast("dict[str, Any]", json.loads(raw))

    def complete(self, model_id: str, request_json: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request; return the completion's JSON form or raise the gateway's error."""
        self.start()
        answer = self._send({"op": "complete", "model": model_id, "request": dict(request_json)})
        if not answer.get("ok"):
            raise GatewayError(
                f"model call refused or failed ({answer.get('error_type')}): {answer.get('error')}"
            )
        return cast("dict[str, Any]", answer["completion"])
