"""NYSE sessions and SEC business days, pinned to the dates of issue 2."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest
from hypothesis import given

from evalkit_core import (
    CALENDAR_SPAN,
    Calendar,
    ConfigError,
    Session,
    is_sec_business_day,
    next_sec_business_day,
    next_session_after,
    nyse,
    sec_business_days,
    sessions,
    us_federal_holidays,
)
from strategies import instants

UTC = dt.UTC
D = dt.date


def Z(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s).replace(tzinfo=UTC)


WINDOW = sessions("2022-11-01", "2023-03-31")
WINDOW_DATES = [s.date for s in WINDOW]


# --- the pins of issue 2 ---------------------------------------------------------------------------------------


def test_window_has_104_sessions() -> None:
    assert len(WINDOW) == 104
    assert WINDOW[0].date == D(2022, 11, 1)
    assert WINDOW[-1].date == D(2023, 3, 31)
    assert sorted(set(WINDOW_DATES)) == WINDOW_DATES


@pytest.mark.parametrize(
    "closed", [D(2022, 11, 24), D(2022, 12, 26), D(2023, 1, 2), D(2023, 1, 16), D(2023, 2, 20)]
)
def test_closed_days(closed: dt.date) -> None:
    assert closed.weekday() < 5
    assert closed not in WINDOW_DATES
    assert nyse().session_on(closed) is None


def test_closed_weekdays_in_window_are_exactly_the_holidays() -> None:
    weekdays = [D(2022, 11, 1) + dt.timedelta(days=i) for i in range(151)]
    weekdays = [d for d in weekdays if d.weekday() < 5]
    assert sorted(set(weekdays) - set(WINDOW_DATES)) == [
        D(2022, 11, 24),
        D(2022, 12, 26),
        D(2023, 1, 2),
        D(2023, 1, 16),
        D(2023, 2, 20),
    ]


def test_day_after_thanksgiving_closes_at_1800z() -> None:
    s = nyse().session_on(D(2022, 11, 25))
    assert s is not None
    assert s.open == Z("2022-11-25T14:30:00")
    assert s.close == Z("2022-11-25T18:00:00")
    assert s.early_close
    assert [x.date for x in WINDOW if x.early_close] == [D(2022, 11, 25)]


@pytest.mark.parametrize(
    ("day", "bell", "close"),
    [
        (D(2022, 11, 4), "2022-11-04T13:30:00", "2022-11-04T20:00:00"),  # last Friday of EDT
        (D(2022, 11, 7), "2022-11-07T14:30:00", "2022-11-07T21:00:00"),  # first Monday of EST
        (D(2023, 3, 10), "2023-03-10T14:30:00", "2023-03-10T21:00:00"),  # last Friday of EST
        (D(2023, 3, 13), "2023-03-13T13:30:00", "2023-03-13T20:00:00"),  # first Monday of EDT
    ],
)
def test_bells_across_dst(day: dt.date, bell: str, close: str) -> None:
    s = nyse().session_on(day)
    assert s == Session(day, Z(bell), Z(close))
    assert s.open.tzinfo is not None
    assert s.open.utcoffset() == dt.timedelta(0)
    assert not s.early_close


def test_every_bell_is_0930_new_york() -> None:
    from zoneinfo import ZoneInfo

    ny = ZoneInfo("America/New_York")
    for s in sessions("2021-01-01", "2024-12-31"):
        assert s.open.astimezone(ny).time() == dt.time(9, 30), s
        local_close = s.close.astimezone(ny).time()
        assert local_close in (dt.time(16, 0), dt.time(13, 0)), s
        assert s.early_close == (local_close == dt.time(13, 0))


@pytest.mark.parametrize(
    "closed",
    [
        D(2001, 9, 11),
        D(2001, 9, 14),
        D(2012, 10, 29),
        D(2012, 10, 30),
        D(2018, 12, 5),
        D(2023, 4, 7),
        D(2022, 6, 20),
    ],
)
def test_unscheduled_and_other_closures(closed: dt.date) -> None:
    assert nyse().session_on(closed) is None


def test_sessions_accepts_dates_and_strings_inclusive() -> None:
    a = sessions(D(2022, 11, 4), D(2022, 11, 7))
    b = sessions("2022-11-04", "2022-11-07")
    assert a == b
    assert [s.date for s in a] == [D(2022, 11, 4), D(2022, 11, 7)]
    assert sessions("2022-11-05", "2022-11-06") == []
    assert sessions("2022-11-07", "2022-11-04") == []


# --- next_session_after is strict ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        ("2022-11-04T13:29:59", D(2022, 11, 4)),
        ("2022-11-04T13:30:00", D(2022, 11, 7)),  # exactly at the bell: the next session
        ("2022-11-04T13:30:00.000001", D(2022, 11, 7)),
        ("2022-11-07T14:29:59.999999", D(2022, 11, 7)),
        ("2022-11-07T14:30:00", D(2022, 11, 8)),
        ("2022-11-23T21:00:00", D(2022, 11, 25)),  # Thanksgiving eve after the close
        ("2022-11-25T18:00:01", D(2022, 11, 28)),
        ("2022-12-23T22:00:00", D(2022, 12, 27)),
        ("2022-12-30T23:59:59", D(2023, 1, 3)),
        ("2023-03-10T14:30:00", D(2023, 3, 13)),
        ("2023-03-13T13:29:59", D(2023, 3, 13)),
        ("2023-03-13T13:30:00", D(2023, 3, 14)),
        ("2023-04-06T21:00:00", D(2023, 4, 10)),  # Good Friday closed
    ],
)
def test_next_session_after_is_strict(instant: str, expected: dt.date) -> None:
    assert next_session_after(Z(instant)).date == expected


def test_next_session_after_accepts_any_aware_timezone() -> None:
    from zoneinfo import ZoneInfo

    ny = ZoneInfo("America/New_York")
    assert next_session_after(dt.datetime(2022, 11, 4, 9, 29, 59, tzinfo=ny)).date == D(2022, 11, 4)
    assert next_session_after(dt.datetime(2022, 11, 4, 9, 30, tzinfo=ny)).date == D(2022, 11, 7)
    assert next_session_after(dt.datetime(2023, 3, 13, 9, 30, tzinfo=ny)).date == D(2023, 3, 14)


def test_next_session_after_rejects_naive() -> None:
    with pytest.raises(ConfigError, match="timezone"):
        next_session_after(dt.datetime(2022, 11, 4, 12, 0))


@given(instants)
def test_next_session_after_property(t: dt.datetime) -> None:
    s = next_session_after(t)
    assert s.open > t
    cal = nyse()
    i = cal.index_of(s.date)
    if i > 0:
        assert cal.all[i - 1].open <= t


# --- out of span -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: sessions("1992-12-01", "1993-02-01"),
        lambda: sessions("2049-12-01", "2050-01-31"),
        lambda: next_session_after(Z("1990-06-01T00:00:00")),
        lambda: next_session_after(Z("2050-01-03T00:00:00")),
        lambda: next_session_after(Z("2049-12-31T14:30:00")),  # the last bell: nothing after it in the span
        lambda: is_sec_business_day(D(1985, 1, 21)),
        lambda: sec_business_days("1990-01-01", "1990-01-31"),
        lambda: next_sec_business_day(D(2049, 12, 31)),
    ],
)
def test_out_of_span_is_a_config_error(call) -> None:
    with pytest.raises(ConfigError):
        call()


def test_span_boundaries() -> None:
    assert (D(1993, 1, 1), D(2049, 12, 31)) == CALENDAR_SPAN
    assert next_session_after(Z("1993-01-01T00:00:00")).date == D(1993, 1, 4)
    assert nyse().all[-1].date == D(2049, 12, 31)


@pytest.mark.parametrize("bad", ["2022-13-01", "yesterday", "2022/11/01"])
def test_bad_date_strings_name_the_field(bad: str) -> None:
    with pytest.raises(ConfigError, match="start") as exc:
        sessions(bad, "2023-01-01")
    assert bad in str(exc.value)
    with pytest.raises(ConfigError, match="end"):
        sessions("2022-01-01", bad)


def test_calendar_index_of_a_closed_day() -> None:
    with pytest.raises(ConfigError, match="2022-11-24"):
        nyse().index_of(D(2022, 11, 24))


def test_calendar_from_explicit_sessions() -> None:
    s1 = Session(D(2022, 11, 4), Z("2022-11-04T13:30:00"), Z("2022-11-04T20:00:00"))
    s2 = Session(D(2022, 11, 7), Z("2022-11-07T14:30:00"), Z("2022-11-07T21:00:00"))
    cal = Calendar([s1, s2])
    assert len(cal) == 2
    assert cal.next_session_after(Z("2022-11-04T13:30:00")) == s2
    assert cal.opens_us() == [1667568600 * 10**6, 1667831400 * 10**6]
    with pytest.raises(ConfigError):
        cal.next_session_after(Z("2022-11-07T14:30:00"))


# --- SEC business days -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("day", "sec_business", "trading"),
    [
        (D(2022, 11, 11), False, True),  # Veterans Day: markets open, SEC closed
        (D(2022, 10, 10), False, True),  # Columbus Day
        (D(2023, 4, 7), True, False),  # Good Friday: SEC open, markets closed
        (D(2022, 4, 15), True, False),  # Good Friday 2022
        (D(2022, 6, 20), False, False),  # Juneteenth (Sunday) observed Monday
        (D(2023, 6, 19), False, False),  # Juneteenth on a Monday
        (D(2021, 6, 18), False, True),  # Juneteenth 2021 (Saturday) observed Friday; NYSE only from 2022
        (D(2021, 12, 31), False, True),  # New Year 2022 (Saturday) observed the Friday before; NYSE open
        (D(2022, 1, 3), True, True),  # ... and not moved to the Monday after
        (D(2021, 12, 24), False, False),  # Christmas 2021 (Saturday) observed Friday
        (D(2022, 12, 26), False, False),  # Christmas 2022 (Sunday) observed Monday
        (D(2023, 1, 2), False, False),  # New Year 2023 (Sunday) observed Monday
        (D(2023, 11, 10), False, True),  # Veterans Day 2023 (Saturday) observed Friday
        (D(2026, 7, 3), False, False),  # Independence Day 2026 (Saturday) observed Friday
        (D(2022, 11, 25), True, True),  # day after Thanksgiving: both open (early close)
        (D(2022, 11, 12), False, False),  # Saturday
        (D(2022, 11, 13), False, False),  # Sunday
        (D(2022, 11, 14), True, True),
    ],
)
def test_sec_business_days_vs_trading_days(day: dt.date, sec_business: bool, trading: bool) -> None:
    assert is_sec_business_day(day) is sec_business
    assert (nyse().session_on(day) is not None) is trading


def test_federal_holidays_2021_and_2022_exactly() -> None:
    assert sorted(us_federal_holidays(2021)) == [
        D(2021, 1, 1),
        D(2021, 1, 18),
        D(2021, 2, 15),
        D(2021, 5, 31),
        D(2021, 6, 18),
        D(2021, 7, 5),
        D(2021, 9, 6),
        D(2021, 10, 11),
        D(2021, 11, 11),
        D(2021, 11, 25),
        D(2021, 12, 24),
        D(2021, 12, 31),
    ]
    assert sorted(us_federal_holidays(2022)) == [
        D(2022, 1, 17),
        D(2022, 2, 21),
        D(2022, 5, 30),
        D(2022, 6, 20),
        D(2022, 7, 4),
        D(2022, 9, 5),
        D(2022, 10, 10),
        D(2022, 11, 11),
        D(2022, 11, 24),
        D(2022, 12, 26),
    ]


def _rule_holidays(year: int) -> frozenset[dt.date]:
    """The hand-written rules evalkit used before pandas' calendar (kept here as the reference it must equal)."""

    def nth(month: int, weekday: int, n: int) -> dt.date:
        first = D(year, month, 1)
        return first + dt.timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))

    def last(month: int, weekday: int) -> dt.date:
        end = D(year + (month == 12), month % 12 + 1, 1) - dt.timedelta(days=1)
        return end - dt.timedelta(days=(end.weekday() - weekday) % 7)

    def observed(day: dt.date) -> dt.date:
        return day + dt.timedelta(days={5: -1, 6: 1}.get(day.weekday(), 0))

    days = {nth(1, 0, 3), nth(2, 0, 3), last(5, 0), observed(D(year, 7, 4)), nth(9, 0, 1), nth(10, 0, 2),
            observed(D(year, 11, 11)), nth(11, 3, 4), observed(D(year, 12, 25))}
    if year >= 2021:
        days.add(observed(D(year, 6, 19)))
    days |= {d for d in (observed(D(year, 1, 1)), observed(D(year + 1, 1, 1))) if d.year == year}
    return frozenset(days)


