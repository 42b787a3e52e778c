"""Canonical JSON (RFC 8785 / JCS) after evalkit's normalisation, and ``sha256:`` digests.

Normalisation (DESIGN.md): floats are rounded to six decimals, ``-0.0`` becomes ``0``, NaN and the
infinities are an error, integers beyond I-JSON's exact range (|n| > 2**53 - 1) are an error. Keys sort at
every level. The bytes equal ``rfc8785.dumps`` of the normalised value; a property test holds this.

The fast path serialises with the standard library's C encoder, which agrees with JCS for everything the
normalised value can hold except two cases that :func:`normalize` detects and routes to ``rfc8785``:
keys outside the Basic Multilingual Plane's low range (JCS sorts by UTF-16 code units, Python by code
points) and non-integral floats below 1e-4 in magnitude (Python writes ``1e-05`` where ECMAScript writes
``0.00001``). Integral floats become ints, so the integer limit applies to them too: a float of 2**53 or
more is an error (ECMAScript would write it as an integer literal, which reads back as an int beyond 2**53
and could never be hashed again).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import rfc8785

from evalkit_core._errors import CanonicalError

__all__ = ["canonical_bytes", "canonical_object", "canonical_string", "digest", "digest_bytes", "file_digest", "normalize"]

_INT_LIMIT = 2**53 - 1
_SMALL_FLOAT = 1e-4
_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
_CHUNK = 1 << 20
_TEXT_LEAVES = frozenset({str, type(None), bool})
_encode_string: Callable[[str], str] = json.encoder.encode_basestring  # what _ENCODER writes for a str


def _where(path: tuple[str | int, ...]) -> str:
    return "/" + "/".join(str(p) for p in path) if path else "the top level"


class _NotPlain(Exception):  # noqa: N818 - internal signal: re-walk with paths to name the problem
    pass


class _Normalizer:
    """Walks a JSON-shaped value once, producing the normalised copy and noting whether the fast path agrees.

    :meth:`plain` is the hot path: exact-type dispatch and no path bookkeeping. When it meets anything it does not
    handle (a non-str key, NaN, a big integer, an unusual type) it gives up, and :meth:`value` walks again with
    paths so that the error names where the problem is.
    """

    __slots__ = ("slow",)

    def __init__(self) -> None:
        self.slow = False

    def plain(self, v: object) -> Any:
        t = type(v)
        if t is str or v is None or t is bool:
            return v
        if t is int:
            if -_INT_LIMIT <= v <= _INT_LIMIT:  # pyright: ignore[reportOperatorIssue]
                return v
            raise _NotPlain
        if t is float:
            f = cast("float", v)
            if math.isnan(f) or math.isinf(f) or abs(f) > _INT_LIMIT:
                raise _NotPlain
            return self.float(f, ())
        if t is dict:
            d = cast("dict[object, object]", v)
            # A dict of text leaves under ASCII keys (most of a trajectory: rendered rows) is copied as it is, with
            # the checks done by C loops (map, set, join) instead of one Python step per item.
            if set(map(type, d.values())) <= _TEXT_LEAVES:
                try:
                    ascii_keys = "".join(cast("dict[str, object]", d)).isascii()
                except TypeError:  # a key that is not a string
                    raise _NotPlain from None
                if ascii_keys:
                    return dict(d)
            out: dict[str, Any] = {}
            for k, item in d.items():
                if type(k) is not str:
                    raise _NotPlain
                if not k.isascii() and max(k) >= "\ud800":
                    self.slow = True
                ti = type(item)
                # Leaves are handled inline: most of a trajectory is strings, and a call per leaf is the cost.
                if (ti is str or item is None or ti is bool) or (
                    ti is int and -_INT_LIMIT <= item <= _INT_LIMIT  # pyright: ignore[reportOperatorIssue]
                ):
                    out[k] = item
                else:
                    out[k] = self.plain(item)
            return out
        if t is list or t is tuple:
            items = cast("Sequence[object]", v)
            if all(type(item) is str for item in items):
                return list(items)
            return [self.plain(item) for item in items]
        if isinstance(v, str):  # str subclasses such as StrEnum members
            return v
        raise _NotPlain

    def value(self, v: object, path: tuple[str | int, ...]) -> Any:
        if v is None or isinstance(v, bool | str):
            return v
        if isinstance(v, int):
            if -_INT_LIMIT <= v <= _INT_LIMIT:
                return v
            raise CanonicalError(
                f"integer {v} at {_where(path)} is beyond 2**53 - 1 and cannot be represented exactly in JSON; "
                "pass it as a string"
            )
        if isinstance(v, float):
            return self.float(v, path)
        if isinstance(v, Mapping):
            out: dict[str, Any] = {}
            mapping = cast("Mapping[object, object]", v)
            for k, item in mapping.items():
                if not isinstance(k, str):
                    raise CanonicalError(f"object key {k!r} at {_where(path)} is not a string")
                if not self.slow and not k.isascii() and max(k) >= "\ud800":
                    self.slow = True
                out[k] = self.value(item, (*path, k))
            return out
        if isinstance(v, Sequence) and not isinstance(v, bytes | bytearray):
            return [self.value(item, (*path, i)) for i, item in enumerate(v)]  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
        raise CanonicalError(f"value of type {type(v).__name__} at {_where(path)} is not JSON")

    def walk(self, v: object) -> Any:
        try:
            return self.plain(v)
        except _NotPlain:
            self.slow = False
            return self.value(v, ())

    def float(self, v: float, path: tuple[str | int, ...]) -> float | int:
        if math.isnan(v) or math.isinf(v):
            raise CanonicalError(f"{v} at {_where(path)} is not a finite number; canonical JSON has no NaN or infinity")
        r = round(v, 6)
        if r == 0:
            return 0
        if r.is_integer():
            if abs(r) <= _INT_LIMIT:
                return int(r)
            raise CanonicalError(
                f"number {v!r} at {_where(path)} is beyond 2**53 - 1 and cannot be represented exactly in JSON; "
                "pass it as a string"
            )
        if abs(r) < _SMALL_FLOAT:
            self.slow = True
        return r


def normalize(value: object) -> Any:
    """Return ``value`` with evalkit's normalisation applied (a new object; the input is not changed).

    Integral floats become ints (JCS writes ``1.0`` as ``1`` either way), so the result hashes the same
    whether a producer wrote ``1`` or ``1.0``.
    """
    return _Normalizer().walk(value)


def canonical_bytes(value: object) -> bytes:
    """The canonical JSON encoding of ``value``: UTF-8 bytes, equal to ``rfc8785.dumps(normalize(value))``."""
    walker = _Normalizer()
    norm = walker.walk(value)
    try:
        if walker.slow:
            return rfc8785.dumps(norm)
        return _ENCODER.encode(norm).encode("utf-8")
    except (UnicodeEncodeError, rfc8785.CanonicalizationError) as exc:
        # The fast path fails in .encode("utf-8"), the rfc8785 path raises its own error: the same user error.
        raise CanonicalError(f"string contains a lone surrogate ({exc}); it is not valid UTF-8") from exc


def canonical_string(s: str) -> str:
    """The canonical JSON text of the string ``s`` (its quotes included), as :func:`canonical_bytes` writes it inside
    any value; text, not bytes: a string with a lone surrogate fails where the text is encoded, as there."""
    return _encode_string(s)


def canonical_object(members: Mapping[str, str]) -> str:
    """The canonical JSON text of an object whose member values are given already as canonical JSON text.

    For a hot path that keeps parts of a value encoded (the PIT trajectory's pre-encoded rows): the keys must be
    plain ASCII with nothing JSON escapes (as a harness's own field names are), so that their code point order is
    the UTF-16 order JCS sorts by; anything else raises ValueError. ``canonical_object({k: canonical_bytes(v)
    .decode() for k, v in d.items()})`` is ``canonical_bytes(d).decode()``."""
    parts: list[str] = []
    for key in sorted(members):
        if not (key.isascii() and key.isprintable() and '"' not in key and "\\" not in key):
            raise ValueError(f"canonical_object: key {key!r} is not plain ASCII")
        parts.append(f'"{key}":{members[key]}')
    return "{" + ",".join(parts) + "}"


def digest_bytes(data: bytes) -> str:
    """``sha256:<64 hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest(value: object) -> str:
    """``sha256:<64 hex>`` of the canonical JSON of ``value``."""
    return digest_bytes(canonical_bytes(value))


def file_digest(path: str | Path) -> str:
    """``sha256:<64 hex>`` of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()
