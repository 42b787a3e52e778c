"""Provider-neutral values: what a caller asks (``Request``) and what comes back (``Completion``).

``request_to_json`` / ``request_from_json`` and ``completion_to_json`` / ``completion_from_json`` give a plain
JSON form of both, so the PIT model gateway (a later issue) can carry them over its AF_UNIX socket unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, TypeAlias, cast

import attrs

from evalkit_core._errors import ConfigError

__all__ = [
    "Completion",
    "JsonValue",
    "Message",
    "Request",
    "Role",
    "SimContext",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "completion_from_json",
    "completion_to_json",
    "request_from_json",
    "request_to_json",
]

JsonValue: TypeAlias = "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
Role = Literal["user", "assistant", "tool"]
_ROLES = ("user", "assistant", "tool")


@attrs.frozen
class ToolCall:
    """A call the model asked for. ``arguments`` is None when the model's argument text is not a JSON
    object."""

    id: str
    name: str
    arguments: Mapping[str, JsonValue] | None
    raw_arguments: str

    @classmethod
    def of(cls, id: str, name: str, arguments: Mapping[str, JsonValue]) -> ToolCall:  # noqa: A002
        return cls(id=id, name=name, arguments=arguments, raw_arguments=json.dumps(arguments, sort_keys=True))

    @classmethod
    def parse(cls, id: str, name: str, raw: str) -> ToolCall:  # noqa: A002
        value: Any
        try:
            value = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            value = None
        args = cast("dict[str, JsonValue]", value) if isinstance(value, dict) else None
        return cls(id=id, name=name, arguments=args, raw_arguments=raw)


@attrs.frozen
class ToolSpec:
    """A function the model may call: name, description and a JSON Schema for its arguments."""

    name: str
    description: str
    parameters: Mapping[str, JsonValue] = attrs.field(factory=lambda: {"type": "object", "properties": {}})


@attrs.frozen
class Message:
    """One turn. ``user``/``assistant`` carry text (an assistant turn may also carry tool calls); a ``tool``
    turn
    carries the result text of the call named by ``tool_call_id``."""

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.role not in _ROLES:
            raise ConfigError(f"message role: expected one of {', '.join(_ROLES)}, got {self.role!r}")
        if self.role == "tool" and not self.tool_call_id:
            raise ConfigError(
                "message of role 'tool': tool_call_id is required (the id of the call it answers)"
            )
        if self.tool_calls and self.role != "assistant":
            raise ConfigError(f"message of role {self.role!r}: only assistant messages carry tool_calls")


@attrs.frozen
class SimContext:
    """What a simulated model needs to answer: the task's reference solution (text, or a JSON value for
    structured
    tasks), optional hand-written wrong answers, and a sample index so K rollouts of one task differ.

    Only ``sim/*`` providers read it; real providers ignore it and never send it anywhere.
    """

    reference: str | None = None
    reference_json: JsonValue = None
    mutants: tuple[str, ...] = ()
    sample: int = 0


@attrs.frozen
class Request:
    """A provider-neutral chat request."""

    messages: tuple[Message, ...]
    system: str | None = None
    max_tokens: int = 1024
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None  # "auto", "any" (must call some tool), "none", or a tool's name
    sim_context: SimContext | None = None

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.messages, tuple) or not self.messages:
            raise ConfigError("request messages: expected a non-empty tuple of Message")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError(f"request max_tokens: expected a positive integer, got {self.max_tokens!r}")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ConfigError(f"request temperature: expected a number in [0, 2], got {self.temperature!r}")

    @classmethod
    def of(cls, prompt: str, **kwargs: Any) -> Request:
        """A one-turn request: ``Request.of("hi", system="be brief", max_tokens=64)``."""
        return cls(messages=(Message("user", prompt),), **kwargs)


@attrs.frozen
class Usage:
    """Token counts as the provider billed them.

    ``input_tokens`` is uncached input only (billed at the input price); cache reads and cache writes are
    counted apart, each at its own price. OpenAI's ``prompt_tokens`` includes its cached tokens, so the OpenAI
    parser subtracts them; Anthropic reports the three separately already.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_input_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@attrs.frozen
class Completion:
    """A finished call: the answer, what it cost, and the digests that bind it in the store and in
    receipts."""

    call_id: str
    model_id: str
    reported_model: str  # the model id the provider said answered (sim models say so: "sim/x (simulated)")
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: str | None
    usage: Usage
    cost: Decimal
    simulated: bool
    attempts: int
    request_digest: str
    response_digest: str
    registry_digest: str
    # what the budget was charged for the whole call: ``cost`` plus failed attempts of unknown outcome
    charged: Decimal = attrs.field(default=attrs.Factory(lambda self: self.cost, takes_self=True))
    # why the reply was not taken at its word: usage missing, malformed or beyond what the request could cost
    # (then ``cost`` is that bound and ``usage`` is zeros), or the reply echoed the API key (redacted)
    anomaly: str | None = None

    @property
    def message(self) -> Message:
        """The assistant turn to append to the conversation."""
        return Message("assistant", self.text, self.tool_calls)


# ---------------------------------------------------------------------------------------------- JSON forms


def _tool_call_json(tc: ToolCall) -> dict[str, Any]:
    return {"id": tc.id, "name": tc.name, "raw_arguments": tc.raw_arguments}


def _message_json(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "text": m.text}
    if m.tool_calls:
        out["tool_calls"] = [_tool_call_json(tc) for tc in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def request_to_json(request: Request, *, include_sim_context: bool = True) -> dict[str, Any]:
    """The request as plain JSON (its digest is the call's ``request_digest``)."""
    out: dict[str, Any] = {
        "messages": [_message_json(m) for m in request.messages],
        "max_tokens": request.max_tokens,
    }
    if request.system is not None:
        out["system"] = request.system
    if request.temperature is not None:
        out["temperature"] = request.temperature
    if request.stop:
        out["stop"] = list(request.stop)
    if request.tools:
        out["tools"] = [
            {"name": t.name, "description": t.description, "parameters": t.parameters} for t in request.tools
        ]
    if request.tool_choice is not None:
        out["tool_choice"] = request.tool_choice
    if include_sim_context and request.sim_context is not None:
        sc = request.sim_context
        out["sim_context"] = {
            "reference": sc.reference,
            "reference_json": sc.reference_json,
            "mutants": list(sc.mutants),
            "sample": sc.sample,
        }
    return out


def _req(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: field {key!r} missing or of the wrong type")
    return value


def request_from_json(data: Mapping[str, Any]) -> Request:
    """Inverse of :func:`request_to_json`; raises ``ConfigError`` naming the field on malformed input."""
    msgs: list[Message] = []
    for i, item in enumerate(_req(data, "messages", list, "request")):
        where = f"request messages[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected an object")
        raw = cast("dict[str, Any]", item)
        calls = tuple(
            ToolCall.parse(str(c["id"]), str(c["name"]), str(c["raw_arguments"]))
            for c in cast("list[dict[str, Any]]", raw.get("tool_calls", []))
        )
        msgs.append(
            Message(
                _req(raw, "role", str, where), _req(raw, "text", str, where), calls, raw.get("tool_call_id")
            )
        )
    sim = data.get("sim_context")
    return Request(
        messages=tuple(msgs),
        system=data.get("system"),
        max_tokens=_req(data, "max_tokens", int, "request"),
        temperature=data.get("temperature"),
        stop=tuple(data.get("stop", ())),
        tools=tuple(ToolSpec(t["name"], t["description"], t["parameters"]) for t in data.get("tools", [])),
        tool_choice=data.get("tool_choice"),
        sim_context=None
        if sim is None
        else SimContext(
            sim.get("reference"),
            sim.get("reference_json"),
            tuple(sim.get("mutants", ())),
            sim.get("sample", 0),
        ),
    )


def completion_to_json(c: Completion) -> dict[str, Any]:
    return {
        "call_id": c.call_id,
        "model_id": c.model_id,
        "reported_model": c.reported_model,
        "text": c.text,
        "tool_calls": [_tool_call_json(tc) for tc in c.tool_calls],
        "stop_reason": c.stop_reason,
        "usage": attrs.asdict(c.usage),
        "cost": str(c.cost),
        "simulated": c.simulated,
        "attempts": c.attempts,
        "request_digest": c.request_digest,
        "response_digest": c.response_digest,
        "registry_digest": c.registry_digest,
        "charged": str(c.charged),
        "anomaly": c.anomaly,
    }


def completion_from_json(data: Mapping[str, Any]) -> Completion:
    u = _req(data, "usage", dict, "completion")
    return Completion(
        call_id=_req(data, "call_id", str, "completion"),
        model_id=_req(data, "model_id", str, "completion"),
        reported_model=_req(data, "reported_model", str, "completion"),
        text=_req(data, "text", str, "completion"),
        tool_calls=tuple(
            ToolCall.parse(t["id"], t["name"], t["raw_arguments"]) for t in data.get("tool_calls", [])
        ),
        stop_reason=data.get("stop_reason"),
        usage=Usage(**{k: int(v) for k, v in u.items()}),
        cost=Decimal(_req(data, "cost", str, "completion")),
        simulated=bool(data.get("simulated")),
        attempts=_req(data, "attempts", int, "completion"),
        request_digest=_req(data, "request_digest", str, "completion"),
        response_digest=_req(data, "response_digest", str, "completion"),
        registry_digest=_req(data, "registry_digest", str, "completion"),
        charged=Decimal(str(data.get("charged", data["cost"]))),
        anomaly=data.get("anomaly"),
    )
