"""A rough, linear Python tokenizer that bounds how deep a source's syntax tree can be, and the bounded
:func:`ast.parse` built on it (size, nesting pre-scan, a budget of characters per extraction); see
:mod:`evalkit.grading._extract` for why the bound matters."""

from __future__ import annotations

import ast
import re
import warnings

__all__ = ["MAX_CODE_CHARS", "MAX_PY_NESTING", "PARSE_BUDGET", "Parser", "scan_python"]

MAX_CODE_CHARS = 64 << 10  # one piece of code handed to ast.parse
PARSE_BUDGET = 128 << 10  # all of them in one extract_code call ...
PARSE_COST = 256  # ... each costing this much more (so 200,000 one-line pieces cannot cost 200,000 parses)
MAX_PY_NESTING = 400


_PY_TOKEN = re.compile(
    r"""
      (?P<nl>\n)
    | (?P<ws>[ \t\f\v]+)
    | (?P<comment>\#[^\n]*)
    | (?P<str>
          '''(?:[^'\\]|\\.?|'(?!''))*+(?:'''|\Z)
        | \"\"\"(?:[^"\\]|\\.?|"(?!""))*+(?:\"\"\"|\Z)
        | '(?:[^'\\\n]|\\.?)*+'?
        | "(?:[^"\\\n]|\\.?)*+"?
      )
    | (?P<cont>\\\n)
    | (?P<open>[(\[{])
    | (?P<close>[)\]}])
    | (?P<comma>,)
    | (?P<semi>;)
    | (?P<run>[^\s'"\#()\[\]{},;\\](?:[^\n'"\#()\[\]{},;\\]*[^\s'"\#()\[\]{},;\\])?)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_ATOM = re.compile(r"\w+|[^\w\s]")  # a run's tokens: words and single operator characters (an upper bound)
_FIRST_WORD = re.compile(r"\w*")
_PREFIX_CHARS = frozenset("rRbBuUfF")
_FSTRING_BRACE = re.compile(r"\{\{|\}\}|[{}]")
# Lines at column 0 that can never be inside brackets in valid Python: prose with an unclosed "(" stops there.
_STATEMENT_ONLY = ("def ", "class ", "async def ", "import ")


def _is_fstring(text: str, quote: int) -> bool:
    """Whether the string whose quote is at ``quote`` has an ``f`` among its (at most two) prefix letters."""
    i = quote
    while i > 0 and quote - i < 2 and text[i - 1] in _PREFIX_CHARS:
        i -= 1
    if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
        return False  # the letters end a longer name: not a prefix
    return "f" in text[i:quote].lower()


def _fstring_inner(token: str) -> int:
    """How many tokens (words and operator characters, an upper bound) an f-string's replacement fields hold."""
    depth = inner = 0
    last = 0
    for m in _FSTRING_BRACE.finditer(token):
        if depth:
            inner += len(_ATOM.findall(token, last, m.start()))
        piece = m.group()
        if piece == "{":
            depth += 1
        elif piece == "}" and depth:
            depth -= 1
        last = m.end()
    return inner


def scan_python(text: str) -> tuple[list[int], int]:
    """One pass of a rough Python tokenizer: the lines that begin a logical line (outside brackets, strings and
    backslash continuations), and an upper bound on how deep the syntax tree of ``text`` can be, if it parses.

    The bound counts, per statement, every token since the last comma at each open bracket level (a chain
    ``a+b+c``, ``-~-x``, ``a.b.c``, ``f()()``, ``lambda: lambda:``, ``x if c else y if d else ...`` nests one
    level per token at most), adds the open brackets, the indentation levels and the length of ``elif`` chains
    (an ``elif`` nests the next ``if`` inside the previous one). Implicitly concatenated strings count once; an
    f-string counts the characters inside its replacement fields. It over-counts real code (a few dozen for an
    ugly line) and never under-counts a tree CPython would build.
    """
    starts = [0]
    line = 0
    line_pos = 0
    levels = [0]  # tokens since the last comma, per open bracket
    total = 0  # sum(levels)
    best = 0
    prev_str = False
    first = True  # the next token begins a logical line
    indents: list[int] = []  # widths of the enclosing blocks, and their elif chains
    chains: list[int] = []
    chain_sum = 0
    for m in _PY_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in {"ws", "comment"}:
            continue
        if kind == "nl":
            line += 1
            line_pos = m.end()
            if len(levels) > 1 and text.startswith(_STATEMENT_ONLY, line_pos):
                levels = [0]
            if len(levels) == 1:
                starts.append(line)
                levels[0] = total = 0
                prev_str = False
                first = True
            continue
        if kind == "cont":
            line += 1
            line_pos = m.end()
            continue
        if (
            kind == "run"
            and m.end() - m.start() <= 2
            and text.startswith(("'", '"'), m.end())
            and set(m.group()) <= _PREFIX_CHARS
        ):
            continue  # a string prefix (r'...'), part of the string that follows
        if first:
            first = False
            width = m.start() - line_pos
            lead = _FIRST_WORD.match(m.group()) if kind == "run" else None
            word = lead.group() if lead else ""
            while indents and indents[-1] > width:
                indents.pop()
                chain_sum -= chains.pop()
            if indents and indents[-1] == width:
                if word == "elif":
                    chains[-1] += 1
                    chain_sum += 1
                elif word != "else":
                    chain_sum -= chains[-1]
                    chains[-1] = 0
            else:
                indents.append(width)
                chains.append(0)
        if kind == "str":
            token = m.group()
            line += token.count("\n")
            if prev_str:
                continue
            prev_str = True
            step = 1 + (_fstring_inner(token) if _is_fstring(text, m.start()) else 0)
        else:
            prev_str = False
            step = len(_ATOM.findall(m.group())) if kind == "run" else 1
        if kind == "close":
            if len(levels) > 1:
                total -= levels.pop()
            continue
        if kind == "comma" or (kind == "semi" and len(levels) == 1):
            total -= levels[-1]
            levels[-1] = 0
            continue
        levels[-1] += step
        total += step
        if kind == "open":
            levels.append(0)
        best = max(best, total + len(levels) + len(indents) + chain_sum)
    return starts, best


class Parser:
    """:func:`ast.parse` within the bounds: size, nesting pre-scan, and a budget of characters per extraction.

    Holds the budget and the reasons it refused something, for the error message.
    """

    def __init__(self) -> None:
        self.budget = PARSE_BUDGET
        self.notes: list[str] = []

    def parse(self, source: str, *, budgeted: bool = True) -> ast.Module | None:
        if not source.strip():
            return None
        if len(source) > MAX_CODE_CHARS:
            self.note(f"code over {MAX_CODE_CHARS:,} characters was not parsed")
            return None
        cost = len(source) + PARSE_COST if budgeted else 0
        if cost > self.budget:
            self.note(f"the parse budget of {PARSE_BUDGET:,} characters ran out")
            return None
        self.budget -= cost
        if scan_python(source)[1] > MAX_PY_NESTING:
            self.note(f"code nested deeper than {MAX_PY_NESTING} was not parsed")
            return None
        try:
            with warnings.catch_warnings():
                # Invalid escapes in a candidate's strings warn at parse time; not the grader's business.
                warnings.simplefilter("ignore")
                return ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            return None

    def note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)
