"""A hostile loopback fake provider: speaks enough of the Anthropic Messages and OpenAI Chat Completions APIs
to lie, fail, trickle, cut connections, redirect and echo keys, and keeps its own request log.

It listens on 127.0.0.1 only, on a port the OS picks, in a daemon thread of the test process; ``start()`` and
``stop()`` (or the context manager) bound its life. HTTP is written by hand (not ``http.server``) so a scenario
controls every byte: framing, timing, and where the connection ends.

The scenario is the ``model`` field of the request body (the registry entry's ``api_model``), with
colon-separated arguments:

==========================  =================================================================================
``ok``                      an honest reply: input tokens = body bytes // 4, output tokens = 5
``usage:IN:OUT``            reports IN input and OUT output tokens; each is a JSON literal (``-5``, ``12.5``,
                            ``"12"``, ``99999999999999999999999``, ``null``)
``nousage``                 a reply without a ``usage`` object
``badjson``                 HTTP 200 with a truncated JSON body
``slow:SECONDS``            an honest reply after SECONDS
``trickle:DELAY``           headers at once, then the body one byte every DELAY seconds
``cut:before``              reads the request, closes without a byte
``cut:headers``             sends the status line, then closes
``cut:body``                sends headers and half the body, then closes
``status:CODE``             an error reply with that status (429 and 5xx are retried by the client)
``echo:OFFSET``             401 whose JSON error message holds the key at character OFFSET
``echoraw:OFFSET``          500 with a plain-text body holding the key at OFFSET (retried, echoed each time)
``echo200:OFFSET``          200 whose answer text holds the key at OFFSET; also in reported model and a tool
                            call's arguments (escaped as JSON ``\\uXXXX`` there)
``echousage``               200 whose usage field holds the key as a string
``redirect:CODE``           a 3xx to another loopback URL carrying the key in its query
``chunked`` / ``gzip``      an honest reply sent with chunked transfer encoding / gzip content encoding
==========================  =================================================================================

Every request is logged (``requests``): scenario, path, prompt, the key it carried, the time (monotonic), and
the body's size in bytes (what the honest usage is derived from).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import socketserver
import threading
import time
from typing import Any, Self

PAD = "x" * 600  # filler for echo messages, so the key can sit at any offset


class FakeProvider:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.port = 0
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ life

    def start(self) -> Self:
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                fake._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 512

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hits(self, scenario: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.requests if scenario is None or r["scenario"] == scenario)

    def log(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.requests)

    # ------------------------------------------------------------------------------------------ HTTP

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        try:
            while True:
                request_line = reader.readline(65537)
                if not request_line:
                    return
                headers: dict[str, str] = {}
                while True:
                    line = reader.readline(65537)
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = reader.read(int(headers.get("content-length", "0")))
                if not self._answer(sock, request_line.decode("latin-1").split(" ")[1], headers, body):
                    return
        except OSError:
            return
        finally:
            reader.close()
            with contextlib.suppress(OSError):
                sock.close()

    def _answer(self, sock: socket.socket, path: str, headers: dict[str, str], raw: bytes) -> bool:
        """Answer one request; False when the connection must end."""
        try:
            body = json.loads(raw)
        except ValueError:
            return _send(sock, 400, b'{"error":{"message":"bad json"}}')
        anthropic = path == "/v1/messages"
        key = headers.get("x-api-key") if anthropic else (headers.get("authorization") or "")[7:]
        scenario = str(body.get("model", ""))
        kind, _, arg = scenario.partition(":")
        messages = body.get("messages") or [{}]
        last = messages[-1].get("content")
        prompt = last if isinstance(last, str) else json.dumps(last)
        with self.lock:
            self.requests.append(
                {
                    "scenario": scenario,
                    "path": path,
                    "prompt": prompt,
                    "key": key,
                    "at": time.monotonic(),
                    "bytes": len(raw),
                }
            )
        key = key or ""
        honest = {"in": len(raw) // 4, "out": 5}
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16

        def reply(
            text: str = "Hello.", usage: Any = honest, model: str = "fake-reported", tool: Any = None
        ) -> bytes:
            return _reply(anthropic, text, usage, model, tool, min(5, int(max_tokens)))

        if kind == "ok":
            return _send(sock, 200, reply())
        if kind == "usage":
            a, _, b = arg.partition(":")
            return _send(sock, 200, reply(usage={"in": json.loads(a), "out": json.loads(b)}))
        if kind == "nousage":
            return _send(sock, 200, reply(usage=None))
        if kind == "echousage":
            return _send(sock, 200, reply(usage={"in": key, "out": 1}))
        if kind == "badjson":
            return _send(sock, 200, b'{"id": "msg_fake", "content": [{"type": "te')
        if kind == "slow":
            time.sleep(float(arg))
            return _send(sock, 200, reply())
        if kind == "trickle":
            data = reply()
            head = _head(200, len(data))
            sock.sendall(head)
            for i in range(len(data)):
                time.sleep(float(arg))
                sock.sendall(data[i : i + 1])
            return True
        if kind == "cut":
            data = reply()
            if arg == "headers":
                sock.sendall(b"HTTP/1.1 200 OK\r\n")
            elif arg == "body":
                sock.sendall(_head(200, len(data)) + data[: len(data) // 2])
            _hard_close(sock)
            return False
        if kind == "status":
            code = int(arg)
            return _send(sock, code, _error(f"status {code}"), {"retry-after": "0"} if code == 429 else None)
        if kind == "echo":
            return _send(sock, 401, _error(_at(key, int(arg))))
        if kind == "echoraw":
            return _send(sock, 500, _at(key, int(arg)).encode(), content_type="text/plain")
        if kind == "echo200":
            tool = {"note": key}  # json.dumps escapes nothing here; the client must still scrub the args
            return _send(sock, 200, reply(text=_at(key, int(arg)), model=f"model-{key}", tool=tool))
        if kind == "redirect":
            where = f"http://127.0.0.1:{self.port}/elsewhere?api_key={key}"
            return _send(sock, int(arg), _error(f"moved; your key {key}"), {"location": where})
        if kind == "chunked":
            data = reply()
            half = len(data) // 2
            chunks = f"{half:x}\r\n".encode() + data[:half] + b"\r\n"
            chunks += (
                f"{len(data) - half:x};ext=1\r\n".encode() + data[half:] + b"\r\n0\r\nx-trailer: 1\r\n\r\n"
            )
            sock.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                + chunks
            )
            return True
        if kind == "gzip":
            return _send(sock, 200, gzip.compress(reply()), {"content-encoding": "gzip"})
        return _send(sock, 404, _error(f"unknown scenario {scenario!r}"))


def _at(key: str, offset: int) -> str:
    filler = (PAD * (offset // len(PAD) + 1))[:offset]
    return f"{filler}{key} is not a valid key; check it"


def _error(message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": "error", "message": message}}).encode()


def _usage_json(anthropic: bool, usage: Any) -> Any:
    if usage is None:
        return None
    if anthropic:
        return {"input_tokens": usage["in"], "output_tokens": usage["out"]}
    return {"prompt_tokens": usage["in"], "completion_tokens": usage["out"]}


def _reply(anthropic: bool, text: str, usage: Any, model: str, tool: Any, _out: int) -> bytes:
    if anthropic:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        if tool is not None:
            content.append({"type": "tool_use", "id": "toolu_1", "name": "note", "input": tool})
        data: dict[str, Any] = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "end_turn",
        }
    else:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tool is not None:
            args = json.dumps(tool, ensure_ascii=True).replace("A", "\\u0041")  # the key behind escapes
            message["tool_calls"] = [
                {"id": "call_1", "type": "function", "function": {"name": "note", "arguments": args}}
            ]
        data = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    u = _usage_json(anthropic, usage)
    if u is not None:
        data["usage"] = u
    return json.dumps(data).encode()


def _head(
    status: int, length: int, headers: dict[str, str] | None = None, content_type: str = "application/json"
) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}", f"content-length: {length}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _send(
    sock: socket.socket,
    status: int,
    body: bytes,
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> bool:
    try:
        sock.sendall(_head(status, len(body), headers, content_type) + body)
    except OSError:
        return False
    return True


def _hard_close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def registry_toml(
    base: str, scenarios: list[str], *, key_env: str = "FAKE_KEY", provider: str = "both"
) -> str:
    """Registry entries ``fake-anthropic/<scenario>`` and ``fake-openai/<scenario>`` for each scenario."""
    out = ['[registry]\nprices_as_of = "2025-06-01"\n']
    for scenario in scenarios:
        if provider in ("both", "anthropic"):
            out.append(
                f"[models.{json.dumps('fake-anthropic/' + scenario)}]\n"
                f'provider = "anthropic"\napi_model = {json.dumps(scenario)}\n'
                f'base_url = "{base}"\napi_key_env = "{key_env}"\ncontext_window = 200000\nmax_output = 4096\n'
                'prices = { input = "3", output = "15", cache_read = "0.30", cache_write = "3.75" }\n'
            )
        if provider in ("both", "openai"):
            out.append(
                f"[models.{json.dumps('fake-openai/' + scenario)}]\n"
                f'provider = "openai"\napi_model = {json.dumps(scenario)}\n'
                f'base_url = "{base}/v1"\napi_key_env = "{key_env}"\ncontext_window = 128000\nmax_output = 4096\n'
                'prices = { input = "0.15", output = "0.60", cache_read = "0.075", cache_write = "0.15" }\n'
            )
    return "\n".join(out)
