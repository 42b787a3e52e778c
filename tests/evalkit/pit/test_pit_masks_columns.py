"""The masks' column-wise forms give what their one-row forms give, value for value.

Serving the masks at EDGAR's density computes spans over whole columns (:func:`draw_bounds_of`), reads decoys and
clones into frames a chunk at a time (``_Columns``) and scores the decoders once per shown date instead of once per
row (``expected``, ``issuer_hits``). Each is checked here against the one-row form it replaced, on inputs chosen
where they could part: daylight-saving days, the segments' edges, the opening bells and a second either side of
them, nulls, chunk boundaries, guesses that are tuples with repeats, None, or dates no row was shown at.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Callable
from zoneinfo import ZoneInfo

import polars as pl
import pytest

from evalkit.pit import _decoys
from evalkit.pit._decoders_served import expected, issuer_hits
from evalkit.pit._decoys import draw_bounds, draw_bounds_of
from evalkit_core import format_instant, nyse

_NY = ZoneInfo("America/New_York")


def _instants() -> list[dt.datetime | None]:
    rng = random.Random(7)
    base = dt.datetime(2004, 1, 1, tzinfo=dt.UTC)
    out: list[dt.datetime | None] = [None]
    out += [base + dt.timedelta(seconds=rng.randrange(0, 25 * 365 * 86400)) for _ in range(4000)]
    for s in nyse().all[::97]:
        out += [s.open + dt.timedelta(seconds=d) for d in (-1, 0, 1)]
    for year in (2007, 2015, 2022, 2023, 2026):
        for month, day in ((3, 11), (3, 12), (3, 13), (11, 4), (11, 5), (11, 6)):
            for hour in range(24):
                for minute, second in ((0, 0), (29, 59), (30, 0), (59, 59)):
                    out.append(dt.datetime(year, month, day, hour, minute, second, tzinfo=_NY).astimezone(dt.UTC))
    out.append(None)
    return out


def test_the_spans_of_a_column_are_the_spans_of_each_instant() -> None:
    opens = [s.open for s in nyse().all]
    instants = _instants()
    got = draw_bounds_of(pl.Series(instants, dtype=pl.Datetime("us", "UTC")), opens)
    want = [None if t is None else draw_bounds(t, opens) for t in instants]
    assert got == want
    # the same objects' text too: the redacted arm's signature groups are put in the order of their repr
    assert [repr(g) for g in got] == [repr(w) for w in want]


@pytest.mark.parametrize("rows", [0, 1, 3, 7, 8, 9, 20])
def test_rows_read_a_chunk_at_a_time_are_the_rows_read_at_once(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr(_decoys, "_CHUNK", 4)
    schema = {"row_key": pl.String, "day": pl.Date, "at": pl.Datetime("us", "UTC"), "flags": pl.List(pl.String)}
    rng = random.Random(rows)
    data = []
    for k in range(rows):
        at = dt.datetime(2022, 11, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=rng.randrange(10**7))
        data.append({
            "row_key": f"k{k}",
            "day": (dt.date(2022, 1, 1) + dt.timedelta(days=k)).isoformat(),
            "at": None if k % 3 == 0 else format_instant(at),
            "flags": ["decoy"] if k % 2 else [],
        })
    columns = _decoys._Columns(schema)  # pyright: ignore[reportPrivateUsage]
    for row in data:
        columns.add(row)
    frame = columns.frame()
    assert frame.schema == pl.Schema(schema)
    assert frame.get_column("row_key").to_list() == [r["row_key"] for r in data]
    assert frame.get_column("day").to_list() == [dt.date.fromisoformat(r["day"]) for r in data]
    assert frame.get_column("at").to_list() == [
        None if r["at"] is None else dt.datetime.fromisoformat(r["at"].replace("Z", "+00:00")) for r in data
    ]
    assert frame.get_column("flags").to_list() == [r["flags"] for r in data]


def test_an_instant_in_another_rendering_is_refused() -> None:
    columns = _decoys._Columns({"at": pl.Datetime("us", "UTC")})  # pyright: ignore[reportPrivateUsage]
    columns.add({"at": "2022-11-01 10:00:00"})
    with pytest.raises(pl.exceptions.InvalidOperationError):
        columns.frame()


Guess = Callable[[dt.date], "dt.date | tuple[dt.date, ...] | None"]


def _cases(seed: int) -> tuple[list[tuple[dt.date, str, str | None, dt.date]], list[Guess], dict[tuple[str, dt.date], list[str]]]:
    rng = random.Random(seed)
    days = [dt.date(2023, 1, 2) + dt.timedelta(days=k) for k in range(12)]
    forms = ["8-K", "4", "10-Q"]
    issuers = ["A", "B", "C", "D", None]
    rows = [(rng.choice(days), rng.choice(forms), rng.choice(issuers), rng.choice(days)) for _ in range(300)]
    record: dict[tuple[str, dt.date], list[str]] = {}
    for _ in range(40):
        record.setdefault((rng.choice(forms), rng.choice(days)), []).append(rng.choice(issuers[:-1]))

    def guess_of(table: dict[dt.date, object]) -> Guess:
        return table.get  # type: ignore[return-value]

    guesses: list[Guess] = []
    for _ in range(5):
        table: dict[dt.date, object] = {}
        for d in days:
            kind = rng.randrange(4)
            if kind == 0:
                table[d] = rng.choice(days)
            elif kind == 1:
                table[d] = tuple(rng.choice([*days, dt.date(2030, 1, 1)]) for _ in range(rng.randrange(0, 4)))
            elif kind == 2:
                table[d] = (d, d, rng.choice(days))  # repeats count as often as they appear
        guesses.append(guess_of(table))
    return rows, guesses, record


@pytest.mark.parametrize("seed", range(6))
def test_scoring_per_shown_date_is_scoring_per_row(seed: int) -> None:
    rows, guesses, record = _cases(seed)

    def issuer_of(form: str, day: dt.date | None) -> str | None:
        found = record.get((form, day)) if day is not None else None
        return found[0] if found is not None and len(found) == 1 else None

    # the one-row forms these replaced
    def credit(guess: object, real: dt.date) -> float:
        if isinstance(guess, tuple):
            return guess.count(real) / len(guess) if guess else 0.0
        return float(guess == real)

    want_dates = sum(sum(credit(g(s), r) for s, _, _, r in rows) for g in guesses) / len(guesses)
    want_issuers = 0.0
    for g in guesses:
        for s, form, who, _ in rows:
            guess = g(s)
            options = guess if isinstance(guess, tuple) else (guess,)
            if options:
                want_issuers += sum(issuer_of(form, d) == who for d in options) / len(options)
    want_issuers /= len(guesses)

    pairs = [(s, r) for s, _, _, r in rows]
    by_shown: dict[dt.date, Counter[dt.date]] = {}
    for s, r in pairs:
        by_shown.setdefault(s, Counter())[r] += 1
    issued: dict[dt.date, dict[str, Counter[str | None]]] = {}
    for s, form, who, _ in rows:
        issued.setdefault(s, {}).setdefault(form, Counter())[who] += 1

    def hits(shown: dt.date, day: dt.date | None) -> int:
        return sum(who[issuer_of(f, day)] for f, who in issued[shown].items())

    assert expected(pairs, guesses) == pytest.approx(want_dates, rel=1e-12, abs=1e-12)
    assert expected(by_shown, guesses) == expected(pairs, guesses)
    assert issuer_hits(list(issued), guesses, hits) == pytest.approx(want_issuers, rel=1e-12, abs=1e-12)
