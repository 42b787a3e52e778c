"""Canonical JSON (RFC 8785 after evalkit's normalisation) and sha256 digests."""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from collections import OrderedDict

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from evalkit_core import (
    CanonicalError,
    canonical_bytes,
    canonical_object,
    canonical_string,
    digest,
    digest_bytes,
    file_digest,
    normalize,
)
from strategies import json_floats, json_values

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def f64(hex_bits: str) -> float:
    """The IEEE 754 double with the given bit pattern (as RFC 8785 Appendix B writes them)."""
    return struct.unpack(">d", bytes.fromhex(hex_bits))[0]


# --- the reference itself: RFC 8785's own examples, written out by hand from the RFC ---------------------------

# RFC 8785 Appendix B: IEEE 754 bit pattern -> JSON number text.
RFC_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]

# RFC 8785 section 3.2.2 (the "numbers / string / literals" sample) and its canonical output.
RFC_SAMPLE = {
    "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
    "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
    "literals": [None, True, False],
}
RFC_SAMPLE_OUT = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
).encode()

# RFC 8785 section 3.2.3: property sorting by UTF-16 code units.
RFC_SORT_INPUT = {
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\U0001f600": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis",
}
RFC_SORT_OUT = (
    '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",'
    '"\u20ac":"Euro Sign","\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
).encode()


@pytest.mark.parametrize(("bits", "text"), RFC_NUMBERS)
def test_reference_number_serialisation_matches_rfc_appendix_b(bits: str, text: str) -> None:
    assert rfc8785.dumps(f64(bits)) == text.encode()


def test_reference_rfc_sample_and_sorting() -> None:
    assert rfc8785.dumps(RFC_SAMPLE) == RFC_SAMPLE_OUT
    assert rfc8785.dumps(RFC_SORT_INPUT) == RFC_SORT_OUT


# --- evalkit's canonical form: hand-written pins ---------------------------------------------------------------

# The same RFC numbers after evalkit's normalisation: six decimals, integral floats as ints, |x| >= 2**53 an error.
NORMALISED_RFC_NUMBERS = [
    ("0000000000000000", b"0"),
    ("8000000000000000", b"0"),
    ("0000000000000001", b"0"),  # 5e-324 rounds to zero
    ("8000000000000001", b"0"),  # -5e-324 rounds to -0.0, which is 0
    ("3eb0c6f7a0b5ed8c", b"0.000001"),  # 9.999999999999997e-7 rounds up to 1e-6
    ("3eb0c6f7a0b5ed8d", b"0.000001"),
    ("41b3de4355555553", b"333333333.333333"),
    ("41b3de4355555557", b"333333333.333333"),
    ("becbf647612f3696", b"-0.000003"),
    ("43143ff3c1cb0959", b"1424953923781206.2"),
]

TOO_BIG_RFC_NUMBERS = [
    "7fefffffffffffff",
    "ffefffffffffffff",
    "4340000000000000",
    "c340000000000000",
    "4430000000000000",
    "44b52d02c7e14af6",
    "444b1ae4d6e2ef50",
]

PINS = [
    (None, b"null"),
    (True, b"true"),
    (False, b"false"),
    (0, b"0"),
    (-0.0, b"0"),
    (1.0, b"1"),
    (-1.0, b"-1"),
    (123.0, b"123"),
    (4.50, b"4.5"),
    (0.1, b"0.1"),
    (1.23456789, b"1.234568"),
    (1.5e-5, b"0.000015"),  # Python's repr is 1e-05 style; JCS is not
    (0.00005, b"0.00005"),
    (1e-6, b"0.000001"),
    (4.9e-7, b"0"),
    (5.1e-7, b"0.000001"),
    (1e15 + 0.5, b"1000000000000000.5"),
    (2**53 - 1, b"9007199254740991"),
    (-(2**53) + 1, b"-9007199254740991"),
    (9007199254740991.0, b"9007199254740991"),
    ("", b'""'),
    ('a"b\\c/d', b'"a\\"b\\\\c/d"'),
    ("\b\f\n\r\t", b'"\\b\\f\\n\\r\\t"'),
    ("\x00\x01\x1f", b'"\\u0000\\u0001\\u001f"'),
    ("\x7f\u2028\u2029", '"\x7f\u2028\u2029"'.encode()),
    ("caf\u00e9 \U0001f600", '"caf\u00e9 \U0001f600"'.encode()),
    ([], b"[]"),
    ({}, b"{}"),
    ((1, "x", None), b'[1,"x",null]'),
    ({"b": 1, "a": [True, False, None]}, b'{"a":[true,false,null],"b":1}'),
    ({"z": {"b": [1, {"d": 2.0, "c": 3}]}, "a": ""}, b'{"a":"","z":{"b":[1,{"c":3,"d":2}]}}'),
    ({"\ufb33": 1, "\U0001f600": 2}, '{"\U0001f600":2,"\ufb33":1}'.encode()),  # UTF-16 order, not code points
    ({"\ue000": {"\U00010000": 0.5, "a": -0.0}}, '{"\ue000":{"a":0,"\U00010000":0.5}}'.encode()),
    ({"aa": 1, "a": 2, "b": 3, "B": 4}, b'{"B":4,"a":2,"aa":1,"b":3}'),
    (OrderedDict([("y", 1), ("x", 2)]), b'{"x":2,"y":1}'),
]


