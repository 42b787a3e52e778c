"""The code and structured verifiers and the :class:`Verdict` they produce.

No model is in the loop: a verdict is a pure function of the task, the candidate and the verifier settings
(timeouts aside, which are reported as such and never as wrong answers).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import cache, lru_cache
from typing import Literal, cast

import attrs

from evalkit.grading._extract import ExtractionError, extract_code, extract_json, parse_json
from evalkit.grading._tasks import JSON, Assertion, CallTest, CheckTest, CodeTask, StructuredTask, Task
from evalkit.wall import Sandbox, SandboxJob, SandboxLimits, SandboxRun, TestRun
from evalkit_core import digest

__all__ = [
    "Reason",
    "TestVerdict",
    "Verdict",
    "VerifierSettings",
    "check_assertion",
    "grade",
    "grade_many",
    "json_equal",
    "resolve_pointer",
]

VERIFIER_VERSION = 1
Reason = Literal[
    "ok",
    "wrong_answer",
    "exception",
    "timeout",
    "crash",
    "no_code",
    "no_json",
    "schema",
    "assertion",
    "infra_error",
]
_ACTUAL_CHARS = 200


@attrs.frozen
class VerifierSettings:
    """Everything besides the task and the candidate that can change a verdict. Its digest goes in every verdict."""

    limits: SandboxLimits = attrs.field(factory=SandboxLimits)

    def to_json(self) -> dict[str, JSON]:
        return {"verifier": "evalkit", "version": VERIFIER_VERSION, "limits": self.limits.to_json()}

    @property
    def digest(self) -> str:
        return _settings_digest(self)


@lru_cache(maxsize=64)
def _settings_digest(settings: VerifierSettings) -> str:
    """A settings' digest, made once (every verdict carries it; settings are immutable)."""
    return digest(settings.to_json())


@attrs.frozen
class TestVerdict:
    """The verdict on one test: ``name`` is ``public/<i>`` or ``hidden/<i>``; ``actual`` is the candidate's
    output for it (truncated JSON), when there was one."""

    name: str
    passed: bool
    reason: Reason
    detail: str = ""
    actual: str | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "passed": self.passed,
            "reason": self.reason,
            "detail": self.detail,
            "actual": self.actual,
        }


@attrs.frozen
class Verdict:
    """Public and hidden results kept apart, with the digests of the task and of the verifier settings."""

    task_id: str
    task_digest: str
    settings_digest: str
    public: tuple[TestVerdict, ...]
    hidden: tuple[TestVerdict, ...]
    output: str = ""
    infra_error: str | None = None
    # the wall this verdict was made behind: "full", or which layers were missing ("weaker: ..."); a structured
    # verdict runs no code
    isolation: str = "none needed"

    @property
    def public_passed(self) -> int:
        return sum(t.passed for t in self.public)

    @property
    def hidden_passed(self) -> int:
        return sum(t.passed for t in self.hidden)

    @property
    def all_public(self) -> bool:
        return self.infra_error is None and self.public_passed == len(self.public)

    @property
    def all_hidden(self) -> bool:
        return self.infra_error is None and self.hidden_passed == len(self.hidden)

    def to_json(self) -> dict[str, JSON]:
        return {
            "task_id": self.task_id,
            "task_digest": self.task_digest,
            "settings_digest": self.settings_digest,
            "public": {
                "passed": self.public_passed,
                "total": len(self.public),
                "tests": [t.to_json() for t in self.public],
            },
            "hidden": {
                "passed": self.hidden_passed,
                "total": len(self.hidden),
                "tests": [t.to_json() for t in self.hidden],
            },
            "infra_error": self.infra_error,
            "isolation": self.isolation,
        }


