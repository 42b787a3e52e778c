"""The fuzz proposer's pure parts: edge values, strategies, seeded generation, the shrinker (no sandbox)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalkit import CATEGORIES, CodeTask, conforms, fuzz_proposals, load_tasks, parse_type
from evalkit.grading._fuzz import classify, edge_values, input_size, random_inputs, shrink_args

BANK = Path(__file__).parent / "fixtures" / "adversary"
SPECS = [
    "int",
    "float",
    "str",
    "bool",
    "none",
    "any",
    "list[int]",
    "dict[str,list[str]]",
    "optional[tuple[int,str]]",
    "list[tuple[int,float]]",
]


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _finite(v) for k, v in value.items())
    return True


@pytest.mark.parametrize("text", SPECS)
def test_edge_values_conform_and_are_categorised(text):
    spec = parse_type(text)
    edges = edge_values(spec)
    assert edges
    for value, category, hint in edges:
        assert conforms(value, spec), (value, text)
        assert category in CATEGORIES
        assert hint
        assert _finite(value)
        json.dumps(value, allow_nan=False)


@pytest.mark.parametrize("text", SPECS)
def test_random_inputs_conform_are_json_and_depend_only_on_the_seed(text):
    specs = [parse_type(text), parse_type("int")]
    a = random_inputs(specs, 40, seed=7)
    assert a == random_inputs(specs, 40, seed=7)
    assert 0 < len(a) <= 40
    for args in a:
        assert all(conforms(v, s) for v, s in zip(args, specs, strict=True))
        assert _finite(args)
        json.dumps(args, allow_nan=False)
        assert all(abs(v) <= 2**53 for v in args if isinstance(v, int))


def test_fuzz_proposals_are_seeded_and_bounded():
    task = next(t for t in load_tasks(BANK) if t.id == "code/pair-stats/001")
    assert isinstance(task, CodeTask)
    one = fuzz_proposals(task, budget=80, seed=1)
    assert one == fuzz_proposals(task, budget=80, seed=1)
    assert len(one) == 80
    assert one != fuzz_proposals(task, budget=80, seed=2)
    keys = [json.dumps(p.input_json(), sort_keys=True) for p in one]
    assert len(set(keys)) == len(keys)
    assert {p.category for p in one} >= {"edge_empty", "boundary", "unicode", "large_input"}
    for p in one:
        assert all(conforms(a, s) for a, s in zip(p.args, task.arg_types, strict=True))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("list[int]", [5, -3, 1000, 7]),
        ("str", "héllo wörld"),
        ("dict[str,list[str]]", {"a": ["x", "yy"], "b": []}),
        ("optional[tuple[int,str]]", [12, "abc"]),
        ("float", 1234.5678),
        ("int", -(2**40)),
    ],
)
def test_shrink_candidates_are_smaller_and_of_the_declared_type(text, value):
    spec = parse_type(text)
    options = shrink_args([value], [spec])
    assert options
    for args in options:
        assert conforms(args[0], spec)
        assert input_size(args) < input_size([value])
    assert [input_size(a) for a in options] == sorted(input_size(a) for a in options)


def test_classify():
    assert classify([[0] * 200]) == "large_input"
    assert classify(["é"]) == "unicode"
    assert classify([[], 3]) == "edge_empty"
    assert classify([[1, 2], "ab"]) == "other"


@pytest.mark.parametrize(
    ("value", "spec"),
    [(10**400, "int"), (-(10**400), "int"), (2**1024 + 1, "int"), (float("inf"), "float"), (float("-inf"), "float"),
     (float("nan"), "float"), (1.7e308, "float"), (5e-324, "float"), ([10**400, 3], "list[int]"),
     ({"k": float("inf")}, "dict[str, float]")],
)
def test_shrinking_a_proposal_is_total_over_numbers_past_the_float_range(value: object, spec: str) -> None:
    """A model-proposed input past the float range (or not finite) shrinks without raising, to values of its type,
    each smaller than it; for an int the halving truncates toward zero exactly (no detour through float)."""
    parsed = parse_type(spec)
    options = shrink_args([value], [parsed])
    assert all(conforms(o[0], parsed) for o in options)
    assert all(input_size(o) < input_size([value]) for o in options)
    if isinstance(value, int):
        assert [(abs(value) // 2) * (-1 if value < 0 else 1)] in options
