"""Getting code and JSON out of a model completion, in bounded time, memory and depth.

A completion is candidate-controlled text, so every step here is linear in its length and bounded in depth;
anything too big, too deep or malformed is an :class:`ExtractionError` (a failing verdict), never a
``MemoryError``, a ``RecursionError``, a crash or a hang of the grader:

- A completion over ``_MAX_COMPLETION_CHARS`` (1 MiB: 1,048,576 characters) is refused outright.
- Fenced blocks are found by one pass over the lines (no backtracking regex), tagged blocks by forward search.
- Python is handed to :func:`ast.parse` only in pieces of at most ``_MAX_CODE_CHARS`` (64 KiB), at most
  ``_PARSE_BUDGET`` (128 KiB, each parse counting 256 characters more) in all per call, and only after a
  linear pre-scan (:func:`_scan_python`) has bounded how deep its syntax tree can be (``_MAX_PY_NESTING``). The bound does not depend on the caller's
  recursion limit: CPython 3.11 builds the tree with C recursion scaled by that limit, so a raised limit plus a
  deep tree crashes the process; the pre-scan keeps every tree far below the default limit.
- JSON deeper than ``_MAX_JSON_DEPTH`` (64) is refused by a linear bracket pre-scan before :mod:`json` recurses;
  the "first balanced span" fallback tries spans in order and skips the ones a failed parse already decided, so
  the whole search reads each character a bounded number of times.

What is extracted, and why (shapes real models answer with; see ``tests/evalkit/test_verify_extract.py``):

- Code: fenced blocks labelled Python (``python``, ``Python``, ``py``, ``python3``, ``{python}``, ...) or
  unlabelled; a closing fence may carry text after it (`````  ### Output:``); a block never closed runs to the
  end; without fences, ``[PYTHON]...[/PYTHON]`` and ``<code>...</code>``. The last block that binds the entry
  point at module level is taken, together with the other blocks that define names it uses (transitively,
  imports included), in their original order. Without such a block, the whole answer if it parses, else the
  statements around the entry point's definition that parse, with leading and trailing prose dropped. Every
  candidate is dedented first (an answer indented as a whole, or whose first line alone is indented).
- JSON: the last fenced block that parses, else the whole text, else the first balanced ``{...}``/``[...]``.
  NaN, infinities (also ``1e400``), integers past Python's digit limit and lone surrogates are refused.
"""

from __future__ import annotations

import ast
import builtins
import html
import itertools
import json
import math
import re
import warnings
from array import array
from typing import cast

import attrs

from evalkit.grading._tasks import JSON

__all__ = ["ExtractionError", "extract_code", "extract_json", "parse_json"]

_MAX_COMPLETION_CHARS = 1 << 20
_MAX_CODE_CHARS = 64 << 10  # one piece of code handed to ast.parse
_PARSE_BUDGET = 128 << 10  # all of them in one extract_code call ...
_PARSE_COST = 256  # ... each costing this much more (so 200,000 one-line pieces cannot cost 200,000 parses)
_MAX_SPLIT_CHARS = 128 << 10  # an unfenced answer longer than this is not split into statements
_MAX_PY_NESTING = 400
_MAX_JSON_DEPTH = 64
_MAX_SUBLEVELS = 2  # how many times an indented run under a prose line is split again
_SPAN_WORK_FACTOR = 4  # the balanced-span search reads at most this many times the text

_CODE_LANG = re.compile(r"(?:python|py)[0-9.]*")
_JSON_LANGS = frozenset({"", "json", "jsonc", "javascript", "js"})
_BUILTINS = frozenset(dir(builtins))


class ExtractionError(ValueError):
    """No usable code or JSON in a completion. A candidate's failure, not a user error."""


def _checked(completion: str) -> str:
    """The completion with its line endings normalised to ``\\n``, or an error when it is too long."""
    if len(completion) > _MAX_COMPLETION_CHARS:
        raise ExtractionError(
            f"the completion has {len(completion):,} characters, over the {_MAX_COMPLETION_CHARS:,} limit"
        )
    return completion.replace("\r\n", "\n").replace("\r", "\n")


