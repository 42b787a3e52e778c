"""The release (bundle) format: ``release.json``, three JSONL arms, ``answer_key.jsonl`` and
``answer_key.masks.json`` (the row-key key and the shifted calendar: see :mod:`evalkit_core._masks`).

Writing goes through :func:`write_release`, the one place arms and the answer key are made, used by the
synthetic generator and the EDGAR builder alike. Loading goes through :meth:`Release.load`, which checks every
digest the manifest binds and names the file that does not match.

Loading 300,000 rows from JSONL takes longer than a second, so the first load of a release also writes its
frames as Parquet into a cache keyed by the release's content digest. A later load reads the Parquet files when
every release file still has the size, modification time, inode-change time and inode it had when its digest was
verified (the rule ``git status`` uses; the change time cannot be set back by a user) and every Parquet file
still hashes to the sha256 recorded when it was written; otherwise it re-reads and re-verifies the JSONL and
rewrites the cache. ``evalkit bundle check`` and ``evalkit verify`` always recompute every digest from the bytes
and never read the cache.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import polars as pl

from evalkit_core._cache import cache_dir
from evalkit_core._canonical import canonical_bytes, digest, digest_bytes, file_digest
from evalkit_core._errors import ReleaseError
from evalkit_core._jsonfile import read_json_object
from evalkit_core._masks import (
    MASKS_FILE,
    SHIFT_YEARS,
    Masks,
    ShiftMap,
    filings_digest,
    row_key_for,
    row_key_secret,
)

__all__ = [
    "ANSWER_KEY_FILE",
    "ARMS",
    "ARM_FILES",
    "MANIFEST_FILE",
    "MASKS_FILE",
    "RELEASES_ENV",
    "RELEASE_FORMAT",
    "SHIFT_YEARS",
    "Filing",
    "Masks",
    "Release",
    "ShiftMap",
    "arm_rows",
    "cache_dir",
    "check_release",
    "format_instant",
    "parse_instant",
    "releases_dir",
    "resolve_release",
    "row_key_for",
    "row_key_secret",
    "write_release",
]

RELEASE_FORMAT = "evalkit-release/2"
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
_REQUIRED_ROW = ("row_key", "form", "title", "partition_date", "published_at")
_REQUIRED_ANSWER = ("row_key", "form", "issuer", "partition_date", "published_at")


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


def _opt_instant(t: dt.datetime | None, shift: ShiftMap | None = None) -> str | None:
    if t is None:
        return None
    return format_instant(shift.instant(t) if shift is not None else t)


def _filing_json(f: Filing) -> dict[str, Any]:
    """Everything a filing holds, canonically: what the row-key key is derived from."""
    return {
        "accession": f.accession,
        "cik": f.cik,
        "issuer": f.issuer,
        "form": f.form,
        "partition_date": f.partition_date.isoformat(),
        "published_at": f.published_at.isoformat(),
        "acceptance_at": _opt_instant(f.acceptance_at),
        "acceptance_real": _opt_instant(f.acceptance_real),
        "disseminated_at": _opt_instant(f.disseminated_at),
        "ticker": f.ticker,
        "url": f.url,
        "flags": list(f.flags),
    }


def arm_rows(f: Filing, masks: Masks) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The filing as (main row, redacted row, shifted row, answer-key row).

    Redacted removes issuer identity everywhere: issuer, cik, accession, url and the name inside the title.
    Shifted is the redacted row with every date and instant moved onto the NYSE calendar ten years on
    (``masks.shift``). The row key is the keyed hash of the accession number (``masks.row_key``).
    """
    key = masks.row_key(f.accession)
    shift = masks.shift
    main: dict[str, Any] = {
        "row_key": key,
        "form": f.form,
        "title": f.title,
        "issuer": f.issuer,
        "cik": f.cik,
        "partition_date": f.partition_date.isoformat(),
        "published_at": f.published_at.isoformat(),
        "acceptance_at": _opt_instant(f.acceptance_at),
        "accession": f.accession,
        "url": f.url,
    }
    redacted: dict[str, Any] = {
        "row_key": key,
        "form": f.form,
        "title": f"{REDACTED_ISSUER} {f.form}",
        "partition_date": f.partition_date.isoformat(),
        "published_at": f.published_at.isoformat(),
        "acceptance_at": _opt_instant(f.acceptance_at),
    }
    shifted: dict[str, Any] = {
        **redacted,
        "partition_date": shift.date(f.partition_date).isoformat(),
        "published_at": shift.date(f.published_at).isoformat(),
        "acceptance_at": _opt_instant(f.acceptance_at, shift),
    }
    if f.disseminated_at is not None:
        main["disseminated_at"] = _opt_instant(f.disseminated_at)
        redacted["disseminated_at"] = _opt_instant(f.disseminated_at)
        shifted["disseminated_at"] = _opt_instant(f.disseminated_at, shift)
    answer: dict[str, Any] = {
        "row_key": key,
        "form": f.form,
        "issuer": f.issuer,
        "cik": f.cik,
        "ticker": f.ticker,
        "accession": f.accession,
        "partition_date": f.partition_date.isoformat(),
        "published_at": f.published_at.isoformat(),
        "acceptance_at": _opt_instant(f.acceptance_real if f.acceptance_real is not None else f.acceptance_at),
        "disseminated_at": _opt_instant(f.disseminated_at),
        "flags": list(f.flags),
    }
    return main, redacted, shifted, answer


