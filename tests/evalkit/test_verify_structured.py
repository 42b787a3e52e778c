"""The structured verifier: JSON extraction, Draft 2020-12 schema, and every assertion op."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from evalkit import Assertion, Sandbox, StructuredTask, check_assertion, grade, load_tasks, resolve_pointer
from evalkit_core import digest

BANK = Path(__file__).parent / "fixtures" / "tasks"
GOOD = {
    "name": "Ada Lovelace",
    "born": "1815-12-10",
    "city": "London",
    "topics": ["Analytical Engine"],
    "height_m": 1.65,
}


@pytest.fixture(scope="module")
def person() -> StructuredTask:
    task = load_tasks(BANK)[3]
    assert isinstance(task, StructuredTask)
    return task


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as box:  # structured tasks never start a template
        yield box


def test_reference_passes_fenced_and_bare(person, sandbox):
    for text in (
        json.dumps(GOOD),
        f"Here you go:\n```json\n{json.dumps(GOOD)}\n```\n",
        f"Answer: {json.dumps(GOOD)} done",
    ):
        v = grade(person, text, sandbox)
        assert v.all_public, text
        assert v.all_hidden, text


def test_each_failure_names_pointer_and_expectation(person, sandbox):
    doc = {**GOOD, "city": "Paris", "topics": ["a", "b"], "height_m": 1.9, "born": "1815-12-11"}
    v = grade(person, json.dumps(doc), sandbox)
    assert v.all_public
    failed = {t.name: t.detail for t in v.hidden if not t.passed}
    assert set(failed) == {"hidden/0", "hidden/1", "hidden/2", "hidden/3"}
    # what each failure says names the pointer and the expectation ...
    said = [check_assertion(doc, a) or "" for a in person.hidden_assertions]
    assert said[0].startswith('/born: expected "1815-12-10"')
    assert said[1].startswith("/city: expected one of")
    assert said[2] == "/topics: expected length 1, got 2"
    assert said[3].startswith("/height_m: expected 1.65 ± 0.01")
    # ... but a hidden test's verdict shows only its reason and a digest of that text keyed with the hidden
    # assertions (a plain digest of '/born: expected "<date>", got ...' falls to trying every date)
    key = digest([a.to_json() for a in person.hidden_assertions]).encode()
    for i, text in enumerate(said):
        if text:
            message = f"hidden/{i}\n{digest(json.dumps(doc))}\n{text}".encode()  # bound to the test and answer
            keyed = "hmac-sha256:" + hmac.new(key, message, hashlib.sha256).hexdigest()
            assert failed[f"hidden/{i}"] == f"assertion (hidden test: detail withheld, {keyed})"
            assert digest(text) not in json.dumps(v.to_json())
    assert "1815-12-10" not in json.dumps(v.to_json())


def test_schema_failure_fails_every_assertion(person, sandbox):
    doc = {**GOOD, "extra": 1}
    v = grade(person, json.dumps(doc), sandbox)
    assert {t.reason for t in (*v.public, *v.hidden)} == {"schema"}
    assert "extra" in v.public[0].detail


def test_no_json(person, sandbox):
    v = grade(person, "I don't know", sandbox)
    assert {t.reason for t in (*v.public, *v.hidden)} == {"no_json"}
    v = grade(person, '{"height_m": NaN}', sandbox)
    assert {t.reason for t in (*v.public, *v.hidden)} == {"no_json"}


def test_resolve_pointer_escapes():
    doc = {"a/b": {"m~n": [10, 20]}, "": 1}
    assert resolve_pointer(doc, "/a~1b/m~0n/1") == (True, 20)
    assert resolve_pointer(doc, "/") == (True, 1)
    assert resolve_pointer(doc, "") == (True, doc)
    assert resolve_pointer(doc, "/a~1b/m~0n/2") == (False, None)
    assert resolve_pointer(doc, "/a~1b/m~0n/01") == (False, None)
    assert resolve_pointer(doc, "/missing") == (False, None)


@pytest.mark.parametrize(
    ("assertion", "ok"),
    [
        (Assertion("keys_exactly", "/o", ["x", "y"]), True),
        (Assertion("keys_exactly", "/o", ["x"]), False),
        (Assertion("path_equals", "/o/x", 1), True),
        (Assertion("path_equals", "/o/x", True), False),
        (Assertion("path_matches", "/s", "ab."), True),
        (Assertion("path_matches", "/s", "ab"), False),  # a full match is required, not a prefix
        (Assertion("path_matches", "/o/x", "1"), False),
        (Assertion("path_in", "/s", ["zz", "abc"]), True),
        (Assertion("path_in", "/s", ["zz"]), False),
        (Assertion("path_type", "/o/x", "integer"), True),
        (Assertion("path_type", "/o/x", "number"), True),
        (Assertion("path_type", "/f", "integer"), False),
        (Assertion("path_type", "/b", "integer"), False),
        (Assertion("path_type", "/n", "null"), True),
        (Assertion("path_len", "/arr", 3), True),
        (Assertion("path_len", "/s", 2), False),
        (Assertion("path_approx", "/f", 2.5, 0.1), True),
        (Assertion("path_approx", "/f", 2.7, 0.1), False),
        (Assertion("path_equals", "/nope", 1), False),
    ],
)
def test_assertion_ops(assertion, ok):
    doc = {"o": {"x": 1, "y": 2}, "s": "abc", "f": 2.55, "b": True, "n": None, "arr": [1, 2, 3]}
    result = check_assertion(doc, assertion)
    assert (result is None) is ok, result
    if not ok:
        assert result is not None
        assert result.startswith(assertion.path)


def test_a_solution_given_as_json_text_is_bounded_too(person, sandbox):
    # extract=False parses the text as it stands: deep, huge or non-finite JSON is a failing verdict, not a crash
    for text in ("[" * 5000 + "]" * 5000, '{"height_m": NaN}', '"\\ud800"', "[1e400]"):
        v = grade(person, text, sandbox, extract=False)
        assert {t.reason for t in (*v.public, *v.hidden)} == {"no_json"}