# --------------------------------------------------------------------------------------------- blocks

# One line at a time, so no match can run past a line end; `(.*)` is the info string or trailing text.
_FENCE_LINE = re.compile(r"([ \t]*)(`{3,}|~{3,})(.*)")
_INFO_LANG = re.compile(r"[\s{.]*([A-Za-z0-9_+.#-]*)")


@attrs.frozen
class _Fence:
    char: str
    length: int
    indent: int
    lang: str
    first: int  # index of the first content line


def _lang(info: str) -> str:
    m = _INFO_LANG.match(info)
    return m.group(1).lower() if m else ""


def _fenced(text: str) -> list[tuple[str, str]]:
    """``(lang, content)`` of every non-empty fenced block, in order, by one pass over the lines.

    A fence line inside a block closes it when it uses the same character, is at least as long as the opening
    fence and is indented at most three columns more (so a fence inside an indented docstring is content). Text
    after a closing fence is allowed; when it starts like a language label (```` ```python ````) it also opens the
    next block (an answer that forgot to close its previous block). A block never closed runs to the end.
    """
    if "```" not in text and "~~~" not in text:
        return []
    lines = text.split("\n")
    out: list[tuple[str, str]] = []
    current: _Fence | None = None
    for i, line in enumerate(lines):
        if "`" not in line and "~" not in line:
            continue
        m = _FENCE_LINE.match(line)
        if m is None:
            continue
        indent, fence, rest = m.groups()
        if current is not None:
            if fence[0] != current.char or len(fence) < current.length or len(indent) > current.indent + 3:
                continue
            if body := _content(lines[current.first : i]):
                out.append((current.lang, body))
            current = None
            rest = rest.strip()
            if not rest[:1].isalpha() and rest[:1] != "{":
                continue
        current = _Fence(fence[0], len(fence), len(indent), _lang(rest), i + 1)
    if current is not None and (body := _content(lines[current.first :])):
        out.append((current.lang, body))
    return out


def _content(lines: list[str]) -> str:
    body = "\n".join(lines).rstrip("\n")
    return body + "\n" if body else ""


_TAG_OPEN = re.compile(r"\[PYTHON\]|<code(?:\s[^<>\n]{0,200})?>", re.IGNORECASE)
_TAG_CLOSE = {"[": re.compile(r"\[/PYTHON\]", re.IGNORECASE), "<": re.compile(r"</code\s*>", re.IGNORECASE)}
_TAG_LANG = re.compile(r"(?:language|lang)-([A-Za-z0-9_+.#-]+)", re.IGNORECASE)


def _tagged(text: str) -> list[str]:
    """Code in ``[PYTHON]...[/PYTHON]`` (Code Llama's habit) or ``<code>...</code>`` (HTML-minded answers), by
    forward search: each search starts where the last one ended. ``<code>`` content is HTML-unescaped, and a
    ``<code class="language-x">`` for another language is skipped. An unclosed tag runs to the end.
    """
    out: list[str] = []
    pos = 0
    while (m := _TAG_OPEN.search(text, pos)) is not None:
        tag = m.group()
        close = _TAG_CLOSE[tag[0]].search(text, m.end())
        end = close.start() if close else len(text)
        pos = close.end() if close else len(text)
        body = text[m.end() : end]
        if tag[0] == "<":
            lang = _TAG_LANG.search(tag)
            if lang and not _CODE_LANG.fullmatch(lang.group(1).lower()):
                continue
            body = html.unescape(body)
        body = body.strip("\n")
        if body.strip():
            out.append(body + "\n")
    return out


def _code_blocks(text: str) -> list[str]:
    blocks = [body for lang, body in _fenced(text) if lang == "" or _CODE_LANG.fullmatch(lang)]
    return blocks or _tagged(text)


# --------------------------------------------------------------------------------------------- Python

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


def _scan_python(text: str) -> tuple[list[int], int]:
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


