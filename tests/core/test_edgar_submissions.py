"""Submissions JSON: main documents, page files, the bulk zip, company names over time, the ticker map."""

from __future__ import annotations

import datetime as dt
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from evalkit_core import ReleaseError
from evalkit_core.edgar import Company, FormerName, read_submissions, read_ticker_map

START, END = dt.date(2023, 1, 1), dt.date(2023, 3, 31)


def arrays(rows: Sequence[tuple[str, str, str, str]]) -> dict[str, list[Any]]:
    """Parallel arrays from (accession, filingDate, form, acceptanceDateTime) rows."""
    return {
        "accessionNumber": [r[0] for r in rows],
        "filingDate": [r[1] for r in rows],
        "reportDate": ["" for _ in rows],
        "acceptanceDateTime": [r[3] for r in rows],
        "form": [r[2] for r in rows],
        "items": ["" for _ in rows],
        "primaryDocument": ["doc.htm" for _ in rows],
    }


def main_doc(
    cik: int,
    name: str,
    rows: Sequence[tuple[str, str, str, str]],
    *,
    pages: Sequence[dict[str, Any]] = (),
    former: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    return {
        "cik": f"{cik:010d}",
        "name": name,
        "tickers": ["TCKR"],
        "formerNames": list(former),
        "filings": {"recent": arrays(rows), "files": list(pages)},
    }


RECENT = [
    ("0000320193-23-000006", "2023-02-03", "10-Q", "2023-02-02T23:01:30.000Z"),
    ("0000320193-23-000007", "2023-02-03", "4", "2023-02-03T21:00:00.000Z"),
    ("0000320193-22-000099", "2022-06-01", "8-K", "2022-06-01T20:00:00.000Z"),  # outside the window
]
PAGE = [
    ("0000320193-23-000001", "2023-01-05", "8-K", "2023-01-05T21:00:00.000Z"),
    ("0000320193-23-000006", "2023-02-03", "10-Q", "2023-02-02T23:01:30.000Z"),  # also in recent: merged once
]
PAGE_ENTRY = {
    "name": "CIK0000320193-submissions-001.json",
    "filingCount": 2,
    "filingFrom": "2023-01-05",
    "filingTo": "2023-02-03",
}


def write_docs(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "CIK0000320193.json").write_text(
        json.dumps(main_doc(320193, "Apple Inc.", RECENT, pages=[PAGE_ENTRY]))
    )
    (root / "CIK0000320193-submissions-001.json").write_text(json.dumps(arrays(PAGE)))
    (root / "CIK0000050863.json").write_text(
        json.dumps(
            main_doc(
                50863,
                "INTEL CORP",
                [("0000050863-23-000006", "2023-01-27", "10-K", "2023-01-26T18:31:20.000Z")],
            )
        )
    )


def accessions(subs: Any) -> list[tuple[str, str, str]]:
    return sorted((f.accession, f.cik, f.filing_date.isoformat()) for f in subs.filings)


def test_directory_with_pages_merged(tmp_path: Path):
    write_docs(tmp_path / "subs")
    subs = read_submissions(tmp_path / "subs", start=START, end=END)
    assert accessions(subs) == [
        ("0000050863-23-000006", "50863", "2023-01-27"),
        ("0000320193-23-000001", "320193", "2023-01-05"),
        ("0000320193-23-000006", "320193", "2023-02-03"),
        ("0000320193-23-000007", "320193", "2023-02-03"),
    ]
    assert sorted(subs.companies) == ["320193", "50863"]
    assert subs.companies["320193"].name == "Apple Inc."
    assert [i.name for i in subs.inputs] == [
        "CIK0000050863.json",
        "CIK0000320193-submissions-001.json",
        "CIK0000320193.json",
    ]
    assert all(i.sha256.startswith("sha256:") and i.kind == "submissions" for i in subs.inputs)
    stamp = {f.accession: f.acceptance for f in subs.filings}
    assert stamp["0000320193-23-000006"] == "2023-02-02T23:01:30.000Z"


def test_zip_reads_the_same_filings_without_unpacking(tmp_path: Path):
    write_docs(tmp_path / "subs")
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted((tmp_path / "subs").iterdir()):
            zf.write(p, p.name)
    before = sorted(p.name for p in tmp_path.iterdir())
    from_zip = read_submissions(archive, start=START, end=END)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing unpacked beside it
    from_dir = read_submissions(tmp_path / "subs", start=START, end=END)
    assert accessions(from_zip) == accessions(from_dir)
    assert [(i.name, i.members) for i in from_zip.inputs] == [("submissions.zip", 3)]


def test_cik_filter_skips_other_companies(tmp_path: Path):
    write_docs(tmp_path / "subs")
    subs = read_submissions(tmp_path / "subs", start=START, end=END, ciks={"50863"})
    assert [f.cik for f in subs.filings] == ["50863"]


def test_truncated_document_names_the_file(tmp_path: Path):
    write_docs(tmp_path / "subs")
    bad = tmp_path / "subs" / "CIK0000050863.json"
    bad.write_bytes(bad.read_bytes()[:200])
    with pytest.raises(ReleaseError) as err:
        read_submissions(tmp_path / "subs", start=START, end=END)
    assert str(bad) in str(err.value)
    assert "not valid JSON" in str(err.value)
    assert "truncated" in str(err.value)


def test_truncated_zip_member_names_the_member(tmp_path: Path):
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("CIK0000050863.json", "<html>rate limited</html>")
    with pytest.raises(ReleaseError, match=r"submissions\.zip:CIK0000050863\.json: not valid JSON"):
        read_submissions(archive, start=START, end=END)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ([1, 2, 3], "expected a JSON object"),
        ({"cik": "0000050863", "filings": {"recent": arrays([])}}, "field 'name' missing"),
        ({"cik": "0000050863", "name": "X", "filings": {}}, "field 'filings.recent' missing"),
        (
            {"cik": "0000050863", "name": "X", "filings": {"recent": {**arrays(RECENT), "form": ["8-K"]}}},
            "'filings.recent.form' has 1 entries, 'filings.recent.accessionNumber' has 3",
        ),
    ],
    ids=["not-an-object", "no-name", "no-recent", "ragged-arrays"],
)
def test_malformed_documents(tmp_path: Path, doc: Any, expected: str):
    (tmp_path / "CIK0000050863.json").write_text(json.dumps(doc))
    with pytest.raises(ReleaseError, match=r"CIK0000050863\.json") as err:
        read_submissions(tmp_path, start=START, end=END)
    assert expected in str(err.value)


