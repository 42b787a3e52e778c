"""How an agent crosses the wall: a recipe the jailed process builds it from, and the host paths it needs.

The harness never sends an agent object into the jail; it sends a recipe, and the jailed process builds the agent
with evalkit's own adapters (:func:`evalkit.pit._agent_child._agent_build`):

- the stub and ``model:<id>`` agents are named by kind;
- a ``module:function`` spec, and a function defined at the top level of an importable module, are **imported
  inside the jail**: the module's file (or its top-level package directory) is bound read-only into the jail,
  nothing else beside it;
- a function that cannot be imported by name (a lambda, a closure, a function defined in ``__main__`` or in code
  run with ``exec``) travels **by value**: its compiled code, and for each global name and closure cell it uses,
  either a copy of the value when it is plain data (built-in types only, as the wall's tagged-JSON codec carries
  them), a module (imported inside the jail), a function or class importable by name (imported inside the
  jail), another function sent by value the same way, or a list, tuple, set or dict of those. Anything else (a ``Release``, a price table, an open
  file, an object of the caller's) is refused with an error naming it, so nothing of the harness's state can
  ride along. What the function changes in its copies stays in the jail.

Modules outside the interpreter's prefix, the environment's site-packages and evalkit's own packages are bound
only if they contain none of the run's protected paths (the release, the prices, the outputs, the cache, the
store, the working directory).

The recipe also names library modules the zygote may import once, before it forks, so that every agent process
starts with them loaded (``warm``): only modules this process has imported itself (code the harness already
trusts to run) that the agent's recipe or the top-level imports of its own module files name. The agent's own
code never runs in the zygote.
"""

from __future__ import annotations

import ast
import base64
import dis
import marshal
import os
import sys
import sysconfig
import types
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit.pit._agent_base import AgentOrigin, AgentSpecError, module_location
from evalkit.wall import TaggedError, tagged_encode

__all__ = ["Recipe", "jail_roots", "recipe_for"]

_GLOBAL_OPS = frozenset(
    {"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME", "DELETE_NAME"}
)
_PLAIN = (list, tuple, dict, set, frozenset)
_MAX_DEPTH = 50
_HOW = (
    "define the agent in a module of its own and name it 'module:function' (or pass from_callable a function "
    "defined at the top level of an importable module), or give it plain data instead"
)


@attrs.frozen
class Recipe:
    """What the jailed process is sent (``spec``, JSON) and the host paths it needs: ``binds`` (bound
    read-only at the same place) and ``paths`` (put first on its ``sys.path``)."""

    spec: Mapping[str, Any]
    binds: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    warm: tuple[str, ...] = ()


@cache
def jail_roots() -> tuple[str, ...]:
    """Host directories every agent jail holds: the interpreter's prefix (the standard library), this
    environment's site-packages, and evalkit's own package directories (evalkit, pit_harness, evalkit_core)."""
    import evalkit_core

    paths = sysconfig.get_paths()
    roots = [os.path.realpath(sys.base_prefix), paths["purelib"], paths["platlib"]]
    roots += [str(Path(__file__).resolve().parents[1]), str(Path(evalkit_core.__file__ or "").resolve().parent)]
    facade = module_location("pit_harness")  # found, not imported: evalkit does not import its facade
    if facade is not None and facade.submodule_search_locations:
        roots += [str(Path(p).resolve()) for p in facade.submodule_search_locations]
    out: list[str] = []
    for r in dict.fromkeys(os.path.realpath(p) for p in roots):
        if not any(_within(r, o) for o in out):
            out = [o for o in out if not _within(o, r)]
            out.append(r)
    return tuple(out)


def site_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(os.path.realpath(p) for p in (paths["purelib"], paths["platlib"])))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def recipe_for(agent: object, protected: Iterable[str | Path]) -> Recipe:
    """The recipe of ``agent`` (an agent from this package), or AgentSpecError saying why it cannot cross."""
    origin = getattr(agent, "origin", None)
    name = str(getattr(agent, "name", "agent"))
    if not isinstance(origin, AgentOrigin):
        raise AgentSpecError(
            f"agent {name!r}: a run builds its agent inside a jail and cannot send this object there; pass "
            "stub_agent, from_callable(fn), from_tool_loop(step), from_model(id) or a 'module:function' spec"
        )
    builder = _Builder(name, [os.path.realpath(p) for p in protected])
    spec: dict[str, Any] = {"kind": origin.kind, "name": name}
    options = dict(origin.options)
    if origin.kind == "stub":
        pass
    elif origin.kind == "model":
        spec.update(model_id=origin.spec, options=options)
    elif origin.kind == "spec":
        module, _, attr = origin.spec.partition(":")
        builder.need_module(module)
        spec["target"] = builder.recipe(["import", module, attr])
        spec["where"] = f"{attr!r} in module {module!r}"
    elif origin.kind == "inspect":
        module, _, _attr = origin.spec.partition(":")
        builder.need_module(module)
        spec.update(solver=origin.spec, options=options)
    elif origin.kind in ("callable", "tool_loop"):
        root = builder.ref(origin.target, "the agent's function")
        spec["target"] = builder.recipe(root)
        if origin.kind == "tool_loop":
            spec["options"] = options
    else:
        raise AgentSpecError(f"agent {name!r}: unknown origin {origin.kind!r}")
    warm = ["evalkit.pit._agents", "evalkit.pit._guard", "evalkit.pit._sdk_transport"]
    if origin.kind == "model":
        warm.append("evalkit.pit._model_agent")
    if origin.kind == "inspect":  # Inspect takes seconds to import: once in the zygote, not once per cell
        warm.append("evalkit.pit._inspect")
    own = _top_package(origin)
    warm += [m for m in builder.library_imports() if m.partition(":")[0].partition(".")[0] != own]
    return Recipe(
        spec=spec, binds=tuple(builder.binds), paths=tuple(builder.paths), warm=tuple(dict.fromkeys(warm))
    )


