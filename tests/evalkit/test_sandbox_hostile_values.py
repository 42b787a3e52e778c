"""No candidate or answer can end an ``evalkit eval`` run (issue 29, item 1).

The comparison and the codec are total over every value the codec admits (ints of any size, floats of every kind,
strings with lone surrogates and control characters, deep and wide containers, every container type); every
verdict's host-side work is contained (an exception there is that candidate's ``host_rejected_value``, recorded);
results are written whatever text a candidate returned, raised or printed. The property tests generate hostile
values; the last ones mix them with honest candidates in one real ``evalkit eval --solver replay:FILE`` run through
the CLI and check that every verdict is there and the honest ones pass.
"""

from __future__ import annotations

import contextlib
import json
import math
import pickle
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import evalkit
from evalkit import Assertion, Verdict, check_assertion, json_equal
from evalkit.wall import TaggedError, tagged_decode, tagged_encode, tagged_to_json
from evalkit_cli import app
from evalkit_core import canonical_bytes
from strategies import (
    hostile_floats,
    hostile_ints,
    hostile_strings,
    hostile_texts,
    hostile_values,
    json_values,
)

runner = CliRunner()
TOLERANCES = st.sampled_from([None, 0.0, 1e-9, 0.01, 0.5, 1.0, 1e300])
NUMBERS = st.one_of(hostile_ints, hostile_floats)


def as_json(value: object) -> object:
    """What a call test's comparison sees of a value (None when it is not JSON: the host refuses it first)."""
    try:
        return tagged_to_json(tagged_decode(tagged_encode(value)))
    except TaggedError:
        return None


# ----------------------------------------------------------------------------------------- total functions


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(actual=st.one_of(hostile_values, NUMBERS), expected=st.one_of(json_values, NUMBERS), tol=TOLERANCES)
def test_json_equal_is_total(actual: object, expected: object, tol: float | None) -> None:
    assert isinstance(json_equal(as_json(actual), expected, tol), bool)
    assert isinstance(json_equal(expected, as_json(actual), tol), bool)


def exact_close(a: float, e: float, tol: float) -> bool:
    fa, fe, ft = Fraction(a), Fraction(e), Fraction(tol)
    return abs(fa - fe) <= max(ft * max(abs(fa), abs(fe)), ft)


@settings(max_examples=300)
@given(
    a=st.one_of(hostile_ints.filter(lambda n: abs(n) >= 2**1024), st.integers(min_value=2**1024, max_value=2**1100)),
    e=st.floats(allow_nan=False, allow_infinity=False),
    tol=st.sampled_from([1e-9, 0.5, 0.99, 1.0]),
)
def test_closeness_past_the_float_range_is_exact(a: int, e: float, tol: float) -> None:
    """``10**400`` against a float expected value: what ``math.isclose`` would say if it could, computed exactly."""
    assert json_equal(a, e, tol) is exact_close(a, e, tol)


def test_the_seen_example_overflows_no_more() -> None:
    with pytest.raises(OverflowError):
        math.isclose(10**400, 2.0, rel_tol=1e-9, abs_tol=1e-9)  # what ended the run before
    assert json_equal(10**400, 2.0, 1e-9) is False
    assert json_equal([1, 10**400], [1, 2.0], 1e-9) is False
    assert json_equal(10**400, 10**400, 1e-9) is True
    assert json_equal(-(10**400), float("-inf"), 1e-9) is False


ASSERTION_OPS = st.sampled_from(["keys_exactly", "path_equals", "path_in", "path_type", "path_len", "path_approx", "path_matches"])


def assertion_for(op: str, value: Any) -> Assertion:
    arguments: dict[str, Any] = {
        "keys_exactly": ["a"],
        "path_equals": value,
        "path_in": [value, 1.5],
        "path_type": "number",
        "path_len": 2,
        "path_approx": 12.5,
        "path_matches": "[a-z]+",
    }
    return Assertion(op=op, path="/amount", value=arguments[op], tolerance=0.01 if op == "path_approx" else None)  # type: ignore[arg-type]


@settings(max_examples=400)
@given(op=ASSERTION_OPS, actual=st.one_of(NUMBERS, hostile_strings, json_values), value=json_values)
def test_check_assertion_is_total(op: str, actual: object, value: object) -> None:
    """Structured answers too: a number that passes the schema but overflows ``path_approx``."""
    document = {"amount": actual}
    result = check_assertion(document, assertion_for(op, value))  # type: ignore[arg-type]
    assert result is None or isinstance(result, str)
    if result is not None:
        result.encode("utf-8")  # writable text


