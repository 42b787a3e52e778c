"""What every provider wire format gives the client: a parsed ``Reply``; and the shape error it raises.

A reply whose answer is readable but whose usage is not (missing, negative, fractional, not a number, cached
tokens above the prompt's) still parses: ``usage`` is None and ``usage_problem`` says why. The client keeps
the answer, charges the call at the most its request could have cost, and flags it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from evalkit_core.models._types import ToolCall, Usage

__all__ = ["Reply", "ShapeError", "UsageError", "count", "read_usage"]


@attrs.frozen
class Reply:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: str | None
    usage: Usage | None  # None: the provider's usage report is unusable (see usage_problem)
    reported_model: str
    raw: Mapping[str, Any]  # the provider's JSON body (its digest is the call's response_digest)
    usage_problem: str | None = None


class ShapeError(ValueError):
    """A reply parsed as JSON but lacks a field the wire format promises (internal; becomes a ModelError)."""


class UsageError(ValueError):
    """The usage report is unusable (internal; the answer is kept and the call charged at its bound)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def count(value: Any, field: str, *, required: bool = False) -> int:
    """A token count as reported: a JSON integer >= 0. Anything else raises :class:`UsageError`."""
    if value is None:
        if required:
            raise UsageError(f"usage field {field!r} is missing")
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"usage field {field!r} = {_show(value)}; expected a non-negative integer")
    return value


def read_usage(build: Callable[[], Usage]) -> tuple[Usage | None, str | None]:
    """``(usage, None)``, or ``(None, why)`` when ``build`` finds the report unusable."""
    try:
        return build(), None
    except UsageError as exc:
        return None, str(exc)
