"""The PIT model gateway: the only way an agent inside a run reaches its model.

The run blocks the network in its own process, so the model call goes to a separate process started by the run
(``python -m evalkit.pit._gateway``), listening on an AF_UNIX socket in a private temporary directory. The gateway
holds the provider keys (the run removes them from its own environment while it runs), forwards each request
through the model layer (:class:`evalkit_core.models.ModelClient`: registry, exact cost, budget, retries, the
store), and answers with the completion. The run records every call as a trajectory event (request and response
digests, reported model id, usage, cost); the receipt fills P1 from the reported model ids and P4 with the
measured spend. The gateway refuses requests that turn on provider-side tools that reach the internet (web
search, web fetch, code execution) with a clear error. It stops when the run ends.

Wire format: one JSON object per line each way. Request ``{"op": "complete", "model": id, "request": {...}}``
(the JSON form of :class:`evalkit_core.models.Request`); answer ``{"ok": true, "completion": {...}}`` or
``{"ok": false, "error_type": ..., "error": ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from evalkit_core import EvalkitError

__all__ = ["FORBIDDEN_TOOLS", "Gateway", "GatewayError", "forbidden_tools"]

FORBIDDEN_TOOLS = frozenset(
    {
        "web_search", "websearch", "web_fetch", "webfetch", "browser", "browse", "code_execution",
        "code_interpreter", "computer", "computer_use", "bash", "text_editor", "file_search", "retrieval",
    }
)
_READY = "evalkit-gateway-ready"
_MAX_LINE = 64 * 1024 * 1024
KEY_SUFFIXES = ("_API_KEY",)


class GatewayError(EvalkitError):
    """The gateway refused a request, or could not be started or reached."""


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


async def _serve(path: str) -> None:
    from evalkit_core.models import ModelClient, completion_to_json, request_from_json

    client = ModelClient()
    stop = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            if not line:
                return
            answer: dict[str, Any]
            try:
                msg = json.loads(line)
                if msg.get("op") == "shutdown":
                    stop.set()
                    answer = {"ok": True}
                else:
                    raw = cast("dict[str, Any]", msg.get("request") or {})
                    refused = forbidden_tools(raw)
                    if refused:
                        answer = {
                            "ok": False,
                            "error_type": "GatewayError",
                            "error": "the PIT gateway refuses provider-side tools that reach the internet: "
                            + ", ".join(refused),
                        }
                    else:
                        completion = await client.complete(str(msg["model"]), request_from_json(raw))
                        answer = {"ok": True, "completion": completion_to_json(completion)}
            except EvalkitError as exc:
                answer = {"ok": False, "error_type": type(exc).__name__, "error": str(exc)}
            except (ValueError, KeyError, TypeError) as exc:
                answer = {"ok": False, "error_type": "GatewayError", "error": f"malformed gateway request: {exc}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_unix_server(handle, path=path, limit=_MAX_LINE)
    sys.stdout.write(_READY + "\n")
    sys.stdout.flush()
    async with server:
        await stop.wait()
    await client.aclose()


def main() -> None:
    path = sys.argv[1]
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(path))


# --- the run side ---------------------------------------------------------------------------------------------


class Gateway:
    """Starts the gateway process on first use and stops it at the end of the run."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._saved_keys: dict[str, str] = {}
        self._held = False

    def hold_keys(self) -> None:
        """Take the provider keys (``*_API_KEY``) out of this process's environment until :meth:`stop`.

        Called when a run starts, before any agent code runs: only the gateway process gets them.
        """
        if self._held:
            return
        self._held = True
        for name in list(os.environ):
            if name.endswith(KEY_SUFFIXES):
                self._saved_keys[name] = os.environ.pop(name)

    @property
    def socket_path(self) -> Path:
        if self._dir is None:
            raise GatewayError("the model gateway is not running")
        return self._dir / "gateway.sock"

    def start(self) -> None:
        if self._proc is not None:
            return
        self._dir = Path(tempfile.mkdtemp(prefix="evalkit-gw-"))
        self._dir.chmod(0o700)
        env = {**os.environ, **self._saved_keys}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "evalkit.pit._gateway_process", str(self.socket_path)],
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            env=env,
        )
        assert self._proc.stdout is not None
        ready = self._proc.stdout.readline().strip()
        if ready != _READY:
            self.stop()
            raise GatewayError("the model gateway process did not start (see its error output above)")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(OSError, GatewayError):
                self._send({"op": "shutdown"})
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        os.environ.update(self._saved_keys)
        self._saved_keys.clear()
        self._held = False
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _send(self, message: Mapping[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(self.socket_path))
            sock.sendall(json.dumps(message).encode() + b"\n")
            chunks: list[bytes] = []
            while True:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw:
            raise GatewayError("the model gateway closed the connection without an answer")
        return cast("dict[str, Any]", json.loads(raw))

    def complete(self, model_id: str, request_json: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request; return the completion's JSON form or raise the gateway's error."""
        self.start()
        answer = self._send({"op": "complete", "model": model_id, "request": dict(request_json)})
        if not answer.get("ok"):
            raise GatewayError(f"model call refused or failed ({answer.get('error_type')}): {answer.get('error')}")
        return cast("dict[str, Any]", answer["completion"])

