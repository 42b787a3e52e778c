"""Decoys against decoders written by someone who wants them to fail (issue 29, item 6).

Every attacker here sees a masked arm with its decoys (it cannot tell which rows are decoys) and holds the
knowledge its name says: ``record`` is the real per-day record (the main arm: EDGAR's public full index, or the
public synthetic generator), ``window`` is the run's real window. Each is scored over the real rows only, as the
probability that its guess for a real row names the row's real date (or issuer): an attacker left with several
equally good alignments picks one uniformly, so a tie of t alignments of which one is right scores 1/t of it.

The figures each test prints (``-s``) are the ones the report and docs/pit-harness.md ("Decoys") quote.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import polars as pl
import pytest

from evalkit.pit._decoders import THRESHOLD
from evalkit.pit._decoys import Decoyed, jittered, with_decoys
from evalkit_core import Release, is_sec_business_day, nyse, with_entry
from evalkit_core._synth import write_demo_release

_NY = "America/New_York"
_Map = Callable[[dt.date], "dt.date | tuple[dt.date, ...] | None"]  # a tuple: a uniform pick among its dates


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return Release.load(write_demo_release(tmp_path_factory.mktemp("demo") / "demo"))


@pytest.fixture(scope="module")
def decoyed(demo: Release) -> Decoyed:
    return with_decoys(demo)


def _say(name: str, value: float) -> None:
    print(f"\nFIGURE {name} = {value:.4f}")


# --- what the attacker is scored on ----------------------------------------------------------------------------


def _real_dates(demo: Release, arm: pl.DataFrame, decoys: frozenset[str]) -> list[tuple[dt.date, dt.date]]:
    """(shown date, real date) of every real row of ``arm``."""
    real = demo.arm("main").select("row_key", pl.col("partition_date").alias("real"))
    rows = arm.filter(~pl.col("row_key").is_in(list(decoys))).join(real, on="row_key")
    return list(zip(rows.get_column("partition_date").to_list(), rows.get_column("real").to_list(), strict=True))


def _expected(pairs: Sequence[tuple[dt.date, dt.date]], guesses: Sequence[_Map]) -> float:
    """The expected share of real rows whose date a uniform pick among ``guesses`` names."""
    if not guesses or not pairs:
        return 0.0
    def credit(guess: dt.date | tuple[dt.date, ...] | None, real: dt.date) -> float:
        if isinstance(guess, tuple):
            return guess.count(real) / len(guess) if guess else 0.0
        return float(guess == real)

    hits = sum(sum(credit(g(s), r) for s, r in pairs) for g in guesses)
    return hits / len(guesses) / len(pairs)


def _per_day(frame: pl.DataFrame, forms: Sequence[str]) -> tuple[list[dt.date], list[list[int]]]:
    index = {f: i for i, f in enumerate(forms)}
    table: dict[dt.date, list[int]] = {}
    for day, form in frame.select("partition_date", "form").iter_rows():
        table.setdefault(day, [0] * len(forms))[index[form]] += 1
    days = sorted(table)
    return days, [table[d] for d in days]


def _aligned(shown: list[dt.date], record: list[dt.date], lags: Sequence[int]) -> list[_Map]:
    def by(lag: int) -> _Map:
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


# --- attackers on the shifted arm --------------------------------------------------------------------------------


def count_alignment(arm: pl.DataFrame, record: pl.DataFrame) -> list[_Map]:
    """Per-day form vectors of the shown arm slid along the record's: least mean L1 distance wins (every tie)."""
    forms = sorted(set(record.get_column("form").to_list()) | set(arm.get_column("form").to_list()))
    a_days, a = _per_day(arm, forms)
    b_days, b = _per_day(record, forms)

    def score(lag: int, lo: int, hi: int) -> float:
        return sum(abs(x - y) for i in range(lo, hi) for x, y in zip(a[i], b[i + lag], strict=True)) / (hi - lo)

    return _aligned(a_days, b_days, _best_lags(len(a), len(b), score))


def total_correlation(arm: pl.DataFrame, record: pl.DataFrame) -> list[_Map]:
    """Per-day totals: the lags of the highest Pearson correlation (a flat shown series correlates with no lag:
    every lag ties)."""
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


