"""Inspect AI inside the PIT harness: the four window tools as Inspect tools, and an Inspect solver as a PIT agent.

``pit_tools(toolbox)`` wraps the toolbox's four tools (the names, argument schemas and answers of
:func:`evalkit.pit.tool_specs`; an answer is the tool's JSON result, never truncated). Each call goes to
``toolbox.call``, so the harness's toolbox answers and records it in the trajectory.

``from_inspect_solver(solver, model=ID)`` is an agent that runs an Inspect solver once per session, inside the agent
wall like every agent: the jailed process imports the solver's module, builds a ``TaskState`` whose input is the
session prompt and whose tools are the four window tools plus ``submit``, and runs the solver with a ``generate``
that calls the model ``evalkit/ID``. That model is an Inspect ``ModelAPI`` whose only way out is
``tools.complete``: a request over the agent's pipe that the harness answers through its model gateway (outside
the wall) and records in the trajectory and the receipt. ``ID`` is an evalkit model registry id.

The picks are the ``row_keys`` of the solver's ``submit`` call; a solver that never submits may instead answer
with a JSON list of row_keys as its whole final text; any other text is the reply's text (the probe's questions
are answered that way).

The solver runs on an event loop of its own whose wake-up channel is a pipe (the wall allows asyncio's AF_UNIX
socket pair and threads too; a pipe is simply the lighter channel, and one loop serves the process's sessions).

This module imports Inspect AI (the optional extra ``evalkit-harness[inspect]``); evalkit imports it only when an Inspect
agent or tool is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect as pyinspect
import json
import os
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    Model,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    execute_tools,
    get_model,
    modelapi,
)
from inspect_ai.model import ModelName as _ModelName
from inspect_ai.model._model import init_active_model  # pyright: ignore[reportPrivateImportUsage]
from inspect_ai.solver import Generate, Solver, TaskState
from inspect_ai.tool import Tool, ToolCall, ToolChoice, ToolDef, ToolFunction, ToolInfo, ToolParams

from evalkit.pit._agent_base import (  # pyright: ignore[reportPrivateUsage]
    SUBMIT_SPEC,
    Agent,
    AgentOrigin,
    AgentReply,
    AgentSpecError,
    _FunctionAgent,  # pyright: ignore[reportPrivateUsage]
    import_target,
)
from evalkit.pit._gateway import HostModel
from evalkit.pit._inspect_mock import KIND as MOCK_KIND
from evalkit.pit._inspect_mock import is_mock
from evalkit.pit._tool_specs import tool_specs
from evalkit_core.models import Completion, Message, Request, ToolSpec
from evalkit_core.models import ToolCall as EvalkitToolCall

__all__ = ["PROVIDER", "build_inspect_agent", "from_inspect_solver", "pit_tools", "solver_spec"]

PROVIDER = "evalkit"  # Inspect model names "evalkit/<registry id>" reach the harness's gateway
_DEFAULT_MAX_TOKENS = 1024


class SessionTools(Protocol):
    """What the adapter needs of a session's tools: the harness's :class:`Toolbox`, or its proxy in the jail."""

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]: ...

    def complete(self, model_id: str, request: Request) -> Completion: ...


_SESSION: contextvars.ContextVar[SessionTools | None] = contextvars.ContextVar("evalkit_pit_session", default=None)


# --- the tools ------------------------------------------------------------------------------------------------


def _answer(result: Mapping[str, Any]) -> str:
    return json.dumps(result, sort_keys=True)


def pit_tools(toolbox: SessionTools) -> list[Tool]:
    """The four PIT tools as Inspect tools: ``pit_list``, ``pit_search``, ``pit_read``, ``pit_coverage``, with the
    harness's argument schemas; each call is answered (and recorded) by ``toolbox.call`` and returns its JSON."""

    async def pit_list(limit: int = 20, offset: int = 0, form: str | None = None) -> str:
        return _answer(toolbox.call("pit_list", {"limit": limit, "offset": offset, "form": form}))

    async def pit_search(query: str, limit: int = 20) -> str:
        return _answer(toolbox.call("pit_search", {"query": query, "limit": limit}))

    async def pit_read(row_key: str) -> str:
        return _answer(toolbox.call("pit_read", {"row_key": row_key}))

    async def pit_coverage() -> str:
        return _answer(toolbox.call("pit_coverage", {}))

    functions: dict[str, Callable[..., Any]] = {
        "pit_list": pit_list,
        "pit_search": pit_search,
        "pit_read": pit_read,
        "pit_coverage": pit_coverage,
    }
    return [_tool(spec, functions[str(spec["function"]["name"])]) for spec in tool_specs()]