def test_federal_holidays_equal_the_old_rules_over_the_whole_span() -> None:
    for year in range(CALENDAR_SPAN[0].year, CALENDAR_SPAN[1].year + 1):
        assert us_federal_holidays(year) == _rule_holidays(year), year


def test_federal_holidays_equal_pandas_calendar_over_the_whole_span() -> None:
    """The table is written out (importing pandas costs a process half a second); pandas' USFederalHolidayCalendar
    is the reference it must equal, day for day."""
    from pandas.tseries.holiday import USFederalHolidayCalendar

    days = USFederalHolidayCalendar().holidays(start=D(CALENDAR_SPAN[0].year, 1, 1), end=D(CALENDAR_SPAN[1].year, 12, 31))
    by_year: dict[int, set[dt.date]] = {}
    for d in days:
        by_year.setdefault(d.year, set()).add(d.date())
    for year in range(CALENDAR_SPAN[0].year, CALENDAR_SPAN[1].year + 1):
        assert us_federal_holidays(year) == frozenset(by_year.get(year, set())), year


def test_an_sec_business_day_is_answered_without_pandas() -> None:
    code = (
        "import sys, datetime as dt; from evalkit_core import is_sec_business_day; "
        "assert not is_sec_business_day(dt.date(2023, 11, 23)) and is_sec_business_day(dt.date(2023, 11, 24)); "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_juneteenth_before_2021() -> None:
    assert all(d.month != 6 for d in us_federal_holidays(2020))


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        (D(2022, 11, 10), D(2022, 11, 14)),
        (D(2022, 11, 23), D(2022, 11, 25)),
        (D(2021, 12, 30), D(2022, 1, 3)),
        (D(2022, 12, 23), D(2022, 12, 27)),
        (D(2023, 4, 6), D(2023, 4, 7)),
        (D(2022, 11, 14), D(2022, 11, 15)),  # strictly after
    ],
)
def test_next_sec_business_day(day: dt.date, expected: dt.date) -> None:
    assert next_sec_business_day(day) == expected


