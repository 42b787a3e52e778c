"""Tagged JSON: Python values as data across the wall, with tuples, sets, bytes, floats and dicts kept distinct.

Standard library only: the host imports it, and the wall appends its source to the zygote's, so the candidate,
the checker and the host speak the same codec. JSON arrays are lists; every other container is a one-key object
whose key is a tag: ``{"$t": [...]}`` a tuple, ``{"$s": [...]}`` a set, ``{"$fs": [...]}`` a frozenset,
``{"$d": [[k, v], ...]}`` a dict (any hashable keys, insertion order kept), ``{"$b": "<base64>"}`` bytes,
``{"$ba": ...}`` a bytearray, ``{"$c": [re, im]}`` a complex, ``{"$f": "nan"|"inf"|"-inf"}`` a float JSON cannot
write, ``{"$u": "<base64>"}`` a string holding a surrogate code unit (its UTF-32 code points). Nothing else crosses: an object of any other type (a class of the candidate's, a function) is refused
when encoding, and decoding builds only built-in types, so a value can never carry behaviour (no ``__eq__`` that
always says yes).

Decoding is bounded: the text has a size cap, nesting deeper than :data:`MAX_DEPTH` is refused before the
parser sees it, a set or dict whose members share one hash more than :data:`MAX_SAME_HASH` times is refused
before it is built (ints that are multiples of ``2**61 - 1`` all hash alike, and building a set of n of them costs
n**2/2 comparisons: seconds of CPU, in one C call that holds the GIL), and every failure is a :class:`TaggedError`.
"""

# pyright: basic

from __future__ import annotations

import base64
import json
import math
import re

MAX_DEPTH = 100
MAX_BYTES = 1 << 20
MAX_SAME_HASH = 32


class TaggedError(ValueError):
    """A value that cannot cross the wall (on encode), or text that is not a tagged value (on decode)."""


_INF = float("inf")
# A string holding a surrogate code unit crosses as ``{"$u": <base64 of its UTF-32 code points>}``: JSON's escapes
# would join a high and a low surrogate written side by side into one character, so '\ud800\udc00' (two code
# points) would arrive as '\U00010000' (one), and a candidate could pass as the other.
_SURROGATE = re.compile("[\ud800-\udfff]")
_BIG = 10**4000  # an int this large or larger does not cross (its decimal text alone is 4,000 digits)

# One encoder and one decoder for every message: ``json.dumps``/``json.loads`` with options build a new one per
# call, which costs more than encoding a short message.
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def tagged_encode(value: object, *, outer: int = 0) -> str:
    """The tagged JSON text of ``value`` (exact built-in types only; subclasses are refused). What it writes,
    :func:`tagged_decode` reads: a value whose text would nest brackets deeper than :data:`MAX_DEPTH` (a tag counts
    its own brackets: a tuple two, a dict's entries three) is refused here, with ``outer`` the brackets of the
    message it goes into."""
    return _ENCODER.encode(_tag(value, outer))


def _plain(v: list[object]) -> bool:
    """Whether every member of a list is a scalar that JSON writes as itself (no tag, nothing to refuse)."""
    for x in v:
        t = type(x)
        if t is bool or x is None:
            continue
        if t is str:
            if _SURROGATE.search(x) is None:  # type: ignore[arg-type]
                continue
            return False
        if t is int:
            if -_BIG < x < _BIG:  # type: ignore[operator]
                continue
            return False
        if t is float and x - x == 0.0:  # finite (inf - inf and nan - nan are nan)  # type: ignore[operator]
            continue
        return False
    return True


def _deeper(depth: int, brackets: int) -> int:
    """The bracket depth inside a container that opens ``brackets`` more; refused past :data:`MAX_DEPTH`."""
    depth += brackets
    if depth > MAX_DEPTH:
        raise TaggedError("value nested too deeply")
    return depth


def _tag(v: object, depth: int) -> object:
    """``v`` as JSON with tags; ``depth`` is the number of brackets its text is already inside."""
    t = type(v)
    if v is None or t is bool:
        return v
    if t is str:
        if _SURROGATE.search(v) is None:  # type: ignore[arg-type]
            return v
        _deeper(depth, 1)
        return {"$u": base64.b64encode(v.encode("utf-32-le", "surrogatepass")).decode("ascii")}  # type: ignore[union-attr]
    if t is int:
        if abs(v) >= _BIG:  # type: ignore[operator]
            raise TaggedError("integer too large")
        return v
    if t is float:
        if math.isfinite(v):  # type: ignore[arg-type]
            return v
        _deeper(depth, 1)
        return {"$f": "nan" if v != v else ("inf" if v > 0 else "-inf")}  # type: ignore[operator]  # noqa: PLR0124
    if t is list:
        inner = _deeper(depth, 1)
        if _plain(v):  # type: ignore[arg-type]
            return v
        return [_tag(x, inner) for x in v]  # type: ignore[union-attr]
    if t is tuple:
        inner = _deeper(depth, 2)
        return {"$t": [_tag(x, inner) for x in v]}  # type: ignore[union-attr]
    if t is set or t is frozenset:
        inner = _deeper(depth, 2)
        items = [_tag(x, inner) for x in v]  # type: ignore[union-attr]
        return {"$s" if t is set else "$fs": items}
    if t is dict:
        inner = _deeper(depth, 3)  # the tag's object, its list, each [key, value] pair
        return {"$d": [[_tag(k, inner), _tag(x, inner)] for k, x in v.items()]}  # type: ignore[union-attr]
    if t is bytes or t is bytearray:
        _deeper(depth, 1)
        return {"$b" if t is bytes else "$ba": base64.b64encode(v).decode("ascii")}  # type: ignore[arg-type]
    if t is complex:
        inner = _deeper(depth, 2)
        return {"$c": [_tag(v.real, inner), _tag(v.imag, inner)]}  # type: ignore[union-attr]
    raise TaggedError(f"a value of type {t.__name__} cannot be returned (only built-in data types)")


