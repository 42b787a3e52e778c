"""Benchmark: extract_code / extract_json on hostile completions of up to 1 MiB, and on ordinary answers.

    uv run python tools/bench/extract.py [--only SUBSTRING] [--repeat N]

For each input it prints its size, the time of ``extract_code(text, "solve")`` and of ``extract_json(text)``
(the best of N runs) and what each gave (``code``/``json`` and a size, or the ``ExtractionError``'s reason).
Prints figures only; it asserts nothing about time (the tests do, loosely).
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

from evalkit import ExtractionError, extract_code, extract_json

MIB = 1 << 20
KIB = 1 << 10


def _cap(text: str) -> str:
    return text[:MIB]


INPUTS: dict[str, Callable[[], str]] = {
    # ordinary answers, for scale
    "ordinary fenced answer (1 KB)": lambda: (
        "Here is my solution.\n```python\nimport math\n\ndef solve(xs):\n    return sum(math.isqrt(x) for x in xs)\n"
        "```\nIt runs in O(n).\n" * 8
    ),
    "ordinary unfenced answer with prose": lambda: (
        "Sure! Here's the code:\n\ndef solve(x):\n    return x * 2\n\nprint(solve(3))\n\nThis doubles x.\n"
    ),
    "32 KiB of plain code": lambda: (
        "def solve(x):\n    return x\n" + "".join(f"def f{i}(a, b):\n    return a + b\n" for i in range(1000))
    ),
    # brackets
    "100k nested brackets": lambda: "[" * 100_000 + "]" * 100_000,
    "1 MiB of open brackets": lambda: "[" * MIB,
    "100k nested objects": lambda: '{"a":' * 100_000 + "1" + "}" * 100_000,
    "deep JSON spans that fail (1 MiB)": lambda: _cap(("[" * 60 + "x" + "]" * 60 + " ") * 9000),
    "nested NaN spans (1 MiB)": lambda: _cap(("[" * 60 + "NaN" + "]" * 60) * 9000),
    "many small JSON spans (1 MiB)": lambda: _cap("[1] " * (MIB // 4)),
    "1e400 and lone surrogate": lambda: '{"a": 1e400} ["\\ud800"]',
    # fences
    "42 KB of unclosed fences (73 s before)": lambda: "```python\ndef solve(\n" * 2000,
    "50k unclosed fences": lambda: "```python\ndef solve(\n" * 47_000,
    "1 MiB of fence lines": lambda: "```\n" * (MIB // 4),
    "fences glued on one line": lambda: "```" * (MIB // 3),
    "1 MiB of tiny blocks needing a helper": lambda: _cap(
        "```python\ndef solve(): return helper()\n```\n" * 30_000
    ),
    "16 blocks of 64 KiB": lambda: (
        ("```python\ndef solve(): pass\n" + "f(1)\n" * (63 * KIB // 5) + "```\n") * 16
    ),
    # Python
    "deep parentheses": lambda: "def solve():\n    return " + "(" * 100_000 + "1" + ")" * 100_000 + "\n",
    "1+1+... (20k terms)": lambda: "def solve():\n    return " + "1+" * 20_000 + "1\n",
    "1+1+... (1 MiB)": lambda: _cap("def solve():\n    return " + "1+" * (MIB // 2)),
    "unary chain (50k)": lambda: "def solve():\n    return " + "-" * 50_000 + "1\n",
    "lambda chain (10k)": lambda: "solve = " + "lambda: " * 10_000 + "1\n",
    "elif chain (3k)": lambda: (
        "def solve(x):\n    if x == 0:\n        return 0\n"
        + "".join(f"    elif x == {i}:\n        return {i}\n" for i in range(1, 3000))
    ),
    "deep f-string": lambda: "def solve():\n    return f'{" + "1+" * 5000 + "1}'\n",
    "huge string literal (1 MiB)": lambda: "def solve():\n    return '" + "a" * (MIB - 100) + "'\n",
    "unclosed triple string (1 MiB)": lambda: _cap("def solve():\n    return '''" + "a\\" * (MIB // 2)),
    "NUL bytes (1 MiB)": lambda: _cap("def solve():\n    return 1\n\x00" * 40_000),
    "lone surrogates": lambda: "def solve():\n    return '\ud800'\n" * 1000,
    "prose + 25k one-line statements": lambda: "Here:\ndef solve(): pass\n" + "f(1)\n" * 25_000,
    "prose with brackets (1 MiB)": lambda: (
        _cap("see (the [ref {" * 70_000)[: MIB - 20] + "\ndef solve(): pass\n"
    ),
    "1 MiB of quotes": lambda: '"' * MIB,
    "<code tags (1 MiB)": lambda: _cap("<code" * (MIB // 5)),
    "over the limit (1 MiB + 1)": lambda: "x" * (MIB + 1),
}


def _run(call: Callable[[], object], repeat: int) -> tuple[float, str]:
    best = float("inf")
    outcome = ""
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            value = call()
        except ExtractionError as exc:
            outcome = "error: " + str(exc).split("; ")[-1][:48]
        else:
            outcome = (
                f"code {len(value):,} chars" if isinstance(value, str) else f"json {type(value).__name__}"
            )
        best = min(best, time.perf_counter() - t)
    return best, outcome


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="run only inputs whose name contains this")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(f"{'input':42} {'chars':>9}  {'extract_code':>12}  {'extract_json':>12}  outcome (code | json)")
    worst = 0.0
    for name, make in INPUTS.items():
        if args.only not in name:
            continue
        text = make()
        t_code, out_code = _run(lambda text=text: extract_code(text, "solve"), args.repeat)
        t_json, out_json = _run(lambda text=text: extract_json(text), args.repeat)
        worst = max(worst, t_code, t_json)
        print(f"{name:42} {len(text):>9,}  {t_code:>10.3f} s  {t_json:>10.3f} s  {out_code} | {out_json}")
    print(
        f"slowest call: {worst:.3f} s; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
