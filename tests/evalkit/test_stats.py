"""The Wilson score interval and the standard error that go beside every pass rate."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalkit.grading._eval import summary_intervals
from evalkit.grading._stats import standard_error, wilson_interval


@pytest.mark.parametrize(
    ("s", "n", "lo", "hi"),
    [(0, 10, 0.0, 0.277533), (10, 10, 0.722467, 1.0), (5, 10, 0.236593, 0.763407), (1, 1, 0.206549, 1.0)],
)
def test_wilson_matches_known_values(s, n, lo, hi):
    got = wilson_interval(s, n)
    assert got is not None
    assert got == pytest.approx((lo, hi), abs=2e-6)


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_holds_the_share_and_stays_in_the_unit_interval(sn):
    s, n = sn
    got = wilson_interval(s, n)
    assert got is not None
    lo, hi = got
    assert 0.0 <= lo <= s / n + 1e-6 and s / n - 1e-6 <= hi <= 1.0


def test_no_trials_no_interval_and_bad_counts_refused():
    assert wilson_interval(0, 0) is None
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        wilson_interval(3, 2)


def test_standard_error_of_the_mean():
    assert standard_error([1.0]) is None
    assert standard_error([0.0, 1.0, 0.0, 1.0]) == round(math.sqrt((1 / 3) / 4), 6)


def test_eval_intervals_count_what_the_summary_counts():
    def row(ok: bool, infra: str | None = None) -> dict:
        block = {"passed": int(ok), "total": 1}
        return {"task_id": "t", "infra_error": infra, "public": block, "hidden": block}

    iv = summary_intervals([row(True)] * 5 + [row(False)] * 5 + [row(False, "timeout")])
    assert iv["hidden_pass_rate"] == list(wilson_interval(5, 10) or ())
    assert str(iv["method"]).startswith("Wilson score interval, 95%")
