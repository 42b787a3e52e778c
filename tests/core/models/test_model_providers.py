"""Real-provider paths against the loopback fake: parsing, exact costs, tool calls, retries, timeouts, keys."""

from __future__ import annotations

import asyncio
import json
import logging
from decimal import Decimal
from pathlib import Path

import pytest

from evalkit_core import EvalkitError
from evalkit_core.models import (
    Message,
    MissingKeyError,
    ModelError,
    Request,
    RetryPolicy,
    SimContext,
    Timeouts,
    ToolCall,
    ToolSpec,
    Usage,
    call_attempts,
    list_calls,
    recompute_cost,
)

WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def run(coro):
    return asyncio.run(coro)


async def _one(client_factory, model: str, request: Request, **kwargs):
    async with client_factory(**kwargs) as client:
        return await client.complete(model, request)


# The fake reports 7200 input tokens (cache included) and 300 output tokens: a request must be able to cost that
# much (its bytes bound its input tokens, max_tokens its output), or the usage is an anomaly charged at the bound.
LONG = "hello " + "x" * 7400


def test_anthropic_reply_usage_and_exact_cost(client_factory, fake_provider, store):
    req = Request.of(LONG, system="be brief", max_tokens=321, temperature=0.5, stop=("STOP",))
    c = run(_one(client_factory, "fake-anthropic/ok", req))
    assert c.text == "Hello from fake Anthropic."
    assert c.reported_model == "claude-fake-20250101-reported"
    assert c.usage == Usage(
        input_tokens=1200, output_tokens=300, cache_read_tokens=5000, cache_write_tokens=1000
    )
    # 1200*3 + 300*15 + 5000*0.30 + 1000*3.75 = 13350 per million tokens
    assert c.cost == Decimal("0.01335")
    assert str(c.cost) == "0.01335"
    assert c.attempts == 1
    assert not c.simulated
    sent = fake_provider.requests[-1]
    assert sent["path"] == "/v1/messages"
    assert sent["body"] == {
        "model": "ok",
        "max_tokens": 321,
        "messages": [{"role": "user", "content": [{"type": "text", "text": LONG}]}],
        "system": "be brief",
        "temperature": 0.5,
        "stop_sequences": ["STOP"],
    }
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    [record] = list_calls(store)
    assert record.status == "ok"
    assert record.cost == Decimal("0.01335")
    assert record.reported_model == "claude-fake-20250101-reported"
    assert record.registry_digest == c.registry_digest
    assert record.request_digest == c.request_digest
    assert record.response_digest == c.response_digest
    assert recompute_cost(store, c.call_id) == Decimal("0.01335")


