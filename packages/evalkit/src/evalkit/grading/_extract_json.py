"""JSON out of a completion: the last fenced block that parses, else the whole text, else the first balanced
``{...}``/``[...]`` span, in linear time and bounded depth (see :mod:`evalkit.grading._extract`)."""

from __future__ import annotations

import json
import math
import re
from array import array
from typing import cast

import attrs

from evalkit.grading._extract_blocks import ExtractionError
from evalkit.grading._extract_blocks import checked as _checked
from evalkit.grading._extract_blocks import fenced as _fenced
from evalkit.grading._tasks import JSON

__all__ = ["MAX_JSON_DEPTH", "extract_json", "parse_json"]

MAX_JSON_DEPTH = 64
_SPAN_WORK_FACTOR = 4  # the balanced-span search reads at most this many times the text
_JSON_LANGS = frozenset({"", "json", "jsonc", "javascript", "js"})

# A string (to its closing quote, or to the end of its line when unclosed: JSON strings hold no raw newline)
# or a bracket. Brackets inside strings are not structure.
_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*+"?|[\[\]{}]')
_PAIR = {"]": "[", "}": "{"}


@attrs.frozen
class _Spans:
    """The balanced ``{...}``/``[...]`` spans of a text in order of their opening bracket (``end`` is -1 for one
    never closed), each with its own nesting depth, and the deepest nesting anywhere.
    """

    starts: array[int]
    ends: array[int]
    depths: array[int]
    deepest: int


def _json_spans(text: str) -> _Spans:
    starts: array[int] = array("q")
    ends: array[int] = array("q")
    depths: array[int] = array("q")
    stack: list[int] = []  # open spans
    below: list[int] = []  # per open span, the deepest absolute depth reached inside it
    deepest = 0
    for m in _JSON_TOKEN.finditer(text):
        c = text[m.start()]
        if c == '"':
            continue
        if c in "[{":
            starts.append(m.start())
            ends.append(-1)
            depths.append(0)
            stack.append(len(starts) - 1)
            below.append(len(stack))
            deepest = max(deepest, len(stack))
            continue
        if not stack:
            continue
        i = stack[-1]
        if text[starts[i]] != _PAIR[c]:
            stack.clear()  # no JSON value can contain a mismatched bracket: every open span is dead
            below.clear()
            continue
        stack.pop()
        d = below.pop()
        ends[i] = m.start()
        depths[i] = d - len(stack)
        if below:
            below[-1] = max(below[-1], d)
    return _Spans(starts, ends, depths, deepest)


def _no_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not valid JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"{literal} is not a finite number")
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _no_surrogates(value: JSON) -> JSON:
    """``value`` unchanged, or ValueError when a string in it holds a lone surrogate (not Unicode text: it
    cannot be written as UTF-8 or canonicalised).
    """
    todo: list[JSON] = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            strings = [v]
        elif isinstance(v, list):
            todo += v
            continue
        elif isinstance(v, dict):
            todo += v.values()
            strings = list(v)
        else:
            continue
        for s in strings:
            if not s.isascii():
                try:
                    s.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("a string holds a lone surrogate") from None
    return value


def _loads(text: str, deepest: int | None = None) -> JSON:
    if deepest is None:
        deepest = _json_spans(text).deepest
    if deepest > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return _no_surrogates(cast("JSON", _DECODER.decode(text)))


def _first_span(text: str, spans: _Spans) -> JSON | None:
    """The value of the first balanced span (by opening bracket) that parses, or None. A span nested deeper
    than ``MAX_JSON_DEPTH`` is refused with all the spans inside it (a fragment of an over-deep document is
    not an answer).

    When the parse from span S fails at position e, every span opening inside S before e was read by that parse
    as a nested value: it parses if it closes before e (and is then the answer) and fails at e if it does not,
    so it is skipped unparsed. Parses therefore read disjoint stretches of the text; a work counter stops the
    search at ``_SPAN_WORK_FACTOR`` times the text's length all the same.
    """
    barrier = 0  # spans opening before it and closing at or after it failed with the span that set it
    skip_to = 0  # spans opening before it lie inside a span refused as a whole
    work = 0
    budget = _SPAN_WORK_FACTOR * max(len(text), 1)
    for i in range(len(spans.starts)):
        start, end = spans.starts[i], spans.ends[i]
        if end < 0 or start < skip_to or start < barrier <= end:
            continue
        if spans.depths[i] > MAX_JSON_DEPTH:  # too deep: refused whole, with everything inside it
            skip_to = end + 1
            continue
        # A slice, not raw_decode(text, start): a JSONDecodeError counts the lines before its position.
        piece = text[start : end + 1]
        work += len(piece)
        try:
            value, _ = _DECODER.raw_decode(piece)
        except json.JSONDecodeError as exc:
            barrier = max(barrier, start + exc.pos)
        except ValueError:  # NaN, an infinity, too many digits: this span and all inside it are refused
            skip_to = end + 1
        else:
            try:
                return _no_surrogates(cast("JSON", value))
            except ValueError:
                skip_to = end + 1
        if work > budget:
            break
    return None


def parse_json(text: str) -> JSON:
    """A solution that is JSON text as it stands (no extraction), under the same bounds as :func:`extract_json`:
    size, depth, no NaN, infinities or lone surrogates. Raises :class:`ExtractionError` for anything else."""
    checked = _checked(text)
    try:
        return _loads(checked)
    except ValueError as exc:
        raise ExtractionError(f"not a JSON value: {exc}") from None


def extract_json(completion: str) -> JSON:
    """The JSON value in a completion: the last fenced block that parses, else the whole text, else the first
    balanced ``{...}``/``[...]`` span that parses. NaN, infinities, lone surrogates and nesting deeper than 64
    are refused.
    """
    text = _checked(completion)
    errors: list[str] = []
    for lang, block in reversed(_fenced(text)):
        if lang not in _JSON_LANGS:
            continue
        if not block.strip():
            errors.append("empty")
            continue
        try:
            return _loads(block)
        except ValueError as exc:
            errors.append(str(exc))
    spans = _json_spans(text)
    try:
        return _loads(text, spans.deepest)
    except ValueError:
        pass
    value = _first_span(text, spans)
    if value is not None:
        return value
    if errors:
        detail = f" (fenced block: {errors[-1]})"
    elif spans.deepest > MAX_JSON_DEPTH:
        detail = f" (nested deeper than {MAX_JSON_DEPTH} levels)"
    else:
        detail = ""
    raise ExtractionError(f"no JSON value found in the completion{detail}")
