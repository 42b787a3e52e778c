"""Inspect's ``mockllm/model`` served by the PIT model gateway, on the host side.

An Inspect solver run as a PIT agent (:func:`evalkit.pit._inspect.from_inspect_solver`) whose model is
``mockllm/...`` calls it exactly as it calls a registry model: over the agent's pipe to the harness, which records
the call and hands it to the gateway process. There, instead of the model registry, Inspect's own ``MockLLM``
answers with the custom outputs the agent was given (a list of ``ModelOutput``, sent to the gateway as JSON, or a
callable ``(input, tools, tool_choice, config) -> ModelOutput`` the gateway imports by name), or with Inspect's
default output when there are none. Nothing of the mock crosses into the agent's jail.

The answer becomes a :class:`evalkit_core.models.Completion` like any other: ``simulated`` true, cost zero, the
reported model the output's ``model``; ``registry_digest`` binds what served it (the outputs' digest, or the
callable's name and the sha256 of its module's source). An output without usage is given one the way evalkit's
simulated models count, about four characters a token (Inspect's mockllm would count with tiktoken, which
downloads its encoding). The calls are recorded in the trajectory and the receipt by the harness; they are not
written to the model store (no provider was called, nothing was spent).

Imported by the gateway process only when a run serves such a model.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    get_model,
)
from inspect_ai.model._providers.mockllm import MockLLM  # pyright: ignore[reportPrivateImportUsage]
from inspect_ai.tool import ToolCall, ToolChoice, ToolFunction, ToolInfo, ToolParams

from evalkit_core import digest, file_digest
from evalkit_core.models import Completion, Request, Usage, request_to_json
from evalkit_core.models import ToolCall as EvalkitToolCall

__all__ = ["KIND", "MOCK_PROVIDER", "MockModel", "is_mock"]

KIND = "inspect-mockllm"
MOCK_PROVIDER = "mockllm"
_CHARS_PER_TOKEN = 4  # as evalkit's simulated models count (evalkit_core.models._sim)

MockFn = Callable[[list[ChatMessage], list[ToolInfo], ToolChoice, GenerateConfig], Any]


def is_mock(model_id: str) -> bool:
    """Whether ``model_id`` names Inspect's mock model (``mockllm/...``) rather than a registry model."""
    return model_id.partition("/")[0] == MOCK_PROVIDER and bool(model_id.partition("/")[2])


class MockModel:
    """One ``mockllm/...`` model in the gateway process: Inspect's ``MockLLM`` over the custom outputs in
    ``args`` (``outputs``: ModelOutput JSON objects; or ``outputs_from``: ``module:attribute`` of a callable,
    imported with ``paths`` first on ``sys.path``; neither: Inspect's default output)."""

    def __init__(self, model_id: str, args: Mapping[str, Any]) -> None:
        self.model_id = model_id
        outputs = args.get("outputs")
        source = args.get("outputs_from")
        script: Iterator[ModelOutput] | MockFn | None = None
        if outputs is not None:
            items = [ModelOutput.model_validate(o) for o in cast("Sequence[Any]", outputs)]
            script = iter(items)
            self.served: dict[str, Any] = {"kind": KIND, "outputs": digest(list(cast("Sequence[Any]", outputs)))}
        elif source is not None:
            fn, module_sha = _import_callable(str(source), [str(p) for p in cast("Sequence[Any]", args.get("paths") or [])])
            script = fn
            self.served = {"kind": KIND, "outputs_from": str(source), "sha256": module_sha}
        else:
            self.served = {"kind": KIND, "outputs": "inspect default"}
        self.registry_digest = digest(self.served)
        self._script = script
        # always our own callable: an output without usage gets one here, before MockLLM would count it with tiktoken
        self._api: ModelAPI = get_model(model_id, memoize=False, custom_outputs=self._next).api
        self._calls = 0

    def _next(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig  # noqa: A002
    ) -> ModelOutput:
        script = self._script
        if script is None:
            output: object = ModelOutput.from_content(model=MOCK_PROVIDER, content=MockLLM.default_output)
        elif isinstance(script, Iterator):
            try:
                output = next(cast("Iterator[ModelOutput]", script))
            except StopIteration:
                raise ValueError("custom_outputs ran out of values") from None
        else:
            output = script(input, tools, tool_choice, config)
        if not isinstance(output, ModelOutput):
            raise TypeError(f"custom output is {type(output).__name__}, not an Inspect ModelOutput")
        if output.usage is None:
            output = output.model_copy(update={"usage": _counted(input, output.completion)})
        return output

    async def complete(self, request: Request) -> Completion:
        """One call: the request as Inspect's input, MockLLM's answer as a :class:`Completion`."""
        messages, tools, choice, config = to_inspect(request)
        answer = await self._api.generate(messages, tools, choice, config)
        output = answer[0] if isinstance(answer, tuple) else answer
        if isinstance(output, Exception):  # MockLLM's own failure, handed back rather than raised
            raise ValueError(str(output)) from output  # noqa: TRY004 - a failed call, not a wrong argument
        self._calls += 1
        return self._completion(request, messages, output)

    def _completion(self, request: Request, messages: list[ChatMessage], output: ModelOutput) -> Completion:
        message = output.message if output.choices else ChatMessageAssistant(content="")
        calls = tuple(_tool_call(tc) for tc in message.tool_calls or ())
        usage = output.usage or _counted(messages, message.text)  # set by _next; kept for a type checker
        response = {
            "model": output.model,
            "text": message.text,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in calls],
            "stop_reason": output.stop_reason if output.choices else None,
            "usage": [usage.input_tokens, usage.output_tokens],
        }
        request_digest = digest({"model_id": self.model_id, "request": request_to_json(request)})
        return Completion(
            call_id=f"{KIND}-{self._calls}-{request_digest[7:23]}",
            model_id=self.model_id,
            reported_model=output.model or self.model_id,
            text=message.text,
            tool_calls=calls,
            stop_reason="tool_calls" if calls else str(response["stop_reason"] or "stop"),
            usage=Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.input_tokens_cache_read or 0,
                cache_write_tokens=usage.input_tokens_cache_write or 0,
            ),
            cost=Decimal(0),
            simulated=True,
            attempts=1,
            request_digest=request_digest,
            response_digest=digest(response),
            registry_digest=self.registry_digest,
        )