def test_openai_reply_cached_tokens_and_exact_cost(client_factory, fake_provider, store):
    req = Request.of(LONG, system="sys", max_tokens=300, stop=("x", "y"))
    c = run(_one(client_factory, "fake-openai/ok", req))
    assert c.text == "Hello from fake OpenAI."
    assert c.reported_model == "gpt-fake-2025-01-01-reported"
    # prompt_tokens 6200 includes 5000 cached: 1200 uncached
    assert c.usage == Usage(
        input_tokens=1200, output_tokens=300, cache_read_tokens=5000, cache_write_tokens=0
    )
    # 1200*0.15 + 300*0.60 + 5000*0.075 = 735 per million tokens
    assert c.cost == Decimal("0.000735")
    sent = fake_provider.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"].startswith("Bearer ")
    assert sent["body"]["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": LONG},
    ]
    assert sent["body"]["max_completion_tokens"] == 300
    assert sent["body"]["stop"] == ["x", "y"]
    assert "temperature" not in sent["body"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_tool_call_round_trip(client_factory, fake_provider, provider):
    req = Request.of("weather in Paris?", tools=(WEATHER,), tool_choice="auto")
    c = run(_one(client_factory, f"fake-{provider}/tool", req))
    [call] = c.tool_calls
    assert call.name == "get_weather"
    assert call.arguments == {"city": "Paris"}
    assert c.stop_reason == ("tool_use" if provider == "anthropic" else "tool_calls")
    sent = fake_provider.requests[-1]["body"]
    if provider == "anthropic":
        assert sent["tools"] == [
            {"name": "get_weather", "description": "Weather for a city.", "input_schema": WEATHER.parameters}
        ]
        assert sent["tool_choice"] == {"type": "auto"}
    else:
        assert sent["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather for a city.",
                    "parameters": WEATHER.parameters,
                },
            }
        ]
        assert sent["tool_choice"] == "auto"
    # the result goes back in the provider's own shape
    follow = Request(
        messages=(
            Message("user", "weather in Paris?"),
            c.message,
            Message("tool", "18C, sunny", tool_call_id=call.id),
        ),
        tools=(WEATHER,),
        tool_choice="get_weather",
    )
    run(_one(client_factory, f"fake-{provider}/ok", follow))
    sent = fake_provider.requests[-1]["body"]
    if provider == "anthropic":
        assert sent["messages"][1] == {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        }
        assert sent["messages"][2] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C, sunny"}],
        }
        assert sent["tool_choice"] == {"type": "tool", "name": "get_weather"}
    else:
        assert sent["messages"][1]["tool_calls"] == [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ]
        assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}
        assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_sim_context_is_never_sent(client_factory, fake_provider):
    secret_reference = "def solution():\n    return 'REFERENCE-MUST-NOT-LEAK'\n"
    req = Request.of("solve it", sim_context=SimContext(reference=secret_reference, mutants=("WRONG",)))
    for provider in ("anthropic", "openai"):
        run(_one(client_factory, f"fake-{provider}/ok", req))
        raw = fake_provider.requests[-1]["raw"]
        assert b"REFERENCE-MUST-NOT-LEAK" not in raw
        assert b"sim_context" not in raw


def test_missing_key_fails_before_any_request(client_factory, fake_provider, store):
    before = fake_provider.hits()
    with pytest.raises(MissingKeyError, match="FAKE_PROVIDER_KEY") as info:
        run(_one(client_factory, "fake-anthropic/ok", Request.of("hi"), env={}))
    assert isinstance(info.value, EvalkitError)
    assert fake_provider.hits() == before
    assert list_calls(store) == []


def test_429_retry_after_is_honoured(client_factory, fake_provider, store):
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)

    c = run(_one(client_factory, "fake-anthropic/flaky429", Request.of("flaky once " + LONG), sleep=sleep))
    assert c.attempts == 3
    assert slept == [0.01, 0.01]  # exactly the Retry-After, not the backoff
    assert c.cost == Decimal("0.01335")
    attempts = call_attempts(store, c.call_id)
    assert [(a.attempt, a.status_code, a.outcome, a.charged) for a in attempts] == [
        (1, 429, "retry", Decimal(0)),
        (2, 429, "retry", Decimal(0)),
        (3, 200, "ok", Decimal("0.01335")),
    ]
    [record] = list_calls(store)
    assert record.attempts == 3
    assert record.charged == Decimal("0.01335")


@pytest.mark.parametrize("status", [500, 529])
def test_5xx_retried_then_error_says_how_many_attempts(client_factory, fake_provider, store, status):
    model = f"fake-openai/always{status}"
    before = fake_provider.hits(f"always{status}")
    with pytest.raises(ModelError, match=rf"HTTP {status} .*after 3 attempts") as info:
        run(_one(client_factory, model, Request.of(f"boom {status}")))
    assert info.value.attempts == 3
    assert info.value.status_code == status
    assert fake_provider.hits(f"always{status}") - before == 3
    [record] = list_calls(store)
    assert (record.status, record.attempts, record.charged) == ("error", 3, Decimal(0))
    assert "after" not in (record.error or "")  # the store keeps the reason; attempts have their own column
    assert [a.outcome for a in call_attempts(store, record.call_id)] == ["retry", "retry", "error"]


