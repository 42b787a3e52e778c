"""Client-side rate limits: a token bucket per model for requests and one for tokens (from the registry's
``limits``). Buckets live in the ``ModelClient``, so they pace the calls of one process; the provider's own
429s
(handled by the retry loop) pace the rest."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["BURST_SECONDS", "TokenBucket"]

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