def _tool_call(tc: ToolCall) -> EvalkitToolCall:
    return EvalkitToolCall.of(tc.id, tc.function, cast("dict[str, Any]", json.loads(json.dumps(tc.arguments))))


def _counted(messages: Sequence[ChatMessage], text: str) -> ModelUsage:
    chars = sum(len(m.text) for m in messages)
    return ModelUsage(
        input_tokens=-(-chars // _CHARS_PER_TOKEN),
        output_tokens=-(-len(text) // _CHARS_PER_TOKEN),
        total_tokens=-(-chars // _CHARS_PER_TOKEN) + -(-len(text) // _CHARS_PER_TOKEN),
    )


def to_inspect(request: Request) -> tuple[list[ChatMessage], list[ToolInfo], ToolChoice, GenerateConfig]:
    """An evalkit :class:`Request` as Inspect's generate arguments (the inverse of ``_inspect.to_request``)."""
    messages: list[ChatMessage] = []
    if request.system:
        messages.append(ChatMessageSystem(content=request.system))
    for m in request.messages:
        if m.role == "user":
            messages.append(ChatMessageUser(content=m.text))
        elif m.role == "assistant":
            calls = [
                ToolCall(id=tc.id, function=tc.name, arguments=dict(tc.arguments or {})) for tc in m.tool_calls
            ]
            messages.append(ChatMessageAssistant(content=m.text, tool_calls=calls or None))
        else:
            messages.append(ChatMessageTool(content=m.text, tool_call_id=m.tool_call_id))
    tools = [
        ToolInfo(name=t.name, description=t.description, parameters=ToolParams.model_validate(dict(t.parameters)))
        for t in request.tools
    ]
    choice: ToolChoice
    if request.tool_choice in (None, "auto"):
        choice = "auto"
    elif request.tool_choice in ("none", "any"):
        choice = cast("ToolChoice", request.tool_choice)
    else:
        choice = ToolFunction(name=str(request.tool_choice))
    config = GenerateConfig(
        max_tokens=request.max_tokens, temperature=request.temperature, stop_seqs=list(request.stop) or None
    )
    return messages, tools, choice, config


def _import_callable(spec: str, paths: Sequence[str]) -> tuple[MockFn, str | None]:
    """The callable ``module:attribute`` names (``paths`` put first on ``sys.path``), and its module's sha256."""
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)
    module_name, _, attr = spec.partition(":")
    target: Any = importlib.import_module(module_name)
    source = getattr(target, "__file__", None)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"custom_outputs {spec!r} is not callable")
    return cast("MockFn", target), file_digest(Path(source)) if source else None
