"""Agents: the stub, the adapters (plain callables and OpenAI-style tool loops) and agent specs.

An agent is called once per session as ``agent(prompt, tools)`` and returns an :class:`AgentReply`
(picks are row_keys, text is free). Adapters turn user functions into agents.

A run never calls an agent in its own process: each agent remembers where it came from (its origin: the stub,
a callable, a ``module:function`` spec, a tool loop's step, a model id), and the run builds it afresh inside the
wall, one jailed process per cell (see :mod:`evalkit.pit._jail`). ``resolve_agent`` therefore does not import an
agent's module in the calling process; it only checks that the module can be found.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs

from evalkit.pit._gateway import HostModel
from evalkit.pit._tool_specs import tool_specs
from evalkit_core import ConfigError, EvalkitError

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
class AgentOrigin:
    """How to build an agent again inside the wall: ``kind`` is ``stub``, ``inspect`` (``spec`` is the solver's
    ``module:attribute``, see :mod:`evalkit.pit._inspect`), ``callable`` (``target`` is the
    function), ``spec`` (``spec`` is ``module:attribute``), ``tool_loop`` (``target`` is the step) or ``model``
    (``spec`` is the model id); ``options`` are the adapter's keyword arguments. ``host_models`` are models the
    run's gateway serves itself, outside the jail (never sent into it): Inspect's ``mockllm``."""

    kind: str
    target: object = None
    spec: str = ""
    options: tuple[tuple[str, Any], ...] = ()
    host_models: tuple[HostModel, ...] = ()


@attrs.frozen
class _FunctionAgent:
    name: str
    fn: Callable[[str, Toolbox], AgentReply]
    origin: AgentOrigin | None = None

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

    return _FunctionAgent(who, call, AgentOrigin("callable", target=fn))


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


def import_target(spec: str) -> object:
    """The object ``module:attribute`` names, imported in this process (what the jailed process does too)."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentSpecError(f"agent {spec!r}: cannot import module {module_name!r} ({exc})") from None
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AgentSpecError(
                f"agent {spec!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return target


def module_location(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where the top-level package of module ``name`` lives, found without running any of its code."""
    top = name.partition(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        return loaded.__spec__
    return importlib.machinery.PathFinder.find_spec(top)


def find_module(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where module ``name`` itself lives (``pkg.sub.mod`` too), found without running any of its code or its
    packages' (``importlib.util.find_spec`` imports the parent packages)."""
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        return loaded.__spec__
    spec = module_location(name)
    parts = name.split(".")
    for i in range(1, len(parts)):
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(spec.submodule_search_locations))
    return spec


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
        return _coerce(target(prompt, tools), who)

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
