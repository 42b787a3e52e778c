"""The two example tasks of the design, as the design shows them, in the seed bank under their ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit import CodeTask, Sandbox, SandboxLimits, StructuredTask, grade, load_tasks

SEED = Path(__file__).parents[2] / "tasks"


@pytest.fixture(scope="module")
def bank():
    return {t.id: t for t in load_tasks(SEED)}


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxLimits(cpu_seconds=1.0, wall_seconds=3.0), workers=1) as box:
        yield box


def _calls(tests) -> list[tuple[object, object]]:
    return [(t.args[0], t.expected) for t in tests]


def test_run_length_encode_is_the_designs(bank):
    task = bank["code/run-length-encode/001"]
    assert isinstance(task, CodeTask)
    assert task.entry_point == "rle_encode"
    assert _calls(task.public_tests) == [("aaabbc", "a3b2c1"), ("", ""), ("a", "a1")]
    assert _calls(task.hidden_tests)[:3] == [("111", "13"), ("zzzzzzzzzzzz", "z12"), ("abab", "a1b1a1b1")]
    assert len(task.hidden_tests) > 3


def test_event_extract_is_the_designs(bank):
    task = bank["structured/event-extract/001"]
    assert isinstance(task, StructuredTask)
    ops = [(a.op, a.path, a.value) for a in (*task.public_assertions, *task.hidden_assertions)]
    assert ("keys_exactly", "", ["date", "time", "room", "organizer"]) in ops
    assert ("path_equals", "/date", "2026-03-15") in ops
    assert sorted(task.reference) == sorted(["date", "time", "room", "organizer"])


def test_the_tasks_that_held_those_ids_live_on(bank):
    old_rle = bank["code/run-length-encode/002"]
    assert isinstance(old_rle, CodeTask)
    assert ("aaab", "3a1b") in _calls(old_rle.public_tests)
    old_event = bank["structured/event-extract/002"]
    assert isinstance(old_event, StructuredTask)
    assert "attendees" in old_event.reference


def test_run_length_encode_tells_solutions_apart(bank, sandbox):
    task = bank["code/run-length-encode/001"]
    count_first = "def rle_encode(s):\n    import itertools\n    return ''.join(f'{len(list(g))}{k}' for k, g in itertools.groupby(s))\n"
    v = grade(task, count_first, sandbox, extract=False)
    assert not v.all_public
    one_digit = (
        "def rle_encode(s):\n    import itertools\n"
        "    return ''.join(f'{k}{min(len(list(g)), 9)}' for k, g in itertools.groupby(s))\n"
    )
    v = grade(task, one_digit, sandbox, extract=False)
    assert v.all_public
    assert not v.all_hidden  # "z" * 12 -> "z12"
    good = "def rle_encode(s):\n    import itertools\n    return ''.join(f'{k}{len(list(g))}' for k, g in itertools.groupby(s))\n"
    v = grade(task, good, sandbox, extract=False)
    assert v.all_public
    assert v.all_hidden


def test_event_extract_tells_answers_apart(bank, sandbox):
    task = bank["structured/event-extract/001"]
    good = {"date": "2026-03-15", "time": "14:30", "room": "B-114", "organizer": "Lena Fischer"}
    v = grade(task, json.dumps(good), sandbox)
    assert (v.all_public, v.all_hidden) == (True, True)
    v = grade(task, json.dumps({**good, "speaker": "Omar Haddad"}), sandbox)
    assert not v.all_public  # exactly the four keys
    v = grade(task, json.dumps({**good, "organizer": "Omar Haddad"}), sandbox)
    assert v.all_public
    assert not v.all_hidden
