"""Extracting code and JSON from completions."""

from __future__ import annotations

import pytest

from evalkit import ExtractionError, extract_code, extract_json


def test_extract_code_prefers_the_last_block_defining_the_entry_point():
    text = (
        "First try:\n```python\ndef solve(x):\n    return 0\n```\n"
        "Helper:\n```python\ndef helper():\n    pass\n```\n"
        "Final:\n```py\ndef solve(x):\n    return x\n```\nThat's it."
    )
    assert extract_code(text, "solve") == "def solve(x):\n    return x\n"


def test_extract_code_unfenced_and_tilde_fences():
    assert extract_code("def solve(x):\n    return 1\n", "solve").startswith("def solve")
    assert "return 2" in extract_code("~~~python\ndef solve(x):\n    return 2\n~~~\n", "solve")
    assert "x: 3" in extract_code("```\nsolve = lambda x: 3\n```", "solve")


def test_extract_code_fails_clearly():
    with pytest.raises(ExtractionError, match="no code defining 'solve'"):
        extract_code("Sorry, I can't.", "solve")
    with pytest.raises(ExtractionError, match="no fenced code block defines 'solve'"):
        extract_code("```python\ndef other():\n    pass\n```", "solve")
    with pytest.raises(ExtractionError):
        extract_code("```python\ndef solve(:\n```", "solve")


def test_extract_json_fenced_bare_and_embedded():
    assert extract_json('```json\n{"a": 1}\n```') == {"a": 1}
    assert extract_json("[1, 2]") == [1, 2]
    assert extract_json('The answer is {"a": [1, {"b": null}]} as requested.') == {"a": [1, {"b": None}]}
    assert extract_json('```json\n{"a": 1}\n```\n```json\n{"a": 2}\n```') == {"a": 2}


def test_extract_json_refuses_nan_and_nothing():
    with pytest.raises(ExtractionError):
        extract_json('{"a": NaN}')
    with pytest.raises(ExtractionError, match="no JSON"):
        extract_json("nothing here")