def form_mix_nearest(arm: pl.DataFrame, record: pl.DataFrame) -> list[_Map]:
    """Each shown day to the record day with the nearest form proportions (a uniform pick among ties)."""
    forms = sorted(set(record.get_column("form").to_list()) | set(arm.get_column("form").to_list()))
    a_days, a = _per_day(arm, forms)
    b_days, b = _per_day(record, forms)

    def mix(v: list[int]) -> list[float]:
        s = sum(v) or 1
        return [x / s for x in v]

    choices: dict[dt.date, tuple[dt.date, ...]] = {}
    for day, v in zip(a_days, a, strict=True):
        pa = mix(v)
        dists = [round(sum(abs(x - y) for x, y in zip(pa, mix(w), strict=True)), 9) for w in b]
        lo = min(dists)
        choices[day] = tuple(b_days[j] for j, d in enumerate(dists) if d == lo)
    return [choices.get]


def entry_counts(arm: pl.DataFrame, record: pl.DataFrame) -> list[_Map]:
    """What the agent sees call by call: how many rows become visible at each session (pit clock, computed from
    the shown fields), slid along the record's per-session entries; a lag in sessions maps shown to real."""
    cal = nyse()
    dates = [s.date for s in cal.all]
    fields = ["row_key", "partition_date", "published_at", "acceptance_at", "disseminated_at"]
    a_entries: list[int] = with_entry(arm.select(fields), "pit", cal).get_column("entry_index").to_list()
    b_entries: list[int] = with_entry(record.select(fields), "pit", cal).get_column("entry_index").to_list()
    a, b = Counter(a_entries), Counter(b_entries)
    a_idx, b_idx = sorted(a), sorted(b)
    ta, tb = [a[i] for i in a_idx], [b[i] for i in b_idx]

    def score(lag: int, lo: int, hi: int) -> float:
        return sum(abs(ta[i] - tb[i + lag]) for i in range(lo, hi)) / (hi - lo)

    def by(lag: int) -> _Map:
        c = a_idx[max(0, -lag)] - b_idx[max(0, -lag) + lag]

        def guess(shown: dt.date) -> dt.date | None:
            i = bisect.bisect_right(dates, shown) - 1
            return dates[i - c] + (shown - dates[i]) if i >= 0 and 0 <= i - c < len(dates) else None

        return guess

    return [by(lag) for lag in _best_lags(len(ta), len(tb), score)]


def _tod(frame: pl.DataFrame) -> pl.Expr:
    t = pl.col("acceptance_at").dt.convert_time_zone(_NY)
    return (t.dt.hour().cast(pl.Int32) * 3600 + t.dt.minute().cast(pl.Int32) * 60 + t.dt.second().cast(pl.Int32)).alias("tod")


def tod_lookup(arm: pl.DataFrame, record: pl.DataFrame) -> dict[str, tuple[dt.date, str]]:
    """Per shown row: a (form, New York time of day) that is one record row's names that row's date and issuer."""
    ref = record.filter(pl.col("acceptance_at").is_not_null()).select("form", _tod(record), "partition_date", "issuer")
    ref = ref.filter(pl.len().over("form", "tod") == 1)
    shown = arm.filter(pl.col("acceptance_at").is_not_null()).select("row_key", "form", _tod(arm))
    hits = shown.join(ref, on=["form", "tod"])
    return {k: (d, i) for k, d, i in hits.select("row_key", "partition_date", "issuer").iter_rows()}


def unique_tod_rows(arm: pl.DataFrame) -> set[str]:
    """Decoy detection by field distribution: a decoy copies a real row's time of day, so a (form, time of day)
    seen once in the arm was never copied: that row is real for sure."""
    shown = arm.filter(pl.col("acceptance_at").is_not_null()).select("row_key", "form", _tod(arm))
    return set(shown.filter(pl.len().over("form", "tod") == 1).get_column("row_key").to_list())


# --- the figures ------------------------------------------------------------------------------------------------


