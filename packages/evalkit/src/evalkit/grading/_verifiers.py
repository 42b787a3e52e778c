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
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from functools import cache, lru_cache, partial
from typing import Literal, cast

import attrs

from evalkit.grading._extract import ExtractionError, extract_code, extract_json, parse_json
from evalkit.grading._tasks import JSON, Assertion, CallTest, CheckTest, CodeTask, StructuredTask, Task
from evalkit.wall import Sandbox, SandboxJob, SandboxLimits, SandboxRun, TestRun, host_error
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
    "host_rejected_value",
]
_ACTUAL_CHARS = 200
_DETAIL_CHARS = 2000


def safe_text(text: str, limit: int | None = None) -> str:
    """``text`` as results can always write it: a lone surrogate (not Unicode: no UTF-8 encoder or canonical JSON
    takes it) becomes its escape ``\\udxxx``, and with ``limit`` it is cut there (``…`` marks the cut). Other
    characters (NUL, controls, bidi marks) stay: every JSON writer escapes what it must."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _detail_text(text: str) -> str:
    return safe_text(text, _DETAIL_CHARS)


def _actual_text(text: str | None) -> str | None:
    return None if text is None else safe_text(text)


def _evidence(codes: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(codes)))


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
    detail: str = attrs.field(default="", converter=_detail_text)
    actual: str | None = attrs.field(default=None, converter=_actual_text)
    # what the harness saw the candidate attempt (codes of evalkit.wall.EVIDENCE, never its text); for a hidden
    # test, the codes of all hidden tests together (see _split)
    evidence: tuple[str, ...] = attrs.field(default=(), converter=_evidence)

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {
            "name": self.name,
            "passed": self.passed,
            "reason": self.reason,
            "detail": self.detail,
            "actual": self.actual,
        }
        if self.evidence:
            out["evidence"] = list(self.evidence)
        return out


@attrs.frozen
class Verdict:
    """Public and hidden results kept apart, with the digests of the task and of the verifier settings."""

    task_id: str
    task_digest: str
    settings_digest: str
    public: tuple[TestVerdict, ...]
    hidden: tuple[TestVerdict, ...]
    output: str = attrs.field(default="", converter=safe_text)
    infra_error: str | None = None
    # the wall this verdict was made behind: "full", or which layers were missing ("weaker: ..."); a structured
    # verdict runs no code
    isolation: str = "none needed"
    # the host's own exception while it handled this candidate's answer (type and place; see _contained): every
    # test is then host_rejected_value
    host_error: str | None = None

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
            **({"host_error": self.host_error} if self.host_error is not None else {}),
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
            return _close(a, e, tolerance)
        return a == e  # exact for any int and float (Python compares them without converting)
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


def _exact(x: float) -> Fraction | None:
    """``x`` as an exact fraction (an int of any size, a finite float), or None for a NaN or an infinity."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return Fraction(x)


def _close(a: float, e: float, tolerance: float) -> bool:
    """``math.isclose(a, e, rel_tol=tolerance, abs_tol=tolerance)`` for every int and float: an int beyond the
    float range (``10**400``) makes ``isclose`` raise OverflowError, so such a pair is compared exactly instead."""
    try:
        return math.isclose(a, e, rel_tol=tolerance, abs_tol=tolerance)
    except OverflowError:
        fa, fe = _exact(a), _exact(e)
        if fa is None or fe is None:
            return a == e
        tol = Fraction(tolerance)
        return abs(fa - fe) <= max(tol * max(abs(fa), abs(fe)), tol)


def _within(a: float, e: float, tolerance: float) -> bool:
    """``abs(a - e) <= tolerance`` for every int and float (exactly when ``a - e`` overflows a float)."""
    try:
        return abs(a - e) <= tolerance
    except OverflowError:
        fa, fe = _exact(a), _exact(e)
        return fa is not None and fe is not None and abs(fa - fe) <= Fraction(tolerance)


def _short(value: JSON) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):  # an int past the digit limit cannot be written as text
        text = f"<a {type(value).__name__} that cannot be shown>"
    text = safe_text(text)
    return text if len(text) <= _ACTUAL_CHARS else text[: _ACTUAL_CHARS - 1] + "…"


