"""EDGAR index files: daily ``form|master|company.YYYYMMDD.idx`` and quarterly full-index ``form|master|company.idx``.

Each file opens with a free-text preamble (Description, Last Data Received, ...), then a header line naming the
columns, then a line of dashes, then one line per (filing, filer) pair. ``master`` files are pipe-delimited;
``form`` and ``company`` files are fixed-width, and their column positions are read from the header line
(where each column title starts), never hard-coded. Files may be plain or gzip (detected from the bytes, not
the name). Daily files write dates as ``YYYYMMDD``, full-index files as ``YYYY-MM-DD``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import attrs

from evalkit_core._canonical import digest_bytes
from evalkit_core._errors import ReleaseError
from evalkit_core.edgar._inputs import InputFile

__all__ = ["INDEX_NAME", "IndexEntry", "IndexFile", "find_index_files", "parse_index", "read_index_file"]

# form.20230203.idx, form.20230203.idx.gz (daily); form.idx, form.gz (full-index). .Z and .zip copies are ignored.
INDEX_NAME = re.compile(r"^(form|master|company)(?:\.(\d{8}))?(\.idx|\.idx\.gz|\.gz)$")
_ACCESSION = re.compile(r"^\d{10}-\d{2}-\d{6}$")
_COLUMNS = {
    "CIK": "cik",
    "Company Name": "company",
    "Form Type": "form",
    "Date Filed": "date",
    "File Name": "file",
    "Filename": "file",
}
_REQUIRED = ("cik", "company", "form", "date", "file")
_HEADER_HINT = "a header line naming the columns (CIK, Company Name, Form Type, Date Filed, File Name)"


@attrs.frozen
class IndexEntry:
    """One line of an index: a filing as listed under one filer (a filing with several filers has several)."""

    accession: str
    cik: str
    company: str
    form: str
    date_filed: dt.date
    published_at: dt.date  # the daily index's day; for a full-index file, the date filed


@attrs.frozen
class IndexFile:
    """A parsed index file. ``entries`` holds the lines whose date filed falls in the window asked for;
    ``days`` every date filed the file lists (the days it covers)."""

    source: InputFile
    kind: str  # form | master | company
    day: dt.date | None  # the daily index's day; None for a quarterly full-index file
    entries: tuple[IndexEntry, ...]
    days: frozenset[dt.date]
    lines: int  # data lines in the whole file


def find_index_files(root: Path) -> list[tuple[Path, str]]:
    """The index files under ``root`` (a file or a directory, searched recursively), with their names relative
    to ``root``, sorted by name. Other files (crawler.idx, sitemaps, notes) are ignored."""
    if root.is_file():
        if not INDEX_NAME.match(root.name):
            raise ReleaseError(
                f"{root}: not an EDGAR index file name (expected form|master|company[.YYYYMMDD].idx[.gz] or form.gz)"
            )
        return [(root, root.name)]
    if not root.is_dir():
        raise ReleaseError(f"{root}: --index path not found")
    # One copy per index: where a directory holds form.idx and form.gz (as full-index does), read the plain one.
    best: dict[tuple[Path, str], tuple[int, Path]] = {}
    for p in root.rglob("*"):
        m = INDEX_NAME.match(p.name)
        if m and p.is_file():
            key = (p.parent, f"{m.group(1)}.{m.group(2) or ''}")
            rank = (".idx", ".idx.gz", ".gz").index(m.group(3))
            if key not in best or rank < best[key][0]:
                best[key] = (rank, p)
    found = [(p, p.relative_to(root).as_posix()) for _, p in best.values()]
    if not found:
        raise ReleaseError(
            f"{root}: no EDGAR index files found (expected form|master|company[.YYYYMMDD].idx[.gz] or form.gz files)"
        )
    return sorted(found, key=lambda t: t[1])


def _decode(raw: bytes, name: str) -> str:
    if raw[:2] == b"\x1f\x9d":
        raise ReleaseError(f"{name}: a Unix compress (.Z) file; download the .gz or plain .idx instead")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ReleaseError(f"{name}: gzip data is damaged or truncated ({exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _looks_like_html(text: str) -> bool:
    head = text[:2048].lstrip().lower()
    return head.startswith(("<!doctype", "<html", "<?xml", "<head", "<body")) or "<html" in head


def _find_header(lines: list[str], name: str) -> tuple[int, str]:
    for i, line in enumerate(lines[:200]):
        if "Form Type" in line and ("File Name" in line or "Filename" in line) and "CIK" in line:
            return i, line
    raise ReleaseError(f"{name}: no index header found (expected {_HEADER_HINT}, then a line of dashes)")


def _fixed_columns(header: str, name: str) -> list[tuple[str, int, int | None]]:
    starts: list[tuple[int, str]] = []
    for title, field in _COLUMNS.items():
        pos = header.find(title)
        if pos >= 0:
            starts.append((pos, field))
    starts.sort()
    fields = [f for _, f in starts]
    missing = [f for f in _REQUIRED if f not in fields]
    if missing:
        raise ReleaseError(
            f"{name}: index header lacks column(s) {', '.join(missing)} (expected {_HEADER_HINT})"
        )
    out: list[tuple[str, int, int | None]] = []
    for k, (pos, field) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else None
        out.append((field, pos, end))
    return out


def _pipe_columns(header: str, name: str) -> dict[str, int]:
    titles = [t.strip() for t in header.split("|")]
    idx = {_COLUMNS[t]: i for i, t in enumerate(titles) if t in _COLUMNS}
    missing = [f for f in _REQUIRED if f not in idx]
    if missing:
        raise ReleaseError(
            f"{name}: index header lacks column(s) {', '.join(missing)} (expected {_HEADER_HINT})"
        )
    return idx


class _Dates:
    """Parses ``YYYYMMDD`` and ``YYYY-MM-DD``, caching (an index holds few distinct dates)."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[str, dt.date] = {}

    def __call__(self, s: str) -> dt.date:
        d = self._cache.get(s)
        if d is None:
            if len(s) == 8 and s.isdigit():
                d = dt.date(int(s[:4]), int(s[4:6]), int(s[6:]))
            else:
                d = dt.date.fromisoformat(s)
            self._cache[s] = d
        return d


