"""The gateway as an OpenAI-compatible (and Anthropic-compatible) endpoint: the real ``openai`` and ``anthropic``
SDKs, unchanged, against the endpoint's transport in this process (the translation both ways, tool calls, errors),
then inside the jail (the environment names the endpoint; every call is recorded, charged, capped, answered by the
registry's model: a simulated one, or an OpenAI-compatible one served on loopback by this test)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
from pit_agent_support import RUN_START, cfg, kinds, make_writer, needs_wall, texts

import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit.pit import resolve_agent, run, stub_agent, tool_specs
from evalkit.pit._endpoint import ENDPOINT_ENV, MAX_BODY, answer
from evalkit.pit._sdk_transport import transports

anthropic = pytest.importorskip("anthropic", reason=machine.importorskip_reason("sdk"))
openai = pytest.importorskip("openai", reason=machine.importorskip_reason("sdk"))


@pytest.fixture
def write_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    return make_writer(tmp_path, monkeypatch)


def _completion(text: str = "", calls: list[tuple[str, str, str]] = (), stop: str = "end_turn") -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "call_id": "c1",
        "model_id": "m/x",
        "reported_model": "m/x (reported)",
        "text": text,
        "tool_calls": [{"id": i, "name": n, "raw_arguments": a} for i, n, a in calls],
        "stop_reason": stop,
        "usage": {"input_tokens": 7, "output_tokens": 3, "cache_read_tokens": 2, "cache_write_tokens": 0},
        "cost": "0.001",
        "simulated": False,
        "attempts": 1,
        "request_digest": "sha256:0",
        "response_digest": "sha256:0",
        "registry_digest": "sha256:0",
        "charged": "0.001",
        "anomaly": None,
    }


class _Fake:
    def __init__(self, reply: list[Any]) -> None:
        self.reply = reply
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, model: str, request: dict[str, Any]) -> list[Any]:
        self.seen.append((model, request))
        return self.reply


def _openai(fake: _Fake | None) -> Any:
    sync, _ = transports(httpx2)
    from evalkit.pit import _sdk_transport

    _sdk_transport.set_session(fake)
    client = httpx2.Client(transport=sync)
    return openai.OpenAI(base_url=ENDPOINT_ENV["OPENAI_BASE_URL"], api_key="x", http_client=client, max_retries=0)


@pytest.fixture(autouse=True)
def _no_session() -> Iterator[None]:
    from evalkit.pit import _sdk_transport

    yield
    _sdk_transport.set_session(None)


def test_openai_sdk_request_and_tool_calls_cross_both_ways() -> None:
    fake = _Fake(["completion", _completion("", [("call_1", "pit_list", '{"limit": 5}')])])
    client = _openai(fake)
    reply = client.chat.completions.create(
        model="m/x",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello"}]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "t0", "type": "function", "function": {"name": "pit_read", "arguments": '{"row_key": "k"}'}}]},
            {"role": "tool", "tool_call_id": "t0", "content": '{"status": "ok"}'},
        ],
        tools=tool_specs(),
        tool_choice="required",
        max_tokens=99,
        temperature=0.5,
        stop="END",
    )
    (model, request), = fake.seen
    assert model == "m/x"
    assert request["system"] == "be brief"
    assert request["max_tokens"] == 99 and request["temperature"] == 0.5 and request["stop"] == ["END"]
    assert request["tool_choice"] == "any"
    assert [t["name"] for t in request["tools"]] == ["pit_list", "pit_search", "pit_read", "pit_coverage"]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "tool"]
    assert request["messages"][1]["tool_calls"] == [{"id": "t0", "name": "pit_read", "raw_arguments": '{"row_key": "k"}'}]
    assert request["messages"][2] == {"role": "tool", "text": '{"status": "ok"}', "tool_call_id": "t0"}
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("call_1", "pit_list", {"limit": 5})
    assert reply.model == "m/x (reported)"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (9, 3)
    assert reply.created == 0


def test_anthropic_sdk_request_and_tool_use_cross_both_ways() -> None:
    fake = _Fake(["completion", _completion("thinking", [("toolu_1", "pit_search", '{"query": "x"}')])])
    _, async_t = transports(httpx2)
    sync, _ = transports(httpx2)
    from evalkit.pit import _sdk_transport

    _sdk_transport.set_session(fake)
    client = anthropic.Anthropic(
        base_url=ENDPOINT_ENV["ANTHROPIC_BASE_URL"], api_key="x", http_client=httpx2.Client(transport=sync), max_retries=0
    )
    msg = client.messages.create(
        model="m/x",
        max_tokens=50,
        system="sys",
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "pit_read", "input": {"row_key": "k"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "nope", "is_error": True}]},
        ],
        tools=[{"name": "pit_search", "description": "d", "input_schema": {"type": "object", "properties": {}}}],
        tool_choice={"type": "tool", "name": "pit_search"},
    )
    (_, request), = fake.seen
    assert request["system"] == "sys" and request["tool_choice"] == "pit_search"
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "tool"]
    assert request["messages"][2] == {"role": "tool", "text": "error: nope", "tool_call_id": "a"}
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert (msg.content[1].name, msg.content[1].input) == ("pit_search", {"query": "x"})
    assert async_t is not None


REFUSED = {
    "stream": ({"stream": True}, 400, "stream"),
    "n": ({"n": 2}, 400, "one choice"),
    "image": ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400, "text"),
    "web_search": ({"web_search_options": {}}, 400, "internet"),
    "server_tool": ({"tools": [{"type": "web_search_preview"}]}, 400, "function tools"),
    "bad_role": ({"messages": [{"role": "root", "content": "x"}]}, 400, "role"),
    "tool_without_id": ({"messages": [{"role": "tool", "content": "x"}]}, 400, "tool_call_id"),
    "temperature": ({"temperature": 7}, 400, "temperature"),
    "max_tokens": ({"max_tokens": -1}, 400, "max_tokens"),
    "stop_not_list": ({"stop": 5}, 400, "malformed"),
    "sim_context_shape": ({"sim_context": [1]}, 400, "malformed"),
    "no_model": ({"model": ""}, 400, "model"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_malformed_or_forbidden_requests_are_refused_before_the_harness(name: str) -> None:
    extra, status, needle = REFUSED[name]
    body = {"model": "m/x", "messages": [{"role": "user", "content": "hi"}], **extra}
    fake = _Fake(["completion", _completion("x")])
    code, data = answer("POST", "/v1/chat/completions", json.dumps(body).encode(), fake)
    assert code == status, data
    assert needle in data["error"]["message"], data
    assert fake.seen == []  # nothing reached the harness


def test_size_path_method_session_and_gateway_refusals() -> None:
    fake = _Fake(["raised", "BudgetExceeded", "the cap of 0 USD is reached"])
    ok = json.dumps({"model": "m/x", "messages": [{"role": "user", "content": "hi"}]}).encode()
    assert answer("POST", "/v1/chat/completions", b"x" * (MAX_BODY + 1), fake)[0] == 413
    assert answer("GET", "/v1/chat/completions", ok, fake)[0] == 404
    assert answer("POST", "/v1/embeddings", ok, fake)[0] == 404
    assert answer("POST", "/v1/chat/completions", b"[" * 100000, fake)[0] == 400
    assert answer("POST", "/v1/chat/completions", b"\xff\xfe", fake)[0] == 400
    code, data = answer("POST", "/v1/chat/completions", ok, None)
    assert (code, "no PIT session" in data["error"]["message"]) == (400, True)
    code, data = answer("POST", "/v1/chat/completions", ok, fake)
    assert code == 403 and "BudgetExceeded" in data["error"]["message"]
    code, data = answer("POST", "/v1/messages", ok, fake)
    assert code == 403 and data["type"] == "error"
    client = _openai(fake)
    with pytest.raises(openai.PermissionDeniedError, match="BudgetExceeded"):
        client.chat.completions.create(model="m/x", messages=[{"role": "user", "content": "hi"}])


# --- inside the jail -------------------------------------------------------------------------------------------------

KEY_ENV = "EVALKIT_TEST_SDK_API_KEY"
KEY = "sk-sdk-canary-DO-NOT-LEAK"


class _ToolModel(BaseHTTPRequestHandler):
    """An OpenAI-compatible model on loopback that drives the PIT tools: list, then submit the fresh rows."""

    protocol_version = "HTTP/1.1"
    hits: list[str] = []

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        _ToolModel.hits.append(self.headers.get("Authorization", ""))
        results = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        if not results:
            call = {"name": "pit_list", "arguments": json.dumps({"limit": 200})}
        elif "rows" in results[-1]:
            page = results[-1]
            fresh = [r["row_key"] for r in page["rows"] if r["entry_session"] == page["session_date"]]
            call = {"name": "submit", "arguments": json.dumps({"row_keys": fresh})}
        else:
            call = None
        message: dict[str, Any] = {"role": "assistant", "content": None if call else "done"}
        if call:
            message["tool_calls"] = [{"id": f"call_{len(results)}", "type": "function", "function": call}]
        data = json.dumps({
            "id": "x", "object": "chat.completion", "model": "tool-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def tool_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ToolModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    registry = tmp_path / "registry.toml"
    registry.write_text(
        '[models."loop/tools"]\nprovider = "openai-compatible"\napi_model = "tools"\n'
        f'base_url = "http://127.0.0.1:{server.server_address[1]}/v1"\napi_key_env = "{KEY_ENV}"\n'
        "context_window = 100000\nmax_output = 4096\n"
        'prices = { input = "1", output = "1", cache_read = "1", cache_write = "1" }\n'
    )
    monkeypatch.setenv("EVALKIT_REGISTRY", str(registry))
    monkeypatch.setenv(KEY_ENV, KEY)
    _ToolModel.hits = []
    try:
        yield "loop/tools"
    finally:
        server.shutdown()
        server.server_close()


OPENAI_TOOL_LOOP = """
import json, os
from openai import OpenAI
from evalkit.pit import tool_specs