def test_page_without_main_document(tmp_path: Path):
    (tmp_path / "CIK0000320193-submissions-001.json").write_text(json.dumps(arrays(PAGE)))
    with pytest.raises(
        ReleaseError, match=r"a submissions page without its main document CIK0000320193\.json"
    ):
        read_submissions(tmp_path, start=START, end=END)


def test_missing_page_that_overlaps_the_window(tmp_path: Path):
    write_docs(tmp_path)
    (tmp_path / "CIK0000320193-submissions-001.json").unlink()
    with pytest.raises(ReleaseError, match=r"lists page CIK0000320193-submissions-001\.json"):
        read_submissions(tmp_path, start=START, end=END)
    # A window the page does not reach needs no page.
    subs = read_submissions(tmp_path, start=dt.date(2023, 6, 1), end=dt.date(2023, 6, 30))
    assert subs.filings == ()


def test_empty_directory(tmp_path: Path):
    with pytest.raises(ReleaseError, match="no submissions documents found"):
        read_submissions(tmp_path, start=START, end=END)


def test_issuer_name_as_of_the_filing():
    apple = Company(
        cik="320193",
        name="Apple Inc.",
        former_names=(
            FormerName("APPLE INC", dt.date(2007, 1, 10), dt.date(2019, 8, 5)),
            FormerName("APPLE COMPUTER INC", dt.date(1994, 1, 26), dt.date(2007, 1, 4)),
            FormerName("APPLE COMPUTER INC/ FA", dt.date(1997, 7, 28), dt.date(1997, 7, 28)),
        ),
    )
    assert apple.name_on(dt.date(2023, 2, 3)) == "Apple Inc."
    assert apple.name_on(dt.date(2010, 5, 1)) == "APPLE INC"
    assert apple.name_on(dt.date(2000, 5, 1)) == "APPLE COMPUTER INC"
    assert apple.name_on(dt.date(1997, 7, 28)) == "APPLE COMPUTER INC/ FA"  # the latest-starting range wins


def test_former_names_are_read_as_new_york_dates(tmp_path: Path):
    former = [
        {
            "name": "VectoIQ Acquisition Corp.",
            "from": "2018-02-28T05:00:00.000Z",
            "to": "2020-06-03T04:00:00.000Z",
        }
    ]
    rows = [("0001731289-20-000001", "2020-05-01", "8-K", "2020-05-01T20:00:00.000Z")]
    (tmp_path / "CIK0001731289.json").write_text(
        json.dumps(main_doc(1731289, "Nikola Corp", rows, former=former))
    )
    subs = read_submissions(tmp_path, start=dt.date(2020, 5, 1), end=dt.date(2020, 5, 1))
    company = subs.companies["1731289"]
    assert company.former_names == (
        FormerName("VectoIQ Acquisition Corp.", dt.date(2018, 2, 28), dt.date(2020, 6, 3)),
    )
    assert company.name_on(dt.date(2020, 5, 1)) == "VectoIQ Acquisition Corp."
    assert company.name_on(dt.date(2020, 6, 4)) == "Nikola Corp"


def test_ticker_map_formats(tmp_path: Path):
    plain = tmp_path / "company_tickers.json"
    plain.write_text(
        json.dumps(
            {
                "0": {"cik_str": 1652044, "ticker": "GOOGL", "title": "Alphabet Inc."},
                "10": {"cik_str": 1652044, "ticker": "GOOG", "title": "Alphabet Inc."},
                "2": {"cik_str": 320193, "ticker": "AAPL", "title": "Apple Inc."},
            }
        )
    )
    m = read_ticker_map(plain)
    assert (m.get("1652044"), m.get("320193"), m.get("1")) == ("GOOGL", "AAPL", None)
    assert m.source.name == "company_tickers.json"
    exchange = tmp_path / "company_tickers_exchange.json"
    exchange.write_text(
        json.dumps(
            {
                "fields": ["cik", "name", "ticker", "exchange"],
                "data": [[320193, "Apple Inc.", "AAPL", "Nasdaq"]],
            }
        )
    )
    assert read_ticker_map(exchange).get("320193") == "AAPL"
    bad = tmp_path / "tickers.json"
    bad.write_text('{"0": {"cik_str": "x", "ticker": 5}}')
    with pytest.raises(ReleaseError, match=r"tickers\.json: entry '0'"):
        read_ticker_map(bad)
