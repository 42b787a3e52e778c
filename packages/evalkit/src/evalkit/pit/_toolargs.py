"""A tool call's arguments as the harness records them and the tools read them: total over every value.

:func:`admit` takes a tool's name and whatever arguments arrived (any JSON value the protocol admits, or anything
an in-process caller passes) and returns the name and arguments to record, each argument either the value itself
(small, and written and read back by canonical JSON as the same value) or a stand-in ``{"refused": "..."}``, and
the error to answer, if any. The tools decide only from the recorded arguments, so re-serving a recorded call (the
replay) gives the same answer, and :func:`admit` of recorded arguments gives them back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import attrs

from evalkit.pit._bounds import (
    FORM_CHARS,
    QUERY_CHARS,
    REFUSED,
    ROW_KEY_CHARS,
    TOOL_NAME_CHARS,
    VALUE_CHARS,
    describe,
    is_stand_in,
    record_value,
)
from evalkit.pit._tool_specs import MAX_LIMIT, TOOL_NAMES
from evalkit_core import canonical_bytes

__all__ = ["Admitted", "ToolArgumentError", "admit", "int_arg"]


class ToolArgumentError(ValueError):
    pass


@attrs.frozen
class Admitted:
    """A call as recorded: ``tool`` (a known tool's name, or a bounded text for any other), ``args`` (what the
    trajectory holds), and ``error`` (the answer's message when the call is refused, else None)."""

    tool: str
    args: dict[str, Any]
    error: str | None = None


def int_arg(args: Mapping[str, Any], name: str, default: int, lo: int, hi: int | None) -> int:
    """An integer argument from recorded ``args``; ToolArgumentError names the argument and the rule."""
    v = args.get(name, default)
    if v is None:
        v = default
    if is_stand_in(v):
        top = hi if hi is not None else "any"
        raise ToolArgumentError(f"{name} refused ({v[REFUSED]}); expected an integer between {lo} and {top}")
    if isinstance(v, bool) or not isinstance(v, int):
        raise ToolArgumentError(f"{name} must be an integer, got {_shown(v)}")
    if v < lo or (hi is not None and v > hi):
        raise ToolArgumentError(f"{name} must be between {lo} and {hi if hi is not None else 'any'}, got {v}")
    return v


def _shown(value: object) -> str:
    """A recorded value in a message: ``repr`` of a scalar; a container as canonical JSON (its keys sorted, as the
    record is read back), so the message is the same when the record is served again."""
    if isinstance(value, dict | list):
        return canonical_bytes(cast("object", value)).decode()
    return repr(value)


def _tool_name(name: object) -> str:
    if isinstance(name, str) and name in TOOL_NAMES:
        return name
    recorded = record_value(name, TOOL_NAME_CHARS)
    if isinstance(recorded, str):
        return recorded
    text = "<refused: " + describe(name)
    return (text if len(text) < TOOL_NAME_CHARS else text[: TOOL_NAME_CHARS - 4] + "...") + ">"


def _as_dict(arguments: object) -> dict[str, Any] | None:
    if type(arguments) is dict:
        return cast("dict[str, Any]", arguments)
    try:
        return dict(cast("Mapping[str, Any]", arguments))
    except Exception:  # not a mapping: the call is refused
        return None


def admit(name: object, arguments: object) -> Admitted:
    """The recorded form of one call and the error it answers, if any (see the module). Never raises."""
    tool = _tool_name(name)
    args = _as_dict(arguments)
    if args is None:  # not an object (only an in-process caller can send one): no arguments, as the record says
        args = {}
    if tool == "pit_list":
        recorded = {
            "limit": record_value(args.get("limit", 20)),
            "offset": record_value(args.get("offset", 0)),
            "form": record_value(args.get("form"), FORM_CHARS),
        }
        return Admitted(tool, recorded, _list_error(recorded))
    if tool == "pit_search":
        recorded = {"query": record_value(args.get("query", ""), QUERY_CHARS), "limit": record_value(args.get("limit", 20))}
        return Admitted(tool, recorded, _search_error(recorded))
    if tool == "pit_read":
        recorded = {"row_key": record_value(args.get("row_key", ""), ROW_KEY_CHARS)}
        key = recorded["row_key"]
        error = f"row_key refused ({key[REFUSED]}); expected a string of at most {ROW_KEY_CHARS} characters" if is_stand_in(key) else None
        return Admitted(tool, recorded, error)
    if tool == "pit_coverage":
        return Admitted(tool, {})
    recorded_args = record_value(args, VALUE_CHARS)
    kept = cast("dict[str, Any]", recorded_args) if not is_stand_in(recorded_args) else {"arguments": recorded_args}
    return Admitted(tool, kept, f"unknown tool {tool!r}; the tools are {', '.join(TOOL_NAMES)}")


def _list_error(recorded: Mapping[str, Any]) -> str | None:
    try:
        int_arg(recorded, "limit", 20, 1, MAX_LIMIT)
        int_arg(recorded, "offset", 0, 0, None)
    except ToolArgumentError as exc:
        return str(exc)
    form = recorded["form"]
    if is_stand_in(form):
        return f"form refused ({form[REFUSED]}); expected a form type of at most {FORM_CHARS} characters"
    return None


def _search_error(recorded: Mapping[str, Any]) -> str | None:
    try:
        int_arg(recorded, "limit", 20, 1, MAX_LIMIT)
    except ToolArgumentError as exc:
        return str(exc)
    query = recorded["query"]
    if is_stand_in(query):
        return f"query refused ({query[REFUSED]}); expected a non-empty string of at most {QUERY_CHARS} characters"
    if not isinstance(query, str) or not query.strip():
        return "query must be a non-empty string"
    return None