SUBMIT = {{"type": "function", "function": {{"name": "submit", "parameters": {{"type": "object", "properties": {{}}}}}}}}

def agent(prompt, tools):
    client = OpenAI()  # OPENAI_BASE_URL and a placeholder key come from the jail's environment
    assert os.environ["OPENAI_API_KEY"] != {key!r}
    messages = [{{"role": "user", "content": prompt}}]
    for _ in range(6):
        reply = client.chat.completions.create(model={model!r}, messages=messages, tools=[*tool_specs(), SUBMIT])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            args = json.loads(call.function.arguments)
            if call.function.name == "submit":
                return args["row_keys"]
            messages.append({{"role": "tool", "tool_call_id": call.id, "content": json.dumps(tools.call(call.function.name, args))}})
        if not message.tool_calls:
            return message.content
    return "no submit"
"""


@needs_wall
def test_an_openai_sdk_tool_loop_runs_unchanged_and_every_call_is_on_the_record(
    tool_model: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(OPENAI_TOOL_LOOP.format(model=tool_model, key=KEY))
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, arms=("main", "shifted")))
    body = result.body
    assert body["valid"] is True, body["agent_errors"]
    stub = run(stub_agent, cfg(synth_release_dir, trajectory_path="stub/t.jsonl", receipt_path="stub/r.json"))
    picks = [e["picks"] for e in kinds(result, "decision")]
    assert picks[:2] == [e["picks"] for e in kinds(stub, "decision")]  # the model's submit, through the SDK
    assert any(picks)
    calls, requests = kinds(result, "model_call"), kinds(result, "model_request")
    assert len(_ToolModel.hits) == len(calls) == len(requests) == 2 * 2 * 2  # 2 cells x 2 sessions x 2 calls
    assert all(h == f"Bearer {KEY}" for h in _ToolModel.hits)  # the gateway, outside the jail, holds the key
    assert body["protocol"]["P4_costs_and_frictions"]["model_calls"] == len(calls)
    for path in (result.trajectory_path, result.receipt_path):
        assert KEY not in path.read_text()


SIM_AGENTS = {
    "openai_sync": """