def _max_depth_exceeded(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than ``limit`` (a linear scan over the structural
    characters only; string contents are skipped by their quotes). A text with no more opening brackets in all
    than ``limit`` cannot nest deeper: that is counted in C, and most messages end there."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_str = False
    escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _spread(members: list[object]) -> list[object]:
    """``members`` (of a set, or a dict's keys) when no hash is shared by more than :data:`MAX_SAME_HASH` of them;
    counting is linear (distinct hashes hash apart), building a table of colliding members is not."""
    counts: dict[int, int] = {}
    for m in members:
        h = hash(m)
        n = counts.get(h, 0) + 1
        if n > MAX_SAME_HASH:
            raise TaggedError(f"more than {MAX_SAME_HASH} set members or dict keys with one hash")
        counts[h] = n
    return members


def _untag(obj: dict[str, object]) -> object:
    if len(obj) != 1:
        raise TaggedError("an object that is not a tag")
    (key, val), = obj.items()
    if key == "$t" and type(val) is list:
        return tuple(val)
    if key == "$s" and type(val) is list:
        return set(_spread(val))
    if key == "$fs" and type(val) is list:
        return frozenset(_spread(val))
    if key == "$d" and type(val) is list:
        for pair in val:
            if type(pair) is not list or len(pair) != 2:
                raise TaggedError("a dict entry that is not a [key, value] pair")
        _spread([pair[0] for pair in val])
        out: dict[object, object] = {}
        for pair in val:
            out[pair[0]] = pair[1]
        return out
    if key in ("$b", "$ba") and type(val) is str:
        raw = base64.b64decode(val.encode("ascii"), validate=True)
        return raw if key == "$b" else bytearray(raw)
    if key == "$u" and type(val) is str:
        units = base64.b64decode(val.encode("ascii"), validate=True)
        if len(units) % 4:
            raise TaggedError("a $u string that is not whole UTF-32 code points")
        try:
            return units.decode("utf-32-le", "surrogatepass")
        except UnicodeDecodeError:
            raise TaggedError("a $u string with a code point past U+10FFFF") from None
    if key == "$c" and type(val) is list and len(val) == 2:
        return complex(val[0], val[1])
    if key == "$f" and val in ("nan", "inf", "-inf"):
        return float(val)
    raise TaggedError(f"unknown tag {key[:20]!r}")


def _no_constant(name: str) -> object:
    raise TaggedError(f"{name} is not allowed (non-finite floats travel as tags)")


_DECODER = json.JSONDecoder(object_hook=_untag, parse_constant=_no_constant)


def tagged_decode(text: str | bytes, *, max_bytes: int = MAX_BYTES) -> object:
    """The value of a tagged JSON text. Raises :class:`TaggedError` for anything else, whatever the input."""
    if len(text) > max_bytes:
        raise TaggedError(f"value larger than {max_bytes} bytes")
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if _max_depth_exceeded(text, MAX_DEPTH):
            raise TaggedError(f"value nested deeper than {MAX_DEPTH} levels")  # noqa: TRY301
        return _DECODER.decode(text)
    except TaggedError:
        raise
    except (ValueError, TypeError, RecursionError, MemoryError, OverflowError) as exc:
        # TypeError: an unhashable set member or dict key; ValueError: bad JSON, bad base64, too many digits
        raise TaggedError(f"not a tagged value ({type(exc).__name__}: {str(exc)[:120]})") from None


def tagged_to_json(value: object, depth: int = 0) -> object:
    """A decoded value as plain JSON for call tests (a tuple becomes a list, as JSON writes it); sets, bytes,
    complex numbers, non-finite floats and dicts with non-string keys are not JSON and raise TaggedError."""
    if depth > MAX_DEPTH:
        raise TaggedError("value nested too deeply")
    t = type(value)
    if value is None or t in (bool, int, str):
        return value
    if t is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise TaggedError(f"return value contains a non-finite float ({value!r})")
        return value
    if t is list or t is tuple:
        return [tagged_to_json(x, depth + 1) for x in value]  # type: ignore[union-attr]
    if t is dict:
        out: dict[str, object] = {}
        for k, x in value.items():  # type: ignore[union-attr]
            if type(k) is not str:
                raise TaggedError("return value has a dict key that is not a string")
            out[k] = tagged_to_json(x, depth + 1)
        return out
    raise TaggedError(f"return value is not JSON (a {t.__name__}; expected int, float, str, bool, None, list, dict)")
