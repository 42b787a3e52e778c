"""Build a release from EDGAR metadata: index files, submissions JSON and the ticker map, merged per accession.

Merge rules (recorded in the release's provenance):

- **Universe.** One row per accession number whose filing date lies in [start, end]. Where index files cover a
  day, the index is that day's universe: its rows give the date filed, the index day (``published_at``), the
  form and the filers. A submissions row dated on a covered day but missing from the index is left out and
  counted. Days no index file covers take their rows from the submissions JSON.
- **Acceptance.** The submissions JSON gives ``acceptanceDateTime`` (UTC). Each stamp is checked against the
  filing date under EDGAR's rule (:mod:`evalkit_core.edgar._rules`); a contradicting stamp is flagged, kept in
  the answer key and left out of the arms.
- **Filer.** A filing listed under several CIKs (a Form 4 under the issuer and the reporting owner) takes the
  CIK of a submissions document that lists it, else the smallest CIK the index gives; the lowest number wins
  ties, so the choice never depends on file order.
- **Issuer name.** From the submissions company header as of the filing date (``formerNames`` ranges), else
  the name the index lists (a daily index prints the name of that day).
- **Ticker.** From the ticker map, else the submissions header: both are snapshots, not point-in-time.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import polars as pl

from evalkit_core._calendar import CALENDAR_SPAN, sec_business_days
from evalkit_core._clocks import with_entry
from evalkit_core._errors import ConfigError, ReleaseError
from evalkit_core._release import Filing, write_release
from evalkit_core.edgar._index import IndexEntry, IndexFile, find_index_files, read_index_file
from evalkit_core.edgar._inputs import InputFile
from evalkit_core.edgar._rules import FLAG_REASONS, check_acceptance
from evalkit_core.edgar._submissions import Company, SubmissionFiling, Submissions, read_submissions
from evalkit_core.edgar._tickers import TickerMap, read_ticker_map

__all__ = [
    "BUILDER",
    "DISSEMINATION_RULE",
    "FILING_DATE_RULE",
    "EdgarBuild",
    "assemble_filings",
    "build_edgar_release",
]

BUILDER = "evalkit.edgar/1"
FILING_DATE_RULE = (
    "accepted on an SEC business day at or before 17:30 New York time (22:00 for Forms 3/4/5, Rule 462(b) "
    "registrations, Schedule 14N, Form 144 from 2023-03-20, Schedules 13D/G from 2024-12-18) -> that day; "
    "otherwise the next SEC business day. acceptanceDateTime is read as UTC."
)
DISSEMINATION_RULE = (
    "a filing accepted after 17:30 New York time (extended-cut-off forms included, conservatively) or on a day "
    "that is not an SEC business day is public at 06:00 New York on the next SEC business day: disseminated_at "
    "is set on those rows and the pit clock uses the later of acceptance_at and disseminated_at"
)
TICKER_STATEMENT = (
    "tickers come from a snapshot of the SEC's ticker map (or the submissions header), as of its download, "
    "not point-in-time: renamed or delisted issuers may show a later ticker or none"
)

ProgressFn = Callable[[str, int, int], None]


@attrs.frozen
class EdgarBuild:
    """What a build produced: where it is, its counts and the provenance written into ``release.json``."""

    path: Path
    name: str
    rows: int
    by_form: Mapping[str, int]
    flags_by_reason: Mapping[str, int]
    with_acceptance_at: int
    with_disseminated_at: int
    pit_entries_moved: int
    content_digest: str
    provenance: Mapping[str, Any]


def _builder_version() -> str:
    try:
        return importlib.metadata.version("evalkit-core")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _normal_forms(forms: Sequence[str] | None) -> tuple[str, ...] | None:
    if forms is None:
        return None
    out = tuple(sorted({f.strip() for f in forms if f.strip()}))
    return out or None


@attrs.frozen
class _Sources:
    index_files: tuple[IndexFile, ...]
    submissions: Submissions | None
    tickers: TickerMap | None


def _read_sources(
    *,
    start: dt.date,
    end: dt.date,
    submissions: Path | None,
    index: Path | None,
    tickers: Path | None,
    progress: ProgressFn | None,
) -> _Sources:
    index_files: list[IndexFile] = []
    if index is not None:
        found = find_index_files(index)
        for k, (p, rel) in enumerate(found):
            if progress is not None:
                progress("reading index files", k, len(found))
            index_files.append(read_index_file(p, name=rel, start=start, end=end))
        if progress is not None:
            progress("reading index files", len(found), len(found))
    subs: Submissions | None = None
    if submissions is not None:
        ciks: set[str] | None = None
        covered: set[dt.date] = set()
        for f in index_files:
            covered |= f.days
        if index_files and set(sec_business_days(start, end)) <= covered:
            # The index is the universe for every day of the window: only its filers' documents matter.
            ciks = {e.cik for f in index_files for e in f.entries}
        subs = read_submissions(submissions, start=start, end=end, ciks=ciks, progress=progress)
    tmap = read_ticker_map(tickers) if tickers is not None else None
    return _Sources(index_files=tuple(index_files), submissions=subs, tickers=tmap)


def assemble_filings(
    *,
    start: dt.date,
    end: dt.date,
    submissions: Path | None = None,
    index: Path | None = None,
    tickers: Path | None = None,
    forms: Sequence[str] | None = None,
    progress: ProgressFn | None = None,
) -> tuple[list[Filing], dict[str, Any]]:
    """Read the inputs and merge them into one :class:`Filing` per accession, plus the provenance to record."""
    if submissions is None and index is None:
        raise ConfigError("give at least one of --submissions and --index")
    if start > end:
        raise ConfigError(f"--start {start} is after --end {end}")
    wanted = _normal_forms(forms)
    src = _read_sources(
        start=start, end=end, submissions=submissions, index=index, tickers=tickers, progress=progress
    )

    covered: set[dt.date] = set()
    idx_by_acc: dict[str, list[IndexEntry]] = {}
    for f in src.index_files:
        covered |= f.days
        for e in f.entries:
            idx_by_acc.setdefault(e.accession, []).append(e)
    companies: Mapping[str, Company] = src.submissions.companies if src.submissions else {}
    sub_by_acc: dict[str, list[SubmissionFiling]] = {}
    for s in src.submissions.filings if src.submissions else ():
        sub_by_acc.setdefault(s.accession, []).append(s)

    stats: Counter[str] = Counter()
    by_form: Counter[str] = Counter()
    flags: Counter[str] = Counter()
    filings: list[Filing] = []
    accessions = sorted(set(idx_by_acc) | set(sub_by_acc))
    total = len(accessions)
    for k, acc in enumerate(accessions):
        if progress is not None and k % 5000 == 0:
            progress("checking filings", k, total)
        ents = idx_by_acc.get(acc)
        subs: list[SubmissionFiling] = sub_by_acc.get(acc) or []
        if len(subs) > 1:
            subs = sorted(subs, key=lambda s: int(s.cik))
        if ents:
            if len(ents) > 1:
                ents.sort(key=lambda e: (e.published_at, int(e.cik), e.form))
            first = ents[0]
            filed, published, form = first.date_filed, first.published_at, first.form
            if not (start <= filed <= end) or (wanted is not None and form not in wanted):
                continue
            index_names = {first.cik: first.company}
            for e in ents[1:]:
                index_names.setdefault(e.cik, e.company)
            if len(ents) > 1 and any(e.date_filed != filed for e in ents):
                stats["index_date_conflicts"] += 1
            source = "index+submissions" if subs else "index"
        else:
            sub0 = subs[0]
            filed, published, form = sub0.filing_date, sub0.filing_date, sub0.form
            if not (start <= filed <= end) or (wanted is not None and form not in wanted):
                continue
            if filed in covered:
                stats["submissions_rows_not_in_index"] += 1
                continue
            index_names = {}
            source = "submissions"
        sub = subs[0] if subs else None
        cik = sub.cik if sub is not None else min(index_names, key=int)
        if len(index_names) + len(subs) > 1 and len({*index_names, *(s.cik for s in subs)}) > 1:
            stats["multi_cik_accessions"] += 1
        if sub is not None and ents and sub.filing_date != filed:
            stats["filing_date_disagreements"] += 1
        company = companies.get(cik)
        if company is not None:
            issuer = company.name_on(filed)
            stats["issuer_from_submissions_header"] += 1
            if issuer != company.name:
                stats["issuer_former_name"] += 1
        else:
            issuer = index_names.get(cik) or next(iter(index_names.values()), "") or f"CIK {cik}"
            stats["issuer_from_index"] += 1
        ticker = src.tickers.get(cik) if src.tickers is not None else None
        if ticker is not None:
            stats["ticker_from_map"] += 1
        elif company is not None and company.tickers:
            ticker = company.tickers[0]
            stats["ticker_from_submissions_header"] += 1
        check = check_acceptance(form, acc, filed, sub.acceptance if sub is not None else None)
        for reason in check.flags:
            flags[reason] += 1
        stats["rows_with_stamp"] += check.real is not None or bool(check.flags)
        stats["extended_cutoff_same_day"] += check.extended_cutoff
        stats[f"source:{source}"] += 1
        by_form[form] += 1
        filings.append(
            Filing(
                accession=acc,
                cik=cik,
                issuer=issuer,
                form=form,
                partition_date=filed,
                published_at=published,
                acceptance_at=check.served,
                acceptance_real=check.real,
                disseminated_at=check.disseminated_at,
                ticker=ticker,
                url=f"https://www.sec.gov/Archives/edgar/data/{cik}/{acc.replace('-', '')}/{acc}-index.htm",
                flags=check.flags,
            )
        )
    if progress is not None:
        progress("checking filings", total, total)
    if not filings:
        where = ", ".join(str(p) for p in (submissions, index) if p is not None)
        form_note = f" of form(s) {', '.join(wanted)}" if wanted else ""
        raise ReleaseError(f"no filings{form_note} with a filing date in {start}..{end} in {where}")
    moved, moved_by = _dissemination_moves(filings)
    provenance = _provenance(
        src=src,
        start=start,
        end=end,
        wanted=wanted,
        filings=filings,
        by_form=by_form,
        flags=flags,
        stats=stats,
        moved=moved,
        moved_by=moved_by,
    )
    return filings, provenance


def _dissemination_moves(filings: Sequence[Filing]) -> tuple[int, dict[str, int]]:
    """How many pit entry sessions ``disseminated_at`` moves: entry computed with and without it."""
    rows = [f for f in filings if f.acceptance_at is not None and f.disseminated_at is not None]
    if not rows:
        return 0, {}
    ts = pl.Datetime("us", "UTC")
    frame = pl.DataFrame(
        {
            "partition_date": [f.partition_date for f in rows],
            "published_at": [f.published_at for f in rows],
            "acceptance_at": pl.Series([f.acceptance_at for f in rows], dtype=ts),
            "disseminated_at": pl.Series([f.disseminated_at for f in rows], dtype=ts),
        },
        schema={
            "partition_date": pl.Date,
            "published_at": pl.Date,
            "acceptance_at": ts,
            "disseminated_at": ts,
        },
    )
    with_diss = with_entry(frame, "pit").get_column("entry_date")
    without = with_entry(
        frame.with_columns(pl.lit(None, dtype=ts).alias("disseminated_at")), "pit"
    ).get_column("entry_date")
    moves: Counter[str] = Counter()
    for a, b in zip(without.to_list(), with_diss.to_list(), strict=True):
        if a != b:
            moves[f"{a.isoformat()}->{b.isoformat()}"] += 1
    return sum(moves.values()), dict(sorted(moves.items()))


def _provenance(
    *,
    src: _Sources,
    start: dt.date,
    end: dt.date,
    wanted: tuple[str, ...] | None,
    filings: Sequence[Filing],
    by_form: Counter[str],
    flags: Counter[str],
    stats: Counter[str],
    moved: int,
    moved_by: Mapping[str, int],
) -> dict[str, Any]:
    rows = len(filings)
    served = sum(f.acceptance_at is not None for f in filings)
    inputs: list[InputFile] = [f.source for f in src.index_files]
    if src.submissions is not None:
        inputs.extend(src.submissions.inputs)
    if src.tickers is not None:
        inputs.append(src.tickers.source)
    flagged_rows = sum(bool(f.flags) for f in filings)
    return {
        "kind": "edgar",
        "statement": "Built by evalkit from SEC EDGAR metadata the user downloaded; the inputs are listed with their sha256.",
        "builder": {"name": BUILDER, "evalkit_core_version": _builder_version()},
        "window": {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "by": "filing date (index Date Filed / filingDate)",
        },
        "forms_requested": list(wanted) if wanted is not None else "all",
        "inputs": [i.to_json() for i in sorted(inputs, key=lambda i: (i.kind, i.name))],
        "counts": {
            "rows": rows,
            "by_form": dict(sorted(by_form.items())),
            "by_source": {
                k.removeprefix("source:"): v for k, v in sorted(stats.items()) if k.startswith("source:")
            },
        },
        "acceptance": {
            "rows_with_stamp_in_sources": stats["rows_with_stamp"],
            "rows_with_acceptance_at": served,
            "coverage": round(served / rows, 6),
            "rows_flagged": flagged_rows,
            "accepted_17_30_to_22_00_same_day": stats["extended_cutoff_same_day"],
            "filing_date_rule": FILING_DATE_RULE,
        },
        "flags": {
            "by_reason": dict(sorted(flags.items())),
            "handling": "flagged rows serve acceptance_at null in the arms (pit falls back to the dump rule); the "
            "answer key keeps the stamp and lists the reason in 'flags'",
            "reasons": {k: FLAG_REASONS[k] for k in sorted(flags)},
        },
        "dissemination": {
            "rule": DISSEMINATION_RULE,
            "rows_with_disseminated_at": sum(f.disseminated_at is not None for f in filings),
            "pit_entries_moved": moved,
            "pit_entries_moved_by_session": dict(moved_by),
        },
        "merge": {
            "universe": "index rows where an index file covers the day, else submissions rows",
            "acceptance_from": "submissions JSON (acceptanceDateTime)",
            "submissions_rows_not_in_index": stats["submissions_rows_not_in_index"],
            "filing_date_disagreements": stats["filing_date_disagreements"],
            "index_date_conflicts": stats["index_date_conflicts"],
            "multi_cik_accessions": stats["multi_cik_accessions"],
            "cik_rule": "a CIK whose submissions document lists the filing, else the smallest CIK the index gives",
        },
        "issuer": {
            "rule": "submissions company header as of the filing date (formerNames ranges), else the index's name",
            "rows_from_submissions_header": stats["issuer_from_submissions_header"],
            "rows_named_by_former_name": stats["issuer_former_name"],
            "rows_from_index": stats["issuer_from_index"],
        },
        "tickers": {
            "point_in_time": False,
            "statement": TICKER_STATEMENT,
            "rows_from_ticker_map": stats["ticker_from_map"],
            "rows_from_submissions_header": stats["ticker_from_submissions_header"],
            "rows_without_ticker": rows - stats["ticker_from_map"] - stats["ticker_from_submissions_header"],
        },
    }


# The farthest a window may reach when its end is 'latest': the calendar's last day.
_LATEST_BOUND = CALENDAR_SPAN[1]
BUILD_FILE = "build.json"


def build_edgar_release(
    out: str | Path,
    *,
    name: str,
    start: dt.date,
    end: dt.date | None,
    submissions: Path | None = None,
    index: Path | None = None,
    tickers: Path | None = None,
    forms: Sequence[str] | None = None,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    key_seed: str | None = None,
    built_on: dt.date | None = None,
) -> EdgarBuild:
    """Build a release from EDGAR inputs and write it atomically to ``out``. Same inputs and ``key_seed``, same
    bytes. ``key_seed`` is mixed into the row-key key and the mask secret and is not stored: see
    :mod:`evalkit_core._masks`. Without one (None) a seed is drawn from ``os.urandom``: the release then holds a
    mask secret nobody can rebuild from the public inputs, and two builds differ.

    ``end=None`` ends the window at the newest filing date in the inputs (from ``start`` on), so a holdout can be
    rebuilt as new filings arrive; the manifest records the resolved end and that it was requested so.
    ``built_on`` (a date, the caller's "today") goes to ``build.json`` beside the manifest, outside every digest:
    the release's bytes and content digest depend on the inputs only."""
    target = Path(out)
    if not overwrite and target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ReleaseError(
            f"{target}: output directory exists and is not empty (choose another --out or --force)"
        )
    filings, provenance = assemble_filings(
        start=start,
        end=end if end is not None else _LATEST_BOUND,
        submissions=submissions,
        index=index,
        tickers=tickers,
        forms=forms,
        progress=progress,
    )
    newest = max(f.partition_date for f in filings)
    if end is None:
        end = newest
        provenance["window"]["end"] = end.isoformat()
        provenance["window"]["end_requested"] = "latest: the newest filing date in the inputs"
    if progress is not None:
        progress("writing release", 0, 1)
    path = write_release(
        target,
        name=name,
        start=start,
        end=end,
        filings=filings,
        provenance=provenance,
        overwrite=overwrite,
        key_seed=key_seed if key_seed is not None else os.urandom(32).hex(),
    )
    if progress is not None:
        progress("writing release", 1, 1)
    manifest_digest = _content_digest(path)
    if built_on is not None:
        import json

        from evalkit_core._receipt import atomic_write_text

        build_info = {"built_on": built_on.isoformat(), "newest_filing": newest.isoformat(),
                      "window_end": end.isoformat(), "content_digest": manifest_digest}
        atomic_write_text(path / BUILD_FILE, json.dumps(build_info, indent=2, sort_keys=True) + "\n")
    return EdgarBuild(
        path=path,
        name=name,
        rows=len(filings),
        by_form=provenance["counts"]["by_form"],
        flags_by_reason=provenance["flags"]["by_reason"],
        with_acceptance_at=provenance["acceptance"]["rows_with_acceptance_at"],
        with_disseminated_at=provenance["dissemination"]["rows_with_disseminated_at"],
        pit_entries_moved=provenance["dissemination"]["pit_entries_moved"],
        content_digest=manifest_digest,
        provenance=provenance,
    )


def _content_digest(path: Path) -> str:
    import json

    return str(json.loads((path / "release.json").read_bytes())["content_digest"])