def test_decoys_flatten_every_day_and_form(demo: Release, decoyed: Decoyed):
    """Every shown (date, form) cell holds the same count per form; the main arm is untouched; keys look alike."""
    for arm in ("shifted", "redacted"):
        cells = decoyed.arms[arm].group_by("partition_date", "form").len()
        per_form = cells.group_by("form").agg(pl.col("len").n_unique().alias("counts"), pl.len().alias("days"))
        assert per_form.get_column("counts").to_list() == [1] * per_form.height
        assert set(per_form.get_column("days").to_list()) == {demo.arm("main").get_column("partition_date").n_unique()}
    shown = decoyed.arms["shifted"]
    assert shown.height > 2 * demo.arm("shifted").height
    assert decoyed.decoys.isdisjoint(demo.arm("main").get_column("row_key").to_list())
    assert all(len(k) == 21 and k[0] == "r" and int(k[1:], 16) >= 0 for k in decoyed.decoys)
    # the redacted and shifted rows of a decoy carry exactly the fields a real row carries
    real = demo.arm("shifted").columns
    assert decoyed.arms["shifted"].columns == real
    for arm in ("shifted", "redacted"):
        frame = decoyed.arms[arm]
        nulls_real = frame.filter(~pl.col("row_key").is_in(list(decoyed.decoys))).null_count().row(0)
        nulls_decoy = frame.filter(pl.col("row_key").is_in(list(decoyed.decoys))).null_count().row(0)
        for name, a, b in zip(frame.columns, nulls_real, nulls_decoy, strict=True):
            assert (a == 0) == (b == 0) or name == "disseminated_at", (arm, name)


def test_decoys_are_a_function_of_the_secret(demo: Release):
    a, b = with_decoys(demo), with_decoys(demo)
    assert a.decoys == b.decoys
    assert a.arms["shifted"].equals(b.arms["shifted"])
    import attrs

    other = attrs.evolve(demo, masks=attrs.evolve(demo.masks, shift_secret=bytes(32)))
    assert with_decoys(other).decoys.isdisjoint(a.decoys)


def test_a_release_without_a_secret_has_no_decoys(tmp_path: Path):
    old = Release.load(write_demo_release(tmp_path / "old", release_format="evalkit-release/2"))
    with pytest.raises(ValueError, match="no mask secret"):
        with_decoys(old)


def test_every_real_row_is_copied_so_no_time_of_day_is_seen_once(decoyed: Decoyed):
    """The field-distribution detector: rows whose (form, time of day) the arm shows once are real for sure.
    Decoys take every real row of a form in turn before any twice, so none is left alone."""
    arm = decoyed.arms["shifted"]
    certain = unique_tod_rows(arm)
    real = set(arm.get_column("row_key").to_list()) - decoyed.decoys
    share = len(certain & real) / len(real)
    precision = len(certain & real) / max(1, len(certain))
    _say("shifted/unique_time_of_day_detector/real_rows_singled_out", share)
    _say("shifted/unique_time_of_day_detector/precision", precision)
    # A decoy shares its template's time of day unless the shift squeezed one of the two into closed days.
    assert share < THRESHOLD


@pytest.mark.parametrize("attack", [count_alignment, total_correlation, form_mix_nearest, entry_counts])
def test_alignment_attackers_against_decoys(demo: Release, decoyed: Decoyed, attack: Callable[..., list[_Map]]):
    """Without decoys each attacker lines the shown days up with the record's; with them, how much is left."""
    record = demo.arm("main")
    plain = _expected(_real_dates(demo, demo.arm("shifted"), frozenset()), attack(demo.arm("shifted"), record))
    pairs = _real_dates(demo, decoyed.arms["shifted"], decoyed.decoys)
    with_d = _expected(pairs, attack(decoyed.arms["shifted"], record))
    _say(f"shifted/{attack.__name__}/without_decoys", plain)
    _say(f"shifted/{attack.__name__}/with_decoys", with_d)
    assert with_d < THRESHOLD


