"""Decoy filings for the masked arms, drawn from the release's mask secret (served by :mod:`evalkit.pit._serving`).

What this is for (issue 29, item 6): the agent is called once per real session and sees exactly the rows knowable
at each, so the per-day counts and form mixes of a masked arm are the real ones whatever dates are printed on
them; an attacker holding the real per-day record slides them along it and gets the shifted arm's dates back
(``count_alignment`` in :mod:`evalkit.pit._decoders`). Decoys pad every (filing date, form, time class) cell of
the run's window (:func:`time_class`: the part of the New York day the acceptance falls in) to one count per
(form, time class): the largest of ``floor``, its busiest day and twice its mean day. So the shown per-day counts
and mixes are flat, and under any alignment every record cell fits inside the shown one.

A decoy is a real filing of the same cell moved to another day: its form, its publication lag, its New York
times of day and its acceptance and dissemination as many SEC business days from its filing date as they were
(a Friday-evening acceptance of a Monday filing stays a Friday evening). Its row key is the release's keyed hash
of an accession number drawn from the secret (the same derivation and alphabet as every real key), and it is
written through the release writer's own :func:`evalkit_core.arm_rows`, so its masked rows are made exactly as a
real filing's are. The cell's real filings serve as templates in turn (in an order drawn from the secret), so
every real row is copied at least once and no (form, time of day) is left that only a real row shows; a template
is never taken from the decoy's own day, nor one whose instants would land on another kind of day (a session or
not). Which rows are decoys is :attr:`Decoyed.decoys`, computed harness-side from the secret.

:func:`jittered` draws each shown acceptance instant from the secret, within what every clock reads (same New
York date, time class and interval between bells): exact and nearest time-of-day lookups in the record then fail.

Same release, same secret, same ``floor``: the same decoys, byte for byte. A release without a mask secret
(format 2) has none to draw from, and :func:`with_decoys` refuses it.

A run whose config sets ``mask_decoys`` serves them in its shifted cells, with drawn times and a hidden window
(:mod:`evalkit.pit._serving`). What each piece does and cannot do alone is measured in
``tests/evalkit/pit/test_pit_masks_decoys.py`` and said in docs/pit-harness.md ("Decoys"): they hide the alignment
of whole days, never a row whose own shown fields are unique in the record (only drawn times hide those); they do
not hide the window (a known window gives the offset: only the hidden window does); and in the redacted arm, which
shows real dates, a record holder names every row whose (form, date) is unique, decoys or not (so that arm
is served with clones of each row's own signature instead: :mod:`evalkit.pit._decoys_redacted`).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import polars as pl

from evalkit_core import Filing, Release, arm_rows, is_sec_business_day, nyse

__all__ = ["DECOY_RULE", "Decoyed", "draw_bounds", "draw_in", "jittered", "time_class", "with_decoys"]

_TAG = b"evalkit-decoy/1\x00"
_NY = "America/New_York"
# Parts of a New York day (seconds): before EDGAR opens, to the opening bell, to 17:30 (later filings are dated the
# next business day), after.
_SEGMENTS = ((0, 6 * 3600), (6 * 3600, 9 * 3600 + 1800), (9 * 3600 + 1800, 17 * 3600 + 1800), (17 * 3600 + 1800, 24 * 3600))
DECOY_RULE = (
    "every (filing date, form, time class) cell of the window padded with decoys to one count per (form, time "
    "class): the largest of the floor, its busiest day and twice its mean day (so every real row is copied at "
    "least once); the cell's real filings are taken in turn, in the order of HMAC-SHA256(secret, "
    "'evalkit-decoy/1' NUL 'order' NUL form NUL class NUL row_key), skipping those filed on the decoy's day or whose instants would move onto another "
    "kind of day (session or not), and moved to it (New York times of day kept) under the accession 'decoy-' + hex of the first 12 bytes of HMAC-SHA256(secret, 'evalkit-decoy/1' "
    "NUL 'decoy' NUL date NUL form NUL class NUL k)"
)


@attrs.frozen
class Decoyed:
    """A release's masked arms with decoys (the main arm untouched) and what only the harness may hold: which
    rows are decoys and the main-arm rows their entries are computed from."""

    arms: Mapping[str, pl.DataFrame]
    real_side: pl.DataFrame
    decoys: frozenset[str]


def with_decoys(
    release: Release, *, floor: int = 0, extra_days: Sequence[dt.date] = (), arms: Sequence[str] = ("redacted", "shifted")
) -> Decoyed:
    """Decoys for ``release`` (narrowed to the run) drawn from its mask secret (see the module docstring);
    ``extra_days`` (real-side filing dates inside the release's shift table) hold decoys only: the padding of a
    hidden window. ``arms``: the masked arms to build with decoys (the runner serves the shifted one)."""
    secret = release.masks.shift_secret
    if secret is None:
        raise ValueError(f"release {release.name} ({release.format}) has no mask secret to draw decoys from")
    main = release.arm("main")
    templates: dict[tuple[str, int], list[dict[str, Any]]] = {}
    counts: dict[tuple[dt.date, tuple[str, int]], int] = {}
    for row in main.select(TEMPLATE_FIELDS).sort("row_key").iter_rows(named=True):
        cell = (row["form"], time_class(row["acceptance_at"]))
        templates.setdefault(cell, []).append(row)
        counts[row["partition_date"], cell] = counts.get((row["partition_date"], cell), 0) + 1
    days = sorted({d for d, _ in counts} | set(extra_days))
    calendar = nyse()

    def is_session(day: dt.date) -> bool:
        return calendar.session_on(day) is not None

    # each decoy's rows go straight into the columns of the frames built (never a list of every decoy's rows)
    place = {"redacted": 1, "shifted": 2}
    real_side = _Columns(main.schema)
    shown = {arm: _Columns(release.arm(arm).schema) for arm in arms}
    keys: list[str] = []
    for cell in sorted(templates):
        name = f"{cell[0]}\x00{cell[1]}"
        real = sorted(templates[cell], key=lambda t: _mac(secret, "order", name, t["row_key"]))
        # as many on every day as the cell's busiest day, and at least one copy of every real row of the cell
        most = max([floor, -(-2 * len(real) // len(days)), *(n for (_, c), n in counts.items() if c == cell)])
        turn = 0
        for day in days:
            for k in range(most - counts.get((day, cell), 0)):
                turn = _next_template(real, turn, day, is_session)
                rows = arm_rows(_decoy(secret, day, name, k, real[turn % len(real)]), release.masks)
                keys.append(rows[0]["row_key"])
                real_side.add(rows[0])
                for arm, columns in shown.items():
                    columns.add(rows[place[arm]])
                turn += 1
    taken = set(main.get_column("row_key").to_list())
    if len(set(keys)) != len(keys) or taken.intersection(keys):  # 80 bits: never expected, never silent
        raise ValueError("a decoy's row key collides with another row's")
    built = {arm: _joined(release.arm(arm), columns.frame()) for arm, columns in shown.items()}
    return Decoyed(arms=built, real_side=real_side.frame(), decoys=frozenset(keys))


def _mac(secret: bytes, *parts: str) -> bytes:
    """HMAC-SHA256(secret, 'evalkit-decoy/1' NUL parts joined by NUL)."""
    h = _keyed(secret).copy()
    h.update(_TAG + "\x00".join(parts).encode())
    return h.digest()


@functools.lru_cache(maxsize=8)
def _keyed(secret: bytes) -> hmac.HMAC:
    """The HMAC keyed with ``secret`` and fed nothing: copied for each message (keying it is half the cost)."""
    return hmac.new(secret, digestmod=hashlib.sha256)


def _next_template(
    real: Sequence[Mapping[str, Any]], turn: int, day: dt.date, is_session: Callable[[dt.date], bool]
) -> int:
    """The first turn from ``turn`` whose template was not filed on ``day`` and whose instants, moved there, fall on
    the same kind of New York day (a session or not: a real filing accepted on a session day is never shown
    accepted on a Sunday); ``turn`` itself if none is."""
    for step in range(len(real)):
        t = real[(turn + step) % len(real)]
        if t["partition_date"] == day:
            continue
        if all(
            is_session(_ny_day(m)) == is_session(_ny_day(v))
            for v in (t["acceptance_at"], t["disseminated_at"])
            if v is not None and (m := _moved(v, t["partition_date"], day)) is not None
        ):
            return turn + step
    return turn


def _ny_day(t: dt.datetime) -> dt.date:
    from zoneinfo import ZoneInfo

    return t.astimezone(ZoneInfo(_NY)).date()


def time_class(t: dt.datetime | None) -> int:
    """Which of EDGAR's and the exchange's parts of a New York day an instant falls in (:data:`_SEGMENTS`): -1 for
    none. Decoys pad each (form, class) cell; a jittered instant stays in its class."""
    if t is None:
        return -1
    from zoneinfo import ZoneInfo

    local = t.astimezone(ZoneInfo(_NY))
    tod = local.hour * 3600 + local.minute * 60 + local.second
    return next(i for i, (lo, hi) in enumerate(_SEGMENTS) if lo <= tod < hi)


def _decoy(secret: bytes, day: dt.date, cell: str, k: int, t: Mapping[str, Any]) -> Filing:
    h = _mac(secret, "decoy", day.isoformat(), cell, str(k))
    accepted = _moved(t["acceptance_at"], t["partition_date"], day)
    return Filing(
        accession="decoy-" + h[:12].hex(),
        cik=t["cik"] or "",
        issuer=t["issuer"] or "",
        form=t["form"],
        partition_date=day,
        published_at=day + (t["published_at"] - t["partition_date"]),
        acceptance_at=accepted,
        acceptance_real=accepted,
        disseminated_at=_moved(t["disseminated_at"], t["partition_date"], day),
        flags=("decoy",),
    )


@functools.lru_cache(maxsize=1 << 16)  # pure; a decoy's move is asked for twice, and days repeat
def _moved(t: dt.datetime | None, origin: dt.date, day: dt.date) -> dt.datetime | None:
    """``t``, an instant of a filing dated ``origin``, for the same filing dated ``day``: as many SEC business days
    before (or after) ``day`` as it was from ``origin``, at the same New York time of day (a Friday-evening
    acceptance of a Monday filing stays a Friday evening; any other day moves by the calendar)."""
    if t is None:
        return None
    from zoneinfo import ZoneInfo

    ny = ZoneInfo(_NY)
    local = t.astimezone(ny)
    at = local.date()
    if is_sec_business_day(at) and is_sec_business_day(origin):
        steps = _business_days_between(at, origin)
        target = day
        for _ in range(abs(steps)):
            target = _step(target, -1 if steps > 0 else 1)
    else:
        target = at + (day - origin)
    return dt.datetime.combine(target, local.time().replace(tzinfo=None)).replace(tzinfo=ny).astimezone(dt.UTC)


@functools.lru_cache(maxsize=1 << 12)  # pure; a decoy's move is asked for twice, and days repeat
def _business_days_between(a: dt.date, b: dt.date) -> int:
    """SEC business days from ``a`` to ``b`` (both business days): positive when ``a`` is earlier."""
    sign, lo, hi = (1, a, b) if a <= b else (-1, b, a)
    n, d = 0, lo
    while d < hi:
        d = _step(d, 1)
        n += 1
    return sign * n


@functools.lru_cache(maxsize=1 << 12)  # pure; a decoy's move is asked for twice, and days repeat
def _step(day: dt.date, direction: int) -> dt.date:
    d = day + dt.timedelta(days=direction)
    while not is_sec_business_day(d):
        d += dt.timedelta(days=direction)
    return d


# what a decoy or a clone is made from: a real row's fields but its title, accession and URL
TEMPLATE_FIELDS = ("row_key", "form", "cik", "issuer", "partition_date", "published_at", "acceptance_at", "disseminated_at")
_INSTANT = "%Y-%m-%dT%H:%M:%SZ"  # the release's one rendering of an instant (evalkit_core.format_instant)
_CHUNK = 1 << 15  # rows read into a frame at a time (:class:`_Columns`)


class _Columns:
    """Rows as the release writer renders them (ISO dates, ``...Z`` instants), kept as columns and read into
    ``schema`` over whole columns by polars (per-value Python parsing costs seconds at EDGAR's density), a chunk of
    :data:`_CHUNK` rows at a time: the Python objects held at once are one chunk's, whatever the count."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = dict(schema)
        self.values: dict[str, list[Any]] = {name: [] for name in schema}
        self.chunks: list[pl.DataFrame] = []
        self.rows = 0

    def add(self, row: Mapping[str, Any]) -> None:
        for name, values in self.values.items():
            values.append(row.get(name))
        self.rows += 1
        if self.rows == _CHUNK:
            self._flush()

    def _flush(self) -> None:
        series: list[pl.Series] = []
        for name, kind in self.schema.items():
            values = self.values[name]
            if kind == pl.Date:
                series.append(pl.Series(name, values, dtype=pl.String).str.to_date("%Y-%m-%d", strict=True))
            elif isinstance(kind, pl.Datetime):
                text = pl.Series(name, values, dtype=pl.String)
                series.append(text.str.to_datetime(_INSTANT, time_unit="us", time_zone="UTC", strict=True).cast(kind))
            else:
                series.append(pl.Series(name, values, dtype=kind))
            values.clear()
        self.chunks.append(pl.DataFrame(series))
        self.rows = 0

    def frame(self) -> pl.DataFrame:
        if self.rows or not self.chunks:
            self._flush()
        return pl.concat(self.chunks, how="vertical", rechunk=True)


def _joined(arm: pl.DataFrame, extra: pl.DataFrame) -> pl.DataFrame:
    both = pl.concat([arm, extra], how="vertical")
    return both.sort(["partition_date", "acceptance_at", "row_key"], nulls_last=True)


# --- times of day ------------------------------------------------------------------------------------------------


def draw_bounds(t: dt.datetime, opens: Sequence[dt.datetime]) -> tuple[dt.datetime, dt.datetime]:
    """The span a drawn time of ``t`` stays in: its New York date, its class of that date (:func:`time_class`) and
    its interval between two opening bells (``opens``: the calendar's bells in order). Public: an attacker computes
    it from a shown instant as well as from a real one."""
    import bisect
    from zoneinfo import ZoneInfo

    ny = ZoneInfo(_NY)
    local = t.astimezone(ny)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0).replace(tzinfo=None)
    tod = local.hour * 3600 + local.minute * 60 + local.second
    seg = next(s for s in _SEGMENTS if s[0] <= tod < s[1])
    seg_lo = (midnight + dt.timedelta(seconds=seg[0])).replace(tzinfo=ny).astimezone(dt.UTC)
    seg_hi = (midnight + dt.timedelta(seconds=seg[1])).replace(tzinfo=ny).astimezone(dt.UTC)
    i = bisect.bisect_right(opens, t)
    lo = max(seg_lo, opens[i - 1]) if i > 0 else seg_lo
    hi = min(seg_hi, opens[i]) if i < len(opens) else seg_hi
    return lo, hi


def draw_bounds_of(instants: pl.Series, opens: Sequence[dt.datetime]) -> list[tuple[dt.datetime, dt.datetime] | None]:
    """:func:`draw_bounds` of every instant of a column (None for a null), computed by polars over the whole
    column: the same values, as UTC datetimes (``datetime.UTC``, as the one-instant form gives them). The segments'
    bounds (00:00, 06:00, 09:30, 17:30 and 24:00 New York time) are never in a daylight-saving gap or fold, so
    localising them is unambiguous."""
    bells = pl.Series("bell", list(opens), dtype=pl.Datetime("us", "UTC"))
    t = instants.cast(pl.Datetime("us", "UTC")).rename("t")
    local = pl.col("t").dt.convert_time_zone(_NY)
    tod = local.dt.hour().cast(pl.Int64) * 3600 + local.dt.minute().cast(pl.Int64) * 60 + local.dt.second().cast(pl.Int64)
    seg_lo: pl.Expr = pl.lit(_SEGMENTS[-1][0])
    seg_hi: pl.Expr = pl.lit(_SEGMENTS[-1][1])
    for lo_s, hi_s in reversed(_SEGMENTS[:-1]):
        seg_lo = pl.when(tod < hi_s).then(pl.lit(lo_s)).otherwise(seg_lo)
        seg_hi = pl.when(tod < hi_s).then(pl.lit(hi_s)).otherwise(seg_hi)
    midnight = local.dt.date().cast(pl.Datetime("us"))

    def at(seconds: pl.Expr) -> pl.Expr:
        return (midnight + pl.duration(seconds=seconds)).dt.replace_time_zone(_NY).dt.convert_time_zone("UTC")

    n = len(bells)
    i = bells.search_sorted(t.fill_null(bells[0]), side="right").cast(pl.Int64)  # bisect_right, per instant
    frame = pl.DataFrame({"t": t, "i": i}).with_columns(
        prev=bells.gather((i - 1).clip(0, n - 1)), nxt=bells.gather(i.clip(0, n - 1))
    )
    frame = frame.select(
        lo=pl.when(pl.col("i") > 0).then(pl.max_horizontal(at(seg_lo), pl.col("prev"))).otherwise(at(seg_lo)),
        hi=pl.when(pl.col("i") < n).then(pl.min_horizontal(at(seg_hi), pl.col("nxt"))).otherwise(at(seg_hi)),
        null=pl.col("t").is_null(),
    )
    los = frame.get_column("lo").dt.replace_time_zone(None).to_list()
    his = frame.get_column("hi").dt.replace_time_zone(None).to_list()
    utc = dt.UTC
    return [
        None if null else (lo.replace(tzinfo=utc), hi.replace(tzinfo=utc))
        for lo, hi, null in zip(los, his, frame.get_column("null").to_list(), strict=True)
    ]


def draw_in(secret: bytes, tag: str, key: str, lo: dt.datetime, hi: dt.datetime) -> dt.datetime:
    """A second in ``[lo, hi)`` drawn from the secret: HMAC-SHA256(secret, 'evalkit-decoy/1' NUL tag NUL key)."""
    span = max(1, int((hi - lo).total_seconds()))
    return lo + dt.timedelta(seconds=int.from_bytes(_mac(secret, tag, key)[:8], "big") % span)


def jittered(
    arm: pl.DataFrame, secret: bytes, opens: Sequence[dt.datetime], *, tag: str = "tod", column: str = "acceptance_at"
) -> pl.DataFrame:
    """``arm`` with every ``column`` instant (default ``acceptance_at``) moved to a second drawn from the secret
    (HMAC-SHA256(secret, 'evalkit-decoy/1' NUL tag NUL row_key)), uniform over what keeps every fact a clock reads:
    the same New York date, the same class of it (:func:`time_class`: before EDGAR opens at 06:00, to the 09:30
    bell, to 17:30, after; the filing-date rule still reads right), and the same interval between two opening
    bells (``opens``: the calendar's bells in order), so the row enters at the same session under every clock
    (:func:`draw_bounds`)."""
    keys: list[str] = arm.get_column("row_key").to_list()
    spans = draw_bounds_of(arm.get_column(column), opens)
    out = [None if span is None else draw_in(secret, tag, key, *span) for key, span in zip(keys, spans, strict=True)]
    return arm.with_columns(pl.Series(column, out, dtype=arm.schema[column]))
