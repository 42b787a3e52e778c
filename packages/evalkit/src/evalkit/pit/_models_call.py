"""A model call of the agent's, forwarded through the gateway and recorded: ``model_request`` before it is sent,
``model_call`` with digests, usage and cost after. What the agent chose (the model id, the request) and what the
model answered are made writable first: an id or a request the trajectory cannot hold is refused and recorded as
refused, a model's text with a lone surrogate is recorded with U+FFFD in its place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.pit._bounds import describe, harness_failure, record_value, safe_text
from evalkit.pit._gateway import Gateway, GatewayError
from evalkit.pit._trajectory import Trajectory
from evalkit_core import digest
from evalkit_core.models import Completion, Request

__all__ = ["record_model_call"]

_MODEL_ID_CHARS = 200


def _clean(text: str | None) -> str | None:
    """A model's text as the trajectory can hold it: lone surrogates replaced (the same text otherwise)."""
    return None if text is None else safe_text(text, len(text))


def record_model_call(traj: Trajectory, where: Mapping[str, Any], gateway: Gateway, model_id: str, request: Request) -> Completion:
    """Forward one model call through the gateway process and record it (no wall-clock, no call id). A model
    id or a request the trajectory cannot hold (a lone surrogate, NaN, a thousand-character id) is refused:
    recorded as a ``model_request`` with ``refused``, and raised to the agent as the gateway's error."""
    from evalkit_core.models import completion_from_json, request_to_json

    shown = record_value(model_id, _MODEL_ID_CHARS)
    request_json: dict[str, Any] = {}
    request_sha = ""
    try:
        request_json = request_to_json(request)
        request_sha = digest(request_json)
    except Exception as exc:  # the agent's request: its refusal is recorded, never raised past here
        refused = "the request cannot be recorded: " + harness_failure(exc)
    else:
        refused = None if type(shown) is str else f"model id refused ({describe(model_id)}); expected at most {_MODEL_ID_CHARS} characters of text"
    if refused is not None:
        traj.emit({"type": "model_request", **where, "model_id": safe_text(model_id, 200), "refused": refused})
        raise GatewayError(refused)
    traj.emit({"type": "model_request", **where, "model_id": model_id, "request_sha256": request_sha})
    completion = completion_from_json(gateway.complete(model_id, request_json))
    usage = completion.usage
    traj.emit(
        {
            "type": "model_call",
            **where,
            "model_id": completion.model_id,
            "reported_model": _clean(completion.reported_model),
            "simulated": completion.simulated,
            "request_digest": completion.request_digest,
            "response_digest": completion.response_digest,
            "registry_digest": completion.registry_digest,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
            },
            "cost_usd": str(completion.cost),
            "attempts": completion.attempts,
            "text": _clean(completion.text),
            "tool_calls": [
                {"id": _clean(t.id), "name": _clean(t.name), "arguments": _clean(t.raw_arguments)}
                for t in completion.tool_calls
            ],
        }
    )
    return completion