def test_time_of_day_lookup_is_not_hidden_by_decoys(demo: Release, decoyed: Decoyed):
    """What decoys cannot do: a real row whose own (form, time of day) is one record row's is looked up, decoys or
    not (every decoy copied from it is looked up too, and names a wrong date). The figure stays where it was."""
    record = demo.arm("main")
    pairs = dict(_real_dates(demo, decoyed.arms["shifted"], decoyed.decoys))
    real = decoyed.arms["shifted"].filter(~pl.col("row_key").is_in(list(decoyed.decoys)))
    truth = dict(record.select("row_key", "partition_date").iter_rows())
    before = tod_lookup(demo.arm("shifted"), record)
    after = tod_lookup(decoyed.arms["shifted"], record)
    n = real.height
    plain = sum(before.get(k, (None,))[0] == truth[k] for k in truth) / n
    kept = sum(after.get(k, (None,))[0] == truth[k] for k in real.get_column("row_key").to_list()) / n
    _say("shifted/time_of_day_lookup/without_decoys", plain)
    _say("shifted/time_of_day_lookup/with_decoys", kept)
    assert pairs
    assert kept == plain > THRESHOLD


def test_the_window_still_anchors_and_then_finds_every_decoy(demo: Release, decoyed: Decoyed):
    """With the run's window known, the first shown session is the first real one (decoys change no session), so
    every real row's date is back; and a row is real exactly when its form, mapped date and time of day are in
    the record, so the decoys are found too."""
    cal = nyse()
    dates = [s.date for s in cal.all]
    arm = decoyed.arms["shifted"]
    shown_first = min(d for d in arm.get_column("partition_date").to_list() if cal.session_on(d) is not None)
    real_first = min(s.date for s in cal.between(*demo.window))
    c = bisect.bisect_left(dates, shown_first) - bisect.bisect_left(dates, real_first)

    def guess(shown: dt.date) -> dt.date | None:
        i = bisect.bisect_right(dates, shown) - 1
        return dates[i - c] + (shown - dates[i])

    pairs = _real_dates(demo, arm, decoyed.decoys)
    recovered = _expected(pairs, [guess])
    record = demo.arm("main").filter(pl.col("acceptance_at").is_not_null()).select("form", "partition_date", _tod(demo.arm("main")))
    known = set(record.iter_rows())
    rows = arm.filter(pl.col("acceptance_at").is_not_null()).select("row_key", "form", "partition_date", _tod(arm))
    flagged = {k for k, f, d, t in rows.iter_rows() if (f, guess(d), t) in known}
    real = set(rows.get_column("row_key").to_list()) - decoyed.decoys
    _say("shifted/window_anchor/with_decoys", recovered)
    _say("shifted/window_then_record_detector/real_rows_found", len(flagged & real) / len(real))
    _say("shifted/window_then_record_detector/decoys_taken_for_real", len(flagged & decoyed.decoys) / len(decoyed.decoys))
    assert recovered > 0.99
    assert len(flagged & real) / len(real) > 0.99


def test_redacted_lookups_are_not_hidden_by_decoys(demo: Release, decoyed: Decoyed):
    """The redacted arm shows real dates (that is what it is for): a real row whose (form, date) is one record
    row's has its issuer named, decoys or not."""
    record = demo.arm("main")
    unique = record.filter(pl.len().over("form", "partition_date") == 1)
    named = dict(
        decoyed.arms["redacted"].select("row_key", "form", "partition_date")
        .join(unique.select("form", "partition_date", pl.col("issuer").alias("guess")), on=["form", "partition_date"])
        .select("row_key", "guess").iter_rows()
    )
    truth: Mapping[str, str] = dict(record.select("row_key", "issuer").iter_rows())
    share = sum(named.get(k) == who for k, who in truth.items()) / len(truth)
    _say("redacted/date_form_match/with_decoys", share)
    assert share > THRESHOLD


# --- times of day drawn from the secret -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def blurred(demo: Release, decoyed: Decoyed) -> pl.DataFrame:
    secret = demo.masks.shift_secret
    assert secret is not None
    return jittered(decoyed.arms["shifted"], secret, [s.open for s in nyse().all])


