"""Getting code and JSON out of a model completion."""

from __future__ import annotations

import ast
import json
import re
from typing import cast

from evalkit._tasks import JSON

__all__ = ["ExtractionError", "extract_code", "extract_json"]

_FENCE = re.compile(
    r"^[ \t]*(```+|~~~+)[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.DOTALL | re.MULTILINE
)
_CODE_LANGS = ("", "python", "py", "python3")
_JSON_LANGS = ("", "json", "jsonc", "javascript", "js")


class ExtractionError(ValueError):
    """No usable code or JSON in a completion. A candidate's failure, not a user error."""


def _blocks(text: str, langs: tuple[str, ...]) -> list[str]:
    return [m.group(3) for m in _FENCE.finditer(text) if m.group(2).lower() in langs]


def _defines(source: str, name: str) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def extract_code(completion: str, entry_point: str) -> str:
    """The code defining ``entry_point``: the last fenced block that defines it, else the whole completion.

    Raises :class:`ExtractionError` when nothing parses as Python and defines ``entry_point``.
    """
    blocks = _blocks(completion, _CODE_LANGS)
    for block in reversed(blocks):
        if _defines(block, entry_point):
            return block
    if _defines(completion, entry_point):
        return completion
    if blocks:
        raise ExtractionError(f"no fenced code block defines {entry_point!r} ({len(blocks)} block(s) found)")
    raise ExtractionError(f"no code defining {entry_point!r} found in the completion")


def _no_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not valid JSON")


def _loads(text: str) -> JSON:
    return cast("JSON", json.loads(text, parse_constant=_no_constant))


def extract_json(completion: str) -> JSON:
    """The JSON value in a completion: the last fenced block that parses, else the whole text, else the first
    balanced ``{...}``/``[...]`` span that parses. NaN and infinities are refused.
    """
    errors: list[str] = []
    for block in reversed(_blocks(completion, _JSON_LANGS)):
        try:
            return _loads(block)
        except ValueError as exc:
            errors.append(str(exc))
    try:
        return _loads(completion)
    except ValueError:
        pass
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    for m in re.finditer(r"[\[{]", completion):
        try:
            value, _ = decoder.raw_decode(completion, m.start())
        except ValueError:
            continue
        return cast("JSON", value)
    detail = f" (fenced block: {errors[-1]})" if errors else ""
    raise ExtractionError(f"no JSON value found in the completion{detail}")