class _Parser:
    """:func:`ast.parse` within the bounds: size, nesting pre-scan, and a budget of characters per extraction.

    Holds the budget and the reasons it refused something, for the error message.
    """

    def __init__(self) -> None:
        self.budget = _PARSE_BUDGET
        self.notes: list[str] = []

    def parse(self, source: str, *, budgeted: bool = True) -> ast.Module | None:
        if not source.strip():
            return None
        if len(source) > _MAX_CODE_CHARS:
            self.note(f"code over {_MAX_CODE_CHARS:,} characters was not parsed")
            return None
        cost = len(source) + _PARSE_COST if budgeted else 0
        if cost > self.budget:
            self.note(f"the parse budget of {_PARSE_BUDGET:,} characters ran out")
            return None
        self.budget -= cost
        if _scan_python(source)[1] > _MAX_PY_NESTING:
            self.note(f"code nested deeper than {_MAX_PY_NESTING} was not parsed")
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


_INDENT = re.compile(r"[ \t]*")


def _prepare(text: str) -> str:
    """``text`` without the indentation common to its non-blank lines, and without the first non-blank line's
    own indentation (at module level the first statement must start at column 0; answers indented as a whole,
    or whose first line alone is indented, are common). Unchanged when there is nothing to remove.
    """
    head = text.lstrip(" \t\n")
    if len(head) == len(text) or (head and text[len(text) - len(head) - 1] == "\n"):
        return text  # the first non-blank line starts at column 0: nothing common to remove
    lines = text.split("\n")
    margin: str | None = None
    first: int | None = None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        ws = _INDENT.match(line)
        lead = ws.group() if ws else ""
        if first is None:
            first = i
            margin = lead
        elif margin and not lead.startswith(margin):
            n = 0
            while n < len(margin) and n < len(lead) and margin[n] == lead[n]:
                n += 1
            margin = margin[:n]
    if first is None:
        return text
    if margin:
        cut = len(margin)
        lines = [line[cut:] if line.startswith(margin) else line.lstrip(" \t") for line in lines]
    elif not lines[first][:1].isspace():
        return text
    lines[first] = lines[first].lstrip(" \t")
    return "\n".join(lines)


def _target_names(target: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _bindings(module: ast.Module) -> frozenset[str]:
    """Names bound at module level (also inside ``if``/``try``/``with``/``for``/``while``/``match`` bodies, not
    inside functions or classes): definitions, assignments with a value, imports.
    """
    out: set[str] = set()
    todo: list[ast.stmt] = list(module.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                out |= _target_names(t)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            if not isinstance(node, ast.AnnAssign) or node.value is not None:
                out |= _target_names(node.target)
        elif isinstance(node, ast.For | ast.AsyncFor):
            out |= _target_names(node.target)
            todo += node.body + node.orelse
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    out |= _target_names(item.optional_vars)
            todo += node.body
        elif isinstance(node, ast.If | ast.While):
            todo += node.body + node.orelse
        elif isinstance(node, ast.Try | ast.TryStar):
            todo += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                if handler.name:
                    out.add(handler.name)
                todo += handler.body
        elif isinstance(node, ast.Match):
            for case in node.cases:
                todo += case.body
    return frozenset(out)


def _free_names(module: ast.Module, bound_here: frozenset[str]) -> frozenset[str]:
    """Names ``module`` reads but binds nowhere (not even as a local), plus names its functions declare
    ``global`` that it does not bind at module level (``bound_here``), minus builtins: what another block may
    have to define. Binding anywhere counts as bound, so a helper whose name is also some function's local is
    missed (the price of one linear walk instead of a scope analysis).
    """
    loads: set[str] = set()
    bound: set[str] = set()
    declared: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
        elif isinstance(node, ast.Global):
            declared.update(node.names)
    return frozenset(((loads - bound) | (declared - bound_here)) - _BUILTINS)


def _prose_like(stmt: ast.stmt) -> bool:
    """A bare word ("Explanation") or "Output: 5" / "Complexity: O(n)": parses, but is prose."""
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Name)
    return isinstance(stmt, ast.AnnAssign) and stmt.value is None


@attrs.frozen
class _Unit:
    """A block, or a top-level statement of an unfenced answer (with its trailing blank lines), or a prose line:
    its source, its syntax tree when it parses, and the names it binds at module level.
    """

    source: str
    module: ast.Module | None
    bound: frozenset[str]

    @property
    def is_code(self) -> bool:
        if self.module is None or not self.module.body:
            return False
        if len(self.module.body) > 1:
            return True
        only = self.module.body[0]
        # A lone literal between prose lines is no code worth keeping either.
        return not (
            _prose_like(only) or (isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant))
        )


