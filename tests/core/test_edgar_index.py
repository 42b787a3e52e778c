"""EDGAR index parsing: daily and full-index form/master/company files, plain and gzip, columns from the header."""

from __future__ import annotations

import datetime as dt
import gzip
from collections.abc import Sequence
from pathlib import Path

import pytest

from evalkit_core import ReleaseError
from evalkit_core.edgar import find_index_files, parse_index, read_index_file

PREAMBLE = (
    """Description:           Daily Index of EDGAR Dissemination Feed by Form Type
Last Data Received:    February 3, 2023
Comments:              webmaster@sec.gov
Anonymous FTP:         ftp://ftp.sec.gov/edgar/
"""
    + " \n" * 4
)  # EDGAR pads the preamble with lines holding one space


def fixed_width(titles: Sequence[str], widths: Sequence[int], rows: Sequence[Sequence[str]]) -> str:
    """An index body laid out like EDGAR's: each column padded to its width, the last one unpadded."""

    def line(values: Sequence[str]) -> str:
        return "".join(v.ljust(w) for v, w in zip(values[:-1], widths, strict=False)) + values[-1]

    head = line(titles)
    return PREAMBLE + head + "\n" + "-" * (len(head) + 30) + "\n" + "\n".join(line(r) for r in rows) + "\n"


FORM_TITLES = ("Form Type", "Company Name", "CIK", "Date Filed", "File Name")
FORM_ROWS = (
    ("10-Q", "Apple Inc.", "320193", "20230203", "edgar/data/320193/0000320193-23-000006.txt"),
    ("SC 13G/A", "VANGUARD GROUP INC", "102909", "20230203", "edgar/data/102909/0001104659-23-011111.txt"),
    (
        "DEF 14A",
        "A COMPANY WITH A NAME OF SEVERAL WORDS",
        "1000045",
        "20230203",
        "edgar/data/1000045/0000950170-23-002874.txt",
    ),
)


def test_form_idx_fixed_width_columns_come_from_the_header():
    text = fixed_width(FORM_TITLES, (12, 62, 12, 12), FORM_ROWS)
    entries, days, lines = parse_index(text, name="form.20230203.idx", day=dt.date(2023, 2, 3))
    assert lines == 3
    assert days == {dt.date(2023, 2, 3)}
    got = [(e.form, e.company, e.cik, e.accession) for e in entries]
    assert got == [
        ("10-Q", "Apple Inc.", "320193", "0000320193-23-000006"),
        ("SC 13G/A", "VANGUARD GROUP INC", "102909", "0001104659-23-011111"),
        ("DEF 14A", "A COMPANY WITH A NAME OF SEVERAL WORDS", "1000045", "0000950170-23-002874"),
    ]
    assert all(e.date_filed == dt.date(2023, 2, 3) and e.published_at == dt.date(2023, 2, 3) for e in entries)


def test_other_column_widths_parse_the_same():
    """Nothing is hard-coded: a layout with different widths (and a full-index date format) still parses."""
    rows = [(f, c, k, "2023-02-03", p) for f, c, k, _, p in FORM_ROWS]
    text = fixed_width(FORM_TITLES, (20, 45, 9, 14), rows)
    entries, _, _ = parse_index(text, name="form.idx")
    assert [(e.form, e.company, e.cik) for e in entries] == [(r[0], r[1], r[2]) for r in FORM_ROWS]
    assert entries[0].published_at == dt.date(2023, 2, 3)  # full-index: published_at is the date filed


def test_company_idx_has_name_first():
    titles = ("Company Name", "Form Type", "CIK", "Date Filed", "File Name")
    rows = [(c, f, k, d, p) for f, c, k, d, p in FORM_ROWS]
    entries, _, _ = parse_index(fixed_width(titles, (62, 12, 12, 12), rows), name="company.20230203.idx")
    assert [(e.company, e.form) for e in entries] == [(r[0], r[1]) for r in rows]


def test_overlong_name_that_shifts_the_columns_is_read_from_the_right():
    long_name = "X" * 70  # wider than its 62-character column: pushes CIK, date and file name right
    text = fixed_width(FORM_TITLES, (12, 62, 12, 12), [])
    text += f"8-K         {long_name} 320193      20230203    edgar/data/320193/0000320193-23-000009.txt\n"
    entries, _, _ = parse_index(text, name="form.20230203.idx")
    assert [(e.form, e.company, e.cik, e.accession) for e in entries] == [
        ("8-K", long_name, "320193", "0000320193-23-000009")
    ]