def test_jitter_keeps_every_clocks_entry_and_every_date(decoyed: Decoyed, blurred: pl.DataFrame):
    arm = decoyed.arms["shifted"]
    fields = ["row_key", "partition_date", "published_at", "acceptance_at", "disseminated_at"]
    for clock in ("leaky", "dump", "pit"):
        before = with_entry(arm.select(fields), clock, nyse()).get_column("entry_index")
        after = with_entry(blurred.select(fields), clock, nyse()).get_column("entry_index")
        assert before.equals(after), clock
    ny = pl.col("acceptance_at").dt.convert_time_zone(_NY).dt.date()
    assert arm.select(ny).equals(blurred.select(ny))
    moved = int((arm.get_column("acceptance_at") != blurred.get_column("acceptance_at")).sum())
    assert moved > 0.95 * int(arm.get_column("acceptance_at").is_not_null().sum())


def _segment(frame: pl.DataFrame) -> pl.Expr:
    tod = _tod(frame)
    return (
        pl.when(tod < 6 * 3600).then(0).when(tod < 9 * 3600 + 1800).then(1).when(tod < 17 * 3600 + 1800).then(2)
        .otherwise(3).alias("segment")
    )


def nearest_time_of_day(arm: pl.DataFrame, record: pl.DataFrame) -> dict[str, tuple[dt.date, ...]]:
    """The jitter's rule is public: per shown row, the record rows of its form in its time class whose time of day
    is nearest its own (all of them on a tie) name its date."""
    ref = record.filter(pl.col("acceptance_at").is_not_null()).select("form", _tod(record), _segment(record), "partition_date")
    by: dict[tuple[str, int], list[tuple[int, dt.date]]] = {}
    for form, tod, seg, day in ref.iter_rows():
        by.setdefault((form, seg), []).append((tod, day))
    out: dict[str, tuple[dt.date, ...]] = {}
    shown = arm.filter(pl.col("acceptance_at").is_not_null()).select("row_key", "form", _tod(arm), _segment(arm))
    for key, form, tod, seg in shown.iter_rows():
        cands = by.get((form, seg))
        if cands:
            gap = min(abs(t - tod) for t, _ in cands)
            out[key] = tuple(d for t, d in cands if abs(t - tod) == gap)
    return out


def test_time_of_day_lookups_after_jitter(demo: Release, decoyed: Decoyed, blurred: pl.DataFrame):
    record = demo.arm("main")
    truth: dict[str, dt.date] = dict(record.select("row_key", "partition_date").iter_rows())
    real = [k for k in blurred.get_column("row_key").to_list() if k not in decoyed.decoys]
    exact = tod_lookup(blurred, record)
    exact_share = sum(exact.get(k, (None,))[0] == truth[k] for k in real) / len(real)
    near = nearest_time_of_day(blurred, record)
    near_share = sum(near[k].count(truth[k]) / len(near[k]) for k in real if k in near) / len(real)
    _say("shifted/time_of_day_lookup/with_decoys_and_jitter", exact_share)
    _say("shifted/nearest_time_of_day/with_decoys_and_jitter", near_share)
    assert exact_share < THRESHOLD
    assert near_share < THRESHOLD


@pytest.mark.parametrize("attack", [count_alignment, total_correlation, form_mix_nearest, entry_counts])
def test_alignment_attackers_after_jitter(demo: Release, decoyed: Decoyed, blurred: pl.DataFrame, attack: Callable[..., list[_Map]]):
    pairs = _real_dates(demo, blurred, decoyed.decoys)
    share = _expected(pairs, attack(blurred, demo.arm("main")))
    _say(f"shifted/{attack.__name__}/with_decoys_and_jitter", share)
    assert share < THRESHOLD


def _features(frame: pl.DataFrame) -> dict[str, pl.Expr]:
    """Per-row features a decoy detector can read off the shown fields alone."""
    acc = pl.col("acceptance_at").dt.convert_time_zone(_NY)
    dis = pl.col("disseminated_at").dt.convert_time_zone(_NY)
    return {
        "acceptance_weekday": acc.dt.weekday(),
        "acceptance_segment": _segment(frame),
        "acceptance_hour": acc.dt.hour(),
        "acceptance_day_lag": (pl.col("partition_date") - acc.dt.date()).dt.total_days(),
        "published_lag": (pl.col("published_at") - pl.col("partition_date")).dt.total_days(),
        "disseminated_time": dis.dt.strftime("%H:%M:%S"),
        "disseminated_day_lag": (dis.dt.date() - pl.col("partition_date")).dt.total_days(),
        "partition_weekday": pl.col("partition_date").dt.weekday(),
        "row_key_first_digit": pl.col("row_key").str.slice(1, 1),
        "form": pl.col("form"),
    }


