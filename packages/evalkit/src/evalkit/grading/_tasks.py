"""Tasks: the on-disk format, the loader, the JSON Schema that ships with the package, and prompt rendering.

A task is a directory ``<bank>/<family>/<slug>/<NNN>/`` whose path relative to the bank is its id
(``code/run-length-encode/001``). It holds ``task.json`` and, for code tasks, ``reference.py``.
The full format is in ``docs/verifiers.md``; the schema is ``evalkit/schemas/task.schema.json``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal, TypeAlias, cast

import attrs

from evalkit.wall import JSON
from evalkit_core import EvalkitError, digest, read_json_object

__all__ = [
    "JSON",
    "Assertion",
    "CallTest",
    "CheckTest",
    "CodeTask",
    "StructuredTask",
    "Task",
    "TaskError",
    "TypeSpec",
    "bank_digest",
    "conforms",
    "load_task",
    "load_tasks",
    "parse_type",
    "render_prompt",
    "task_dirs",
    "task_schema",
    "validate_task_json",
]


TASK_FILE = "task.json"
REFERENCE_FILE = "reference.py"
_ID_RE = re.compile(r"^(code|structured)/[a-z0-9][a-z0-9-]*/[0-9]{3}$")
ASSERTION_OPS = (
    "keys_exactly",
    "path_equals",
    "path_matches",
    "path_in",
    "path_type",
    "path_len",
    "path_approx",
)
JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")


class TaskError(EvalkitError):
    """A task directory or file is missing, malformed, or does not match the task format."""


# --------------------------------------------------------------------------------------------- types


@attrs.frozen
class TypeSpec:
    """A parsed type-grammar string: ``int``, ``list[T]``, ``dict[str,T]``, ``optional[T]``, ``tuple[T,...]``."""

    kind: str
    args: tuple[TypeSpec, ...] = ()

    def __str__(self) -> str:
        if self.kind == "dict":
            return f"dict[str,{self.args[0]}]"
        if not self.args:
            return self.kind
        return f"{self.kind}[{','.join(str(a) for a in self.args)}]"


_ATOMS = ("int", "float", "str", "bool", "none", "any")
_TOKEN = re.compile(r"\s*([A-Za-z_]+|\[|\]|,)")


def parse_type(text: str) -> TypeSpec:
    """Parse a type-grammar string; raise ``ValueError`` naming what was expected."""
    return _parse_type(text)


@lru_cache(maxsize=4096)
def _parse_type(text: str) -> TypeSpec:
    # cached: a bank names a few types many times (HumanEval's 164 tasks, 377 types, 30 distinct), and a TypeSpec
    # is immutable; an error is raised again each time (lru_cache keeps no exception)
    tokens: list[str] = []
    pos = 0
    stripped = text.strip()
    while pos < len(stripped):
        m = _TOKEN.match(stripped, pos)
        if not m:
            raise ValueError(f"type {text!r}: unexpected character at {pos}")
        tokens.append(m.group(1))
        pos = m.end()
    spec, rest = _parse_tokens(text, tokens)
    if rest:
        raise ValueError(f"type {text!r}: unexpected {''.join(rest)!r} after the type")
    return spec


def _parse_tokens(text: str, tokens: list[str]) -> tuple[TypeSpec, list[str]]:
    if not tokens:
        raise ValueError(f"type {text!r}: expected a type")
    head, rest = tokens[0], tokens[1:]
    if head in _ATOMS:
        return TypeSpec(head), rest
    if head not in ("list", "dict", "optional", "tuple"):
        raise ValueError(
            f"type {text!r}: unknown type {head!r} (expected one of {', '.join(_ATOMS)}, list, dict, optional, tuple)"
        )
    if not rest or rest[0] != "[":
        raise ValueError(f"type {text!r}: {head} needs parameters in brackets")
    rest = rest[1:]
    args: list[TypeSpec] = []
    while True:
        arg, rest = _parse_tokens(text, rest)
        args.append(arg)
        if not rest:
            raise ValueError(f"type {text!r}: missing ']'")
        if rest[0] == "]":
            rest = rest[1:]
            break
        if rest[0] != ",":
            raise ValueError(f"type {text!r}: expected ',' or ']'")
        rest = rest[1:]
    if head in ("list", "optional") and len(args) != 1:
        raise ValueError(f"type {text!r}: {head} takes one parameter")
    if head == "dict":
        if len(args) != 2 or args[0] != TypeSpec("str"):
            raise ValueError(f"type {text!r}: dict takes two parameters and its keys must be str")
        return TypeSpec("dict", (args[1],)), rest
    return TypeSpec(head, tuple(args)), rest


def conforms(value: object, spec: TypeSpec) -> bool:
    """True when the JSON ``value`` is a value of ``spec`` (ints count as floats; bools are not ints)."""
    kind = spec.kind
    if kind == "any":
        return True
    if kind == "none":
        return value is None
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "optional":
        return value is None or conforms(value, spec.args[0])
    if kind == "list":
        return isinstance(value, list) and all(conforms(v, spec.args[0]) for v in cast("list[object]", value))
    if kind == "tuple":
        if not isinstance(value, list):
            return False
        items = cast("list[object]", value)
        return len(items) == len(spec.args) and all(
            conforms(v, s) for v, s in zip(items, spec.args, strict=True)
        )
    if kind == "dict":
        return isinstance(value, dict) and all(
            conforms(v, spec.args[0]) for v in cast("dict[str, object]", value).values()
        )
    return False


# --------------------------------------------------------------------------------------------- values


@attrs.frozen
class CallTest:
    """Call the entry point with ``args``/``kwargs``; compare the JSON result with ``expected`` outside the sandbox."""

    args: tuple[JSON, ...]
    kwargs: Mapping[str, JSON]
    expected: JSON

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"args": list(self.args), "expected": self.expected}
        if self.kwargs:
            out["kwargs"] = dict(self.kwargs)
        return out


@attrs.frozen
class CheckTest:
    """An assert-style check program defining ``check(candidate)`` (the HumanEval form). ``context`` is task code
    the check may use (HumanEval's prompt, whose helpers some checks call); both run outside the candidate."""

    check: str
    context: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {"check": self.check, "context": self.context} if self.context else {"check": self.check}


@attrs.frozen
class Assertion:
    """One structured-output assertion at a JSON Pointer path."""

    op: str
    path: str
    value: JSON
    tolerance: float | None = None

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"op": self.op, "path": self.path, "value": self.value}
        if self.tolerance is not None:
            out["tolerance"] = self.tolerance
        return out


