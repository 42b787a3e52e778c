"""Extracting code and JSON from completions: the shapes real models answer with, and the bounds.

Every parse of a completion is bounded: a hostile completion is an ``ExtractionError`` (a failing verdict), never
a ``MemoryError``, a ``RecursionError``, a crash or a hang of the grader.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from evalkit import ExtractionError, extract_code, extract_json
from evalkit.grading._extract import _bindings
from evalkit.grading._extract_blocks import fenced as _fenced
from evalkit.grading._extract_json import MAX_JSON_DEPTH as _MAX_JSON_DEPTH
from evalkit.grading._pyscan import MAX_PY_NESTING as _MAX_PY_NESTING
from evalkit.grading._pyscan import scan_python as _scan_python
from strategies import (
    adversarial_texts,
    completions,
    json_bracket_texts,
    python_expressions,
)

MIB = 1 << 20


def _parse(code: str) -> ast.Module:
    with warnings.catch_warnings():
        # A candidate's invalid escapes warn; the suite turns warnings into errors.
        warnings.simplefilter("ignore")
        return ast.parse(code)


# --------------------------------------------------------------------------------------------- code: shapes


def test_extract_code_prefers_the_last_block_defining_the_entry_point():
    text = (
        "First try:\n```python\ndef solve(x):\n    return 0\n```\n"
        "Helper:\n```python\ndef helper():\n    pass\n```\n"
        "Final:\n```py\ndef solve(x):\n    return x\n```\nThat's it."
    )
    assert extract_code(text, "solve") == "def solve(x):\n    return x\n"


def test_extract_code_unfenced_and_tilde_fences():
    assert extract_code("def solve(x):\n    return 1\n", "solve") == "def solve(x):\n    return 1\n"
    assert (
        extract_code("~~~python\ndef solve(x):\n    return 2\n~~~\n", "solve")
        == "def solve(x):\n    return 2\n"
    )
    assert extract_code("```\nsolve = lambda x: 3\n```", "solve") == "solve = lambda x: 3\n"


def test_extract_code_fails_clearly():
    with pytest.raises(ExtractionError, match="no code defining 'solve'"):
        extract_code("Sorry, I can't.", "solve")
    with pytest.raises(ExtractionError, match="no fenced code block defines 'solve'"):
        extract_code("```python\ndef other():\n    pass\n```", "solve")
    with pytest.raises(ExtractionError):
        extract_code("```python\ndef solve(:\n```", "solve")
    # A method, or a function nested in another, is not a module-level entry point.
    with pytest.raises(ExtractionError):
        extract_code("```python\nclass Solution:\n    def solve(self, x):\n        return x\n```", "solve")
    with pytest.raises(ExtractionError):
        extract_code("def outer():\n    def solve(x):\n        return x\n", "solve")


SOLVE = "def solve(x):\n    return x\n"

# (name, completion, exactly the code expected)
SHAPES: list[tuple[str, str, str]] = [
    # --- bare code that starts with whitespace (the issue: 48 correct answers scored no_code)
    ("bare, indented as a whole", " def solve(x):\n     return x\n", SOLVE),
    ("bare, four spaces", "    def solve(x):\n        return x\n", SOLVE),
    ("bare, only the header indented", " def solve(x):\n    return x\n", "def solve(x):\n   return x\n"),
    (
        "bare, first import indented",
        " import math\ndef solve(x):\n    return math.floor(x)\n",
        "import math\ndef solve(x):\n    return math.floor(x)\n",
    ),
    ("bare, tab-indented", "\tdef solve(x):\n\t\treturn x\n", "def solve(x):\n\treturn x\n"),
    ("bare, blank lines first", "\n\n  def solve(x):\n      return x\n", "\n\ndef solve(x):\n    return x\n"),
    # --- a helper (or an import) defined in an earlier block than the entry point
    (
        "helper and import in an earlier block",
        (
            "Helper:\n```python\nimport math\n\ndef helper(x):\n    return math.sqrt(x)\n```\n"
            "Main:\n```python\ndef solve(x):\n    return helper(x) + 1\n```\n"
        ),
        "import math\n\ndef helper(x):\n    return math.sqrt(x)\n\ndef solve(x):\n    return helper(x) + 1\n",
    ),
    (
        "only the blocks that are needed, transitively, in order",
        (
            "```python\nfrom functools import lru_cache\n```\n"
            "```python\nprint('demo')\n```\n"
            "```python\n@lru_cache(None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n```\n"
            "```python\ndef unrelated():\n    return 1\n```\n"
            "```python\ndef solve(n):\n    return [fib(i) for i in range(n)]\n```\n"
        ),
        (
            "from functools import lru_cache\n\n"
            "@lru_cache(None)\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n"
            "def solve(n):\n    return [fib(i) for i in range(n)]\n"
        ),
    ),
    (
        "a helper block after the entry point's",
        "```python\ndef solve(x):\n    return double(x)\n```\nwhere\n```python\ndef double(x):\n    return 2 * x\n```\n",
        "def solve(x):\n    return double(x)\n\ndef double(x):\n    return 2 * x\n",
    ),
    (
        "the last definition of a helper wins; an entry block needing nothing stands alone",
        (
            "```python\ndef h():\n    return 1\n```\n```python\ndef h():\n    return 2\n```\n"
            "```python\ndef solve():\n    return h()\n```\n```python\ndef solve2():\n    return 0\n```\n"
        ),
        "def h():\n    return 2\n\ndef solve():\n    return h()\n",
    ),
    (
        "a global the entry point declares, assigned in another block",
        "```python\ncount = 0\n```\n```python\ndef solve():\n    global count\n    count += 1\n    return count\n```\n",
        "count = 0\n\ndef solve():\n    global count\n    count += 1\n    return count\n",
    ),
    # --- fences
    (
        "closing fence with text after it",
        "```python\ndef solve(x):\n    return x\n```  ### Output:\n5\n",
        SOLVE,
    ),
    (
        "closing fence glued to a heading",
        "```python\ndef solve(x):\n    return x\n```### Explanation\nIt works.",
        SOLVE,
    ),
    ("python3 label", "```python3\ndef solve(x):\n    return x\n```", SOLVE),
    ("Python label", "```Python\ndef solve(x):\n    return x\n```", SOLVE),
    ("py label with a title", '```py title="solve.py"\ndef solve(x):\n    return x\n```', SOLVE),
    ("braced label", "```{python}\ndef solve(x):\n    return x\n```", SOLVE),
    ("label after a space", "``` python\ndef solve(x):\n    return x\n```", SOLVE),
    ("four-backtick fence", "````python\ndef solve(x):\n    return x\n````", SOLVE),
    ("block never closed", "Here:\n```python\ndef solve(x):\n    return x\n", SOLVE),
    (
        "block never closed, then prose",
        "Here:\n```python\ndef solve(x):\n    return x\n\nThis returns x.\n",
        SOLVE,
    ),
    (
        "previous block never closed before the next opens",
        "```python\ndef helper(x):\n    return 2*x\n```python\ndef solve(x):\n    return helper(x)\n```\n",
        "def helper(x):\n    return 2*x\n\ndef solve(x):\n    return helper(x)\n",
    ),
    (
        "fence inside a docstring stays content",
        '```python\ndef solve(x):\n    """Example:\n    ```python\n    solve(1)\n    ```\n    """\n    return x\n```\n',
        'def solve(x):\n    """Example:\n    ```python\n    solve(1)\n    ```\n    """\n    return x\n',
    ),
    (
        "block indented in a list item",
        "1. Write it:\n   ```python\n   def solve(x):\n       return x\n   ```\n2. Done.",
        SOLVE,
    ),
    (
        "other-language blocks are skipped",
        "```bash\nsolve() { echo; }\n```\n```python\n" + SOLVE + "```",
        SOLVE,
    ),
    ("Windows line endings", "```python\r\ndef solve(x):\r\n    return x\r\n```\r\n", SOLVE),
    ("old Mac line endings", "```python\rdef solve(x):\r    return x\r```\r", SOLVE),
    # --- tags
    ("Code Llama tags", "[PYTHON]\ndef solve(x):\n    return x\n[/PYTHON]\n", SOLVE),
    (
        "code tags, HTML-escaped",
        "<code>\ndef solve(x):\n    return x &lt; 3\n</code>",
        "def solve(x):\n    return x < 3\n",
    ),
    (
        "pre/code with a language class",
        '<pre><code class="language-python">def solve(x):\n    return x\n</code></pre>',
        SOLVE,
    ),
    # --- unfenced code among prose
    ("leading prose", "Here is the code:\n\ndef solve(x):\n    return x\n", SOLVE),
    ("trailing explanation", "def solve(x):\n    return x\n\nThis function returns its argument.\n", SOLVE),
    ("trailing Output: line", "def solve(x):\n    return x\n\nOutput: 5\nExplanation\n", SOLVE),
    (
        "prose on both sides, imports kept",
        "Sure! Here's my solution.\nimport math\n\ndef solve(x):\n    return math.ceil(x)\n\nTime complexity: O(1).\n",
        "import math\n\ndef solve(x):\n    return math.ceil(x)\n",
    ),
    (
        "usage after the definition is kept (it is code)",
        "def solve(x):\n    return x\n\nprint(solve(3))  # 3\n\nThat prints 3.",
        "def solve(x):\n    return x\n\nprint(solve(3))  # 3\n",
    ),
    (
        "an import separated from the code by prose",
        "import math\n\nNow the function:\n\ndef solve(x):\n    return math.floor(x)\n",
        "import math\n\ndef solve(x):\n    return math.floor(x)\n",
    ),
    (
        "code indented under a prose line",
        "Solution:\n    import math\n    def solve(x):\n        return math.floor(x)\nDone.\n",
        "import math\ndef solve(x):\n    return math.floor(x)\n",
    ),
    (
        "entry point twice: the last complete one",
        "def solve(x):\n    return 0\n\nWait, that's wrong. Fixed:\n\ndef solve(x):\n    return x\n\ndef solve(x):\n    if x",
        SOLVE,
    ),
    (
        "entry point twice in one truncated block",
        "```python\ndef solve(x):\n    return x\n\ndef solve(x):\n    return (x +\n",
        SOLVE,
    ),
    (
        "decorators, else and except clauses stay with their statement",
        (
            "Code:\n@staticmethod\ndef solve(x):\n    return x\nif True:\n    y = 1\nelse:\n    y = 2\ntry:\n    z = 1\n"
            "except Exception:\n    z = 0\nfinally:\n    pass\nThanks."
        ),
        (
            "@staticmethod\ndef solve(x):\n    return x\nif True:\n    y = 1\nelse:\n    y = 2\ntry:\n    z = 1\n"
            "except Exception:\n    z = 0\nfinally:\n    pass\n"
        ),
    ),
    (
        "an apostrophe and an open parenthesis in prose do not swallow the code",
        "Here's the idea (simple:\ndef solve(x):\n    return x\n",
        SOLVE,
    ),
    (
        "invalid escape sequences in the candidate's strings are not the grader's warnings",
        "```python\nimport re\ndef solve(x):\n    return re.findall('\\d', x)\n```",
        "import re\ndef solve(x):\n    return re.findall('\\d', x)\n",
    ),
    ("assignment entry point", "solve = lambda x: x\n", "solve = lambda x: x\n"),
    (
        "entry point bound inside try/if at module level",
        "try:\n    from math import gcd as solve\nexcept ImportError:\n    def solve(a, b):\n        return a\n",
        "try:\n    from math import gcd as solve\nexcept ImportError:\n    def solve(a, b):\n        return a\n",
    ),
]


@pytest.mark.parametrize(
    ("completion", "expected"), [(c, e) for _, c, e in SHAPES], ids=[n for n, _, _ in SHAPES]
)
def test_extract_code_shapes(completion: str, expected: str):
    code = extract_code(completion, "solve")
    assert code == expected
    assert "solve" in _bindings(_parse(code))


def test_fence_scanner_blocks():
    """The line scanner's own verdicts, block by block (the shapes above also pass through fallbacks)."""
    docstring = '```python\ndef f():\n    """\n    ```python\n    f()\n    ```\n    """\n```\nafter\n'
    assert _fenced(docstring) == [("python", 'def f():\n    """\n    ```python\n    f()\n    ```\n    """\n')]
    assert _fenced("```py\na\n```  ### Output:\nb\n```\nc\n") == [("py", "a\n"), ("", "c\n")]
    assert _fenced("```python\na\n```json\n{}\n```\n") == [("python", "a\n"), ("json", "{}\n")]
    assert _fenced("````\n```\ninner\n```\n````\n") == [("", "```\ninner\n```\n")]
    assert _fenced("~~~\n```\n~~~\n") == [("", "```\n")]
    assert _fenced("  ```Python3 extra\n  x\n  ```\n") == [("python3", "  x\n")]
    assert _fenced("```\n\n\n") == []  # an empty block never closed is nothing
    assert _fenced("no fences") == []


