"""The shifted arm as served with decoys, drawn times of day and a hidden window (issue 29, item 6).

With ``RunConfig.mask_decoys`` the shifted arm's cells do not show the window's filings alone:

- **decoys** (:func:`evalkit.pit._decoys.with_decoys`): every (filing date, form, time class) cell padded to one
  count per (form, time class) with real filings of the cell moved to other days, under keyed row keys;
- **drawn times of day** (:func:`evalkit.pit._decoys.jittered`): every shown acceptance instant moved to a second
  drawn from the secret, within what every clock reads (so no row enters at another session);
- **a hidden window**: :data:`HIDDEN_DAYS` days of decoys only (days that are both NYSE sessions and SEC business
  days: a day EDGAR dates filings on that the exchange is closed, Good Friday, would fold onto a shown session and
  mark the hidden span), ``lead`` of them before the window
  and the rest after, ``lead`` drawn from the secret in ``1..HIDDEN_DAYS - 1`` (never 0 nor all: the first and
  the last shown session are never the window's). The shifted cells run every session from the first hidden day
  to the last: the agent is called at each.

Everything is a pure function of the release (narrowed to the run), its mask secret, the window and the calendar:
the runner and ``evalkit verify``'s replay build it with :func:`serve_mask`, byte for byte. Which rows are decoys
and ``lead`` stay here, harness side, with the answer key; the agent's jail holds neither (the secret never leaves
the harness; the rows it is served are the only trace).

The harness decides a pick of a decoy, or any pick made at a hidden session, as accepted (the agent learns nothing
from a refusal) and never trades it: the scorer counts it in the cell's ``decoy_picks`` (:mod:`evalkit.pit._score`).
Decoys have no answer-key row, so they never enter the probe.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import hmac
from collections.abc import Sequence

import attrs
import polars as pl

from evalkit.pit._decoys import DECOY_RULE, jittered, with_decoys
from evalkit.pit._decoys_redacted import CLONE_RULE, Cloned, with_clones
from evalkit_core import Calendar, Release, ReleaseError, Session, ShiftMap, is_sec_business_day

__all__ = ["HIDDEN_DAYS", "SERVING_RULE", "ServedMask", "serve_mask"]

HIDDEN_DAYS = 26
_LEAD_TAG = b"evalkit-decoy/1\x00lead"
SERVING_RULE = (
    f"{DECOY_RULE}; the shown acceptance instants drawn from the secret within their New York date, time class "
    "and interval between opening bells (HMAC-SHA256(secret, 'evalkit-decoy/1' NUL 'tod' NUL row_key)); "
    f"{HIDDEN_DAYS} days of decoys only (NYSE sessions that are SEC business days) around the window, 1 + (HMAC-SHA256(secret, "
    f"'evalkit-decoy/1' NUL 'lead') as a big-endian integer of its first 8 bytes modulo {HIDDEN_DAYS - 1}) of "
    "them before it and the rest after; the shifted cells run every session of that span"
)


@attrs.frozen
class ServedMask:
    """The shifted arm as its cells serve it, and what only the harness holds about it."""

    arm: pl.DataFrame  # the shifted rows shown: the window's with decoys, times of day drawn
    main: pl.DataFrame  # main-side rows the shifted cells' entries and order come from, decoys' included
    decoys: frozenset[str]
    shift: ShiftMap  # the release's shift, its table extended over the hidden days
    sessions: tuple[Session, ...]  # the shifted cells' sessions: the hidden days' and the window's, in order
    indices: tuple[int, ...]  # their calendar indices
    window: frozenset[int]  # the calendar indices of the window's own sessions
    lead: int  # hidden days before the window
    # the redacted arm as served with clones and drawn instants (receipt version 4), or None (version 3)
    redacted: Cloned | None = None

    def to_json(self) -> dict[str, object]:
        """What the receipt states (never which rows are decoys or clones, nor ``lead``)."""
        out: dict[str, object] = {
            "rule": SERVING_RULE,
            "hidden_days": HIDDEN_DAYS,
            "shifted_sessions": len(self.sessions),
            "rows_shown": self.arm.height,
            "decoys": len(self.decoys),
        }
        if self.redacted is not None:
            out["redacted"] = {
                "rule": CLONE_RULE,
                "rows_shown": self.redacted.arm.height,
                "clones": len(self.redacted.clones),
            }
        return out

    def serves(self, arm: str) -> bool:
        """Whether ``arm``'s cells serve rows of this mask (else the release's own)."""
        return arm == "shifted" or (arm == "redacted" and self.redacted is not None)

    def frames(self, arm: str) -> tuple[pl.DataFrame, pl.DataFrame]:
        """A served arm's shown rows and the main-side rows its entries and order come from."""
        if arm == "shifted":
            return self.arm, self.main
        if arm == "redacted" and self.redacted is not None:
            return self.redacted.arm, self.redacted.main
        raise ValueError(f"arm {arm!r} is not served by this mask")

    def apart(self, arm: str) -> frozenset[str]:
        """The rows of ``arm``'s cells a pick of is accepted and never traded: its decoys or clones."""
        if arm == "shifted":
            return self.decoys
        return self.redacted.clones if arm == "redacted" and self.redacted is not None else frozenset()