def test_path_approx_of_a_huge_number_fails_instead_of_raising() -> None:
    assertion = Assertion(op="path_approx", path="/amount", value=12.5, tolerance=0.01)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        _ = abs(10**400 - 12.5)
    assert check_assertion({"amount": 10**400}, assertion) is not None
    assert check_assertion({"amount": 10**4299}, assertion) is not None
    assert check_assertion({"amount": 12.505}, assertion) is None


@settings(max_examples=300)
@given(text=st.one_of(hostile_texts, hostile_strings, st.binary(max_size=300)))
def test_decoding_refuses_only_with_tagged_error(text: str | bytes) -> None:
    try:
        value = tagged_decode(text)
    except TaggedError:
        return
    with contextlib.suppress(TaggedError):
        tagged_to_json(value)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(value=hostile_values)
def test_what_crosses_decodes_to_itself(value: object) -> None:
    try:
        text = tagged_encode(value)
    except TaggedError:
        return  # refused at the candidate's end ("not data", too deep, too large)
    back = tagged_decode(text)
    assert type(back) is type(value)
    if "nan" not in repr(value):  # NaN is not equal to itself
        assert back == value


@settings(max_examples=300)
@given(detail=hostile_strings, actual=hostile_strings, output=hostile_strings)
def test_a_verdict_is_always_writable(detail: str, actual: str, output: str) -> None:
    """Lone surrogates are escaped where a verdict is made: results are written, digests made, whatever the text."""
    test = evalkit.TestVerdict("public/0", False, "exception", detail, actual)
    verdict = Verdict("code/x/001", "sha256:0", "sha256:0", (test,), (), output=output)
    row = canonical_bytes(verdict.to_json())
    assert row.decode("utf-8")
    assert len(test.detail) <= 2000


# ----------------------------------------------------------------------------------------- one real run

MEDIAN_TASK = {
    "family": "code",
    "description": "Return the median of a non-empty list of numbers.",
    "entry_point": "median",
    "signature": "def median(xs: list[float]) -> float:",
    "arg_types": ["list[float]"],
    "return_type": "float",
    "float_tolerance": 1e-9,
    "public_tests": [{"args": [[1, 3, 2]], "expected": 2.0}],
    "hidden_tests": [
        {"args": [[4, 1, 2, 3]], "expected": 2.5},
        {"args": [[7.5]], "expected": 7.5},
        {"check": "def check(candidate):\n    assert candidate([5, 1, 3]) == 3\n    assert candidate([2, 4]) == 3.0\n"},
    ],
}
MEDIAN = "def median(xs):\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n"
AMOUNT_TASK = {
    "family": "structured",
    "description": "Extract the amount.",
    "input_text": "The invoice is for 12.50 euros.",
    "schema": {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}},
    "reference": {"amount": 12.5},
    "public_assertions": [{"op": "path_type", "path": "/amount", "value": "number"}],
    "hidden_assertions": [
        {"op": "path_approx", "path": "/amount", "value": 12.5, "tolerance": 0.01},
        {"op": "path_in", "path": "/amount", "value": [12.5, 12.50001]},
    ],
}


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bank")
    code = root / "code" / "median" / "001"
    code.mkdir(parents=True)
    (code / "task.json").write_text(json.dumps(MEDIAN_TASK))
    (code / "reference.py").write_text(MEDIAN)
    structured = root / "structured" / "amount" / "001"
    structured.mkdir(parents=True)
    (structured / "task.json").write_text(json.dumps(AMOUNT_TASK))
    return root


def hostile_candidates(value: object) -> list[str]:
    """Ways a candidate hands ``value`` to the host: returned, raised, printed, written, returned inside a list,
    raised under an exception type named by it, and the same through the check's proxy."""
    blob = pickle.dumps(value)
    head = f"import pickle, sys\nV = pickle.loads({blob!r})\n"
    return [
        head + "def median(xs):\n    return V\n",
        head + "def median(xs):\n    return [V, V]\n",
        head + "def median(xs):\n    raise ValueError(V if isinstance(V, str) else repr(V)[:5000])\n",
        head + "def median(xs):\n    print(repr(V)[:100000]); print(V, file=sys.stderr)\n    return 2.0\n",
        head + "def median(xs):\n    open('/job/v', 'w', errors='surrogatepass').write(repr(V)[:100000])\n    return V\n",
        head + "def median(xs):\n    raise type(repr(V)[:200] if True else 'E', (Exception,), {})(repr(V)[:300])\n",
        head + "V2 = V\ndef median(xs):\n    if len(xs) == 1:\n        return V2\n    return V2 if isinstance(V2, str) else {'k': V2}\n",
    ]


