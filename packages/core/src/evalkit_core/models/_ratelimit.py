"""Client-side rate limits (the registry's ``limits``: requests and tokens per minute).

The ``ModelClient`` keeps them in the store (:func:`take_slot`), so every process and machine using one store
shares them: a sliding window of one minute per provider and api model, in which at most ``requests`` requests
go out and their tokens (the estimate, corrected to the usage reported once the answer is in) stay within
``tokens``. A request that does not fit waits until the oldest requests in the window leave it. The check and
the slot it takes are one write transaction, so two processes cannot both take the last slot. The provider's
own 429s (handled by the retry loop) pace the rest.

:class:`TokenBucket` is the in-memory limiter of one process (kept for callers outside the client)."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Awaitable, Callable

import attrs

from evalkit_core.store import Connection

__all__ = ["BURST_SECONDS", "WINDOW_SECONDS", "RateLimit", "TokenBucket", "settle_slot", "take_slot"]

WINDOW_SECONDS = 60.0  # a shared limit counts the requests of the last minute

BURST_SECONDS = 10.0  # a bucket holds this many seconds' worth of its rate: bursts stay modest


class TokenBucket:
    """A token bucket that lets its balance go negative: each ``acquire`` takes its units at once and sleeps
    off
    any debt. Waiters are therefore served in arrival order without a lock, and a big request cannot starve.
    """

    def __init__(
        self,
        per_minute: float,
        *,
        burst_seconds: float = BURST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_seconds)
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self, units: float) -> float:
        """Take ``units`` now (at most one bucketful) and return how long the caller must wait before going
        on."""
        self._refill()
        self._tokens -= min(units, self.capacity)
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    async def acquire(self, units: float = 1.0) -> float:
        """Take ``units`` and sleep until they are paid for; returns the time slept."""
        wait = self.take(units)
        if wait > 0:
            await self._sleep(wait)
        return wait

    def refund(self, units: float) -> None:
        """Give back units taken on an estimate that proved too high (or take more with a negative value)."""
        self._refill()
        self._tokens = min(self.capacity, self._tokens + units)

    @property
    def available(self) -> float:
        self._refill()
        return self._tokens


@attrs.frozen
class RateLimit:
    """The shared limits of one provider and api model: at most ``requests`` requests and ``tokens`` tokens
    in any window of :data:`WINDOW_SECONDS` (None: no limit of that kind)."""

    key: str
    requests: int | None
    tokens: float | None


def take_slot(
    db: Connection, limit: RateLimit, tokens: float, *, now: float, call_id: str | None = None
) -> tuple[str | None, float]:
    """Inside a write transaction: take a slot for one request of ``tokens`` (estimated) tokens and return
    ``(event_id, 0.0)``, or take nothing and return ``(None, seconds to wait)`` before trying again. A request
    larger than the whole token limit counts as the whole limit (it waits for an empty window, it does not hang).
    """
    db.execute("DELETE FROM rate_events WHERE limit_key = ? AND at <= ?", (limit.key, now - WINDOW_SECONDS))
    rows: list[tuple[float, float]] = [
        (float(a), float(t))
        for a, t in db.execute(
            "SELECT at, tokens FROM rate_events WHERE limit_key = ? ORDER BY at", (limit.key,)
        ).fetchall()
    ]
    wait = 0.0
    if limit.requests is not None and len(rows) + 1 > limit.requests:
        # the request fits once the (len - requests + 1) oldest have left the window
        oldest = rows[len(rows) - limit.requests][0]
        wait = max(wait, oldest + WINDOW_SECONDS - now)
    if limit.tokens is not None:
        need = sum(t for _, t in rows) + min(tokens, limit.tokens) - limit.tokens
        freed = 0.0
        for at, t in rows:
            if need <= 0 or freed >= need:
                break
            freed += t
            wait = max(wait, at + WINDOW_SECONDS - now)
    if wait > 0:
        return None, max(wait, 0.001)
    event_id = uuid.uuid4().hex
    db.execute(
        "INSERT INTO rate_events (event_id, limit_key, at, tokens, call_id) VALUES (?, ?, ?, ?, ?)",
        (event_id, limit.key, now, float(min(tokens, limit.tokens or math.inf)), call_id),
    )
    return event_id, 0.0


def settle_slot(db: Connection, event_id: str, tokens: float) -> None:
    """Inside a write transaction: correct a slot's tokens to what the request used (never upwards)."""
    db.execute(
        "UPDATE rate_events SET tokens = ? WHERE event_id = ? AND tokens > ?", (float(tokens), event_id, float(tokens))
    )
