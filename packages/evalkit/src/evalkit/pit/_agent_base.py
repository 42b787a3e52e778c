"""What every agent shares: the reply, the protocol, where an agent came from (its origin), the submit tool's
spec, and finding an agent's module without running it.

Kept apart from :mod:`evalkit.pit._agents` (the adapters and ``resolve_agent``) so that the model agent and the
Inspect adapter, which ``resolve_agent`` builds, import only this module: no import cycle between files.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs

from evalkit.pit._gateway import HostModel
from evalkit_core import EvalkitError

if TYPE_CHECKING:
    from evalkit.pit._toolbox import Toolbox

__all__ = [
    "SUBMIT_SPEC",
    "Agent",
    "AgentOrigin",
    "AgentReply",
    "AgentSpecError",
    "coerce_reply",
    "describe_callable",
    "find_module",
    "import_target",
    "module_location",
]


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


def coerce_reply(value: object, who: str) -> AgentReply:
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


def describe_callable(fn: object) -> str:
    module = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}:{qual}"


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
