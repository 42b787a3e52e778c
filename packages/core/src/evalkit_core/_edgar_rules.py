"""EDGAR's timing rules, shared by the synthetic generator and the EDGAR release builder.

- **Filing date.** A submission accepted on an SEC business day at or before 17:30 New York time gets that
  day's filing date; one accepted after 17:30, or on a day that is not an SEC business day, gets the next
  SEC business day's date (Regulation S-T, Rule 13(a)(4)).
- **Dissemination.** A submission accepted after 17:30 New York time (or on a non-business day) is not
  disseminated until the next SEC business day opens, taken here as 06:00 New York time.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from evalkit_core._calendar import is_sec_business_day, next_sec_business_day

__all__ = ["DISSEMINATION_OPEN", "FILING_CUTOFF", "NEW_YORK", "disseminated_at_for", "filing_date_for"]

NEW_YORK = ZoneInfo("America/New_York")
FILING_CUTOFF = dt.time(17, 30)
DISSEMINATION_OPEN = dt.time(6, 0)


def _after_hours(accepted: dt.datetime) -> tuple[dt.date, bool]:
    local = accepted.astimezone(NEW_YORK)
    day = local.date()
    late = local.time() > FILING_CUTOFF or not is_sec_business_day(day)
    return day, late


def filing_date_for(accepted: dt.datetime) -> dt.date:
    """The filing date EDGAR assigns to a submission accepted at ``accepted`` (an aware datetime)."""
    day, late = _after_hours(accepted)
    return next_sec_business_day(day) if late else day


def disseminated_at_for(accepted: dt.datetime) -> dt.datetime | None:
    """When an after-hours submission becomes public (next SEC business day, 06:00 New York), else None."""
    day, late = _after_hours(accepted)
    if not late:
        return None
    public_day = next_sec_business_day(day)
    return dt.datetime.combine(public_day, DISSEMINATION_OPEN, tzinfo=NEW_YORK).astimezone(dt.UTC)
