"""Decoders against the shifted arm as served with decoys (:mod:`evalkit.pit._serving`): the attackers written to
break decoys, drawn times of day and the hidden window.

Every attacker sees the arm as the agent was served it, decoys included (it cannot tell which rows are decoys), and
holds the knowledge its entry says besides: ``record`` is the real per-day record (the main arm of the run: EDGAR's
public full index, or the public synthetic generator), ``window`` the run's real window, the number of hidden days
and the record. Each is scored over the real rows only, as the probability that its guess for a real row names the
row's real date (or, through the record, its issuer): an attacker left with several equally good alignments picks
one uniformly, so a tie of t alignments of which one is right scores 1/t of it.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

import polars as pl

from evalkit_core import Calendar, with_entry

__all__ = [
    "Guess",
    "containment",
    "count_alignment",
    "entry_counts",
    "expected",
    "form_mix_nearest",
    "nearest_time_of_day",
    "total_correlation",
    "window_placement",
]

_NY = "America/New_York"
Guess = Callable[[dt.date], "dt.date | tuple[dt.date, ...] | None"]  # a tuple: a uniform pick among its dates
_SEGMENTS = (
    6 * 3600,
    9 * 3600 + 1800,
    17 * 3600 + 1800,
)  # the time classes' bounds (:func:`_decoys.time_class`)


def expected(
    pairs: Sequence[tuple[dt.date, dt.date]] | Mapping[dt.date, Counter[dt.date]], guesses: Sequence[Guess]
) -> float:
    """Of real rows' (shown date, real date) ``pairs`` (or their real dates counted per shown date): the expected
    number whose date a uniform pick among ``guesses`` names. Scored once per shown date (a guess is a function of
    it) and summed exactly (fractions): the figure does not depend on the order."""
    by_shown: Mapping[dt.date, Counter[dt.date]]
    if isinstance(pairs, Mapping):
        by_shown = pairs
    else:
        counted: dict[dt.date, Counter[dt.date]] = {}
        by_shown = counted
        for shown, real in pairs:
            counted.setdefault(shown, Counter())[real] += 1
    if not guesses or not by_shown:
        return 0.0
    total = Fraction(0)
    for g in guesses:
        for shown, reals in by_shown.items():
            guess = g(shown)
            if isinstance(guess, tuple):
                if guess:
                    total += Fraction(sum(reals[d] for d in guess), len(guess))
            elif guess is not None:
                total += reals[guess]
    return float(total / len(guesses))


def _per_day(frame: pl.DataFrame, forms: Sequence[str]) -> tuple[list[dt.date], list[list[int]]]:
    index = {f: i for i, f in enumerate(forms)}
    table: dict[dt.date, list[int]] = {}
    for day, form in frame.select("partition_date", "form").iter_rows():
        table.setdefault(day, [0] * len(forms))[index[form]] += 1
    days = sorted(table)
    return days, [table[d] for d in days]


def _aligned(shown: list[dt.date], record: list[dt.date], lags: Sequence[int]) -> list[Guess]:
    def by(lag: int) -> Guess:
        mapping = {shown[i]: record[i + lag] for i in range(len(shown)) if 0 <= i + lag < len(record)}
        return mapping.get

    return [by(lag) for lag in lags]


def _best_lags(n: int, m: int, score: Callable[[int, int, int], float]) -> list[int]:
    """The lags (overlap at least half the shorter run) with the lowest ``score(lag, lo, hi)``, all of them."""
    best: float | None = None
    tied: list[int] = []
    for lag in range(-(n - 1), m):
        lo, hi = max(0, -lag), min(n, m - lag)
        if hi - lo < max(1, min(n, m) // 2):
            continue
        s = round(score(lag, lo, hi), 9)
        if best is None or s < best:
            best, tied = s, [lag]
        elif s == best:
            tied.append(lag)
    return tied


def _forms(arm: pl.DataFrame, record: pl.DataFrame) -> list[str]:
    return sorted(set(record.get_column("form").to_list()) | set(arm.get_column("form").to_list()))


def count_alignment(arm: pl.DataFrame, record: pl.DataFrame) -> list[Guess]:
    """Per-day form vectors of the shown arm slid along the record's: least mean L1 distance wins (every tie)."""
    forms = _forms(arm, record)
    a_days, a = _per_day(arm, forms)
    b_days, b = _per_day(record, forms)

    def score(lag: int, lo: int, hi: int) -> float:
        return sum(abs(x - y) for i in range(lo, hi) for x, y in zip(a[i], b[i + lag], strict=True)) / (
            hi - lo
        )

    return _aligned(a_days, b_days, _best_lags(len(a), len(b), score))