def test_sec_business_days_in_november_2022() -> None:
    days = sec_business_days("2022-11-01", D(2022, 11, 30))
    assert len(days) == 20  # 22 weekdays minus Veterans Day and Thanksgiving
    assert D(2022, 11, 11) not in days
    assert D(2022, 11, 24) not in days
    assert D(2022, 11, 25) in days
    assert days[0] == D(2022, 11, 1)
    assert days[-1] == D(2022, 11, 30)


def test_nyse_calendar_is_built_once() -> None:
    assert nyse() is nyse()


def test_disk_cached_calendar_equals_the_library_computation(tmp_path, monkeypatch):
    """The JSON cache must hold exactly what pandas-market-calendars computed (and be used when present)."""
    from evalkit_core import _calendar

    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path))
    _calendar.nyse.cache_clear()
    try:
        first = _calendar.nyse()  # built from the library, written to the cache
        assert list((tmp_path / "calendar").glob("nyse-*.json"))
        _calendar.nyse.cache_clear()
        second = _calendar.nyse()  # read back from the cache
        assert second.all == first.all == _calendar._nyse_from_library().all
    finally:
        _calendar.nyse.cache_clear()


def _calendar_cache(tmp_path):
    files = sorted((tmp_path / "calendar").glob("nyse-*.json"))
    assert len(files) == 1
    return files[0], files[0].with_name(files[0].name + ".sha256")


