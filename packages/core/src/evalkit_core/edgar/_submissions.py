"""The SEC's submissions JSON: per-company ``CIK##########.json`` documents and their page files.

A main document holds the company header (``name``, ``tickers``, ``formerNames``) and ``filings.recent``: parallel
arrays (accessionNumber, filingDate, acceptanceDateTime, form, ...). Companies with long histories have older
filings in page files ``CIK##########-submissions-NNN.json``, which hold the same parallel arrays at the top
level and are listed in the main document's ``filings.files`` with their filingFrom/filingTo range. Pages are
merged into their main document. Inputs may be a directory of such files, the SEC's bulk ``submissions.zip``
(read member by member, never unpacked to disk), or a single file.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import zipfile
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from evalkit_core._canonical import digest_bytes, file_digest
from evalkit_core._edgar_rules import NEW_YORK
from evalkit_core._errors import ReleaseError
from evalkit_core._release import parse_instant
from evalkit_core.edgar._inputs import InputFile

__all__ = [
    "SUBMISSIONS_NAME",
    "Company",
    "FormerName",
    "SubmissionFiling",
    "Submissions",
    "read_submissions",
]

SUBMISSIONS_NAME = re.compile(r"^CIK(\d{10})(?:-submissions-(\d+))?\.json$")
_ARRAYS = ("accessionNumber", "filingDate", "form")
_MARGIN = dt.timedelta(days=10)  # keep rows a little outside the window: the index's date may differ

ProgressFn = Callable[[str, int, int], None]


@attrs.frozen
class FormerName:
    name: str
    start: dt.date | None  # New York dates
    end: dt.date | None


@attrs.frozen
class Company:
    """A company header from a main submissions document."""

    cik: str
    name: str
    former_names: tuple[FormerName, ...] = ()
    tickers: tuple[str, ...] = ()

    def name_on(self, day: dt.date) -> str:
        """The name the company filed under on ``day``: the former name whose range covers it (the latest-starting
        one when ranges overlap), else the current name."""
        best: FormerName | None = None
        for f in self.former_names:
            covers = (f.start is None or f.start <= day) and (f.end is None or day <= f.end)
            if covers and (best is None or (f.start or dt.date.min) > (best.start or dt.date.min)):
                best = f
        return best.name if best is not None else self.name


@attrs.frozen
class SubmissionFiling:
    """One filing as a company's submissions document lists it."""

    accession: str
    cik: str
    form: str
    filing_date: dt.date
    acceptance: str | None  # acceptanceDateTime as given (checked later against the filing date)


@attrs.frozen
class Submissions:
    companies: Mapping[str, Company]
    filings: tuple[SubmissionFiling, ...]
    inputs: tuple[InputFile, ...]
    documents: int  # main documents and pages read


# --- reading documents ---------------------------------------------------------------------------------------


