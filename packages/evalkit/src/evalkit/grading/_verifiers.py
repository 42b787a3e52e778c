"""The code and structured verifiers and the :class:`Verdict` they produce.

No model is in the loop: a verdict is a pure function of the task, the candidate and the verifier settings
(timeouts aside, which are reported as such and never as wrong answers).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache, lru_cache, partial
from typing import Literal

import attrs

from evalkit.grading._compare import check_assertion, json_equal, resolve_pointer, safe_text, schema_errors
from evalkit.grading._compare import short as _short
from evalkit.grading._extract import ExtractionError, extract_code, extract_json, parse_json
from evalkit.grading._tasks import JSON, CallTest, CheckTest, CodeTask, StructuredTask, Task
from evalkit.wall import Sandbox, SandboxJob, SandboxLimits, SandboxRun, TestRun, host_error
from evalkit_core import digest

__all__ = [
    "Reason",
    "TestVerdict",
    "Verdict",
    "VerifierSettings",
    "check_assertion",
    "finish",
    "grade",
    "grade_many",
    "isolation_text",
    "json_equal",
    "prepare",
    "resolve_pointer",
    "safe_text",
    "schema_errors",
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
_DETAIL_CHARS = 2000


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
        first = prepare(task, text, settings, extract=extract)
        if isinstance(first, Verdict):
            out[i] = first
            tick()
            continue
        jobs.append(first)
        job_index.append(i)
    isolation = isolation_text(sandbox) if jobs else ""
    for i, run in zip(job_index, sandbox.run_many(jobs, on_done=tick) if jobs else [], strict=True):
        task, text = items[i]
        assert isinstance(task, CodeTask)
        out[i] = finish(task, settings, run, text, isolation)
    return [v for v in out if v is not None]


def prepare(task: Task, text: str, settings: VerifierSettings, *, extract: bool) -> Verdict | SandboxJob:
    """The host's first stage for one answer, contained: its verdict where no sandbox is needed (structured output,
    no code found, or an answer the host cannot handle), else the sandbox job to run. :func:`grade_many` and the
    eval's journaled grading both go through here, so neither can skip the containment."""
    if isinstance(task, StructuredTask):
        return _contained(task, settings, text, partial(_structured, task, settings, text, extract=extract))
    try:
        source = extract_code(text, task.entry_point) if extract else text
        return _job(task, source)
    except ExtractionError as exc:
        return _contained(task, settings, text, partial(_all_failed, task, settings, "no_code", str(exc), answer=text))
    except Exception as exc:
        return _host_rejected(task, settings, text, host_error(exc))


def finish(task: CodeTask, settings: VerifierSettings, run: SandboxRun, text: str, isolation: str) -> Verdict:
    """The host's last stage for one code answer, contained: the verdict from what its job did."""
    verdict = _contained(task, settings, text, partial(_code_verdict, task, settings, run, text))
    return attrs.evolve(verdict, isolation=isolation)


def isolation_text(sandbox: Sandbox) -> str:
    """What a verdict says of the isolation its job ran under."""
    iso = sandbox.isolation
    return "full" if iso.full else "weaker: " + "; ".join(iso.weaker)


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