class _Builder:
    def __init__(self, agent: str, protected: list[str]) -> None:
        self.agent = agent
        self.protected = protected
        self.functions: list[dict[str, Any]] = []
        self.memo: dict[int, int] = {}
        self.tables: list[dict[str, Any]] = []
        self.table_of: dict[int, int] = {}
        self.binds: list[str] = []
        self.paths: list[str] = []
        self.named: list[str] = []  # "module" or "module:attribute" the recipe names
        self.depth = 0

    def recipe(self, root: list[Any]) -> dict[str, Any]:
        return {"functions": self.functions, "globals": self.tables, "root": root}

    def refuse(self, where: str, what: str) -> AgentSpecError:
        return AgentSpecError(
            f"agent {self.agent!r}: {where} is {what}, which cannot be sent into the agent's jail; {_HOW}"
        )

    # -- modules -------------------------------------------------------------------------------------------------

    def need_module(self, name: str) -> None:
        """Make module ``name`` importable inside the jail: nothing to do for the standard library,
        site-packages and evalkit; else bind its file or top-level package directory (never a protected path)."""
        top = name.partition(".")[0]
        if top in sys.builtin_module_names:
            return
        spec = module_location(name)
        if spec is None:
            raise AgentSpecError(
                f"agent {self.agent!r}: cannot import module {name!r} (not found on the Python path)"
            )
        if spec.submodule_search_locations:
            places = [os.path.realpath(p) for p in spec.submodule_search_locations]
            parents = [str(Path(p).parent) for p in places]
        elif spec.origin and spec.origin not in ("built-in", "frozen"):
            places = [os.path.realpath(spec.origin)]
            parents = [str(Path(places[0]).parent)]
        else:
            return
        roots = jail_roots()
        for place, parent in zip(places, parents, strict=True):
            if any(_within(place, r) for r in roots):
                self.named.append(name)
                continue
            for p in self.protected:
                if _within(p, place):
                    raise AgentSpecError(
                        f"agent {self.agent!r}: module {name!r} lives in {place}, which holds {p} (a path the agent "
                        "must not see); move the agent's code to a directory of its own"
                    )
            if place not in self.binds:
                self.binds.append(place)
            if parent not in self.paths:
                self.paths.append(parent)

    # -- values --------------------------------------------------------------------------------------------------

    def ref(self, value: object, where: str) -> list[Any]:
        if isinstance(value, types.ModuleType):
            if value.__name__ == "__main__" or value.__spec__ is None:
                raise self.refuse(where, f"the module {value.__name__!r} (not importable by name)")
            self.need_module(value.__name__)
            return ["module", value.__name__]
        named = self._importable(value)
        if named is not None:
            self.need_module(named[0])
            if self.named and self.named[-1] == named[0]:
                self.named[-1] = f"{named[0]}:{named[1].partition('.')[0]}"
            return ["import", *named]
        if isinstance(value, types.FunctionType):
            return self._function(value)
        try:
            return ["data", tagged_encode(value)]
        except (TaggedError, RecursionError):
            pass
        kind = type(value).__name__
        if (
            type(value) in _PLAIN and self.depth < _MAX_DEPTH
        ):  # a container of what can cross (functions, say)
            self.depth += 1
            try:
                if isinstance(value, dict):
                    items = cast("dict[object, object]", value).items()
                    return ["dict", [[self.ref(k, where), self.ref(v, where)] for k, v in items]]
                return [kind, [self.ref(v, where) for v in cast("Iterable[object]", value)]]
            finally:
                self.depth -= 1
        raise self.refuse(where, f"a {kind}" if type(value) in _PLAIN else f"a {kind} (not plain data)")

    def _importable(self, value: object) -> tuple[str, str] | None:
        """(module, qualified name) when ``value`` can be found again by importing that module."""
        if value is None or isinstance(value, str | int | float | bool | bytes | list | tuple | dict | set):
            return None
        module = getattr(value, "__module__", None)
        qual = getattr(value, "__qualname__", None)
        if (
            isinstance(module, str)
            and isinstance(qual, str)
            and isinstance(value, type | types.FunctionType | types.BuiltinFunctionType)
        ):
            if "<" in qual or module == "__main__":
                return None
            loaded = sys.modules.get(module)
            if loaded is None or getattr(loaded, "__spec__", None) is None:
                return None
            obj: object = loaded
            for part in qual.split("."):
                obj = getattr(obj, part, None)
            return (module, qual) if obj is value else None
        # an instance kept under a name in the module that defines its type, or in the module that keeps
        # evalkit's own agents (stub_agent, whose type is defined in _agent_base)
        cls_module = getattr(type(value), "__module__", None)
        for name in dict.fromkeys([*_candidate_modules(cls_module), "evalkit.pit._agents"]):
            loaded = sys.modules.get(name)
            if loaded is None or getattr(loaded, "__spec__", None) is None or name == "__main__":
                continue
            for key, obj in vars(loaded).items():
                if obj is value and not key.startswith("__"):
                    return (name, key)
        return None

    def library_imports(self) -> list[str]:
        """Library modules worth importing once in the zygote: named by the recipe or imported at the top of
        the agent's own module files, found inside the jail's roots, and already imported by this process."""
        wanted = list(self.named)
        for place in self.binds:
            files = [Path(place)] if place.endswith(".py") else sorted(Path(place).rglob("*.py"))[:200]
            for f in files:
                wanted += _top_level_imports(f)
        roots = jail_roots()
        out: list[str] = []
        for item in wanted:
            module = item.partition(":")[0]
            loaded = sys.modules.get(module)
            where = getattr(loaded, "__file__", None) if loaded is not None else None
            if where and any(_within(os.path.realpath(where), r) for r in roots):
                out.append(item)
        return out

    def _function(self, fn: types.FunctionType) -> list[Any]:
        key = id(fn)
        if key in self.memo:
            return ["function", self.memo[key]]
        index = len(self.functions)
        self.memo[key] = index
        entry: dict[str, Any] = {}
        self.functions.append(entry)
        qual = fn.__qualname__
        code = fn.__code__
        table = self._table(fn)
        names = self.tables[table]["names"]
        for name in sorted(_global_names(code)):
            if name in fn.__globals__ and name not in names:
                names[name] = None  # reserved: a function may refer to itself through its module
                names[name] = self.ref(fn.__globals__[name], f"the global {name!r} that {qual} uses")
        closure: list[Any] | None = None
        if fn.__closure__ is not None:
            closure = []
            for var, cell in zip(code.co_freevars, fn.__closure__, strict=True):
                try:
                    content = cell.cell_contents
                except ValueError:  # an empty cell (assigned later): stays empty
                    closure.append(None)
                    continue
                closure.append(self.ref(content, f"the variable {var!r} that {qual} closes over"))
        entry.update(
            code=base64.b64encode(marshal.dumps(code)).decode("ascii"),
            name=fn.__name__,
            qualname=qual,
            module=str(fn.__module__),
            globals=table,
            closure=closure,
            defaults=self.ref(fn.__defaults__, f"a default argument of {qual}") if fn.__defaults__ else None,
            kwdefaults=self.ref(fn.__kwdefaults__, f"a default argument of {qual}")
            if fn.__kwdefaults__
            else None,
        )
        return ["function", index]

    def _table(self, fn: types.FunctionType) -> int:
        key = id(fn.__globals__)
        if key not in self.table_of:
            self.table_of[key] = len(self.tables)
            self.tables.append({"module": str(fn.__globals__.get("__name__", fn.__module__)), "names": {}})
        return self.table_of[key]


def _top_package(origin: AgentOrigin) -> str | None:
    """The agent's own top-level package (never imported in the zygote)."""
    if origin.kind == "spec":
        return origin.spec.partition(":")[0].partition(".")[0]
    module = getattr(origin.target, "__module__", None)
    return module.partition(".")[0] if isinstance(module, str) else None


def _top_level_imports(path: Path) -> list[str]:
    """``module`` and ``module:name`` for each absolute import at the top level of a Python file (no code run)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [f"{node.module}:{a.name}" for a in node.names if a.name != "*"]
    return out


def _candidate_modules(name: object) -> Iterator[str]:
    if not isinstance(name, str):
        return
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        yield ".".join(parts[:i])


def _global_names(code: types.CodeType) -> set[str]:
    """Every global name the code (and the code nested in it: comprehensions, lambdas, inner functions) uses."""
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in _GLOBAL_OPS and isinstance(ins.argval, str):
                names.add(ins.argval)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names
