"""Hostile tests of the masks served by default (issue 29, item 6): attackers written here, independently of the
harness's decoders, against the arms as ``serve_mask`` serves them, on the demo and on synthetic releases of other
secrets. Each asserts what the attacker recovers is under the threshold; a mask that regressed (a decoy or clone
that stopped hiding, an instant no longer drawn, a real order leaking) makes them fail. Figures: ``-s | grep
HOSTILE``.

Attack classes: calendar inversion, count and form-mix alignment, instant matching, unique (form, date) pairs,
short windows, row ordering, and telling clones from real rows by their fields.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from evalkit.pit._decoders import THRESHOLD, _Reference, _window_uniform  # pyright: ignore[reportPrivateUsage]
from evalkit.pit._decoys import time_class
from evalkit.pit._serving import ServedMask, serve_mask
from evalkit.pit._toolbox import CellView
from evalkit_core import Clock, Release, nyse
from evalkit_core._synth import write_demo_release, write_synth_release

_NY = "America/New_York"


def _say(name: str, value: float) -> None:
    print(f"\nHOSTILE {name} = {value:.4f}")


@pytest.fixture(scope="module", params=["demo", "synth-3", "synth-7"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Release, ServedMask]:
    """A release (the demo, and synthetic ones of other seeds: other mask secrets) and its masks as served."""
    base = tmp_path_factory.mktemp(request.param)
    if request.param == "demo":
        path = write_demo_release(base / "demo")
    else:
        seed = int(request.param.split("-")[1])
        path = write_synth_release(base / "r", rows=1500, start=dt.date(2023, 2, 1), end=dt.date(2023, 3, 31), seed=seed)
    release = Release.load(path)
    return request.param, release, serve_mask(release, release.window, nyse(), redacted=True)


def _real(arm: pl.DataFrame, release: Release) -> pl.DataFrame:
    truth = release.answer_key.select("row_key", pl.col("partition_date").alias("real_date"), pl.col("issuer").alias("real_issuer"))
    return arm.join(truth, on="row_key", how="inner")


def _date_share(arm: pl.DataFrame, release: Release, guess: Callable[[dt.date], dt.date | None]) -> float:
    real = _real(arm, release)
    hits = sum(guess(s) == r for s, r in zip(real["partition_date"].to_list(), real["real_date"].to_list(), strict=True))
    return hits / real.height


# --- calendar inversion (shifted) --------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["k_th_session_10y", "k_th_session_9y", "same_calendar_date_10y", "weeks_522"])
def test_calendar_inversion_recovers_no_dates(case: tuple[str, Release, ServedMask], variant: str):
    name, release, served = case
    cal = nyse()
    dates = [s.date for s in cal.all]
    index = {d: i for i, d in enumerate(dates)}

    def guess(shown: dt.date) -> dt.date | None:
        if variant == "same_calendar_date_10y":
            return shown.replace(year=shown.year - 10)
        if variant == "weeks_522":
            return shown - dt.timedelta(weeks=522)
        years = 10 if variant == "k_th_session_10y" else 9
        if shown not in index:
            return None
        first_shown = next(d for d in dates if d.year == shown.year)
        first_real = next((d for d in dates if d.year == shown.year - years), None)
        if first_real is None:
            return None
        j = index[first_real] + (index[shown] - index[first_shown])
        return dates[j] if 0 <= j < len(dates) else None

    share = _date_share(served.arm, release, guess)
    _say(f"{name}/shifted/calendar_inversion/{variant}", share)
    assert share < THRESHOLD


# --- count and form-mix alignment (shifted) ----------------------------------------------------------------------


def _slide(shown: dict[dt.date, list[int]], record: dict[dt.date, list[int]]) -> list[int]:
    """Every lag (in days of the sorted runs) of least mean L1 distance, overlap at least half the shorter run."""
    a, b = sorted(shown), sorted(record)
    best, tied = None, []
    for lag in range(-(len(a) - 1), len(b)):
        pairs = [(a[i], b[i + lag]) for i in range(len(a)) if 0 <= i + lag < len(b)]
        if len(pairs) < max(1, min(len(a), len(b)) // 2):
            continue
        score = round(sum(sum(abs(x - y) for x, y in zip(shown[p], record[q], strict=True)) for p, q in pairs) / len(pairs), 9)
        if best is None or score < best:
            best, tied = score, [lag]
        elif score == best:
            tied.append(lag)
    return tied


@pytest.mark.parametrize("variant", ["totals", "form_mix", "form_and_class"])
def test_count_and_form_mix_alignment_recover_no_dates(case: tuple[str, Release, ServedMask], variant: str):
    name, release, served = case
    main = release.arm("main")

    def key(form: str, t: dt.datetime | None) -> str:
        return "*" if variant == "totals" else form if variant == "form_mix" else f"{form}/{time_class(t)}"

    kinds = sorted({key(f, t) for f, t in zip(main["form"], main["acceptance_at"], strict=True)}
                   | {key(f, t) for f, t in zip(served.arm["form"], served.arm["acceptance_at"], strict=True)})
    pos = {k: i for i, k in enumerate(kinds)}

    def table(frame: pl.DataFrame) -> dict[dt.date, list[int]]:
        out: dict[dt.date, list[int]] = {}
        for d, f, t in frame.select("partition_date", "form", "acceptance_at").iter_rows():
            out.setdefault(d, [0] * len(kinds))[pos[key(f, t)]] += 1
        return out

    shown, record = table(served.arm), table(main)
    a, b = sorted(shown), sorted(record)
    lags = _slide(shown, record)
    share = sum(
        _date_share(served.arm, release, lambda s, lag=lag: {a[i]: b[i + lag] for i in range(len(a)) if 0 <= i + lag < len(b)}.get(s))
        for lag in lags
    ) / len(lags)
    _say(f"{name}/shifted/alignment/{variant}", share)
    assert share < THRESHOLD


# --- instant matching (redacted) ---------------------------------------------------------------------------------


def _one_to_one(arm: pl.DataFrame, release: Release, key: Callable[[dict[str, Any]], Any]) -> float:
    """A record filing whose key is unique in the record, matched to a uniform pick among the shown rows of that
    key: the expected share of real rows whose issuer it names."""
    record = release.arm("main").iter_rows(named=True)
    seen: Counter[Any] = Counter()
    issuer: dict[Any, str] = {}
    for r in record:
        k = key(r)
        if k is not None:
            seen[k] += 1
            issuer[k] = r["issuer"]
    shown = Counter(k for r in arm.iter_rows(named=True) if (k := key(r)) is not None)
    real = _real(arm, release)
    total = 0.0
    for r in real.iter_rows(named=True):
        k = key(r)
        if k is not None and seen[k] == 1 and issuer[k] == r["real_issuer"]:
            total += 1 / shown[k]
    return total / real.height


def _ny_tod(t: dt.datetime | None) -> int | None:
    if t is None:
        return None
    from zoneinfo import ZoneInfo

    local = t.astimezone(ZoneInfo(_NY))
    return local.hour * 3600 + local.minute * 60 + local.second


@pytest.mark.parametrize("variant", ["acceptance", "dissemination", "time_of_day_and_date", "minute_and_date"])
def test_instant_matching_names_no_issuers(case: tuple[str, Release, ServedMask], variant: str):
    name, release, served = case
    assert served.redacted is not None

    def key(r: dict[str, Any]) -> Any:
        t = r["acceptance_at"]
        if variant == "acceptance":
            return None if t is None else (r["form"], t)
        if variant == "dissemination":
            d = r["disseminated_at"]
            return None if d is None else (r["form"], d)
        tod = _ny_tod(t)
        if tod is None:
            return None
        return (r["form"], r["partition_date"], tod if variant == "time_of_day_and_date" else tod // 60)

    plain = _one_to_one(release.arm("redacted"), release, key)
    share = _one_to_one(served.redacted.arm, release, key)
    _say(f"{name}/redacted/instant/{variant}", share)
    assert share < THRESHOLD
    if variant in ("acceptance", "time_of_day_and_date"):
        assert plain > THRESHOLD  # the attack is real: it names issuers in the arm as released


def test_a_real_rows_two_masked_copies_do_not_share_a_drawn_time(case: tuple[str, Release, ServedMask]):
    """The shifted and redacted arms draw times of day under different tags: an agent holding both copies of a
    row cannot link them by time of day (and read the real date off the redacted one)."""
    name, _, served = case
    assert served.redacted is not None
    shifted = dict(served.arm.select("row_key", "acceptance_at").iter_rows())
    pairs = [(_ny_tod(t), _ny_tod(shifted.get(k))) for k, t in served.redacted.arm.select("row_key", "acceptance_at").iter_rows()
             if t is not None and shifted.get(k) is not None]
    share = sum(a == b for a, b in pairs) / len(pairs)
    _say(f"{name}/cross_arm/same_time_of_day", share)
    assert share < THRESHOLD


# --- unique (form, date) pairs (redacted) ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["form_date", "form_date_class", "form_date_class_hour"])
def test_unique_form_date_pairs_name_no_issuers(case: tuple[str, Release, ServedMask], variant: str):
    """A (form, date) pair (or finer: the part of the day, the hour) unique in the record: a real row in it is one
    of the shown rows of that slot, and a one-to-one matching names it one time in their number."""
    name, release, served = case
    assert served.redacted is not None

    def key(r: dict[str, Any]) -> Any:
        t = r["acceptance_at"]
        if variant == "form_date":
            return (r["form"], r["partition_date"])
        if variant == "form_date_class":
            return (r["form"], r["partition_date"], time_class(t))
        tod = _ny_tod(t)
        return (r["form"], r["partition_date"], time_class(t), None if tod is None else tod // 3600)

    plain = _one_to_one(release.arm("redacted"), release, key)
    share = _one_to_one(served.redacted.arm, release, key)
    _say(f"{name}/redacted/unique_slot/{variant}", share)
    assert plain > THRESHOLD  # as released, these slots name their issuers
    assert share < THRESHOLD


# --- short windows -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("days", "holds"), [(5, False), (10, False), (19, False), (20, True), (40, True)])
def test_a_short_window_says_it_cannot_hold(days: int, holds: bool):
    """No mask hides a date among fewer than 1/THRESHOLD days from an attacker who knows the window: the uniform
    guess breaks it, and a limit says so, exactly below 20 filing days."""
    from evalkit_core import is_sec_business_day

    start = dt.date(2023, 2, 1)
    window_days: list[dt.date] = []
    d = start
    while len(window_days) < days:
        if is_sec_business_day(d):
            window_days.append(d)
        d += dt.timedelta(days=1)
    n = 200
    rows = pl.DataFrame({
        "row_key": [f"r{i}" for i in range(n)],
        "form": ["8-K"] * n,
        "partition_date": [window_days[i % days] + dt.timedelta(days=3650) for i in range(n)],
        "acceptance_at": [None] * n,
    }, schema={"row_key": pl.String, "form": pl.String, "partition_date": pl.Date, "acceptance_at": pl.Datetime("us", "UTC")})
    truth = pl.DataFrame({"row_key": rows["row_key"], "partition_date": [window_days[i % days] for i in range(n)],
                          "issuer": [f"i{i}" for i in range(n)]})
    record = pl.DataFrame({"form": ["8-K"] * n, "partition_date": truth["partition_date"], "issuer": truth["issuer"]})
    figure, limit = _window_uniform(rows, truth, _Reference(record), (window_days[0], window_days[-1]))
    _say(f"short_window/{days}", figure["dates_recovered"])
    assert figure["dates_recovered"] == pytest.approx(1 / days, abs=1e-6)
    assert figure["breaks"] is (not holds)
    assert (limit is None) is holds
    if limit is not None:
        assert f"a window of {days} filing days cannot hold" in limit


# --- row ordering (redacted) -------------------------------------------------------------------------------------


def _by_slot(frame: pl.DataFrame) -> dict[Any, list[str]]:
    out: dict[Any, list[str]] = {}
    for k, f, d, t in frame.select("row_key", "form", "partition_date", "acceptance_at").iter_rows():
        out.setdefault((f, d, time_class(t)), []).append(k)
    return out


@pytest.mark.parametrize("variant", ["arm_order_first", "arm_order_quantile", "cell_order_first"])
def test_row_order_does_not_say_which_rows_are_real(case: tuple[str, Release, ServedMask], variant: str):
    """Within each (form, date, part of day) slot, guess that the first r rows (r: the record's filings there)
    are the real ones, or the rows at the real rows' quantiles; in the arm's order or as a cell serves it (the
    pit clock). The share of guesses that are real rows stays at the slot's r/S, whatever order they came in."""
    name, release, served = case
    assert served.redacted is not None
    arm = served.redacted.arm
    if variant == "cell_order_first":
        view = CellView("redacted", Clock("pit"), arm, served.redacted.main, nyse(), None, by_shown=True)
        arm = arm.join(pl.DataFrame({"row_key": view.row_keys, "_o": range(len(view.row_keys))}), on="row_key").sort("_o")
    real_keys = set(release.answer_key["row_key"].to_list())
    record = Counter((f, d, time_class(t)) for f, d, t in release.arm("main").select("form", "partition_date", "acceptance_at").iter_rows())
    hits = expected = 0.0
    for slot, keys in _by_slot(arm).items():
        r = record[slot]
        if variant == "arm_order_quantile":
            picks = [keys[min(len(keys) - 1, int((k + 0.5) * len(keys) / r))] for k in range(r)]
        else:
            picks = keys[:r]
        hits += sum(k in real_keys for k in picks)
        expected += r * r / len(keys)
    n = len(real_keys)
    _say(f"{name}/redacted/row_order/{variant}", hits / n)
    # as many real rows among the picks as a uniform pick gives, within noise; far from all of them
    assert hits / n < 2 * expected / n + 0.02
    assert hits / n < 0.5


def test_the_served_known_at_is_not_the_real_instant(case: tuple[str, Release, ServedMask]):
    """A redacted cell shows each row's known_at: the one its drawn fields give, not the real acceptance (which
    would be an instant to look up in the record)."""
    name, release, served = case
    assert served.redacted is not None
    view = CellView("redacted", Clock("pit"), served.redacted.arm, served.redacted.main, nyse(), None, by_shown=True)
    real = dict(release.arm("main").select("row_key", "acceptance_at").iter_rows())
    shown = [view.render(i) for i in range(len(view))]
    with_real = [r for r in shown if r["row_key"] in real and real[r["row_key"]] is not None]
    same = sum(r["known_at"] == real[r["row_key"]].strftime("%Y-%m-%dT%H:%M:%SZ") for r in with_real)
    _say(f"{name}/redacted/known_at_is_real", same / len(with_real))
    assert same / len(with_real) < THRESHOLD


# --- telling clones from real rows by their fields ---------------------------------------------------------------


def test_clones_have_the_fields_and_formats_real_rows_have(case: tuple[str, Release, ServedMask]):
    """Row key format, title, which fields are null, publication lag: the same distribution for clones and real
    rows of each signature group (total-variation distance 0 for the exact ones, small for the key's first
    character)."""
    name, release, served = case
    assert served.redacted is not None
    arm = served.redacted.arm
    clones = served.redacted.clones
    real_keys = set(release.answer_key["row_key"].to_list())
    assert clones and not clones & real_keys and set(arm["row_key"].to_list()) == clones | real_keys

    def features(r: dict[str, Any]) -> tuple[Any, ...]:
        return (len(r["row_key"]), r["row_key"][0], r["title"], r["form"], r["partition_date"], r["published_at"],
                r["acceptance_at"] is None, r["disseminated_at"] is None, r["issuer"], r["cik"], r["accession"], r["url"])

    # per (form, date, nulls) slot, the clones' exact features are a subset of the real rows'
    real_f = {features(r)[:1] + features(r)[2:] for r in arm.iter_rows(named=True) if r["row_key"] in real_keys}
    clone_f = {features(r)[:1] + features(r)[2:] for r in arm.iter_rows(named=True) if r["row_key"] in clones}
    assert clone_f <= real_f
    alphabet_real = Counter(k[1] for k in real_keys)
    alphabet_clone = Counter(k[1] for k in clones)
    tv = 0.5 * sum(abs(alphabet_real[c] / len(real_keys) - alphabet_clone[c] / len(clones)) for c in set(alphabet_real) | set(alphabet_clone))
    _say(f"{name}/redacted/row_key_second_char_tv", tv)
    assert tv < 0.05


def test_the_serving_is_a_pure_function_of_the_release_and_its_secret(case: tuple[str, Release, ServedMask], tmp_path: Path):
    _name, release, served = case
    again = serve_mask(release, release.window, nyse(), redacted=True)
    assert served.redacted is not None and again.redacted is not None
    assert again.redacted.arm.equals(served.redacted.arm) and again.redacted.clones == served.redacted.clones
    assert again.arm.equals(served.arm)
