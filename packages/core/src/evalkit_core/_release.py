"""The release (bundle) format: ``release.json``, three JSONL arms, ``answer_key.jsonl`` and
``answer_key.masks.json`` (the row-key key, the mask secret and the shifted calendar: see
:mod:`evalkit_core._masks`).

Writing goes through :func:`write_release` (:mod:`evalkit_core._release_write`), the one place arms and the
answer key are made, used by the synthetic generator and the EDGAR builder alike. Loading goes through
:meth:`Release.load` (here), which checks every digest the manifest binds and names the file that does not match;
the frames are read by :mod:`evalkit_core._release_frames`. Names and values shared by all three are in
:mod:`evalkit_core._release_format`.

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
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import polars as pl

from evalkit_core._cache import cache_dir
from evalkit_core._canonical import digest, digest_bytes, file_digest
from evalkit_core._errors import ReleaseError
from evalkit_core._jsonfile import read_json_object
from evalkit_core._masks import (
    LEGACY_MASKS_FORMAT,
    MASKS_FILE,
    MASKS_FORMAT,
    SHIFT_YEARS,
    Masks,
    ShiftMap,
    row_key_for,
    row_key_secret,
)
from evalkit_core._release_format import (
    ANSWER_KEY_FILE,
    ARM_FILES,
    ARMS,
    LEGACY_RELEASE_FORMAT,
    MANIFEST_FILE,
    RELEASE_FORMAT,
    RELEASE_FORMATS,
    Filing,
    format_instant,
    parse_instant,
)
from evalkit_core._release_frames import load_frames
from evalkit_core._release_write import arm_rows, make_masks, write_release

__all__ = [
    "ANSWER_KEY_FILE",
    "ARMS",
    "ARM_FILES",
    "LEGACY_RELEASE_FORMAT",
    "MANIFEST_FILE",
    "MASKS_FILE",
    "RELEASES_ENV",
    "RELEASE_FORMAT",
    "RELEASE_FORMATS",
    "SHIFT_YEARS",
    "Filing",
    "Masks",
    "Release",
    "ShiftMap",
    "arm_rows",
    "cache_dir",
    "check_release",
    "format_instant",
    "make_masks",
    "parse_instant",
    "releases_dir",
    "resolve_release",
    "row_key_for",
    "row_key_secret",
    "write_release",
]

RELEASES_ENV = "EVALKIT_RELEASES"


def releases_dir() -> Path:
    """Where releases are found by name: ``$EVALKIT_RELEASES``, else ``releases/`` under ``$EVALKIT_HOME`` (itself
    ``.evalkit/`` in the working directory by default)."""
    from evalkit_core._home import evalkit_home

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
    if manifest.get("format") not in RELEASE_FORMATS:
        raise ReleaseError(
            f"{path}: field 'format' is {manifest.get('format')!r}, expected {RELEASE_FORMAT!r} or "
            f"{LEGACY_RELEASE_FORMAT!r} (a release built before row keys were keyed and the shifted arm followed the "
            "NYSE calendar: rebuild it)"
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
    masks = Masks.from_json(parsed, str(path))
    legacy = manifest["format"] == LEGACY_RELEASE_FORMAT
    if legacy != (masks.shift_secret is None):
        raise ReleaseError(
            f"{path}: field 'format' is {masks.format!r}, a release of format {manifest['format']!r} expects "
            f"{LEGACY_MASKS_FORMAT if legacy else MASKS_FORMAT!r}"
        )
    if not legacy:
        bound = _field(_field(manifest.get("masks"), "shift"), "secret_sha256")
        if bound != masks.secret_sha256:
            raise ReleaseError(
                f"{root / MANIFEST_FILE}: field 'masks.shift.secret_sha256' is {bound!r}, the masks file's secret "
                f"hashes to {masks.secret_sha256}"
            )
    return masks


def _field(obj: object, key: str) -> object:
    return cast("dict[str, object]", obj).get(key) if isinstance(obj, dict) else None


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
    def format(self) -> str:
        """The manifest's format: ``evalkit-release/3``, or ``evalkit-release/2`` (the public ten-year shift)."""
        return str(self.manifest["format"])

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
        frames = load_frames(root, manifest, use_cache=use_cache)
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
        if keys.len() == main.height:  # every row: the release itself (a filtered copy would double its memory)
            return self
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
