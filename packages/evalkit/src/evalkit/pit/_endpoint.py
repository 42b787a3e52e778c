"""The model gateway as provider SDKs see it: an OpenAI-compatible chat-completions endpoint (and the Anthropic
messages API) answered inside the agent's jail, so that an agent written with the ``openai`` or ``anthropic``
Python SDK runs unchanged.

Inside the jail the environment names the endpoint (:data:`ENDPOINT_ENV`: ``OPENAI_BASE_URL``,
``ANTHROPIC_BASE_URL`` and a placeholder key for each; the gateway, outside, holds the real keys). The host
``pit-gateway.invalid`` is in a reserved top-level domain: no resolver answers it, and no socket is opened for it.
Every HTTP client made with ``httpx`` (or ``httpx2``, which the SDKs use) inside the jail has that host mounted on a
transport of evalkit's (:mod:`evalkit.pit._sdk_transport`) that hands the request to :func:`answer`; every other
host goes through the client's own transport, where the network recorders see it as before.

:func:`answer` turns the SDK's request into an evalkit :class:`~evalkit_core.models.Request` and sends it as one
``complete`` request over the agent's pipe, exactly what ``tools.complete`` sends: the harness records it, the
gateway charges it to the budget (refusing it past the cap) and the registry's model answers it. The completion
comes back in the SDK's own format, tool calls included (the agent runs them with ``tools.call``; the four PIT
tools in OpenAI format are :func:`evalkit.pit.tool_specs`). Nothing here is trusted by the harness: what crosses the
pipe is checked there again.

A simulated registry model (``sim/*``) answers only a request that carries its reference (``sim_context``, what
evalkit's own solvers send): the endpoint passes a body's ``sim_context`` on (the SDKs send it with
``extra_body``); real models ignore it.

Refused here, with the SDK's error format: streaming, ``n`` other than 1, content other than text, provider-side
tools that reach the internet, a body over :data:`MAX_BODY` bytes, a call outside a session (status 400 or 413:
the SDKs do not retry them). A request the gateway refuses (budget, unknown model, its own checks) is status 403, which the SDKs do not
retry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

__all__ = ["ENDPOINT_ENV", "ENDPOINT_HOST", "MAX_BODY", "EndpointError", "answer"]

ENDPOINT_HOST = "pit-gateway.invalid"
_PLACEHOLDER = "evalkit-pit-gateway"  # not a key: the gateway outside the jail holds the provider keys
ENDPOINT_ENV = {
    "OPENAI_BASE_URL": f"http://{ENDPOINT_HOST}/v1",
    "OPENAI_API_KEY": _PLACEHOLDER,
    "ANTHROPIC_BASE_URL": f"http://{ENDPOINT_HOST}",
    "ANTHROPIC_API_KEY": _PLACEHOLDER,
}
MAX_BODY = 16 << 20
_DEFAULT_MAX_TOKENS = 1024
_INTERNET = ("web_search_options", "server_tools", "plugins")

# what the harness answers a ``complete`` request with: ["completion", json] or ["raised", type, message]
Complete = Callable[[str, dict[str, Any]], Sequence[Any]]


class EndpointError(Exception):
    """A request this endpoint refuses: ``status`` and a message for the SDK's error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def answer(method: str, path: str, body: bytes, complete: Complete | None) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) for one HTTP request to the endpoint; ``complete`` is the session's way to the harness
    (None when no session is open)."""
    anthropic = path.rstrip("/").endswith("/messages")
    try:
        return 200, _serve(method, path, body, complete, anthropic=anthropic)
    except EndpointError as exc:
        if anthropic:
            return exc.status, {"type": "error", "error": {"type": exc.kind, "message": exc.message}}
        return exc.status, {"error": {"message": exc.message, "type": exc.kind, "code": None, "param": None}}


def _serve(method: str, path: str, body: bytes, complete: Complete | None, *, anthropic: bool) -> dict[str, Any]:
    if method != "POST" or not (anthropic or path.rstrip("/").endswith("/chat/completions")):
        raise EndpointError(404, f"{method} {path}: the PIT gateway offers POST /v1/chat/completions and POST /v1/messages")
    if len(body) > MAX_BODY:
        raise EndpointError(413, f"request body of {len(body)} bytes; the PIT gateway takes at most {MAX_BODY}")
    try:
        data: object = json.loads(body)
    except (ValueError, RecursionError):
        raise EndpointError(400, "the request body is not JSON") from None
    if not isinstance(data, dict):
        raise EndpointError(400, "the request body must be a JSON object")
    raw = cast("dict[str, Any]", data)
    try:
        model, request = _anthropic_request(raw) if anthropic else _openai_request(raw)
    except EndpointError:
        raise
    except Exception as exc:  # a field of the wrong shape: the caller's error
        raise EndpointError(400, f"malformed request: {type(exc).__name__}: {exc}") from None
    _check(request)
    if complete is None:
        raise EndpointError(400, "no PIT session is open: a model is reached only while the agent is being called")
    reply = list(complete(model, request))
    if not reply or reply[0] != "completion" or not isinstance(reply[1], dict):
        kind = str(reply[1]) if len(reply) > 1 else "GatewayError"
        text = str(reply[2]) if len(reply) > 2 else "the model call failed"
        raise EndpointError(403, f"{kind}: {text}", "permission_error")
    completion = cast("dict[str, Any]", reply[1])
    return _anthropic_response(completion) if anthropic else _openai_response(completion)


def _check(request: dict[str, Any]) -> None:
    """What the harness will check again: the request must be an evalkit request."""
    from evalkit_core.models import request_from_json

    try:
        request_from_json(request)
    except Exception as exc:  # any malformed field is the caller's error
        raise EndpointError(400, f"malformed request: {exc}") from None


def _text(content: object, where: str) -> str:
    """Text content: a string, None, or a list of text parts (OpenAI ``{"type": "text"}``, Anthropic the same)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in cast("list[object]", content):
            if isinstance(part, dict) and cast("dict[str, Any]", part).get("type") == "text":
                parts.append(str(cast("dict[str, Any]", part).get("text", "")))
            else:
                raise EndpointError(400, f"{where}: only text content is offered by the PIT gateway")
        return "".join(parts)
    raise EndpointError(400, f"{where}: content must be a string or a list of text parts")


