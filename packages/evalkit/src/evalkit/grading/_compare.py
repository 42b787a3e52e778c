"""The verifier's comparisons, total over every value a candidate can hand the host: JSON equality with a tolerance
(exact when an int is past the float range), the structured tasks' path assertions and schema, and text made
writable (lone surrogates escaped). None of them raises on a candidate's value."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import cast

from evalkit.grading._tasks import JSON, Assertion

__all__ = ["check_assertion", "json_equal", "resolve_pointer", "safe_text", "schema_errors", "short"]

_ACTUAL_CHARS = 200


def safe_text(text: str, limit: int | None = None) -> str:
    """``text`` as results can always write it: a lone surrogate (not Unicode: no UTF-8 encoder or canonical JSON
    takes it) becomes its escape ``\\udxxx``, and with ``limit`` it is cut there (``…`` marks the cut). Other
    characters (NUL, controls, bidi marks) stay: every JSON writer escapes what it must."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


# --------------------------------------------------------------------------------------------- comparison


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def json_equal(actual: object, expected: object, tolerance: float | None = None) -> bool:
    """JSON equality: bools are not numbers, ``1 == 1.0``, floats within ``tolerance`` (absolute or relative)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if _is_number(expected):
        if not _is_number(actual):
            return False
        a, e = cast("float", actual), cast("float", expected)
        if tolerance:
            return _close(a, e, tolerance)
        return a == e  # exact for any int and float (Python compares them without converting)
    if expected is None or isinstance(expected, str):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return False
        a_list, e_list = cast("list[object]", actual), cast("list[object]", expected)
        return len(a_list) == len(e_list) and all(
            json_equal(x, y, tolerance) for x, y in zip(a_list, e_list, strict=True)
        )
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return False
        a_map, e_map = cast("dict[str, object]", actual), cast("dict[str, object]", expected)
        return a_map.keys() == e_map.keys() and all(json_equal(a_map[k], e_map[k], tolerance) for k in e_map)
    return False


def _exact(x: float) -> Fraction | None:
    """``x`` as an exact fraction (an int of any size, a finite float), or None for a NaN or an infinity."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return Fraction(x)


def _close(a: float, e: float, tolerance: float) -> bool:
    """``math.isclose(a, e, rel_tol=tolerance, abs_tol=tolerance)`` for every int and float: an int beyond the
    float range (``10**400``) makes ``isclose`` raise OverflowError, so such a pair is compared exactly instead."""
    try:
        return math.isclose(a, e, rel_tol=tolerance, abs_tol=tolerance)
    except OverflowError:
        fa, fe = _exact(a), _exact(e)
        if fa is None or fe is None:
            return a == e
        tol = Fraction(tolerance)
        return abs(fa - fe) <= max(tol * max(abs(fa), abs(fe)), tol)


def _within(a: float, e: float, tolerance: float) -> bool:
    """``abs(a - e) <= tolerance`` for every int and float (exactly when ``a - e`` overflows a float)."""
    try:
        return abs(a - e) <= tolerance
    except OverflowError:
        fa, fe = _exact(a), _exact(e)
        return fa is not None and fe is not None and abs(fa - fe) <= Fraction(tolerance)


def short(value: JSON) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):  # an int past the digit limit cannot be written as text
        text = f"<a {type(value).__name__} that cannot be shown>"
    text = safe_text(text)
    return text if len(text) <= _ACTUAL_CHARS else text[: _ACTUAL_CHARS - 1] + "…"


# --------------------------------------------------------------------------------------------- structured


def resolve_pointer(document: JSON, pointer: str) -> tuple[bool, JSON]:
    """Resolve an RFC 6901 JSON Pointer; ``(False, None)`` when nothing is there."""
    if pointer == "":
        return True, document
    node: JSON = document
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            if token not in node:
                return False, None
            node = node[token]
        elif isinstance(node, list):
            if not re.fullmatch(r"0|[1-9][0-9]*", token) or int(token) >= len(node):
                return False, None
            node = node[int(token)]
        else:
            return False, None
    return True, node


def _json_type(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def check_assertion(document: JSON, assertion: Assertion) -> str | None:
    """``None`` when the assertion holds, else what was expected at which pointer."""
    where = assertion.path or "(root)"
    found, actual = resolve_pointer(document, assertion.path)
    if not found:
        return f"{where}: no value there (expected {assertion.op} {short(assertion.value)})"
    op, value = assertion.op, assertion.value
    if op == "keys_exactly":
        if not isinstance(actual, dict):
            return f"{where}: expected an object with keys {short(value)}, got {_json_type(actual)}"
        want = set(cast("list[str]", value))
        missing, extra = sorted(want - actual.keys()), sorted(actual.keys() - want)
        if missing or extra:
            return f"{where}: keys differ (missing {missing}, unexpected {extra})"
        return None
    if op == "path_equals":
        return (
            None if json_equal(actual, value) else f"{where}: expected {short(value)}, got {short(actual)}"
        )
    if op == "path_matches":
        if not isinstance(actual, str):
            return f"{where}: expected a string matching {value!r}, got {_json_type(actual)}"
        return (
            None
            if re.fullmatch(cast("str", value), actual)
            else f"{where}: {short(actual)} does not match {value!r} in full"
        )
    if op == "path_in":
        options = cast("list[JSON]", value)
        return (
            None
            if any(json_equal(actual, o) for o in options)
            else f"{where}: expected one of {short(value)}, got {short(actual)}"
        )
    if op == "path_type":
        got = _json_type(actual)
        ok = (
            got == value
            or (value == "number" and got == "integer")
            or (value == "integer" and isinstance(actual, float) and actual.is_integer())
        )
        return None if ok else f"{where}: expected type {value}, got {got}"
    if op == "path_len":
        if not isinstance(actual, str | list | dict):
            return f"{where}: expected something with length {value}, got {_json_type(actual)}"
        return None if len(actual) == value else f"{where}: expected length {value}, got {len(actual)}"
    if op == "path_approx":
        if not _is_number(actual):
            return f"{where}: expected a number near {value}, got {_json_type(actual)}"
        tol = assertion.tolerance or 0.0
        a, e = cast("float", actual), cast("float", value)
        return None if _within(a, e, tol) else f"{where}: expected {value} ± {tol:g}, got {short(actual)}"
    return f"{where}: unknown assertion {op!r}"  # pragma: no cover - the loader refuses unknown ops


def schema_errors(document: JSON, schema: Mapping[str, JSON]) -> list[str]:
    """Draft 2020-12 validation errors of ``document`` as ``<pointer>: <message>`` lines."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    out: list[str] = []
    for err in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        pointer = "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in err.absolute_path)
        out.append(f"{pointer if pointer != '/' else '(root)'}: {err.message}")
    return out
