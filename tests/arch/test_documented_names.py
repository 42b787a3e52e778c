"""Every documented name still resolves: the public API survives a layout change.

- Every name in the ``__all__`` of every public module (no ``_private`` part in its dotted path) of
  packages/*/src resolves, including the names a package loads lazily.
- Nothing public was lost: ``public_names.json`` beside this file holds each public module's ``__all__`` as it
  was at fd6fc8f, the commit before evalkit was laid out as its rooms (drawn from that commit's sources with
  ``ast``); each of those names must still be there. Adding names is fine; removing or renaming one is an API
  change and needs a deliberate edit of that file.
- The pit_harness facade and its adapters, as the README shows them.
- Every import in a Python code block of README.md and docs/*.md, and every dotted name in backticks that starts
  with one of our packages (``evalkit_core.models.ModelClient``, ``evalkit.wall._codec``), resolves to a module
  or to an attribute of one: the docs name nothing that is gone.
- Every ``evalkit ...`` / ``pit-harness ...`` command line in a shell block of the docs names real commands, and
  every command and group of both console scripts answers ``--help``.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import machine  # pyright: ignore[reportImplicitRelativeImport]

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("evalkit_core", "evalkit", "pit_harness", "evalkit_router", "evalkit_training", "evalkit_cli")
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PINNED: dict[str, list[str]] = json.loads((Path(__file__).parent / "public_names.json").read_text())


def _public_modules() -> list[str]:
    out: list[str] = []
    for src in sorted((ROOT / "packages").glob("*/src")):
        for path in sorted(src.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            # A part that is no identifier is data, not a module: the seed bank's reference solutions
            # (evalkit/seed/tasks/code/median/001/reference.py) would import, and run, under such a name.
            if all(p.isidentifier() and not p.startswith("_") for p in parts):
                out.append(".".join(parts))
    return out


def _import(module: str) -> Any:
    """``importlib.import_module``, except that a module needing an optional extra this machine lacks (Inspect's
    adapters without ``inspect_ai``) skips the test with the reason that names the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # ModuleNotFoundError, or our own ImportError naming the extra, raised from it
        cause = exc if isinstance(exc, ModuleNotFoundError) else (exc.__cause__ or exc.__context__)
        top = (getattr(cause, "name", None) or "").split(".")[0]
        extra = next((c for c, (name, _) in machine.EXTRAS.items() if name == top), None)
        if extra is None:
            raise
        machine.need(extra)
        raise


def _all_of(module: str) -> list[str]:
    return list(getattr(_import(module), "__all__", []))


