"""What every provider wire format gives the client: a parsed ``Reply``; and the shape error it raises."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from evalkit_core.models._types import ToolCall, Usage

__all__ = ["Reply", "ShapeError"]


@attrs.frozen
class Reply:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: str | None
    usage: Usage
    reported_model: str
    raw: Mapping[str, Any]  # the provider's JSON body (its digest is the call's response_digest)


class ShapeError(ValueError):
    """A reply parsed as JSON but lacks a field the wire format promises (internal; becomes a ModelError)."""


def count(value: Any, field: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ShapeError(f"usage field {field!r} = {value!r}; expected a non-negative integer")
    return value