# --------------------------------------------------------------------------------------------- comparison


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def json_equal(actual: object, expected: object, tolerance: float | None = None) -> bool:
    """JSON equality: bools are not numbers, ``1 == 1.0``, floats within ``tolerance`` (absolute or relative)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if _is_number(expected):
        if not _is_number(actual):
            return False
        a, e = cast("float", actual), cast("float", expected)
        if tolerance:
            return math.isclose(a, e, rel_tol=tolerance, abs_tol=tolerance)
        return a == e
    if expected is None or isinstance(expected, str):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return False
        a_list, e_list = cast("list[object]", actual), cast("list[object]", expected)
        return len(a_list) == len(e_list) and all(
            json_equal(x, y, tolerance) for x, y in zip(a_list, e_list, strict=True)
        )
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return False
        a_map, e_map = cast("dict[str, object]", actual), cast("dict[str, object]", expected)
        return a_map.keys() == e_map.keys() and all(json_equal(a_map[k], e_map[k], tolerance) for k in e_map)
    return False


def _short(value: JSON) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _ACTUAL_CHARS else text[: _ACTUAL_CHARS - 1] + "…"


# --------------------------------------------------------------------------------------------- code


def _code_test_verdict(
    name: str, test: CallTest | CheckTest, run: TestRun, tolerance: float | None
) -> TestVerdict:
    status = run.status
    if status == "value" and isinstance(test, CallTest):
        actual = _short(run.value)
        if json_equal(run.value, test.expected, tolerance):
            return TestVerdict(name, True, "ok", actual=actual)
        return TestVerdict(name, False, "wrong_answer", f"expected {_short(test.expected)}", actual=actual)
    if status == "done" and isinstance(test, CheckTest):
        return TestVerdict(name, True, "ok")
    if status == "raised":
        reason: Reason = (
            "wrong_answer"
            if run.error_type == "AssertionError" and isinstance(test, CheckTest)
            else "exception"
        )
        detail = f"{run.error_type}: {run.error}".rstrip(": ")
        return TestVerdict(name, False, reason, detail)
    if status == "bad_return":
        return TestVerdict(name, False, "wrong_answer", run.error)
    if status == "timeout":
        return TestVerdict(name, False, "timeout", run.error or "CPU time limit exceeded")
    if status == "crash":
        return TestVerdict(name, False, "crash", run.error)
    return TestVerdict(name, False, "crash", f"no result ({status})")


# Phrases the harness itself writes about what a candidate attempted (the audit tripwire's refusals, an exit, a
# return value that is not data): evidence for the reward-hacking checks, never a test's expected value.
_EVIDENCE = re.compile(
    r"sandbox: [^\n]{0,160}? is not allowed|\b(?:SystemExit|KeyboardInterrupt)\b"
    r"|a value of type \w+ cannot be returned \(only built-in data types\)"
)


def _hidden_key(task: Task) -> bytes:
    """The key of a task's hidden-verdict digests: the hidden tests themselves. A plain digest of a short text can be
    inverted by trying values (``digest('expected 4')``; a passed test's output is its expected value); keyed with
    what is hidden, it can be recomputed only by whoever holds the hidden tests, and stays the same run to run."""
    hidden = task.hidden_tests if isinstance(task, CodeTask) else task.hidden_assertions
    return digest([t.to_json() for t in hidden]).encode()


def _keyed(key: bytes, text: str) -> str:
    return "hmac-sha256:" + hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def _redact(verdict: TestVerdict, key: Callable[[], bytes]) -> TestVerdict:
    """A hidden test's verdict as results and receipts may show it: the reason, keyed digests (see
    :func:`_hidden_key`) in place of what the candidate returned and of the detail (which can hold an expected
    value or a check's message), and the harness's own words about what the candidate attempted, if any. Public
    tests are shown whole. ``key`` gives the task's key, made only when there is something to withhold (a passed
    check has neither detail nor output)."""
    if not verdict.name.startswith("hidden/") or (not verdict.detail and verdict.actual is None):
        return verdict
    detail = f"{verdict.reason} (hidden test: detail withheld, {_keyed(key(), verdict.detail)})" if verdict.detail else ""
    evidence = _EVIDENCE.search(verdict.detail) if verdict.reason != "wrong_answer" else None
    if evidence is not None:
        detail += f"; {evidence.group(0)}"
    actual = None if verdict.actual is None else _keyed(key(), verdict.actual)
    return attrs.evolve(verdict, detail=detail, actual=actual)


def _names(task: CodeTask | StructuredTask) -> list[str]:
    if isinstance(task, CodeTask):
        return [f"public/{i}" for i in range(len(task.public_tests))] + [
            f"hidden/{i}" for i in range(len(task.hidden_tests))
        ]
    return [f"public/{i}" for i in range(len(task.public_assertions))] + [
        f"hidden/{i}" for i in range(len(task.hidden_assertions))
    ]


def _split(
    task: Task,
    settings: VerifierSettings,
    verdicts: Sequence[TestVerdict],
    output: str = "",
    infra: str | None = None,
) -> Verdict:
    n_public = len(task.public_tests) if isinstance(task, CodeTask) else len(task.public_assertions)
    key = cache(lambda: _hidden_key(task))  # made on first need, once
    return Verdict(
        task_id=task.id,
        task_digest=task.digest,
        settings_digest=settings.digest,
        public=tuple(verdicts[:n_public]),
        hidden=tuple(_redact(v, key) for v in verdicts[n_public:]),
        output=output,
        infra_error=infra,
    )


def _all_failed(
    task: Task, settings: VerifierSettings, reason: Reason, detail: str, infra: str | None = None
) -> Verdict:
    return _split(task, settings, [TestVerdict(n, False, reason, detail) for n in _names(task)], infra=infra)


def _job(task: CodeTask, source: str) -> SandboxJob:
    inputs: list[Mapping[str, JSON]] = []
    for t in (*task.public_tests, *task.hidden_tests):
        if isinstance(t, CheckTest):
            inputs.append({"check": t.check, "context": t.context})
        else:  # only the inputs enter the sandbox; the expected value stays outside
            inputs.append({"args": list(t.args), "kwargs": dict(t.kwargs)})
    return SandboxJob(source=source, entry_point=task.entry_point, tests=tuple(inputs))


def _code_verdict(task: CodeTask, settings: VerifierSettings, run: SandboxRun) -> Verdict:
    names = _names(task)
    if run.infra_error is not None:
        return _all_failed(task, settings, "infra_error", run.infra_error, infra=run.infra_error)
    if run.load_status != "ok":
        reason: Reason = {"timeout": "timeout", "crash": "crash"}.get(run.load_status, "exception")  # type: ignore[assignment]
        detail = f"while loading the candidate: {run.load_error}"
        verdicts = [TestVerdict(n, False, reason, detail) for n in names]
        return _split(task, settings, verdicts, output=run.output)
    tests = (*task.public_tests, *task.hidden_tests)
    verdicts = [
        _code_test_verdict(n, t, r, task.float_tolerance)
        for n, t, r in zip(names, tests, run.tests, strict=True)
    ]
    return _split(task, settings, verdicts, output=run.output)


# --------------------------------------------------------------------------------------------- structured


def resolve_pointer(document: JSON, pointer: str) -> tuple[bool, JSON]:
    """Resolve an RFC 6901 JSON Pointer; ``(False, None)`` when nothing is there."""
    if pointer == "":
        return True, document
    node: JSON = document
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            if token not in node:
                return False, None
            node = node[token]
        elif isinstance(node, list):
            if not re.fullmatch(r"0|[1-9][0-9]*", token) or int(token) >= len(node):
                return False, None
            node = node[int(token)]
        else:
            return False, None
    return True, node


def _json_type(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def check_assertion(document: JSON, assertion: Assertion) -> str | None:
    """``None`` when the assertion holds, else what was expected at which pointer."""
    where = assertion.path or "(root)"
    found, actual = resolve_pointer(document, assertion.path)
    if not found:
        return f"{where}: no value there (expected {assertion.op} {_short(assertion.value)})"
    op, value = assertion.op, assertion.value
    if op == "keys_exactly":
        if not isinstance(actual, dict):
            return f"{where}: expected an object with keys {_short(value)}, got {_json_type(actual)}"
        want = set(cast("list[str]", value))
        missing, extra = sorted(want - actual.keys()), sorted(actual.keys() - want)
        if missing or extra:
            return f"{where}: keys differ (missing {missing}, unexpected {extra})"
        return None
    if op == "path_equals":
        return (
            None if json_equal(actual, value) else f"{where}: expected {_short(value)}, got {_short(actual)}"
        )
    if op == "path_matches":
        if not isinstance(actual, str):
            return f"{where}: expected a string matching {value!r}, got {_json_type(actual)}"
        return (
            None
            if re.fullmatch(cast("str", value), actual)
            else f"{where}: {_short(actual)} does not match {value!r} in full"
        )
    if op == "path_in":
        options = cast("list[JSON]", value)
        return (
            None
            if any(json_equal(actual, o) for o in options)
            else f"{where}: expected one of {_short(value)}, got {_short(actual)}"
        )
    if op == "path_type":
        got = _json_type(actual)
        ok = (
            got == value
            or (value == "number" and got == "integer")
            or (value == "integer" and isinstance(actual, float) and actual.is_integer())
        )
        return None if ok else f"{where}: expected type {value}, got {got}"
    if op == "path_len":
        if not isinstance(actual, str | list | dict):
            return f"{where}: expected something with length {value}, got {_json_type(actual)}"
        return None if len(actual) == value else f"{where}: expected length {value}, got {len(actual)}"
    if op == "path_approx":
        if not _is_number(actual):
            return f"{where}: expected a number near {value}, got {_json_type(actual)}"
        tol = assertion.tolerance or 0.0
        a, e = cast("float", actual), cast("float", value)
        return None if abs(a - e) <= tol else f"{where}: expected {value} ± {tol:g}, got {_short(actual)}"
    return f"{where}: unknown assertion {op!r}"  # pragma: no cover - the loader refuses unknown ops


def schema_errors(document: JSON, schema: Mapping[str, JSON]) -> list[str]:
    """Draft 2020-12 validation errors of ``document`` as ``<pointer>: <message>`` lines."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    out: list[str] = []
    for err in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        pointer = "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in err.absolute_path)
        out.append(f"{pointer if pointer != '/' else '(root)'}: {err.message}")
    return out