def _resolves(dotted: str) -> bool:
    """A module, or an attribute (chain) of the longest importable prefix."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = _import(".".join(parts[:i]))
        except ModuleNotFoundError as exc:
            if exc.name is not None and not ".".join(parts[:i]).startswith(exc.name):
                raise  # a third-party module is missing: an environment problem, not a docs one
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


# --- __all__ ---------------------------------------------------------------------------------------------


PUBLIC = _public_modules()


def test_the_walk_finds_the_public_modules() -> None:
    assert {"evalkit", "evalkit.wall", "evalkit.grading", "evalkit.pit", "evalkit.gates", "pit_harness",
            "evalkit_core.models", "evalkit_cli"} <= set(PUBLIC), PUBLIC


@pytest.mark.parametrize("module", PUBLIC)
def test_every_name_in_all_resolves(module: str) -> None:
    mod = _import(module)
    names = _all_of(module)
    assert len(names) == len(set(names)), f"{module}.__all__ repeats a name"
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize("module", sorted(PINNED))
def test_no_public_name_was_lost(module: str) -> None:
    assert module in PUBLIC, f"the public module {module} is gone"
    lost = sorted(set(PINNED[module]) - set(_all_of(module)))
    assert not lost, f"{module} no longer exports {lost}"


def test_the_pinned_list_is_real() -> None:
    """The pin holds what the README promises (a pin emptied by mistake would pass everything above)."""
    assert {"Bundle", "RunConfig", "load_prices", "run"} <= set(PINNED["pit_harness"])
    assert sum(len(v) for v in PINNED.values()) > 350


def test_the_facade_and_adapters_as_the_readme_shows_them() -> None:
    from evalkit_core import Release
    from pit_harness import Bundle, RunConfig, load_prices, run
    from pit_harness.adapters.model import from_model
    from pit_harness.adapters.plain import from_callable
    from pit_harness.adapters.tool_loop import from_tool_loop

    assert Bundle is Release
    assert all(callable(f) for f in (RunConfig, load_prices, run, from_callable, from_model, from_tool_loop))
    assert run.__module__.startswith("evalkit.pit")


@pytest.mark.needs("inspect")
def test_the_inspect_adapter_as_the_readme_shows_it() -> None:
    from pit_harness.adapters.inspect import from_inspect_solver, pit_tools

    assert callable(from_inspect_solver) and callable(pit_tools)


# --- the docs ----------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_DOTTED = re.compile(r"`((?:" + "|".join(ROOTS) + r")(?:\.\w+)+)`")


def _blocks(lang: tuple[str, ...]) -> Iterator[tuple[Path, str]]:
    for doc in DOCS:
        for m in _FENCE.finditer(doc.read_text(encoding="utf-8")):
            if m.group(1).lower() in lang:
                yield doc, m.group(2)


def _imports(code: str) -> Iterator[tuple[str, str | None]]:
    """(module, name or None) for each import statement of ours in a code block (parsed whole, else by line)."""
    try:
        trees = [ast.parse(code)]
    except SyntaxError:
        trees = []
        for line in code.splitlines():
            stripped = line.strip()
            if stripped.startswith(("import ", "from ")) and not stripped.endswith("("):
                try:
                    trees.append(ast.parse(stripped))
                except SyntaxError:
                    continue
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in ROOTS:
                        yield alias.name, None
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ROOTS:
                for alias in node.names:
                    yield node.module, alias.name


def _doc_imports() -> list[tuple[str, str, str | None]]:
    out = {(doc.name, module, name) for doc, code in _blocks(("python", "py", "pycon")) for module, name in _imports(code)}
    return sorted(out, key=lambda t: (t[0], t[1], t[2] or ""))


def _doc_dotted() -> list[tuple[str, str]]:
    out = {(doc.name, m.group(1)) for doc in DOCS for m in _DOTTED.finditer(doc.read_text(encoding="utf-8"))}
    return sorted(out)


def test_the_resolver_can_say_no() -> None:
    assert _resolves("evalkit_core.models.ModelClient.complete")
    assert _resolves("evalkit.wall._codec")
    assert not _resolves("evalkit.wall._no_such_module")
    assert not _resolves("evalkit.grading._eval.no_such_function")
    assert not _resolves("evalkit_core.models.ModelClient.no_such_method")
    assert ("x.md", "evalkit.wall._codec") in {("x.md", m.group(1)) for m in _DOTTED.finditer("see `evalkit.wall._codec`.")}


def test_the_docs_show_imports_and_dotted_names() -> None:
    assert len(_doc_imports()) > 10
    assert len(_doc_dotted()) > 20


@pytest.mark.parametrize(("doc", "module", "name"), _doc_imports())
def test_every_import_in_the_docs_works(doc: str, module: str, name: str | None) -> None:
    mod = _import(module)
    if name is not None and name != "*":
        assert hasattr(mod, name) or _resolves(f"{module}.{name}"), f"{doc}: from {module} import {name}"


@pytest.mark.parametrize(("doc", "dotted"), _doc_dotted())
def test_every_dotted_name_in_the_docs_resolves(doc: str, dotted: str) -> None:
    assert _resolves(dotted), f"{doc} names `{dotted}`, which does not exist"


# --- the CLI -----------------------------------------------------------------------------------------------


def _apps() -> dict[str, typer.Typer]:
    import evalkit_cli

    return {"evalkit": evalkit_cli.app, "pit-harness": evalkit_cli.pit_app}


def _paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _paths(sub, (*path, name))


def _commands() -> list[tuple[str, tuple[str, ...]]]:
    return [
        (script, path) for script, app in _apps().items() for path in _paths(typer.main.get_command(app))
    ]


COMMANDS = _commands()
# The commands as they were before the layout move (evalkit --help, pit-harness --help and their groups).
PINNED_COMMANDS = {
    "evalkit": {"adversary mine", "budget reconcile", "budget set", "budget show", "bundle build", "bundle check",
                "bundle demo", "bundle info", "bundle synth", "calls list", "campaign report", "campaign run",
                "campaign status", "campaign verify", "certify", "eval", "export", "gate", "holdout plan",
                "keys generate", "keys show", "models list", "report", "rewards export", "route run",
                "route simulate", "run", "tasks import", "tasks validate", "train grpo", "verify", "view"},
    "pit-harness": {"export", "run", "verify"},
}


def test_no_command_was_lost() -> None:
    have = {script: {" ".join(p) for s, p in COMMANDS if s == script} for script in PINNED_COMMANDS}
    for script, pinned in PINNED_COMMANDS.items():
        assert pinned <= have[script], (script, sorted(pinned - have[script]))


@pytest.mark.parametrize(("script", "path"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_every_command_answers_help(script: str, path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(_apps()[script], [*path, "--help"], prog_name=script)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert f"{script} {' '.join(path)}".strip() in " ".join(result.output.split())


def _doc_command_lines() -> list[tuple[str, str, tuple[str, ...]]]:
    """(doc, script, the leading words) of each `evalkit ...` / `pit-harness ...` line in a shell block."""
    out: set[tuple[str, str, tuple[str, ...]]] = set()
    for doc, code in _blocks(("bash", "sh", "shell", "console", "")):
        for raw in code.splitlines():
            line = raw.strip().removeprefix("$ ")
            m = re.match(r"^(?:uv run |uvx )?(evalkit|pit-harness)((?:\s+[a-z][a-z-]*)*)", line)
            if m:
                out.add((doc.name, m.group(1), tuple(m.group(2).split())))
    return sorted(out)


def test_the_docs_show_command_lines() -> None:
    assert len(_doc_command_lines()) > 20


@pytest.mark.parametrize(("doc", "script", "words"), _doc_command_lines())
def test_every_command_line_in_the_docs_names_real_commands(doc: str, script: str, words: tuple[str, ...]) -> None:
    """The leading words name a command or group; what follows a command (its arguments) is not checked here."""
    command: Any = typer.main.get_command(_apps()[script])
    for word in words:
        subs = getattr(command, "commands", None)
        if subs is None:
            return  # a command: the rest are its arguments
        assert word in subs, f"{doc}: `{script} {' '.join(words)}`: no command {word!r} (have {sorted(subs)})"
        command = subs[word]