def _unit(source: str, parser: _Parser) -> _Unit:
    module = parser.parse(source)
    return _Unit(source, module, _bindings(module) if module else frozenset())


def _closure(units: list[_Unit | None], base: list[int], known: dict[int, frozenset[str]]) -> list[int]:
    """``base`` plus the code units defining names ``base`` needs, transitively (the last unit defining a name
    wins, as it would at run time), as sorted indices. Each unit is walked at most once (``known`` holds free
    names already computed), each name looked up at most once per unit taken.
    """
    chosen = set(base)
    base_bound: set[str] = set()
    for i in base:
        unit = units[i]
        assert unit is not None
        base_bound |= unit.bound
    definer: dict[str, int] = {}
    for i, unit in enumerate(units):
        if unit is not None and unit.is_code and i not in chosen:
            for name in unit.bound:
                definer[name] = i
    todo = list(base)
    while todo:
        i = todo.pop()
        unit = units[i]
        assert unit is not None
        assert unit.module is not None
        free = known.get(i)
        if free is None:
            free = _free_names(unit.module, unit.bound)
        for name in sorted(free - base_bound):
            j = definer.get(name)
            if j is not None and j not in chosen:
                chosen.add(j)
                todo.append(j)
    return sorted(chosen)


_CLAUSE = re.compile(r"(?:else|elif|except|finally)\b")


def _pieces(text: str, parser: _Parser, level: int = 0) -> list[_Unit]:
    """Split an unfenced answer into top-level statements and prose lines: a piece starts at each line at
    column 0 that begins a logical line and is not an ``else``/``elif``/``except``/``finally`` clause or the line
    after a decorator. A piece that does not parse and whose following lines are indented (prose introducing
    indented code) is split again below its first line, at most ``_MAX_SUBLEVELS`` times.
    """
    lines = text.split("\n")
    starts, _ = _scan_python(text)
    cuts: list[int] = []
    decorators = False
    for i in starts:
        line = lines[i] if i < len(lines) else ""
        if not line or line[0].isspace() or _CLAUSE.match(line):
            continue
        if decorators:
            decorators = line.startswith("@")
            continue
        cuts.append(i)
        decorators = line.startswith("@")
    if not cuts or cuts[0] != 0:
        cuts.insert(0, 0)
    cuts.append(len(lines))
    out: list[_Unit] = []
    for a, b in itertools.pairwise(cuts):
        piece = _unit("\n".join(lines[a:b]), parser)
        body = [line for line in lines[a + 1 : b] if line.strip()]
        if piece.module is None and level < _MAX_SUBLEVELS and body and body[0][:1].isspace():
            out.append(_Unit(lines[a], None, frozenset()))
            out += _pieces(_prepare("\n".join(lines[a + 1 : b])), parser, level + 1)
        else:
            out.append(piece)
    return out


def _from_blocks(blocks: list[str], entry_point: str, parser: _Parser) -> str | None:
    """The last block binding ``entry_point``, with the blocks defining what it uses (blocks are parsed lazily:
    from the last one back to the entry point's, and the others only when it needs a name it does not bind).
    """
    units: list[_Unit | None] = [None] * len(blocks)
    entry: int | None = None
    for i in range(len(blocks) - 1, -1, -1):
        if entry_point in blocks[i]:
            units[i] = unit = _unit(blocks[i], parser)
            if entry_point in unit.bound:
                entry = i
                break
    if entry is None:
        return None
    unit = units[entry]
    assert unit is not None
    assert unit.module is not None
    free = _free_names(unit.module, unit.bound)
    if len(blocks) == 1 or not free:
        return blocks[entry]
    for i, block in enumerate(blocks):
        if units[i] is None:
            units[i] = _unit(block, parser)
    code = "\n".join(blocks[i] for i in _closure(units, [entry], {entry: free}))
    return code if len(code) <= _MAX_CODE_CHARS else blocks[entry]


