"""``from_model(model_id)``: a ready agent that drives a model through the PIT gateway with the tool loop.

Each session the model sees the session prompt and the four PIT tools plus ``submit``; the loop runs its tool
calls against the toolbox and ends on ``submit`` (its row_keys are the picks) or on plain text. Every model call
goes through ``tools.complete``: inside the wall that is a request over the agent's pipe, which the harness
answers through its model gateway (outside the wall, holding the keys) and records.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from evalkit.pit._agent_base import (  # pyright: ignore[reportPrivateUsage]
    SUBMIT_SPEC,
    Agent,
    AgentOrigin,
    AgentReply,
    _FunctionAgent,  # pyright: ignore[reportPrivateUsage]
)
from evalkit.pit._tool_specs import tool_specs
from evalkit_core.models import Message, Request, ToolSpec

if TYPE_CHECKING:
    from evalkit.pit._toolbox import Toolbox

__all__ = ["SYSTEM_PROMPT", "from_model"]

SYSTEM_PROMPT = (
    "You are a trading agent evaluated point in time. Use the tools to look at SEC filings knowable at this "
    "session's opening bell, then call submit with the row_keys of filings whose issuers you would buy at today's "
    "open (an empty list is fine). When asked a question instead, answer in one sentence."
)


def _specs() -> tuple[ToolSpec, ...]:
    out: list[ToolSpec] = []
    for spec in [*tool_specs(), SUBMIT_SPEC]:
        fn = cast("dict[str, Any]", spec["function"])
        out.append(ToolSpec(name=str(fn["name"]), description=str(fn["description"]), parameters=fn["parameters"]))
    return tuple(out)


def from_model(model_id: str, *, max_turns: int = 12, max_tokens: int = 1024, temperature: float | None = 0.0) -> Agent:
    """An agent backed by ``model_id`` (a registry id) that reaches its provider only through the gateway."""
    specs = _specs()

    def call(prompt: str, tools: Toolbox) -> AgentReply:
        messages: list[Message] = [Message(role="user", text=prompt)]
        for _ in range(max_turns):
            request = Request(
                messages=tuple(messages), system=SYSTEM_PROMPT, max_tokens=max_tokens, temperature=temperature, tools=specs
            )
            completion = tools.complete(model_id, request)
            messages.append(completion.message)
            if not completion.tool_calls:
                return AgentReply(text=completion.text)
            for tc in completion.tool_calls:
                args: dict[str, Any] = dict(tc.arguments or {})
                if tc.name == "submit":
                    keys = cast("list[object]", args.get("row_keys") or [])
                    return AgentReply(picks=tuple(str(k) for k in keys), text=completion.text or None)
                result = tools.call(tc.name, args)
                messages.append(Message(role="tool", text=json.dumps(result, sort_keys=True), tool_call_id=tc.id))
        return AgentReply(text=f"model agent stopped after {max_turns} turns without submit")

    options = (("max_turns", max_turns), ("max_tokens", max_tokens), ("temperature", temperature))
    return _FunctionAgent(f"model:{model_id}", call, AgentOrigin("model", spec=model_id, options=options))
