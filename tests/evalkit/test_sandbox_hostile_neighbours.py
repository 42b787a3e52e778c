"""Neighbours of issue 29's classes that nobody named (item 7): starvation between workers, hostile values aimed at
the long-lived checker server, ``/job`` filled under memory pressure, other encodings in answers, and the receipt of
a run full of hostile answers. Each asserts the exact outcome for the hostile candidate and that the honest ones
around it are untouched."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit import (
    CallTest,
    CheckTest,
    CodeTask,
    Sandbox,
    SandboxLimits,
    TypeSpec,
    grade,
    grade_many,
    verify_eval_receipt,
)
from evalkit.wall import user_processes
from evalkit_cli import app

pytestmark = pytest.mark.needs("root", "bwrap", "seccomp")  # attacks on the full wall

LIMITS = SandboxLimits(cpu_seconds=1.0, wall_seconds=6.0, memory_bytes=512 << 20, disk_bytes=32 << 20)
HONEST = "def f(x):\n    return 2 * x\n"


def task(check: bool = False) -> CodeTask:
    hidden: tuple[CallTest | CheckTest, ...] = (
        (CheckTest("def check(candidate):\n    assert candidate(3) == 6\n    assert candidate(4) == 8\n"),)
        if check
        else (CallTest((3,), {}, 6), CallTest((4,), {}, 8))
    )
    return CodeTask(
        id="code/neighbour/001",
        description="double",
        entry_point="f",
        signature="def f(x):",
        arg_types=(TypeSpec("int"),),
        return_type=TypeSpec("int"),
        float_tolerance=None,
        public_tests=(CallTest((1,), {}, 2),),
        hidden_tests=hidden,
        reference=HONEST,
        digest="sha256:" + "0" * 64,
        raw={},
    )


def reasons(verdict: object) -> list[str]:
    return [t.reason for t in (*verdict.public, *verdict.hidden)]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def pair() -> Iterator[Sandbox]:
    with Sandbox(LIMITS, workers=2) as box:
        yield box
    assert user_processes(box.uids) == []


@pytest.fixture(scope="module")
def single() -> Iterator[Sandbox]:
    with Sandbox(LIMITS, workers=1) as box:
        yield box
    assert user_processes(box.uids) == []


def test_a_candidate_burning_cpu_does_not_make_others_time_out(pair: Sandbox) -> None:
    """Two burners (every test spins until its CPU budget is gone) among honest candidates, over two workers: the
    burners time out, every honest candidate passes. Budgets are CPU time, and the wall clock is a multiple of it."""
    burner = "def f(x):\n    while True:\n        x += 1\n"
    items = [(task(), burner), *[(task(), HONEST)] * 6, (task(check=True), burner), *[(task(check=True), HONEST)] * 4]
    started = time.monotonic()
    verdicts = grade_many(items, pair, extract=False)
    elapsed = time.monotonic() - started
    assert reasons(verdicts[0]) == ["timeout"] * 3
    assert reasons(verdicts[7]) == ["timeout", "timeout"]
    for v in (*verdicts[1:7], *verdicts[8:]):
        assert reasons(v) == ["ok"] * len(reasons(v)), reasons(v)
    assert elapsed < 60, elapsed


CHECKER_ATTACKS = {
    "a wide list near the reply cap": ("def f(x):\n    return list(range(120_000))\n", "wrong_answer"),
    "an int of 3,999 digits": ("def f(x):\n    return 10**3998\n", "wrong_answer"),
    "ints that share one hash": ("def f(x):\n    return {(2**61 - 1) * i for i in range(1, 2000)}\n", "wrong_answer"),
    "nesting at the codec's cap": ("def f(x):\n    v = 1\n    for _ in range(98):\n        v = [v]\n    return v\n", "wrong_answer"),
    "a string of lone surrogates": ("def f(x):\n    return '\\ud800' * 200_000\n", "wrong_answer"),
    "a dict with keys of every kind": (
        "def f(x):\n    return {i if i % 3 else str(i) if i % 2 else (i, float(i)): i for i in range(20_000)}\n",
        "wrong_answer",
    ),
}


@pytest.mark.parametrize("name", sorted(CHECKER_ATTACKS))
def test_hostile_values_do_not_slow_the_checker_for_the_next_candidate(single: Sandbox, name: str) -> None:
    """The checker server outlives checks: a hostile value is decoded there, bounded and in linear time, and the next
    candidate's check on the same server passes in about the time an honest one takes alone."""
    source, expected = CHECKER_ATTACKS[name]
    baseline_start = time.monotonic()
    assert reasons(grade(task(check=True), HONEST, single, extract=False)) == ["ok", "ok"]
    baseline = time.monotonic() - baseline_start
    v = grade(task(check=True), source, single, extract=False)
    assert reasons(v)[1] == expected, v
    started = time.monotonic()
    after = grade(task(check=True), HONEST, single, extract=False)
    assert reasons(after) == ["ok", "ok"]
    assert time.monotonic() - started < baseline + 2.0


