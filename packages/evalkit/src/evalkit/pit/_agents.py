"""Agents: the stub, the adapters (plain callables and OpenAI-style tool loops) and agent specs.

An agent is called once per session as ``agent(prompt, tools)`` and returns an :class:`AgentReply`
(picks are row_keys, text is free). Adapters turn user functions into agents.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import attrs

from evalkit.pit._toolbox import Toolbox, tool_specs
from evalkit_core import ConfigError, EvalkitError

__all__ = [
    "Agent",
    "AgentReply",
    "AgentSpecError",
    "from_callable",
    "from_tool_loop",
    "resolve_agent",
    "stub_agent",
]

STUB_PAGE = 100


class AgentSpecError(EvalkitError):
    """An agent spec that does not name an importable agent."""


@attrs.frozen
class AgentReply:
    picks: tuple[str, ...] = ()
    text: str | None = None


class Agent(Protocol):
    @property
    def name(self) -> str: ...

    def __call__(self, prompt: str, tools: Toolbox) -> AgentReply: ...


@attrs.frozen
class _FunctionAgent:
    name: str
    fn: Callable[[str, Toolbox], AgentReply]

    def __call__(self, prompt: str, tools: Toolbox) -> AgentReply:
        return self.fn(prompt, tools)


def _coerce(value: object, who: str) -> AgentReply:
    if isinstance(value, AgentReply):
        return value
    if value is None:
        return AgentReply()
    if isinstance(value, str):
        return AgentReply(text=value)
    if isinstance(value, list | tuple):
        items = cast("Sequence[object]", value)
        return AgentReply(picks=tuple(str(x) for x in items))
    raise TypeError(f"agent {who} returned {type(value).__name__}; expected a list of row_keys or a string")


def _describe(fn: object) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{qual}"


def from_callable(fn: Callable[[str, Toolbox], object], name: str | None = None) -> Agent:
    """An agent from ``fn(prompt, tools)`` returning a list of row_keys, a string, or an :class:`AgentReply`."""
    who = name or f"plain:{_describe(fn)}"

    def call(prompt: str, tools: Toolbox) -> AgentReply:
        return _coerce(fn(prompt, tools), who)

    return _FunctionAgent(who, call)


SUBMIT_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Finish this session: the row_keys to buy at today's open (may be empty).",
        "parameters": {
            "type": "object",
            "properties": {"row_keys": {"type": "array", "items": {"type": "string"}}},
            "required": ["row_keys"],
        },
    },
}


def from_tool_loop(
    step: Callable[[list[dict[str, Any]], list[dict[str, Any]]], Mapping[str, Any]],
    *,
    max_turns: int = 16,
    system: str | None = None,
    name: str | None = None,
) -> Agent:
    """An agent from ``step(messages, tool_specs)`` returning an OpenAI-style assistant message.

    The loop runs each ``tool_calls`` entry against the toolbox and appends its result as a ``tool`` message;
    it ends when the model calls ``submit`` (its ``row_keys`` are the picks) or answers with plain content.
    """
    who = name or f"tool_loop:{_describe(step)}"

    def call(prompt: str, tools: Toolbox) -> AgentReply:
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        specs = [*tool_specs(), SUBMIT_SPEC]
        for _ in range(max_turns):
            reply = dict(step(list(messages), specs))
            messages.append({"role": "assistant", **{k: v for k, v in reply.items() if k != "role"}})
            calls: list[Mapping[str, Any]] = list(reply.get("tool_calls") or [])
            if not calls:
                return AgentReply(text=str(reply.get("content") or ""))
            for tc in calls:
                fn: Mapping[str, Any] = tc.get("function", {})
                tool_name = str(fn.get("name", ""))
                args, problem = _parse_arguments(fn.get("arguments"))
                if args is None:
                    result: dict[str, Any] = {"status": "error", "error": problem}
                elif tool_name == "submit":
                    keys = cast("list[object]", args.get("row_keys") or [])
                    return AgentReply(picks=tuple(str(k) for k in keys), text=str(reply.get("content") or "") or None)
                else:
                    result = tools.call(tool_name, args)
                messages.append(
                    {"role": "tool", "tool_call_id": str(tc.get("id", "")), "content": json.dumps(result, sort_keys=True)}
                )
        return AgentReply(text=f"tool loop ended after {max_turns} turns without submit")

    return _FunctionAgent(who, call)


def _parse_arguments(raw: object) -> tuple[dict[str, Any] | None, str]:
    """Tool-call arguments arrive as a JSON string (OpenAI) or an object; return (args, problem)."""
    if raw is None or raw == "":
        return {}, ""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return None, f"arguments are not JSON: {exc.msg}"
    if not isinstance(raw, dict):
        return None, "arguments must be a JSON object"
    return cast("dict[str, Any]", raw), ""


def _stub(prompt: str, tools: Toolbox) -> AgentReply:  # noqa: ARG001 - the stub ignores its prompt
    """Pick every row that became knowable at this bell; answer with one fixed sentence naming the session."""
    picks: list[str] = []
    offset = 0
    while True:
        page = tools.pit_list(limit=STUB_PAGE, offset=offset)
        rows: list[dict[str, Any]] = page.get("rows", [])
        fresh = [r["row_key"] for r in rows if r["entry_session"] == tools.session_date]
        picks.extend(fresh)
        if len(fresh) < len(rows) or len(rows) < STUB_PAGE:
            break
        offset += STUB_PAGE
    text = f"I am the evalkit stub agent and this answer was written at the session of {tools.session_date}."
    return AgentReply(picks=tuple(picks), text=text)


stub_agent: Agent = _FunctionAgent("stub", _stub)


def resolve_agent(spec: str) -> Agent:
    """``stub`` or ``module:function`` (a ``fn(prompt, tools)`` or a ready :class:`Agent`)."""
    if spec == "stub":
        return stub_agent
    if spec.startswith("model:"):
        from evalkit.pit._model_agent import from_model

        return from_model(spec.removeprefix("model:"))
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"agent: expected 'stub' or 'module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentSpecError(f"agent {spec!r}: cannot import module {module_name!r} ({exc})") from None
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AgentSpecError(f"agent {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if isinstance(target, _FunctionAgent):
        return target
    if not callable(target):
        raise AgentSpecError(f"agent {spec!r}: {attr!r} is not callable")
    return from_callable(target, name=f"plain:{spec}")  # pyright: ignore[reportUnknownArgumentType]