def _from_pieces(text: str, entry_point: str, parser: _Parser) -> str | None:
    """The statements around the last one binding ``entry_point`` that parse (prose before and after dropped),
    with the statements elsewhere that define what they use.
    """
    if len(text) > _MAX_SPLIT_CHARS:
        parser.note(f"an unfenced answer over {_MAX_SPLIT_CHARS:,} characters is not split")
        return None
    pieces = _pieces(text, parser)
    code = [p.is_code for p in pieces]
    entry = next(
        (i for i in range(len(pieces) - 1, -1, -1) if code[i] and entry_point in pieces[i].bound), None
    )
    if entry is None:
        return None
    lo = hi = entry
    while lo > 0 and code[lo - 1]:
        lo -= 1
    while hi + 1 < len(pieces) and code[hi + 1]:
        hi += 1
    units: list[_Unit | None] = [p if c else None for p, c in zip(pieces, code, strict=True)]
    joined = (
        "\n".join(pieces[i].source for i in _closure(units, list(range(lo, hi + 1)), {})).strip("\n") + "\n"
    )
    # Each piece parses alone and ends complete, so the whole does; checked all the same (outside the budget).
    return joined if parser.parse(joined, budgeted=False) is not None else None


def extract_code(completion: str, entry_point: str) -> str:
    """The code defining ``entry_point`` in a model's answer (see the module docstring for the shapes).

    Always returns source that :func:`ast.parse` accepts and that binds ``entry_point`` at module level, with no
    NUL byte or lone surrogate, at most 64 KiB. Raises :class:`ExtractionError` otherwise.
    """
    text = _checked(completion)
    parser = _Parser()
    blocks = [_prepare(b) for b in _code_blocks(text)]
    code = _from_blocks(blocks, entry_point, parser)
    if code is None and entry_point in text:
        whole = _prepare(text)
        unit = _unit(whole, parser)
        if unit.module and entry_point in unit.bound and not any(map(_prose_like, unit.module.body)):
            code = whole  # all code: kept as written
        else:
            code = _from_pieces(whole, entry_point, parser)
    if code is not None:
        return code
    why = f"; {parser.notes[0]}" if parser.notes else ""
    if blocks:
        raise ExtractionError(
            f"no fenced code block defines {entry_point!r} ({len(blocks)} block(s) found){why}"
        )
    raise ExtractionError(f"no code defining {entry_point!r} found in the completion{why}")


# --------------------------------------------------------------------------------------------- JSON

# A string (to its closing quote, or to the end of its line when unclosed: JSON strings hold no raw newline)
# or a bracket. Brackets inside strings are not structure.
_JSON_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*+"?|[\[\]{}]')
_PAIR = {"]": "[", "}": "{"}


@attrs.frozen
class _Spans:
    """The balanced ``{...}``/``[...]`` spans of a text in order of their opening bracket (``end`` is -1 for one
    never closed), each with its own nesting depth, and the deepest nesting anywhere.
    """

    starts: array[int]
    ends: array[int]
    depths: array[int]
    deepest: int


def _json_spans(text: str) -> _Spans:
    starts: array[int] = array("q")
    ends: array[int] = array("q")
    depths: array[int] = array("q")
    stack: list[int] = []  # open spans
    below: list[int] = []  # per open span, the deepest absolute depth reached inside it
    deepest = 0
    for m in _JSON_TOKEN.finditer(text):
        c = text[m.start()]
        if c == '"':
            continue
        if c in "[{":
            starts.append(m.start())
            ends.append(-1)
            depths.append(0)
            stack.append(len(starts) - 1)
            below.append(len(stack))
            deepest = max(deepest, len(stack))
            continue
        if not stack:
            continue
        i = stack[-1]
        if text[starts[i]] != _PAIR[c]:
            stack.clear()  # no JSON value can contain a mismatched bracket: every open span is dead
            below.clear()
            continue
        stack.pop()
        d = below.pop()
        ends[i] = m.start()
        depths[i] = d - len(stack)
        if below:
            below[-1] = max(below[-1], d)
    return _Spans(starts, ends, depths, deepest)


