"""Task-bank validation: every reference through the real verifier against every test, plus the static checks
(schema, format, overlap of public and hidden tests, argument types)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from evalkit.grading._tasks import (
    CallTest,
    CheckTest,
    CodeTask,
    Task,
    TaskError,
    conforms,
    load_task,
    task_dirs,
    validate_task_json,
)
from evalkit.grading._verifiers import VerifierSettings, grade_many, schema_errors
from evalkit.wall import Sandbox
from evalkit_core import canonical_bytes

__all__ = ["Problem", "reference_solution", "validate_bank"]


@attrs.frozen
class Problem:
    """One reason a task bank does not validate: which task, which test (or ``-``), and what is wrong."""

    task_id: str
    test: str
    message: str

    def __str__(self) -> str:
        return f"{self.task_id} {self.test}: {self.message}"


def reference_solution(task: Task) -> str:
    """What the reference solver answers: the reference source, or the reference object as JSON text."""
    if isinstance(task, CodeTask):
        return task.reference
    return json.dumps(task.reference, ensure_ascii=False)


def _test_key(test: CallTest | CheckTest) -> bytes:
    if isinstance(test, CheckTest):
        return canonical_bytes({"check": test.check})
    return canonical_bytes({"args": list(test.args), "kwargs": dict(test.kwargs)})


def _static_problems(task: Task) -> list[Problem]:
    out: list[Problem] = []
    if isinstance(task, CodeTask):
        public = {_test_key(t): i for i, t in enumerate(task.public_tests)}
        for j, t in enumerate(task.hidden_tests):
            if _test_key(t) in public:
                out.append(
                    Problem(
                        task.id,
                        f"hidden/{j}",
                        f"same input as public/{public[_test_key(t)]} (public and hidden overlap)",
                    )
                )
        for group, tests in (("public", task.public_tests), ("hidden", task.hidden_tests)):
            for i, t in enumerate(tests):
                if not isinstance(t, CallTest) or t.kwargs:
                    continue
                if len(t.args) != len(task.arg_types):
                    out.append(
                        Problem(
                            task.id,
                            f"{group}/{i}",
                            f"{len(t.args)} args but arg_types lists {len(task.arg_types)}",
                        )
                    )
                    continue
                for k, (arg, spec) in enumerate(zip(t.args, task.arg_types, strict=True)):
                    if not conforms(arg, spec):
                        out.append(Problem(task.id, f"{group}/{i}", f"argument {k} is not a {spec}"))
                if not conforms(t.expected, task.return_type):
                    out.append(
                        Problem(task.id, f"{group}/{i}", f"expected value is not a {task.return_type}")
                    )
        return out
    public_a = {canonical_bytes(a.to_json()): i for i, a in enumerate(task.public_assertions)}
    for j, a in enumerate(task.hidden_assertions):
        key = canonical_bytes(a.to_json())
        if key in public_a:
            out.append(
                Problem(
                    task.id,
                    f"hidden/{j}",
                    f"same assertion as public/{public_a[key]} (public and hidden overlap)",
                )
            )
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(dict(task.schema))
    except jsonschema.SchemaError as exc:
        out.append(
            Problem(task.id, "-", f"task.json /schema is not a valid Draft 2020-12 schema: {exc.message}")
        )
        return out
    out += [
        Problem(task.id, "reference", f"does not match the task's schema: {e}")
        for e in schema_errors(task.reference, task.schema)
    ]
    return out


def validate_bank(
    bank: str | Path, sandbox: Sandbox, settings: VerifierSettings | None = None
) -> tuple[int, list[Problem]]:
    """Check every task under ``bank``: the schema, the format, overlap, argument types, and the reference
    through the real verifier against every test. Returns the number of tasks seen and the problems found."""
    root = Path(bank)
    if not root.is_dir():
        raise TaskError(f"{root}: task directory not found")
    dirs = list(task_dirs(root))
    if not dirs:
        raise TaskError(f"{root}: no tasks found (expected <family>/<slug>/<NNN>/task.json)")
    problems: list[Problem] = []
    tasks: list[Task] = []
    for d in dirs:
        rel = d.relative_to(root).as_posix()
        try:
            data = json.loads((d / "task.json").read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(Problem(rel, "-", f"task.json is not valid JSON ({exc})"))
            continue
        schema_problems = validate_task_json(data)
        if schema_problems:
            problems += [
                Problem(rel, "-", f"task.json breaks the task schema at {p}") for p in schema_problems
            ]
            continue
        try:
            task = load_task(d, root)
        except TaskError as exc:
            problems.append(Problem(rel, "-", str(exc)))
            continue
        problems += _static_problems(task)
        tasks.append(task)
    verdicts = grade_many([(t, reference_solution(t)) for t in tasks], sandbox, settings, extract=False)
    for v in verdicts:
        if v.infra_error is not None:
            problems.append(
                Problem(
                    v.task_id, "-", f"could not be checked (sandbox infrastructure error: {v.infra_error})"
                )
            )
            continue
        for t in (*v.public, *v.hidden):
            if not t.passed:
                problems.append(
                    Problem(
                        v.task_id, t.name, f"reference fails its own test: {t.reason} {t.detail}".rstrip()
                    )
                )
    return len(dirs), problems