def _load(raw: bytes, name: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        hint = " (truncated download?)" if exc.pos >= len(raw.rstrip()) - 1 else ""
        raise ReleaseError(
            f"{name}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{hint}"
        ) from None
    except UnicodeDecodeError as exc:
        raise ReleaseError(f"{name}: not valid JSON: not UTF-8 text ({exc.reason})") from None
    if not isinstance(doc, dict):
        raise ReleaseError(
            f"{name}: expected a JSON object (a submissions document), got {type(doc).__name__}"
        )
    return doc  # pyright: ignore[reportUnknownVariableType]


def _str_list(arrays: Mapping[str, Any], key: str, where: str, name: str, n: int | None) -> list[Any] | None:
    v = arrays.get(key)
    if v is None:
        return None
    if not isinstance(v, list):
        raise ReleaseError(f"{name}: field '{where}{key}' is not an array")
    out: list[Any] = v  # pyright: ignore[reportUnknownVariableType]
    if n is not None and len(out) != n:
        raise ReleaseError(
            f"{name}: field '{where}{key}' has {len(out)} entries, '{where}accessionNumber' has {n} (parallel arrays)"
        )
    return out


def _filings_from_arrays(
    arrays: Any, *, cik: str, name: str, where: str, lo: str, hi: str
) -> Iterator[SubmissionFiling]:
    if not isinstance(arrays, dict):
        raise ReleaseError(f"{name}: field '{where.rstrip('.') or 'document'}' missing or not an object")
    arr: dict[str, Any] = arrays  # pyright: ignore[reportUnknownVariableType]
    acc = _str_list(arr, "accessionNumber", where, name, None)
    if acc is None:
        raise ReleaseError(
            f"{name}: field '{where}accessionNumber' missing (expected parallel filing arrays)"
        )
    n = len(acc)
    dates = _str_list(arr, "filingDate", where, name, n)
    forms = _str_list(arr, "form", where, name, n)
    if dates is None or forms is None:
        missing = "filingDate" if dates is None else "form"
        raise ReleaseError(f"{name}: field '{where}{missing}' missing (expected parallel filing arrays)")
    stamps = _str_list(arr, "acceptanceDateTime", where, name, n)
    for i in range(n):
        d = dates[i]
        if not isinstance(d, str):
            raise ReleaseError(f"{name}: field '{where}filingDate[{i}]' is {d!r}, expected YYYY-MM-DD")
        if not (lo <= d <= hi):
            continue
        try:
            filed = dt.date.fromisoformat(d)
        except ValueError:
            raise ReleaseError(
                f"{name}: field '{where}filingDate[{i}]' is {d!r}, expected YYYY-MM-DD"
            ) from None
        a, f = acc[i], forms[i]
        if not isinstance(a, str) or not isinstance(f, str):
            raise ReleaseError(f"{name}: entry {i} of '{where}accessionNumber'/'{where}form' is not a string")
        s = stamps[i] if stamps is not None else None
        yield SubmissionFiling(
            accession=a,
            cik=cik,
            form=f,
            filing_date=filed,
            acceptance=s if isinstance(s, str) and s else None,
        )


def _ny_date(v: Any) -> dt.date | None:
    if not isinstance(v, str) or not v:
        return None
    try:
        return parse_instant(v).astimezone(NEW_YORK).date()
    except ValueError:
        return None


def _company(doc: Mapping[str, Any], cik: str, name: str) -> Company:
    title = doc.get("name")
    if not isinstance(title, str) or not title:
        raise ReleaseError(f"{name}: field 'name' missing (expected a company submissions document)")
    former: list[FormerName] = []
    raw_former: Any = doc.get("formerNames") or []
    if isinstance(raw_former, list):
        for item in raw_former:  # pyright: ignore[reportUnknownVariableType]
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                it: dict[str, Any] = item  # pyright: ignore[reportUnknownVariableType]
                former.append(
                    FormerName(name=it["name"], start=_ny_date(it.get("from")), end=_ny_date(it.get("to")))
                )
    raw_tickers: Any = doc.get("tickers") or []
    tickers: tuple[str, ...] = ()
    if isinstance(raw_tickers, list):
        items: list[Any] = raw_tickers  # pyright: ignore[reportUnknownVariableType]
        tickers = tuple(t for t in items if isinstance(t, str) and t)
    return Company(cik=cik, name=title, former_names=tuple(former), tickers=tickers)


@attrs.frozen
class _Page:
    name: str  # the file name as the main document lists it
    start: str
    end: str


def _field(obj: Any, key: str) -> Any:
    """``obj[key]`` when ``obj`` is a JSON object, else None."""
    if isinstance(obj, dict):
        d: dict[str, Any] = obj  # pyright: ignore[reportUnknownVariableType]
        return d.get(key)
    return None


def _pages(doc: Mapping[str, Any], name: str) -> list[_Page]:
    files: Any = _field(doc.get("filings"), "files")
    out: list[_Page] = []
    if isinstance(files, list):
        for item in files:  # pyright: ignore[reportUnknownVariableType]
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                it: dict[str, Any] = item  # pyright: ignore[reportUnknownVariableType]
                out.append(
                    _Page(it["name"], str(it.get("filingFrom") or ""), str(it.get("filingTo") or "9999"))
                )
            else:
                raise ReleaseError(f"{name}: field 'filings.files' holds an entry without a 'name'")
    return out


# --- containers -------------------------------------------------------------------------------------------------


class _Container:
    """A directory, a zip archive or a single file of submissions documents, read by member name."""

    def __init__(
        self, names: dict[str, str], read: Callable[[str], bytes], label: Callable[[str], str]
    ) -> None:
        self.names = names  # base name -> member key
        self.read = read
        self.label = label


def _dir_container(root: Path, read: Callable[[str], bytes]) -> tuple[_Container, list[Path]]:
    names: dict[str, str] = {}
    zips: list[Path] = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        if p.suffix.lower() == ".zip":
            zips.append(p)
        elif SUBMISSIONS_NAME.match(p.name):
            rel = p.relative_to(root).as_posix()
            if p.name in names:
                raise ReleaseError(f"{root}: {p.name} appears twice ({names[p.name]} and {rel})")
            names[p.name] = rel
    return _Container(names, read, lambda rel: str(root / rel)), zips


def read_submissions(
    path: Path,
    *,
    start: dt.date,
    end: dt.date,
    ciks: Collection[str] | None = None,
    progress: ProgressFn | None = None,
) -> Submissions:
    """Read every submissions document under ``path`` (a directory, a ``.zip`` or one ``.json``), keeping the
    filings dated within a few days of [start, end]. ``ciks`` (unpadded) limits which companies are read."""
    lo, hi = (start - _MARGIN).isoformat(), (end + _MARGIN).isoformat()
    companies: dict[str, Company] = {}
    filings: list[SubmissionFiling] = []
    inputs: list[InputFile] = []
    documents = 0
    if path.is_dir():
        hashed: dict[str, InputFile] = {}

        def read_dir(rel: str) -> bytes:
            try:
                raw = (path / rel).read_bytes()
            except OSError as exc:
                raise ReleaseError(f"{path / rel}: cannot read ({exc.strerror})") from None
            hashed[rel] = InputFile(name=rel, sha256=digest_bytes(raw), size=len(raw), kind="submissions")
            return raw

        container, zips = _dir_container(path, read_dir)
        if not container.names and not zips:
            raise ReleaseError(
                f"{path}: no submissions documents found (expected CIK##########.json files or a submissions.zip)"
            )
        documents += _read_container(container, lo, hi, ciks, companies, filings, progress)
        inputs.extend(hashed[k] for k in sorted(hashed))
        for z in zips:
            n, source = _read_zip(
                z, z.relative_to(path).as_posix(), lo, hi, ciks, companies, filings, progress
            )
            documents += n
            inputs.append(source)
    elif path.is_file() and path.suffix.lower() == ".zip":
        n, source = _read_zip(path, path.name, lo, hi, ciks, companies, filings, progress)
        documents += n
        inputs.append(source)
    elif path.is_file():
        if not SUBMISSIONS_NAME.match(path.name):
            raise ReleaseError(
                f"{path}: not a submissions document name (expected CIK##########.json or a .zip)"
            )
        raw = path.read_bytes()
        inputs.append(InputFile(name=path.name, sha256=digest_bytes(raw), size=len(raw), kind="submissions"))
        container = _Container({path.name: path.name}, lambda _k: raw, lambda _k: str(path))
        documents += _read_container(container, lo, hi, None, companies, filings, progress)
    else:
        raise ReleaseError(f"{path}: --submissions path not found")
    return Submissions(companies=companies, filings=tuple(filings), inputs=tuple(inputs), documents=documents)


def _read_zip(
    path: Path,
    label: str,
    lo: str,
    hi: str,
    ciks: Collection[str] | None,
    companies: dict[str, Company],
    filings: list[SubmissionFiling],
    progress: ProgressFn | None,
) -> tuple[int, InputFile]:
    try:
        sha256 = file_digest(path)
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ReleaseError(f"{path}: not a readable zip archive ({exc})") from None
    with zf:
        names: dict[str, str] = {}
        for info in zf.infolist():
            base = info.filename.rsplit("/", 1)[-1]
            if not info.is_dir() and SUBMISSIONS_NAME.match(base):
                names[base] = info.filename

        def read(member: str) -> bytes:
            try:
                return zf.read(member)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise ReleaseError(f"{path}:{member}: damaged zip member ({exc})") from None

        if not names:
            raise ReleaseError(f"{path}: the archive holds no CIK##########.json submissions documents")
        container = _Container(names, read, lambda m: f"{path}:{m}")
        n = _read_container(container, lo, hi, ciks, companies, filings, progress)
    size = path.stat().st_size
    return n, InputFile(
        name=label, sha256=sha256, size=size, kind="submissions", members=n
    )


def _read_container(
    container: _Container,
    lo: str,
    hi: str,
    ciks: Collection[str] | None,
    companies: dict[str, Company],
    filings: list[SubmissionFiling],
    progress: ProgressFn | None,
) -> int:
    by_cik: dict[str, list[str]] = {}
    mains: dict[str, str] = {}
    for base in sorted(container.names):
        m = SUBMISSIONS_NAME.match(base)
        assert m is not None
        cik = str(int(m.group(1)))
        if m.group(2) is None:
            mains[cik] = base
        else:
            by_cik.setdefault(cik, []).append(base)
    orphans = sorted(set(by_cik) - set(mains))
    if orphans:
        page = by_cik[orphans[0]][0]
        raise ReleaseError(
            f"{container.label(container.names[page])}: a submissions page without its main document "
            f"CIK{int(orphans[0]):010d}.json (the company header comes from the main document)"
        )
    selected = sorted((c for c in mains if ciks is None or c in ciks), key=int)
    read = 0
    for k, cik in enumerate(selected):
        if progress is not None:
            progress("reading submissions", k, len(selected))
        base = mains[cik]
        key = container.names[base]
        name = container.label(key)
        doc = _load(container.read(key), name)
        read += 1
        if cik in companies:
            raise ReleaseError(f"{name}: a second main document for CIK {cik}")
        companies[cik] = _company(doc, cik, name)
        seen: set[str] = set()
        recent: Any = _field(doc.get("filings"), "recent")
        for f in _filings_from_arrays(recent, cik=cik, name=name, where="filings.recent.", lo=lo, hi=hi):
            if f.accession not in seen:
                seen.add(f.accession)
                filings.append(f)
        listed = _pages(doc, name)
        present = set(by_cik.get(cik, ()))
        for page in listed:
            if page.name not in present and page.start <= hi and lo <= page.end:
                raise ReleaseError(
                    f"{name}: lists page {page.name} (filings {page.start}..{page.end}, overlapping the window) "
                    "but that file is not among the inputs; download it too"
                )
        wanted = {p.name for p in listed if p.start <= hi and lo <= p.end} | (
            present - {p.name for p in listed}
        )
        for page_name in sorted(present & wanted):
            pkey = container.names[page_name]
            pname = container.label(pkey)
            pdoc = _load(container.read(pkey), pname)
            read += 1
            for f in _filings_from_arrays(pdoc, cik=cik, name=pname, where="", lo=lo, hi=hi):
                if f.accession not in seen:
                    seen.add(f.accession)
                    filings.append(f)
    if progress is not None:
        progress("reading submissions", len(selected), len(selected))
    return read
