"""Hypothesis strategies shared by the test suite (one module, as attrs does)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import strategies as st

UTC = dt.UTC

# --- JSON-ish values ---------------------------------------------------------------------------------------

# Keys mix ASCII, the BMP above the surrogate block (U+E000..U+FFFF sorts *after* astral characters in UTF-16)
# and astral characters (emoji, CJK extension B), which is where code-point and UTF-16 orders disagree.
_KEY_ALPHABET = st.one_of(
    st.sampled_from("abcxyzAZ_-09 é"),
    st.characters(min_codepoint=0xE000, max_codepoint=0xFFFD),
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),
    st.characters(codec="utf-8"),
)
json_keys = st.text(alphabet=_KEY_ALPHABET, max_size=6)

# Strings: any valid Unicode scalar (no lone surrogates), including control characters that need escaping.
json_strings = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)

_MAX_SAFE = 2**53 - 1
json_ints = st.one_of(
    st.integers(min_value=-1000, max_value=1000),
    st.integers(min_value=-_MAX_SAFE, max_value=_MAX_SAFE),
    st.sampled_from([_MAX_SAFE, -_MAX_SAFE, 0]),
)


def _scaled(x: float, exp: int) -> float:
    return x * 10.0**exp


# Floats of every magnitude the normaliser keeps (|x| < 2**53) plus the six-decimal rounding boundaries.
json_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-(2.0**53) + 1, max_value=2.0**53 - 1),
    st.builds(
        _scaled,
        st.floats(min_value=-10.0, max_value=10.0, allow_nan=False, allow_infinity=False),
        st.integers(min_value=-9, max_value=15),
    ).filter(lambda f: abs(f) < 2.0**53),
    st.sampled_from(
        [
            0.0,
            -0.0,
            1e-7,
            -1e-7,
            4.9e-7,
            5e-7,
            5.1e-7,
            1e-6,
            1.5e-6,
            0.0001,
            0.00005,
            1e-5,
            0.1,
            0.5,
            1.0,
            -1.0,
            123456.1234565,
            1e15,
            1e15 + 0.5,
            4503599627370495.5,
            9007199254740991.0,
        ]
    ),
)

json_scalars = st.one_of(st.none(), st.booleans(), json_ints, json_floats, json_strings)

json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(json_keys, children, max_size=5),
    ),
    max_leaves=25,
)

# --- instants and rows -------------------------------------------------------------------------------------

# Stay well inside the calendar span and around the pinned 2022-11..2023-03 window, hitting DST changes.
instants = st.datetimes(
    min_value=dt.datetime(2021, 1, 1),
    max_value=dt.datetime(2024, 12, 31, 23, 59, 59),
    timezones=st.just(UTC),
).map(lambda t: t.replace(microsecond=0))

dates = st.dates(min_value=dt.date(2021, 1, 1), max_value=dt.date(2024, 12, 31))


@st.composite
def clock_rows(draw: st.DrawFn) -> dict[str, Any]:
    """A release row as the clocks see it: dates, an optional acceptance stamp, an optional later dissemination."""
    partition = draw(dates)
    published = partition + dt.timedelta(days=draw(st.integers(min_value=0, max_value=4)))
    accepted = draw(st.none() | instants)
    disseminated = None
    if draw(st.booleans()):
        base = accepted or dt.datetime.combine(partition, dt.time(12), tzinfo=UTC)
        disseminated = base + dt.timedelta(seconds=draw(st.integers(min_value=-3600, max_value=3 * 86400)))
    return {
        "partition_date": partition,
        "published_at": published,
        "acceptance_at": accepted,
        "disseminated_at": disseminated,
    }


# --- filings -----------------------------------------------------------------------------------------------

_ISSUERS = ("ACME WIDGETS INC", "ZEPHYR BIOTHERAPEUTICS CORP", "NORTHWIND TRADERS LLC", "Ünïcødé Holdings AG")
_FORMS = ("4", "8-K", "10-Q", "SC 13G", "424B2", "10-K")


@st.composite
def filings_args(draw: st.DrawFn, index: int) -> dict[str, Any]:
    """Keyword arguments for ``evalkit_core.Filing`` (kept as a dict so tests control the accession)."""
    partition = draw(st.dates(min_value=dt.date(2022, 11, 1), max_value=dt.date(2023, 3, 31)))
    issuer_i = draw(st.integers(min_value=0, max_value=len(_ISSUERS) - 1))
    accepted = draw(
        st.none()
        | st.builds(
            lambda h, m: dt.datetime.combine(partition, dt.time(h, m), tzinfo=UTC),
            st.integers(min_value=0, max_value=23),
            st.integers(min_value=0, max_value=59),
        )
    )
    cik = f"{1000 + issuer_i:010d}"
    accession = f"{cik}-22-{index:06d}"
    return {
        "accession": accession,
        "cik": cik,
        "issuer": _ISSUERS[issuer_i],
        "form": draw(st.sampled_from(_FORMS)),
        "partition_date": partition,
        "published_at": partition,
        "acceptance_at": accepted,
        "url": f"https://www.sec.gov/Archives/edgar/data/{int(cik)}/{accession}.txt",
    }


# --- values that cross the sandbox's wall (evalkit.wall._codec) ------------------------------------------------

_hashable_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_leaves = st.one_of(_hashable_leaves, st.floats(), st.complex_numbers(), st.builds(bytearray, st.binary(max_size=8)))
wall_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.sets(_hashable_leaves, max_size=4),
        st.frozensets(_hashable_leaves, max_size=4),
        st.dictionaries(_hashable_leaves, inner, max_size=4),
    ),
    max_leaves=20,
)

# Text a hostile process might write where a tagged value belongs: JSON-looking fragments, deep nesting, tags
# with the wrong payload, numbers too long to parse, lone surrogates.
_fragments = st.sampled_from(
    ["[", "]", "{", "}", '"$t"', '"$d"', '"$b"', '"$f"', ":", ",", '"', "\\", "NaN", "Infinity", "1e999", "9" * 5000,
     '{"$s":[[1]]}', '{"$d":[[[1],2]]}', '{"$b":"!!"}', '{"$x":1}', "\ud800", "null", "true", '"a"', "0"]
)
hostile_texts = st.one_of(
    st.text(max_size=200),
    st.lists(_fragments, max_size=60).map("".join),
    st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=5000).map(lambda n: '{"$t":' * n + "1" + "}" * n),
)

# --- model completions, hostile and not (extraction) -------------------------------------------------------

_MIB = 1 << 20

# Pieces real answers are made of, and pieces that break naive parsers: fences of every kind, prose, code with
# and without indentation, tags, JSON, stray brackets and quotes, line endings, NUL, lone surrogates.
_COMPLETION_PIECES = (
    "```python\n",
    "```\n",
    "```py3\n",
    "```json\n",
    "~~~\n",
    "```  ### Output:\n",
    "````\n",
    "   ```python\n",
    "Here is the code:\n",
    "This works because it returns x.\n",
    "Output: 5\n",
    "Explanation\n",
    "def solve(x):\n",
    "    return x\n",
    "    return helper(x)\n",
    " def solve(x):\n",
    "\tdef solve(x):\n\t\treturn x\n",
    "def helper(x):\n    return 2 * x\n",
    "import math\n",
    "solve = lambda x: x\n",
    "class Solution:\n    def solve(self, x):\n        return x\n",
    "if x:\n",
    "elif x:\n",
    "else:\n",
    "    pass\n",
    "@dec\n",
    "[PYTHON]\n",
    "[/PYTHON]\n",
    "<code>",
    "</code>",
    '{"a": [1, 2]}',
    '{"a": NaN}',
    "[1e400]",
    '["\\ud800"]',
    "[",
    "]",
    "{",
    "}",
    "(",
    ")",
    '"',
    "'",
    "'''",
    '"""',
    "\\",
    "\\\n",
    "#",
    "f'{",
    "\r\n",
    "\r",
    "\n",
    "\x00",
    "\ud800",
    "\udfff",
    " ",
    "\t",
)