def _tv(frame: pl.DataFrame, expr: pl.Expr) -> tuple[float, int]:
    """Total-variation distance between real rows' and decoys' values of ``expr``, and how many decoys hold a value
    no real row holds."""
    f = frame.select(expr.alias("v"), "decoy")
    real_n, decoy_n = f.filter(~pl.col("decoy")).height, f.filter(pl.col("decoy")).height
    if not real_n or not decoy_n:
        return 0.0, 0
    dist = f.group_by("v", "decoy").len().pivot(on="decoy", index="v", values="len").fill_null(0)
    for side in ("true", "false"):
        if side not in dist.columns:
            dist = dist.with_columns(pl.lit(0).alias(side))
    tv = 0.5 * sum(abs(r / real_n - d / decoy_n) for _, d, r in dist.select("v", "true", "false").iter_rows())
    return tv, int(dist.filter(pl.col("false") == 0).get_column("true").sum())


@pytest.mark.parametrize("arm", ["shifted", "redacted"])
def test_field_distributions_of_decoys(decoyed: Decoyed, arm: str):
    """Decoy detection by field distributions, the figures: the total-variation distance between real rows and
    decoys, per feature (the best advantage a detector reading that feature alone has). The padding cell (form and
    time class) is the price of flat padding: a rare cell is padded most, so its rows are likelier decoys. What
    must hold: no decoy is accepted on a day kind no real row is (a weekend), the publication lag and the row key's
    alphabet are the real rows' own."""
    frame = decoyed.arms[arm].with_columns(decoy=pl.col("row_key").is_in(list(decoyed.decoys)))
    figures = {name: _tv(frame, expr) for name, expr in _features(frame).items()}
    for name, (tv, _) in figures.items():
        _say(f"{arm}/field_tv/{name}", tv)
    acc = pl.col("acceptance_at").dt.convert_time_zone(_NY).dt.weekday()
    weekend = frame.filter(acc >= 6)
    assert weekend.filter(~pl.col("decoy")).height == 0
    assert weekend.height == 0
    assert figures["published_lag"][0] < 0.01
    assert figures["row_key_first_digit"][0] < THRESHOLD


def _cells(frame: pl.DataFrame) -> tuple[list[dt.date], list[Counter[tuple[str, int]]]]:
    rows = frame.select("partition_date", "form", _segment(frame).fill_null(-1)).iter_rows()
    table: dict[dt.date, Counter[tuple[str, int]]] = {}
    for day, form, seg in rows:
        table.setdefault(day, Counter())[form, seg] += 1
    days = sorted(table)
    return days, [table[d] for d in days]


def containment(arm: pl.DataFrame, record: pl.DataFrame) -> list[_Map]:
    """The shown arm holds every real row, so under the true alignment each shown day holds at least the record
    day's rows of every (form, time class) cell: the lags with the fewest rows the shown arm lacks win."""
    a_days, a = _cells(arm)
    b_days, b = _cells(record)

    def score(lag: int, lo: int, hi: int) -> float:
        return sum(max(0, n - a[i][cell]) for i in range(lo, hi) for cell, n in b[i + lag].items()) / (hi - lo)

    return _aligned(a_days, b_days, _best_lags(len(a), len(b), score))


def test_containment_alignment(demo: Release, decoyed: Decoyed, blurred: pl.DataFrame):
    record = demo.arm("main")
    plain = _expected(_real_dates(demo, demo.arm("shifted"), frozenset()), containment(demo.arm("shifted"), record))
    _say("shifted/containment/without_decoys", plain)
    assert plain > 0.99
    for name, arm in (("with_decoys", decoyed.arms["shifted"]), ("with_decoys_and_jitter", blurred)):
        share = _expected(_real_dates(demo, arm, decoyed.decoys), containment(arm, record))
        _say(f"shifted/containment/{name}", share)
        assert share < THRESHOLD


