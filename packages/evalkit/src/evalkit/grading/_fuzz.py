"""The fuzz proposer's parts: edge values per type, hypothesis strategies built from a task's ``TypeSpec``s,
the category a generated input falls in, and the structural shrinker the adversary runs between sandbox batches.

Everything here is pure (no sandbox, no store); :mod:`evalkit.grading._adversary` drives it. Generated values are plain
JSON: finite floats only, ints within ±(2**53 - 1), strings of Unicode scalars (no lone surrogates).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Literal, cast, get_args

if TYPE_CHECKING:  # hypothesis is imported on first use: a command that only reads the store must not pay for it
    from hypothesis import strategies as st

from evalkit.grading._tasks import JSON, CallTest, CodeTask, TypeSpec, conforms

__all__ = [
    "CATEGORIES",
    "MAX_SAFE_INT",
    "Category",
    "classify",
    "edge_values",
    "input_size",
    "random_inputs",
    "seed_inputs",
    "shrink_args",
    "simple_value",
    "strategy_for",
]

Category = Literal[
    "off_by_one", "edge_empty", "boundary", "unicode", "large_input", "type_corner", "ordering", "other"
]
CATEGORIES: tuple[Category, ...] = get_args(Category)  # one list: the Literal
MAX_SAFE_INT = 2**53 - 1
_MAX_FLOAT = 1e15  # the canonical form refuses floats of magnitude 2**53 and beyond
_LARGE_LEN = 2000  # length of the "large" list and string edge values (well under the sandbox's line cap)

Edge = tuple[JSON, Category, str]


# --------------------------------------------------------------------------------------------- edge values


def simple_value(spec: TypeSpec) -> JSON:
    """A small, ordinary value of ``spec`` (the filler when another argument is being varied)."""
    kind = spec.kind
    if kind == "int":
        return 1
    if kind == "float":
        return 1.5
    if kind == "str":
        return "ab"
    if kind == "bool":
        return False
    if kind == "list":
        return [simple_value(spec.args[0])]
    if kind == "dict":
        return {"k": simple_value(spec.args[0])}
    if kind == "optional":
        return simple_value(spec.args[0])
    if kind == "tuple":
        return [simple_value(a) for a in spec.args]
    return None  # none, any


def _ordered(spec: TypeSpec) -> tuple[JSON, JSON, JSON] | None:
    """Three increasing values of ``spec`` when it is ordered (for sorted/reversed list edges)."""
    if spec.kind == "int":
        return 1, 2, 3
    if spec.kind == "float":
        return 0.5, 1.5, 2.5
    if spec.kind == "str":
        return "a", "b", "c"
    return None


def edge_values(spec: TypeSpec) -> list[Edge]:
    """The values of ``spec`` a candidate most often gets wrong, each with its category and a hint."""
    kind = spec.kind
    if kind == "int":
        return [
            (0, "boundary", "zero"),
            (1, "off_by_one", "one"),
            (-1, "off_by_one", "minus one"),
            (2, "off_by_one", "two"),
            (-7, "boundary", "a negative number"),
            (10**6, "large_input", "a million"),
            (MAX_SAFE_INT, "large_input", "the largest exactly representable integer (2**53 - 1)"),
            (-MAX_SAFE_INT, "large_input", "the most negative exactly representable integer"),
        ]
    if kind == "float":
        return [
            (0.0, "boundary", "zero"),
            (-0.0, "type_corner", "negative zero"),
            (-1.5, "boundary", "a negative fraction"),
            (1e-9, "boundary", "a tiny positive number"),
            (3, "type_corner", "an integer where a float is declared"),
            (_MAX_FLOAT, "large_input", "a very large float"),
            (-_MAX_FLOAT, "large_input", "a very large negative float"),
        ]
    if kind == "str":
        return [
            ("", "edge_empty", "the empty string"),
            (" ", "boundary", "a single space"),
            ("a", "boundary", "a single character"),
            ("A", "boundary", "a single upper-case character"),
            ("  a  b  ", "boundary", "leading, trailing and repeated spaces"),
            ("a\tb\nc", "type_corner", "tabs and newlines"),
            ("0", "type_corner", "a digit string"),
            ("é", "unicode", "a non-ASCII letter"),
            ("Straße İ", "unicode", "letters whose case mapping changes the length"),
            ("e\u0301", "unicode", "a combining accent (two code points, one glyph)"),
            ("日本語", "unicode", "CJK characters"),
            ("😀x", "unicode", "an astral-plane character (emoji)"),
            ("ab" * (_LARGE_LEN // 2), "large_input", f"a string of {_LARGE_LEN} characters"),
        ]
    if kind == "bool":
        return [(True, "boundary", "true"), (False, "boundary", "false")]
    if kind == "none":
        return [(None, "edge_empty", "null")]
    if kind == "any":
        return [
            (None, "edge_empty", "null"),
            ([], "edge_empty", "an empty list"),
            ({}, "edge_empty", "an empty object"),
            (0, "type_corner", "an integer"),
            ("", "type_corner", "a string"),
        ]
    if kind == "optional":
        return [(None, "edge_empty", "None for an optional value"), *edge_values(spec.args[0])]
    if kind == "list":
        item = spec.args[0]
        out: list[Edge] = [([], "edge_empty", "an empty list")]
        out.extend([([v], "boundary", f"a one-element list ({h})") for v, _, h in edge_values(item)[:4]])
        s = simple_value(item)
        out.append(([s, s], "boundary", "a list of two equal elements"))
        ordered = _ordered(item)
        if ordered is not None:
            out.append(([ordered[2], ordered[1], ordered[0]], "ordering", "a list in descending order"))
            out.append(
                ([ordered[1], ordered[0], ordered[2], ordered[1]], "ordering", "unsorted with a repeat")
            )
        out.append(([s] * _LARGE_LEN, "large_input", f"a list of {_LARGE_LEN} elements"))
        return out
    if kind == "dict":
        item = spec.args[0]
        s = simple_value(item)
        out = [({}, "edge_empty", "an empty object")]
        out.extend([({"a": v}, "boundary", f"one key ({h})") for v, _, h in edge_values(item)[:3]])
        out.append(({"": s}, "edge_empty", "an empty-string key"))
        out.append(({"é": s, "😀": s}, "unicode", "non-ASCII keys"))
        out.append(({"b": s, "a": s, "c": s}, "ordering", "keys not in sorted order"))
        return out
    if kind == "tuple":
        base = [simple_value(a) for a in spec.args]
        out = []
        for i, a in enumerate(spec.args):
            for v, cat, h in edge_values(a):
                out.append(([*base[:i], v, *base[i + 1 :]], cat, f"item {i}: {h}"))
        return out
    return []


def _neighbours(value: JSON, spec: TypeSpec) -> list[Edge]:
    """Values next to a public example's argument: one more, one fewer, reordered."""
    out: list[Edge] = []
    if spec.kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        out.extend(
            [
                (value + 1, "off_by_one", "one more than a public example"),
                (value - 1, "off_by_one", "one less"),
            ]
        )
    elif spec.kind == "str" and isinstance(value, str) and value:
        out.extend(
            [
                (value[:-1], "off_by_one", "a public example without its last character"),
                (value + value[-1], "off_by_one", "a public example with its last character repeated"),
                (value.upper(), "type_corner", "a public example in upper case"),
                (value[::-1], "ordering", "a public example reversed"),
            ]
        )
    elif spec.kind == "list" and isinstance(value, list) and value:
        items = cast("list[JSON]", value)
        out.extend(
            [
                (items[:-1], "off_by_one", "a public example without its last element"),
                (items[1:], "off_by_one", "a public example without its first element"),
                ([*items, items[-1]], "off_by_one", "a public example with its last element repeated"),
                (items[::-1], "ordering", "a public example reversed"),
            ]
        )
    return [e for e in out if conforms(e[0], spec)]