def _shift_one_open(data: bytes, seconds: int) -> bytes:
    rows = json.loads(data)
    rows[-2000][1] += seconds  # one session's opening bell, an hour earlier: more rows look knowable at it
    return json.dumps(rows, separators=(",", ":")).encode()


@pytest.mark.parametrize("edit", ["table only", "garbage, restamped", "unordered, restamped", "not integers, restamped"])
def test_edited_calendar_cache_is_rebuilt_from_the_library(tmp_path, monkeypatch, edit):
    from evalkit_core import _calendar
    from evalkit_core._canonical import digest_bytes

    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path))
    _calendar.nyse.cache_clear()
    try:
        truth = _calendar.nyse()
        table, recorded = _calendar_cache(tmp_path)
        assert recorded.read_text().strip() == truth.digest == digest_bytes(table.read_bytes())
        if edit == "table only":
            table.write_bytes(_shift_one_open(table.read_bytes(), -3600))
        else:
            rows = json.loads(table.read_bytes())
            bad = {
                "garbage, restamped": b"[[1,2]]",
                "unordered, restamped": json.dumps([rows[1], rows[0], *rows[2:]], separators=(",", ":")).encode(),
                "not integers, restamped": json.dumps([[r[0], r[1] + 0.5, r[2]] for r in rows], separators=(",", ":")).encode(),
            }[edit]
            table.write_bytes(bad)
            recorded.write_text(digest_bytes(bad))
        _calendar.nyse.cache_clear()
        again = _calendar.nyse()
        assert again.all == truth.all
        assert again.digest == truth.digest == _calendar.nyse(use_cache=False).digest
        assert digest_bytes(table.read_bytes()) == truth.digest  # rewritten
    finally:
        _calendar.nyse.cache_clear()


def test_a_restamped_calendar_is_caught_by_its_digest(tmp_path, monkeypatch):
    """An edit of the table and its recorded digest together is used at run time (the digest is no secret), but
    the calendar's digest (which receipts bind) then differs from the library's, which verify computes."""
    from evalkit_core import _calendar
    from evalkit_core._canonical import digest_bytes

    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path))
    _calendar.nyse.cache_clear()
    try:
        truth = _calendar.nyse()
        table, recorded = _calendar_cache(tmp_path)
        poisoned = _shift_one_open(table.read_bytes(), -3600)
        table.write_bytes(poisoned)
        recorded.write_text(digest_bytes(poisoned))
        _calendar.nyse.cache_clear()
        used = _calendar.nyse()
        assert used.all != truth.all
        assert used.digest != _calendar.nyse(use_cache=False).digest == truth.digest
    finally:
        _calendar.nyse.cache_clear()
