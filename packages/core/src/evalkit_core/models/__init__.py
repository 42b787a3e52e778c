"""The model layer: one async client over Anthropic, OpenAI and OpenAI-compatible endpoints and simulated
models; a registry with exact Decimal prices; a budget cap that holds across processes, crashes and lying
providers; rate limits; retries under deadlines; and a record of every call in the store.

Simulated models (``sim/*``) answer from ``Request.sim_context`` (a task's reference solution); see
``evalkit_core.models._sim`` for the seam. The PIT model gateway (a later issue) will serve ``ModelBackend``.
"""

from typing import TYPE_CHECKING

from evalkit_core._lazy import lazy_exports

if TYPE_CHECKING:
    from evalkit_core.models._budget import (
        BudgetScope,
        BudgetStatus,
        UnknownOutcome,
        budget_status,
        charged_for_label,
        parse_cap,
        reconcile,
        set_budget_cap,
        settle_from_invoice,
        unknown_outcomes,
    )
    from evalkit_core.models._calls import (
        CallAttempt,
        CallRecord,
        call_attempts,
        list_calls,
        parse_since,
        recompute_cost,
    )
    from evalkit_core.models._client import ModelBackend, ModelClient, RecordFn, complete, redact
    from evalkit_core.models._cost import cost_of, worst_case_cost
    from evalkit_core.models._errors import BudgetExceeded, MissingKeyError, ModelError, RegistryError
    from evalkit_core.models._ratelimit import TokenBucket
    from evalkit_core.models._registry import (
        DEFAULT_TIMEOUTS,
        PROVIDERS,
        REGISTRY_ENV,
        ModelEntry,
        Prices,
        Registry,
        SimSpec,
        Timeouts,
        key_routes,
        load_registry,
        parse_timeouts,
    )
    from evalkit_core.models._retry import (
        RetryPolicy,
        backoff_delay,
        is_retryable_status,
        retry_after_seconds,
    )
    from evalkit_core.models._sim import json_mutants, text_mutants
    from evalkit_core.models._types import (
        Completion,
        JsonValue,
        Message,
        Request,
        SimContext,
        ToolCall,
        ToolSpec,
        Usage,
        completion_from_json,
        completion_to_json,
        request_from_json,
        request_to_json,
    )

# Names load on first use (PEP 562): the read-only commands (budget show, calls list, campaign status) need the
# ledger and the call record, not the HTTP client, its providers and asyncio.
_LAZY: dict[str, str] = {
    "BudgetScope": "evalkit_core.models._budget",
    "BudgetStatus": "evalkit_core.models._budget",
    "UnknownOutcome": "evalkit_core.models._budget",
    "budget_status": "evalkit_core.models._budget",
    "charged_for_label": "evalkit_core.models._budget",
    "parse_cap": "evalkit_core.models._budget",
    "reconcile": "evalkit_core.models._budget",
    "set_budget_cap": "evalkit_core.models._budget",
    "settle_from_invoice": "evalkit_core.models._budget",
    "unknown_outcomes": "evalkit_core.models._budget",
    "CallAttempt": "evalkit_core.models._calls",
    "CallRecord": "evalkit_core.models._calls",
    "call_attempts": "evalkit_core.models._calls",
    "list_calls": "evalkit_core.models._calls",
    "parse_since": "evalkit_core.models._calls",
    "recompute_cost": "evalkit_core.models._calls",
    "ModelBackend": "evalkit_core.models._client",
    "ModelClient": "evalkit_core.models._client",
    "RecordFn": "evalkit_core.models._client",
    "complete": "evalkit_core.models._client",
    "redact": "evalkit_core.models._client",
    "cost_of": "evalkit_core.models._cost",
    "worst_case_cost": "evalkit_core.models._cost",
    "BudgetExceeded": "evalkit_core.models._errors",
    "MissingKeyError": "evalkit_core.models._errors",
    "ModelError": "evalkit_core.models._errors",
    "RegistryError": "evalkit_core.models._errors",
    "TokenBucket": "evalkit_core.models._ratelimit",
    "DEFAULT_TIMEOUTS": "evalkit_core.models._registry",
    "PROVIDERS": "evalkit_core.models._registry",
    "REGISTRY_ENV": "evalkit_core.models._registry",
    "ModelEntry": "evalkit_core.models._registry",
    "Prices": "evalkit_core.models._registry",
    "Registry": "evalkit_core.models._registry",
    "SimSpec": "evalkit_core.models._registry",
    "Timeouts": "evalkit_core.models._registry",
    "key_routes": "evalkit_core.models._registry",
    "load_registry": "evalkit_core.models._registry",
    "parse_timeouts": "evalkit_core.models._registry",
    "RetryPolicy": "evalkit_core.models._retry",
    "backoff_delay": "evalkit_core.models._retry",
    "is_retryable_status": "evalkit_core.models._retry",
    "retry_after_seconds": "evalkit_core.models._retry",
    "json_mutants": "evalkit_core.models._sim",
    "text_mutants": "evalkit_core.models._sim",
    "Completion": "evalkit_core.models._types",
    "JsonValue": "evalkit_core.models._types",
    "Message": "evalkit_core.models._types",
    "Request": "evalkit_core.models._types",
    "SimContext": "evalkit_core.models._types",
    "ToolCall": "evalkit_core.models._types",
    "ToolSpec": "evalkit_core.models._types",
    "Usage": "evalkit_core.models._types",
    "completion_from_json": "evalkit_core.models._types",
    "completion_to_json": "evalkit_core.models._types",
    "request_from_json": "evalkit_core.models._types",
    "request_to_json": "evalkit_core.models._types",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "DEFAULT_TIMEOUTS",
    "PROVIDERS",
    "REGISTRY_ENV",
    "BudgetExceeded",
    "BudgetScope",
    "BudgetStatus",
    "CallAttempt",
    "CallRecord",
    "Completion",
    "JsonValue",
    "Message",
    "MissingKeyError",
    "ModelBackend",
    "ModelClient",
    "ModelEntry",
    "ModelError",
    "Prices",
    "RecordFn",
    "Registry",
    "RegistryError",
    "Request",
    "RetryPolicy",
    "SimContext",
    "SimSpec",
    "Timeouts",
    "TokenBucket",
    "ToolCall",
    "ToolSpec",
    "UnknownOutcome",
    "Usage",
    "backoff_delay",
    "budget_status",
    "call_attempts",
    "charged_for_label",
    "complete",
    "completion_from_json",
    "completion_to_json",
    "cost_of",
    "is_retryable_status",
    "json_mutants",
    "key_routes",
    "list_calls",
    "load_registry",
    "parse_cap",
    "parse_since",
    "parse_timeouts",
    "recompute_cost",
    "reconcile",
    "redact",
    "request_from_json",
    "request_to_json",
    "retry_after_seconds",
    "set_budget_cap",
    "settle_from_invoice",
    "text_mutants",
    "unknown_outcomes",
    "worst_case_cost",
]