@pytest.mark.parametrize(("bits", "expected"), NORMALISED_RFC_NUMBERS)
def test_rfc_numbers_after_normalisation(bits: str, expected: bytes) -> None:
    assert canonical_bytes(f64(bits)) == expected


@pytest.mark.parametrize("bits", TOO_BIG_RFC_NUMBERS)
def test_rfc_numbers_beyond_exact_range_are_rejected(bits: str) -> None:
    with pytest.raises(CanonicalError, match=r"2\*\*53"):
        canonical_bytes({"n": f64(bits)})


@pytest.mark.parametrize(("value", "expected"), PINS)
def test_pinned_outputs(value: object, expected: bytes) -> None:
    assert canonical_bytes(value) == expected


def test_rfc_sample_after_normalisation() -> None:
    sample = {**RFC_SAMPLE, "numbers": [333333333.33333329, 4.50, 2e-3, 0.000000000000000000000000001]}
    assert (
        canonical_bytes(sample)
        == (
            '{"literals":[null,true,false],"numbers":[333333333.333333,4.5,0.002,0],'
            '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
        ).encode()
    )


def test_rfc_sorting_example() -> None:
    assert canonical_bytes(RFC_SORT_INPUT) == RFC_SORT_OUT


def test_normalize_rounds_and_converts() -> None:
    assert normalize({"a": 1.0000004, "b": -0.0, "c": [2.0, 0.1234564999]}) == {
        "a": 1,
        "b": 0,
        "c": [2, 0.123456],
    }
    assert type(normalize(2.0)) is int
    assert type(normalize(-0.0)) is int
    assert normalize((1, [2])) == [1, [2]]


def test_normalize_does_not_change_its_input() -> None:
    value = {"a": [1.23456789, {"b": -0.0}]}
    normalize(value)
    canonical_bytes(value)
    assert value == {"a": [1.23456789, {"b": -0.0}]}
    assert math.copysign(1.0, value["a"][1]["b"]) == -1.0  # type: ignore[index]


# --- errors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (math.nan, "the top level"),
        ({"a": [1, {"b": math.nan}]}, "/a/1/b"),
        ({"x": math.inf}, "/x"),
        ([0, -math.inf], "/1"),
        ({"deep": {"er": [[float("nan")]]}}, "/deep/er/0/0"),
    ],
)
def test_nan_and_infinity_name_the_path(value: object, where: str) -> None:
    with pytest.raises(CanonicalError) as exc:
        canonical_bytes(value)
    assert where in str(exc.value)
    assert "finite" in str(exc.value)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (2**53, "the top level"),
        (-(2**53), "the top level"),
        ({"ids": [1, 2**64]}, "/ids/1"),
        ({"x": 2.0**53}, "/x"),
        ({"x": -1e20}, "/x"),
        ({"x": 1e300}, "/x"),
    ],
)
def test_numbers_beyond_2_pow_53_name_the_path(value: object, where: str) -> None:
    with pytest.raises(CanonicalError) as exc:
        canonical_bytes(value)
    assert where in str(exc.value)
    assert "2**53" in str(exc.value)


@pytest.mark.parametrize(
    ("value", "where", "kind"),
    [
        (b"raw", "the top level", "bytes"),
        ({"blob": bytearray(b"x")}, "/blob", "bytearray"),
        ({"tags": {"a", "b"}}, "/tags", "set"),
        ({"k": [frozenset()]}, "/k/0", "frozenset"),
        ({"when": object()}, "/when", "object"),
    ],
)
def test_non_json_types_are_rejected_naming_type_and_path(value: object, where: str, kind: str) -> None:
    with pytest.raises(CanonicalError) as exc:
        canonical_bytes(value)
    assert where in str(exc.value)
    assert kind in str(exc.value)


@pytest.mark.parametrize("key", [1, None, ("a",), b"k"])
def test_non_string_keys_are_rejected(key: object) -> None:
    with pytest.raises(CanonicalError, match="not a string"):
        canonical_bytes({"outer": {key: 1}})


@pytest.mark.parametrize(
    "value",
    [
        "\ud800",
        {"s": "abc\udfff"},
        {"\ud83d": 1},  # a lone high surrogate as a key
        {"s": "\ud800", "tiny": 0.00005},  # same, on the rfc8785 path (the small float forces it)
        {"\U0001f600": ["x\udc00"]},  # same, forced by an astral key
    ],
)
def test_lone_surrogates_are_rejected(value: object) -> None:
    with pytest.raises(CanonicalError, match="surrogate"):
        canonical_bytes(value)


