"""Which failures are retried, and how long to wait: exponential backoff with jitter, ``Retry-After``
honoured."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

import attrs

__all__ = ["RETRY_STATUSES", "RetryPolicy", "backoff_delay", "is_retryable_status", "retry_after_seconds"]

RETRY_STATUSES = frozenset({408, 409, 429})  # plus every 5xx (529 "overloaded" included)


@attrs.frozen
class RetryPolicy:
    """``max_attempts`` counts the first request. Delays in seconds."""

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 120.0  # a longer Retry-After is cut to this

    def __attrs_post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")


def is_retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES or 500 <= status <= 599


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP
    date."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff_delay(attempt: int, policy: RetryPolicy, retry_after: float | None, rng: random.Random) -> float:
    """Delay before attempt ``attempt + 1``. With ``Retry-After``: exactly that (capped at
    ``max_retry_after``).
    Otherwise "equal jitter": uniform in [d/2, d] with d = min(max_delay, base_delay * 2**(attempt-1))."""
    if retry_after is not None:
        return min(retry_after, policy.max_retry_after)
    d = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
    return rng.uniform(d / 2, d)
