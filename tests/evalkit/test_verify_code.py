"""The code verifier: per-test verdicts, reasons, tolerance, digests, public/hidden kept apart."""

from __future__ import annotations

import hashlib
import hmac
import re
from pathlib import Path

import pytest

from evalkit import (
    CodeTask,
    Sandbox,
    SandboxLimits,
    VerifierSettings,
    grade,
    grade_many,
    json_equal,
    load_tasks,
    reference_solution,
)
from evalkit.wall._sandbox import SandboxJob
from evalkit_core import digest

BANK = Path(__file__).parent / "fixtures" / "tasks"
LIMITS = SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(LIMITS, workers=2) as box:
        yield box


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for t in load_tasks(BANK)}


def test_references_pass_everything(sandbox, tasks):
    verdicts = grade_many([(t, reference_solution(t)) for t in tasks.values()], sandbox, extract=False)
    for v in verdicts:
        assert v.infra_error is None
        assert v.all_public, v.task_id
        assert v.all_hidden, (v.task_id, [t for t in v.hidden if not t.passed])


def test_shallow_solution_passes_public_but_not_hidden(sandbox, tasks):
    rle = tasks["code/run-length-encode/001"]
    shallow = (
        "```python\n"
        "def rle(s):\n"
        "    out, i = '', 0\n"
        "    while i < len(s):\n"
        "        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n"
        "            j += 1\n"
        "        out += str(min(j - i, 9)) + s[i]\n"
        "        i = j\n"
        "    return out or None\n"
        "```\n"
    )
    v = grade(rle, shallow, sandbox)
    assert v.all_public
    assert [t.name for t in v.hidden if not t.passed] == ["hidden/0", "hidden/1"]
    assert v.hidden[0].reason == "wrong_answer"
    # hidden tests show a reason and digests keyed with the hidden tests, never the expected value or what the
    # candidate returned; a plain digest would give them away to anyone trying values
    key = digest([t.to_json() for t in rle.hidden_tests]).encode()

    def keyed(name: str, text: str) -> str:  # bound to the test and the answer graded
        message = f"{name}\n{digest(shallow)}\n{text}".encode()
        return "hmac-sha256:" + hmac.new(key, message, hashlib.sha256).hexdigest()

    assert v.hidden[0].actual == keyed("hidden/0", "null")
    withheld = keyed("hidden/1", 'expected "12a"')
    assert v.hidden[1].detail == f"wrong_answer (hidden test: detail withheld, {withheld})"
    assert v.hidden[1].actual == keyed("hidden/1", '"9a"')
    assert digest('expected "12a"') not in str(v.to_json())
    assert digest('"9a"') not in str(v.to_json())
    assert "12a" not in re.sub(r"hmac-sha256:[0-9a-f]{64}", "", str(v.to_json()))  # (a hex digest may hold it)
    assert (v.public_passed, len(v.public), v.hidden_passed, len(v.hidden)) == (3, 3, 2, 4)


def test_exception_reason_names_the_type(sandbox, tasks):
    v = grade(tasks["code/double/001"], "def double(n):\n    return {}[n]\n", sandbox, extract=False)
    assert {t.reason for t in (*v.public, *v.hidden)} == {"exception"}
    assert v.public[0].detail.startswith("KeyError")


def test_assert_style_failure_is_a_wrong_answer(sandbox, tasks):
    v = grade(tasks["code/run-length-encode/001"], "def rle(s):\n    return ''\n", sandbox, extract=False)
    check = v.public[2]
    assert check.reason == "wrong_answer"
    assert "AssertionError" in check.detail


def test_float_tolerance_applies_only_where_declared(sandbox, tasks):
    off = "def mean(xs):\n    return sum(xs) / len(xs) + 1e-12\n"
    assert grade(tasks["code/mean/001"], off, sandbox, extract=False).all_hidden
    far = "def mean(xs):\n    return sum(xs) / len(xs) + 1e-3\n"
    assert not grade(tasks["code/mean/001"], far, sandbox, extract=False).all_hidden


def test_missing_code_and_missing_entry_point(sandbox, tasks):
    double = tasks["code/double/001"]
    v = grade(double, "I cannot solve this.", sandbox)
    assert {t.reason for t in (*v.public, *v.hidden)} == {"no_code"}
    v = grade(double, "def triple(n):\n    return 3 * n\n", sandbox, extract=False)
    assert {t.reason for t in (*v.public, *v.hidden)} == {"exception"}
    assert "double" in v.public[0].detail


def test_verdict_carries_digests_and_is_deterministic(sandbox, tasks):
    double: CodeTask = tasks["code/double/001"]
    a = grade(double, "def double(n):\n    return n + n\n", sandbox, extract=False)
    b = grade(double, "def double(n):\n    return n + n\n", sandbox, extract=False)
    assert a == b
    assert a.task_digest == double.digest
    assert a.settings_digest == VerifierSettings(LIMITS).digest
    assert a.settings_digest != VerifierSettings(SandboxLimits(cpu_seconds=2.0)).digest
    data = a.to_json()
    assert data["public"] == {"passed": 3, "total": 3, "tests": [t.to_json() for t in a.public]}
    assert data["hidden"]["total"] == 3


def test_output_is_captured(sandbox, tasks):
    v = grade(
        tasks["code/double/001"],
        "print('hello from the candidate')\ndef double(n):\n    return 2 * n\n",
        sandbox,
        extract=False,
    )
    assert "hello from the candidate" in v.output


@pytest.mark.parametrize(
    ("actual", "expected", "tol", "ok"),
    [
        (1, 1.0, None, True),
        (True, 1, None, False),
        (1, True, None, False),
        (0.1 + 0.2, 0.3, None, False),
        (0.1 + 0.2, 0.3, 1e-9, True),
        ([1, [2, {"a": None}]], [1, [2, {"a": None}]], None, True),
        ({"a": 1}, {"a": 1, "b": 2}, None, False),
        ("1", 1, None, False),
        ([1, 2], [1, 2, 3], None, False),
    ],
)
def test_json_equal(actual, expected, tol, ok):
    assert json_equal(actual, expected, tol) is ok


def test_each_call_test_sees_a_freshly_loaded_module(sandbox):
    # a mutable default argument and a module global: state one test leaves must not reach the next
    src = "calls = []\ndef f(x, seen=[]):\n    seen.append(x)\n    calls.append(x)\n    return [len(seen), len(calls)]\n"
    tests = tuple({"args": [i], "kwargs": {}} for i in range(4))
    run = sandbox.run(SandboxJob(src, "f", tests))
    assert [t.value for t in run.tests] == [[1, 1]] * 4
    # in any order, the same verdicts
    assert [t.value for t in sandbox.run(SandboxJob(src, "f", tests[::-1])).tests] == [[1, 1]] * 4
    # fresh=False keeps one module (the adversary's reference runs): the state is visible there
    kept = sandbox.run(SandboxJob(src, "f", tests, fresh=False))
    assert [t.value for t in kept.tests] == [[1, 1], [2, 2], [3, 3], [4, 4]]


def test_a_candidates_stopiteration_cannot_end_a_checks_loop_early(sandbox):
    # raised through map(), a real StopIteration would end the check's loop and skip every assert in it
    src = "def f(x):\n    raise StopIteration\n"
    check = "def check(candidate):\n    for r in map(candidate, [1, 2, 3]):\n        assert r == 0\n"
    run = sandbox.run(SandboxJob(src, "f", ({"check": check},)))
    assert run.tests[0].status == "raised"
    assert run.tests[0].error_type == "CandidateError"
    assert "StopIteration" in run.tests[0].error
