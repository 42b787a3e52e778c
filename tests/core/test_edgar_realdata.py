"""A release built from the real SEC submissions sample in ../shared/data (skipped where it is absent)."""

from __future__ import annotations

import datetime as dt
import json
import zipfile
from pathlib import Path

import polars as pl
import pytest

from evalkit_core import Release, row_key_for, with_entry
from evalkit_core.edgar import EdgarBuild, build_edgar_release

DATA = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data").resolve()
SUBMISSIONS = DATA / "edgar-submissions-sample"
TICKERS = DATA / "company_tickers.json"
START, END = dt.date(2022, 11, 1), dt.date(2023, 3, 31)
APPLE_10Q = "0000320193-23-000006"
FILES = (
    "release.json",
    "arms/main.jsonl",
    "arms/redacted.jsonl",
    "arms/shifted.jsonl",
    "answer_key.jsonl",
    "answer_key.masks.json",
)

pytestmark = [
    pytest.mark.realdata,
    pytest.mark.skipif(not SUBMISSIONS.is_dir(), reason=f"real EDGAR sample not present at {SUBMISSIONS}"),
]


def _build(out: Path, submissions: Path = SUBMISSIONS) -> EdgarBuild:
    return build_edgar_release(
        out, name="edgar-sample-2022q4-2023q1", start=START, end=END, submissions=submissions, tickers=TICKERS,
        key_seed="a given seed",  # same inputs and seed, same bytes (without one the mask secret is drawn)
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[EdgarBuild, EdgarBuild]:
    base = tmp_path_factory.mktemp("edgar-real")
    return _build(base / "a"), _build(base / "b")


def test_window_counts(built: tuple[EdgarBuild, EdgarBuild]):
    a, _ = built
    assert a.rows == 1480
    assert a.by_form["8-K"] == 142
    assert a.by_form["8-K/A"] == 7
    manifest = json.loads((a.path / "release.json").read_text())
    assert manifest["row_counts"]["rows"] == 1480
    assert set(manifest["row_counts"]["files"].values()) == {1480}
    release = Release.load(a.path)
    assert [release.arm(x).height for x in ("main", "redacted", "shifted")] == [1480, 1480, 1480]
    assert release.answer_key.height == 1480
    issuers = release.answer_key.get_column("cik").n_unique()
    assert issuers == 28


def test_two_builds_are_byte_identical_with_stable_row_keys(built: tuple[EdgarBuild, EdgarBuild]):
    a, b = built
    for rel in FILES:
        assert (a.path / rel).read_bytes() == (b.path / rel).read_bytes(), rel
    keys_a = Release.load(a.path).arm("main").select("accession", "row_key").sort("accession")
    keys_b = Release.load(b.path).arm("main").select("accession", "row_key").sort("accession")
    assert keys_a.equals(keys_b)
    masks = Release.load(a.path).masks
    assert keys_a.filter(pl.col("accession") == APPLE_10Q).get_column("row_key").item() == row_key_for(
        APPLE_10Q, masks.secret
    )


def test_apple_10q_entries_under_each_clock(built: tuple[EdgarBuild, EdgarBuild]):
    release = Release.load(built[0].path)
    main = release.arm("main")
    row = main.filter(pl.col("accession") == APPLE_10Q)
    assert row.get_column("acceptance_at").item() == dt.datetime(2023, 2, 2, 23, 1, 30, tzinfo=dt.UTC)
    assert row.get_column("partition_date").item() == dt.date(2023, 2, 3)
    entries = {c: with_entry(row, c).get_column("entry_date").item() for c in ("leaky", "dump", "pit")}
    assert entries == {"leaky": dt.date(2023, 2, 3), "dump": dt.date(2023, 2, 6), "pit": dt.date(2023, 2, 3)}
    assert row.get_column("issuer").item() == "Apple Inc."
    ak = release.answer_key.filter(pl.col("accession") == APPLE_10Q)
    assert ak.get_column("ticker").item() == "AAPL"


def test_intel_and_nikola_exceptions_are_flagged(built: tuple[EdgarBuild, EdgarBuild]):
    a, _ = built
    release = Release.load(a.path)
    ak = release.answer_key
    flagged = ak.filter(pl.col("flags").list.contains("stamp_reads_as_new_york"))
    assert set(flagged.get_column("cik").unique().to_list()) == {"50863", "1731289"}  # Intel, Nikola
    intel_10k = ak.filter(pl.col("accession") == "0000050863-23-000006")
    assert intel_10k.get_column("flags").item().to_list() == ["stamp_reads_as_new_york"]
    assert intel_10k.get_column("acceptance_at").item() == dt.datetime(2023, 1, 26, 18, 31, 20, tzinfo=dt.UTC)
    main = release.arm("main").filter(pl.col("row_key").is_in(flagged.get_column("row_key").implode()))
    assert main.get_column("acceptance_at").null_count() == flagged.height
    # Their pit entry falls back to the dump rule.
    pit = with_entry(main, "pit")
    assert pit.get_column("known_at_fallback").all()
    reasons = a.flags_by_reason
    assert reasons["stamp_reads_as_new_york"] == flagged.height == 11
    sec_forms = ak.filter(pl.col("form").is_in(["EFFECT", "UPLOAD", "NO ACT"])).height
    assert reasons["sec_generated_form"] == sec_forms > 0
    assert a.provenance["acceptance"]["rows_flagged"] == sum(reasons.values())


def test_provenance_records_inputs_and_rules(built: tuple[EdgarBuild, EdgarBuild]):
    prov = built[0].provenance
    subs = [i for i in prov["inputs"] if i["kind"] == "submissions"]
    assert len(subs) == 28
    assert all(i["sha256"].startswith("sha256:") and i["name"].startswith("CIK") for i in subs)
    assert [i["name"] for i in prov["inputs"] if i["kind"] == "tickers"] == ["company_tickers.json"]
    assert prov["tickers"]["point_in_time"] is False
    assert prov["counts"]["by_form"]["8-K"] == 142
    assert prov["window"]["start"] == "2022-11-01"
    assert "06:00 New York" in prov["dissemination"]["rule"]
    assert prov["dissemination"]["pit_entries_moved"] == built[0].pit_entries_moved


def test_zip_of_the_sample_gives_the_same_rows(tmp_path: Path, built: tuple[EdgarBuild, EdgarBuild]):
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(SUBMISSIONS.glob("CIK*.json")):
            zf.write(p, p.name)
    z = _build(tmp_path / "z", archive)
    for rel in FILES[1:]:
        assert (z.path / rel).read_bytes() == (built[0].path / rel).read_bytes(), rel