def _structured_verdict(task: StructuredTask, settings: VerifierSettings, document: JSON) -> Verdict:
    errors = schema_errors(document, task.schema)
    names = _names(task)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return _all_failed(task, settings, "schema", f"schema: {errors[0]}{more}")
    verdicts: list[TestVerdict] = []
    for name, a in zip(names, (*task.public_assertions, *task.hidden_assertions), strict=True):
        problem = check_assertion(document, a)
        found, actual = resolve_pointer(document, a.path)
        shown = _short(actual) if found else None
        verdicts.append(
            TestVerdict(name, problem is None, "ok" if problem is None else "assertion", problem or "", shown)
        )
    return _split(task, settings, verdicts)


# --------------------------------------------------------------------------------------------- entry points


def grade_many(
    items: Sequence[tuple[Task, str]],
    sandbox: Sandbox,
    settings: VerifierSettings | None = None,
    *,
    extract: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> list[Verdict]:
    """Grade ``(task, completion)`` pairs, in order. With ``extract=False`` the text is the solution itself
    (source code, or JSON text). Code candidates are spread over the sandbox's workers, one child each.
    ``progress(done, total)`` is called as each pair is graded, in the order they finish (from the sandbox's
    worker threads for code, one call at a time).
    """
    settings = settings or VerifierSettings(sandbox.limits)
    out: list[Verdict | None] = [None] * len(items)
    tick = _counter(len(items), progress)
    jobs: list[SandboxJob] = []
    job_index: list[int] = []
    for i, (task, text) in enumerate(items):
        if isinstance(task, StructuredTask):
            try:
                document = extract_json(text) if extract else parse_json(text)
            except ExtractionError as exc:
                out[i] = _all_failed(task, settings, "no_json", str(exc))
            else:
                out[i] = _structured_verdict(task, settings, document)
            tick()
            continue
        try:
            source = extract_code(text, task.entry_point) if extract else text
        except ExtractionError as exc:
            out[i] = _all_failed(task, settings, "no_code", str(exc))
            tick()
            continue
        jobs.append(_job(task, source))
        job_index.append(i)
    isolation = ""
    if jobs:
        iso = sandbox.isolation
        isolation = "full" if iso.full else "weaker: " + "; ".join(iso.weaker)
    for i, run in zip(job_index, sandbox.run_many(jobs, on_done=tick), strict=True):
        task = items[i][0]
        assert isinstance(task, CodeTask)
        out[i] = attrs.evolve(_code_verdict(task, settings, run), isolation=isolation)
    return [v for v in out if v is not None]


def _counter(total: int, progress: Callable[[int, int], None] | None) -> Callable[[], None]:
    """A thread-safe ``tick()`` that reports ``progress(done, total)`` once per call, serialised."""
    if progress is None:
        return lambda: None
    report, lock, done = progress, threading.Lock(), [0]

    def tick() -> None:
        with lock:
            done[0] += 1
            report(done[0], total)

    return tick


def grade(
    task: Task,
    completion: str,
    sandbox: Sandbox,
    settings: VerifierSettings | None = None,
    *,
    extract: bool = True,
) -> Verdict:
    """Grade one completion against every public and hidden test of ``task``."""
    return grade_many([(task, completion)], sandbox, settings, extract=extract)[0]