# Inspect asks for a description of every argument; the harness's specs describe only some of them
_ARGUMENTS = {
    "limit": "How many rows at most (1 to 200).",
    "offset": "How many of the newest rows to skip.",
    "form": "Only this form type, e.g. 8-K.",
    "query": "Text to look for in issuer and title.",
    "row_key": "The row_key of the filing.",
    "row_keys": "The row_keys of the filings to buy.",
}


def _tool(spec: Mapping[str, Any], fn: Callable[..., Any]) -> Tool:
    function = cast("dict[str, Any]", spec["function"])
    schema = json.loads(json.dumps(function["parameters"]))
    for arg, prop in cast("dict[str, dict[str, Any]]", schema.get("properties") or {}).items():
        prop.setdefault("description", _ARGUMENTS.get(arg, arg))
    params = ToolParams.model_validate(schema)
    # max_output 0: Inspect would cut a result at 16 KB by default; a page of rows is longer, and the agent
    # must see the harness's answer whole
    return ToolDef(
        fn, name=str(function["name"]), description=str(function["description"]), parameters=params, max_output=0
    ).as_tool()


def _submit_tool(picked: list[list[str]]) -> Tool:
    async def submit(row_keys: list[str]) -> str:
        picked.append([str(k) for k in row_keys])
        return f"submitted {len(row_keys)} row_keys"

    return _tool(SUBMIT_SPEC, submit)


# --- the model: Inspect's ModelAPI over the harness's gateway ------------------------------------------------------


@modelapi(name=PROVIDER)
def _gateway_api() -> type[ModelAPI]:
    return GatewayModelAPI


class GatewayModelAPI(ModelAPI):
    """``evalkit/<registry id>``: each generate is one ``tools.complete`` of the current session (the harness's
    gateway, recorded); there is no other way out."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),
        **model_args: Any,  # noqa: ARG002 - Inspect passes model_args; the gateway takes none
    ) -> None:
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, api_key_vars=[], config=config)

    def max_connections(self) -> int:
        return 1

    async def generate(
        self,
        input: list[ChatMessage],  # noqa: A002 - Inspect's name
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        session = _SESSION.get()
        if session is None:
            raise RuntimeError(
                f"the model {PROVIDER}/{self.model_name} answers only inside a PIT session (from_inspect_solver)"
            )
        completion = session.complete(self.model_name, to_request(input, tools, tool_choice, config))
        return to_output(completion)


def to_request(
    messages: Sequence[ChatMessage], tools: Sequence[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
) -> Request:
    """Inspect's chat input as an evalkit :class:`Request` (system messages joined into ``system``)."""
    system: list[str] = []
    out: list[Message] = []
    for m in messages:
        if isinstance(m, ChatMessageSystem):
            system.append(m.text)
        elif isinstance(m, ChatMessageUser):
            out.append(Message("user", m.text))
        elif isinstance(m, ChatMessageAssistant):
            calls = tuple(EvalkitToolCall.of(tc.id, tc.function, dict(tc.arguments)) for tc in m.tool_calls or ())
            out.append(Message("assistant", m.text, calls))
        else:
            text = m.text if not m.error else f"error: {m.error.message}"
            out.append(Message("tool", text, tool_call_id=m.tool_call_id or m.function or "call"))
    specs = tuple(
        ToolSpec(name=t.name, description=t.description, parameters=t.parameters.model_dump(exclude_none=True))
        for t in tools
    )
    choice: str | None
    if isinstance(tool_choice, ToolFunction):
        choice = tool_choice.name
    else:
        choice = tool_choice if specs else None
    return Request(
        messages=tuple(out) or (Message("user", ""),),
        system="\n\n".join(system) or None,
        max_tokens=config.max_tokens or _DEFAULT_MAX_TOKENS,
        temperature=config.temperature,
        stop=tuple(config.stop_seqs or ()),
        tools=specs,
        tool_choice=choice,
    )