def test_canonical_error_is_a_value_error_and_an_evalkit_error() -> None:
    from evalkit_core import EvalkitError

    with pytest.raises(EvalkitError):
        canonical_bytes(math.nan)
    with pytest.raises(ValueError):
        canonical_bytes(math.nan)


# --- digests --------------------------------------------------------------------------------------------------


def test_digest_format_and_value() -> None:
    d = digest({"b": 2, "a": 1.0})
    assert DIGEST_RE.match(d)
    assert d == "sha256:" + hashlib.sha256(b'{"a":1,"b":2}').hexdigest()
    assert digest({"a": 1, "b": 2}) == d
    assert digest({"a": 1, "b": 3}) != d
    assert digest_bytes(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 5 * (1 << 20) // 2])
def test_file_digest_equals_hashlib(tmp_path, size: int) -> None:
    data = (hashlib.sha256(str(size).encode()).digest() * (size // 32 + 1))[:size]
    p = tmp_path / "blob.bin"
    p.write_bytes(data)
    assert file_digest(p) == "sha256:" + hashlib.sha256(data).hexdigest()
    assert file_digest(str(p)) == digest_bytes(data)
    assert DIGEST_RE.match(file_digest(p))


def test_file_digest_of_missing_file_raises(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        file_digest(tmp_path / "nope")


# --- properties -----------------------------------------------------------------------------------------------


@given(json_values)
def test_canonical_bytes_equal_rfc8785_of_normalised(value: object) -> None:
    assert canonical_bytes(value) == rfc8785.dumps(normalize(value))


@given(json_floats)
def test_float_canonical_bytes_equal_rfc8785(value: float) -> None:
    assert canonical_bytes({"x": [value]}) == rfc8785.dumps({"x": [normalize(value)]})


@given(json_values)
def test_canonical_form_is_a_fixed_point(value: object) -> None:
    """What a reader parses back from canonical bytes canonicalises to the same bytes (receipts re-verify)."""
    once = canonical_bytes(value)
    parsed = json.loads(once)
    assert parsed == normalize(value)
    assert canonical_bytes(parsed) == once


@given(st.dictionaries(st.text(max_size=4), st.integers(-5, 5), min_size=2, max_size=8))
def test_key_insertion_order_does_not_matter(d: dict[str, int]) -> None:
    reversed_d = dict(reversed(list(d.items())))
    assert canonical_bytes(d) == canonical_bytes(reversed_d)
    assert digest(d) == digest(reversed_d)


@given(json_floats)
def test_rounding_to_six_decimals(value: float) -> None:
    n = normalize(value)
    assert abs(n - value) <= 5e-7 + abs(value) * 1e-15
    assert n == round(value, 6)


@given(
    st.dictionaries(
        st.text(max_size=6),
        st.one_of(st.text(max_size=8), st.none(), st.booleans()),
        max_size=8,
    )
)
def test_dicts_of_text_leaves_equal_rfc8785(d: dict[str, object]) -> None:
    """The fast path for dicts of text leaves (rendered rows) sorts and escapes as JCS does, whatever the keys."""
    assert canonical_bytes(d) == rfc8785.dumps(d)
    assert canonical_bytes({"rows": [d, d]}) == rfc8785.dumps({"rows": [d, d]})


def test_dict_of_text_leaves_with_a_non_string_key_names_it() -> None:
    with pytest.raises(CanonicalError, match="key 1 at /rows/0 is not a string"):
        canonical_bytes({"rows": [{"a": "x", 1: "y"}]})
    # a key beyond the BMP's low range still sorts by UTF-16 code units
    assert canonical_bytes({"\U0001f600": "a", "\uffff": "b"}) == rfc8785.dumps({"\U0001f600": "a", "\uffff": "b"})


# --- pre-encoded parts (the PIT trajectory's hot path) --------------------------------------------------------

_PLAIN_KEYS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'), max_size=8)


@given(st.dictionaries(_PLAIN_KEYS, json_values, max_size=8))
def test_canonical_object_of_encoded_members_equals_canonical_bytes(d: dict[str, object]) -> None:
    members = {k: canonical_bytes(v).decode() for k, v in d.items()}
    assert canonical_object(members).encode() == canonical_bytes(d) == rfc8785.dumps(normalize(d))


@given(st.text())
def test_canonical_string_equals_canonical_bytes(s: str) -> None:
    try:
        expected = canonical_bytes(s)
    except CanonicalError:  # a lone surrogate: the text is made, its encoding fails as canonical_bytes does
        with pytest.raises(UnicodeEncodeError):
            canonical_string(s).encode()
        return
    assert canonical_string(s).encode() == expected
    assert canonical_object({"k": canonical_string(s)}).encode() == canonical_bytes({"k": s})


@pytest.mark.parametrize("key", ['a"b', "a\\b", "\u00e9", "\n", "\U0001f600"])
def test_canonical_object_refuses_keys_that_need_escaping_or_sort_differently(key: str) -> None:
    with pytest.raises(ValueError, match="not plain ASCII"):
        canonical_object({key: "1"})