def test_helper_assembly_runs():
    """The assembled blocks are a working program, not just the right text."""
    text = (
        "```python\nimport math\n```\nThen:\n```python\ndef is_prime(n):\n"
        "    return n > 1 and all(n % d for d in range(2, math.isqrt(n) + 1))\n```\n"
        "```python\ndef solve(n):\n    return [p for p in range(n) if is_prime(p)]\n```"
    )
    namespace: dict[str, object] = {}
    exec(compile(extract_code(text, "solve"), "<candidate>", "exec"), namespace)
    solve = namespace["solve"]
    assert callable(solve)
    assert solve(20) == [2, 3, 5, 7, 11, 13, 17, 19]


# --------------------------------------------------------------------------------------------- JSON: shapes


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


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ('```json\n{"a": 1}\n```  ### Output:\n', {"a": 1}),
        ('```JSON\r\n{"a": [1, 2]}\r\n```\r\n', {"a": [1, 2]}),
        ('Result:\n```json\n{"a": 1}\n', {"a": 1}),  # never closed
        ('```python\n{"a": 1}\n```\n```json\n[2]\n```', [2]),  # a python block is not JSON
        ('```json\n{"a": broken\n```\nbut really {"b": 2}', {"b": 2}),
        ('{ "a": {"b": [1, 2]} ]', {"b": [1, 2]}),  # outer span mismatched: the first inner span that parses
        # Brackets inside strings are not structure.
        ('{"code": "if (x) { y }"} then [3]', {"code": "if (x) { y }"}),
        ('see [1, 2 and then {"k": "v"}', {"k": "v"}),
        # The first inner value before the error, as a parse would read it.
        ('{"a": [1, 2], "b": x} [9]', [1, 2]),
        ('"He said \\"hi\\"" {"q": "\\"[{"}', {"q": '"[{'}),
        ("[1e5, -0.5, 2E-3, 10]", [1e5, -0.5, 2e-3, 10]),
    ],
)
def test_extract_json_shapes(completion: str, expected: object):
    assert extract_json(completion) == expected