def lead_for(secret: bytes) -> int:
    """How many hidden days come before the window: 1..HIDDEN_DAYS-1, drawn from the secret."""
    draw = int.from_bytes(hmac.new(secret, _LEAD_TAG, hashlib.sha256).digest()[:8], "big")
    return 1 + draw % (HIDDEN_DAYS - 1)


def serve_mask(
    release: Release, window: tuple[dt.date, dt.date], calendar: Calendar, *, redacted: bool = False
) -> ServedMask:
    """The served shifted arm of ``release`` (narrowed to the run) over ``window`` (see the module docstring), and
    with ``redacted`` the redacted arm served with clones (:mod:`evalkit.pit._decoys_redacted`). ReleaseError for a
    release without a mask secret, or a window too near the calendar's ends to hide."""
    secret = release.masks.shift_secret
    if secret is None:
        raise ReleaseError(
            f"release {release.name} ({release.format}) has no mask secret: decoys are drawn from one (a release "
            "of the current format has it); set mask_decoys: false (evalkit run --no-mask-decoys) to run it with "
            "the masks as released"
        )
    lead = lead_for(secret)
    before = _hidden_days(window[0], lead, -1, calendar)
    after = _hidden_days(window[1], HIDDEN_DAYS - lead, 1, calendar)
    first, last = before[-1], after[-1]
    shift = _extended(release.shift, first - dt.timedelta(days=14), last + dt.timedelta(days=14), calendar)
    wide = attrs.evolve(release, masks=attrs.evolve(release.masks, shift=shift))
    decoyed = with_decoys(wide, extra_days=sorted(before + after), arms=("shifted",))
    arm = jittered(decoyed.arms["shifted"], secret, [s.open for s in calendar.all])
    main = pl.concat([release.arm("main"), decoyed.real_side], how="vertical")
    sessions = tuple(calendar.between(first, last))
    real = calendar.between(*window)
    return ServedMask(
        arm=arm,
        main=main,
        decoys=decoyed.decoys,
        shift=shift,
        sessions=sessions,
        indices=tuple(calendar.index_of(s.date) for s in sessions),
        window=frozenset(calendar.index_of(s.date) for s in real),
        lead=lead,
        redacted=with_clones(release, calendar) if redacted else None,
    )


def _hidden_days(start: dt.date, n: int, direction: int, calendar: Calendar) -> list[dt.date]:
    """The ``n`` days before (``direction`` -1) or after (1) ``start`` that are NYSE sessions and SEC business
    days, nearest first."""
    out: list[dt.date] = []
    d = start
    while len(out) < n:
        d += dt.timedelta(days=direction)
        if is_sec_business_day(d) and calendar.session_on(d) is not None:
            out.append(d)
    return out


def _extended(shift: ShiftMap, first: dt.date, last: dt.date, calendar: Calendar) -> ShiftMap:
    """``shift`` (the same offset) with its table covering every session from ``first`` to ``last`` too."""
    sessions = calendar.all
    dates: Sequence[dt.date] = [s.date for s in sessions]
    c = shift.session_offset
    lo = min(calendar.index_of(shift.pairs[0][0]), bisect.bisect_left(dates, first))
    hi = max(calendar.index_of(shift.pairs[-1][0]), min(bisect.bisect_right(dates, last), len(dates) - 1))
    if lo + c < 0 or hi + c >= len(sessions):
        raise ReleaseError(f"the hidden window {first}..{last} cannot be shifted within the calendar span")
    pairs = tuple((sessions[i].date, sessions[i + c].date) for i in range(lo, hi + 1))
    return ShiftMap(
        years=shift.years, session_offset=c, anchor=shift.anchor, pairs=pairs, scheme=shift.scheme
    ).bind(calendar)