# --- a hidden window: a secret number of decoy-only days before the window, the rest after it ---------------------


def _business_days(start: dt.date, n: int, direction: int) -> list[dt.date]:
    out: list[dt.date] = []
    d = start
    while len(out) < n:
        d += dt.timedelta(days=direction)
        if is_sec_business_day(d):
            out.append(d)
    return out


def _placement_score(a: Sequence[Counter[tuple[str, int]]], b: Sequence[Counter[tuple[str, int]]], lag: int) -> tuple[int, int]:
    """Rows of the record the shown days lack at this placement (containment), then the per-cell L1 distance."""
    lacks = sum(max(0, n - a[i + lag][cell]) for i in range(len(b)) for cell, n in b[i].items())
    l1 = sum(abs(a[i + lag][c] - b[i][c]) for i in range(len(b)) for c in set(a[i + lag]) | set(b[i]))
    return lacks, l1


@pytest.mark.parametrize("extra", [24])
def test_a_hidden_window_against_the_window_and_the_record(demo: Release, extra: int):
    """Not built into the runner: the measurement that says whether it would hold. The run covers February; the
    masked arm shows ``extra`` more days of decoys only, a secret number of them before February and the rest
    after. The attacker knows the window, ``extra`` and the record, and scores every placement by containment
    and by per-day counts; it picks uniformly among the best. Its expected recovery is the probability that it
    names the right placement (then every real row's date is right)."""
    secret = demo.masks.shift_secret
    assert secret is not None
    run = demo.select(start=dt.date(2023, 2, 1), end=dt.date(2023, 2, 28))
    record = run.arm("main")
    real_days = sorted(set(record.get_column("partition_date").to_list()))
    recovered: list[float] = []
    for lead in (0, extra // 3, extra // 2, extra):  # the secret's draw, at several values
        padding = _business_days(real_days[0], lead, -1) + _business_days(real_days[-1], extra - lead, 1)
        dec = with_decoys(run, extra_days=padding)
        arm = jittered(dec.arms["shifted"], secret, [s.open for s in nyse().all])
        a_days, a = _cells(arm)
        b_days, b = _cells(record)
        assert len(a_days) == len(b_days) + extra

        scores = {lag: _placement_score(a, b, lag) for lag in range(extra + 1)}
        best = min(scores.values())
        tied = [lag for lag, s in scores.items() if s == best]
        share = (lead in tied) / len(tied)
        recovered.append(share)
        _say(f"shifted/hidden_window_{extra}/lead_{lead}", share)
    mean = sum(recovered) / len(recovered)
    _say(f"shifted/hidden_window_{extra}/mean", mean)
    assert mean < THRESHOLD


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_figures_do_not_hang_on_one_secret(demo: Release, seed: int):
    """The same attackers against decoys and drawn times made from other secrets (the shift kept: only the
    decoys and times change)."""
    import attrs

    secret = bytes([seed]) * 32
    other = attrs.evolve(demo, masks=attrs.evolve(demo.masks, shift_secret=secret))
    dec = with_decoys(other)
    arm = jittered(dec.arms["shifted"], secret, [s.open for s in nyse().all])
    record = demo.arm("main")
    pairs = _real_dates(demo, arm, dec.decoys)
    truth: dict[str, dt.date] = dict(record.select("row_key", "partition_date").iter_rows())
    near = nearest_time_of_day(arm, record)
    real = [k for k in arm.get_column("row_key").to_list() if k not in dec.decoys]
    figures = {
        attack.__name__: _expected(pairs, attack(arm, record))
        for attack in (count_alignment, total_correlation, form_mix_nearest, entry_counts, containment)
    }
    figures["nearest_time_of_day"] = sum(near[k].count(truth[k]) / len(near[k]) for k in real if k in near) / len(real)
    for name, value in figures.items():
        _say(f"shifted/secret_{seed}/{name}", value)
    assert max(figures.values()) < THRESHOLD
