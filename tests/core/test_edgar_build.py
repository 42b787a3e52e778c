"""The EDGAR release builder on small synthetic inputs: merge rules, flags, dissemination, determinism, errors."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import evalkit_core.edgar as edgar
from evalkit_core import ConfigError, Release, ReleaseError, nyse, with_entry
from evalkit_core._edgar_rules import NEW_YORK
from evalkit_core.edgar import build_edgar_release

START, END = dt.date(2023, 2, 1), dt.date(2023, 2, 3)

FORM_HEADER = "Form Type   Company Name                                                  CIK         Date Filed  File Name"


def form_line(form: str, company: str, cik: str, date: str, accession: str) -> str:
    return f"{form:<12}{company:<62}{cik:<12}{date:<12}edgar/data/{cik}/{accession}.txt"


def write_index(root: Path) -> None:
    """Daily index files for 2023-02-03 only (2023-02-01 and 02-02 are not covered by any index file)."""
    root.mkdir(parents=True, exist_ok=True)
    rows = [
        ("10-Q", "Apple Inc.", "320193", "20230203", "0000320193-23-000006"),
        ("4", "Apple Inc.", "320193", "20230203", "0000320193-23-000010"),
        ("4", "COOK TIMOTHY D", "1214156", "20230203", "0000320193-23-000010"),
        ("8-K", "OTHER CO", "999", "20230203", "0000000999-23-000001"),
        ("8-K", "INTEL CORP", "50863", "20230203", "0000050863-23-000011"),
    ]
    text = "Description:           Daily Index of EDGAR Dissemination Feed by Form Type\n\n\n"
    text += FORM_HEADER + "\n" + "-" * 140 + "\n" + "\n".join(form_line(*r) for r in rows) + "\n"
    (root / "form.20230203.idx").write_text(text)
    master = (
        "Description: Master Index\n\nCIK|Company Name|Form Type|Date Filed|File Name\n" + "-" * 80 + "\n"
    )
    master += "999|OTHER CO|8-K|20230203|edgar/data/999/0000000999-23-000001.txt\n"
    (root / "master.20230203.idx").write_text(master)


def doc(
    cik: int, name: str, rows: Sequence[tuple[str, str, str, str]], former: Sequence[dict[str, str]] = ()
) -> dict[str, Any]:
    return {
        "cik": f"{cik:010d}",
        "name": name,
        "tickers": [],
        "formerNames": list(former),
        "filings": {
            "recent": {
                "accessionNumber": [r[0] for r in rows],
                "filingDate": [r[1] for r in rows],
                "form": [r[2] for r in rows],
                "acceptanceDateTime": [r[3] for r in rows],
            },
            "files": [],
        },
    }


def write_submissions(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    apple = [
        (
            "0000320193-23-000006",
            "2023-02-03",
            "10-Q",
            "2023-02-02T23:01:30.000Z",
        ),  # after hours: disseminated
        ("0000320193-23-000010", "2023-02-03", "4", "2023-02-03T23:00:00.000Z"),  # 18:00 NY: 22:00 cut-off
        ("0000320193-23-000008", "2023-02-02", "8-K", "2023-02-02T21:00:00.000Z"),  # day without index
        (
            "0000320193-23-000009",
            "2023-02-03",
            "8-K",
            "2023-02-03T15:00:00.000Z",
        ),  # covered day, not in index
        ("0000320193-23-000001", "2023-01-05", "8-K", "2023-01-05T15:00:00.000Z"),  # outside the window
    ]
    intel = [
        ("0000050863-23-000011", "2023-02-03", "8-K", "2023-02-02T19:00:00.000Z")
    ]  # fits only as NY time
    (root / "CIK0000320193.json").write_text(json.dumps(doc(320193, "Apple Inc.", apple)))
    former = [
        {"name": "INTEL CORP (OLD)", "from": "1990-01-01T05:00:00.000Z", "to": "2023-02-04T05:00:00.000Z"}
    ]
    (root / "CIK0000050863.json").write_text(json.dumps(doc(50863, "Intel Corporation", intel, former)))


def write_tickers(path: Path) -> None:
    path.write_text(json.dumps({"0": {"cik_str": 320193, "ticker": "AAPL", "title": "Apple Inc."}}))


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    write_index(tmp_path / "index")
    write_submissions(tmp_path / "subs")
    write_tickers(tmp_path / "company_tickers.json")
    return {
        "index": tmp_path / "index",
        "submissions": tmp_path / "subs",
        "tickers": tmp_path / "company_tickers.json",
    }


def build(out: Path, inputs: dict[str, Path], **kw: Any) -> edgar.EdgarBuild:
    return build_edgar_release(
        out, name="t", start=kw.pop("start", START), end=kw.pop("end", END), **inputs, **kw
    )


def answer(release: Release) -> dict[str, dict[str, Any]]:
    return {r["accession"]: r for r in release.answer_key.to_dicts()}


def test_all_is_pinned():
    assert edgar.__all__ == sorted(edgar.__all__, key=lambda s: (not s.isupper(), s[0].islower(), s))
    assert set(edgar.__all__) == {
        "BUILDER",
        "DISSEMINATION_RULE",
        "EXTENDED_CUTOFF_FORMS",
        "FILING_DATE_RULE",
        "FLAG_REASONS",
        "SEC_GENERATED_FORMS",
        "AcceptanceCheck",
        "Company",
        "EdgarBuild",
        "FormerName",
        "IndexEntry",
        "IndexFile",
        "InputFile",
        "SubmissionFiling",
        "Submissions",
        "TickerMap",
        "assemble_filings",
        "build_edgar_release",
        "check_acceptance",
        "expected_filing_date",
        "find_index_files",
        "is_sec_generated",
        "parse_index",
        "read_index_file",
        "read_submissions",
        "read_ticker_map",
    }


def test_merge_rules(tmp_path: Path, inputs: dict[str, Path]):
    result = build(tmp_path / "rel", inputs)
    release = Release.load(result.path)
    ak = answer(release)
    # Index universe for 02-03, submissions for 02-02; the covered-day row missing from the index is dropped.
    assert sorted(ak) == [
        "0000000999-23-000001",
        "0000050863-23-000011",
        "0000320193-23-000006",
        "0000320193-23-000008",
        "0000320193-23-000010",
    ]
    prov = result.provenance
    assert prov["merge"]["submissions_rows_not_in_index"] == 1
    assert prov["counts"]["by_source"] == {"index": 1, "index+submissions": 3, "submissions": 1}
    assert prov["merge"]["multi_cik_accessions"] == 1
    # The Form 4 listed under the issuer and the insider takes the CIK whose submissions document lists it.
    assert ak["0000320193-23-000010"]["cik"] == "320193"
    assert ak["0000320193-23-000010"]["issuer"] == "Apple Inc."
    # Index-only row: the index's name, no stamp, no ticker.
    other = ak["0000000999-23-000001"]
    assert (other["issuer"], other["cik"], other["acceptance_at"], other["ticker"]) == (
        "OTHER CO",
        "999",
        None,
        None,
    )
    # Issuer as of the filing date from formerNames; ticker from the map.
    assert ak["0000050863-23-000011"]["issuer"] == "INTEL CORP (OLD)"
    assert ak["0000320193-23-000006"]["ticker"] == "AAPL"
    # published_at is the index day; a submissions-only row uses its filing date.
    assert ak["0000320193-23-000008"]["published_at"] == dt.date(2023, 2, 2)
    assert result.rows == 5
    assert dict(result.by_form) == {"10-Q": 1, "4": 1, "8-K": 3}


def test_flags_and_dissemination_in_arms_and_answer_key(tmp_path: Path, inputs: dict[str, Path]):
    result = build(tmp_path / "rel", inputs)
    release = Release.load(result.path)
    main = {r["accession"]: r for r in release.arm("main").to_dicts()}
    ak = answer(release)
    intel = "0000050863-23-000011"
    assert main[intel]["acceptance_at"] is None
    assert ak[intel]["acceptance_at"] == dt.datetime(2023, 2, 2, 19, 0, tzinfo=dt.UTC)
    assert ak[intel]["flags"] == ["stamp_reads_as_new_york"]
    assert result.flags_by_reason == {"stamp_reads_as_new_york": 1}
    assert result.provenance["flags"]["reasons"]["stamp_reads_as_new_york"].startswith("the stamp fits")
    apple = "0000320193-23-000006"
    assert main[apple]["disseminated_at"] == dt.datetime(2023, 2, 3, 11, 0, tzinfo=dt.UTC)
    # Form 4 at 18:00 keeps its filing date, but dissemination is taken conservatively: next SEC business day 06:00
    assert main["0000320193-23-000010"]["disseminated_at"] is not None
    shifted = {r["row_key"]: r for r in release.arm("shifted").to_dicts()}
    # Shifted onto the image of Friday 2023-02-03 on the NYSE calendar ten years on, at the same 06:00 New York.
    image = release.shift.session_date(dt.date(2023, 2, 3))
    assert nyse().session_on(image) is not None
    assert shifted[release.masks.row_key(apple)]["disseminated_at"] == dt.datetime.combine(
        image, dt.time(6), tzinfo=NEW_YORK
    ).astimezone(dt.UTC)
    acc = result.provenance["acceptance"]
    assert (acc["rows_with_stamp_in_sources"], acc["rows_with_acceptance_at"], acc["rows_flagged"]) == (
        4,
        3,
        1,
    )
    assert acc["coverage"] == 0.6
    assert result.provenance["dissemination"]["rows_with_disseminated_at"] == 2  # the 10-Q and the late Form 4
    assert result.pit_entries_moved == 0


def test_row_counts_equal_and_keys_reveal_nothing(tmp_path: Path, inputs: dict[str, Path]):
    release = Release.load(build(tmp_path / "rel", inputs).path)
    keys = [set(release.arm(a).get_column("row_key").to_list()) for a in ("main", "redacted", "shifted")]
    assert keys[0] == keys[1] == keys[2]
    assert len(keys[0]) == 5
    for k in keys[0]:
        assert "320193" not in k
        assert "2023" not in k
    assert (
        "accession" not in release.arm("redacted").columns
        or release.arm("redacted").get_column("accession").null_count() == 5
    )


def test_same_inputs_give_byte_identical_release(tmp_path: Path, inputs: dict[str, Path]):
    a = build(tmp_path / "a", inputs, key_seed="a given seed")
    # Copy the inputs elsewhere: names in provenance are relative, so the bytes must not change.
    moved: dict[str, Path] = {}
    for k, p in inputs.items():
        dst = tmp_path / "copy" / p.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if p.is_dir():
            dst.mkdir()
            for f in p.iterdir():
                (dst / f.name).write_bytes(f.read_bytes())
        else:
            dst.write_bytes(p.read_bytes())
        moved[k] = dst
    b = build(tmp_path / "b", moved, key_seed="a given seed")
    assert a.content_digest == b.content_digest
    for rel in (
        "release.json",
        "arms/main.jsonl",
        "arms/redacted.jsonl",
        "arms/shifted.jsonl",
        "answer_key.jsonl",
    ):
        assert (a.path / rel).read_bytes() == (b.path / rel).read_bytes(), rel
    names = [(i["kind"], i["name"]) for i in a.provenance["inputs"]]
    assert names == [
        ("index", "form.20230203.idx"),
        ("index", "master.20230203.idx"),
        ("submissions", "CIK0000050863.json"),
        ("submissions", "CIK0000320193.json"),
        ("tickers", "company_tickers.json"),
    ]


def test_without_a_seed_the_mask_secret_is_drawn_afresh(tmp_path: Path, inputs: dict[str, Path]):
    """No seed: os.urandom gives one, so nobody holding the public inputs rebuilds the masks (and two builds
    differ in their masks, row keys and secret digests, not in what the main arm says)."""
    a, b = build(tmp_path / "a", inputs), build(tmp_path / "b", inputs)
    ra, rb = Release.load(a.path), Release.load(b.path)
    assert ra.masks.secret_sha256 != rb.masks.secret_sha256
    assert ra.masks.secret != rb.masks.secret
    assert ra.arm("main").drop("row_key").sort("accession").equals(rb.arm("main").drop("row_key").sort("accession"))
    assert (a.path / "answer_key.masks.json").read_bytes() != (b.path / "answer_key.masks.json").read_bytes()
    seeded = build(tmp_path / "c", inputs, key_seed="a given seed")
    assert Release.load(seeded.path).masks.secret_sha256 not in {ra.masks.secret_sha256, rb.masks.secret_sha256}


def test_forms_filter(tmp_path: Path, inputs: dict[str, Path]):
    result = build(tmp_path / "rel", inputs, forms=["8-K", " 10-Q "])
    assert dict(result.by_form) == {"10-Q": 1, "8-K": 3}
    assert result.provenance["forms_requested"] == ["10-Q", "8-K"]


def test_index_only_and_submissions_only(tmp_path: Path, inputs: dict[str, Path]):
    only_index = build(tmp_path / "i", {"index": inputs["index"]})
    assert only_index.rows == 4
    assert only_index.with_acceptance_at == 0
    only_subs = build(tmp_path / "s", {"submissions": inputs["submissions"]})
    assert only_subs.rows == 5  # 02-02 8-K, 02-03 10-Q, Form 4, 8-K and Intel's 8-K


def test_veterans_day_dissemination_moves_the_pit_entry(tmp_path: Path):
    rows = [
        (
            "0000000001-22-000001",
            "2022-11-14",
            "8-K",
            "2022-11-10T23:00:00.000Z",
        ),  # Thu 18:00 NY -> Mon 11-14
        (
            "0000000001-22-000002",
            "2022-11-10",
            "8-K",
            "2022-11-10T15:00:00.000Z",
        ),  # intraday: nothing to move
    ]
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / "CIK0000000001.json").write_text(json.dumps(doc(1, "ONE CO", rows)))
    result = build_edgar_release(
        tmp_path / "rel",
        name="vd",
        start=dt.date(2022, 11, 1),
        end=dt.date(2022, 11, 30),
        submissions=tmp_path / "subs",
    )
    assert result.pit_entries_moved == 1
    assert result.provenance["dissemination"]["pit_entries_moved_by_session"] == {"2022-11-11->2022-11-14": 1}
    main = Release.load(result.path).arm("main")
    pit = with_entry(main, "pit").filter(pl.col("accession") == "0000000001-22-000001")
    assert pit.get_column("entry_date").to_list() == [dt.date(2022, 11, 14)]


def test_empty_window_is_an_error_and_writes_nothing(tmp_path: Path, inputs: dict[str, Path]):
    with pytest.raises(ReleaseError, match=r"no filings with a filing date in 2024-01-01\.\.2024-01-31"):
        build(tmp_path / "rel", inputs, start=dt.date(2024, 1, 1), end=dt.date(2024, 1, 31))
    with pytest.raises(ReleaseError, match="no filings of form\\(s\\) S-1 with a filing date"):
        build(tmp_path / "rel", inputs, forms=["S-1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["company_tickers.json", "index", "subs"]


def test_bad_input_leaves_no_partial_release(tmp_path: Path, inputs: dict[str, Path]):
    (inputs["index"] / "form.20230206.idx").write_text(
        "<html><body>Request Rate Threshold Exceeded</body></html>"
    )
    with pytest.raises(ReleaseError, match=r"form\.20230206\.idx: an HTML page"):
        build(tmp_path / "rel", inputs)
    assert not (tmp_path / "rel").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rel")]


def test_existing_output_needs_force(tmp_path: Path, inputs: dict[str, Path]):
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "keep.txt").write_text("x")
    with pytest.raises(ReleaseError, match="not empty"):
        build(tmp_path / "rel", inputs)
    assert build(tmp_path / "rel", inputs, overwrite=True).rows == 5
    assert not (tmp_path / "rel" / "keep.txt").exists()


def test_options_are_checked():
    with pytest.raises(ConfigError, match="at least one of --submissions and --index"):
        edgar.assemble_filings(start=START, end=END)
    with pytest.raises(ConfigError, match="after --end"):
        edgar.assemble_filings(start=END, end=START, index=Path("x"))