_STOP = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "length": "max_tokens",
    "max_tokens": "max_tokens",
    "tool_use": "tool_calls",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
}


def to_output(completion: Completion) -> ModelOutput:
    """An evalkit :class:`Completion` as Inspect's ``ModelOutput``."""
    calls = [
        ToolCall(
            id=tc.id,
            function=tc.name,
            arguments=dict(tc.arguments or {}),
            parse_error=None if tc.arguments is not None else f"arguments are not a JSON object: {tc.raw_arguments}",
        )
        for tc in completion.tool_calls
    ]
    message = ChatMessageAssistant(
        content=completion.text, tool_calls=calls or None, model=completion.reported_model, source="generate"
    )
    stop = "tool_calls" if calls else _STOP.get(str(completion.stop_reason), "unknown")
    usage = completion.usage
    return ModelOutput(
        model=completion.reported_model,
        choices=[ChatCompletionChoice(message=message, stop_reason=cast("Any", stop))],
        usage=ModelUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_input_tokens + usage.output_tokens,
            input_tokens_cache_read=usage.cache_read_tokens or None,
            input_tokens_cache_write=usage.cache_write_tokens or None,
        ),
    )


# --- the event loop the wall allows -----------------------------------------------------------------------------


class PipeEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop with a pipe for its wake-up channel: the standard loop makes a socket pair, which
    the agent's wall refuses (and records as a network attempt)."""

    _wake_r: int
    _wake_w: int

    def _make_self_pipe(self) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._internal_fds += 1  # pyright: ignore[reportAttributeAccessIssue]
        self._add_reader(self._wake_r, self._read_from_self)  # pyright: ignore[reportAttributeAccessIssue]

    def _close_self_pipe(self) -> None:
        self._remove_reader(self._wake_r)  # pyright: ignore[reportAttributeAccessIssue]
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._internal_fds -= 1  # pyright: ignore[reportAttributeAccessIssue]

    def _read_from_self(self) -> None:
        while True:
            try:
                if not os.read(self._wake_r, 4096):
                    return
            except InterruptedError:
                continue
            except BlockingIOError:
                return

    def _write_to_self(self) -> None:
        with contextlib.suppress(OSError):  # full or closed: the loop is awake or gone
            os.write(self._wake_w, b"\0")


# --- the agent ----------------------------------------------------------------------------------------------------


def _importable_name(obj: object) -> str | None:
    """``module:attribute`` of an object kept at the top level of an imported module (not ``__main__``)."""
    import sys

    for name, module in list(sys.modules.items()):
        if name == "__main__" or getattr(module, "__spec__", None) is None:
            continue
        for key, value in list(vars(module).items()):
            if value is obj and not key.startswith("_"):
                return f"{name}:{key}"
    return None


def solver_spec(solver: object) -> str:
    """``module:attribute`` for a solver given by name or as an object importable by name (a ``@solver``
    function, or a solver kept at the top level of a module); AgentSpecError otherwise."""
    if isinstance(solver, str):
        module, sep, attr = solver.partition(":")
        if not sep or not module or not attr:
            raise AgentSpecError(f"inspect solver {solver!r}: expected 'module:attribute'")
        return solver
    found = _importable_name(solver)
    if found is not None:
        return found
    raise AgentSpecError(
        "inspect solver: a run builds the solver inside the agent's jail, so it must be importable by name: "
        "define it (or the @solver function that makes it) at the top level of a module of its own and pass "
        "it, or 'module:attribute'"
    )


