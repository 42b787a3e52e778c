"""Clock policies (leaky, dump, pit) and the one entry rule, per row and on a whole polars frame."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalkit_core import (
    CLOCKS,
    Clock,
    ConfigError,
    KnownAt,
    entry_session,
    known_at,
    nyse,
    parse_clock,
    with_entry,
)
from strategies import clock_rows

UTC = dt.UTC
D = dt.date


def Z(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s).replace(tzinfo=UTC)


def row(
    partition: str, published: str | None = None, accepted: str | None = None, disseminated: str | None = None
) -> dict[str, Any]:
    return {
        "partition_date": D.fromisoformat(partition),
        "published_at": D.fromisoformat(published or partition),
        "acceptance_at": Z(accepted) if accepted else None,
        "disseminated_at": Z(disseminated) if disseminated else None,
    }


FRAME_SCHEMA = {
    "partition_date": pl.Date,
    "published_at": pl.Date,
    "acceptance_at": pl.Datetime("us", "UTC"),
    "disseminated_at": pl.Datetime("us", "UTC"),
}


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=FRAME_SCHEMA)


# (case, row, pit known_at, pit fallback, pit entry date)
# NY times: EDT (UTC-4) until 2022-11-06 and from 2023-03-12; EST (UTC-5) between.
PIT_CASES = [
    (
        "just before 09:30 EST",
        row("2022-11-15", accepted="2022-11-15T14:29:59"),
        "2022-11-15T14:29:59",
        False,
        "2022-11-15",
    ),
    (
        "exactly 09:30 EST",
        row("2022-11-15", accepted="2022-11-15T14:30:00"),
        "2022-11-15T14:30:00",
        False,
        "2022-11-16",
    ),
    (
        "one second after 09:30",
        row("2022-11-15", accepted="2022-11-15T14:30:01"),
        "2022-11-15T14:30:01",
        False,
        "2022-11-16",
    ),
    (
        "intraday",
        row("2022-11-15", accepted="2022-11-15T18:00:00"),
        "2022-11-15T18:00:00",
        False,
        "2022-11-16",
    ),
    (
        "after the close",
        row("2022-11-15", accepted="2022-11-15T21:05:00"),
        "2022-11-15T21:05:00",
        False,
        "2022-11-16",
    ),
    (
        "late evening NY, next day UTC",
        row("2022-11-15", accepted="2022-11-16T03:00:00"),
        "2022-11-16T03:00:00",
        False,
        "2022-11-16",
    ),
    (
        "friday evening",
        row("2022-11-18", "2022-11-21", "2022-11-18T23:30:00"),
        "2022-11-18T23:30:00",
        False,
        "2022-11-21",
    ),
    (
        "saturday",
        row("2022-11-21", accepted="2022-11-19T15:00:00"),
        "2022-11-19T15:00:00",
        False,
        "2022-11-21",
    ),
    (
        "thanksgiving eve",
        row("2022-11-23", accepted="2022-11-23T22:00:00"),
        "2022-11-23T22:00:00",
        False,
        "2022-11-25",
    ),
    (
        "on thanksgiving",
        row("2022-11-25", accepted="2022-11-24T15:00:00"),
        "2022-11-24T15:00:00",
        False,
        "2022-11-25",
    ),
    (
        "early-close afternoon",
        row("2022-11-25", accepted="2022-11-25T18:30:00"),
        "2022-11-25T18:30:00",
        False,
        "2022-11-28",
    ),
    (
        "christmas eve eve",
        row("2022-12-23", accepted="2022-12-23T21:30:00"),
        "2022-12-23T21:30:00",
        False,
        "2022-12-27",
    ),
    (
        "new year's eve",
        row("2022-12-30", accepted="2022-12-30T22:00:00"),
        "2022-12-30T22:00:00",
        False,
        "2023-01-03",
    ),
    # autumn DST change (Sunday 2022-11-06): the bell moves from 13:30Z to 14:30Z
    (
        "fri before fall-back, 09:29:59 EDT",
        row("2022-11-04", accepted="2022-11-04T13:29:59"),
        "2022-11-04T13:29:59",
        False,
        "2022-11-04",
    ),
    (
        "fri before fall-back, 09:30 EDT",
        row("2022-11-04", accepted="2022-11-04T13:30:00"),
        "2022-11-04T13:30:00",
        False,
        "2022-11-07",
    ),
    (
        "mon after fall-back, 09:00 EST (=14:00Z)",
        row("2022-11-07", accepted="2022-11-07T14:00:00"),
        "2022-11-07T14:00:00",
        False,
        "2022-11-07",
    ),
    (
        "mon after fall-back, 09:30 EST",
        row("2022-11-07", accepted="2022-11-07T14:30:00"),
        "2022-11-07T14:30:00",
        False,
        "2022-11-08",
    ),
    (
        "sunday of fall-back, 01:30 (ambiguous local)",
        row("2022-11-07", accepted="2022-11-06T06:30:00"),
        "2022-11-06T06:30:00",
        False,
        "2022-11-07",
    ),
    # spring DST change (Sunday 2023-03-12): the bell moves from 14:30Z to 13:30Z
    (
        "fri before spring-forward, 09:29:59 EST",
        row("2023-03-10", accepted="2023-03-10T14:29:59"),
        "2023-03-10T14:29:59",
        False,
        "2023-03-10",
    ),
    (
        "fri before spring-forward, 09:30 EST",
        row("2023-03-10", accepted="2023-03-10T14:30:00"),
        "2023-03-10T14:30:00",
        False,
        "2023-03-13",
    ),
    (
        "mon after spring-forward, 09:29:59 EDT",
        row("2023-03-13", accepted="2023-03-13T13:29:59"),
        "2023-03-13T13:29:59",
        False,
        "2023-03-13",
    ),
    (
        "mon after spring-forward, 09:45 EDT (=13:45Z)",
        row("2023-03-13", accepted="2023-03-13T13:45:00"),
        "2023-03-13T13:45:00",
        False,
        "2023-03-14",
    ),
    # without acceptance_at: the dump rule (published_at 23:59:59Z), counted as a fallback
    ("no acceptance", row("2022-11-15"), "2022-11-15T23:59:59", True, "2022-11-16"),
    ("no acceptance, friday", row("2022-11-18"), "2022-11-18T23:59:59", True, "2022-11-21"),
    ("no acceptance, holiday eve", row("2022-11-23"), "2022-11-23T23:59:59", True, "2022-11-25"),
    (
        "no acceptance, published later",
        row("2022-11-14", "2022-11-16"),
        "2022-11-16T23:59:59",
        True,
        "2022-11-17",
    ),
    (
        "no acceptance, only disseminated",
        row("2022-11-15", disseminated="2022-11-15T12:00:00"),
        "2022-11-15T23:59:59",
        True,
        "2022-11-16",
    ),
    # disseminated_at later than acceptance wins
    (
        "disseminated after the bell",
        row("2022-11-15", accepted="2022-11-15T14:00:00", disseminated="2022-11-15T14:31:00"),
        "2022-11-15T14:31:00",
        False,
        "2022-11-16",
    ),
    (
        "disseminated before the bell",
        row("2022-11-15", accepted="2022-11-15T13:00:00", disseminated="2022-11-15T14:00:00"),
        "2022-11-15T14:00:00",
        False,
        "2022-11-15",
    ),
    (
        "disseminated over the weekend",
        row("2022-11-18", accepted="2022-11-18T20:00:00", disseminated="2022-11-21T15:00:00"),
        "2022-11-21T15:00:00",
        False,
        "2022-11-22",
    ),
    (
        "disseminated earlier than acceptance is ignored",
        row("2022-11-15", accepted="2022-11-15T15:00:00", disseminated="2022-11-15T10:00:00"),
        "2022-11-15T15:00:00",
        False,
        "2022-11-16",
    ),
]


@pytest.mark.parametrize(
    ("case", "r", "known", "fallback", "entry"), PIT_CASES, ids=[c[0] for c in PIT_CASES]
)
def test_pit_clock_cases(case: str, r: dict[str, Any], known: str, fallback: bool, entry: str) -> None:
    assert known_at(r, Clock.PIT) == KnownAt(Z(known), fallback=fallback)
    assert entry_session(r, "pit").date == D.fromisoformat(entry)


def test_pit_cases_on_a_frame_agree_and_count_fallbacks() -> None:
    out = with_entry(frame([c[1] for c in PIT_CASES]), Clock.PIT)
    assert out.get_column("entry_date").to_list() == [D.fromisoformat(c[4]) for c in PIT_CASES]
    assert out.get_column("known_at").to_list() == [Z(c[2]) for c in PIT_CASES]
    assert out.get_column("known_at_fallback").to_list() == [c[3] for c in PIT_CASES]
    assert out.get_column("known_at_fallback").sum() == 5
    cal = nyse()
    assert [cal.all[i].date for i in out.get_column("entry_index").to_list()] == out.get_column(
        "entry_date"
    ).to_list()


# (row, leaky entry, dump entry)
LEAKY_DUMP_CASES = [
    (row("2022-11-15"), "2022-11-15", "2022-11-16"),  # leaky sees the filing at midnight, before the bell
    (row("2022-11-15", accepted="2022-11-15T22:00:00"), "2022-11-15", "2022-11-16"),  # acceptance is ignored
    (row("2022-11-18", "2022-11-21"), "2022-11-18", "2022-11-22"),  # published the next business day
    (row("2022-11-19"), "2022-11-21", "2022-11-21"),  # a Saturday partition
    (row("2022-11-24", "2022-11-25"), "2022-11-25", "2022-11-28"),  # a holiday partition
    (row("2022-11-04"), "2022-11-04", "2022-11-07"),
    (row("2022-11-07"), "2022-11-07", "2022-11-08"),
    (row("2023-03-10"), "2023-03-10", "2023-03-13"),
    (row("2023-03-13"), "2023-03-13", "2023-03-14"),
]


@pytest.mark.parametrize(("r", "leaky", "dump"), LEAKY_DUMP_CASES)
def test_leaky_and_dump_rules(r: dict[str, Any], leaky: str, dump: str) -> None:
    assert known_at(r, "leaky") == KnownAt(
        dt.datetime.combine(r["partition_date"], dt.time(0), tzinfo=UTC), fallback=False
    )
    assert known_at(r, "dump") == KnownAt(
        dt.datetime.combine(r["published_at"], dt.time(23, 59, 59), tzinfo=UTC), fallback=False
    )
    assert entry_session(r, Clock.LEAKY).date == D.fromisoformat(leaky)
    assert entry_session(r, Clock.DUMP).date == D.fromisoformat(dump)


def test_leaky_and_dump_on_a_frame() -> None:
    f = frame([c[0] for c in LEAKY_DUMP_CASES])
    leaky = with_entry(f, "leaky")
    dump = with_entry(f, "dump")
    assert leaky.get_column("entry_date").to_list() == [D.fromisoformat(c[1]) for c in LEAKY_DUMP_CASES]
    assert dump.get_column("entry_date").to_list() == [D.fromisoformat(c[2]) for c in LEAKY_DUMP_CASES]
    assert not leaky.get_column("known_at_fallback").any()
    assert not dump.get_column("known_at_fallback").any()
    assert dump.get_column("known_at").dtype == pl.Datetime("us", "UTC")
    assert dump.get_column("entry_date").dtype == pl.Date
    # the frame keeps its own columns and gains exactly four
    assert leaky.columns == [*FRAME_SCHEMA, "known_at", "known_at_fallback", "entry_index", "entry_date"]
    assert leaky.height == f.height


def test_clock_order_never_inverts() -> None:
    """leaky <= pit and leaky <= dump for rows whose acceptance is on or after their partition date."""
    for c in PIT_CASES:
        r = c[1]
        if r["acceptance_at"] is not None and r["acceptance_at"].date() < r["partition_date"]:
            continue
        assert entry_session(r, "leaky").date <= entry_session(r, "pit").date
        assert entry_session(r, "leaky").date <= entry_session(r, "dump").date


def test_string_values_are_accepted_per_row() -> None:
    r = {
        "partition_date": "2022-11-15",
        "published_at": "2022-11-15",
        "acceptance_at": "2022-11-15T14:30:00Z",
    }
    assert known_at(r, "pit") == KnownAt(Z("2022-11-15T14:30:00"), fallback=False)
    r2 = dict(r, acceptance_at="2022-11-15T09:29:59-05:00")
    assert entry_session(r2, "pit").date == D(2022, 11, 15)
    r3 = dict(r, acceptance_at=None)
    assert known_at(r3, "pit") == KnownAt(Z("2022-11-15T23:59:59"), fallback=True)


def test_naive_values_mean_utc_whatever_the_machine_timezone(monkeypatch) -> None:
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        r = {"partition_date": "2022-11-15", "published_at": "2022-11-15"}
        as_string = known_at(dict(r, acceptance_at="2022-11-15T14:29:59"), "pit").at
        as_datetime = known_at(dict(r, acceptance_at=dt.datetime(2022, 11, 15, 14, 29, 59)), "pit").at
        assert as_string == as_datetime == Z("2022-11-15T14:29:59")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_parse_clock() -> None:
    assert [parse_clock(s) for s in ("leaky", "dump", "pit")] == list(CLOCKS)
    assert CLOCKS == (Clock.LEAKY, Clock.DUMP, Clock.PIT)
    assert [c.reachable for c in CLOCKS] == [False, True, True]
    assert str(Clock.PIT) == "pit"
    with pytest.raises(ConfigError, match="'PIT'"):
        parse_clock("PIT")
    with pytest.raises(ConfigError, match="leaky, dump, pit"):
        parse_clock("wallclock")


def test_row_beyond_the_calendar_is_a_config_error() -> None:
    r = row("2049-12-31", accepted="2049-12-31T22:00:00")
    with pytest.raises(ConfigError):
        entry_session(r, "pit")
    with pytest.raises(ConfigError):
        with_entry(frame([r]), "pit")


def test_row_before_the_calendar_is_a_config_error_in_both_forms() -> None:
    r = row("1990-06-01", accepted="1990-06-01T15:00:00")
    with pytest.raises(ConfigError):
        entry_session(r, "pit")
    with pytest.raises(ConfigError):
        with_entry(frame([r]), "pit")


def test_empty_frame() -> None:
    out = with_entry(frame([]), "pit")
    assert out.height == 0
    assert "entry_date" in out.columns


@given(st.lists(clock_rows(), min_size=1, max_size=25), st.sampled_from(CLOCKS))
def test_frame_agrees_with_rows(rows: list[dict[str, Any]], clock: Clock) -> None:
    out = with_entry(frame(rows), clock)
    for r, known, fb, entry in zip(
        rows,
        out.get_column("known_at").to_list(),
        out.get_column("known_at_fallback").to_list(),
        out.get_column("entry_date").to_list(),
        strict=True,
    ):
        k = known_at(r, clock)
        assert (known, fb) == (k.at, k.fallback)
        s = entry_session(r, clock)
        assert entry == s.date
        assert s.open > k.at