def make_masks(filings: Sequence[Filing], *, start: dt.date, end: dt.date, key_seed: str = "") -> Masks:
    """The row-key key and the shift map for a release of ``filings`` over [start, end] (deterministic)."""
    ordered = sorted(filings, key=_sort_key)  # the key does not depend on the order filings are given in
    secret = row_key_secret(filings_digest([_filing_json(f) for f in ordered]), key_seed)
    days: list[dt.date] = [start, end]
    for f in filings:
        days += (f.partition_date, f.published_at)
        days += (t.astimezone(UTC).date() for t in (f.acceptance_at, f.acceptance_real, f.disseminated_at) if t is not None)
    # A week either side covers every entry session (the first bell after the latest instant) and closed days.
    first, last = min(days) - dt.timedelta(days=7), max(days) + dt.timedelta(days=7)
    return Masks(secret=secret, shift=ShiftMap.build(first, last, start.year))


def _sort_key(f: Filing) -> tuple[str, str, str]:
    return (f.partition_date.isoformat(), format_instant(f.acceptance_at) if f.acceptance_at else "~", f.accession)


def write_release(
    out: str | Path,
    *,
    name: str,
    start: dt.date,
    end: dt.date,
    filings: Iterable[Filing],
    provenance: Mapping[str, Any],
    overwrite: bool = False,
    key_seed: str = "",
) -> Path:
    """Write a release directory atomically: built in a temp directory beside ``out`` and renamed at the end.

    Rows are sorted by (partition_date, acceptance_at, accession) so the same filings always give the same bytes.
    The row-key key is derived from the filings and ``key_seed`` (see :mod:`evalkit_core._masks`): the same
    filings and seed give the same release, byte for byte.
    """
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise ReleaseError(f"{target}: output exists and is a file; expected a directory (choose another --out)")
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise ReleaseError(f"{target}: output directory exists and is not empty (choose another --out)")
    rows = sorted(filings, key=_sort_key)
    seen: set[str] = set()
    for f in rows:
        if f.accession in seen:
            raise ReleaseError(f"duplicate accession {f.accession} in the filings given to the release writer")
        seen.add(f.accession)
    masks = make_masks(rows, start=start, end=end, key_seed=key_seed)
    keys = {masks.row_key(f.accession) for f in rows}
    if len(keys) != len(rows):  # 80 bits: a collision among real releases is not expected, but never silent
        raise ReleaseError("two filings got the same row_key; build with another key seed")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        (tmp / "arms").mkdir()
        handles = {arm: (tmp / ARM_FILES[arm]).open("wb") for arm in ARMS}
        answer_fh = (tmp / ANSWER_KEY_FILE).open("wb")
        by_form: dict[str, int] = {}
        with_acceptance = with_dissemination = 0
        try:
            for f in rows:
                main, redacted, shifted, answer = arm_rows(f, masks)
                handles["main"].write(canonical_bytes(main) + b"\n")
                handles["redacted"].write(canonical_bytes(redacted) + b"\n")
                handles["shifted"].write(canonical_bytes(shifted) + b"\n")
                answer_fh.write(canonical_bytes(answer) + b"\n")
                by_form[f.form] = by_form.get(f.form, 0) + 1
                with_acceptance += f.acceptance_at is not None
                with_dissemination += f.disseminated_at is not None
        finally:
            for h in handles.values():
                h.close()
            answer_fh.close()
        (tmp / MASKS_FILE).write_bytes(json.dumps(masks.to_json(), indent=1, sort_keys=True).encode() + b"\n")
        files = {rel: file_digest(tmp / rel) for rel in (*ARM_FILES.values(), ANSWER_KEY_FILE, MASKS_FILE)}
        manifest: dict[str, Any] = {
            "format": RELEASE_FORMAT,
            "name": name,
            "window": {"start": start.isoformat(), "end": end.isoformat()},
            "forms": sorted(by_form),
            "row_counts": {
                "rows": len(rows),
                "by_form": dict(sorted(by_form.items())),
                "with_acceptance_at": with_acceptance,
                "with_disseminated_at": with_dissemination,
                "files": {rel: len(rows) for rel in (*ARM_FILES.values(), ANSWER_KEY_FILE)},
            },
            "masks": {
                "file": MASKS_FILE,
                "row_key": "keyed hash (HMAC-SHA256) of the accession number; the key is in the masks file only",
                "shift": {
                    "years": masks.shift.years,
                    "rule": "NYSE session to NYSE session, session_offset places on; instants keep their offset "
                    "from their session's opening bell",
                    "session_offset": masks.shift.session_offset,
                },
            },
            "provenance": dict(provenance),
            "files": files,
        }
        manifest["content_digest"] = digest(manifest)
        (tmp / MANIFEST_FILE).write_bytes(json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n")
        if target.exists():
            shutil.rmtree(target)
        tmp.replace(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


# --- loading -----------------------------------------------------------------------------------------------


RELEASES_ENV = "EVALKIT_RELEASES"


def releases_dir() -> Path:
    """Where releases are found by name: ``$EVALKIT_RELEASES``, else ``releases/`` under ``$EVALKIT_HOME`` (itself
    ``.evalkit/`` in the working directory by default)."""
    from evalkit_core.store._store import evalkit_home

    configured = os.environ.get(RELEASES_ENV)
    return Path(configured) if configured else evalkit_home() / "releases"


def _named_releases(directory: Path) -> dict[str, Path]:
    """The releases directly under ``directory``: each by its directory name and by its manifest's name."""
    found: dict[str, Path] = {}
    if not directory.is_dir():
        return found
    for child in sorted(directory.iterdir()):
        manifest = child / MANIFEST_FILE
        if not manifest.is_file():
            continue
        found.setdefault(child.name, child)
        with contextlib.suppress(OSError, ValueError):
            name = json.loads(manifest.read_bytes()).get("name")
            if isinstance(name, str) and name:
                found.setdefault(name, child)
    return found


def resolve_release(name_or_path: str | Path) -> Path:
    """A release directory from a path, or from a release name looked up in :func:`releases_dir` (a directory of
    that name there, or a release whose manifest is named so). A path that exists always wins."""
    path = Path(name_or_path)
    if path.exists() or len(path.parts) != 1 or str(name_or_path).startswith("."):
        return path
    directory = releases_dir()
    named = _named_releases(directory)
    if str(name_or_path) in named:
        return named[str(name_or_path)]
    where = f"${RELEASES_ENV}" if os.environ.get(RELEASES_ENV) else f"$EVALKIT_HOME/releases (set ${RELEASES_ENV} to change it)"
    have = ", ".join(sorted(named)) if named else "none"
    raise ReleaseError(
        f"{name_or_path}: no release directory at this path, and no release of that name in {directory} ({where}); "
        f"releases there: {have}"
    )


def _read_manifest(root: Path) -> dict[str, Any]:
    if not root.is_dir():
        raise ReleaseError(f"{root}: release directory not found")
    path = root / MANIFEST_FILE
    manifest = read_json_object(
        path, ReleaseError, missing="missing (a release directory holds release.json, arms/*.jsonl, answer_key.jsonl)"
    )
    if manifest.get("format") != RELEASE_FORMAT:
        raise ReleaseError(
            f"{path}: field 'format' is {manifest.get('format')!r}, expected {RELEASE_FORMAT!r} (a release built before "
            "row keys were keyed and the shifted arm followed the NYSE calendar: rebuild it)"
        )
    for field, kind in (("name", str), ("window", dict), ("files", dict), ("content_digest", str), ("forms", list)):
        if not isinstance(manifest.get(field), kind):
            raise ReleaseError(f"{path}: field {field!r} missing or not a {kind.__name__}")
    for rel in (*ARM_FILES.values(), ANSWER_KEY_FILE, MASKS_FILE):
        if not isinstance(manifest["files"].get(rel), str):
            raise ReleaseError(f"{path}: field 'files' has no digest for {rel!r}")
    return manifest


def _manifest_digest(manifest: Mapping[str, Any]) -> str:
    return digest({k: v for k, v in manifest.items() if k != "content_digest"})


def check_release(path: str | Path) -> list[str]:
    """Recompute every digest a release binds from its bytes. Returns one message per mismatch (empty: all ok)."""
    root = Path(path)
    manifest = _read_manifest(root)
    problems: list[str] = []
    actual = _manifest_digest(manifest)
    if actual != manifest["content_digest"]:
        problems.append(f"{root / MANIFEST_FILE}: content_digest is {manifest['content_digest']}, recomputed {actual}")
    for rel, expected in sorted(manifest["files"].items()):
        p = root / rel
        if not p.is_file():
            problems.append(f"{p}: missing")
            continue
        got = file_digest(p)
        if got != expected:
            problems.append(f"{p}: sha256 is {got}, release.json expects {expected}")
    problems.extend(_check_masks(root, manifest) if not problems else [])
    companions = manifest.get("provenance", {}).get("companion_files", {})
    for rel, meta in sorted(companions.items()):
        p = root / rel
        if not p.is_file():
            problems.append(f"{p}: missing (companion file named in provenance)")
        elif (got := file_digest(p)) != meta.get("sha256"):
            problems.append(f"{p}: sha256 is {got}, release.json provenance expects {meta.get('sha256')}")
    return problems


def _load_masks(root: Path, manifest: Mapping[str, Any]) -> Masks:
    path = root / MASKS_FILE
    if not path.is_file():
        raise ReleaseError(f"{path}: missing")
    data = path.read_bytes()
    got = digest_bytes(data)
    if got != manifest["files"][MASKS_FILE]:
        raise ReleaseError(f"{path}: sha256 is {got}, release.json expects {manifest['files'][MASKS_FILE]}")
    try:
        parsed = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReleaseError(f"{path}: not valid JSON ({exc})") from None
    return Masks.from_json(parsed, str(path))


def _check_masks(root: Path, manifest: Mapping[str, Any]) -> list[str]:
    """The masks file parses, its shift table agrees with the NYSE calendar, and every row key in the answer
    key is the keyed hash of its accession number."""
    try:
        masks = _load_masks(root, manifest)
    except ReleaseError as exc:
        return [str(exc)]
    path = root / ANSWER_KEY_FILE
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                row = json.loads(raw)
                key, accession = row["row_key"], row["accession"]
            except (ValueError, KeyError, TypeError):
                return [f"{path}: line {lineno}: expected row_key and accession"]
            if not isinstance(accession, str) or masks.row_key(accession) != key:
                return [f"{path}: line {lineno}: field 'row_key' {key!r} is not the keyed hash of accession {accession!r}"]
    return []


def _locate_bad_line(path: Path, schema: Mapping[str, Any], required: Sequence[str]) -> str:
    """Find the first line of a JSONL file that is malformed or lacks a required field; describe it."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                return f"{path}: line {lineno}: not valid JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else exc})"
            if not isinstance(obj, dict):
                return f"{path}: line {lineno}: expected a JSON object"
            row = cast("dict[str, Any]", obj)
            for field in required:
                if row.get(field) in (None, ""):
                    return f"{path}: line {lineno}: field {field!r} is missing"
            for field, kind in schema.items():
                v = row.get(field)
                if v is None:
                    continue
                err = _field_error(v, kind)
                if err:
                    return f"{path}: line {lineno}: field {field!r} {err}"
    return f"{path}: could not be read as JSONL"


def _field_error(v: Any, kind: Any) -> str:
    if kind == _DATE:
        try:
            dt.date.fromisoformat(v)
        except (TypeError, ValueError):
            return f"expected a date YYYY-MM-DD, got {v!r}"
    elif kind == _INSTANT:
        if not (isinstance(v, str) and v.endswith("Z") and len(v) == 20):
            return f"expected a UTC instant YYYY-MM-DDTHH:MM:SSZ, got {v!r}"
        try:
            parse_instant(v)
        except ValueError:
            return f"expected a UTC instant YYYY-MM-DDTHH:MM:SSZ, got {v!r}"
    elif kind == pl.String and not isinstance(v, str):
        return f"expected a string, got {v!r}"
    elif isinstance(kind, pl.List) and not isinstance(v, list):
        return f"expected a list, got {v!r}"
    return ""


def _read_jsonl(path: Path, schema: Mapping[str, Any], required: Sequence[str]) -> pl.DataFrame:
    if not path.is_file():
        raise ReleaseError(f"{path}: missing")
    raw_schema = {k: (pl.List(pl.String) if isinstance(v, pl.List) else pl.String) for k, v in schema.items()}
    try:
        if path.stat().st_size == 0:
            frame = pl.DataFrame(schema=raw_schema)
        else:
            frame = pl.read_ndjson(path, schema=raw_schema)
        casts: list[pl.Expr] = []
        for k, v in schema.items():
            if v == _DATE:
                casts.append(pl.col(k).str.to_date("%Y-%m-%d", strict=True))
            elif v == _INSTANT:
                casts.append(pl.col(k).str.to_datetime("%Y-%m-%dT%H:%M:%SZ", time_unit="us", time_zone="UTC", strict=True))
        frame = frame.with_columns(casts)
    except (pl.exceptions.PolarsError, ValueError, OSError):
        raise ReleaseError(_locate_bad_line(path, schema, required)) from None
    if any(frame.get_column(field).null_count() for field in required):
        raise ReleaseError(_locate_bad_line(path, schema, required))
    return frame


def _stat_signature(path: Path) -> list[int]:
    # ctime cannot be set back by a user (os.utime updates it), so an edit that restores the mtime still shows.
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


@attrs.frozen
class Release:
    """A loaded release: its manifest, the three arms and the answer key as polars frames (filtered)."""

    root: Path
    manifest: Mapping[str, Any]
    arms: Mapping[str, pl.DataFrame]
    answer_key: pl.DataFrame
    masks: Masks = attrs.field(repr=False)

    @property
    def shift(self) -> ShiftMap:
        """How the shifted arm maps real sessions, dates and instants (harness side only)."""
        return self.masks.shift

    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    @property
    def content_digest(self) -> str:
        return str(self.manifest["content_digest"])

    @property
    def window(self) -> tuple[dt.date, dt.date]:
        w = self.manifest["window"]
        return dt.date.fromisoformat(w["start"]), dt.date.fromisoformat(w["end"])

    @property
    def forms(self) -> tuple[str, ...]:
        return tuple(self.manifest["forms"])

    def arm(self, name: str) -> pl.DataFrame:
        try:
            return self.arms[name]
        except KeyError:
            raise ReleaseError(f"unknown arm {name!r}; expected one of {', '.join(ARMS)}") from None

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        forms: Sequence[str] | None = None,
        start: dt.date | str | None = None,
        end: dt.date | str | None = None,
        use_cache: bool = True,
    ) -> Release:
        """Load a release, checking its digests, and keep the rows of ``forms`` with ``partition_date`` in
        [start, end] (main-arm dates; the control arms follow on ``row_key``). ``path`` is a release directory,
        or a release's name looked up in :func:`releases_dir` (``$EVALKIT_RELEASES``)."""
        root = resolve_release(path).resolve()
        manifest = _read_manifest(root)
        actual = _manifest_digest(manifest)
        if actual != manifest["content_digest"]:
            raise ReleaseError(
                f"{root / MANIFEST_FILE}: content_digest {manifest['content_digest']} does not match the manifest "
                f"(recomputed {actual}); the release was edited after it was built"
            )
        frames = _load_frames(root, manifest, use_cache=use_cache)
        release = cls(
            root=root,
            manifest=manifest,
            arms={a: frames[a] for a in ARMS},
            answer_key=frames["answer_key"],
            masks=_load_masks(root, manifest),
        )
        return release.select(forms=forms, start=start, end=end)

    def select(
        self,
        *,
        forms: Sequence[str] | None = None,
        start: dt.date | str | None = None,
        end: dt.date | str | None = None,
    ) -> Release:
        """The same release restricted to ``forms`` and a partition-date window."""
        if forms is None and start is None and end is None:
            return self
        main = self.arms["main"]
        cond = pl.lit(value=True)
        if forms:
            unknown = sorted(set(forms) - set(self.forms))
            if unknown:
                raise ReleaseError(
                    f"form(s) {', '.join(unknown)} not in release {self.root} (it has {', '.join(self.forms)})"
                )
            cond = cond & pl.col("form").is_in(list(forms))
        w0, w1 = self.window
        s = _to_date(start, "start") if start is not None else w0
        e = _to_date(end, "end") if end is not None else w1
        if s > e:
            raise ReleaseError(f"start {s} is after end {e}")
        if s < w0 or e > w1:
            raise ReleaseError(f"window {s}..{e} is outside release {self.root} (its window is {w0}..{w1})")
        cond = cond & pl.col("partition_date").is_between(s, e)
        keys = main.filter(cond).get_column("row_key")
        arms = {a: f.filter(pl.col("row_key").is_in(keys.implode())) for a, f in self.arms.items()}
        ak = self.answer_key.filter(pl.col("row_key").is_in(keys.implode()))
        return attrs.evolve(self, arms=arms, answer_key=ak)


def _to_date(v: dt.date | str, field: str) -> dt.date:
    if isinstance(v, dt.date):
        return v
    try:
        return dt.date.fromisoformat(v)
    except ValueError:
        raise ReleaseError(f"{field}: expected an ISO date YYYY-MM-DD, got {v!r}") from None


def _load_frames(root: Path, manifest: Mapping[str, Any], *, use_cache: bool) -> dict[str, pl.DataFrame]:
    rels: dict[str, str] = {**ARM_FILES, "answer_key": ANSWER_KEY_FILE}
    for rel in rels.values():
        if not (root / rel).is_file():
            raise ReleaseError(f"{root / rel}: missing")
    cdir = cache_dir() / "releases" / manifest["content_digest"].removeprefix("sha256:")
    signatures = {rel: _stat_signature(root / rel) for rel in rels.values()}
    if use_cache:
        cached = _read_cache(cdir, root, signatures, rels)
        if cached is not None:
            return cached
    for rel in rels.values():
        got = file_digest(root / rel)
        if got != manifest["files"][rel]:
            raise ReleaseError(f"{root / rel}: sha256 is {got}, release.json expects {manifest['files'][rel]}")
    frames: dict[str, pl.DataFrame] = {}
    for name, rel in rels.items():
        if name == "answer_key":
            frames[name] = _read_jsonl(root / rel, ANSWER_SCHEMA, _REQUIRED_ANSWER)
        else:
            frames[name] = _read_jsonl(root / rel, ROW_SCHEMA, _REQUIRED_ROW)
    _check_keys(root, frames, rels)
    if use_cache:
        with contextlib.suppress(OSError):
            _write_cache(cdir, frames, {"root": str(root), "signatures": signatures})
    return frames


def _read_cache(
    cdir: Path, root: Path, signatures: Mapping[str, list[int]], rels: Mapping[str, str]
) -> dict[str, pl.DataFrame] | None:
    """The cached frames, or None (rebuild) unless every check holds.

    The cache is content-addressed: its stamp records the sha256 of each Parquet file as written from frames
    built out of digest-checked JSONL. Each file is read once, hashed, and parsed from those same bytes, so an
    edited file (or one swapped in after the check) is never used; its schema must also be the one the loader
    builds. The stamp also records the release files' stat signatures, so an edited release is re-read.
    """
    try:
        stamp = json.loads((cdir / "stamp.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict):
        return None
    stamp = cast("dict[str, Any]", stamp)
    if stamp.get("root") != str(root) or stamp.get("signatures") != signatures:
        return None
    recorded = stamp.get("parquet")
    if not isinstance(recorded, dict):
        return None
    frames: dict[str, pl.DataFrame] = {}
    for name in rels:
        try:
            data = (cdir / f"{name}.parquet").read_bytes()
        except OSError:
            return None
        if digest_bytes(data) != cast("dict[str, Any]", recorded).get(name):
            return None
        try:
            frame = pl.read_parquet(io.BytesIO(data))
        except (pl.exceptions.PolarsError, OSError, ValueError):
            return None
        # A cache is derived data: one whose columns are not the ones this version writes (an older version's,
        # or edited and restamped) is not used; the release is re-read and the cache rewritten.
        if frame.schema != _frame_schema(name):
            return None
        frames[name] = frame
    return frames


def _frame_schema(name: str) -> pl.Schema:
    return pl.Schema(ANSWER_SCHEMA if name == "answer_key" else ROW_SCHEMA)


def _check_keys(root: Path, frames: Mapping[str, pl.DataFrame], rels: Mapping[str, str]) -> None:
    main_keys = frames["main"].get_column("row_key")
    if main_keys.n_unique() != main_keys.len():
        dup = main_keys.filter(main_keys.is_duplicated()).first()
        raise ReleaseError(f"{root / rels['main']}: row_key {dup!r} appears more than once")
    main_set = set(main_keys.to_list())
    for name, frame in frames.items():
        if name == "main":
            continue
        keys = frame.get_column("row_key")
        other = set(keys.to_list())
        if other != main_set or keys.len() != main_keys.len():
            missing = sorted(main_set - other)[:3]
            extra = sorted(other - main_set)[:3]
            raise ReleaseError(
                f"{root / rels[name]}: row_key set differs from {rels['main']} "
                f"(missing {missing or 'none'}, extra {extra or 'none'}, {keys.len()} rows vs {main_keys.len()})"
            )


def _write_cache(cdir: Path, frames: Mapping[str, pl.DataFrame], stamp: Mapping[str, Any]) -> None:
    cdir.mkdir(parents=True, exist_ok=True)
    digests: dict[str, str] = {}
    for name, frame in frames.items():
        buf = io.BytesIO()
        frame.write_parquet(buf)
        data = buf.getvalue()
        digests[name] = digest_bytes(data)
        tmp = cdir / f".{name}.parquet.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        tmp.replace(cdir / f"{name}.parquet")
    tmp_stamp = cdir / f".stamp.json.{os.getpid()}.tmp"
    tmp_stamp.write_text(json.dumps({**stamp, "parquet": digests}))
    tmp_stamp.replace(cdir / "stamp.json")