def structured_answers(number: object) -> list[str]:
    text = json.dumps({"amount": number}) if not isinstance(number, float) or math.isfinite(number) else "{}"
    return [text, f"```json\n{text}\n```", json.dumps({"amount": [number]}, default=repr)]


def run_eval(bank: Path, tmp: Path, lines: list[dict[str, str]]) -> tuple[list[dict[str, Any]], str]:
    replay = tmp / "replay.jsonl"
    replay.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out, receipt = tmp / "results.jsonl", tmp / "receipt.json"
    result = runner.invoke(
        app,
        ["eval", "--tasks", str(bank), "--solver", f"replay:{replay}", "--out", str(out), "--receipt", str(receipt),
         "--json", "--workers", "2"],
    )
    assert result.exit_code == 0, result.output
    text = out.read_bytes().decode("utf-8")  # valid UTF-8 whatever the candidates said
    return [json.loads(line) for line in text.splitlines()], result.stdout


@settings(max_examples=6, deadline=None, phases=(Phase.explicit, Phase.generate), suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(values=st.lists(hostile_values, min_size=1, max_size=3), numbers=st.lists(NUMBERS, min_size=1, max_size=3))
def test_hostile_values_mixed_with_honest_candidates_in_one_run(
    bank: Path, tmp_path_factory: pytest.TempPathFactory, values: list[object], numbers: list[object]
) -> None:
    tmp = tmp_path_factory.mktemp("run")
    lines: list[dict[str, str]] = [{"task_id": "code/median/001", "completion": MEDIAN}]
    for value in values:
        lines += [{"task_id": "code/median/001", "completion": c} for c in hostile_candidates(value)]
    for number in numbers:
        lines += [{"task_id": "structured/amount/001", "completion": a} for a in structured_answers(number)]
    lines += [
        {"task_id": "code/median/001", "completion": f"```python\n{MEDIAN}```"},
        {"task_id": "structured/amount/001", "completion": '{"amount": 12.5}'},
    ]
    rows, _ = run_eval(bank, tmp, lines)
    assert len(rows) == len(lines)  # every verdict is there
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["task_id"]] = counts.get(row["task_id"], 0) + 1
        for part in ("public", "hidden"):
            assert row[part]["total"] == len(row[part]["tests"])
            for test in row[part]["tests"]:
                assert test["reason"] in {"ok", "wrong_answer", "exception", "timeout", "crash", "no_code", "no_json",
                                          "schema", "assertion", "host_rejected_value"}, test
        assert row["infra_error"] is None
    honest = [
        r for r in rows
        if r["sample"] == counts[r["task_id"]] - 1 or (r["task_id"] == "code/median/001" and r["sample"] == 0)
    ]
    assert len(honest) == 3
    for row in honest:  # the first and the last code answer, and the last structured one, are honest
        assert row["public"]["passed"] == row["public"]["total"], row
        assert row["hidden"]["passed"] == row["hidden"]["total"], row


def test_the_seen_examples_in_one_run(bank: Path, tmp_path: Path) -> None:
    """Issue 29's examples 1 and 2, each with an honest candidate after it: every verdict is written."""
    answers = [
        "def median(xs):\n    return 10**400\n",
        "def median(xs):\n    return [10**400]\n",
        "def median(xs):\n    return '\\ud800' + 'x'\n",
        "def median(xs):\n    raise ValueError('\\ud800' + repr(xs))\n",
        "def median(xs):\n    print('\\ud800\\x00\\u202e' * 1000)\n    return 2.0\n",
        MEDIAN,
    ]
    lines = [{"task_id": "code/median/001", "completion": a} for a in answers]
    lines += [
        {"task_id": "structured/amount/001", "completion": '{"amount": ' + "9" * 4000 + "}"},
        {"task_id": "structured/amount/001", "completion": '{"amount": 1' + "0" * 400 + "}"},
        {"task_id": "structured/amount/001", "completion": '{"amount": 12.5}'},
    ]
    rows, output = run_eval(bank, tmp_path, lines)
    by = [(r["task_id"], r["sample"]) for r in rows]
    assert by == [("code/median/001", i) for i in range(6)] + [("structured/amount/001", i) for i in range(3)]
    reasons = [[t["reason"] for t in (*r["public"]["tests"], *r["hidden"]["tests"])] for r in rows]
    assert reasons[0] == ["wrong_answer"] * 4
    assert reasons[1] == ["wrong_answer"] * 4
    assert reasons[2][0] == "wrong_answer"
    assert reasons[3] == ["exception"] * 4
    assert rows[3]["public"]["tests"][0]["detail"].startswith("ValueError: \\ud800[1, 3, 2]")
    assert reasons[4][0] == "ok"  # it printed, then answered 2.0
    assert reasons[5] == ["ok"] * 4
    assert reasons[6][0] == "ok"
    assert reasons[6][1] == "assertion"  # 10**4000 - 1 is a number, far from 12.5
    assert reasons[7][1] == "assertion"
    assert reasons[8] == ["ok", "ok", "ok"]
    assert json.loads(output)["summary"]["rollouts"] == 9