@pytest.mark.parametrize(
    "completion",
    [
        '{"a": NaN}',
        '{"a": Infinity}',
        "[-Infinity]",
        '{"a": 1e400}',  # overflows to inf
        "[-1e999]",
        '{"a": [1, 2], "b": NaN}',  # a span holding a non-finite number is refused whole, inner spans too
        '["\\ud800"]',  # a lone surrogate cannot be written as UTF-8
        '{"\\udfff": 1}',
        "[" + "1" * 5000 + "]",  # past Python's integer digit limit
        "[" * (_MAX_JSON_DEPTH + 1) + "]" * (_MAX_JSON_DEPTH + 1),  # too deep: refused with what it holds
        'The answer: {"a": ' * 100 + "[1]" + "}" * 100,
    ],
)
def test_extract_json_refuses_what_cannot_be_canonical(completion: str):
    with pytest.raises(ExtractionError):
        extract_json(completion)


def test_extract_json_depth_limit_is_exact():
    ok = "[" * _MAX_JSON_DEPTH + "]" * _MAX_JSON_DEPTH
    value = extract_json(ok)
    depth = 0
    while isinstance(value, list) and value:
        value = value[0]
        depth += 1
    assert depth == _MAX_JSON_DEPTH - 1  # the innermost list is empty
    # A too-deep document is refused whole, but a later value beside it is still found.
    deep = "[" * (_MAX_JSON_DEPTH + 1) + "]" * (_MAX_JSON_DEPTH + 1)
    with pytest.raises(ExtractionError, match="nested deeper than 64"):
        extract_json(deep)
    assert extract_json(deep + ' and then {"a": 1}') == {"a": 1}