@attrs.frozen
class CodeTask:
    id: str
    description: str
    entry_point: str
    signature: str
    arg_types: tuple[TypeSpec, ...]
    return_type: TypeSpec
    float_tolerance: float | None
    public_tests: tuple[CallTest | CheckTest, ...]
    hidden_tests: tuple[CallTest | CheckTest, ...]
    reference: str
    digest: str
    raw: Mapping[str, JSON] = attrs.field(repr=False, eq=False)
    family: Literal["code"] = "code"


@attrs.frozen
class StructuredTask:
    id: str
    description: str
    input_text: str
    schema: Mapping[str, JSON]
    reference: JSON
    public_assertions: tuple[Assertion, ...]
    hidden_assertions: tuple[Assertion, ...]
    digest: str
    raw: Mapping[str, JSON] = attrs.field(repr=False, eq=False)
    family: Literal["structured"] = "structured"


Task: TypeAlias = CodeTask | StructuredTask


# --------------------------------------------------------------------------------------------- schema


@cache
def _schema_text() -> str:
    from importlib import resources  # here: grading never reads the schema, and this import costs its start

    return resources.files("evalkit").joinpath("schemas", "task.schema.json").read_text(encoding="utf-8")


def task_schema() -> dict[str, JSON]:
    """The task JSON Schema (Draft 2020-12) shipped in the package; a fresh copy each call."""
    return cast("dict[str, JSON]", json.loads(_schema_text()))


