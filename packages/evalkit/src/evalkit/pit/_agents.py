"""Agents: the stub, the adapters (plain callables and OpenAI-style tool loops) and agent specs.

An agent is called once per session as ``agent(prompt, tools)`` and returns an :class:`AgentReply`
(picks are row_keys, text is free). Adapters turn user functions into agents.

A run never calls an agent in its own process: each agent remembers where it came from (its origin: the stub,
a callable, a ``module:function`` spec, a tool loop's step, a model id), and the run builds it afresh inside the
wall, one jailed process per cell (see :mod:`evalkit.pit._jail`). ``resolve_agent`` therefore does not import an
agent's module in the calling process; it only checks that the module can be found.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from evalkit.pit._agent_base import (  # pyright: ignore[reportPrivateUsage]
    SUBMIT_SPEC,
    Agent,
    AgentOrigin,
    AgentReply,
    AgentSpecError,
    _FunctionAgent,  # pyright: ignore[reportPrivateUsage]
    coerce_reply,
    describe_callable,
    find_module,
    import_target,
    module_location,
)
from evalkit.pit._gateway import HostModel
from evalkit.pit._tool_specs import tool_specs
from evalkit_core import ConfigError

if TYPE_CHECKING:
    from evalkit.pit._toolbox import Toolbox

__all__ = [
    "Agent",
    "AgentOrigin",
    "AgentReply",
    "AgentSpecError",
    "find_module",
    "from_callable",
    "from_tool_loop",
    "host_models",
    "resolve_agent",
    "stub_agent",
]

STUB_PAGE = 100


def from_callable(fn: Callable[[str, Toolbox], object], name: str | None = None) -> Agent:
    """An agent from ``fn(prompt, tools)`` returning a list of row_keys, a string, or an :class:`AgentReply`."""
    who = name or f"plain:{describe_callable(fn)}"

    def call(prompt: str, tools: Toolbox) -> AgentReply:
        return coerce_reply(fn(prompt, tools), who)

    return _FunctionAgent(who, call, AgentOrigin("callable", target=fn))


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
    who = name or f"tool_loop:{describe_callable(step)}"

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

    origin = AgentOrigin("tool_loop", target=step, options=(("max_turns", max_turns), ("system", system)))
    return _FunctionAgent(who, call, origin)


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


stub_agent: Agent = _FunctionAgent("stub", _stub, AgentOrigin("stub"))


def host_models(agent: object) -> tuple[HostModel, ...]:
    """The models ``agent``'s run has the gateway serve itself (none for most agents)."""
    origin = getattr(agent, "origin", None)
    return origin.host_models if isinstance(origin, AgentOrigin) else ()


def resolve_agent(spec: str) -> Agent:
    """``stub``, ``model:<id>`` or ``module:function`` (a ``fn(prompt, tools)`` or a ready :class:`Agent`).

    A ``module:function`` agent is imported only inside the wall when a run starts (its attribute is checked
    then); here only its module is looked for, without running it."""
    if spec == "stub":
        return stub_agent
    if spec.startswith("model:"):
        from evalkit.pit._model_agent import from_model

        return from_model(spec.removeprefix("model:"))
    if spec.startswith("inspect:"):
        return _inspect_agent(spec)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"agent: expected 'stub', 'model:ID', 'inspect:MODULE:SOLVER@MODEL' or 'module:function', got {spec!r}"
        )
    if module_location(module_name) is None:
        raise AgentSpecError(
            f"agent {spec!r}: cannot import module {module_name!r} (not found on the Python path)"
        )
    who = f"plain:{spec}"

    def call(prompt: str, tools: Toolbox) -> AgentReply:  # called directly, outside a run: import it here
        target = import_target(spec)
        if isinstance(target, _FunctionAgent):
            return target(prompt, tools)
        if not callable(target):
            raise AgentSpecError(f"agent {spec!r}: {attr!r} is not callable")
        return coerce_reply(target(prompt, tools), who)

    return _FunctionAgent(who, call, AgentOrigin("spec", spec=spec))


INSPECT_EXTRA = "the Inspect AI integration needs the optional extra evalkit-harness[inspect] (pip install 'evalkit-harness[inspect]')"


def inspect_available() -> bool:
    """Whether Inspect AI (the optional extra ``evalkit-harness[inspect]``) is installed, found without importing it."""
    return module_location("inspect_ai") is not None


def _inspect_agent(spec: str) -> Agent:
    """``inspect:MODULE:SOLVER@MODEL``: an Inspect solver run as a PIT agent, its model calls through the gateway."""
    body, at, model = spec.removeprefix("inspect:").rpartition("@")
    module_name, sep, attr = body.partition(":")
    if not at or not model or not sep or not module_name or not attr:
        raise ConfigError(f"agent: expected 'inspect:MODULE:SOLVER@MODEL' (MODEL a registry id), got {spec!r}")
    if not inspect_available():
        raise AgentSpecError(f"agent {spec!r}: {INSPECT_EXTRA}")
    if module_location(module_name) is None:
        raise AgentSpecError(f"agent {spec!r}: cannot import module {module_name!r} (not found on the Python path)")
    from evalkit.pit._inspect import from_inspect_solver

    return from_inspect_solver(body, model=model)
