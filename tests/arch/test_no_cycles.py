"""No import cycle between files: the module-level import graph of packages/*/src, drawn with ``ast``, is acyclic.

What counts as an edge (decided here, and pinned by the planted-cycle tests below):

- Every ``import`` / ``from ... import`` statement anywhere in a file: at module level and inside functions,
  methods and ``try`` / ``if`` blocks alike. A function-local import is a real dependency that merely runs later;
  hiding a cycle inside a function does not remove it.
- Except statements under ``if TYPE_CHECKING:`` (or ``if typing.TYPE_CHECKING:``): they never run, only the type
  checker reads them.
- ``from pkg import name`` points at ``pkg/name.py`` (or ``pkg/name/__init__.py``) when that file exists, at
  ``pkg/__init__.py`` otherwise; ``import a.b.c`` points at ``a/b/c``. Relative imports are resolved. Importing
  a submodule does not add edges to its parent packages (Python runs them, but they hold only their public tables).
- A package ``__init__``'s lazy table (``lazy_exports`` over a dict of module *names*) is not an import statement
  and adds no edge: it resolves a name on first attribute access, after every module involved has finished
  loading, so it cannot make an initialisation cycle. If an ``__init__`` imports for real, that is an edge.
- Only modules of the workspace (files under packages/*/src) are nodes; third-party and stdlib imports are dropped.

A cycle is any strongly connected component of more than one file (or a file importing itself); the failure
message prints one concrete cycle per component, as a chain of files.
"""

from __future__ import annotations

import ast
import functools
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules(packages: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under packages/*/src."""
    out: dict[str, Path] = {}
    for src in sorted(packages.glob("*/src")):
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree except those under ``if TYPE_CHECKING:`` (their else branch counts)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: Mapping[str, Path]) -> set[str]:
    def deepest(name: str) -> str | None:
        parts = name.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in known:
                return candidate
            parts.pop()
        return None

    found: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            hit = deepest(alias.name)
            if hit is not None:
                found.add(hit)
        return found
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        stem = ".".join([*base, node.module] if node.module else base)
    else:
        stem = node.module or ""
    for alias in node.names:
        full = f"{stem}.{alias.name}"
        hit = full if full in known else deepest(stem)
        if hit is not None:
            found.add(hit)
    return found


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> ast.Module:
    return ast.parse(text)


def import_graph(packages: Path) -> dict[str, set[str]]:
    """Module -> the workspace modules its file imports (see the module docstring for what counts)."""
    known = _modules(packages)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = _parse(path.read_text(encoding="utf-8"))
        edges: set[str] = set()
        for node in _import_nodes(tree):
            edges |= _targets(name, path.name == "__init__.py", node, known)
        graph[name] = edges
    return graph