def validate_task_json(data: object) -> list[str]:
    """Schema problems of one parsed ``task.json`` as ``<json pointer>: <message>`` lines (empty when valid)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(task_schema())
    problems: list[str] = []
    for err in sorted(validator.iter_errors(cast("JSON", data)), key=lambda e: list(e.absolute_path)):
        problems.extend(_schema_messages(err))
    return problems


def _schema_messages(err: Any) -> list[str]:
    """Short ``<json pointer>: <message>`` lines for one jsonschema error, naming the field, never the whole value.

    A ``oneOf`` over the families is explained by the branch the object meant (the one whose ``family`` matched,
    else the one with the fewest complaints); a misspelled key is one line naming it and the field it stands for.
    """
    if err.validator in ("oneOf", "anyOf") and err.context:
        branches: dict[int, list[Any]] = {}
        for sub in err.context:
            branches.setdefault(int(sub.schema_path[0]), []).append(sub)

        def rank(subs: list[Any]) -> tuple[int, int]:
            wrong_family = any(s.validator == "const" and list(s.path) == ["family"] for s in subs)
            return (int(wrong_family), len(subs))

        return _flat_messages(min(branches.values(), key=rank))
    return _flat_messages([err])


def _flat_messages(errors: list[Any]) -> list[str]:
    import difflib

    missing: dict[str, set[str]] = {}
    for e in errors:
        if e.validator == "required":
            pointer = "/" + "/".join(str(p) for p in e.absolute_path)
            missing.setdefault(pointer, set()).add(str(e.message).split("'")[1])
    out: list[str] = []
    used: set[tuple[str, str]] = set()
    for e in errors:
        pointer = "/" + "/".join(str(p) for p in e.absolute_path)
        if e.validator in ("oneOf", "anyOf") and e.context:
            out.extend(_schema_messages(e))
        elif e.validator == "additionalProperties" and isinstance(e.instance, dict):
            known = cast("dict[str, object]", e.schema.get("properties") or {})
            for name in sorted(str(k) for k in cast("dict[str, object]", e.instance) if str(k) not in known):
                wanted = sorted(missing.get(pointer, set()) - {m for p, m in used if p == pointer})
                near = difflib.get_close_matches(name, wanted, n=1) or difflib.get_close_matches(name, list(known), n=1)
                if near and near[0] in wanted:
                    used.add((pointer, near[0]))
                    out.append(f"{pointer}: field {name!r} is not a task field, did you mean {near[0]!r}?")
                elif near:
                    out.append(f"{pointer}: unexpected field {name!r} (did you mean {near[0]!r}?)")
                else:
                    out.append(f"{pointer}: unexpected field {name!r} (allowed: {', '.join(sorted(known))})")
        elif e.validator != "required":
            message = str(e.message)
            out.append(f"{pointer}: {message if len(message) <= 200 else message[:200] + '...'}")
    for pointer, names in sorted(missing.items()):
        out.extend(f"{pointer}: field {n!r} is missing" for n in sorted(names) if (pointer, n) not in used)
    return out


# --------------------------------------------------------------------------------------------- loading


def _field(
    path: Path, data: Mapping[str, JSON], name: str, kind: type | tuple[type, ...], *, optional: bool = False
) -> JSON:
    if name not in data:
        if optional:
            return None
        raise TaskError(f"{path}: field {name!r} is missing")
    value = data[name]
    if optional and value is None:
        return None
    if not isinstance(value, kind) or (
        isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
    ):
        raise TaskError(f"{path}: field {name!r} has the wrong type (got {type(value).__name__})")
    return value


def _tests(path: Path, data: Mapping[str, JSON], name: str) -> tuple[CallTest | CheckTest, ...]:
    raw = cast("list[JSON]", _field(path, data, name, list))
    out: list[CallTest | CheckTest] = []
    for i, item in enumerate(raw):
        where = f"{path}: {name}[{i}]"
        if not isinstance(item, dict):
            raise TaskError(f"{where}: expected an object")
        if "check" in item:
            check = item["check"]
            context = item.get("context", "")
            if not isinstance(check, str) or not isinstance(context, str) or not set(item) <= {"check", "context"}:
                raise TaskError(
                    f"{where}: an assert-style test is {{'check': '<python source>'}} with an optional"
                    " 'context': '<python source>'"
                )
            out.append(CheckTest(check, context))
            continue
        args = item.get("args")
        kwargs = item.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict) or "expected" not in item:
            raise TaskError(
                f"{where}: a call test needs 'args' (array), 'expected', and optional 'kwargs' (object)"
            )
        extra = set(item) - {"args", "kwargs", "expected"}
        if extra:
            raise TaskError(f"{where}: unexpected field(s) {sorted(extra)}")
        out.append(CallTest(tuple(args), dict(kwargs), item["expected"]))
    return tuple(out)


def _assertions(path: Path, data: Mapping[str, JSON], name: str) -> tuple[Assertion, ...]:
    raw = cast("list[JSON]", _field(path, data, name, list))
    out: list[Assertion] = []
    for i, item in enumerate(raw):
        where = f"{path}: {name}[{i}]"
        if not isinstance(item, dict):
            raise TaskError(f"{where}: expected an object")
        op, pointer = item.get("op"), item.get("path")
        if op not in ASSERTION_OPS:
            raise TaskError(f"{where}: 'op' must be one of {', '.join(ASSERTION_OPS)}")
        if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
            raise TaskError(f"{where}: 'path' must be a JSON Pointer ('' or starting with '/')")
        if "value" not in item:
            raise TaskError(f"{where}: 'value' is missing")
        tolerance = item.get("tolerance")
        if op == "path_approx":
            if not isinstance(tolerance, int | float) or isinstance(tolerance, bool) or tolerance < 0:
                raise TaskError(f"{where}: path_approx needs a non-negative number 'tolerance'")
            tolerance = float(tolerance)
        elif tolerance is not None:
            raise TaskError(f"{where}: 'tolerance' is only for path_approx")
        value = item["value"]
        if op == "path_type" and value not in JSON_TYPES:
            raise TaskError(f"{where}: path_type value must be one of {', '.join(JSON_TYPES)}")
        if op in ("keys_exactly", "path_in") and not isinstance(value, list):
            raise TaskError(f"{where}: {op} value must be an array")
        if op == "path_len" and (not isinstance(value, int) or isinstance(value, bool)):
            raise TaskError(f"{where}: path_len value must be an integer")
        if op == "path_matches":
            if not isinstance(value, str):
                raise TaskError(f"{where}: path_matches value must be a regular expression string")
            try:
                re.compile(value)
            except re.error as exc:
                raise TaskError(f"{where}: bad regular expression ({exc})") from None
        out.append(Assertion(op, pointer, value, tolerance))
    return tuple(out)


def load_task(task_dir: str | Path, bank: str | Path) -> Task:
    """Load one task directory; its id is its path relative to ``bank``. Raises :class:`TaskError`."""
    return _load_task(Path(task_dir), bank, os.path.realpath(bank))


def _load_task(d: Path, bank: str | Path, bank_real: str, real: str | None = None) -> Task:
    """:func:`load_task`, with the bank's real path resolved once by the caller (resolving both paths of each
    task with pathlib was a third of loading a bank), and the task's own when the caller knows it."""
    real = os.path.realpath(d) if real is None else real
    if real == bank_real:
        task_id = "."
    elif real.startswith(bank_real.rstrip("/") + "/"):
        task_id = Path(real[len(bank_real.rstrip("/")) + 1 :]).as_posix()
    else:
        raise TaskError(f"{d}: not inside the task bank {bank}")
    if not _ID_RE.match(task_id):
        raise TaskError(
            f"{d}: a task path must be <family>/<slug>/<NNN> with family code or structured, got {task_id!r}"
        )
    path = d / TASK_FILE
    data = read_json_object(path, TaskError, strict=True)
    family = data.get("family")
    if family != task_id.split("/", 1)[0]:
        raise TaskError(
            f"{path}: field 'family' is {family!r} but the task lives under {task_id.split('/', 1)[0]}/"
        )
    description = cast("str", _field(path, data, "description", str))
    if family == "code":
        ref_path = d / REFERENCE_FILE
        try:
            reference = ref_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TaskError(f"{ref_path}: file not found (code tasks need a reference solution)") from None
        try:
            arg_types = tuple(parse_type(t) for t in cast("list[str]", _field(path, data, "arg_types", list)))
            return_type = parse_type(cast("str", _field(path, data, "return_type", str)))
        except (ValueError, TypeError, AttributeError) as exc:
            raise TaskError(f"{path}: field 'arg_types'/'return_type': {exc}") from None
        tol = _field(path, data, "float_tolerance", (int, float), optional=True)
        body = {"task": data, "reference": reference}
        return CodeTask(
            id=task_id,
            description=description,
            entry_point=cast("str", _field(path, data, "entry_point", str)),
            signature=cast("str", _field(path, data, "signature", str)),
            arg_types=arg_types,
            return_type=return_type,
            float_tolerance=None if tol is None else float(cast("float", tol)),
            public_tests=_tests(path, data, "public_tests"),
            hidden_tests=_tests(path, data, "hidden_tests"),
            reference=reference,
            digest=digest(body),
            raw=data,
        )
    return StructuredTask(
        id=task_id,
        description=description,
        input_text=cast("str", _field(path, data, "input_text", str)),
        schema=cast("dict[str, JSON]", _field(path, data, "schema", dict)),
        reference=_field(path, data, "reference", (dict, list)),
        public_assertions=_assertions(path, data, "public_assertions"),
        hidden_assertions=_assertions(path, data, "hidden_assertions"),
        digest=digest({"task": data}),
        raw=data,
    )