def total_correlation(arm: pl.DataFrame, record: pl.DataFrame) -> list[Guess]:
    """Per-day totals: the lags of the highest Pearson correlation (a flat shown series: every lag ties)."""
    a_days, a = _per_day(arm.with_columns(form=pl.lit("*")), ["*"])
    b_days, b = _per_day(record.with_columns(form=pl.lit("*")), ["*"])
    ta, tb = [v[0] for v in a], [v[0] for v in b]

    def score(lag: int, lo: int, hi: int) -> float:
        xs, ys = ta[lo:hi], [tb[i + lag] for i in range(lo, hi)]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        vx = sum((x - mx) ** 2 for x in xs)
        vy = sum((y - my) ** 2 for y in ys)
        if vx == 0 or vy == 0:
            return 0.0  # no information at this lag
        return -sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / (vx * vy) ** 0.5

    return _aligned(a_days, b_days, _best_lags(len(ta), len(tb), score))


def form_mix_nearest(arm: pl.DataFrame, record: pl.DataFrame) -> list[Guess]:
    """Each shown day to the record day with the nearest form proportions (a uniform pick among ties)."""
    forms = _forms(arm, record)
    a_days, a = _per_day(arm, forms)
    b_days, b = _per_day(record, forms)

    def mix(v: list[int]) -> list[float]:
        s = sum(v) or 1
        return [x / s for x in v]

    mixes = [mix(w) for w in b]
    choices: dict[dt.date, tuple[dt.date, ...]] = {}
    for day, v in zip(a_days, a, strict=True):
        pa = mix(v)
        dists = [round(sum(abs(x - y) for x, y in zip(pa, w, strict=True)), 9) for w in mixes]
        lo = min(dists)
        choices[day] = tuple(b_days[j] for j, d in enumerate(dists) if d == lo)
    return [choices.get]


def entry_counts(arm: pl.DataFrame, record: pl.DataFrame, cal: Calendar) -> list[Guess]:
    """What the agent sees call by call: how many rows become visible at each session (pit clock, from the shown
    fields), slid along the record's per-session entries; a lag in sessions maps shown to real."""
    dates = [s.date for s in cal.all]
    fields = ["row_key", "partition_date", "published_at", "acceptance_at", "disseminated_at"]
    a_entries: list[int] = with_entry(arm.select(fields), "pit", cal).get_column("entry_index").to_list()
    b_entries: list[int] = with_entry(record.select(fields), "pit", cal).get_column("entry_index").to_list()
    a, b = Counter(a_entries), Counter(b_entries)
    a_idx, b_idx = sorted(a), sorted(b)
    ta, tb = [a[i] for i in a_idx], [b[i] for i in b_idx]

    def score(lag: int, lo: int, hi: int) -> float:
        return sum(abs(ta[i] - tb[i + lag]) for i in range(lo, hi)) / (hi - lo)

    def by(lag: int) -> Guess:
        c = a_idx[max(0, -lag)] - b_idx[max(0, -lag) + lag]

        def guess(shown: dt.date) -> dt.date | None:
            i = bisect.bisect_right(dates, shown) - 1
            return dates[i - c] + (shown - dates[i]) if i >= 0 and 0 <= i - c < len(dates) else None

        return guess

    return [by(lag) for lag in _best_lags(len(ta), len(tb), score)]


def _tod() -> pl.Expr:
    t = pl.col("acceptance_at").dt.convert_time_zone(_NY)
    return (
        t.dt.hour().cast(pl.Int32) * 3600 + t.dt.minute().cast(pl.Int32) * 60 + t.dt.second().cast(pl.Int32)
    ).alias("tod")


def _segment() -> pl.Expr:
    tod = _tod()
    lo, bell, late = _SEGMENTS
    return (
        pl.when(tod < lo)
        .then(0)
        .when(tod < bell)
        .then(1)
        .when(tod < late)
        .then(2)
        .otherwise(3)
        .alias("segment")
    )


