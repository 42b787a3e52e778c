"""The release format's names and values: file names, format versions, the row and answer-key schemas, the
rendering of instants and :class:`Filing` (what the writer takes). Shared by the writer
(:mod:`evalkit_core._release_write`), the frame reader (:mod:`evalkit_core._release_frames`) and the loader
(:mod:`evalkit_core._release`).

Format versions: ``evalkit-release/3`` (current) binds the mask secret's sha256 in the manifest and draws the
shifted arm's offset from it; ``evalkit-release/2`` (the public ten-year shift) still loads and verifies, and the
harness's decoders report that its shifted arm does not hold.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import polars as pl

__all__ = [
    "ANSWER_KEY_FILE",
    "ANSWER_SCHEMA",
    "ARMS",
    "ARM_FILES",
    "LEGACY_RELEASE_FORMAT",
    "MANIFEST_FILE",
    "REDACTED_ISSUER",
    "RELEASE_FORMAT",
    "RELEASE_FORMATS",
    "REQUIRED_ANSWER",
    "REQUIRED_ROW",
    "ROW_SCHEMA",
    "Filing",
    "format_instant",
    "parse_instant",
]

LEGACY_RELEASE_FORMAT = "evalkit-release/2"
RELEASE_FORMAT = "evalkit-release/3"
RELEASE_FORMATS = (LEGACY_RELEASE_FORMAT, RELEASE_FORMAT)
ARMS: tuple[str, ...] = ("main", "redacted", "shifted")
ARM_FILES: dict[str, str] = {arm: f"arms/{arm}.jsonl" for arm in ARMS}
ANSWER_KEY_FILE = "answer_key.jsonl"
MANIFEST_FILE = "release.json"
REDACTED_ISSUER = "[ISSUER]"
UTC = dt.UTC

_DATE = pl.Date
_INSTANT = pl.Datetime("us", "UTC")
ROW_SCHEMA: dict[str, Any] = {
    "row_key": pl.String,
    "form": pl.String,
    "title": pl.String,
    "issuer": pl.String,
    "cik": pl.String,
    "partition_date": _DATE,
    "published_at": _DATE,
    "acceptance_at": _INSTANT,
    "disseminated_at": _INSTANT,
    "accession": pl.String,
    "url": pl.String,
}
ANSWER_SCHEMA: dict[str, Any] = {
    "row_key": pl.String,
    "form": pl.String,
    "issuer": pl.String,
    "cik": pl.String,
    "ticker": pl.String,
    "accession": pl.String,
    "partition_date": _DATE,
    "published_at": _DATE,
    "acceptance_at": _INSTANT,
    "disseminated_at": _INSTANT,
    "flags": pl.List(pl.String),
}
REQUIRED_ROW = ("row_key", "form", "title", "partition_date", "published_at")
REQUIRED_ANSWER = ("row_key", "form", "issuer", "partition_date", "published_at")


# --- values ------------------------------------------------------------------------------------------------


def format_instant(t: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds): the one rendering of an instant in a release."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_instant(s: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    # A naive string is UTC; astimezone() would read it as the machine's local time.
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


@attrs.frozen
class Filing:
    """Everything known about one filing, before it is split into arms and the answer key.

    ``acceptance_at`` is what the arms serve (None when the builder flagged the stamp); ``acceptance_real``
    is the stamp as the source gave it and goes to the answer key only.
    """

    accession: str
    cik: str
    issuer: str
    form: str
    partition_date: dt.date
    published_at: dt.date
    acceptance_at: dt.datetime | None = None
    acceptance_real: dt.datetime | None = None
    disseminated_at: dt.datetime | None = None
    ticker: str | None = None
    url: str | None = None
    flags: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return f"{self.issuer} {self.form}"


