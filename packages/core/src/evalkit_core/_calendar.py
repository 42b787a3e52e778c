"""NYSE sessions (from pandas-market-calendars) and SEC business days.

A :class:`Session` is one trading day: its date, its opening bell and its close, both UTC. Holidays, early
closes and daylight-saving changes come from pandas-market-calendars (DST resolved through America/New_York).
The whole supported span is computed once per process (a few tens of milliseconds) and kept in memory.

SEC business days are weekdays that are not US federal holidays (observed dates); EDGAR assigns filing dates
on them. They differ from NYSE sessions: Veterans Day and Columbus Day are trading days but not SEC business
days, Good Friday is the reverse.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import functools
import itertools
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit_core._canonical import digest_bytes
from evalkit_core._errors import ConfigError

__all__ = [
    "CALENDAR_SPAN",
    "Calendar",
    "Session",
    "calendar_table_bytes",
    "is_sec_business_day",
    "next_sec_business_day",
    "next_session_after",
    "nyse",
    "sec_business_days",
    "sessions",
    "us_federal_holidays",
]

UTC = dt.UTC
CALENDAR_SPAN = (dt.date(1993, 1, 1), dt.date(2049, 12, 31))


@attrs.frozen(order=True)
class Session:
    """One NYSE trading session: ``open`` and ``close`` are timezone-aware UTC datetimes."""

    date: dt.date
    open: dt.datetime
    close: dt.datetime

    @property
    def early_close(self) -> bool:
        return (self.close - self.open) < dt.timedelta(hours=6, minutes=30)


class Calendar:
    """An ordered run of sessions with binary-search lookups. Immutable once built."""

    __slots__ = ("_dates", "_digest", "_opens", "_opens_us", "_sessions")

    def __init__(self, sessions: Sequence[Session], *, digest: str | None = None) -> None:
        """``digest``, when given, must be that of ``sessions``' table (a cache that was just checked against it)."""
        self._sessions: tuple[Session, ...] = tuple(sessions)
        self._opens: list[dt.datetime] = [s.open for s in self._sessions]
        self._dates: list[dt.date] = [s.date for s in self._sessions]
        self._opens_us: list[int] | None = None
        self._digest: str | None = digest

    @property
    def digest(self) -> str:
        """``sha256:`` of the session table (:func:`calendar_table_bytes`): what a receipt binds."""
        if self._digest is None:
            self._digest = digest_bytes(calendar_table_bytes(self))
        return self._digest

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def all(self) -> tuple[Session, ...]:
        return self._sessions

    def opens_us(self) -> list[int]:
        """Opening bells as integer microseconds since the epoch (UTC), in order: for vectorised search."""
        if self._opens_us is None:
            epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
            self._opens_us = [(o - epoch) // dt.timedelta(microseconds=1) for o in self._opens]
        return self._opens_us

    def between(self, start: dt.date | str, end: dt.date | str) -> list[Session]:
        """Sessions whose date lies in [start, end], in order."""
        s, e = _as_date(start, "start"), _as_date(end, "end")
        self._check_span(s)
        self._check_span(e)
        lo = bisect.bisect_left(self._dates, s)
        hi = bisect.bisect_right(self._dates, e)
        return list(self._sessions[lo:hi])

    def index_after(self, instant: dt.datetime) -> int:
        """Index of the first session whose opening bell is strictly after ``instant``."""
        inst = _as_utc(instant)
        self._check_span(inst.date())
        return bisect.bisect_right(self._opens, inst)

    def next_session_after(self, instant: dt.datetime) -> Session:
        """The first session whose opening bell is strictly after ``instant`` (an aware datetime)."""
        i = self.index_after(instant)
        if i >= len(self._sessions):
            raise ConfigError(f"no NYSE session after {instant.isoformat()} within the calendar span")
        return self._sessions[i]

    def session_on(self, day: dt.date) -> Session | None:
        i = bisect.bisect_left(self._dates, day)
        if i < len(self._dates) and self._dates[i] == day:
            return self._sessions[i]
        return None

    def index_of(self, day: dt.date) -> int:
        """Index of the session on ``day``; ConfigError when the exchange is closed that day."""
        i = bisect.bisect_left(self._dates, day)
        if i < len(self._dates) and self._dates[i] == day:
            return i
        raise ConfigError(f"{day.isoformat()} is not an NYSE session")

    def _check_span(self, day: dt.date) -> None:
        if not (CALENDAR_SPAN[0] <= day <= CALENDAR_SPAN[1]):
            raise ConfigError(
                f"date {day.isoformat()} is outside the supported calendar span "
                f"{CALENDAR_SPAN[0].isoformat()}..{CALENDAR_SPAN[1].isoformat()}"
            )


def _as_date(value: dt.date | str, field: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{field}: expected an ISO date YYYY-MM-DD, got {value!r}") from None


def _as_utc(instant: dt.datetime) -> dt.datetime:
    if instant.tzinfo is None:
        raise ConfigError(f"instant {instant.isoformat()} has no timezone; expected an aware UTC datetime")
    return instant.astimezone(UTC)


@functools.cache
def nyse(*, use_cache: bool = True) -> Calendar:
    """The NYSE calendar over :data:`CALENDAR_SPAN`, built once per process.

    Building it needs pandas and pandas-market-calendars (seconds to import); the result is kept in the cache
    directory, keyed by the pandas-market-calendars version and the span, so later processes read a small JSON
    file instead. The cache is content-addressed: beside the table sits the sha256 computed when it was built
    from the library, and the table is used only if its bytes still hash to it (read once, hashed, then parsed:
    no window between the check and the use). An edited table is rebuilt from the library, never trusted.
    ``use_cache=False`` computes from the library and neither reads nor writes the cache (``verify`` does this).
    """
    if not use_cache:
        return _nyse_from_library()
    from importlib.metadata import version

    from evalkit_core._cache import cache_dir

    key = f"nyse-pmc{version('pandas-market-calendars')}-{CALENDAR_SPAN[0]}-{CALENDAR_SPAN[1]}.json"
    path = cache_dir() / "calendar" / key
    cached = _read_cached_table(path, path.with_name(path.name + ".sha256"))
    if cached is not None:
        return cached
    calendar = _nyse_from_library()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        for target, data in (
            (path, calendar_table_bytes(calendar)),
            (path.with_name(path.name + ".sha256"), calendar.digest.encode() + b"\n"),
        ):
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
    return calendar


def calendar_table_bytes(calendar: Calendar) -> bytes:
    """The session table as canonical JSON: ``[[date ordinal, open, close], ...]`` (seconds since the epoch).

    A list of integer lists, so ``json.dumps`` without spaces is already its RFC 8785 form.
    """
    return json.dumps([_session_row(s) for s in calendar.all], separators=(",", ":")).encode("ascii")


def _read_cached_table(path: Path, digest_path: Path) -> Calendar | None:
    """The cached table if its bytes hash to the digest recorded when it was built, and it is well formed."""
    try:
        data = path.read_bytes()
        recorded = digest_path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if digest_bytes(data) != recorded:
        return None
    try:
        rows = cast("list[list[int]]", json.loads(data))
        sessions = [_session_from_row(r) for r in rows]
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    ok = bool(sessions) and all(
        a.date < b.date and a.open < b.open for a, b in itertools.pairwise(sessions)
    ) and all(s.open < s.close for s in sessions)
    if not ok:
        return None
    return Calendar(sessions, digest=recorded)  # the digest of the bytes the table was just parsed from


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def _session_row(s: Session) -> list[int]:
    return [s.date.toordinal(), int((s.open - _EPOCH).total_seconds()), int((s.close - _EPOCH).total_seconds())]


def _session_from_row(row: list[int]) -> Session:
    day, o, c = row
    if not all(type(v) is int for v in (day, o, c)):
        raise TypeError("calendar rows hold integers")
    return Session(dt.date.fromordinal(day), _EPOCH + dt.timedelta(seconds=o), _EPOCH + dt.timedelta(seconds=c))


@functools.cache
def _nyse_from_library() -> Calendar:
    """The table as pandas-market-calendars computes it (once per process: it is a pure function of the
    library, and an object in memory is not a cache a file edit can reach)."""
    import pandas_market_calendars as mcal

    with warnings.catch_warnings():
        # pandas-market-calendars 5.5 calls pandas APIs that pandas 3 deprecates (Series.dt.weekday); the
        # warning is theirs, not ours, and must not reach users or fail tests run with warnings as errors.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        sched = mcal.get_calendar("NYSE").schedule(
            start_date=CALENDAR_SPAN[0].isoformat(), end_date=CALENDAR_SPAN[1].isoformat()
        )
    opens = cast("list[Any]", sched["market_open"].tolist())
    closes = cast("list[Any]", sched["market_close"].tolist())
    days: list[Any] = sched.index.tolist()
    out: list[Session] = []
    for idx, o, c in zip(days, opens, closes, strict=True):
        out.append(Session(idx.date(), o.to_pydatetime().astimezone(UTC), c.to_pydatetime().astimezone(UTC)))
    return Calendar(out)


def sessions(start: dt.date | str, end: dt.date | str) -> list[Session]:
    """NYSE sessions with dates in [start, end]."""
    return nyse().between(start, end)


def next_session_after(instant: dt.datetime) -> Session:
    """The first NYSE session whose opening bell is strictly after ``instant``."""
    return nyse().next_session_after(instant)


# --- SEC business days -------------------------------------------------------------------------------------


@functools.cache
def _federal_holiday_table() -> frozenset[dt.date]:
    """The observed dates of 5 U.S.C. 6103 over the calendar span (and a year either side, for New Year's Day
    observed on the 31 December before), by the rules of pandas' ``USFederalHolidayCalendar`` (a test compares the
    two over the whole span): written out here because importing pandas costs a process half a second."""
    out: set[dt.date] = set()
    for year in range(CALENDAR_SPAN[0].year - 1, CALENDAR_SPAN[1].year + 2):
        fixed = [(1, 1), (7, 4), (11, 11), (12, 25)] + ([(6, 19)] if year >= 2021 else [])
        out.update(_nearest_workday(dt.date(year, m, d)) for m, d in fixed)
        out.update((
            _nth_weekday(year, 2, 0, 3),  # Washington's Birthday: third Monday of February
            _last_monday_of_may(year),  # Memorial Day
            _nth_weekday(year, 9, 0, 1),  # Labor Day: first Monday of September
            _nth_weekday(year, 10, 0, 2),  # Columbus Day: second Monday of October
            _nth_weekday(year, 11, 3, 4),  # Thanksgiving: fourth Thursday of November
        ))
        if year >= 1986:
            out.add(_nth_weekday(year, 1, 0, 3))  # Birthday of Martin Luther King, Jr.: third Monday of January
    return frozenset(out)


def _nearest_workday(day: dt.date) -> dt.date:
    """A fixed-date holiday's observed date: the Friday before a Saturday, the Monday after a Sunday."""
    shift = {5: -1, 6: 1}.get(day.weekday(), 0)
    return day + dt.timedelta(days=shift)


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> dt.date:
    first = dt.date(year, month, 1)
    return first + dt.timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


def _last_monday_of_may(year: int) -> dt.date:
    last = dt.date(year, 5, 31)
    return last - dt.timedelta(days=last.weekday())


@functools.cache
def us_federal_holidays(year: int) -> frozenset[dt.date]:
    """Observed US federal holidays in ``year`` (5 U.S.C. 6103; Juneteenth from 2021), by the rules of pandas'
    ``USFederalHolidayCalendar``.

    A fixed-date holiday on a Saturday is observed the Friday before (so 1 January on a Saturday is observed on
    31 December of the year before, and belongs to that year's set), on a Sunday the Monday after.
    """
    return frozenset(d for d in _federal_holiday_table() if d.year == year)


def is_sec_business_day(day: dt.date) -> bool:
    # The holiday rules are today's (MLK Day from 1986, Juneteenth from 2021, ...): outside the
    # calendar span they would answer wrongly, so refuse as the session functions do.
    if not (CALENDAR_SPAN[0] <= day <= CALENDAR_SPAN[1]):
        raise ConfigError(
            f"date {day.isoformat()} is outside the supported calendar span "
            f"{CALENDAR_SPAN[0].isoformat()}..{CALENDAR_SPAN[1].isoformat()}"
        )
    return day.weekday() < 5 and day not in us_federal_holidays(day.year)


def next_sec_business_day(day: dt.date) -> dt.date:
    """The first SEC business day strictly after ``day``."""
    d = day + dt.timedelta(days=1)
    while not is_sec_business_day(d):
        d += dt.timedelta(days=1)
    return d


def sec_business_days(start: dt.date | str, end: dt.date | str) -> list[dt.date]:
    s, e = _as_date(start, "start"), _as_date(end, "end")
    out: list[dt.date] = []
    d = s
    while d <= e:
        if is_sec_business_day(d):
            out.append(d)
        d += dt.timedelta(days=1)
    return out
