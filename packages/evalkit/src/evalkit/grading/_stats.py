"""Uncertainty for pass rates: the Wilson score interval for a share, and the standard error of a mean.

Every pass rate evalkit prints carries a Wilson score interval at 95% (z = 1.96): for ``s`` passes out of ``n``
independent trials, ``(p + z^2/2n -/+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`` with ``p = s/n``. It stays
inside [0, 1] and is sensible at 0 and n passes, where the normal interval collapses to a point. Samples of one
task are not independent draws, so with several samples per task the interval on pooled samples is narrower
than the truth; the number of tasks is the honest ``n`` for a per-task claim.

pass@k is a mean over tasks of an unbiased per-task estimate; its uncertainty is the standard error of that mean
over tasks, ``sd / sqrt(T)`` (sample standard deviation, T tasks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["INTERVAL_METHOD", "Z95", "standard_error", "wilson_interval"]

Z95 = 1.959963984540054
INTERVAL_METHOD = "Wilson score interval, 95% (z = 1.96)"


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for ``successes`` out of ``n`` (None when ``n`` is 0), rounded to 6 places."""
    if n <= 0:
        return None
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n, got {successes} of {n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6))


def standard_error(values: Sequence[float]) -> float | None:
    """The standard error of the mean of ``values`` (None for fewer than two), rounded to 6 places."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return round(math.sqrt(var / n), 6)