def from_inspect_solver(
    solver: object,
    *,
    model: str,
    solver_args: Mapping[str, Any] | None = None,
    model_args: Mapping[str, Any] | None = None,
    max_turns: int = 16,
    name: str | None = None,
) -> Agent:
    """A PIT agent that runs the Inspect ``solver`` once per session with the four tools and ``submit``, its model
    calls going to ``model`` through the harness's gateway.

    ``solver`` is ``"module:attribute"`` or an object importable by name: a ``Solver`` or a ``@solver`` function
    (called with ``solver_args``, plain data, inside the jail). ``model`` is an evalkit registry model id, or
    Inspect's ``mockllm/model``, which the gateway serves itself on the host side; ``model_args`` are then the
    mock's ``custom_outputs``: a list of ``ModelOutput``, or a callable ``(input, tools, tool_choice, config) ->
    ModelOutput`` importable by name (or ``"module:attribute"``), which runs in the gateway process, outside the
    wall (see :mod:`evalkit.pit._inspect_mock`)."""
    if not isinstance(model, str) or not model:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise AgentSpecError("inspect solver: model must be an evalkit registry model id or mockllm/model")
    hosted = _host_models(model, model_args)
    spec = solver_spec(solver)
    args = dict(solver_args or {})
    try:
        json.dumps(args, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise AgentSpecError(f"inspect solver {spec!r}: solver_args must be plain data ({exc})") from None
    who = name or f"inspect:{spec}@{model}"
    options = (("model", model), ("solver_args", args), ("max_turns", max_turns), ("name", who))
    origin = AgentOrigin("inspect", spec=spec, options=options, host_models=hosted)
    state: dict[str, Any] = {}

    def call(prompt: str, tools: Any) -> AgentReply:  # outside a run (called directly): built on first use
        if "agent" not in state:
            state["agent"] = build_inspect_agent(spec, dict(options))
        agent = cast("Agent", state["agent"])
        return agent(prompt, tools)

    return _FunctionAgent(who, call, origin)


def _host_models(model: str, model_args: Mapping[str, Any] | None) -> tuple[HostModel, ...]:
    """Inspect's ``mockllm/...`` as a model the gateway serves (its custom outputs as plain data or a name)."""
    args = dict(model_args or {})
    if not is_mock(model):
        if args:
            raise AgentSpecError(
                f"inspect solver: model_args are for Inspect's mockllm/model (served by the gateway); {model!r} is "
                "a registry model, whose settings are its registry entry"
            )
        return ()
    unknown = sorted(set(args) - {"custom_outputs"})
    if unknown:
        raise AgentSpecError(f"inspect solver: {model}: unknown model_args {', '.join(unknown)} (takes custom_outputs)")
    outputs: object = args.get("custom_outputs")
    if outputs is None:
        return (HostModel(model, MOCK_KIND),)
    where = f"inspect solver: {model}: custom_outputs"
    if isinstance(outputs, str) or (callable(outputs) and not isinstance(outputs, ModelOutput)):
        name = outputs if isinstance(outputs, str) else _importable_name(outputs)
        module, sep, attr = (name or "").partition(":")
        if name is None or not sep or not module or not attr:
            raise AgentSpecError(
                f"{where}: the gateway process imports a callable by name: define it at the top level of a module "
                "of its own and pass it, or 'module:attribute'"
            )
        return (HostModel(model, MOCK_KIND, {"outputs_from": name, "paths": _import_root(module, where)}),)
    if isinstance(outputs, Iterator | Generator) or not isinstance(outputs, Iterable):
        raise AgentSpecError(
            f"{where}: expected a list of ModelOutput or a callable importable by name (an iterator or generator "
            "cannot be sent to the gateway process)"
        )
    items = list(cast("Iterable[object]", outputs))
    for i, item in enumerate(items):
        if not isinstance(item, ModelOutput):
            raise AgentSpecError(f"{where}[{i}] is {type(item).__name__}; expected an Inspect ModelOutput")
    data = [
        o.model_dump(mode="json", exclude_none=True, exclude={"choices": {"__all__": {"message": {"id"}}}})
        for o in cast("list[ModelOutput]", items)
    ]
    return (HostModel(model, MOCK_KIND, {"outputs": data}),)


def _import_root(module: str, where: str) -> list[str]:
    """The ``sys.path`` entry module ``module`` is found under (the gateway process is started afresh)."""
    from evalkit.pit._agent_base import find_module

    try:
        found = find_module(module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.has_location or not found.origin:
        raise AgentSpecError(f"{where}: cannot find module {module!r} on the Python path")
    levels = len(module.split(".")) + (1 if found.submodule_search_locations else 0)
    return [str(Path(found.origin).resolve().parents[levels - 1])]


def _make_solver(spec: str, args: Mapping[str, Any]) -> Solver:
    target = import_target(spec)
    if not callable(target):
        raise AgentSpecError(f"inspect solver {spec!r} is not callable")
    if _is_solver(target):
        if args:
            raise AgentSpecError(f"inspect solver {spec!r} is a solver already: it takes no solver_args")
        return cast("Solver", target)
    made = target(**args)
    if not _is_solver(made):
        raise AgentSpecError(f"inspect solver {spec!r}: calling it did not give a solver (an async callable)")
    return cast("Solver", made)


def _is_solver(obj: object) -> bool:
    """A solver is called as ``await solver(state, generate)``; a ``@solver`` function is called to make one."""
    return callable(obj) and (
        pyinspect.iscoroutinefunction(obj) or pyinspect.iscoroutinefunction(type(obj).__call__)
    )


def build_inspect_agent(spec: str, options: Mapping[str, Any]) -> Agent:
    """The agent itself: called inside the wall by the agent process (see ``_agent_child``)."""
    model_id = str(options["model"])
    max_turns = int(options.get("max_turns") or 16)
    solver = _make_solver(spec, cast("Mapping[str, Any]", options.get("solver_args") or {}))
    model: Model = get_model(f"{PROVIDER}/{model_id}")
    loop = PipeEventLoop()  # one loop for the process: Inspect binds its semaphores to the loop they first ran on

    def call(prompt: str, tools: SessionTools) -> AgentReply:
        picked: list[list[str]] = []
        submit = _submit_tool(picked)

        async def generate(
            state: TaskState, tool_calls: str = "loop", **kwargs: Any
        ) -> TaskState:
            config = GenerateConfig(**kwargs)
            for _ in range(max_turns):
                output = await model.generate(state.messages, state.tools, state.tool_choice, config)
                state.output = output
                state.messages.append(output.message)
                if not output.message.tool_calls or tool_calls == "none":
                    return state
                done = await execute_tools(state.messages, state.tools)
                state.messages.extend(done.messages)
                if picked or tool_calls == "single":
                    return state
            return state

        async def session() -> TaskState:
            init_active_model(model, GenerateConfig())
            state = TaskState(
                model=_ModelName(model),
                sample_id=getattr(tools, "session_date", "session"),
                epoch=1,
                input=prompt,
                messages=[ChatMessageUser(content=prompt)],
            )
            state.tools = [*pit_tools(tools), submit]
            return await solver(state, cast("Generate", generate))

        token = _SESSION.set(tools)
        try:
            final = loop.run_until_complete(session())
        finally:
            _SESSION.reset(token)
        text = final.output.completion if final.output.choices else ""
        if picked:
            return AgentReply(picks=tuple(picked[-1]), text=text or None)
        return _reply_from_text(text)

    return _FunctionAgent(str(options.get("name") or f"inspect:{spec}@{model_id}"), call)


def _reply_from_text(text: str) -> AgentReply:
    """A final answer that is a JSON list of row_keys is the picks; any other text is only text."""
    try:
        value: object = json.loads(text)
    except ValueError:
        return AgentReply(text=text)
    if isinstance(value, list) and all(isinstance(v, str) for v in cast("list[object]", value)):
        return AgentReply(picks=tuple(cast("list[str]", value)), text=text)
    return AgentReply(text=text)