def nearest_time_of_day(arm: pl.DataFrame, record: pl.DataFrame) -> dict[str, tuple[dt.date, ...]]:
    """The drawn times' rule is public: per shown row, the record rows of its form in its time class whose time of
    day is nearest its own (all of them on a tie) name its date."""
    ref = record.filter(pl.col("acceptance_at").is_not_null()).select(
        "form", _tod(), _segment(), "partition_date"
    )
    # per (form, time class): each time of day's record rows (their place in the record, their date), and the
    # times sorted, so the nearest are found by bisection (not by a scan of every candidate for every row)
    by: dict[tuple[str, int], dict[int, list[tuple[int, dt.date]]]] = {}
    for i, (form, tod, seg, day) in enumerate(ref.iter_rows()):
        by.setdefault((form, seg), {}).setdefault(tod, []).append((i, day))
    times = {k: sorted(g) for k, g in by.items()}
    memo: dict[tuple[str, int, int], tuple[dt.date, ...]] = {}
    out: dict[str, tuple[dt.date, ...]] = {}
    shown = arm.filter(pl.col("acceptance_at").is_not_null()).select("row_key", "form", _tod(), _segment())
    for key, form, tod, seg in shown.iter_rows():
        group = by.get((form, seg))
        if not group:
            continue
        found = memo.get((form, seg, tod))
        if found is None:
            found = memo[form, seg, tod] = _nearest_dates(group, times[form, seg], tod)
        out[key] = found
    return out


def _nearest_dates(group: Mapping[int, list[tuple[int, dt.date]]], times: list[int], tod: int) -> tuple[dt.date, ...]:
    """The dates of the record rows whose time of day is nearest ``tod`` (both sides on a tie), in record order."""
    j = bisect.bisect_left(times, tod)
    near = times[max(j - 1, 0) : j + 1]
    gap = min(abs(t - tod) for t in near)
    rows = sorted(r for t in near if abs(t - tod) == gap for r in group[t])
    return tuple(d for _, d in rows)


def _cells(frame: pl.DataFrame) -> tuple[list[dt.date], list[Counter[tuple[str, int]]]]:
    rows = frame.select("partition_date", "form", _segment().fill_null(-1)).iter_rows()
    table: dict[dt.date, Counter[tuple[str, int]]] = {}
    for day, form, seg in rows:
        table.setdefault(day, Counter())[form, seg] += 1
    days = sorted(table)
    return days, [table[d] for d in days]


def containment(arm: pl.DataFrame, record: pl.DataFrame) -> list[Guess]:
    """The shown arm holds every real row, so under the true alignment each shown day holds at least the record
    day's rows of every (form, time class) cell: the lags with the fewest rows the shown arm lacks win."""
    a_days, a = _cells(arm)
    b_days, b = _cells(record)

    def score(lag: int, lo: int, hi: int) -> float:
        return sum(max(0, n - a[i][cell]) for i in range(lo, hi) for cell, n in b[i + lag].items()) / (
            hi - lo
        )

    return _aligned(a_days, b_days, _best_lags(len(a), len(b), score))


def window_placement(arm: pl.DataFrame, record: pl.DataFrame) -> list[Guess]:
    """The window and the hidden-window rule known (decoy-only days around the window, at least one on each side):
    every placement of the record's days among the shown ones, scored by containment (the record rows the shown
    days lack), then by the per-cell L1 distance; the best placements, every tie. (A hidden day the shift folds
    onto another shown day, Good Friday say, leaves one shown day fewer than the rule's count: every placement
    that fits is tried.)"""
    a_days, a = _cells(arm)
    b_days, b = _cells(record)
    scores: dict[int, tuple[int, int]] = {}
    for lag in range(1, len(a) - len(b)):
        lacks = sum(max(0, n - a[i + lag][cell]) for i in range(len(b)) for cell, n in b[i].items())
        l1 = sum(abs(a[i + lag][c] - b[i][c]) for i in range(len(b)) for c in set(a[i + lag]) | set(b[i]))
        scores[lag] = (lacks, l1)
    if not scores:  # no room for a hidden day on each side: the naive anchor, first to first
        return _aligned(a_days, b_days, [0])
    best = min(scores.values())
    return _aligned(a_days, b_days, [-lag for lag, s in scores.items() if s == best])


def issuer_hits(
    shown_days: Sequence[dt.date],
    guesses: Sequence[Guess],
    hits: Callable[[dt.date, dt.date | None], int],
) -> float:
    """Of real rows: the expected number whose issuer the record singles out at the guessed date (a uniform pick
    among ``guesses``, and among a guess's dates). ``hits(shown, day)`` counts the real rows shown at ``shown``
    whose issuer the record names by their form at ``day``; ``shown_days`` are the days real rows are shown at.
    Summed exactly (fractions)."""
    if not guesses:
        return 0.0
    total = Fraction(0)
    for g in guesses:
        for shown in shown_days:
            guess = g(shown)
            options = guess if isinstance(guess, tuple) else (guess,)
            if options:
                total += Fraction(sum(hits(shown, d) for d in options), len(options))
    return float(total / len(guesses))