def test_4xx_is_not_retried(client_factory, fake_provider, store):
    before = fake_provider.hits("bad400")
    with pytest.raises(ModelError, match=r"HTTP 400 .*max_tokens: field required.*after 1 attempt\)"):
        run(_one(client_factory, "fake-anthropic/bad400", Request.of("bad")))
    assert fake_provider.hits("bad400") - before == 1


def test_malformed_json_is_retried_and_charged_conservatively(client_factory, store):
    with pytest.raises(ModelError, match=r"malformed JSON.*after 3 attempts"):
        run(_one(client_factory, "fake-anthropic/badjson", Request.of("garbled", max_tokens=10)))
    [record] = list_calls(store)
    # the provider may have billed a reply we could not read: each attempt is charged its full reservation
    assert record.charged > 0
    assert sum(a.charged for a in call_attempts(store, record.call_id)) == record.charged


def test_slow_reply_past_timeout(client_factory, store):
    with pytest.raises(
        ModelError, match=r"no complete reply .* within the attempt deadline of 0.2s.*after 2 attempts"
    ):
        run(_one(client_factory, "fake-openai/slow", Request.of("slow"), timeouts=Timeouts(attempt=0.2),
                 retry=RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)))  # fmt: skip
    [record] = list_calls(store)
    assert record.status == "error"
    assert record.attempts == 2


def test_connection_refused_is_retried(fake_registry, store, tmp_path):
    import socket

    from evalkit_core.models import ModelClient, load_registry

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    reg_file = tmp_path / "dead.toml"
    reg_file.write_text(
        f'[models."dead/x"]\nprovider = "openai-compatible"\napi_model = "x"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        'api_key_env = ""\ncontext_window = 1000\nmax_output = 100\n'
        'prices = { input = "1", output = "1", cache_read = "1", cache_write = "1" }\n'
    )

    async def go():
        async with ModelClient(registry=load_registry([reg_file], env={}), store=store,
                               retry=RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)) as c:  # fmt: skip
            await c.complete("dead/x", Request.of("anyone?"))

    with pytest.raises(ModelError, match=r"cannot connect .*after 2 attempts"):
        run(go())


def test_key_never_in_logs_store_or_errors(client_factory, fake_provider, store, api_key, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelError) as info:
        run(_one(client_factory, "fake-anthropic/echokey", Request.of("who am i")))
    # the server really did echo it: the client scrubbed it
    assert fake_provider.requests[-1]["headers"]["x-api-key"] == api_key
    assert "[redacted]" in str(info.value)
    assert api_key not in str(info.value)
    c = run(_one(client_factory, "fake-openai/flaky429", Request.of("log me")))
    assert api_key not in repr(c)
    assert api_key not in caplog.text
    assert "retrying" in caplog.text  # logging did happen
    store.close()
    for f in Path(store.path).parent.iterdir():
        assert api_key.encode() not in f.read_bytes(), f
    for record in caplog.records:
        assert api_key not in record.getMessage()


def test_concurrent_calls_share_one_client(client_factory, store):
    async def go():
        async with client_factory() as client:
            return await asyncio.gather(
                *(client.complete("fake-openai/small", Request.of(f"n{i}")) for i in range(40))
            )

    results = run(go())
    assert len({c.call_id for c in results}) == 40
    assert sum(c.cost for c in results) == Decimal("0.0000135") * 40  # (10*0.15 + 20*0.60) / 1e6 each
    assert all(c.attempts == 1 for c in results)
    assert len(list_calls(store)) == 40


def test_unparseable_tool_arguments_are_kept_raw():
    tc = ToolCall.parse("id", "f", "{not json")
    assert tc.arguments is None
    assert tc.raw_arguments == "{not json"
    assert json.loads(ToolCall.of("id", "f", {"a": 1}).raw_arguments) == {"a": 1}
