"""What one agent can make the harness write or hold, and the total functions that keep agent input in bounds.

Everything an agent sends reaches the harness as a JSON value (a tool's arguments, a reply's picks and text, an
error's message, a network attempt's target): any size the protocol's message cap admits, any type, NaN and the
infinities, integers of thousands of digits, lone surrogates, NUL, deep nesting. The functions here turn such a
value into something the trajectory can hold (:func:`record_value`, :func:`safe_text`, :func:`pick_label`) without
ever raising, and :class:`RunBounds` says how much of it one run may hold. docs/pit-harness.md, "Bounds", lists them;
the receipt records them in ``bounds``.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard, cast

import attrs

__all__ = [
    "ERROR_CHARS",
    "FORM_CHARS",
    "QUERY_CHARS",
    "REFUSED",
    "ROW_KEY_CHARS",
    "SMALL_MESSAGE_BYTES",
    "TOOL_NAME_CHARS",
    "VALUE_CHARS",
    "RunBounds",
    "describe",
    "harness_failure",
    "is_stand_in",
    "pick_label",
    "record_value",
    "safe_text",
]

# Tool arguments (fixed by the protocol: the replay answers a recorded call the same way whatever the run's bounds).
QUERY_CHARS = 1000  # pit_search's query
ROW_KEY_CHARS = 256  # pit_read's row_key (a real one has 21)
FORM_CHARS = 64  # pit_list's form
TOOL_NAME_CHARS = 64  # a tool's name
VALUE_CHARS = 256  # any other argument (limit, offset, an unknown tool's arguments), as canonical JSON text
ERROR_CHARS = 2000  # an error message the harness records (the agent's, or its own)
# Every message from an agent but a model request (``complete``) is at most this long: a reply of the most picks
# a session counts and the longest text fits many times over; a longer one is a protocol error, never parsed.
SMALL_MESSAGE_BYTES = 8 << 20
REFUSED = "refused"  # the one key of a stand-in: {"refused": "<what the value was>"}

_SURROGATE = re.compile("[\ud800-\udfff]")
_INT_LIMIT = 2**53 - 1
_MAX_NODES = 64  # a recorded argument is a small value: beyond this many nodes it is described instead
_MAX_DEPTH = 8
_PREVIEW = 40
_STAND_IN_CHARS = 512  # a description's length, whatever the value: a stand-in is recorded as itself


@attrs.frozen
class RunBounds:
    """How much one agent can make a run write or hold (``run(..., bounds=RunBounds(...))``; recorded in the
    receipt's ``bounds``). Past ``picks_per_session`` a session's picks are refused as a count (``over_limit``);
    a decision event lists its first ``rejected_sample`` refusals and counts the rest; a reply's text is at most
    ``reply_chars`` characters; the trajectory holds at most ``trajectory_cell_bytes`` per cell (the probe is one)
    and ``trajectory_run_bytes`` in all; at most ``egress_events`` network attempts are recorded. A reply or a
    trajectory past its bound, or one attempt too many, fails its cell with the reason, and the run is invalid."""

    picks_per_session: int = 10_000
    rejected_sample: int = 20
    reply_chars: int = 100_000
    trajectory_cell_bytes: int = 256 << 20
    trajectory_run_bytes: int = 1 << 30
    egress_events: int = 1_000

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RunBounds.{field.name}: expected a positive integer, got {value!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            **attrs.asdict(self),
            "tool_rows_per_answer": _max_limit(),
            "tool_query_chars": QUERY_CHARS,
            "tool_row_key_chars": ROW_KEY_CHARS,
            "tool_form_chars": FORM_CHARS,
            "tool_value_chars": VALUE_CHARS,
            "error_chars": ERROR_CHARS,
            "message_bytes_except_model_requests": SMALL_MESSAGE_BYTES,
        }


def _max_limit() -> int:
    from evalkit.pit._tool_specs import MAX_LIMIT

    return MAX_LIMIT


def safe_text(value: object, cap: int = ERROR_CHARS) -> str:
    """``value`` as text the trajectory can hold: at most ``cap`` characters, lone surrogates replaced by U+FFFD;
    a value that is not a string is described (never ``repr`` of something unbounded). Never raises."""
    try:
        if not isinstance(value, str):
            return describe(value)
        text = value if len(value) <= cap else value[: max(cap - 3, 0)] + "..."
        return _SURROGATE.sub("\ufffd", text)
    except Exception:  # a str subclass with a hostile __len__: still an answer
        return "<unprintable>"


def describe(value: object) -> str:
    """A short description of any value: its kind, its size and, for text and numbers, a bounded preview."""
    try:
        if isinstance(value, str):
            preview = repr(value[:_PREVIEW])  # repr escapes lone surrogates and control characters
            more = "..." if len(value) > _PREVIEW else ""
            return f"string of {len(value)} characters: {preview}{more}"
        if isinstance(value, bool) or value is None:
            return repr(value)
        if isinstance(value, int):
            if abs(value) > 10**30:
                return f"integer of {value.bit_length()} bits"
            return f"integer {value}"
        if isinstance(value, float):
            return f"number {value!r}"
        if isinstance(value, dict):
            return f"object of {len(cast('dict[Any, Any]', value))} members"
        if isinstance(value, list | tuple):
            return f"array of {len(cast('list[Any]', value))} items"
        return f"value of type {type(value).__name__}"
    except Exception:  # a hostile object: still a description
        return "<unprintable>"


def _faithful(value: object, max_chars: int = 1 << 20) -> bool:
    """True when ``value`` is a small JSON value that canonical JSON writes and reads back as the same value of the
    same types: no NaN or infinity, no integer beyond 2**53 - 1, no float it would round or write as an integer,
    no lone surrogate, no key that is not a string; at most _MAX_NODES nodes, _MAX_DEPTH deep, ``max_chars``
    characters of text (so a long string is never scanned). Never raises."""
    stack: list[tuple[object, int]] = [(value, 0)]
    nodes = 0
    chars = 0
    try:
        while stack:
            v, depth = stack.pop()
            nodes += 1
            if nodes > _MAX_NODES or depth > _MAX_DEPTH:
                return False
            t = type(v)
            if v is None or t is bool:
                continue
            if t is str:
                chars += len(cast("str", v))
                if chars > max_chars or _SURROGATE.search(cast("str", v)):
                    return False
            elif t is int:
                if not -_INT_LIMIT <= cast("int", v) <= _INT_LIMIT:
                    return False
            elif t is float:
                f = cast("float", v)
                if not math.isfinite(f) or f.is_integer() or round(f, 6) != f or abs(f) < 1e-6:
                    return False
            elif t is dict:
                for k, item in cast("dict[object, object]", v).items():
                    chars += len(k) if type(k) is str else 0
                    if type(k) is not str or chars > max_chars or _SURROGATE.search(k):
                        return False
                    stack.append((item, depth + 1))
            elif t is list:
                stack.extend((item, depth + 1) for item in cast("list[object]", v))
            else:
                return False
    except Exception:  # anything odd is not faithful
        return False
    return True


def _size(value: object) -> int:
    """A string's length; anything else's canonical JSON length (called only on faithful values)."""
    if isinstance(value, str):
        return len(value)
    from evalkit_core import canonical_bytes

    return len(canonical_bytes(value))


def record_value(value: object, cap: int = VALUE_CHARS) -> object:
    """What the trajectory records for an argument the agent sent: the value itself when it is faithful (see
    :func:`_faithful`) and at most ``cap`` characters, else a stand-in ``{"refused": "<description>"}``.

    Idempotent (a stand-in is recorded as itself), so a replay that re-serves the recorded value gets the same
    answer: every tool decides from the recorded value, never from the original. Never raises."""
    try:
        if isinstance(value, str) and len(value) > cap:
            return {REFUSED: describe(value)}
        if _faithful(value, max(cap, _STAND_IN_CHARS)) and (_size(value) <= cap or (is_stand_in(value) and len(value[REFUSED]) <= _STAND_IN_CHARS)):
            return value
    except Exception:  # noqa: S110 - described below
        pass
    return {REFUSED: describe(value)}


def is_stand_in(value: object) -> TypeGuard[dict[str, str]]:
    """Whether a recorded value is a stand-in for one that could not be recorded."""
    return type(value) is dict and len(cast("dict[Any, Any]", value)) == 1 and type(cast("dict[str, Any]", value).get(REFUSED)) is str


def pick_label(value: object) -> str:
    """How a refused pick appears in a decision event: a string pick as itself when it could be a row key's text
    (at most :data:`ROW_KEY_CHARS`, no lone surrogate); anything else described. A label is never a real row key
    unless the pick was that key. Never raises."""
    if isinstance(value, str) and type(value) is str and len(value) <= ROW_KEY_CHARS and not _SURROGATE.search(value):
        return value
    if type(value) in {int, bool} or value is None:
        text = describe(value)
        return text if len(text) <= 64 else text[:61] + "..."
    return "<" + describe(value) + ">"


def harness_failure(exc: BaseException) -> str:
    """The recorded text of an exception the harness's own code raised on an agent's input: its type and a bounded
    message (never swallowed in silence, never unbounded)."""
    try:
        message = str(exc)
    except Exception:  # str() of the exception raised: its type is still recorded
        message = "<unprintable>"
    return safe_text(f"{type(exc).__name__}: {safe_text(message, ERROR_CHARS - 100)}", ERROR_CHARS)
