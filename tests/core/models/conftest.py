"""A loopback fake provider speaking enough of the Anthropic Messages and OpenAI Chat Completions APIs.

The scenario is the ``model`` field of the request body (the registry entry's ``api_model``):

- ``ok``: a normal reply with fixed usage (cache read and write included) and a reported model id that differs
  from the requested one; ``small``: the same with tiny usage (for budget tests).
- ``tool``: a tool call.
- ``flaky429``: 429 with ``Retry-After: 0.01`` twice (per conversation text), then ``ok``.
- ``always500`` / ``always529``: that status every time; ``bad400``: a non-retryable 400.
- ``badjson``: HTTP 200 with a truncated JSON body; ``slow``: sleeps 1 s before answering.
- ``echokey``: 401 whose message echoes the key it was sent.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evalkit_core.models import ModelClient, Registry, RetryPolicy, Timeouts, load_registry
from evalkit_core.store import Store

KEY = "sk-test-SUPERSECRET-0123456789abcdef"
KEY_ENV = "FAKE_PROVIDER_KEY"
SCENARIOS = (
    "ok",
    "small",
    "tool",
    "flaky429",
    "always500",
    "always529",
    "bad400",
    "badjson",
    "slow",
    "echokey",
)

ANTHROPIC_USAGE = {
    "input_tokens": 1200,
    "output_tokens": 300,
    "cache_creation_input_tokens": 1000,
    "cache_read_input_tokens": 5000,
}
OPENAI_USAGE = {
    "prompt_tokens": 6200,
    "completion_tokens": 300,
    "total_tokens": 6500,
    "prompt_tokens_details": {"cached_tokens": 5000},
}


class FakeProvider:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.counts: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hits(self, scenario: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.requests if scenario is None or r["body"].get("model") == scenario)


def _anthropic_reply(scenario: str) -> dict[str, Any]:
    usage = {"input_tokens": 10, "output_tokens": 20} if scenario == "small" else ANTHROPIC_USAGE
    if scenario == "tool":
        content: list[dict[str, Any]] = [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
        ]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": "Hello from fake Anthropic."}], "end_turn"
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake-20250101-reported",
        "content": content,
        "stop_reason": stop,
        "usage": usage,
    }


def _openai_reply(scenario: str) -> dict[str, Any]:
    usage = {"prompt_tokens": 10, "completion_tokens": 20} if scenario == "small" else OPENAI_USAGE
    if scenario == "tool":
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": "Hello from fake OpenAI."}, "stop"
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "gpt-fake-2025-01-01-reported",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def _handler(fake: FakeProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.loads(raw)
            anthropic = self.path == "/v1/messages"
            if not anthropic and self.path != "/v1/chat/completions":
                self._send(404, b'{"error":{"message":"no such path"}}')
                return
            key = (
                self.headers.get("x-api-key") if anthropic else (self.headers.get("authorization") or "")[7:]
            )
            scenario = body.get("model")
            convo = json.dumps(body.get("messages"), sort_keys=True)
            with fake.lock:
                fake.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body, "raw": raw}
                )
                fake.counts[f"{scenario}|{convo}"] += 1
                n = fake.counts[f"{scenario}|{convo}"]
            reply = _anthropic_reply if anthropic else _openai_reply

            def error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
                self._send(
                    status,
                    json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode(),
                    headers,
                )

            if scenario == "flaky429" and n <= 2:
                error(429, "rate_limit_error", "slow down", {"retry-after": "0.01"})
            elif scenario == "always500":
                error(500, "api_error", "internal server error")
            elif scenario == "always529":
                error(529, "overloaded_error", "Overloaded")
            elif scenario == "bad400":
                error(400, "invalid_request_error", "max_tokens: field required")
            elif scenario == "echokey":
                error(401, "authentication_error", f"invalid x-api-key: {key}")
            elif scenario == "badjson":
                self._send(200, b'{"id": "msg_fake", "content": [{"type": "te')
            else:
                if scenario == "slow":
                    time.sleep(1.0)
                self._send(200, json.dumps(reply(str(scenario))).encode())

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # room for the concurrency tests' connection bursts


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    server = _Server(("127.0.0.1", 0), _handler(fake))
    fake.server, fake.port = server, server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fake_registry_toml(base: str) -> str:
    lines = ['[registry]\nprices_as_of = "2025-06-01"\n']
    for scenario in SCENARIOS:
        lines.append(
            f'[models."fake-anthropic/{scenario}"]\nprovider = "anthropic"\napi_model = "{scenario}"\n'
            f'base_url = "{base}"\napi_key_env = "{KEY_ENV}"\ncontext_window = 200000\nmax_output = 4096\n'
            'prices = { input = "3", output = "15", cache_read = "0.30", cache_write = "3.75" }\n'
        )
        lines.append(
            f'[models."fake-openai/{scenario}"]\nprovider = "openai"\napi_model = "{scenario}"\n'
            f'base_url = "{base}/v1"\napi_key_env = "{KEY_ENV}"\ncontext_window = 128000\nmax_output = 4096\n'
            'prices = { input = "0.15", output = "0.60", cache_read = "0.075", cache_write = "0.15" }\n'
        )
    return "\n".join(lines)


@pytest.fixture
def fake_registry(fake_provider: FakeProvider, tmp_path: Path) -> Registry:
    path = tmp_path / "fake-registry.toml"
    path.write_text(fake_registry_toml(fake_provider.base))
    return load_registry([path], env={})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "home") as s:
        yield s


FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.005)


def make_client(registry: Registry, store: Store, **kwargs: Any) -> ModelClient:
    options: dict[str, Any] = {
        "retry": FAST_RETRY,
        "timeouts": Timeouts(attempt=5.0),
        "env": {KEY_ENV: KEY},
        "seed": 1,
    }
    options.update(kwargs)
    return ModelClient(registry=registry, store=store, **options)


@pytest.fixture
def client_factory(fake_registry: Registry, store: Store) -> Any:
    """``client_factory(**ModelClient options)``: a client on the fake registry and the test's store."""
    return lambda **kwargs: make_client(fake_registry, store, **kwargs)


@pytest.fixture
def api_key() -> str:
    return KEY
