"""Writing a release: the one place arms, the answer key and the masks file are made (:func:`write_release`),
used by the synthetic generator and the EDGAR builder alike."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit_core._canonical import canonical_bytes, digest, file_digest
from evalkit_core._errors import ReleaseError
from evalkit_core._masks import MASKS_FILE, Masks, filings_digest, mask_secret, row_key_secret
from evalkit_core._release_format import (
    ANSWER_KEY_FILE,
    ARM_FILES,
    ARMS,
    LEGACY_RELEASE_FORMAT,
    MANIFEST_FILE,
    REDACTED_ISSUER,
    RELEASE_FORMAT,
    RELEASE_FORMATS,
    Filing,
    format_instant,
)
from evalkit_core._shift import ShiftMap

__all__ = ["arm_rows", "make_masks", "write_release"]

UTC = dt.UTC


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


def make_masks(
    filings: Sequence[Filing],
    *,
    start: dt.date,
    end: dt.date,
    key_seed: str = "",
    release_format: str = RELEASE_FORMAT,
) -> Masks:
    """The row-key key, the mask secret and the shift map for a release of ``filings`` over [start, end]: a pure
    function of the filings, the window and ``key_seed``. ``release_format`` ``evalkit-release/2`` makes the old
    public ten-year shift (no secret): kept to rebuild and test releases of that format."""
    if release_format not in RELEASE_FORMATS:
        raise ReleaseError(f"release format {release_format!r} is not one of {', '.join(RELEASE_FORMATS)}")
    ordered = sorted(filings, key=_sort_key)  # the key does not depend on the order filings are given in
    filings_sha = filings_digest([_filing_json(f) for f in ordered])
    secret = row_key_secret(filings_sha, key_seed)
    days: list[dt.date] = [start, end]
    for f in filings:
        days += (f.partition_date, f.published_at)
        days += (t.astimezone(UTC).date() for t in (f.acceptance_at, f.acceptance_real, f.disseminated_at) if t is not None)
    # A week either side covers every entry session (the first bell after the latest instant) and closed days.
    first, last = min(days) - dt.timedelta(days=7), max(days) + dt.timedelta(days=7)
    if release_format == LEGACY_RELEASE_FORMAT:
        return Masks(secret=secret, shift=ShiftMap.build(first, last, start.year))
    shift_secret = mask_secret(filings_sha, key_seed)
    return Masks(secret=secret, shift=ShiftMap.draw(first, last, start, shift_secret), shift_secret=shift_secret)


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
    release_format: str = RELEASE_FORMAT,
) -> Path:
    """Write a release directory atomically: built in a temp directory beside ``out`` and renamed at the end.

    Rows are sorted by (partition_date, acceptance_at, accession) so the same filings always give the same bytes.
    The row-key key and the mask secret are derived from the filings and ``key_seed`` (see
    :mod:`evalkit_core._masks`): the same filings and seed give the same release, byte for byte.
    ``release_format`` is the current format unless an old one is asked for (see :func:`make_masks`).
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
    masks = make_masks(rows, start=start, end=end, key_seed=key_seed, release_format=release_format)
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
            "format": release_format,
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
            "masks": _manifest_masks(masks),
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



def _manifest_masks(masks: Masks) -> dict[str, Any]:
    """What the manifest says about the masks: the rules, and for format 3 the mask secret's digest only."""
    out: dict[str, Any] = {
        "file": MASKS_FILE,
        "row_key": "keyed hash (HMAC-SHA256) of the accession number; the key is in the masks file only",
    }
    if masks.shift_secret is None:
        out["shift"] = {
            "years": masks.shift.years,
            "rule": "NYSE session to NYSE session, session_offset places on; instants keep their offset "
            "from their session's opening bell",
            "session_offset": masks.shift.session_offset,
        }
    else:
        out["shift"] = {
            "scheme": masks.shift.scheme,
            "rule": "NYSE session to NYSE session, a secret number of sessions on (drawn from the mask secret, "
            "kept in the masks file); instants keep their offset from their session's opening bell",
            "secret_sha256": masks.secret_sha256,
        }
    return out
