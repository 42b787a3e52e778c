"""Daily prices the user supplies. None ship with evalkit (except the demo's synthetic ones) and none are fetched.

The loader is strict: a price file either holds one clean opening price per (ticker, date) or it is refused
with one line naming the file, the line and the field. Refused:

- a duplicate (ticker, date): which bar is right would depend on row order;
- an open that is zero, negative, below ``MIN_OPEN`` (1e-06) or above ``MAX_OPEN`` (1e+09), infinite or not a number ("12,5", "abc", and the vendors' ``n/a``, ``NA``,
  ``null`` or ``NaN``: a marker is not a number, and a bar it stands for would silently count as an unpriced
  trade);
- a date that is not ``YYYY-MM-DD`` (trailing text included), or a timestamp whose time is not midnight;
- an empty ticker;
- a file with no usable row.

Only the columns the loader reads are checked: ``ticker``, ``date`` and ``open``. A vendor's other columns (``high``,
``low``, ``close``, ...) are not read, so a marker there (real vendor files hold ``null`` highs) refuses nothing.

A vendor's null bar (every field of the row, open included, the literal ``null`` or empty) is a missing bar too;
``null`` in the open of a row that has numbers elsewhere is refused like any other text.

A bar whose open is empty (an empty CSV field, or null in Parquet: what vendors leave for halted or not-yet-listed
days) is no price for that day, the same as an absent row; such rows are counted in :attr:`Prices.missing_bars`.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
from collections.abc import Iterable
from pathlib import Path

import attrs
import polars as pl

from evalkit_core import EvalkitError, file_digest

__all__ = ["Prices", "PricesError", "load_prices"]

REQUIRED = ("ticker", "date", "open")
MISSING_MARKERS = ("",)  # only an empty field: any text must be a number
# A date, optionally followed by a midnight time (vendors that export timestamps write 00:00:00, maybe with an
# offset); anything else after the date is trailing text and refused.
_DATE_RE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[ T]00:00(?::00(?:\.0+)?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?$"
# A price outside these bounds is no quote but a unit or typing error, and its return overflows a float: an open of
# 5e-324 (a subnormal) against a close of 12.5 is a return of inf, which no receipt can hold.
MIN_OPEN, MAX_OPEN = 1e-6, 1e9
_NUMBER_RE = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"


class PricesError(EvalkitError):
    """A price file is missing, unreadable, lacks a needed column or holds a row that cannot be trusted."""


@attrs.frozen
class Prices:
    """Opening prices by (ticker, date), with where they came from."""

    path: Path
    source: str
    pulled_at: str | None
    sha256: str
    frame: pl.DataFrame = attrs.field(repr=False)  # ticker, date, open
    missing_bars: int = 0  # rows whose open was explicitly missing (no price that day)

    def opens_for(self, tickers: Iterable[str]) -> dict[tuple[str, dt.date], float]:
        """Opening prices of ``tickers`` keyed by (ticker, date)."""
        wanted = pl.Series(sorted(set(tickers)), dtype=pl.String)
        sub = self.frame.filter(pl.col("ticker").is_in(wanted.implode()))
        return {(t, d): o for t, d, o in sub.iter_rows()}

    def statement(self) -> dict[str, str | None]:
        return {"source": self.source, "pulled_at": self.pulled_at, "sha256": self.sha256}


def load_prices(path: str | Path, *, source: str, pulled_at: str | None = None) -> Prices:
    """Read daily bars (CSV, optionally gzipped, or Parquet) with at least ticker, date and open.

    Every refusal is a :class:`PricesError` naming the file, the line (CSV: the physical line, header = 1;
    Parquet: ``row N``, first row = 1) and the field.
    """
    p = Path(path)
    if not source:
        raise PricesError(f"{p}: a price source statement is required (source=...)")
    if not p.is_file():
        raise PricesError(f"{p}: price file not found")
    parquet = p.suffix == ".parquet"
    try:
        raw = pl.read_parquet(p) if parquet else pl.read_csv(p, infer_schema_length=0)
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise PricesError(f"{p}: cannot be read as CSV or Parquet ({exc.__class__.__name__})") from None
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise PricesError(
            f"{p}: missing column(s) {', '.join(missing)}; expected at least ticker, date, open"
        )
    twice = [c for c in REQUIRED if f"{c}_duplicated_0" in raw.columns]  # polars renames a repeated header so
    if twice:  # which of two opens is the price would depend on column order: refused like a repeated bar
        raise PricesError(
            f"{p}: {_loc(p, -1, parquet=parquet)}: column(s) {', '.join(map(repr, twice))} repeat; "
            "expected each of ticker, date, open once"
        )
    for name in REQUIRED:
        if not _textual(raw.schema[name]):
            raise PricesError(
                f"{p}: field {name!r} expected text, numbers or dates, got a {raw.schema[name]} column"
            )
    others = [c for c in raw.columns if c not in REQUIRED]
    try:
        text = raw.select(
            _as_text(raw, "ticker"), _as_text(raw, "date"), _as_text(raw, "open"), _null_row(raw, others)
        ).with_row_index("_row")
        frame, missing_bars = _validate(
            p, text.select("_row", "ticker", "date", "open", "_null_row"), parquet=parquet
        )
    except (
        pl.exceptions.PolarsError
    ) as exc:  # what no check above foresaw is still one line, never a traceback
        raise PricesError(f"{p}: cannot be read as prices ({exc.__class__.__name__})") from None
    return Prices(
        path=p,
        source=source,
        pulled_at=pulled_at,
        sha256=file_digest(p),
        frame=frame,
        missing_bars=missing_bars,
    )


def _textual(dtype: pl.DataType) -> bool:
    """Whether a column's values have a text form the checks can read (a list, a struct or a duration has none)."""
    kinds = (
        pl.Datetime,
        pl.Decimal,
        pl.Categorical,
        pl.Enum,
        pl.String,
        pl.Boolean,
        pl.Date,
        pl.Time,
        pl.Null,
    )
    return dtype.is_numeric() or isinstance(dtype, kinds)