JOB_FILLERS = {
    "fill /job, then return": (
        "def f(x):\n"
        "    chunk = b'x' * (1 << 20)\n"
        "    n = 0\n"
        "    try:\n"
        "        with open('/job/fill', 'wb') as fh:\n"
        "            while True:\n"
        "                fh.write(chunk)\n"
        "                n += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "    return 2 * x\n"
    ),
    "hold memory, then fill /job": (
        "def f(x):\n"
        "    hold = bytearray(300 << 20)\n"
        "    chunk = b'y' * (1 << 20)\n"
        "    try:\n"
        "        with open('/job/fill', 'wb') as fh:\n"
        "            while True:\n"
        "                fh.write(chunk)\n"
        "    except (OSError, MemoryError):\n"
        "        pass\n"
        "    return 2 * x + len(hold) * 0\n"
    ),
    "fill /job until memory runs out": (
        "def f(x):\n"
        "    keep = []\n"
        "    i = 0\n"
        "    while True:\n"
        "        keep.append(bytearray(16 << 20))\n"
        "        with open(f'/job/f{i}', 'wb') as fh:\n"
        "            fh.write(b'z' * (4 << 20))\n"
        "        i += 1\n"
    ),
}


@pytest.mark.parametrize("name", sorted(JOB_FILLERS))
def test_job_filled_under_memory_pressure_is_that_candidates_business(single: Sandbox, name: str) -> None:
    """/job is a size-capped tmpfs per test: filling it, with or without the memory near the limit, ends in that
    candidate's own verdict; nothing is left, and the next candidate is graded as if nothing happened."""
    v = grade(task(), JOB_FILLERS[name], single, extract=False)
    assert v.infra_error is None
    if name == "fill /job until memory runs out":
        assert set(reasons(v)) <= {"exception", "crash"}, v
    else:
        assert reasons(v) == ["ok", "ok", "ok"], v
    single.settle()
    after = grade(task(), HONEST, single, extract=False)
    assert reasons(after) == ["ok", "ok", "ok"]


ODD_ANSWERS = [
    "def f(x):\n    return 2 * x\n\x00",
    "\u202e" + "def f(x):\n    return 2 * x\n",
    "def f(x):\n    return 2 * x  # " + "a" * 900_000 + "\n",
    "```python\ndef f(x):\n    return 2 * x\n```\n" + "\ud800" * 1000,
    "def f(x):\n    return '\\x00\\u202e' + str(x)\n",
    "def f(x):\n    raise ValueError('\\x00' * 10_000 + '\\u2028' + str(x))\n",
    "def f(x):\n    return 2 * x\n" * 30_000,
]


def test_odd_encodings_in_answers_and_the_receipt_of_their_run(tmp_path: Path) -> None:
    """NUL, bidi marks, lone surrogates and very long lines, in answers and in what they return or raise, through
    the CLI: every verdict is written, the honest answer passes, and the receipt verifies."""
    bank = tmp_path / "bank" / "code" / "neighbour" / "001"
    bank.mkdir(parents=True)
    (bank / "task.json").write_text(
        json.dumps(
            {
                "family": "code",
                "description": "double",
                "entry_point": "f",
                "signature": "def f(x: int) -> int:",
                "arg_types": ["int"],
                "return_type": "int",
                "public_tests": [{"args": [1], "expected": 2}],
                "hidden_tests": [{"args": [3], "expected": 6}, {"args": [4], "expected": 8}],
            }
        )
    )
    (bank / "reference.py").write_text(HONEST)
    replay = tmp_path / "replay.jsonl"
    lines = [*ODD_ANSWERS, HONEST]
    replay.write_text("".join(json.dumps({"task_id": "code/neighbour/001", "completion": a}) + "\n" for a in lines))
    out, receipt = tmp_path / "results.jsonl", tmp_path / "receipt.json"
    result = CliRunner().invoke(
        app,
        ["eval", "--tasks", str(tmp_path / "bank"), "--solver", f"replay:{replay}", "--out", str(out),
         "--receipt", str(receipt), "--json"],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_bytes().decode("utf-8").splitlines()]
    assert [r["sample"] for r in rows] == list(range(len(lines)))
    assert rows[-1]["public"]["passed"] == 1
    assert rows[-1]["hidden"]["passed"] == 2
    assert all(r["infra_error"] is None for r in rows)
    checks = verify_eval_receipt(receipt)
    assert all(ok for _, ok, _ in checks), checks
