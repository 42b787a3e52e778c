"""evalkit: the point-in-time harness and the verifier stack."""

import importlib
from typing import TYPE_CHECKING, Any

from evalkit._eval import (
    EvalReport,
    Problem,
    Rollout,
    model_request,
    reference_solution,
    run_eval,
    summarize,
    validate_bank,
    verify_eval_receipt,
)
from evalkit._extract import ExtractionError, extract_code, extract_json
from evalkit._sandbox import Isolation, Sandbox, SandboxJob, SandboxLimits, SandboxRun, TestRun
from evalkit._tasks import (
    JSON,
    Assertion,
    CallTest,
    CheckTest,
    CodeTask,
    StructuredTask,
    Task,
    TaskError,
    TypeSpec,
    bank_digest,
    conforms,
    load_task,
    load_tasks,
    parse_type,
    render_prompt,
    task_schema,
    validate_task_json,
)
from evalkit._verifiers import (
    TestVerdict,
    Verdict,
    VerifierSettings,
    check_assertion,
    grade,
    grade_many,
    json_equal,
    resolve_pointer,
)

if TYPE_CHECKING:
    from evalkit._adversary import (
        CATEGORIES,
        INVALID_REASONS,
        MINING_LIMITS,
        Category,
        Counterexample,
        InvalidReason,
        MiningResult,
        Proposal,
        Rejection,
        adversarial_tests,
        bank_counterexamples,
        banked_counterexamples,
        candidate_digest,
        fuzz_proposals,
        mine,
        mine_bank,
        model_proposals,
        parse_model_proposals,
        validate_proposals,
    )
    from evalkit._humaneval import humaneval_problems, import_humaneval

# The adversary pulls in hypothesis and the HumanEval importer its data: both load on first use, so that
# `import evalkit` (and every grading process) stays fast.
_LAZY: dict[str, str] = {
    "CATEGORIES": "evalkit._adversary",
    "Category": "evalkit._adversary",
    "Counterexample": "evalkit._adversary",
    "INVALID_REASONS": "evalkit._adversary",
    "InvalidReason": "evalkit._adversary",
    "MINING_LIMITS": "evalkit._adversary",
    "MiningResult": "evalkit._adversary",
    "Proposal": "evalkit._adversary",
    "Rejection": "evalkit._adversary",
    "adversarial_tests": "evalkit._adversary",
    "bank_counterexamples": "evalkit._adversary",
    "banked_counterexamples": "evalkit._adversary",
    "candidate_digest": "evalkit._adversary",
    "fuzz_proposals": "evalkit._adversary",
    "humaneval_problems": "evalkit._humaneval",
    "import_humaneval": "evalkit._humaneval",
    "mine": "evalkit._adversary",
    "mine_bank": "evalkit._adversary",
    "model_proposals": "evalkit._adversary",
    "parse_model_proposals": "evalkit._adversary",
    "validate_proposals": "evalkit._adversary",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CATEGORIES",
    "INVALID_REASONS",
    "JSON",
    "MINING_LIMITS",
    "Assertion",
    "CallTest",
    "Category",
    "CheckTest",
    "CodeTask",
    "Counterexample",
    "EvalReport",
    "ExtractionError",
    "InvalidReason",
    "Isolation",
    "MiningResult",
    "Problem",
    "Proposal",
    "Rejection",
    "Rollout",
    "Sandbox",
    "SandboxJob",
    "SandboxLimits",
    "SandboxRun",
    "StructuredTask",
    "Task",
    "TaskError",
    "TestRun",
    "TestVerdict",
    "TypeSpec",
    "Verdict",
    "VerifierSettings",
    "adversarial_tests",
    "bank_counterexamples",
    "bank_digest",
    "banked_counterexamples",
    "candidate_digest",
    "check_assertion",
    "conforms",
    "extract_code",
    "extract_json",
    "fuzz_proposals",
    "grade",
    "grade_many",
    "humaneval_problems",
    "import_humaneval",
    "json_equal",
    "load_task",
    "load_tasks",
    "mine",
    "mine_bank",
    "model_proposals",
    "model_request",
    "parse_model_proposals",
    "parse_type",
    "reference_solution",
    "render_prompt",
    "resolve_pointer",
    "run_eval",
    "summarize",
    "task_schema",
    "validate_bank",
    "validate_proposals",
    "validate_task_json",
    "verify_eval_receipt",
]