def _null_row(raw: pl.DataFrame, others: list[str]) -> pl.Expr:
    """Whether a row is a vendor's null bar: its open and every other field written as the literal ``null`` (or
    left empty), as some exports write a day with no bar. Only then is an open of ``null`` a missing bar; an open of
    ``null`` (or any other text) beside numbers is refused."""
    fields = ["open", *others]
    blank = [
        pl.col(c).cast(pl.String).str.strip_chars().fill_null("").is_in(["", "null"])
        if _textual(raw.schema[c]) else pl.col(c).is_null()  # a vendor's list or struct column: null or not
        for c in fields
    ]  # fmt: skip
    return pl.all_horizontal(blank).alias("_null_row")


def _as_text(raw: pl.DataFrame, name: str) -> pl.Expr:
    dtype = raw.schema[name]
    col = pl.col(name)
    if dtype == pl.Date:
        return col.dt.strftime("%Y-%m-%d").alias(name)
    if isinstance(dtype, pl.Datetime):
        # A timestamp column: midnight is the date; any other time of day is refused like trailing text.
        return (
            pl.when(col.dt.time() == dt.time(0))
            .then(col.dt.strftime("%Y-%m-%d"))
            .otherwise(col.dt.strftime("%Y-%m-%dT%H:%M:%S"))
            .alias(name)
        )
    # Floats keep NaN and infinities visible as text ("NaN", "inf"), so the checks below see them.
    return col.cast(pl.String).alias(name)