def _components(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                out.append(sorted(comp))
    return out


def _one_cycle(graph: Mapping[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first inside the component)."""
    members = set(comp)
    start = comp[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier: list[str] = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if nxt not in parent:
                    parent[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return [start, start]


def cyclic_components(packages: Path) -> list[list[str]]:
    graph = import_graph(packages)
    return [comp for comp in _components(graph) if len(comp) > 1 or comp[0] in graph[comp[0]]]


def cycles(packages: Path) -> list[list[str]]:
    """One concrete cycle per cyclic component, sorted by its first module."""
    graph = import_graph(packages)
    return sorted(_one_cycle(graph, comp) for comp in cyclic_components(packages))


def _describe(found: list[list[str]], packages: Path) -> str:
    files = _modules(packages)
    lines = [" -> ".join(str(files[m].relative_to(packages.parent)) for m in cycle) for cycle in found]
    lines += [f"(strongly connected: {', '.join(comp)})" for comp in cyclic_components(packages) if len(comp) > 2]
    return "\n".join(lines)


def test_the_tree_has_no_import_cycle_between_files() -> None:
    packages = ROOT / "packages"
    graph = import_graph(packages)
    # The graph is real: the walk saw the workspace and its edges (a broken walker would find no cycle either).
    assert len(graph) > 100, sorted(graph)
    assert "evalkit.wall" in graph["evalkit.grading._verifiers"], graph["evalkit.grading._verifiers"]
    assert "evalkit_core._canonical" in graph["evalkit_core._receipt"]
    found = cycles(packages)
    assert not found, "import cycles between files:\n" + _describe(found, packages)


# --- the check can fail ------------------------------------------------------------------------------------


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "packages"
    for pkg in sorted((ROOT / "packages").iterdir()):
        if (pkg / "src").is_dir():
            shutil.copytree(pkg / "src", dst / pkg.name / "src", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n" + text + "\n", encoding="utf-8")


def test_the_copy_sees_what_the_tree_sees(tree_copy: Path) -> None:
    assert import_graph(tree_copy) == import_graph(ROOT / "packages")


def _new_cycles(tree: Path, plant: Callable[[], None]) -> list[list[str]]:
    """The cycles planting adds (the planted tests hold whatever the tree's own state)."""
    before = cycles(tree)
    plant()
    return [cycle for cycle in cycles(tree) if cycle not in before]


@pytest.mark.parametrize(
    ("plants", "cycle"),
    [
        # Two files, top-level imports.
        (
            {"core/src/evalkit_core/_canonical.py": "import evalkit_core._receipt"},
            ["evalkit_core._canonical", "evalkit_core._receipt", "evalkit_core._canonical"],
        ),
        # Hidden inside a function (a lazy import is still an edge).
        (
            {"core/src/evalkit_core/_canonical.py": "def _late() -> None:\n    from evalkit_core._receipt import ReceiptError"},
            ["evalkit_core._canonical", "evalkit_core._receipt", "evalkit_core._canonical"],
        ),
        # Three new files in a ring, relative imports, one of them through `from . import name`.
        (
            {
                "router/src/evalkit_router/_ring_a.py": "from ._ring_b import x",
                "router/src/evalkit_router/_ring_b.py": "from . import _ring_c\nx = 1",
                "router/src/evalkit_router/_ring_c.py": "import evalkit_router._ring_a",
            },
            ["evalkit_router._ring_a", "evalkit_router._ring_b", "evalkit_router._ring_c", "evalkit_router._ring_a"],
        ),
        # A package __init__ importing for real a module that imports the package back.
        (
            {
                "evalkit/src/evalkit/wall/__init__.py": "from evalkit.wall._codec import encode",
                "evalkit/src/evalkit/wall/_codec.py": "from evalkit.wall import Sandbox",
            },
            ["evalkit.wall", "evalkit.wall._codec", "evalkit.wall"],
        ),
        # Across packages (an upward import that import-linter also refuses, seen here as a cycle).
        (
            {"core/src/evalkit_core/_errors.py": "try:\n    import evalkit_cli._pit\nexcept ImportError:\n    pass"},
            None,
        ),
    ],
)
def test_a_planted_cycle_is_found_and_printed(tree_copy: Path, plants: dict[str, str], cycle: list[str] | None) -> None:
    def plant() -> None:
        for rel, text in plants.items():
            path = tree_copy / rel
            if path.exists():
                _append(path, text)
            else:
                path.write_text(text + "\n", encoding="utf-8")

    found = _new_cycles(tree_copy, plant)
    assert found, "the planted cycle was not found"
    if cycle is not None:
        assert found == [cycle], found
    message = _describe(found, tree_copy)
    first = next(iter(plants))
    assert first.split("/src/")[1] in message, message


def test_type_checking_imports_are_not_edges(tree_copy: Path) -> None:
    canonical = tree_copy / "core/src/evalkit_core/_canonical.py"
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from evalkit_core._receipt import ReceiptError"
    assert _new_cycles(tree_copy, lambda: _append(canonical, typing_only)) == []
    # ... but the `else` branch of such a block runs, and counts.
    runs = "if TYPE_CHECKING:\n    pass\nelse:\n    import evalkit_core._receipt"
    assert _new_cycles(tree_copy, lambda: _append(canonical, runs)) == [
        ["evalkit_core._canonical", "evalkit_core._receipt", "evalkit_core._canonical"]
    ]


def test_a_lazy_table_is_not_an_edge(tree_copy: Path) -> None:
    """The packages' __init__ tables name their modules as strings; a module importing its package is no cycle."""
    codec = tree_copy / "evalkit/src/evalkit/wall/_codec.py"
    assert _new_cycles(tree_copy, lambda: _append(codec, "from evalkit.wall import Sandbox")) == []
    assert "evalkit.wall" in import_graph(tree_copy)["evalkit.wall._codec"]