def _no_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not valid JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"{literal} is not a finite number")
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def _no_surrogates(value: JSON) -> JSON:
    """``value`` unchanged, or ValueError when a string in it holds a lone surrogate (not Unicode text: it
    cannot be written as UTF-8 or canonicalised).
    """
    todo: list[JSON] = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            strings = [v]
        elif isinstance(v, list):
            todo += v
            continue
        elif isinstance(v, dict):
            todo += v.values()
            strings = list(v)
        else:
            continue
        for s in strings:
            if not s.isascii():
                try:
                    s.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError("a string holds a lone surrogate") from None
    return value


def _loads(text: str, deepest: int | None = None) -> JSON:
    if deepest is None:
        deepest = _json_spans(text).deepest
    if deepest > _MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_JSON_DEPTH} levels")
    return _no_surrogates(cast("JSON", _DECODER.decode(text)))


def _first_span(text: str, spans: _Spans) -> JSON | None:
    """The value of the first balanced span (by opening bracket) that parses, or None. A span nested deeper
    than ``_MAX_JSON_DEPTH`` is refused with all the spans inside it (a fragment of an over-deep document is
    not an answer).

    When the parse from span S fails at position e, every span opening inside S before e was read by that parse
    as a nested value: it parses if it closes before e (and is then the answer) and fails at e if it does not,
    so it is skipped unparsed. Parses therefore read disjoint stretches of the text; a work counter stops the
    search at ``_SPAN_WORK_FACTOR`` times the text's length all the same.
    """
    barrier = 0  # spans opening before it and closing at or after it failed with the span that set it
    skip_to = 0  # spans opening before it lie inside a span refused as a whole
    work = 0
    budget = _SPAN_WORK_FACTOR * max(len(text), 1)
    for i in range(len(spans.starts)):
        start, end = spans.starts[i], spans.ends[i]
        if end < 0 or start < skip_to or start < barrier <= end:
            continue
        if spans.depths[i] > _MAX_JSON_DEPTH:  # too deep: refused whole, with everything inside it
            skip_to = end + 1
            continue
        # A slice, not raw_decode(text, start): a JSONDecodeError counts the lines before its position.
        piece = text[start : end + 1]
        work += len(piece)
        try:
            value, _ = _DECODER.raw_decode(piece)
        except json.JSONDecodeError as exc:
            barrier = max(barrier, start + exc.pos)
        except ValueError:  # NaN, an infinity, too many digits: this span and all inside it are refused
            skip_to = end + 1
        else:
            try:
                return _no_surrogates(cast("JSON", value))
            except ValueError:
                skip_to = end + 1
        if work > budget:
            break
    return None


def parse_json(text: str) -> JSON:
    """A solution that is JSON text as it stands (no extraction), under the same bounds as :func:`extract_json`:
    size, depth, no NaN, infinities or lone surrogates. Raises :class:`ExtractionError` for anything else."""
    checked = _checked(text)
    try:
        return _loads(checked)
    except ValueError as exc:
        raise ExtractionError(f"not a JSON value: {exc}") from None


def extract_json(completion: str) -> JSON:
    """The JSON value in a completion: the last fenced block that parses, else the whole text, else the first
    balanced ``{...}``/``[...]`` span that parses. NaN, infinities, lone surrogates and nesting deeper than 64
    are refused.
    """
    text = _checked(completion)
    errors: list[str] = []
    for lang, block in reversed(_fenced(text)):
        if lang not in _JSON_LANGS:
            continue
        if not block.strip():
            errors.append("empty")
            continue
        try:
            return _loads(block)
        except ValueError as exc:
            errors.append(str(exc))
    spans = _json_spans(text)
    try:
        return _loads(text, spans.deepest)
    except ValueError:
        pass
    value = _first_span(text, spans)
    if value is not None:
        return value
    if errors:
        detail = f" (fenced block: {errors[-1]})"
    elif spans.deepest > _MAX_JSON_DEPTH:
        detail = f" (nested deeper than {_MAX_JSON_DEPTH} levels)"
    else:
        detail = ""
    raise ExtractionError(f"no JSON value found in the completion{detail}")