_Row = tuple[str, str, str, str, str]  # cik, company, form, date, file


def _rows(lines: list[str], first: int, header: str, name: str) -> Iterator[tuple[int, _Row]]:
    if "|" in header:
        idx = _pipe_columns(header, name)
        ci, ni, fi, di, pi = (idx[f] for f in _REQUIRED)
        width = max(idx.values()) + 1
        for n in range(first, len(lines)):
            line = lines[n]
            if not line.strip():
                continue
            parts = line.split("|")
            if len(parts) < width:
                raise ReleaseError(
                    f"{name}: line {n + 1}: expected {width} '|'-separated fields, got {len(parts)}: {line[:80]!r}"
                )
            yield (
                n,
                (
                    parts[ci].strip(),
                    parts[ni].strip(),
                    parts[fi].strip(),
                    parts[di].strip(),
                    parts[pi].strip(),
                ),
            )
    else:
        cols = _fixed_columns(header, name)
        spans = {f: (a, b) for f, a, b in cols}
        (ca, cb), (na, nb), (fa, fb), (da, db), (pa, pb) = (spans[f] for f in _REQUIRED)
        for n in range(first, len(lines)):
            line = lines[n]
            if not line.strip():
                continue
            row = (
                line[ca:cb].strip(),
                line[na:nb].strip(),
                line[fa:fb].strip(),
                line[da:db].strip(),
                line[pa:pb].strip(),
            )
            if not _plausible(row):
                row = _right_anchored(line, cols) or row
            yield n, row


def _plausible(row: _Row) -> bool:
    return row[0].isdigit() and row[4].startswith("edgar/") and len(row[3]) in (8, 10)


