"""The shifted arm's calendar: a table of real NYSE sessions and the sessions they are shown as.

Two schemes, one table format (``answer_key.masks.json``, field ``shift``):

- ``public-ten-years`` (releases of format 2, masks format 1): the k-th session of the window's first year maps
  to the k-th session ten years on. The rule is public and so is the calendar, so anyone can invert it; such a
  release is still read, and the harness's decoders report that its mask does not hold.
- ``secret-offset`` (format 3, masks format 2): every session maps to the session ``session_offset`` places on,
  where the offset is drawn from the release's mask secret (:meth:`ShiftMap.draw`) among every offset that keeps
  the shifted table inside the calendar span, lies at least the table's length plus a year (252 sessions) away
  from the real sessions, shares no calendar year with them, and lies more than :data:`PUBLIC_MARGIN` sessions
  away from every offset a public rule
  gives (k-th session of the year, the same calendar date, whole 52-week spans, each for every year offset the
  span allows). The offset, and with it the year offset, is known only to who holds the secret.

In both schemes sessions stay sessions (a shifted session date is a real NYSE session of the shifted stretch),
consecutive sessions stay consecutive, and every row enters at the image of its real entry session.

Instants keep their offset from their session's opening bell: an instant on a session day (New York date) at
or after the bell maps to the image session's bell plus the same offset; an instant before the bell on a
session day maps to the image bell minus the same offset. Both keep the New York time of day. An instant on a
day the exchange is closed maps into the closed days between the two image sessions: at the same offset from
their start when the shifted gap is as long, squeezed proportionally when it is shorter, and onto the start
of the next image session's day when there is no closed day between them. A date maps as the noon of that day.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import hmac
from collections.abc import Sequence
from typing import Any, cast

import attrs

from evalkit_core._calendar import CALENDAR_SPAN, Calendar, Session, nyse
from evalkit_core._errors import ReleaseError

__all__ = [
    "PUBLIC_MARGIN",
    "PUBLIC_SCHEME",
    "SCHEMES",
    "SECRET_SCHEME",
    "SHIFT_YEARS",
    "ShiftMap",
    "admissible_offsets",
    "public_offsets",
]

SHIFT_YEARS = 10
PUBLIC_SCHEME = "public-ten-years"
SECRET_SCHEME = "secret-offset"  # noqa: S105
SCHEMES = (PUBLIC_SCHEME, SECRET_SCHEME)
PUBLIC_MARGIN = 30  # sessions (six weeks): how far a secret offset stays from every public rule's offset
_YEAR_SESSIONS = 252
_OFFSET_TAG = b"evalkit-shift-offset/1\x00"
UTC = dt.UTC
SHIFT_RULE = (
    "each real NYSE session maps to the session session_offset places later in the NYSE calendar (the k-th "
    "session of the window's first year -> the k-th session ten years on); instants keep their offset from "
    "their session's opening bell (New York time of day); instants on closed days map into the closed days "
    "between the two image sessions; a date maps as its noon"
)
DRAWN_SHIFT_RULE = (
    "each real NYSE session maps to the session session_offset places on in the NYSE calendar, the offset drawn "
    "from the release's mask secret (HMAC-SHA256(secret, 'evalkit-shift-offset/1' NUL) as a big-endian integer, "
    "modulo the number of admissible offsets, indexes them in increasing order); instants keep their offset "
    "from their session's opening bell; instants on closed days map into the closed days between the two image "
    "sessions; a date maps as its noon"
)


def _bisect_date(sessions: Sequence[Session], day: dt.date) -> int:
    lo, hi = 0, len(sessions)
    while lo < hi:
        mid = (lo + hi) // 2
        if sessions[mid].date < day:
            lo = mid + 1
        else:
            hi = mid
    return lo


def admissible_offsets(lo: int, hi: int, real0: dt.date, calendar: Calendar | None = None) -> list[int]:
    """The offsets a secret shift of the session table ``lo..hi`` (calendar indices) may take, in increasing
    order: inside the calendar, at least the table's length plus a year away from the real sessions, in no year
    the real sessions are in, and more than :data:`PUBLIC_MARGIN` sessions from every offset in
    :func:`public_offsets` of ``real0``."""
    cal = calendar or nyse()
    sessions = cal.all
    n = len(sessions)
    blocked = {p + d for p in public_offsets(real0, cal) for d in range(-PUBLIC_MARGIN, PUBLIC_MARGIN + 1)}
    margin = (hi - lo + 1) + _YEAR_SESSIONS
    first_year, last_year = sessions[lo].date.year, sessions[hi].date.year

    def apart(c: int) -> bool:  # no shifted date falls in a year any real date of the table falls in
        return sessions[lo + c].date.year > last_year or sessions[hi + c].date.year < first_year

    return [c for c in range(-lo, n - hi) if abs(c) >= margin and c not in blocked and apart(c)]


def public_offsets(real0: dt.date, calendar: Calendar | None = None) -> list[int]:
    """Every session offset a public rule gives for the session on ``real0``: the k-th session of its year to
    the k-th session (and the first to the first) of another year, the same calendar date another year, and
    whole spans of 52 weeks, for every year offset the calendar span allows. What a decoder without the secret
    would try first; :meth:`ShiftMap.draw` keeps its offset away from all of them."""
    cal = calendar or nyse()
    sessions = cal.all
    i0 = cal.index_of(real0)
    year = cal.between(dt.date(real0.year, 1, 1), dt.date(real0.year, 12, 31))
    k = next(n for n, s in enumerate(year) if s.date == real0)
    out: set[int] = set()
    lo_year, hi_year = CALENDAR_SPAN[0].year, CALENDAR_SPAN[1].year
    for y in range(lo_year - real0.year, hi_year - real0.year + 1):
        if y == 0:
            continue
        other = cal.between(dt.date(real0.year + y, 1, 1), dt.date(real0.year + y, 12, 31))
        if other:
            out.add(cal.index_of(other[0].date) - cal.index_of(year[0].date))
            out.add(cal.index_of(other[min(k, len(other) - 1)].date) - i0)
        day = real0.replace(year=real0.year + y, day=min(real0.day, 28) if real0.month == 2 else real0.day)
        j = _bisect_date(sessions, day)
        if j < len(sessions):
            out.add(j - i0)
    for w in range(-60, 61):
        day = real0 + dt.timedelta(weeks=52 * w)
        if w and CALENDAR_SPAN[0] <= day <= CALENDAR_SPAN[1]:
            j = _bisect_date(sessions, day)
            if j < len(sessions):
                out.add(j - i0)
    return sorted(out)


def _ny_midnight(day: dt.date) -> dt.datetime:
    from evalkit_core._edgar_rules import NEW_YORK

    return dt.datetime.combine(day, dt.time(0), tzinfo=NEW_YORK).astimezone(UTC)


def _ny_noon(day: dt.date) -> dt.datetime:
    from evalkit_core._edgar_rules import NEW_YORK

    return dt.datetime.combine(day, dt.time(12), tzinfo=NEW_YORK).astimezone(UTC)


def _ny_date(t: dt.datetime) -> dt.date:
    from evalkit_core._edgar_rules import NEW_YORK

    return t.astimezone(NEW_YORK).date()


@attrs.frozen
class ShiftMap:
    """Real NYSE sessions -> sessions ``years`` on, as a table (``pairs``, in order) covering a release.

    Lookups raise :class:`ReleaseError` outside the table. The opening bells come from the calendar given to
    :meth:`bind` (the NYSE calendar by default); a table whose shifted dates are not sessions of that calendar
    is refused when it is loaded.
    """

    years: int
    session_offset: int
    anchor: tuple[dt.date, dt.date]
    pairs: tuple[tuple[dt.date, dt.date], ...]
    scheme: str = PUBLIC_SCHEME
    _real_dates: list[dt.date] = attrs.field(init=False, eq=False, repr=False, factory=list)
    _real_opens: list[dt.datetime] = attrs.field(init=False, eq=False, repr=False, factory=list)
    _shifted_opens: list[dt.datetime] = attrs.field(init=False, eq=False, repr=False, factory=list)
    _by_real: dict[dt.date, int] = attrs.field(init=False, eq=False, repr=False, factory=dict)

    @classmethod
    def build(
        cls,
        first: dt.date,
        last: dt.date,
        anchor_year: int,
        *,
        years: int = SHIFT_YEARS,
        calendar: Calendar | None = None,
    ) -> ShiftMap:
        """The map for every session from the last one on or before ``first`` to the first one on or after
        ``last``, anchored so the first session of ``anchor_year`` maps to the first session ``years`` on."""
        cal = calendar or nyse()
        if anchor_year + years > CALENDAR_SPAN[1].year or first < CALENDAR_SPAN[0]:
            raise ReleaseError(
                f"dates {first}..{last} cannot be shifted {years} years within the calendar span "
                f"{CALENDAR_SPAN[0]}..{CALENDAR_SPAN[1]}"
            )
        real0 = cal.between(dt.date(anchor_year, 1, 1), dt.date(anchor_year, 12, 31))[0]
        shifted0 = cal.between(dt.date(anchor_year + years, 1, 1), dt.date(anchor_year + years, 12, 31))[0]
        offset = cal.index_of(shifted0.date) - cal.index_of(real0.date)
        sessions = cal.all
        lo = max(0, bisect.bisect_right([s.date for s in sessions], first) - 1)
        hi = bisect.bisect_left([s.date for s in sessions], last)
        if hi + offset >= len(sessions):
            raise ReleaseError(f"dates up to {last} cannot be shifted {years} years within the calendar span")
        pairs = tuple((sessions[i].date, sessions[i + offset].date) for i in range(lo, hi + 1))
        return cls(years=years, session_offset=offset, anchor=(real0.date, shifted0.date), pairs=pairs).bind(
            cal
        )

    @classmethod
    def draw(
        cls,
        first: dt.date,
        last: dt.date,
        window_start: dt.date,
        secret: bytes,
        *,
        calendar: Calendar | None = None,
    ) -> ShiftMap:
        """The secret-offset map for every session from the last one on or before ``first`` to the first one on
        or after ``last``; the offset is drawn from ``secret`` (see the module docstring). Same arguments, same
        map: the draw is a pure function of the secret and the table's span."""
        if len(secret) < 16:
            raise ValueError("a mask secret must be at least 16 bytes")
        cal = calendar or nyse()
        sessions = cal.all
        if first < CALENDAR_SPAN[0] or last > CALENDAR_SPAN[1]:
            raise ReleaseError(f"dates {first}..{last} are outside the calendar span {CALENDAR_SPAN[0]}..{CALENDAR_SPAN[1]}")
        lo = max(0, _bisect_date(sessions, first + dt.timedelta(days=1)) - 1)
        hi = min(_bisect_date(sessions, last), len(sessions) - 1)
        i0 = min(max(_bisect_date(sessions, window_start), lo), hi)
        candidates = admissible_offsets(lo, hi, sessions[i0].date, cal)
        if not candidates:
            raise ReleaseError(
                f"dates {first}..{last} span too much of the calendar for a secret shift "
                f"({CALENDAR_SPAN[0]}..{CALENDAR_SPAN[1]} leaves no admissible offset)"
            )
        pick = int.from_bytes(hmac.new(secret, _OFFSET_TAG, hashlib.sha256).digest(), "big") % len(candidates)
        c = candidates[pick]
        pairs = tuple((sessions[i].date, sessions[i + c].date) for i in range(lo, hi + 1))
        anchor = (sessions[i0].date, sessions[i0 + c].date)
        years = round((anchor[1] - anchor[0]).days / 365.2425)
        return cls(years=years, session_offset=c, anchor=anchor, pairs=pairs, scheme=SECRET_SCHEME).bind(cal)

    def bind(self, calendar: Calendar | None = None) -> ShiftMap:
        """Look up the opening bells of both sides in ``calendar``; refuse a table it contradicts."""
        cal = calendar or nyse()
        real_opens: list[dt.datetime] = []
        shifted_opens: list[dt.datetime] = []
        prev: tuple[dt.date, dt.date] | None = None
        for real, shifted in self.pairs:
            r, s = cal.session_on(real), cal.session_on(shifted)
            if r is None or s is None:
                bad = real if r is None else shifted
                raise ReleaseError(f"shift table: {bad.isoformat()} is not an NYSE session")
            if prev is not None and (real <= prev[0] or cal.index_of(real) != cal.index_of(prev[0]) + 1):
                raise ReleaseError(
                    f"shift table: {real.isoformat()} does not follow {prev[0].isoformat()} session by session"
                )
            if cal.index_of(shifted) - cal.index_of(real) != self.session_offset:
                raise ReleaseError(
                    f"shift table: {real.isoformat()} -> {shifted.isoformat()} is not {self.session_offset} sessions on"
                )
            real_opens.append(r.open)
            shifted_opens.append(s.open)
            prev = (real, shifted)
        object.__setattr__(self, "_real_dates", [p[0] for p in self.pairs])
        object.__setattr__(self, "_real_opens", real_opens)
        object.__setattr__(self, "_shifted_opens", shifted_opens)
        object.__setattr__(self, "_by_real", {p[0]: i for i, p in enumerate(self.pairs)})
        return self

    # -- lookups ----------------------------------------------------------------------------------------------

    def session_date(self, real: dt.date) -> dt.date:
        """The image of the real session on ``real`` (a date that is not a session maps as :meth:`date`)."""
        i = self._by_real.get(real)
        return self.pairs[i][1] if i is not None else self.date(real)

    def date(self, real: dt.date) -> dt.date:
        """The shifted date shown for a real date: a session's image, else where its noon maps."""
        i = self._by_real.get(real)
        if i is not None:
            return self.pairs[i][1]
        return _ny_date(self.instant(_ny_noon(real)))

    def instant(self, real: dt.datetime) -> dt.datetime:
        """The shifted instant (UTC, whole seconds kept) for a real one."""
        t = real.astimezone(UTC)
        i = bisect.bisect_right(self._real_opens, t) - 1
        last = len(self._real_opens) - 1
        end_of_day = _ny_midnight(self.pairs[i][0] + dt.timedelta(days=1)) if i >= 0 else t
        if i < 0 or (i == last and t >= end_of_day):
            raise ReleaseError(
                f"instant {t.isoformat()} is outside the shift table "
                f"({self.pairs[0][0].isoformat()}..{self.pairs[-1][0].isoformat()})"
            )
        o0, s0 = self._real_opens[i], self._shifted_opens[i]
        s_end_of_day = _ny_midnight(self.pairs[i][1] + dt.timedelta(days=1))
        if t < end_of_day:  # on the session's own day, at or after its bell
            return min(s0 + (t - o0), s_end_of_day - dt.timedelta(seconds=1))
        o1, s1 = self._real_opens[i + 1], self._shifted_opens[i + 1]
        start_of_next = _ny_midnight(self.pairs[i + 1][0])
        s_start_of_next = _ny_midnight(self.pairs[i + 1][1])
        if t >= start_of_next:  # on the next session's day, before its bell
            return max(s1 - (o1 - t), s_start_of_next)
        # On a closed day between the two sessions.
        gap, s_gap = start_of_next - end_of_day, s_start_of_next - s_end_of_day
        into = t - end_of_day
        if s_gap >= gap:
            return s_end_of_day + into
        if s_gap <= dt.timedelta(0):
            return s_start_of_next
        scaled = dt.timedelta(seconds=int(into.total_seconds() * (s_gap / gap)))
        return s_end_of_day + scaled

    # -- JSON -------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "rule": SHIFT_RULE if self.scheme == PUBLIC_SCHEME else DRAWN_SHIFT_RULE,
            "years": self.years,
            "session_offset": self.session_offset,
            "anchor": {"real": self.anchor[0].isoformat(), "shifted": self.anchor[1].isoformat()},
            "sessions": [[r.isoformat(), s.isoformat()] for r, s in self.pairs],
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> ShiftMap:
        if not isinstance(data, dict):
            raise ReleaseError(f"{where}: field 'shift' expected an object")
        d = cast("dict[str, Any]", data)
        try:
            pairs = tuple(
                (dt.date.fromisoformat(r), dt.date.fromisoformat(s))
                for r, s in cast("list[list[str]]", d["sessions"])
            )
            anchor = (
                dt.date.fromisoformat(d["anchor"]["real"]),
                dt.date.fromisoformat(d["anchor"]["shifted"]),
            )
            years, offset = d["years"], d["session_offset"]
            scheme = d.get("scheme", PUBLIC_SCHEME)
        except (KeyError, TypeError, ValueError) as exc:
            raise ReleaseError(
                f"{where}: field 'shift' is malformed ({exc.__class__.__name__}: {exc})"
            ) from None
        if scheme not in SCHEMES:
            raise ReleaseError(f"{where}: field 'shift.scheme' expected one of {', '.join(SCHEMES)}, got {scheme!r}")
        if not isinstance(years, int) or not isinstance(offset, int) or len(pairs) < 2:
            raise ReleaseError(
                f"{where}: field 'shift' expected integer years and session_offset and a session table"
            )
        try:
            return cls(years=years, session_offset=offset, anchor=anchor, pairs=pairs, scheme=scheme).bind()
        except ReleaseError as exc:
            raise ReleaseError(f"{where}: field 'shift': {exc}") from None