# --------------------------------------------------------------------------------------------- code


def _code_test_verdict(
    name: str, test: CallTest | CheckTest, run: TestRun, tolerance: float | None
) -> TestVerdict:
    return attrs.evolve(_code_test_outcome(name, test, run, tolerance), evidence=run.evidence)


def _code_test_outcome(
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


def _hidden_key(task: Task) -> bytes:
    """The key of a task's hidden-verdict digests: the hidden tests themselves. A plain digest of a short text can be
    inverted by trying values (``digest('expected 4')``; a passed test's output is its expected value); keyed with
    what is hidden, it can be recomputed only by whoever holds the hidden tests, and stays the same run to run."""
    hidden = task.hidden_tests if isinstance(task, CodeTask) else task.hidden_assertions
    return digest([t.to_json() for t in hidden]).encode()


def _keyed(key: bytes, name: str, answer: str, text: str) -> str:
    """The keyed digest of what a hidden test said, bound to the test and to the answer graded: two tests, or two
    answers, that said the same thing get unrelated digests, so the digests tell no one (without the hidden tests)
    anything, not even which hidden tests a candidate answered alike. The same answer gets the same digests."""
    message = f"{name}\n{answer}\n{text}".encode("utf-8", "backslashreplace")
    return "hmac-sha256:" + hmac.new(key, message, hashlib.sha256).hexdigest()


def _redact(verdict: TestVerdict, key: Callable[[], bytes], answer: str, evidence: tuple[str, ...]) -> TestVerdict:
    """A hidden test's verdict as results and receipts may show it: its reason, keyed digests (see :func:`_keyed`)
    in place of what the candidate returned and of the detail (which can hold an expected value, a check's
    message, or anything the candidate wrote), and the evidence codes of all hidden tests together (``evidence``):
    nothing the candidate chose per hidden test but its reason. Public tests are shown whole. ``key`` gives the
    task's key, made only when there is something to withhold (a passed check has neither detail nor output)."""
    if not verdict.name.startswith("hidden/"):
        return verdict
    if not verdict.detail and verdict.actual is None:
        return attrs.evolve(verdict, evidence=evidence)
    detail = (
        f"{verdict.reason} (hidden test: detail withheld, {_keyed(key(), verdict.name, answer, verdict.detail)})"
        if verdict.detail
        else ""
    )
    actual = None if verdict.actual is None else _keyed(key(), verdict.name, answer, verdict.actual)
    return attrs.evolve(verdict, detail=detail, actual=actual, evidence=evidence)


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
    *,
    answer: str,
) -> Verdict:
    n_public = len(task.public_tests) if isinstance(task, CodeTask) else len(task.public_assertions)
    key = cache(lambda: _hidden_key(task))  # made on first need, once
    hidden = verdicts[n_public:]
    evidence = _evidence(code for v in hidden for code in v.evidence)
    answer_digest = digest(safe_text(answer))
    return Verdict(
        task_id=task.id,
        task_digest=task.digest,
        settings_digest=settings.digest,
        public=tuple(verdicts[:n_public]),
        hidden=tuple(_redact(v, key, answer_digest, evidence) for v in hidden),
        output=output,
        infra_error=infra,
    )


def _all_failed(
    task: Task,
    settings: VerifierSettings,
    reason: Reason,
    detail: str,
    infra: str | None = None,
    *,
    answer: str,
    evidence: tuple[str, ...] = (),
) -> Verdict:
    verdicts = [TestVerdict(n, False, reason, detail, evidence=evidence) for n in _names(task)]
    return _split(task, settings, verdicts, infra=infra, answer=answer)


def _contained(task: Task, settings: VerifierSettings, answer: str, make: Callable[[], Verdict]) -> Verdict:
    """The one containment point of a verdict's host-side work (extraction, comparison, digests): an exception the
    host raises while it handles this answer is this answer's failing verdict (every test ``host_rejected_value``),
    never the end of the run. It is recorded in :attr:`Verdict.host_error` (type and place, not the message, which
    may quote the candidate's values), so a harness bug still shows; KeyboardInterrupt and SystemExit go through."""
    try:
        return make()
    except Exception as exc:
        return _host_rejected(task, settings, answer, host_error(exc))