MASTER = """Description:           Master Index of EDGAR Dissemination Feed
Last Data Received:    March 31, 2023
Comments:              webmaster@sec.gov
Anonymous FTP:         ftp://ftp.sec.gov/edgar/
Cloud HTTP:            https://www.sec.gov/Archives/

CIK|Company Name|Form Type|Date Filed|Filename
--------------------------------------------------------------------------------
320193|Apple Inc.|10-Q|2023-02-03|edgar/data/320193/0000320193-23-000006.txt
1234567|Cook Timothy D|4|2023-01-10|edgar/data/1234567/0000320193-23-000002.txt
50863|INTEL CORP|8-K|2023-04-27|edgar/data/50863/0000050863-23-000030.txt
"""


def test_master_idx_is_pipe_delimited_and_filtered_to_the_window():
    entries, days, lines = parse_index(
        MASTER, name="master.idx", start=dt.date(2023, 1, 1), end=dt.date(2023, 3, 31)
    )
    assert lines == 3
    assert days == {dt.date(2023, 2, 3), dt.date(2023, 1, 10), dt.date(2023, 4, 27)}
    assert [(e.cik, e.company, e.form, e.date_filed.isoformat(), e.accession) for e in entries] == [
        ("320193", "Apple Inc.", "10-Q", "2023-02-03", "0000320193-23-000006"),
        ("1234567", "Cook Timothy D", "4", "2023-01-10", "0000320193-23-000002"),
    ]


def test_read_index_file_gzip_and_plain_agree(tmp_path: Path):
    text = fixed_width(FORM_TITLES, (12, 62, 12, 12), FORM_ROWS)
    plain = tmp_path / "plain" / "form.20230203.idx"
    gz = tmp_path / "gz" / "form.20230203.idx.gz"
    plain.parent.mkdir()
    gz.parent.mkdir()
    plain.write_text(text)
    gz.write_bytes(gzip.compress(text.encode(), mtime=0))
    a, b = read_index_file(plain), read_index_file(gz)
    assert a.entries == b.entries
    assert a.day == dt.date(2023, 2, 3)
    assert a.kind == "form"
    assert a.source.sha256 != b.source.sha256
    assert a.source.sha256.startswith("sha256:")


def test_find_index_files_ignores_other_files(tmp_path: Path):
    names = (
        "2023/QTR1/form.20230203.idx",
        "2023/QTR1/master.20230203.idx.gz",
        "2023/QTR1/crawler.20230203.idx",
        "notes.txt",
        "full/form.idx",
        "full/form.gz",
        "full/form.Z",
        "full/master.gz",
        "full/master.zip",
    )
    for rel in names:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    assert [rel for _, rel in find_index_files(tmp_path)] == [
        "2023/QTR1/form.20230203.idx",
        "2023/QTR1/master.20230203.idx.gz",
        "full/form.idx",  # preferred over its form.gz copy
        "full/master.gz",
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            b"<!DOCTYPE html>\n<html><body>Your Request Originates from an Undeclared Automated Tool</body></html>",
            "HTML page",
        ),
        (
            PREAMBLE.encode()
            + b"10-Q  Apple Inc.  320193  20230203  edgar/data/320193/0000320193-23-000006.txt\n",
            "no index header",
        ),
        (b"", "no index header"),
        (b"\x1f\x9d\x90compressed", "compress (.Z)"),
        (gzip.compress(MASTER.encode())[:40], "gzip data is damaged or truncated"),
    ],
    ids=["html-error-page", "no-header", "empty", "dot-Z", "truncated-gzip"],
)
def test_bad_index_files_raise_one_error_naming_the_file(tmp_path: Path, content: bytes, expected: str):
    path = tmp_path / "master.20230203.idx"
    path.write_bytes(content)
    with pytest.raises(ReleaseError) as err:
        read_index_file(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_bad_line_is_named_with_its_number():
    bad = MASTER.replace("50863|INTEL CORP|8-K|2023-04-27", "50863|INTEL CORP|8-K|2023-13-45")
    with pytest.raises(ReleaseError, match=r"master\.idx: line 11: field 'Date Filed' is '2023-13-45'"):
        parse_index(bad, name="master.idx")
    bad = MASTER.replace("edgar/data/50863/0000050863-23-000030.txt", "edgar/data/50863/garbage.txt")
    with pytest.raises(ReleaseError, match="line 11: field 'File Name'"):
        parse_index(bad, name="master.idx")