def seed_inputs(task: CodeTask) -> list[tuple[list[JSON], Category, str]]:
    """Hand-picked inputs: each argument of a base call (the first public example, else simple values)
    replaced by each edge value of its type, then neighbours of every public example's arguments."""
    specs = task.arg_types
    examples = [
        list(t.args)
        for t in task.public_tests
        if isinstance(t, CallTest)
        and not t.kwargs
        and len(t.args) == len(specs)
        and all(conforms(a, s) for a, s in zip(t.args, specs, strict=True))
    ]
    base = examples[0] if examples else [simple_value(s) for s in specs]
    out: list[tuple[list[JSON], Category, str]] = []
    for i, spec in enumerate(specs):
        for v, cat, hint in edge_values(spec):
            out.append(([*base[:i], v, *base[i + 1 :]], cat, f"argument {i}: {hint}"))
    for ex in examples:
        for i, spec in enumerate(specs):
            for v, cat, hint in _neighbours(ex[i], spec):
                out.append(([*ex[:i], v, *ex[i + 1 :]], cat, f"argument {i}: {hint}"))
    return out


# --------------------------------------------------------------------------------------------- strategies

@cache
def _texts() -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    from hypothesis import strategies as st

    return (
        st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=5),
    )


def strategy_for(spec: TypeSpec, depth: int = 0) -> st.SearchStrategy[JSON]:
    from hypothesis import strategies as st

    _text, _keys = _texts()
    """A hypothesis strategy for JSON values of ``spec`` (edge values mixed in with ordinary ones)."""
    kind = spec.kind
    edges = [v for v, _, _ in edge_values(spec) if not (isinstance(v, list | str) and len(v) >= _LARGE_LEN)]
    if kind == "int":
        base: st.SearchStrategy[JSON] = st.one_of(
            st.integers(min_value=-20, max_value=20),
            st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT),
        )
    elif kind == "float":
        base = st.one_of(
            st.integers(min_value=-20, max_value=20).map(float),
            st.floats(min_value=-_MAX_FLOAT, max_value=_MAX_FLOAT, allow_nan=False, allow_infinity=False),
        )
    elif kind == "str":
        base = st.one_of(st.text(alphabet="abcAB _-,.0123", max_size=10), _text)
    elif kind == "bool":
        base = st.booleans()
    elif kind == "none":
        base = st.none()
    elif kind == "optional":
        return st.one_of(st.none(), strategy_for(spec.args[0], depth))
    elif kind == "list":
        base = st.lists(strategy_for(spec.args[0], depth + 1), max_size=8 if depth == 0 else 4)
    elif kind == "dict":
        base = st.dictionaries(_keys, strategy_for(spec.args[0], depth + 1), max_size=5 if depth == 0 else 3)
    elif kind == "tuple":
        base = st.tuples(*(strategy_for(a, depth + 1) for a in spec.args)).map(list)
    else:  # any
        base = st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(-100, 100), _text),
            lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
            max_leaves=6,
        )
    if not edges:
        return base
    return st.one_of(st.sampled_from(edges), base)


