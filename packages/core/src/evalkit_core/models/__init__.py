"""The model layer: one async client over Anthropic, OpenAI and OpenAI-compatible endpoints and simulated
models; a registry with exact Decimal prices; a budget cap that holds across processes, crashes and lying
providers; rate limits; retries under deadlines; and a record of every call in the store.

Simulated models (``sim/*``) answer from ``Request.sim_context`` (a task's reference solution); see
``evalkit_core.models._sim`` for the seam. The PIT model gateway (a later issue) will serve ``ModelBackend``.
"""

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
from evalkit_core.models._retry import RetryPolicy, backoff_delay, is_retryable_status, retry_after_seconds
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
