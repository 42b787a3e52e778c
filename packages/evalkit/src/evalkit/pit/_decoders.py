"""The harness's own decoders: before a receipt says the masks hold, try to undo them.

Each decoder is an attacker with stated knowledge, run against a masked arm of the run's release (narrowed to the
run's forms and window). It guesses, for every row, the real filing date (``partition_date``) and, where it can
single a filing out, the issuer; the answer key scores the guesses. The receipt records, per arm and decoder,
the fraction of rows whose real date and issuer it recovers; a fraction above :data:`THRESHOLD` breaks the mask,
and a broken mask does not hold whatever the agent answered in the probe.

Knowledge levels (what the attacker holds besides the masked arm itself, public code and public calendars):

- ``public``: nothing else. Calendar inversion of the format-2 rule (the k-th session of a year to the k-th
  session ten years on) and an exhaustive search over every public rule (k-th session of the year, first to
  first, the same calendar date, whole 52-week spans, for every year offset the calendar allows, and the
  identity), scored as the best of them (an upper bound on what trying public rules gives).
- ``window``: the run's real window (it is in the receipt's config; the demo's is public). The agent is called
  once per session in order, so the k-th shown session is the k-th real one: a shifted arm keeps its order and
  spacing, and that alone gives its dates back.
- ``record``: the real per-day record of the window (the served main arm: for EDGAR, the public full index; for a
  synthetic release, its generator). Matching per-day counts and form mixes recovers the alignment of the
  shifted sessions; matching each row's form and New York time of day (shifted) or exact instant and date
  (redacted) singles filings out.

All of it is a pure function of the release and the answer key: ``evalkit verify`` recomputes it through the
same body code and reports a figure that differs as a MISMATCH.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit_core import Calendar, Release, is_sec_business_day, nyse
from evalkit_core._shift import public_offsets

if TYPE_CHECKING:
    from evalkit.pit._serving import ServedMask

__all__ = ["DECODER_RULE", "THRESHOLD", "run_decoders", "summary"]

THRESHOLD = 0.05
DECODER_RULE = (
    "a decoder breaks a mask when it recovers the real date (shifted arm) or the issuer (either arm) of more than "
    "threshold of the arm's rows; masks hold only if the probe holds and no decoder breaks them"
)
_NY = "America/New_York"
_MIX_FORMS = 8  # the form mix the count decoder compares: this many most frequent forms, the rest as one
_Guess = Callable[[dt.date], dt.date | None]


def run_decoders(
    release: Release,
    arms: Sequence[str],
    window: tuple[dt.date, dt.date] | None = None,
    calendar: Calendar | None = None,
    *,
    served: ServedMask | None = None,
) -> dict[str, Any]:
    """Every decoder against every masked arm of ``arms`` in ``release`` (narrowed to the run), whose real
    window is ``window`` (default: the release's); the receipt's ``decoders`` block. With ``served``, the shifted
    arm is the one its cells served (decoys included), and the decoders written against decoys join in."""
    cal = calendar or nyse()
    truth = release.answer_key.select("row_key", "partition_date", "issuer")
    main = release.arm("main")
    out: dict[str, Any] = {}
    limits: list[str] = []
    if "shifted" in arms:
        arm = served.arm if served is not None else release.arm("shifted")
        out["shifted"] = _shifted(arm, main, truth, window or release.window, cal, served is not None)
        if served is not None and served.redacted is not None:  # receipt version 4
            guess, limit = _window_uniform(arm, truth, _Reference(main), window or release.window)
            out["shifted"]["decoders"].append(guess)
            limits.extend([limit] if limit else [])
    if "redacted" in arms:
        if served is not None and served.redacted is not None:
            out["redacted"] = _redacted_served(served.redacted.arm, main, truth, cal)
        else:
            out["redacted"] = _redacted(release.arm("redacted"), main, truth)
    broken = [f"{arm}/{d['name']}" for arm, block in out.items() for d in block["decoders"] if d["breaks"]]
    public = [
        f"{arm}/{d['name']}" for arm, block in out.items() for d in block["decoders"]
        if d["breaks"] and d["knowledge"] == "public"
    ]
    extra: dict[str, Any] = {"served": served.to_json()} if served is not None else {}
    if served is not None and served.redacted is not None:
        extra["limits"] = limits
    return {
        **extra,
        "threshold": THRESHOLD,
        "rule": DECODER_RULE,
        "release_format": release.format,
        "mask_secret_sha256": release.masks.secret_sha256,
        "arms": out,
        "broken_by": broken,
        "holds": not broken,
        "holds_against_public_knowledge": not public,
    }


def _figure(name: str, knowledge: str, n: int, dates: float | None, issuers: float) -> dict[str, Any]:
    date_share = None if dates is None else _share(dates, n)
    issuer_share = _share(issuers, n)
    breaks = issuer_share > THRESHOLD or (date_share is not None and date_share > THRESHOLD)
    return {
        "name": name,
        "knowledge": knowledge,
        "rows": n,
        "dates_recovered": date_share,
        "issuers_recovered": issuer_share,
        "breaks": breaks,
    }


def _share(k: float, n: int) -> float:
    return round(k / n, 6) if n else 0.0


# --- the shifted arm -------------------------------------------------------------------------------------------


class _Rows:
    """The masked arm joined to the truth: per row its shown date, form, instant, real date and issuer."""

    def __init__(self, arm: pl.DataFrame, truth: pl.DataFrame) -> None:
        joined = arm.select("row_key", "form", "partition_date", "acceptance_at").join(
            truth.rename({"partition_date": "real_date", "issuer": "real_issuer"}), on="row_key", how="inner"
        )
        self.n = joined.height
        self.shown: list[dt.date] = joined.get_column("partition_date").to_list()
        self.forms: list[str] = joined.get_column("form").to_list()
        self.real: list[dt.date] = joined.get_column("real_date").to_list()
        self.issuers: list[str] = joined.get_column("real_issuer").to_list()
        self.frame = joined
        self.arm = arm  # every row shown (a served arm's decoys too): what an attacker sees
        self.days_all: list[dt.date] = sorted(set(arm.get_column("partition_date").to_list()))
        by_shown: dict[dt.date, Counter[dt.date]] = {}
        for s, r in zip(self.shown, self.real, strict=True):
            by_shown.setdefault(s, Counter())[r] += 1
        self.by_shown = by_shown
        # shown date -> form -> real issuers: what an issuer guess made for a shown date is scored against
        issued: dict[dt.date, dict[str, Counter[str | None]]] = {}
        for s, f, who in zip(self.shown, self.forms, self.issuers, strict=True):
            issued.setdefault(s, {}).setdefault(f, Counter())[who] += 1
        self.issued = issued

    def dates_hit(self, guess: _Guess) -> int:
        """How many rows' real dates ``guess`` (shown date -> real date) names."""
        return sum(c[g] for s, c in self.by_shown.items() if (g := guess(s)) is not None)


class _Reference:
    """The record an attacker may hold: the main arm's rows by (form, date) and by instant."""

    def __init__(self, main: pl.DataFrame) -> None:
        self.by_form_date: dict[tuple[str, dt.date], list[str]] = {}
        for form, day, issuer in main.select("form", "partition_date", "issuer").iter_rows():
            self.by_form_date.setdefault((form, day), []).append(issuer)
        self.main = main

    def issuer_of(self, form: str, day: dt.date | None) -> str | None:
        found = self.by_form_date.get((form, day)) if day is not None else None
        return found[0] if found is not None and len(found) == 1 else None


class _Hits:
    """``hits(shown, day)``: how many of the arm's real rows shown at ``shown`` have the issuer the record singles
    out by their form at ``day`` (what a guess of ``day`` for every row shown at ``shown`` names), each pair counted
    once: the decoders' guesses are functions of the shown date, so scoring them per shown date, not per row, gives
    the same counts."""

    def __init__(self, rows: _Rows, ref: _Reference) -> None:
        self.issued = rows.issued
        self.issuer_of = ref.issuer_of
        self.cache: dict[tuple[dt.date, dt.date | None], int] = {}

    def __call__(self, shown: dt.date, day: dt.date | None) -> int:
        key = (shown, day)
        found = self.cache.get(key)
        if found is None:
            forms = self.issued.get(shown, {})
            found = self.cache[key] = sum(who[self.issuer_of(f, day)] for f, who in forms.items())
        return found

    def of(self, guess: _Guess) -> int:
        """The rows whose issuer a guess of one date per shown date names."""
        return sum(self(s, guess(s)) for s in self.issued)


def _shifted(
    arm: pl.DataFrame,
    main: pl.DataFrame,
    truth: pl.DataFrame,
    window: tuple[dt.date, dt.date],
    cal: Calendar,
    served: bool = False,
) -> dict[str, Any]:
    rows = _Rows(arm, truth)
    ref = _Reference(main)
    hits = _Hits(rows, ref)
    dates = [s.date for s in cal.all]

    def by_offset(c: int) -> _Guess:
        def guess(shown: dt.date) -> dt.date | None:
            i = bisect.bisect_right(dates, shown) - 1  # the session on or before the shown date
            j = i + c
            if i < 0 or not 0 <= j < len(dates):
                return None
            return dates[j] + (shown - dates[i])
        return guess

    issuers_for = hits.of

    decoders: list[dict[str, Any]] = []
    if rows.n:
        first = rows.days_all[0]
        # (a) the format-2 rule, inverted: the first session of the shown year back to the first session ten
        # years before (and of the year before that, for a window that starts in late December).
        best: tuple[int, _Guess] | None = None
        for year in (first.year, first.year - 1):
            if not dates[0].year <= year <= dates[-1].year:  # a shown year the calendar does not cover
                continue
            shown0, real0 = cal.between(dt.date(year, 1, 1), dt.date(year, 12, 31)), None
            if year - 10 >= dates[0].year:
                real0 = cal.between(dt.date(year - 10, 1, 1), dt.date(year - 10, 12, 31))
            if shown0 and real0:
                g = by_offset(cal.index_of(real0[0].date) - cal.index_of(shown0[0].date))
                hit = rows.dates_hit(g)
                if best is None or hit > best[0]:
                    best = (hit, g)
        hit, g = best if best is not None else (0, by_offset(0))
        decoders.append(_figure("calendar_inversion", "public", rows.n, hit, issuers_for(g)))
        # (a') every public rule from the first shown session (the best one scored), and the identity.
        s0 = dates[min(bisect.bisect_left(dates, first), len(dates) - 1)]
        best_hit, best_g = rows.dates_hit(by_offset(0)), by_offset(0)
        for c in public_offsets(s0, cal):
            g = by_offset(c)
            hit = rows.dates_hit(g)
            if hit > best_hit:
                best_hit, best_g = hit, g
        decoders.append(_figure("public_rule_search", "public", rows.n, best_hit, issuers_for(best_g)))
        # (c) where the SEC's calendar and the exchange's differ (filings between two sessions: Good Friday and
        # other exchange closures on federal business days; sessions without filings: Columbus and Veterans
        # Day), placed against every stretch of the real calendar.
        decoders.append(_sec_calendar_fingerprint(rows, cal))
        # (c) the run's window known: the first shown session is the first real session of the window.
        r0 = bisect.bisect_left(dates, window[0])
        g = by_offset(r0 - bisect.bisect_left(dates, first))
        decoders.append(_figure("window_anchor", "window", rows.n, rows.dates_hit(g), issuers_for(g)))
        if served:  # the attackers written against decoys, drawn times and the hidden window
            decoders.extend(_against_decoys(rows, ref, hits, cal))
            return {"rows": rows.n, "decoders": decoders}
        # (b) per-day counts and form mixes aligned against the record.
        g = _count_alignment(rows, ref)
        decoders.append(_figure("count_alignment", "record", rows.n, rows.dates_hit(g), issuers_for(g)))
        # (c) each row's form and New York time of day (the shift keeps it) matched against the record.
        decoders.append(_time_of_day(rows, main))
    return {"rows": rows.n, "decoders": decoders}


@functools.cache
def _sec_markers(cal: Calendar) -> tuple[frozenset[int], frozenset[int]]:
    """Over the whole calendar: the session indices ``i`` with an SEC business day strictly between session ``i``
    and ``i + 1``, and those whose session is not an SEC business day."""
    dates = [s.date for s in cal.all]
    between: set[int] = set()
    quiet: set[int] = set()
    for i, d in enumerate(dates):
        if not is_sec_business_day(d):
            quiet.add(i)
        if i + 1 < len(dates):
            day = d + dt.timedelta(days=1)
            while day < dates[i + 1]:
                if is_sec_business_day(day):
                    between.add(i)
                    break
                day += dt.timedelta(days=1)
    return frozenset(between), frozenset(quiet)


def _sec_calendar_fingerprint(rows: _Rows, cal: Calendar) -> dict[str, Any]:
    """Place the shown stretch's markers (a filing date between two shown sessions; a shown session with no
    filing) at every position of the real calendar; the positions with the fewest disagreements are the guess,
    scored as the expected recovery of a uniform pick among them."""
    dates = [s.date for s in cal.all]
    shown_days = rows.days_all  # every shown day, decoys' too: the attacker cannot tell them apart
    s0 = max(0, bisect.bisect_right(dates, shown_days[0]) - 1)
    s1 = min(len(dates) - 1, bisect.bisect_left(dates, shown_days[-1]))
    n = s1 - s0 + 1
    filed = set(shown_days)
    obs_between = frozenset(bisect.bisect_right(dates, d) - 1 - s0 for d in shown_days if cal.session_on(d) is None)
    obs_quiet = frozenset(k for k in range(n) if dates[s0 + k] not in filed)
    between, quiet = _sec_markers(cal)
    b_prefix, q_prefix = _prefix(between, len(dates)), _prefix(quiet, len(dates))
    agreements: Counter[int] = Counter()  # placement -> marks it explains (a cross-correlation, mark by mark)
    for observed, marks in ((obs_between, between), (obs_quiet, quiet)):
        for m in marks:
            for k in observed:
                agreements[m - k] += 1
    best: tuple[int, list[int]] | None = None
    for c in range(len(dates) - n + 1):
        agree = agreements[c]
        pred = (b_prefix[c + n] - b_prefix[c]) + (q_prefix[c + n] - q_prefix[c])
        misses = len(obs_between) + len(obs_quiet) + pred - 2 * agree
        if best is None or misses < best[0]:
            best = (misses, [c])
        elif misses == best[0]:
            best[1].append(c)
    ties = best[1] if best is not None else []
    truth = _true_start(rows, dates, s0)
    hit = issuers = 0
    if truth is not None and truth in ties:
        share = 1 / len(ties)  # the expected share of a uniform pick among the tied placements
        g = _guess_by_start(dates, s0, truth)
        hit = round(rows.dates_hit(g) * share)
        issuers = 0  # a calendar placement names no filing
    return _figure("sec_calendar_fingerprint", "public", rows.n, hit, issuers)


def _against_decoys(rows: _Rows, ref: _Reference, hits: _Hits, cal: Calendar) -> list[dict[str, Any]]:
    """:mod:`evalkit.pit._decoders_served`'s attackers on a served arm, scored over its real rows."""
    from evalkit.pit import _decoders_served as d

    arm, record = rows.arm, ref.main
    attacks: list[tuple[str, str, list[d.Guess]]] = [
        ("window_placement", "window", d.window_placement(arm, record)),
        ("count_alignment", "record", d.count_alignment(arm, record)),
        ("total_correlation", "record", d.total_correlation(arm, record)),
        ("form_mix_nearest", "record", d.form_mix_nearest(arm, record)),
        ("entry_counts", "record", d.entry_counts(arm, record, cal)),
        ("containment", "record", d.containment(arm, record)),
    ]
    out = [
        _figure(name, kind, rows.n, d.expected(rows.by_shown, g), d.issuer_hits(list(rows.issued), g, hits))
        for name, kind, g in attacks
    ]
    out.append(_time_of_day(rows, record))
    near = d.nearest_time_of_day(arm, record)
    dates = issuers = 0.0
    for k, form, real, who in rows.frame.select("row_key", "form", "real_date", "real_issuer").iter_rows():
        if k in near:
            dates += near[k].count(real) / len(near[k])
            issuers += sum(ref.issuer_of(form, day) == who for day in near[k]) / len(near[k])
    out.append(_figure("nearest_time_of_day", "record", rows.n, dates, issuers))
    return out


def _prefix(marks: frozenset[int], n: int) -> list[int]:
    out = [0] * (n + 1)
    for i in range(n):
        out[i + 1] = out[i] + (i in marks)
    return out


def _guess_by_start(dates: Sequence[dt.date], s0: int, start: int) -> _Guess:
    def guess(shown: dt.date) -> dt.date | None:
        i = bisect.bisect_right(dates, shown) - 1
        j = start + (i - s0)
        return dates[j] + (shown - dates[i]) if i >= 0 and 0 <= j < len(dates) else None

    return guess


def _true_start(rows: _Rows, dates: Sequence[dt.date], s0: int) -> int | None:
    """The placement that is right (the one the answer key implies), to score a tie without enumerating it."""
    for shown, real in zip(rows.shown, rows.real, strict=True):
        i, j = bisect.bisect_left(dates, shown), bisect.bisect_left(dates, real)
        if i < len(dates) and dates[i] == shown and j < len(dates) and dates[j] == real:
            return j - (i - s0)
    return None


def _per_day(days: Sequence[dt.date], forms: Sequence[str], kinds: Sequence[str]) -> tuple[list[dt.date], list[list[int]]]:
    index = {f: i for i, f in enumerate(kinds)}
    table: dict[dt.date, list[int]] = {}
    for d, f in zip(days, forms, strict=True):
        table.setdefault(d, [0] * len(kinds))[index[f]] += 1
    order = sorted(table)
    return order, [table[d] for d in order]


def _count_alignment(rows: _Rows, ref: _Reference) -> _Guess:
    """Slide the shown days' row counts along the record's days, in order: the lags with the least mean absolute
    difference over an overlap of at least half the shorter run win, ties broken by the form mix (the counts of
    the most frequent forms, the rest as one); then map day to day."""
    main_days: list[dt.date] = ref.main.get_column("partition_date").to_list()
    top = [f for f, _ in Counter(rows.forms).most_common(_MIX_FORMS)]
    kinds = [*sorted(top), ""]  # the most frequent forms, and every other form as one
    a_days, a = _per_day(rows.shown, [f if f in top else "" for f in rows.forms], kinds)
    b_days, b = _per_day(main_days, [f if f in top else "" for f in ref.main.get_column("form").to_list()], kinds)
    ta, tb = [sum(v) for v in a], [sum(v) for v in b]
    n, m = len(a), len(b)
    need = max(1, min(n, m) // 2)
    mid = (m - n) // 2
    best: float | None = None
    tied: list[int] = []
    # Lags nearest the middle first: a good score found early cuts every later lag short.
    for lag in sorted(range(-(n - 1), m), key=lambda x: (abs(x - mid), x)):
        lo, hi = max(0, -lag), min(n, m - lag)
        if hi - lo < need:
            continue
        limit = best * (hi - lo) if best is not None else float("inf")
        total = 0
        for i in range(lo, hi):
            total += abs(ta[i] - tb[i + lag])
            if total > limit:
                break
        else:
            score = total / (hi - lo)
            if best is None or score < best:
                best, tied = score, [lag]
            elif score == best:
                tied.append(lag)

    def mix(lag: int) -> tuple[float, int, int]:
        lo, hi = max(0, -lag), min(n, m - lag)
        diff = sum(abs(x - y) for i in range(lo, hi) for x, y in zip(a[i], b[i + lag], strict=True))
        return (diff / (hi - lo), abs(lag - mid), lag)

    mapping: dict[dt.date, dt.date] = {}
    if tied:
        lag = min(tied, key=mix)
        mapping = {a_days[i]: b_days[i + lag] for i in range(n) if 0 <= i + lag < m}
    return mapping.get


def _ny_seconds(col: str) -> pl.Expr:
    t = pl.col(col).dt.convert_time_zone(_NY)
    return t.dt.hour().cast(pl.Int32) * 3600 + t.dt.minute().cast(pl.Int32) * 60 + t.dt.second().cast(pl.Int32)


def _time_of_day(rows: _Rows, main: pl.DataFrame) -> dict[str, Any]:
    """A shown row whose (form, New York time of day to the second) is one record row's names that row."""
    ref = (
        main.filter(pl.col("acceptance_at").is_not_null())
        .select("form", _ny_seconds("acceptance_at").alias("tod"), pl.col("partition_date").alias("g_date"),
                pl.col("issuer").alias("g_issuer"))
        .filter(pl.len().over("form", "tod") == 1)
    )
    shown = rows.frame.filter(pl.col("acceptance_at").is_not_null()).select(
        "form", _ny_seconds("acceptance_at").alias("tod"), "real_date", "real_issuer"
    )
    hits = shown.join(ref, on=["form", "tod"], how="inner")
    dates = hits.filter(pl.col("g_date") == pl.col("real_date")).height
    issuers = hits.filter(pl.col("g_issuer") == pl.col("real_issuer")).height
    return _figure("time_of_day_match", "record", rows.n, dates, issuers)


# --- the redacted arm ------------------------------------------------------------------------------------------


def _redacted(arm: pl.DataFrame, main: pl.DataFrame, truth: pl.DataFrame) -> dict[str, Any]:
    """Dates are real in the redacted arm; its mask is the issuer. Decoders single filings out of the record."""
    rows = _Rows(arm, truth)
    ref = _Reference(main)
    by_date = sum(
        ref.issuer_of(f, s) == who for f, s, who in zip(rows.forms, rows.shown, rows.issuers, strict=True)
    )
    record = (
        main.filter(pl.col("acceptance_at").is_not_null())
        .select("form", "acceptance_at", pl.col("issuer").alias("g_issuer"))
        .filter(pl.len().over("form", "acceptance_at") == 1)
    )
    hits = rows.frame.filter(pl.col("acceptance_at").is_not_null()).join(record, on=["form", "acceptance_at"])
    by_instant = hits.filter(pl.col("g_issuer") == pl.col("real_issuer")).height
    return {
        "rows": rows.n,
        "decoders": [
            _figure("date_form_match", "record", rows.n, None, by_date),
            _figure("instant_match", "record", rows.n, None, by_instant),
        ],
    }


def _window_uniform(
    arm: pl.DataFrame, truth: pl.DataFrame, ref: _Reference, window: tuple[dt.date, dt.date]
) -> tuple[dict[str, Any], str | None]:
    """The floor no mask lowers: knowing the window, guess each real row's date uniformly among the window's filing
    days (SEC business days), and its issuer by the record's (form, date) at the guess. With the limit it sets when
    the window is too short for any mask to hold against it (fewer filing days than 1 / THRESHOLD)."""
    days = [window[0] + dt.timedelta(days=k) for k in range((window[1] - window[0]).days + 1)]
    days = [d for d in days if is_sec_business_day(d)]
    rows = _Rows(arm, truth)
    hits = _Hits(rows, ref)
    w = len(days) or 1
    filing_days = set(days)
    dates = sum(r in filing_days for r in rows.real) / w
    issuers = sum(hits(s, d) for s in rows.issued for d in days) / w
    figure = _figure("window_uniform_guess", "window", rows.n, dates, issuers)
    limit = None
    if 1 / w > THRESHOLD:
        limit = (
            f"a window of {len(days)} filing days cannot hold: an attacker who knows it (the receipt's config "
            f"states it) and guesses each row's date uniformly among its days is right one time in {len(days)} "
            f"({1 / w:.1%}), over the threshold of {THRESHOLD:.0%}; no mask hides a date among fewer than "
            f"{math.ceil(1 / THRESHOLD)} days"
        )
    return figure, limit


def _redacted_served(arm: pl.DataFrame, main: pl.DataFrame, truth: pl.DataFrame, cal: Calendar) -> dict[str, Any]:
    """The redacted arm as served with clones: :mod:`evalkit.pit._decoders_redacted`'s attackers, each a one-to-one
    matching of the record's filings onto the shown rows, scored over the real rows."""
    from evalkit.pit._decoders_redacted import redacted_attacks

    n = arm.join(truth.select("row_key"), on="row_key", how="inner").height
    attacks = redacted_attacks(arm, main, truth, [s.open for s in cal.all])
    return {"rows": n, "decoders": [_figure(name, "record", n, None, hits) for name, hits in attacks]}


def summary(block: Mapping[str, Any]) -> str:
    """One line for the run table: which decoders broke which mask."""
    broken: list[Any] = list(block.get("broken_by") or [])
    return "no decoder breaks the masks" if not broken else "broken by " + ", ".join(map(str, broken))
