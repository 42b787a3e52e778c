"""The Anthropic Messages API wire format (``POST {base_url}/v1/messages``)."""

from __future__ import annotations

from typing import Any, cast

from evalkit_core.models._providers import Reply, ShapeError, UsageError, count, read_usage
from evalkit_core.models._registry import ModelEntry
from evalkit_core.models._types import Message, Request, ToolCall, Usage

__all__ = ["ANTHROPIC_VERSION", "build_body", "endpoint", "headers", "parse_reply"]

ANTHROPIC_VERSION = "2023-06-01"


def endpoint(entry: ModelEntry) -> str:
    return f"{entry.base_url}/v1/messages"


def headers(key: str | None) -> dict[str, str]:
    out = {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
    if key:
        out["x-api-key"] = key
    return out


def _blocks(m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        return [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.text}]
    blocks: list[dict[str, Any]] = []
    if m.text:
        blocks.append({"type": "text", "text": m.text})
    blocks.extend(
        {"type": "tool_use", "id": tc.id, "name": tc.name, "input": dict(tc.arguments or {})}
        for tc in m.tool_calls
    )
    return blocks


def build_body(entry: ModelEntry, request: Request) -> dict[str, Any]:
    """The JSON body. ``request.sim_context`` is never part of it."""
    messages: list[dict[str, Any]] = []
    for m in request.messages:
        role = "assistant" if m.role == "assistant" else "user"  # tool results travel in user turns
        if messages and messages[-1]["role"] == role:  # the API wants alternating turns: merge neighbours
            messages[-1]["content"].extend(_blocks(m))
        else:
            messages.append({"role": role, "content": _blocks(m)})
    body: dict[str, Any] = {"model": entry.api_model, "max_tokens": request.max_tokens, "messages": messages}
    if request.system is not None:
        body["system"] = request.system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    if request.tool_choice is not None:
        choice = request.tool_choice
        body["tool_choice"] = (
            {"type": choice} if choice in ("auto", "any", "none") else {"type": "tool", "name": choice}
        )
    return body


def parse_reply(data: Any) -> Reply:
    if not isinstance(data, dict):
        raise ShapeError("expected a JSON object")
    d = cast("dict[str, Any]", data)
    content = d.get("content")
    if not isinstance(content, list):
        raise ShapeError("expected a field 'content' (a list)")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in cast("list[Any]", content):
        if not isinstance(block, dict):
            raise ShapeError("content block is not an object")
        b = cast("dict[str, Any]", block)
        if b.get("type") == "text":
            texts.append(str(b.get("text", "")))
        elif b.get("type") == "tool_use":
            args = b.get("input")
            if not isinstance(args, dict):
                raise ShapeError("tool_use block without an object 'input'")
            calls.append(ToolCall.of(str(b.get("id")), str(b.get("name")), cast("dict[str, Any]", args)))
    usage, problem = read_usage(lambda: _usage(d.get("usage")))
    stop = d.get("stop_reason")
    return Reply(
        text="".join(texts),
        tool_calls=tuple(calls),
        stop_reason=None if stop is None else str(stop),
        usage=usage,
        reported_model=str(d.get("model", "")),
        raw=d,
        usage_problem=problem,
    )


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        raise UsageError("the reply has no 'usage' object")
    u = cast("dict[str, Any]", usage)
    return Usage(
        input_tokens=count(u.get("input_tokens"), "input_tokens", required=True),
        output_tokens=count(u.get("output_tokens"), "output_tokens", required=True),
        cache_read_tokens=count(u.get("cache_read_input_tokens"), "cache_read_input_tokens"),
        cache_write_tokens=count(u.get("cache_creation_input_tokens"), "cache_creation_input_tokens"),
    )