def _task_dirs_below(root: Path) -> list[str]:
    """The directories under ``root`` (relative to it, ``.`` for itself) holding a ``task.json``, in path order.
    Symbolic links to directories are not followed, so each one's real path is the root's joined with it."""
    # strings, not Paths: a bank is walked on the way to every grading command's first job
    top = os.fspath(root)
    found: list[str] = []
    for here, dirs, files in os.walk(top):
        if (TASK_FILE in files or TASK_FILE in dirs) and os.path.exists(os.path.join(here, TASK_FILE)):  # noqa: PTH110, PTH118
            found.append(os.path.relpath(here, top))
    found.sort(key=lambda rel: [*([] if rel == "." else rel.split(os.sep)), TASK_FILE])  # noqa: PTH206 - as sorted Paths
    return found


def task_dirs(bank: str | Path) -> Iterator[Path]:
    """Every directory under ``bank`` holding a ``task.json``, in sorted order (directories reached through a
    symbolic link are not searched)."""
    root = Path(bank)
    for rel in _task_dirs_below(root):
        yield root / rel


def load_tasks(bank: str | Path) -> list[Task]:
    """Load every task under ``bank`` sorted by id. Raises :class:`TaskError` for the first bad task."""
    root = Path(bank)
    if not root.is_dir():
        raise TaskError(f"{root}: task directory not found")
    root_real = os.path.realpath(root)
    tasks = [
        _load_task(root / rel, root, root_real, root_real if rel == "." else os.path.join(root_real, rel))  # noqa: PTH118
        for rel in _task_dirs_below(root)
    ]
    if not tasks:
        raise TaskError(f"{root}: no tasks found (expected <family>/<slug>/<NNN>/task.json)")
    return tasks