def _host_rejected(task: Task, settings: VerifierSettings, answer: str, where: str) -> Verdict:
    detail = "the host could not handle this candidate's answer (recorded as this candidate's failure)"
    verdict = _all_failed(task, settings, "host_rejected_value", detail, answer=answer)
    return attrs.evolve(verdict, host_error=where)


def _job(task: CodeTask, source: str) -> SandboxJob:
    inputs: list[Mapping[str, JSON]] = []
    for t in (*task.public_tests, *task.hidden_tests):
        if isinstance(t, CheckTest):
            inputs.append({"check": t.check, "context": t.context})
        else:  # only the inputs enter the sandbox; the expected value stays outside
            inputs.append({"args": list(t.args), "kwargs": dict(t.kwargs)})
    return SandboxJob(source=source, entry_point=task.entry_point, tests=tuple(inputs))


def _code_verdict(task: CodeTask, settings: VerifierSettings, run: SandboxRun, answer: str) -> Verdict:
    names = _names(task)
    if run.host_error is not None:
        return _host_rejected(task, settings, answer, run.host_error)
    if run.infra_error is not None:
        return _all_failed(task, settings, "infra_error", run.infra_error, infra=run.infra_error, answer=answer)
    if run.load_status != "ok":
        reason: Reason = {"timeout": "timeout", "crash": "crash"}.get(run.load_status, "exception")  # type: ignore[assignment]
        detail = f"while loading the candidate: {run.load_error}"
        verdicts = [TestVerdict(n, False, reason, detail, evidence=run.load_evidence) for n in names]
        return _split(task, settings, verdicts, output=run.output, answer=answer)
    tests = (*task.public_tests, *task.hidden_tests)
    verdicts = [
        _code_test_verdict(n, t, r, task.float_tolerance)
        for n, t, r in zip(names, tests, run.tests, strict=True)
    ]
    return _split(task, settings, verdicts, output=run.output, answer=answer)


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
        return None if _within(a, e, tol) else f"{where}: expected {value} ± {tol:g}, got {_short(actual)}"
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


def _structured_verdict(task: StructuredTask, settings: VerifierSettings, document: JSON, answer: str) -> Verdict:
    errors = schema_errors(document, task.schema)
    names = _names(task)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return _all_failed(task, settings, "schema", f"schema: {errors[0]}{more}", answer=answer)
    verdicts: list[TestVerdict] = []
    for name, a in zip(names, (*task.public_assertions, *task.hidden_assertions), strict=True):
        problem = check_assertion(document, a)
        found, actual = resolve_pointer(document, a.path)
        shown = _short(actual) if found else None
        verdicts.append(
            TestVerdict(name, problem is None, "ok" if problem is None else "assertion", problem or "", shown)
        )
    return _split(task, settings, verdicts, answer=answer)


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
            out[i] = _contained(task, settings, text, partial(_structured, task, settings, text, extract=extract))
            tick()
            continue
        try:
            source = extract_code(text, task.entry_point) if extract else text
            job = _job(task, source)
        except ExtractionError as exc:
            out[i] = _contained(
                task, settings, text, partial(_all_failed, task, settings, "no_code", str(exc), answer=text)
            )
            tick()
            continue
        except Exception as exc:
            out[i] = _host_rejected(task, settings, text, host_error(exc))
            tick()
            continue
        jobs.append(job)
        job_index.append(i)
    isolation = ""
    if jobs:
        iso = sandbox.isolation
        isolation = "full" if iso.full else "weaker: " + "; ".join(iso.weaker)
    for i, run in zip(job_index, sandbox.run_many(jobs, on_done=tick) if jobs else [], strict=True):
        task, text = items[i]
        assert isinstance(task, CodeTask)
        verdict = _contained(task, settings, text, partial(_code_verdict, task, settings, run, text))
        out[i] = attrs.evolve(verdict, isolation=isolation)
    return [v for v in out if v is not None]


def _structured(task: StructuredTask, settings: VerifierSettings, text: str, *, extract: bool) -> Verdict:
    try:
        document = extract_json(text) if extract else parse_json(text)
    except ExtractionError as exc:
        return _all_failed(task, settings, "no_json", str(exc), answer=text)
    return _structured_verdict(task, settings, document, text)


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