def _common(raw: Mapping[str, Any], *, stop_key: str) -> dict[str, Any]:
    for key in _INTERNET:
        if raw.get(key) is not None:
            raise EndpointError(400, f"the PIT gateway refuses provider-side tools that reach the internet: {key}")
    if raw.get("stream"):
        raise EndpointError(400, "streaming is not offered by the PIT gateway (stream must be false)")
    out: dict[str, Any] = {}
    if raw.get("temperature") is not None:
        out["temperature"] = raw["temperature"]
    stop = raw.get(stop_key)
    if stop is not None:
        out["stop"] = [stop] if isinstance(stop, str) else list(cast("list[Any]", stop))
    if raw.get("sim_context") is not None:  # what a simulated model answers from (the SDKs' extra_body)
        out["sim_context"] = raw["sim_context"]
    return out


def _model(raw: Mapping[str, Any]) -> str:
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise EndpointError(400, "model: expected a registry model id")
    return model


# --- OpenAI chat completions ------------------------------------------------------------------------------------


def _openai_request(raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    model = _model(raw)
    if raw.get("n") not in (None, 1):
        raise EndpointError(400, "n: the PIT gateway answers one choice per call")
    out = _common(raw, stop_key="stop")
    max_tokens = raw.get("max_completion_tokens", raw.get("max_tokens"))
    out["max_tokens"] = _DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    items = raw.get("messages")
    if not isinstance(items, list):
        raise EndpointError(400, "messages: expected a list")
    for i, item in enumerate(cast("list[object]", items)):
        where = f"messages[{i}]"
        if not isinstance(item, dict):
            raise EndpointError(400, f"{where}: expected an object")
        m = cast("dict[str, Any]", item)
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text(m.get("content"), where))
        elif role == "user":
            messages.append({"role": "user", "text": _text(m.get("content"), where)})
        elif role == "assistant":
            calls: list[dict[str, Any]] = []
            for j, tc in enumerate(cast("list[object]", m.get("tool_calls") or [])):
                fn = cast("dict[str, Any]", tc).get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict):
                    raise EndpointError(400, f"{where}.tool_calls[{j}]: expected a function call")
                f = cast("dict[str, Any]", fn)
                args = f.get("arguments")
                calls.append(
                    {
                        "id": str(cast("dict[str, Any]", tc).get("id") or f"call_{j}"),
                        "name": str(f.get("name") or ""),
                        "raw_arguments": args if isinstance(args, str) else json.dumps(args or {}),
                    }
                )
            msg: dict[str, Any] = {"role": "assistant", "text": _text(m.get("content"), where)}
            if calls:
                msg["tool_calls"] = calls
            messages.append(msg)
        elif role == "tool":
            messages.append(
                {"role": "tool", "text": _text(m.get("content"), where), "tool_call_id": str(m.get("tool_call_id") or "")}
            )
        else:
            raise EndpointError(400, f"{where}: unknown role {role!r}")
    out["messages"] = messages
    if system:
        out["system"] = "\n\n".join(system)
    tools: list[dict[str, Any]] = []
    for j, spec in enumerate(cast("list[object]", raw.get("tools") or [])):
        s = cast("dict[str, Any]", spec) if isinstance(spec, dict) else {}
        fn = s.get("function")
        if s.get("type", "function") != "function" or not isinstance(fn, dict):
            raise EndpointError(400, f"tools[{j}]: only function tools are offered (no provider-side tools)")
        f = cast("dict[str, Any]", fn)
        tools.append(
            {
                "name": str(f.get("name") or ""),
                "description": str(f.get("description") or ""),
                "parameters": f.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    if tools:
        out["tools"] = tools
    choice = raw.get("tool_choice")
    if isinstance(choice, dict):
        fn = cast("dict[str, Any]", choice).get("function")
        out["tool_choice"] = str(cast("dict[str, Any]", fn).get("name")) if isinstance(fn, dict) else None
    elif choice is not None:
        out["tool_choice"] = {"required": "any"}.get(str(choice), str(choice))
    return model, out


def _openai_response(c: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {"id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": tc["raw_arguments"]}}
        for tc in cast("list[dict[str, Any]]", c.get("tool_calls") or [])
    ]
    stop = str(c.get("stop_reason"))
    finish = "tool_calls" if calls else "length" if stop in ("max_tokens", "length") else "stop"
    usage = cast("dict[str, int]", c.get("usage") or {})
    prompt = sum(int(usage.get(k, 0)) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens"))
    output = int(usage.get("output_tokens", 0))
    message: dict[str, Any] = {"role": "assistant", "content": c.get("text") or None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{c.get('call_id', '')}",
        "object": "chat.completion",
        "created": 0,  # no wall clock: the harness's records carry none either
        "model": str(c.get("reported_model") or c.get("model_id") or ""),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": int(usage.get("cache_read_tokens", 0))},
        },
    }


# --- Anthropic messages --------------------------------------------------------------------------------------------


def _anthropic_request(raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    model = _model(raw)
    out = _common(raw, stop_key="stop_sequences")
    out["max_tokens"] = raw.get("max_tokens", _DEFAULT_MAX_TOKENS)
    if raw.get("system") is not None:
        out["system"] = _text(raw["system"], "system")
    messages: list[dict[str, Any]] = []
    items = raw.get("messages")
    if not isinstance(items, list):
        raise EndpointError(400, "messages: expected a list")
    for i, item in enumerate(cast("list[object]", items)):
        where = f"messages[{i}]"
        if not isinstance(item, dict):
            raise EndpointError(400, f"{where}: expected an object")
        m = cast("dict[str, Any]", item)
        role, content = m.get("role"), m.get("content")
        if role not in ("user", "assistant"):
            raise EndpointError(400, f"{where}: unknown role {role!r}")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise EndpointError(400, f"{where}: content must be a string or a list of blocks")
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(cast("list[object]", blocks)):
            b = cast("dict[str, Any]", block) if isinstance(block, dict) else {}
            kind = b.get("type")
            if kind == "text":
                texts.append(str(b.get("text", "")))
            elif kind == "tool_use" and role == "assistant":
                calls.append({"id": str(b.get("id") or f"toolu_{j}"), "name": str(b.get("name") or ""),
                              "raw_arguments": json.dumps(b.get("input") or {})})
            elif kind == "tool_result" and role == "user":
                result = _text(b.get("content"), f"{where}.content[{j}]")
                if b.get("is_error"):
                    result = f"error: {result}"
                messages.append({"role": "tool", "text": result, "tool_call_id": str(b.get("tool_use_id") or "")})
            else:
                raise EndpointError(400, f"{where}.content[{j}]: block type {kind!r} is not offered by the PIT gateway")
        if texts or calls or (role == "assistant"):
            msg: dict[str, Any] = {"role": role, "text": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            messages.append(msg)
    out["messages"] = messages
    tools: list[dict[str, Any]] = []
    for j, spec in enumerate(cast("list[object]", raw.get("tools") or [])):
        s = cast("dict[str, Any]", spec) if isinstance(spec, dict) else {}
        if s.get("type") not in (None, "custom") or "name" not in s:
            raise EndpointError(400, f"tools[{j}]: only client tools are offered (no server tools that reach the internet)")
        tools.append({"name": str(s["name"]), "description": str(s.get("description") or ""),
                      "parameters": s.get("input_schema") or {"type": "object", "properties": {}}})
    if tools:
        out["tools"] = tools
    choice = raw.get("tool_choice")
    if isinstance(choice, dict):
        c = cast("dict[str, Any]", choice)
        out["tool_choice"] = str(c.get("name")) if c.get("type") == "tool" else str(c.get("type") or "auto")
    return model, out


def _anthropic_response(c: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if c.get("text"):
        content.append({"type": "text", "text": c["text"]})
    calls = cast("list[dict[str, Any]]", c.get("tool_calls") or [])
    for tc in calls:
        try:
            args: object = json.loads(tc["raw_arguments"]) if str(tc["raw_arguments"]).strip() else {}
        except ValueError:
            args = {}
        content.append({"type": "tool_use", "id": tc["id"], "name": tc["name"], "input": args if isinstance(args, dict) else {}})
    stop = str(c.get("stop_reason"))
    reason = "tool_use" if calls else "max_tokens" if stop in ("max_tokens", "length") else "end_turn"
    usage = cast("dict[str, int]", c.get("usage") or {})
    return {
        "id": f"msg_{c.get('call_id', '')}",
        "type": "message",
        "role": "assistant",
        "model": str(c.get("reported_model") or c.get("model_id") or ""),
        "content": content,
        "stop_reason": reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(usage.get("input_tokens", 0)),
            "output_tokens": int(usage.get("output_tokens", 0)),
            "cache_read_input_tokens": int(usage.get("cache_read_tokens", 0)),
            "cache_creation_input_tokens": int(usage.get("cache_write_tokens", 0)),
        },
    }
