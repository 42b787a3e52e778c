"""What the control arms' masks are made of: the row-key key and the shifted arm's session map.

Both live in ``answer_key.masks.json``, beside the answer key and like it never shown to an agent.

**Row keys.** ``row_key = "r" + the first 20 hex digits of HMAC-SHA256(key, "evalkit-row-key/2\\0" + accession)``.
The key is 32 bytes, ``SHA-256("evalkit-row-key-secret/1\\0" + key seed + "\\0" + digest of the filings)``: the
same filings and the same seed give the same key, so a release stays byte-identical for the same inputs. Knowing
every accession number does not give the keys without the key; whoever holds the builder's inputs and seed can
rebuild the release (key included), as for any deterministic build, so a release meant to resist agents whose
authors hold the same public inputs is built with a private ``key seed``.

**The shifted calendar.** Each real NYSE session maps onto a real NYSE session of the calendar ten years on:
the k-th session of the release window's first year maps to the k-th session of that year plus ten, and every
other session keeps its distance in sessions from there (``session_offset``, one constant for the release).
Consecutive sessions stay consecutive, so every row enters the shifted calendar at the image of its real entry
session; no shifted session falls on a weekend or an exchange holiday. (Years differ by up to four sessions,
so per-year k-th matching cannot be one-to-one: 2024 has 252 sessions and 2034 has 250. Over a multi-year
release the image drifts from "the same session number ten years on" by those sessions: at most 9 over any ten
years of the supported calendar.)

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
from collections.abc import Mapping, Sequence
from typing import Any, cast

import attrs

from evalkit_core._calendar import CALENDAR_SPAN, Calendar, nyse
from evalkit_core._canonical import canonical_bytes
from evalkit_core._errors import ReleaseError

__all__ = [
    "MASKS_FILE",
    "MASKS_FORMAT",
    "SHIFT_YEARS",
    "Masks",
    "ShiftMap",
    "filings_digest",
    "row_key_for",
    "row_key_secret",
]

MASKS_FILE = "answer_key.masks.json"
MASKS_FORMAT = "evalkit-masks/1"
SHIFT_YEARS = 10
UTC = dt.UTC
_ROW_KEY_TAG = b"evalkit-row-key/2\x00"
_SECRET_TAG = b"evalkit-row-key-secret/1\x00"
ROW_KEY_RULE = (
    "'r' + first 20 hex digits of HMAC-SHA256(key, 'evalkit-row-key/2' NUL accession number (UTF-8))"
)
KEY_RULE = "SHA-256('evalkit-row-key-secret/1' NUL key seed NUL digest of the filings written)"
SHIFT_RULE = (
    "each real NYSE session maps to the session session_offset places later in the NYSE calendar (the k-th "
    "session of the window's first year -> the k-th session ten years on); instants keep their offset from "
    "their session's opening bell (New York time of day); instants on closed days map into the closed days "
    "between the two image sessions; a date maps as its noon"
)


# --- row keys ------------------------------------------------------------------------------------------------


def row_key_secret(filings_sha256: str, key_seed: str = "") -> bytes:
    """The release's row-key key (32 bytes) from the digest of its filings and the builder's key seed."""
    return hashlib.sha256(
        _SECRET_TAG + key_seed.encode("utf-8") + b"\x00" + filings_sha256.encode("ascii")
    ).digest()


def row_key_for(accession: str, secret: bytes) -> str:
    """An opaque, stable key for a filing: a keyed hash that reveals no accession number, CIK or date."""
    if len(secret) < 16:
        raise ValueError("a row-key key must be at least 16 bytes")
    return "r" + hmac.new(secret, _ROW_KEY_TAG + accession.encode("utf-8"), hashlib.sha256).hexdigest()[:20]


def filings_digest(rows: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 (hex) over the canonical bytes of ``rows`` in order: the filings a release is written from."""
    h = hashlib.sha256()
    for row in rows:
        h.update(canonical_bytes(row))
        h.update(b"\n")
    return h.hexdigest()


# --- the shifted calendar ------------------------------------------------------------------------------------


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
            "rule": SHIFT_RULE,
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
        except (KeyError, TypeError, ValueError) as exc:
            raise ReleaseError(
                f"{where}: field 'shift' is malformed ({exc.__class__.__name__}: {exc})"
            ) from None
        if not isinstance(years, int) or not isinstance(offset, int) or len(pairs) < 2:
            raise ReleaseError(
                f"{where}: field 'shift' expected integer years and session_offset and a session table"
            )
        try:
            return cls(years=years, session_offset=offset, anchor=anchor, pairs=pairs).bind()
        except ReleaseError as exc:
            raise ReleaseError(f"{where}: field 'shift': {exc}") from None


@attrs.frozen
class Masks:
    """The row-key key and the shift map of one release (harness side only)."""

    secret: bytes = attrs.field(repr=False)
    shift: ShiftMap

    def row_key(self, accession: str) -> str:
        return row_key_for(accession, self.secret)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MASKS_FORMAT,
            "row_key": {
                "scheme": "hmac-sha256",
                "rule": ROW_KEY_RULE,
                "key_rule": KEY_RULE,
                "key": self.secret.hex(),
            },
            "shift": self.shift.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Masks:
        if not isinstance(data, dict) or cast("dict[str, Any]", data).get("format") != MASKS_FORMAT:
            raise ReleaseError(f"{where}: expected a JSON object with format {MASKS_FORMAT!r}")
        d = cast("dict[str, Any]", data)
        key = d.get("row_key", {}).get("key") if isinstance(d.get("row_key"), dict) else None
        try:
            secret = bytes.fromhex(key) if isinstance(key, str) else b""
        except ValueError:
            secret = b""
        if len(secret) != 32:
            raise ReleaseError(f"{where}: field 'row_key.key' expected 64 hex digits")
        return cls(secret=secret, shift=ShiftMap.from_json(d.get("shift"), where))