def test_an_exception_in_a_verdicts_host_side_work_is_that_candidates_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The containment point: a host exception while grading one answer (here forced in the structured comparison)
    fails that answer with ``host_rejected_value`` and records where; the other answers keep their verdicts."""
    from evalkit import grade_many, load_tasks
    from evalkit.grading import _verifiers

    bank_dir = Path(__file__).parent / "fixtures" / "tasks"
    person = next(t for t in load_tasks(bank_dir) if t.id == "structured/person/001")
    reference = json.dumps(person.reference)  # type: ignore[union-attr]
    real = _verifiers.check_assertion

    def flaky(document: Any, assertion: Any) -> str | None:
        if isinstance(document, dict) and document.get("name") == "boom":
            raise ArithmeticError("a message quoting the candidate: boom")
        return real(document, assertion)

    monkeypatch.setattr(_verifiers, "check_assertion", flaky)
    boom = json.dumps({**person.reference, "name": "boom"})  # type: ignore[dict-item]
    from evalkit import VerifierSettings

    items = [(person, reference), (person, boom), (person, reference)]
    verdicts = grade_many(items, sandbox=None, settings=VerifierSettings())  # type: ignore[arg-type]  # no code
    assert [v.all_public and v.all_hidden for v in verdicts] == [True, False, True]
    failed = verdicts[1]
    assert {t.reason for t in (*failed.public, *failed.hidden)} == {"host_rejected_value"}
    assert failed.host_error is not None
    assert failed.host_error.startswith("ArithmeticError at test_sandbox_hostile_values.py:")
    assert "boom" not in json.dumps(failed.to_json())
    assert failed.to_json()["host_error"] == failed.host_error


@pytest.mark.parametrize(
    "wrap",
    [lambda v: [v], lambda v: (v,), lambda v: frozenset({v}), lambda v: {0: v}, lambda v: [complex(1, 2), b"x", v]],
    ids=["list", "tuple", "frozenset", "dict", "mixed"],
)
def test_what_the_encoder_admits_the_decoder_reads(wrap: Any) -> None:
    """At every nesting around the cap, and for every container (a tag's own brackets counted), encoding succeeds
    exactly when the text decodes; inside a reply's brackets (``outer=1``) likewise."""
    for outer in (0, 1):
        for n in range(20, 110):
            value: object = None
            for _ in range(n):
                value = wrap(value)
            try:
                text = tagged_encode(value, outer=outer)
            except TaggedError:
                continue
            tagged_decode("[" * outer + text + "]" * outer)


def test_an_exception_while_the_host_reads_one_jobs_replies_is_that_jobs_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox's containment point: a host exception while it handles one job (forced here in the reading of its
    replies) fails that job, recorded with its type and place; the worker is proved again and the next jobs pass."""
    from evalkit import CallTest, CodeTask, Sandbox, SandboxLimits, TypeSpec, grade_many
    from evalkit.wall import _worker

    real = _worker.call_result

    def brittle(raw: bytes) -> Any:
        if b"boom" in raw:
            raise OverflowError("a message quoting the candidate: boom")
        return real(raw)

    monkeypatch.setattr(_worker, "call_result", brittle)
    task = CodeTask(
        id="code/double/001", description="", entry_point="f", signature="def f(x):", arg_types=(TypeSpec("int"),),
        return_type=TypeSpec("int"), float_tolerance=None, public_tests=(CallTest((1,), {}, 2),),
        hidden_tests=(CallTest((2,), {}, 4),), reference="", digest="sha256:" + "0" * 64, raw={},
    )
    honest = "def f(x):\n    return 2 * x\n"
    with Sandbox(SandboxLimits(cpu_seconds=1.0, wall_seconds=4.0), workers=1) as box:
        verdicts = grade_many(
            [(task, honest), (task, "def f(x):\n    return 'boom'\n"), (task, honest)], box, extract=False
        )
    assert [v.all_public and v.all_hidden for v in verdicts] == [True, False, True]
    failed = verdicts[1]
    assert {t.reason for t in (*failed.public, *failed.hidden)} == {"host_rejected_value"}
    assert failed.host_error is not None
    assert failed.host_error.startswith("OverflowError at test_sandbox_hostile_values.py:")
    assert "boom" not in json.dumps(failed.to_json())