def random_inputs(specs: Sequence[TypeSpec], count: int, seed: int) -> list[list[JSON]]:
    """Up to ``count`` argument lists drawn from the specs' strategies; the same for the same seed.

    A seeded ``given`` run with no example database and only the generate phase (nothing is shrunk here:
    the adversary shrinks counterexamples itself, in sandbox batches).
    """
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    if count <= 0:
        return []
    out: list[list[JSON]] = []
    strategy = st.tuples(*(strategy_for(s) for s in specs)).map(list)

    @settings(
        database=None,
        max_examples=count,
        phases=[Phase.generate],
        derandomize=False,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def collect(args: list[JSON]) -> None:
        out.append(args)

    collect()
    return out[:count]


# --------------------------------------------------------------------------------------------- categories


def classify(args: Sequence[JSON]) -> Category:
    """The category of a generated input: large, then non-ASCII, then empty, else ``other``."""
    large = unicode = empty = False
    stack: list[JSON] = list(args)
    while stack:
        v = stack.pop()
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            large |= abs(v) >= 2**31
        elif isinstance(v, float):
            large |= abs(v) >= 1e12
        elif isinstance(v, str):
            large |= len(v) >= 1000
            unicode |= not v.isascii()
            empty |= not v
        elif isinstance(v, list):
            large |= len(v) >= 100
            empty |= not v
            stack += v
        else:
            large |= len(v) >= 100
            empty |= not v
            unicode |= any(not k.isascii() for k in v)
            stack += list(v.values())
    if large:
        return "large_input"
    if unicode:
        return "unicode"
    if empty:
        return "edge_empty"
    return "other"


# --------------------------------------------------------------------------------------------- shrinking


def input_size(args: Sequence[JSON], kwargs: object = None) -> tuple[int, str]:
    """The order the shrinker minimises: length of the JSON text, then the text itself."""
    text = json.dumps([list(args), kwargs or {}], ensure_ascii=False, sort_keys=True)
    return len(text), text


def _shrink_value(value: JSON, spec: TypeSpec) -> Iterator[JSON]:
    kind = spec.kind
    if kind == "optional":
        if value is not None:
            yield None
            yield from _shrink_value(value, spec.args[0])
        return
    if kind == "any":
        if value is not None:
            yield None
        return
    if isinstance(value, bool):
        if value:
            yield False
    elif isinstance(value, int):
        half = abs(value) // 2 * (-1 if value < 0 else 1)  # toward zero, exact for ints past the float range
        for c in (0, 1, half, value - (1 if value > 0 else -1)):
            if abs(c) < abs(value) or (abs(c) == abs(value) and c > value):
                yield c
    elif isinstance(value, float):
        if not math.isfinite(value):  # inf and NaN have no integer part to keep; 0.0 and 1.0 are simpler
            cands = [0.0, 1.0, 1.7976931348623157e308 if value > 0 else -1.7976931348623157e308]
        else:
            cands = [0.0, 1.0, float(math.trunc(value)), value / 2 if abs(value) > 1 else 0.0]
        for c in cands:
            if abs(c) < abs(value) or (c != value and len(repr(c)) < len(repr(value))):
                yield c
    elif isinstance(value, str):
        n = len(value)
        if n:
            yield ""
            yield value[: n // 2]
            yield value[n // 2 :]
            yield value[:-1]
            yield value[1:]
            if n <= 8:
                for i in range(n):
                    yield value[:i] + value[i + 1 :]
            if not value.isascii():
                yield "".join(ch if ch.isascii() else "a" for ch in value)
    elif isinstance(value, list):
        items = cast("list[JSON]", value)
        n = len(items)
        if kind == "tuple":
            for i, (item, item_spec) in enumerate(zip(items, spec.args, strict=False)):
                for c in _shrink_value(item, item_spec):
                    yield [*items[:i], c, *items[i + 1 :]]
            return
        if n:
            yield []
            yield items[: n // 2]
            yield items[n // 2 :]
            yield items[:-1]
            yield items[1:]
            if n <= 8:
                for i in range(n):
                    yield [*items[:i], *items[i + 1 :]]
                if kind == "list":
                    for i, item in enumerate(items):
                        for k, c in enumerate(_shrink_value(item, spec.args[0])):
                            if k >= 4:
                                break
                            yield [*items[:i], c, *items[i + 1 :]]
    elif isinstance(value, dict) and value:
        yield {}
        for key in value:
            yield {k: v for k, v in value.items() if k != key}
        if kind == "dict" and len(value) <= 6:
            for key, item in value.items():
                for k, c in enumerate(_shrink_value(item, spec.args[0])):
                    if k >= 3:
                        break
                    yield {**value, key: c}


def shrink_args(args: Sequence[JSON], specs: Sequence[TypeSpec], limit: int = 48) -> list[list[JSON]]:
    """Simpler argument lists than ``args`` (each still of the declared types), smallest first, at most
    ``limit``."""
    here = input_size(args)
    seen: set[str] = {here[1]}
    out: list[tuple[tuple[int, str], list[JSON]]] = []
    for i, spec in enumerate(specs[: len(args)]):
        for c in _shrink_value(args[i], spec):
            new = [*args[:i], c, *args[i + 1 :]]
            size = input_size(new)
            if size >= here or size[1] in seen or not conforms(c, spec):
                continue
            seen.add(size[1])
            out.append((size, new))
    out.sort(key=lambda p: p[0])
    return [new for _, new in out[:limit]]
