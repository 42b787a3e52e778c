"""Properties of the adversary, for any fixture task and any proposal (typed, or arbitrary JSON and worse):

- a banked counterexample is passed by the reference (through the real verifier);
- no banked test holds a NaN or an infinity;
- a candidate identical to the reference never gets a counterexample.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit import (
    MINING_LIMITS,
    CodeTask,
    Proposal,
    Sandbox,
    adversarial_tests,
    bank_counterexamples,
    grade,
    load_tasks,
    validate_proposals,
)
from evalkit.grading._fuzz import CATEGORIES, strategy_for
from evalkit_core.store import Store

BANK = Path(__file__).parent / "fixtures" / "adversary"
TASKS = {t.id: t for t in load_tasks(BANK) if isinstance(t, CodeTask)}
DETERMINISTIC = sorted(k for k in TASKS if k != "code/noisy-len/001")
BUGGY = {
    "code/count-below/001": [
        "def count_below(xs, t):\n    return sum(1 for x in xs if x <= t)\n",
        "def count_below(xs, t):\n    return len([x for x in xs[1:] if x < t])\n",
        "def count_below(xs, t):\n    while True:\n        pass\n",
    ],
    "code/nan-mean/001": [
        "def mean(xs):\n    return sum(xs) / (len(xs) + 1) if xs else 0.0\n",
        "def mean(xs):\n    return float('nan')\n",
        "def mean(xs):\n    return sum(xs) / len(xs)\n",
    ],
    "code/noisy-len/001": ["def noisy_len(s):\n    return len(s)\n"],
    "code/pair-stats/001": [
        (
            "def pair_stats(pairs, scale, flags):\n    return {'n': len(pairs), 'sum': sum(c for c, _ in pairs),"
            " 'on': sorted(flags)}\n"
        ),
        "syntax error here(\n",
    ],
}

# arbitrary JSON-ish values, NaN and infinities included: the adversary must refuse them, not bank them
_wild = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**60), max_value=2**60),
        st.floats(),
        st.text(max_size=6),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def proposals(draw: st.DrawFn, task: CodeTask) -> Proposal:
    typed = st.tuples(*(strategy_for(s) for s in task.arg_types))
    wild = st.lists(_wild, min_size=len(task.arg_types), max_size=len(task.arg_types)).map(tuple)
    args = draw(st.one_of(typed, typed, wild))
    return Proposal(tuple(args), category=draw(st.sampled_from(CATEGORIES)), hint="drawn")


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(MINING_LIMITS, workers=3) as box:
        yield box


@settings(max_examples=25)
@given(data=st.data())
def test_banked_counterexamples_pass_the_reference_and_hold_no_nan(
    sandbox: Sandbox, data: st.DataObject
) -> None:
    task = TASKS[data.draw(st.sampled_from(sorted(TASKS)))]
    candidate = data.draw(st.sampled_from(BUGGY[task.id]))
    batch = data.draw(st.lists(proposals(task), min_size=1, max_size=5))
    found, rejected = validate_proposals(task, candidate, batch, sandbox)
    assert len(found) + len(rejected) == len(batch)
    with tempfile.TemporaryDirectory() as home, Store(Path(home) / "s.sqlite3") as store:
        bank_counterexamples(store, found)
        tests = adversarial_tests(store, task.id)
    assert len(tests) == len({c.input_digest for c in found})
    for t in tests:
        assert _finite(list(t.args))
        assert _finite(t.expected)
    if tests:
        with_adversarial = attrs.evolve(task, hidden_tests=tuple(tests))
        verdict = grade(with_adversarial, task.reference, sandbox, extract=False)
        assert verdict.infra_error is None
        assert verdict.all_hidden, [v for v in verdict.hidden if not v.passed]


@settings(max_examples=20)
@given(data=st.data())
def test_a_candidate_identical_to_the_reference_gets_no_counterexample(
    sandbox: Sandbox, data: st.DataObject
) -> None:
    task = TASKS[data.draw(st.sampled_from(DETERMINISTIC))]
    # the same program, written differently: nothing may depend on the source text being equal
    candidate = data.draw(st.sampled_from([task.reference, "# a copy\n" + task.reference + "\n\n"]))
    batch = data.draw(st.lists(proposals(task), min_size=1, max_size=6))
    found, rejected = validate_proposals(task, candidate, batch, sandbox)
    assert found == []
    assert all(r.reason != "redundant" for r in rejected)
