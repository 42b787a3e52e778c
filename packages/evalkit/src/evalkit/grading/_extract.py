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
import itertools
import re

import attrs

from evalkit.grading._extract_blocks import ExtractionError
from evalkit.grading._extract_blocks import checked as _checked
from evalkit.grading._extract_blocks import code_blocks as _code_blocks
from evalkit.grading._extract_json import extract_json, parse_json
from evalkit.grading._pyscan import MAX_CODE_CHARS as _MAX_CODE_CHARS
from evalkit.grading._pyscan import Parser as _Parser
from evalkit.grading._pyscan import scan_python as _scan_python

__all__ = ["ExtractionError", "extract_code", "extract_json", "parse_json"]

_MAX_SPLIT_CHARS = 128 << 10  # an unfenced answer longer than this is not split into statements
_MAX_SUBLEVELS = 2  # how many times an indented run under a prose line is split again
_BUILTINS = frozenset(dir(builtins))

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