def _validate(p: Path, text: pl.DataFrame, *, parquet: bool) -> tuple[pl.DataFrame, int]:
    ticker, date, opn = pl.col("ticker"), pl.col("date"), pl.col("open")
    missing_open = opn.is_null() | opn.str.strip_chars().is_in(list(MISSING_MARKERS)) | pl.col("_null_row")
    checks: list[tuple[str, pl.Expr, str]] = [
        ("ticker", ticker.is_null() | (ticker.str.strip_chars() == ""), "expected a non-empty ticker"),
        ("date", date.is_null() | ~date.str.contains(_DATE_RE), "expected a date YYYY-MM-DD"),
        ("open", ~missing_open & ~opn.str.strip_chars().str.contains(_NUMBER_RE), "expected a number"),
    ]
    for field, bad, expected in checks:
        first = text.filter(bad).head(1)
        if first.height:
            row = int(first.get_column("_row").item())
            value = first.get_column(field).item()
            raise PricesError(f"{_where(p, row, parquet=parquet)}: field {field!r} {expected}, got {value!r}")
    parsed = text.with_columns(
        date.str.slice(0, 10).str.to_date("%Y-%m-%d", strict=False).alias("day"),
        pl.when(missing_open).then(None).otherwise(opn.str.strip_chars()).cast(pl.Float64).alias("price"),
    )
    bad_day = parsed.filter(pl.col("day").is_null()).head(1)
    if bad_day.height:  # shaped like a date but not one (2023-02-30)
        row = int(bad_day.get_column("_row").item())
        raise PricesError(
            f"{_where(p, row, parquet=parquet)}: field 'date' expected a date YYYY-MM-DD, got {bad_day.get_column('date').item()!r}"
        )
    price = pl.col("price")
    for bad, expected in (
        (~((price > 0) & price.is_finite()), "a positive price"),
        (~((price >= MIN_OPEN) & (price <= MAX_OPEN)), f"a price from {MIN_OPEN:g} to {MAX_OPEN:g}"),
    ):
        bad_open = parsed.filter(price.is_not_null() & bad).head(1)
        if bad_open.height:
            row = int(bad_open.get_column("_row").item())
            got = bad_open.get_column("open").item()
            raise PricesError(
                f"{_where(p, row, parquet=parquet)}: field 'open' expected {expected}, got {got!r}"
            )
    keyed = parsed.with_columns(ticker.str.strip_chars())
    dup = keyed.filter(pl.struct("ticker", "day").is_duplicated()).sort("_row").head(1)
    if dup.height:
        t, d = dup.get_column("ticker").item(), dup.get_column("day").item()
        rows = keyed.filter((pl.col("ticker") == t) & (pl.col("day") == d)).get_column("_row").to_list()
        raise PricesError(
            f"{_where(p, int(rows[1]), parquet=parquet)}: fields 'ticker','date' repeat ({t}, {d.isoformat()}) of "
            f"{_loc(p, int(rows[0]), parquet=parquet)}; expected one bar per ticker and date"
        )
    usable = keyed.filter(pl.col("price").is_not_null())
    missing_bars = keyed.height - usable.height
    if usable.height == 0:
        detail = f"{keyed.height} row(s), all with a missing open" if keyed.height else "no data rows"
        raise PricesError(
            f"{p}: field 'open': no usable row ({detail}); expected at least one bar with a positive open"
        )
    frame = usable.select(pl.col("ticker"), pl.col("day").alias("date"), pl.col("price").alias("open"))
    return frame, missing_bars


def _where(p: Path, row: int, *, parquet: bool) -> str:
    return f"{p}: {_loc(p, row, parquet=parquet)}"


def _loc(p: Path, row: int, *, parquet: bool) -> str:
    """``line N`` for a CSV record (the physical line it starts on; the header is record -1), ``row N`` for
    Parquet."""
    if row < 0:
        return "header" if parquet else "line 1"
    return f"row {row + 1}" if parquet else f"line {_csv_line(p, row)}"


def _csv_line(p: Path, row: int) -> int:
    """The physical line on which data record ``row`` (0-based) starts: quoted fields may span lines."""
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rb") as fh:
            reader = csv.reader(io.TextIOWrapper(fh, encoding="utf-8", newline=""))
            next(reader, None)  # header
            start = reader.line_num + 1
            for k, _ in enumerate(reader):
                if k == row:
                    return start
                start = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error):
        pass
    return row + 2  # header on line 1, one record a line
