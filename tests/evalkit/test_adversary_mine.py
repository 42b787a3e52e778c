"""The adversary against real sandboxes: validation rules, shrinking, the bank, the model proposer, mine_bank."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from evalkit import (
    MINING_LIMITS,
    CodeTask,
    Proposal,
    Sandbox,
    adversarial_tests,
    bank_counterexamples,
    banked_counterexamples,
    fuzz_proposals,
    grade,
    load_tasks,
    mine,
    mine_bank,
    model_proposals,
    parse_model_proposals,
    render_prompt,
    validate_proposals,
)
from evalkit_core.models import ModelClient
from evalkit_core.store import Store

BANK = Path(__file__).parent / "fixtures" / "adversary"
OFF_BY_ONE = "def count_below(xs, t):\n    return sum(1 for x in xs if x <= t)\n"
WRONG_MEAN = "def mean(xs):\n    return sum(xs) / (len(xs) + 1) if xs else 0.0\n"


def _task(task_id: str) -> CodeTask:
    task = next(t for t in load_tasks(BANK) if t.id == task_id)
    assert isinstance(task, CodeTask)
    return task


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(MINING_LIMITS, workers=3) as box:
        yield box


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "store.sqlite3") as s:
        yield s


def test_off_by_one_candidate_gets_a_shrunk_categorised_counterexample(sandbox, store):
    task = _task("code/count-below/001")
    proposals = fuzz_proposals(task, budget=60, seed=0)
    ran, found, rejected = mine(task, OFF_BY_ONE, proposals, sandbox, max_counterexamples=3)
    assert ran >= 1
    assert found
    for c in found:
        assert c.category in {
            "off_by_one",
            "edge_empty",
            "boundary",
            "unicode",
            "large_input",
            "type_corner",
            "ordering",
            "other",
        }
        assert c.hint
        xs, t = c.args
        assert sum(1 for x in xs if x < t) == c.expected  # expected is the reference's answer
        assert c.actual != json.dumps(c.expected)
        assert t in xs  # the only way `<=` differs from `<`
    # shrunk: the smallest counterexample is a one-element list holding t
    smallest = min(found, key=lambda c: len(json.dumps(c.input_json)))
    assert len(smallest.args[0]) == 1
    assert abs(smallest.args[1]) <= 2
    assert any(c.category == "off_by_one" for c in found)
    assert "candidate_agrees" in {r.reason for r in rejected}
    assert bank_counterexamples(store, found) == len(found)
    tests = adversarial_tests(store, task.id)
    assert len(tests) == len(found)
    verdict = grade(attrs.evolve(task, hidden_tests=tuple(tests)), task.reference, sandbox, extract=False)
    assert verdict.all_hidden
    assert not grade(
        attrs.evolve(task, hidden_tests=tuple(tests)), OFF_BY_ONE, sandbox, extract=False
    ).all_hidden


def test_dedup_in_a_batch_and_against_the_bank(sandbox, store):
    task = _task("code/count-below/001")
    p = Proposal(([3], 3), category="off_by_one", hint="t in xs")
    found, rejected = validate_proposals(task, OFF_BY_ONE, [p, p], sandbox)
    assert len(found) == 1
    assert [r.reason for r in rejected] == ["duplicate"]
    assert bank_counterexamples(store, found) == 1
    assert bank_counterexamples(store, found) == 0  # the same input digest is banked once
    known = {c.input_digest for c in banked_counterexamples(store, task.id)}
    again, rejected = validate_proposals(task, OFF_BY_ONE, [p], sandbox, known=known)
    assert again == []
    assert [r.reason for r in rejected] == ["duplicate"]
    assert len(adversarial_tests(store, task.id)) == 1
    assert adversarial_tests(store, task.id, task_digest="sha256:" + "0" * 64) == []


def test_nan_returning_reference_banks_nothing(sandbox, store):
    task = _task("code/nan-mean/001")
    # the candidate disagrees on the empty list (0.0 vs NaN) and on every non-empty list
    proposals = [Proposal(([],), category="edge_empty"), Proposal(([2.0, 4.0],)), Proposal(([3.0],))]
    found, rejected = validate_proposals(task, WRONG_MEAN, proposals, sandbox)
    assert {r.reason for r in rejected} == {"nan"}
    assert [list(c.args) for c in found] == [[[2.0, 4.0]], [[3.0]]]
    ran, mined, _ = mine(task, WRONG_MEAN, fuzz_proposals(task, budget=60), sandbox)
    assert ran > 0
    bank_counterexamples(store, [*found, *mined])
    for c in banked_counterexamples(store, task.id):
        assert isinstance(c.expected, float)
        assert math.isfinite(c.expected)
        assert c.args != ([],)


def test_nondeterministic_reference_is_rejected(sandbox):
    task = _task("code/noisy-len/001")
    candidate = "def noisy_len(s):\n    return len(s)\n"
    proposals = fuzz_proposals(task, budget=30)
    found, rejected = validate_proposals(task, candidate, proposals, sandbox)
    assert found == []
    reasons = {r.reason for r in rejected}
    assert "nondeterministic" in reasons
    assert reasons <= {"nondeterministic", "candidate_agrees", "duplicate"}


def test_a_reference_that_draws_from_random_is_caught_on_a_single_input(sandbox):
    """With one input, proposal order and reverse order are the same run: only the two seeds the reference runs
    under tell its random draws apart (every job's process is seeded with its job's seed, so without them both runs
    drew the same number and a random answer could be banked)."""
    task = _task("code/noisy-len/001")
    source = "import random\n\ndef noisy_len(s):\n    return len(s) + random.randint(0, 10**9)\n"
    noisy = attrs.evolve(task, reference=source)
    for text in ("x", "abc", "hello"):
        found, rejected = validate_proposals(noisy, "def noisy_len(s):\n    return len(s)\n", [Proposal((text,))], sandbox)
        assert found == []
        assert [r.reason for r in rejected] == ["nondeterministic"], rejected


def test_reference_as_candidate_never_gets_a_counterexample(sandbox):
    for task in load_tasks(BANK):
        assert isinstance(task, CodeTask)
        if task.id == "code/noisy-len/001":
            continue
        ran, found, _ = mine(task, task.reference, fuzz_proposals(task, budget=40, seed=3), sandbox)
        assert ran > 0
        assert found == [], task.id


def test_bad_inputs_are_rejected_with_their_reason(sandbox):
    task = _task("code/count-below/001")
    proposals = [
        Proposal(([1, 2],)),  # one argument missing
        Proposal((["a"], 1)),  # not a list[int]
        Proposal(([float("nan")], 1)),  # not JSON
        Proposal(([], 1.5)),  # float for int
    ]
    found, rejected = validate_proposals(task, OFF_BY_ONE, proposals, sandbox)
    assert found == []
    assert [r.reason for r in rejected] == ["wrong_type", "wrong_type", "not_json", "wrong_type"]


def test_banked_tests_never_show_in_prompts(sandbox, store):
    task = _task("code/count-below/001")
    p = Proposal(([777123], 777123), category="boundary", hint="t equal to the only element")
    found, _ = validate_proposals(task, OFF_BY_ONE, [p], sandbox)
    bank_counterexamples(store, found)
    prompt = render_prompt(task)
    for test in adversarial_tests(store, task.id):
        assert json.dumps(list(test.args)) not in prompt
        assert "777123" not in prompt


def test_parse_model_proposals_keeps_malformed_items_as_rejections():
    text = (
        '```json\n[{"args": [[1], 1], "category": "off_by_one", "hint": "h"}, {"args": 3}, '
        '{"args": [[], 0], "category": "nonsense"}, 5]\n```'
    )
    proposals, rejected = parse_model_proposals(text, "model:x")
    assert [(p.args, p.category) for p in proposals] == [(([1], 1), "off_by_one"), (([], 0), "other")]
    assert [r.reason for r in rejected] == ["not_json", "not_json"]
    none, rejected = parse_model_proposals("no json here", "model:x")
    assert none == []
    assert [r.reason for r in rejected] == ["not_json"]


def test_model_proposer_with_a_sim_model(sandbox, store):
    task = _task("code/count-below/001")

    async def ask() -> tuple[list[Proposal], list[object]]:
        async with ModelClient(store=store) as client:
            got = await model_proposals(task, client, "sim/strong", budget=12)
            return got[0], list(got[1])

    proposals, _ = asyncio.run(ask())
    assert proposals
    assert all(p.proposer == "model:sim/strong" for p in proposals)
    found, _ = validate_proposals(task, OFF_BY_ONE, proposals, sandbox)
    assert found  # the sim's seed inputs include t-in-xs cases
    with store.snapshot() as db:
        calls = db.execute("SELECT model_id, status FROM model_calls").fetchall()
    assert calls == [("sim/strong", "ok")]


def test_mine_bank_with_a_replay_file(tmp_path, store):
    replay = tmp_path / "replay.jsonl"
    rows = [
        {"task_id": "code/count-below/001", "completion": f"```python\n{OFF_BY_ONE}```"},
        {"task_id": "code/count-below/001", "completion": "no code"},
    ]
    replay.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    results, stopped = mine_bank(
        BANK, f"replay:{replay}", budget=40, store=store, task_ids=["code/count-below/001"]
    )
    assert stopped is None
    assert [r.candidate for r in results] == ["replay/0", "replay/1"]
    assert results[0].counterexamples
    assert results[0].banked == len(results[0].counterexamples)
    assert results[1].note.startswith("no code")
    again, _ = mine_bank(BANK, f"replay:{replay}", budget=40, store=store, task_ids=["code/count-below/001"])
    # a second pass never re-banks an input: what it finds is new, and the bank holds each digest once
    first = {c.input_digest for c in results[0].counterexamples}
    assert not first & {c.input_digest for c in again[0].counterexamples}
    assert again[0].banked == len(again[0].counterexamples)
    digests = [c.input_digest for c in banked_counterexamples(store, "code/count-below/001")]
    assert len(digests) == len(set(digests)) == results[0].banked + again[0].banked
