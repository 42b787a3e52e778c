"""Daily prices the user supplies. None ship with evalkit (except the demo's synthetic ones) and none are fetched."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

import attrs
import polars as pl

from evalkit_core import EvalkitError, file_digest

__all__ = ["Prices", "PricesError", "load_prices"]

REQUIRED = ("ticker", "date", "open")


class PricesError(EvalkitError):
    """A price file is missing, unreadable or lacks a needed column."""


@attrs.frozen
class Prices:
    """Opening prices by (ticker, date), with where they came from."""

    path: Path
    source: str
    pulled_at: str | None
    sha256: str
    frame: pl.DataFrame = attrs.field(repr=False)  # ticker, date, open

    def opens_for(self, tickers: Iterable[str]) -> dict[tuple[str, dt.date], float]:
        """Opening prices of ``tickers`` keyed by (ticker, date)."""
        wanted = pl.Series(sorted(set(tickers)), dtype=pl.String)
        sub = self.frame.filter(pl.col("ticker").is_in(wanted.implode()))
        return {(t, d): o for t, d, o in sub.iter_rows()}

    def statement(self) -> dict[str, str | None]:
        return {"source": self.source, "pulled_at": self.pulled_at, "sha256": self.sha256}


def load_prices(path: str | Path, *, source: str, pulled_at: str | None = None) -> Prices:
    """Read daily bars (CSV, optionally gzipped, or Parquet) with at least ticker, date and open.

    Rows with a null or non-positive open are dropped (a few vendors emit them for halted days).
    """
    p = Path(path)
    if not source:
        raise PricesError(f"{p}: a price source statement is required (source=...)")
    if not p.is_file():
        raise PricesError(f"{p}: price file not found")
    try:
        if p.suffix == ".parquet":
            frame = pl.read_parquet(p)
        else:
            frame = pl.read_csv(p, infer_schema_length=0)  # everything as text; cast below with clear errors
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise PricesError(f"{p}: cannot be read as CSV or Parquet ({exc.__class__.__name__})") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise PricesError(f"{p}: missing column(s) {', '.join(missing)}; expected at least ticker, date, open")
    try:
        frame = frame.select(
            pl.col("ticker").cast(pl.String),
            pl.col("date").cast(pl.String).str.slice(0, 10).str.to_date("%Y-%m-%d"),
            pl.col("open").cast(pl.Float64, strict=False),
        ).filter(pl.col("open").is_not_null() & (pl.col("open") > 0) & pl.col("ticker").is_not_null())
    except pl.exceptions.PolarsError:
        raise PricesError(f"{p}: column 'date' expected dates YYYY-MM-DD") from None
    return Prices(path=p, source=source, pulled_at=pulled_at, sha256=file_digest(p), frame=frame)
