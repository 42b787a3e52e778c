"""Reading a release's JSONL files into polars frames, and the Parquet cache of those frames (see
:mod:`evalkit_core._release` for the rule that decides when the cache is used)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import polars as pl

from evalkit_core._cache import cache_dir
from evalkit_core._canonical import digest_bytes, file_digest
from evalkit_core._errors import ReleaseError
from evalkit_core._release_format import (
    ANSWER_KEY_FILE,
    ANSWER_SCHEMA,
    ARM_FILES,
    REQUIRED_ANSWER,
    REQUIRED_ROW,
    ROW_SCHEMA,
    parse_instant,
)

__all__ = ["load_frames"]

_DATE = pl.Date
_INSTANT = pl.Datetime("us", "UTC")


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


def load_frames(root: Path, manifest: Mapping[str, Any], *, use_cache: bool) -> dict[str, pl.DataFrame]:
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
            frames[name] = _read_jsonl(root / rel, ANSWER_SCHEMA, REQUIRED_ANSWER)
        else:
            frames[name] = _read_jsonl(root / rel, ROW_SCHEMA, REQUIRED_ROW)
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