from openai import OpenAI

def agent(prompt, tools):
    r = OpenAI().chat.completions.create(model="sim/strong", messages=[{"role": "user", "content": prompt}],
                                         extra_body={"sim_context": {"reference": "hold"}})
    return "text=" + str(r.choices[0].message.content) + " | model=" + r.model
""",
    "openai_async": """
import asyncio
from openai import AsyncOpenAI

def agent(prompt, tools):
    async def go():
        r = await AsyncOpenAI().chat.completions.create(
            model="sim/strong", messages=[{"role": "user", "content": prompt}],
            extra_body={"sim_context": {"reference": "hold"}})
        return "text=" + str(r.choices[0].message.content) + " | model=" + r.model
    return asyncio.run(go())
""",
    "anthropic_sync": """
import anthropic

def agent(prompt, tools):
    m = anthropic.Anthropic().messages.create(model="sim/strong", max_tokens=32,
                                              messages=[{"role": "user", "content": prompt}],
                                              extra_body={"sim_context": {"reference": "hold"}})
    return "text=" + "".join(b.text for b in m.content) + " | model=" + m.model
""",
}


@needs_wall
@pytest.mark.parametrize("name", list(SIM_AGENTS))
def test_sdk_agents_reach_a_simulated_registry_model_through_the_gateway(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(SIM_AGENTS[name])
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec))
    assert result.body["valid"] is True, result.body["agent_errors"]
    for text in texts(result):
        assert text.endswith("| model=sim/strong (simulated)"), text
    assert len(kinds(result, "model_call")) == len(kinds(result, "model_request")) == 2


@needs_wall
def test_past_the_budget_cap_the_sdk_gets_a_refusal_and_nothing_is_spent(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalkit_core.models import budget_status, set_budget_cap
    from evalkit_core.store import Store

    monkeypatch.setenv("EVALKIT_HOME", str(in_tmp / "home"))
    with Store.open() as store:
        set_budget_cap(store, Decimal(0))
    spec = write_agent(
        """
        import openai

        def agent(prompt, tools):
            try:
                openai.OpenAI().chat.completions.create(model="sim/strong", messages=[{"role": "user", "content": "x"}],
                                                        extra_body={"sim_context": {"reference": "hold"}})
            except openai.APIStatusError as exc:
                return f"status={exc.status_code} | error={type(exc).__name__}"
            return "status=200"
        """
    )
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    (text,) = texts(result)
    assert text == "status=403 | error=PermissionDeniedError", text
    assert kinds(result, "model_call") == []
    with Store.open() as store:
        assert budget_status(store).spent == 0