# --------------------------------------------------------------------------------------------- bounds

ADVERSARIAL: dict[str, Callable[[], str]] = {
    "100k nested brackets": lambda: "[" * 100_000 + "]" * 100_000,
    "1 MiB of open brackets": lambda: "[" * MIB,
    "100k nested objects": lambda: '{"a":' * 100_000 + "1" + "}" * 100_000,
    "50k unclosed fences": lambda: "```python\ndef solve(\n" * 45_000,
    "1 MiB of fence lines": lambda: "```\n" * (MIB // 4),
    "fences glued on one line": lambda: "```" * (MIB // 3),
    "deep parentheses": lambda: "def solve():\n    return " + "(" * 100_000 + "1" + ")" * 100_000 + "\n",
    "long + chain": lambda: "def solve():\n    return " + "1+" * 20_000 + "1\n",
    "long + chain, 1 MiB": lambda: ("def solve():\n    return " + "1+" * (MIB // 2))[:MIB],
    "unary chain": lambda: "def solve():\n    return " + "-" * 50_000 + "1\n",
    "attribute chain": lambda: "def solve():\n    return a" + ".b" * 30_000 + "\n",
    "call chain": lambda: "def solve():\n    return f" + "()" * 30_000 + "\n",
    "lambda chain": lambda: "solve = " + "lambda: " * 10_000 + "1\n",
    "elif chain": lambda: (
        "def solve(x):\n    if x == 0:\n        return 0\n"
        + "".join(f"    elif x == {i}:\n        return {i}\n" for i in range(1, 3000))
    ),
    "deep f-string": lambda: "def solve():\n    return f'{" + "1+" * 5000 + "1}'\n",
    "huge string literal": lambda: "def solve():\n    return '" + "a" * (MIB - 100) + "'\n",
    "huge unclosed triple string": lambda: "def solve():\n    return '''" + "a\\" * (MIB // 2 - 20),
    "NUL bytes": lambda: ("def solve():\n    return 1\n\x00" * 40_000)[:MIB],
    "lone surrogates": lambda: "def solve():\n    return '\ud800'\n" * 1000 + '["\ud800", "\udfff"]',
    "many small blocks": lambda: ("```python\ndef solve(): return helper()\n```\n" * (MIB // 40))[:MIB],
    "many one-line statements": lambda: "Here:\ndef solve(): pass\n" + "f(1)\n" * 25_000,
    "prose with brackets": lambda: "see (the [ref {" * 60_000 + "\ndef solve(): pass\n",
    "quotes": lambda: '"' * MIB,
    "escaped quotes in a string": lambda: '{"a": "' + '\\"' * (MIB // 2 - 10),
    "code tags": lambda: "<code" * (MIB // 5),
    "deep JSON spans that fail": lambda: ("[" * 60 + "x" + "]" * 60 + " ") * 8000,
    "nested NaN spans": lambda: ("[" * 60 + "NaN" + "]" * 60) * 8000,
}


@pytest.mark.parametrize("make", list(ADVERSARIAL.values()), ids=list(ADVERSARIAL))
def test_adversarial_completions_are_bounded(make: Callable[[], str]):
    text = make()
    assert len(text) <= MIB
    for check in (lambda: _check_code_result(text, "solve"), lambda: _check_json_result(text)):
        t0 = time.perf_counter()
        check()
        # Generous: each takes under 2 s alone; the bound is there to catch a quadratic (73 s for 42 KB before).
        assert time.perf_counter() - t0 < 5.0


def test_oversized_completion_is_refused_before_any_work():
    text = "def solve():\n    return 1\n" + " " * MIB
    with pytest.raises(ExtractionError, match="over the 1,048,576 limit"):
        extract_code(text, "solve")
    with pytest.raises(ExtractionError, match="over the 1,048,576 limit"):
        extract_json("[" + " " * MIB + "]")


def test_deep_code_is_refused_with_a_reason():
    with pytest.raises(ExtractionError, match="nested deeper than"):
        extract_code("def solve():\n    return " + "1+" * 20_000 + "1\n", "solve")
    with pytest.raises(ExtractionError, match="over 65,536 characters"):
        extract_code("def solve():\n    return '" + "a" * 70_000 + "'\n", "solve")


def test_code_with_nul_or_lone_surrogate_is_never_returned():
    with pytest.raises(ExtractionError):
        extract_code("def solve():\n    return '\x00'\n", "solve")
    with pytest.raises(ExtractionError):
        extract_code("def solve():\n    return '\ud800'\n", "solve")
    # The clean block is still found next to a poisoned one.
    assert extract_code("```python\ndef solve():\n    return 1\n```\n\ud800\x00", "solve") == (
        "def solve():\n    return 1\n"
    )


def test_a_raised_recursion_limit_cannot_crash_the_grader():
    """CPython 3.11 builds syntax trees with C recursion scaled by the recursion limit: with a raised limit, a
    100,000-term chain used to segfault ``ast.parse``. The nesting pre-scan refuses it before the parse.
    """
    program = textwrap.dedent(
        """
        import sys
        sys.setrecursionlimit(10**6)
        from evalkit import ExtractionError, extract_code
        for text in ["def solve():\\n    return " + "1+" * 100_000 + "1\\n",
                     "solve = " + "lambda: " * 5_000 + "1\\n",
                     "def solve():\\n    return a" + "[0]" * 50_000 + "\\n"]:
            try:
                extract_code(text, "solve")
            except ExtractionError:
                print("refused")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["refused"] * 3


# --------------------------------------------------------------------------------------------- properties


def _check_code_result(text: str, entry: str) -> None:
    try:
        code = extract_code(text, entry)
    except ExtractionError:
        return
    tree = _parse(code)  # whatever is returned parses ...
    assert len(code) <= 64 << 10
    assert "\x00" not in code
    code.encode("utf-8")  # ... and is valid Unicode text
    assert entry in code
    assert tree.body


def _depth(value: object) -> int:
    best, todo = 0, [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, list | dict):
            best = max(best, d + 1)
            todo += [(c, d + 1) for c in (v.values() if isinstance(v, dict) else v)]
    return best


def _check_json_result(text: str) -> None:
    try:
        value = extract_json(text)
    except ExtractionError:
        return
    assert _depth(value) <= _MAX_JSON_DEPTH
    dumped = json.dumps(value, allow_nan=False, ensure_ascii=False)  # finite numbers only ...
    dumped.encode("utf-8")  # ... and no lone surrogate
    assert json.loads(dumped) == value


@given(completions())
@example("```python\n" + "def solve(x):\n    return x\n")
@example(" def solve(x):\n    return x\n")
def test_random_completions_return_parsable_code_or_fail_cleanly(text: str):
    _check_code_result(text, "solve")
    _check_json_result(text)


@given(adversarial_texts())
def test_huge_and_deep_texts_return_or_fail_cleanly(text: str):
    assert len(text) <= MIB
    t0 = time.perf_counter()
    _check_code_result(text, "solve")
    _check_json_result(text)
    assert time.perf_counter() - t0 < 10.0  # both calls together, on a shared 2-core box


@given(st.text(max_size=400))
def test_arbitrary_unicode_returns_or_fails_cleanly(text: str):
    _check_code_result(text, "solve")
    _check_json_result(text)


def _reference_first_span(text: str) -> object:
    """The old rule, brute force: the first ``{`` or ``[`` from which a JSON value decodes."""
    decoder = json.JSONDecoder()
    for i, c in enumerate(text):
        if c in "[{":
            try:
                return decoder.raw_decode(text, i)[0]
            except ValueError:
                continue
    return None


@settings(max_examples=300)
@given(json_bracket_texts)
@example("[x [1, 1]]")
@example('{"a" [true, null]} [2]')
@example("{1: [x], [3]}")
@example("[[1, 2] x [3]]")
def test_linear_span_search_agrees_with_the_brute_force_rule(text: str):
    """Without stray quotes (where the linear scanner must guess string state), the linear search finds exactly
    the value the old quadratic search found.
    """
    try:
        expected = json.loads(text)
    except ValueError:
        expected = _reference_first_span(text)
        if expected is None:
            with pytest.raises(ExtractionError):
                extract_json(text)
            return
    assert extract_json(text) == expected


def _ast_depth(tree: ast.AST) -> int:
    best, todo = 0, [(tree, 1)]
    while todo:
        node, d = todo.pop()
        best = max(best, d)
        todo += [(c, d + 1) for c in ast.iter_child_nodes(node)]
    return best


@given(python_expressions())
def test_nesting_prescan_bounds_the_real_syntax_tree(source: str):
    """The pre-scan's estimate is an upper bound (plus the module node) on the depth of the tree CPython builds,
    so an accepted source can never drive ``ast.parse`` into deep recursion.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, RecursionError, MemoryError):
        return
    assert _ast_depth(tree) <= _scan_python(source)[1] + 2


CHAINS = {
    "binary": "x = " + "1+" * 300 + "1\n",
    "power": "x = " + "2**" * 300 + "2\n",
    "unary": "x = " + "-" * 300 + "1\n",
    "not": "x = " + "not " * 300 + "1\n",
    "attribute": "x = a" + ".b" * 300 + "\n",
    "call": "x = f" + "()" * 300 + "\n",
    "subscript": "x = a" + "[0]" * 300 + "\n",
    "lambda": "x = " + "lambda: " * 300 + "1\n",
    "conditional": "x = " + "1 if 1 else " * 300 + "1\n",
    "f-string": "x = f'{" + "1+" * 300 + "1}'\n",
    "prefixed f-string": "x = rf'{" + "1+" * 300 + "1}'\n",
    "continued": "x = " + "1 + \\\n" * 300 + "1\n",
    "inside brackets": "x = [" + "1 +\n" * 300 + "1]\n",
    "elif": "if x:\n    pass\n" + "elif x:\n    pass\n" * 300,
    "nested brackets": "x = " + "[" * 150 + "1" + "]" * 150 + "\n",
    "semicolons": "x = 1; " * 300 + "y = " + "1+" * 300 + "1\n",
}


@pytest.mark.parametrize("source", list(CHAINS.values()), ids=list(CHAINS))
def test_nesting_prescan_counts_every_kind_of_chain(source: str):
    depth = _ast_depth(_parse(source))
    assert depth >= 150
    assert depth <= _scan_python(source)[1] + 2


def test_nesting_prescan_on_real_code_shapes():
    """Ordinary code stays far below the limit; the limit is far below what CPython can build safely."""
    ordinary = textwrap.dedent(
        """
        import math
        from typing import List

        def solve(nums: List[int], k: int = 3) -> int:
            '''Sum of the k largest, with a {brace} in the docstring.'''
            best = sorted((x for x in nums if x % 2 == 0 or x > k), reverse=True)[:k]
            label = f"{len(best)} items: {', '.join(str(b) for b in best)!r}"
            if not best:
                return 0
            elif len(best) == 1:
                return best[0]
            else:
                return sum(best) + math.floor(len(label) / 1e9)
        """
    )
    assert _scan_python(ordinary)[1] < 60
    # Long flat data and implicitly concatenated strings are not chains.
    assert _scan_python("x = [" + "-1.5, " * 5000 + "]\n")[1] < 16
    assert _scan_python("x = (\n" + "    r'word|'\n" * 500 + ")\n")[1] < 16
    assert _scan_python("x = {" + "'k': (1, 2), " * 5000 + "}\n")[1] < 16
    assert _MAX_PY_NESTING * 2 < 1000  # default recursion limit; CPython allows 3x that for the tree
