"""A PIT run with `from_model` through the model gateway, against a scripted OpenAI-compatible loopback server.

The agent runs in its jailed process, with no network; its model calls go over its pipe to the harness, which
forwards them to the gateway process (outside the jail, holding the key, reached through an inherited socket, no
path) and records each. The trajectory shows every call (digests, reported model, usage, cost), the receipt fills
P1 from the reported model and P4 with the measured spend, the key never enters the agent's process or the run's
outputs, and provider-side internet tools are refused.
"""

from __future__ import annotations

import json
import os
import textwrap
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import Gateway, GatewayError, RunConfig, from_model, resolve_agent, run
from evalkit_core import Release
from evalkit_core._synth import write_synth_release

KEY_ENV = "EVALKIT_TEST_FAKE_API_KEY"
KEY = "sk-gateway-test-DO-NOT-LEAK-42"
REPORTED = "scripted-model-2026-11-01"


def _reply(body: dict[str, Any]) -> dict[str, Any]:
    """Tool loop script: list filings, then submit the first one; answer questions with a fixed sentence."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "user" and "real filing date" in str(last.get("content")):
        message: dict[str, Any] = {"role": "assistant", "content": "I cannot tell the real date or issuer."}
    elif last["role"] == "user":
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "pit_list", "arguments": '{"limit": 2}'}}],
        }
    else:
        rows = json.loads(last["content"]).get("rows", [])
        keys = [r["row_key"] for r in rows[:1]]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "submit", "arguments": json.dumps({"row_keys": keys})}}],
        }
    return {
        "id": "x",
        "object": "chat.completion",
        "model": REPORTED,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 40}},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen_auth: list[str] = []

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        _Handler.seen_auth.append(self.headers.get("Authorization", ""))
        data = json.dumps(_reply(body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def scripted_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    registry = tmp_path / "registry.toml"
    registry.write_text(
        '[models."scripted/one"]\nprovider = "openai-compatible"\napi_model = "scripted"\n'
        f'base_url = "http://127.0.0.1:{server.server_address[1]}/v1"\napi_key_env = "{KEY_ENV}"\n'
        'context_window = 100000\nmax_output = 4096\n'
        'prices = { input = "2.50", output = "10", cache_read = "1.25", cache_write = "2.50" }\n'
    )
    monkeypatch.setenv("EVALKIT_REGISTRY", str(registry))
    monkeypatch.setenv(KEY_ENV, KEY)
    try:
        yield "scripted/one"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def small_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rel") / "r"
    import datetime as dt

    write_synth_release(out, rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10), seed=3)
    return out


SPY = """
import os

from evalkit.pit import AgentReply, from_model

MODEL = from_model({model!r})


def agent(prompt, tools):
    seen = {key_env!r} in os.environ
    reply = MODEL(prompt, tools)
    return AgentReply(picks=reply.picks, text=f"key visible: {{seen}}")
"""


def test_pit_run_through_the_gateway(
    scripted_model: str, small_release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gateway_spy_agent.py").write_text(
        textwrap.dedent(SPY.format(model=scripted_model, key_env=KEY_ENV))
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _Handler.seen_auth = []
    cfg = RunConfig(
        bundle_path=str(small_release), arms=("main", "shifted"), clocks=("pit",), probe_items=2,
        model_version="scripted-model", training_cutoff="2022-12-31",
        trajectory_path=str(tmp_path / "t.jsonl"), receipt_path=str(tmp_path / "r.json"),
        mask_decoys=False,  # the count below is per session of the window (a served shifted arm adds hidden days)
    )
    result = run(resolve_agent("gateway_spy_agent:agent"), cfg, Release.load(small_release))
    body = result.body
    assert body["valid"] is True, body["invalidated_by"]
    events = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["type"] == "model_call"]
    sessions = body["window"]["sessions"]
    # two calls per session per cell (list, then submit) plus one per probe item
    assert len(calls) == 2 * sessions * 2 + 2
    assert all(c["reported_model"] == REPORTED and c["request_digest"].startswith("sha256:") for c in calls)
    # exact cost per call: 60 input, 40 cached, 10 output at 2.50 / 1.25 / 10 per million
    per_call = (Decimal(60) * Decimal("2.50") + Decimal(40) * Decimal("1.25") + Decimal(10) * Decimal(10)) / Decimal(1_000_000)
    assert {c["cost_usd"] for c in calls} == {str(per_call)}
    assert body["protocol"]["P1_model_version"]["reported"] == [REPORTED]
    assert Decimal(body["protocol"]["P4_costs_and_frictions"]["model_spend_usd"]) == per_call * len(calls)
    assert body["protocol"]["P4_costs_and_frictions"]["model_calls"] == len(calls)
    picks = [e for e in events if e["type"] == "decision"]
    assert all(len(d["picks"]) <= 1 for d in picks) and any(d["picks"] for d in picks)
    # The key reached the provider through the gateway, but never the agent's process or any output.
    assert len(_Handler.seen_auth) == len(calls)  # no call reached the provider without its trajectory event
    assert all(a == f"Bearer {KEY}" for a in _Handler.seen_auth)
    assert {d["text"] for d in picks} == {"key visible: False"}
    assert os.environ[KEY_ENV] == KEY  # restored after the run
    for path in (tmp_path / "t.jsonl", tmp_path / "r.json"):
        assert KEY not in path.read_text()


def test_gateway_refuses_provider_side_internet_tools(scripted_model: str) -> None:
    gw = Gateway()
    try:
        request = {
            "messages": [{"role": "user", "text": "hi"}],
            "tools": [{"name": "web_search", "description": "search", "parameters": {"type": "object", "properties": {}}}],
        }
        with pytest.raises(GatewayError, match="refuses provider-side tools that reach the internet: web_search"):
            gw.complete(scripted_model, request)
    finally:
        gw.stop()
    assert not any(
        Path("/tmp").glob("evalkit-gw-*/gateway.sock")
    )  # reached through an inherited socket, no path


def test_from_model_agent_runs_in_the_jail(scripted_model: str, small_release: Path, tmp_path: Path) -> None:
    cfg = RunConfig(
        bundle_path=str(small_release),
        arms=("main",),
        clocks=("pit",),
        probe_items=0,
        end="2023-03-02",
        trajectory_path=str(tmp_path / "t.jsonl"),
        receipt_path=str(tmp_path / "r.json"),
    )
    result = run(from_model(scripted_model), cfg)
    assert result.body["valid"] is True
    assert result.body["agent"]["name"] == f"model:{scripted_model}"
    assert (
        result.body["protocol"]["P4_costs_and_frictions"]["model_calls"]
        == 2 * result.body["window"]["sessions"]
    )