@st.composite
def completions(draw: st.DrawFn) -> str:
    """A completion stitched from answer-shaped pieces and random text."""
    parts = draw(st.lists(st.one_of(st.sampled_from(_COMPLETION_PIECES), st.text(max_size=12)), max_size=30))
    return "".join(parts)


# Units repeated up to 1 MiB: deep nesting, long chains, unclosed fences and strings, many tiny blocks.
_ADVERSARIAL_UNITS = (
    "[",
    "]",
    "{",
    '{"a":',
    "[1] ",
    "(",
    "()",
    "[0]",
    ".b",
    "1+",
    "-",
    "not ",
    "lambda: ",
    "1 if 1 else ",
    "```\n",
    "```",
    "```python\n",
    "```python\ndef solve(\n",
    "```python\ndef solve(): return helper()\n```\n",
    "def solve(): pass\n",
    "f(1)\n",
    "elif x:\n    pass\n",
    "    ",
    "\n",
    '"',
    '\\"',
    "'''",
    "\\",
    "a",
    "\x00",
    "\ud800",
    "<code>",
    "[PYTHON]",
    "NaN",
    "see (the ",
)


@st.composite
def adversarial_texts(draw: st.DrawFn) -> str:
    """A head, one unit repeated up to 1 MiB (sizes biased to the small, the limits and the whole MiB), a tail."""
    head = draw(st.sampled_from(("", "def solve():\n    return ", "```python\n", "Here:\n", '{"a": ')))
    unit = draw(st.sampled_from(_ADVERSARIAL_UNITS))
    size = draw(st.sampled_from((10, 1_000, 64 << 10, 128 << 10, _MIB)) | st.integers(1, _MIB))
    tail = draw(
        st.sampled_from(("", "\n", "1" + ")" * 100, "]" * 1000, "\n```\n", "def solve(x):\n    return x\n"))
    )
    body = unit * max(1, size // len(unit))
    return (head + body + tail)[:_MIB]


_JSON_BRACKET_TOKENS = ("[", "]", "{", "}", ",", ":", "1", " ", "x", "null", '"a"', "true", "-", "2.5")

# Bracket soup without stray quotes: where the linear span search must agree with the brute-force rule.
json_bracket_texts = st.lists(st.sampled_from(_JSON_BRACKET_TOKENS), max_size=40).map("".join)


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    two = st.tuples(children, children)
    return st.one_of(
        two.map(lambda p: f"{p[0]} + {p[1]}"),
        two.map(lambda p: f"{p[0]} ** {p[1]}"),
        two.map(lambda p: f"{p[0]} and {p[1]}"),
        two.map(lambda p: f"{p[0]} < {p[1]}"),
        two.map(lambda p: f"({p[0]})({p[1]})"),
        two.map(lambda p: f"({p[0]})[{p[1]}]"),
        two.map(lambda p: f"[{p[0]}, {p[1]}]"),
        two.map(lambda p: f"{{{p[0]}: {p[1]}}}"),
        st.tuples(children, children, children).map(lambda p: f"{p[0]} if {p[1]} else {p[2]}"),
        children.map(lambda c: f"-{c}"),
        children.map(lambda c: f"not {c}"),
        children.map(lambda c: f"({c}).attr"),
        children.map(lambda c: f"lambda: {c}"),
        children.map(lambda c: f'f"{{{c}}}"'),
        children.map(lambda c: f"[y for y in {c} if y]"),
        children.map(lambda c: f"{c} if 1 else {c} if 2 else {c}"),
    )


_expressions = st.recursive(
    st.sampled_from(("x", "1", "'s'", "f'{x}'", "b'z'", "r'\\d'")), _combine, max_leaves=25
)


@st.composite
def python_expressions(draw: st.DrawFn) -> str:
    """A statement nesting random expressions: an assignment, or an if/elif chain inside indented blocks."""
    expr = draw(_expressions)
    shape = draw(st.integers(0, 2))
    if shape == 0:
        return f"x = {expr}\n"
    if shape == 1:
        branches = draw(st.integers(1, 12))
        elifs = "".join(f"elif {expr}:\n    y = {i}\n" for i in range(branches))
        return f"if x:\n    pass\n{elifs}else:\n    y = 0\n"
    depth = draw(st.integers(1, 20))
    lines = [" " * i + "if x:" for i in range(depth)]
    return "\n".join([*lines, " " * depth + f"y = {expr}"]) + "\n"


# --- hostile values a candidate can hand the host (issue 29): every value the codec admits -----------------------

_SURROGATE_TEXT = st.lists(
    st.one_of(
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),  # lone surrogates
        st.characters(max_codepoint=0x1F),  # control characters, NUL among them
        st.sampled_from(["\u202e", "\u2066", "\u200f", "\ufeff", "\x7f", "\u2028"]),  # bidi, BOM, DEL, line sep
        st.characters(),
    ),
    max_size=12,
).map("".join)
hostile_strings = st.one_of(
    _SURROGATE_TEXT,
    st.sampled_from(["\ud800", "\udfff" * 3, "a\x00b", "x" * 70_000, "\n" * 1000, "\u202eevil"]),
)
hostile_ints = st.one_of(
    st.integers(),
    st.integers(min_value=300, max_value=3999).map(lambda k: 10**k),  # past every float, within the codec
    st.integers(min_value=300, max_value=3999).map(lambda k: -(10**k) + 1),
    st.sampled_from([2**1024, -(2**1024), 2**53 + 1, (2**61 - 1) * 7]),
)
hostile_floats = st.one_of(
    st.floats(),  # NaN and infinities included
    st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, -5e-324, 2.2250738585072014e-308,
                     1.7976931348623157e308]),
)
_hostile_leaves = st.one_of(
    st.none(), st.booleans(), hostile_ints, hostile_floats, hostile_strings,
    st.binary(max_size=16), st.complex_numbers(), st.builds(bytearray, st.binary(max_size=8)),
)
_hostile_hashable = st.one_of(st.none(), st.booleans(), hostile_ints, st.floats(allow_nan=False), hostile_strings)


def _nest(value: object, depth: int) -> object:
    for _ in range(depth):
        value = [value]
    return value


hostile_values = st.one_of(
    st.recursive(
        _hostile_leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=4).map(tuple),
            st.sets(_hostile_hashable, max_size=4),
            st.frozensets(_hostile_hashable, max_size=4),
            st.dictionaries(_hostile_hashable, inner, max_size=4),
        ),
        max_leaves=12,
    ),
    st.builds(_nest, _hostile_leaves, st.integers(min_value=90, max_value=110)),  # around the codec's depth cap
    st.integers(min_value=1, max_value=60_000).map(lambda n: list(range(n))),  # wide
    st.integers(min_value=1, max_value=3000).map(lambda n: {str(i): [i, float(i)] for i in range(n)}),
)