def bank_digest(tasks: Sequence[Task]) -> str:
    """The digest of a task bank: of the map task id -> task digest."""
    return digest({"tasks": {t.id: t.digest for t in tasks}})


# --------------------------------------------------------------------------------------------- prompts


def _call_repr(entry_point: str, test: CallTest) -> str:
    parts = [json.dumps(a, ensure_ascii=False) for a in test.args]
    parts += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in test.kwargs.items()]
    return f"{entry_point}({', '.join(parts)}) == {json.dumps(test.expected, ensure_ascii=False)}"


def render_prompt(task: Task) -> str:
    """The prompt shown to a solver: the description and the public tests only (never the hidden ones)."""
    if isinstance(task, CodeTask):
        lines = [
            task.description.rstrip(),
            "",
            "Write a Python function with this signature:",
            "",
            task.signature,
            "",
        ]
        calls = [t for t in task.public_tests if isinstance(t, CallTest)]
        checks = [t for t in task.public_tests if isinstance(t, CheckTest)]
        if calls:
            lines.append("Examples (arguments and results in JSON notation):")
            lines += [f"    {_call_repr(task.entry_point, t)}" for t in calls]
            lines.append("")
        for t in checks:
            lines += [
                "It must pass this check, where `candidate` is your function:",
                "",
                "```python",
                t.check.rstrip(),
                "```",
                "",
            ]
        lines.append(f"Answer with one ```python fenced block defining `{task.entry_point}`.")
        return "\n".join(lines) + "\n"
    lines = [
        task.description.rstrip(),
        "",
        "Input:",
        "<<<",
        task.input_text,
        ">>>",
        "",
        "The answer must be one JSON value valid against this JSON Schema:",
        json.dumps(task.schema, indent=2, ensure_ascii=False),
        "",
    ]
    if task.public_assertions:
        lines.append("It must also satisfy these checks (JSON Pointer paths):")
        for a in task.public_assertions:
            tol = f" (within {a.tolerance:g})" if a.tolerance is not None else ""
            lines.append(f"    {a.op} {a.path or '(root)'} {json.dumps(a.value, ensure_ascii=False)}{tol}")
        lines.append("")
    lines.append("Answer with the JSON only, in one ```json fenced block.")
    return "\n".join(lines) + "\n"
