"""Clock policies: when each row became knowable, and the session at which it may first be acted on.

| clock   | known_at                                                                    |
|---------|-----------------------------------------------------------------------------|
| leaky   | ``partition_date`` 00:00:00Z (the naive filed-date join; unreachable)        |
| dump    | ``published_at`` 23:59:59Z (waiting for the nightly dump)                    |
| pit     | the later of ``acceptance_at`` and ``disseminated_at``; without an          |
|         | ``acceptance_at`` the dump rule, counted as a fallback                       |

One entry rule for all three: a row's entry session is the first session whose opening bell is strictly after
``known_at``; the row is visible at session S iff its entry session <= S.

The same rules run on one row (:func:`known_at`, :func:`entry_session`) and on a whole polars frame at once
(:func:`with_entry`), which the tests hold equal.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from typing import Any

import attrs
import polars as pl

from evalkit_core._calendar import CALENDAR_SPAN, Calendar, Session, nyse
from evalkit_core._errors import ConfigError

__all__ = ["CLOCKS", "Clock", "KnownAt", "entry_session", "known_at", "parse_clock", "with_entry"]

UTC = dt.UTC
_END_OF_DAY = dt.time(23, 59, 59)


class Clock(enum.StrEnum):
    LEAKY = "leaky"
    DUMP = "dump"
    PIT = "pit"

    @property
    def reachable(self) -> bool:
        """False for ``leaky``: no trader could have known a filing at midnight of its filing date."""
        return self is not Clock.LEAKY


CLOCKS: tuple[Clock, ...] = (Clock.LEAKY, Clock.DUMP, Clock.PIT)


def parse_clock(value: str) -> Clock:
    try:
        return Clock(value)
    except ValueError:
        raise ConfigError(f"unknown clock {value!r}; expected one of leaky, dump, pit") from None


@attrs.frozen
class KnownAt:
    at: dt.datetime
    fallback: bool  # True when the pit clock had no acceptance stamp and used the dump rule


def _date(v: Any) -> dt.date:
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, dt.date):
        return v
    return dt.date.fromisoformat(str(v))


def _instant(v: Any) -> dt.datetime | None:
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    t = dt.datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    # A naive string is UTC, as a naive datetime is above; astimezone() would read it as the machine's local time.
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def known_at(row: Mapping[str, Any], clock: Clock | str) -> KnownAt:
    """When ``row`` became knowable under ``clock``. Values may be ISO strings or date/datetime objects."""
    c = Clock(clock)
    if c is Clock.LEAKY:
        return KnownAt(dt.datetime.combine(_date(row["partition_date"]), dt.time(0), tzinfo=UTC), fallback=False)
    dump = dt.datetime.combine(_date(row["published_at"]), _END_OF_DAY, tzinfo=UTC)
    if c is Clock.DUMP:
        return KnownAt(dump, fallback=False)
    accepted = _instant(row.get("acceptance_at"))
    if accepted is None:
        return KnownAt(dump, fallback=True)
    disseminated = _instant(row.get("disseminated_at"))
    return KnownAt(max(accepted, disseminated) if disseminated else accepted, fallback=False)


def entry_session(row: Mapping[str, Any], clock: Clock | str, calendar: Calendar | None = None) -> Session:
    """The first session whose opening bell is strictly after the row's ``known_at`` under ``clock``."""
    return (calendar or nyse()).next_session_after(known_at(row, clock).at)


def with_entry(frame: pl.DataFrame, clock: Clock | str, calendar: Calendar | None = None) -> pl.DataFrame:
    """Add ``known_at`` (UTC datetime), ``known_at_fallback`` (bool), ``entry_index`` (index into the calendar)
    and ``entry_date`` to a frame of rows, all at once.

    The frame needs ``partition_date`` and ``published_at`` (Date) and, for the pit clock, ``acceptance_at``
    and ``disseminated_at`` (UTC datetimes, nullable).
    """
    c = Clock(clock)
    cal = calendar or nyse()
    ts = pl.Datetime("us", "UTC")
    dump = (pl.col("published_at").cast(pl.Datetime("us")) + pl.duration(hours=23, minutes=59, seconds=59)).dt.replace_time_zone("UTC")
    if c is Clock.LEAKY:
        known = pl.col("partition_date").cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
        fallback = pl.lit(value=False)
    elif c is Clock.DUMP:
        known = dump
        fallback = pl.lit(value=False)
    else:
        accepted = pl.col("acceptance_at").cast(ts)
        disseminated = pl.col("disseminated_at").cast(ts)
        later = pl.when(disseminated.is_not_null() & (disseminated > accepted)).then(disseminated).otherwise(accepted)
        known = pl.when(accepted.is_null()).then(dump).otherwise(later)
        fallback = accepted.is_null()
    out = frame.with_columns(known.cast(ts).alias("known_at"), fallback.alias("known_at_fallback"))
    opens = pl.Series("opens", cal.opens_us(), dtype=pl.Int64)
    known_us = out.get_column("known_at").dt.epoch("us")
    span_start_us = (
        dt.datetime.combine(CALENDAR_SPAN[0], dt.time(0), tzinfo=UTC) - dt.datetime(1970, 1, 1, tzinfo=UTC)
    ) // dt.timedelta(microseconds=1)
    earliest = known_us.min()
    if earliest is not None and int(earliest) < span_start_us:  # pyright: ignore[reportArgumentType]
        # entry_session refuses these too; without this check they would silently enter at the first session.
        raise ConfigError(
            f"a row became knowable before the start of the calendar span {CALENDAR_SPAN[0].isoformat()}"
        )
    idx = opens.search_sorted(known_us, side="right")
    if idx.len() and int(idx.max()) >= len(cal):  # pyright: ignore[reportArgumentType]
        raise ConfigError("a row became knowable after the last session of the calendar span")
    dates = pl.Series("entry_date", [s.date for s in cal.all], dtype=pl.Date)
    return out.with_columns(idx.cast(pl.Int32).alias("entry_index"), dates.gather(idx).alias("entry_date"))
