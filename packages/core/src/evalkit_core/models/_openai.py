"""The OpenAI Chat Completions wire format (``POST {base_url}/chat/completions``), also spoken by OpenRouter,
vLLM, llama.cpp server and Ollama."""

from __future__ import annotations

from typing import Any, cast

from evalkit_core.models._providers import Reply, ShapeError, UsageError, count, read_usage
from evalkit_core.models._registry import ModelEntry
from evalkit_core.models._types import Message, Request, ToolCall, Usage

__all__ = ["build_body", "endpoint", "headers", "parse_reply"]


def endpoint(entry: ModelEntry) -> str:
    return f"{entry.base_url}/chat/completions"


def headers(key: str | None) -> dict[str, str]:
    out = {"content-type": "application/json"}
    if key:
        out["authorization"] = f"Bearer {key}"
    return out


def _message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text}
    out: dict[str, Any] = {"role": m.role, "content": m.text if (m.text or not m.tool_calls) else None}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": tc.raw_arguments}}
            for tc in m.tool_calls
        ]
    return out


def build_body(entry: ModelEntry, request: Request) -> dict[str, Any]:
    """The JSON body. ``request.sim_context`` is never part of it."""
    messages: list[dict[str, Any]] = []
    if request.system is not None:
        messages.append({"role": "system", "content": request.system})
    messages.extend(_message(m) for m in request.messages)
    body: dict[str, Any] = {"model": entry.api_model, "messages": messages}
    # OpenAI itself now wants max_completion_tokens; compatible servers still read max_tokens.
    body["max_completion_tokens" if entry.provider == "openai" else "max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop"] = list(request.stop)
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in request.tools
        ]
    if request.tool_choice is not None:
        choice = request.tool_choice
        if choice in ("auto", "none"):
            body["tool_choice"] = choice
        elif choice == "any":
            body["tool_choice"] = "required"
        else:
            body["tool_choice"] = {"type": "function", "function": {"name": choice}}
    return body


def parse_reply(data: Any, entry: ModelEntry) -> Reply:
    if not isinstance(data, dict):
        raise ShapeError("expected a JSON object")
    d = cast("dict[str, Any]", data)
    choices = d.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ShapeError("expected a non-empty 'choices' list")
    choice = cast("list[Any]", choices)[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise ShapeError("choices[0] lacks a 'message' object")
    c = cast("dict[str, Any]", choice)
    msg = cast("dict[str, Any]", c["message"])
    calls: list[ToolCall] = []
    for tc in cast("list[Any]", msg.get("tool_calls") or []):
        fn = cast("dict[str, Any]", tc).get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict):
            raise ShapeError("tool call lacks a 'function' object")
        f = cast("dict[str, Any]", fn)
        calls.append(
            ToolCall.parse(
                str(cast("dict[str, Any]", tc).get("id")), str(f.get("name")), str(f.get("arguments") or "")
            )
        )
    usage, problem = read_usage(lambda: _usage(d.get("usage")))
    stop = c.get("finish_reason")
    return Reply(
        text=str(msg.get("content") or ""),
        tool_calls=tuple(calls),
        stop_reason=None if stop is None else str(stop),
        usage=usage,
        reported_model=str(d.get("model") or entry.api_model),
        raw=d,
        usage_problem=problem,
    )


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        raise UsageError("the reply has no 'usage' object")
    u = cast("dict[str, Any]", usage)
    prompt = count(u.get("prompt_tokens"), "prompt_tokens", required=True)
    details = u.get("prompt_tokens_details")
    cached = (
        count(cast("dict[str, Any]", details).get("cached_tokens"), "cached_tokens")
        if isinstance(details, dict)
        else 0
    )
    if cached > prompt:
        raise UsageError(f"cached_tokens {cached} exceeds prompt_tokens {prompt}")
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=count(u.get("completion_tokens"), "completion_tokens", required=True),
        cache_read_tokens=cached,
    )
