"""The codec across the wall, and the host's reading of whatever a candidate's process writes: round trips for
data, and for anything else a TaggedError or a failing verdict, never a crash, whatever the bytes."""

from __future__ import annotations

import contextlib
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalkit.wall._codec import MAX_DEPTH, TaggedError, tagged_decode, tagged_encode, tagged_to_json
from evalkit.wall._exchange import call_result as _call_result
from evalkit.wall._exchange import check_result as _check_result
from strategies import hostile_texts, wall_values


def _same(a: object, b: object) -> bool:
    """Equal with types kept apart (a tuple is not a list, 1 is not True) and NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b  # type: ignore[arg-type]
    if isinstance(a, complex):
        return _same(a.real, b.real) and _same(a.imag, b.imag)  # type: ignore[union-attr]
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)  # type: ignore[index]
    return a == b


@given(wall_values)
def test_data_round_trips_with_its_types(value):
    assert _same(tagged_decode(tagged_encode(value)), value)


@given(hostile_texts)
def test_any_text_decodes_or_is_refused(text):
    with contextlib.suppress(TaggedError):
        tagged_decode(text)


@given(st.binary(max_size=300))
def test_any_reply_bytes_are_a_verdict(raw):
    run = _call_result(raw)
    assert run.status in {"value", "raised", "bad_return", "timeout"}
    assert _check_result(raw, None, None).status in {"done", "raised", "timeout", "bad_return", "crash"}


def test_not_data_is_refused_on_the_way_out():
    class Mine(list):
        pass

    for value in (Mine([1]), object(), print, range(3), {1: {2: Mine()}}):
        with pytest.raises(TaggedError):
            tagged_encode(value)


def test_nesting_and_size_caps():
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(TaggedError, match="nested deeper"):
        tagged_decode(deep)
    assert tagged_decode("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(TaggedError, match="larger than"):
        tagged_decode("[" + "1," * (1 << 20) + "1]")
    assert _call_result(b'["value",' + b"[" * 5000 + b"]" * 5000 + b"]").status == "bad_return"


def test_hostile_replies_are_read_in_linear_time():
    # 1 MiB of brackets, of escapes, of digits: each is refused or read well inside a second on this box
    for raw in (b"[" * (1 << 20), b'["value","' + b"\\\\" * (1 << 19) + b'"]', b'["value",' + b"9" * 4300 + b"]"):
        start = time.perf_counter()
        _call_result(raw)
        assert time.perf_counter() - start < 2.0


def test_call_values_are_json_for_call_tests():
    assert tagged_to_json((1, [2, (3,)], {"a": (4,)})) == [1, [2, [3]], {"a": [4]}]
    for not_json in ({1, 2}, b"x", 1j, float("nan"), {1: 2}):
        with pytest.raises(TaggedError):
            tagged_to_json(not_json)
    assert _call_result(b'["value",{"$s":[1]}]').status == "bad_return"
    assert _call_result(b'["value",{"$f":"nan"}]').status == "bad_return"
    assert _call_result(b'["raised","ValueError","bad"]').error_type == "ValueError"


HI, LO = chr(0xD800), chr(0xDC00)


@pytest.mark.parametrize("text", [HI + LO, "a" + chr(0xDBFF) + chr(0xDFFF) + "b", LO + HI, HI, "x" * 10 + chr(0xDFFF)])
def test_surrogate_code_units_cross_as_themselves_never_joined_into_one_character(text):
    """JSON's escapes join a high and a low surrogate written side by side into one astral character: a candidate
    returning the two code points '\\ud800\\udc00' must not arrive as '\\U00010000' (and pass as it)."""
    for value in (text, [text], (text, 1), {text: text}, {text}):
        back = tagged_decode(tagged_encode(value))
        assert back == value and type(back) is type(value)
    assert tagged_decode(tagged_encode("\ud800\udc00")) != "\U00010000"
    assert len(tagged_decode(tagged_encode("\ud800\udc00"))) == 2


def test_a_malformed_surrogate_tag_is_refused():
    for bad in ('{"$u":"AAAA"}x', '{"$u":"AAA="}', '{"$u":"AAARAA=="}', '{"$u":1}'):
        with pytest.raises(TaggedError):
            tagged_decode(bad)