def _right_anchored(line: str, cols: list[tuple[str, int, int | None]]) -> _Row | None:
    """Re-read a line whose columns drifted (an over-long name): CIK, date and file name are single tokens at
    the end of the line in every fixed-width layout; the two text columns split at the header's offset."""
    order = [f for f, _, _ in cols]
    if order[-3:] != ["cik", "date", "file"]:
        return None
    parts = line.rsplit(None, 3)
    if len(parts) != 4:
        return None
    head, cik, date, file = parts
    (f0, _, _), (_, b, _) = cols[0], cols[1]
    first, second = head[:b].strip(), head[b:].strip()
    company, form = (first, second) if f0 == "company" else (second, first)
    row = (cik, company, form, date, file)
    return row if _plausible(row) else None


def parse_index(
    text: str,
    *,
    name: str,
    day: dt.date | None = None,
    start: dt.date | None = None,
    end: dt.date | None = None,
) -> tuple[list[IndexEntry], set[dt.date], int]:
    """Parse the text of an index file: (entries dated in [start, end], every date filed seen, data lines)."""
    if _looks_like_html(text):
        raise ReleaseError(
            f"{name}: an HTML page, not an EDGAR index (sec.gov answers with an HTML error page when a request "
            "lacks a User-Agent or exceeds the rate limit; download the file again)"
        )
    lines = text.splitlines()
    h, header = _find_header(lines, name)
    first = h + 1
    if first < len(lines) and set(lines[first].strip()) == {"-"}:
        first += 1
    dates = _Dates()
    entries: list[IndexEntry] = []
    seen: set[dt.date] = set()
    count = 0
    for n, (cik, company, form, date_s, file) in _rows(lines, first, header, name):
        count += 1
        try:
            filed = dates(date_s)
        except ValueError:
            raise ReleaseError(
                f"{name}: line {n + 1}: field 'Date Filed' is {date_s!r}, expected YYYYMMDD or YYYY-MM-DD"
            ) from None
        if not cik.isdigit():
            raise ReleaseError(f"{name}: line {n + 1}: field 'CIK' is {cik!r}, expected digits")
        accession = file.rsplit("/", 1)[-1].removesuffix(".txt")
        if not _ACCESSION.match(accession):
            raise ReleaseError(
                f"{name}: line {n + 1}: field 'File Name' is {file!r}, expected edgar/data/CIK/NNNNNNNNNN-YY-NNNNNN.txt"
            )
        seen.add(filed)
        if (start is not None and filed < start) or (end is not None and filed > end):
            continue
        entries.append(
            IndexEntry(
                accession=accession,
                cik=cik.lstrip("0") or "0",
                company=company,
                form=form,
                date_filed=filed,
                published_at=day or filed,
            )
        )
    return entries, seen, count


def read_index_file(
    path: Path,
    *,
    name: str | None = None,
    start: dt.date | None = None,
    end: dt.date | None = None,
) -> IndexFile:
    """Read one index file (plain or gzip). Errors name the file and the line."""
    label = name or path.name
    m = INDEX_NAME.match(path.name)
    if not m:
        raise ReleaseError(
            f"{path}: not an EDGAR index file name (expected form|master|company[.YYYYMMDD].idx[.gz] or form.gz)"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReleaseError(f"{path}: cannot read ({exc.strerror})") from None
    day = dt.datetime.strptime(m.group(2), "%Y%m%d").date() if m.group(2) else None  # noqa: DTZ007 (a date)
    entries, seen, lines = parse_index(_decode(raw, str(path)), name=str(path), day=day, start=start, end=end)
    return IndexFile(
        source=InputFile(name=label, sha256=digest_bytes(raw), size=len(raw), kind="index"),
        kind=m.group(1),
        day=day,
        entries=tuple(entries),
        days=frozenset(seen if day is None else {*seen, day}),
        lines=lines,
    )
