"""The release format: writing, loading, filtering, the control arms, bad input, and the Parquet cache."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evalkit_core._release_frames as release_mod
from evalkit_core import (
    ANSWER_KEY_FILE,
    ARM_FILES,
    ARMS,
    MANIFEST_FILE,
    MASKS_FILE,
    RELEASE_FORMAT,
    Filing,
    Release,
    ReleaseError,
    check_release,
    digest,
    digest_bytes,
    entry_session,
    file_digest,
    nyse,
    row_key_for,
    with_entry,
    write_release,
)
from evalkit_core._edgar_rules import NEW_YORK
from evalkit_core._release import make_masks
from strategies import filings_args

UTC = dt.UTC
D = dt.date


def Z(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s).replace(tzinfo=UTC)


START, END = D(2022, 11, 1), D(2024, 3, 31)
PROVENANCE = {"sources": ["test fixture"], "built_by": "tests/core/test_release.py"}

FILINGS = [
    Filing(
        accession="0000320193-22-000101",
        cik="0000320193",
        issuer="ACME WIDGETS INC",
        form="10-Q",
        partition_date=D(2022, 11, 15),
        published_at=D(2022, 11, 15),
        acceptance_at=Z("2022-11-15T21:05:00"),
        ticker="ACMW",
        url="https://www.sec.gov/Archives/edgar/data/320193/000032019322000101/0000320193-22-000101-index.htm",
    ),
    Filing(
        accession="0001318605-22-000202",
        cik="0001318605",
        issuer="ZEPHYR BIOTHERAPEUTICS CORP",
        form="8-K",
        partition_date=D(2022, 11, 18),
        published_at=D(2022, 11, 21),
        acceptance_at=None,
        acceptance_real=Z("2022-11-18T22:40:00"),
        ticker="ZPHR",
        url="https://www.sec.gov/Archives/edgar/data/1318605/000131860522000202/0001318605-22-000202-index.htm",
        flags=("acceptance_after_cutoff",),
    ),
    Filing(
        accession="0000789019-23-000303",
        cik="0000789019",
        issuer="NORTHWIND TRADERS LLC",
        form="4",
        partition_date=D(2023, 3, 10),
        published_at=D(2023, 3, 10),
        acceptance_at=Z("2023-03-10T14:29:59"),
        disseminated_at=Z("2023-03-10T14:31:00"),
        url="https://www.sec.gov/Archives/edgar/data/789019/000078901923000303/0000789019-23-000303-index.htm",
    ),
    Filing(
        accession="0000789019-24-000404",
        cik="0000789019",
        issuer="NORTHWIND TRADERS LLC",
        form="8-K",
        partition_date=D(2024, 2, 29),
        published_at=D(2024, 2, 29),
        acceptance_at=Z("2024-02-29T23:10:00"),
        url="https://www.sec.gov/Archives/edgar/data/789019/000078901924000404/0000789019-24-000404-index.htm",
    ),
    Filing(
        accession="0001652044-23-000505",
        cik="0001652044",
        issuer="Ünïcødé Holdings AG",
        form="SC 13G",
        partition_date=D(2023, 1, 3),
        published_at=D(2023, 1, 3),
        acceptance_at=Z("2023-01-03T11:00:00"),
        ticker="UNIC",
        url="https://www.sec.gov/Archives/edgar/data/1652044/000165204423000505/0001652044-23-000505-index.htm",
    ),
]
MASKS = make_masks(FILINGS, start=START, end=END)  # what write_release derives for these filings
KEYS = {f.accession: MASKS.row_key(f.accession) for f in FILINGS}


def make(root: Path, filings: list[Filing] | None = None, **kw: Any) -> Path:
    args: dict[str, Any] = {"name": "test-release", "start": START, "end": END, "provenance": PROVENANCE}
    args.update(kw)
    return write_release(root, filings=FILINGS if filings is None else filings, **args)


@pytest.fixture
def rel(tmp_path: Path) -> Path:
    return make(tmp_path / "rel")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_bytes().splitlines()]


# --- writing --------------------------------------------------------------------------------------------------


def test_layout_and_manifest(rel: Path) -> None:
    files = sorted(str(p.relative_to(rel)) for p in rel.rglob("*") if p.is_file())
    assert files == sorted([MANIFEST_FILE, ANSWER_KEY_FILE, MASKS_FILE, *ARM_FILES.values()])
    m = json.loads((rel / MANIFEST_FILE).read_bytes())
    assert m["format"] == RELEASE_FORMAT
    assert m["name"] == "test-release"
    assert m["window"] == {"start": "2022-11-01", "end": "2024-03-31"}
    assert m["forms"] == ["10-Q", "4", "8-K", "SC 13G"]
    assert m["row_counts"]["rows"] == 5
    assert m["row_counts"]["by_form"] == {"10-Q": 1, "4": 1, "8-K": 2, "SC 13G": 1}
    assert m["row_counts"]["with_acceptance_at"] == 4
    assert m["row_counts"]["with_disseminated_at"] == 1
    assert m["provenance"] == PROVENANCE
    for relpath, d in m["files"].items():
        assert d == "sha256:" + hashlib.sha256((rel / relpath).read_bytes()).hexdigest()
    without = {k: v for k, v in m.items() if k != "content_digest"}
    assert m["content_digest"] == digest(without)
    assert check_release(rel) == []
    assert not [p for p in rel.parent.iterdir() if p.name.startswith(".")]  # no temp dir left


def test_rows_are_sorted_and_canonical(rel: Path) -> None:
    main = lines(rel / ARM_FILES["main"])
    assert [r["partition_date"] for r in main] == [
        "2022-11-15",
        "2022-11-18",
        "2023-01-03",
        "2023-03-10",
        "2024-02-29",
    ]
    for relpath in (*ARM_FILES.values(), ANSWER_KEY_FILE):
        for raw in (rel / relpath).read_bytes().splitlines():
            assert (
                raw
                == json.dumps(
                    json.loads(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=False
                ).encode()
            )


def test_main_arm_rows(rel: Path) -> None:
    by_key = {r["row_key"]: r for r in lines(rel / ARM_FILES["main"])}
    r = by_key[KEYS["0000320193-22-000101"]]
    assert r == {
        "row_key": KEYS["0000320193-22-000101"],
        "form": "10-Q",
        "title": "ACME WIDGETS INC 10-Q",
        "issuer": "ACME WIDGETS INC",
        "cik": "0000320193",
        "partition_date": "2022-11-15",
        "published_at": "2022-11-15",
        "acceptance_at": "2022-11-15T21:05:00Z",
        "accession": "0000320193-22-000101",
        "url": FILINGS[0].url,
    }
    flagged = by_key[KEYS["0001318605-22-000202"]]
    assert flagged["acceptance_at"] is None  # the flagged stamp is not served
    assert by_key[KEYS["0000789019-23-000303"]]["disseminated_at"] == "2023-03-10T14:31:00Z"


def test_answer_key_rows(rel: Path) -> None:
    ak = {r["row_key"]: r for r in lines(rel / ANSWER_KEY_FILE)}
    z = ak[KEYS["0001318605-22-000202"]]
    assert z["issuer"] == "ZEPHYR BIOTHERAPEUTICS CORP"
    assert z["cik"] == "0001318605"
    assert z["ticker"] == "ZPHR"
    assert z["accession"] == "0001318605-22-000202"
    assert z["acceptance_at"] == "2022-11-18T22:40:00Z"  # the real stamp goes to the answer key
    assert z["flags"] == ["acceptance_after_cutoff"]
    assert ak[KEYS["0000789019-23-000303"]]["ticker"] is None


def test_row_key_is_a_keyed_hash_and_stable() -> None:
    import hmac

    acc = "0000320193-22-000101"
    secret = MASKS.secret
    k = row_key_for(acc, secret)
    assert k == "r" + hmac.new(secret, b"evalkit-row-key/2\x00" + acc.encode(), hashlib.sha256).hexdigest()[:20]
    assert k == row_key_for(acc, secret) == KEYS[acc]
    # Not the old unkeyed hash, which anyone could compute from an accession number.
    assert k != "r" + hashlib.sha256(b"evalkit-row-key/1\x00" + acc.encode()).hexdigest()[:20]
    assert row_key_for(acc, bytes(32)) != k  # another key, another row key
    assert row_key_for("0000320193-22-000102", secret) != k
    assert "320193" not in k
    assert len({row_key_for(f"0000000001-22-{i:06d}", secret) for i in range(2000)}) == 2000
    # The key comes from the filings and the key seed: same inputs, same key; another seed, another key.
    assert make_masks(list(reversed(FILINGS)), start=START, end=END).secret == secret
    assert make_masks(FILINGS, start=START, end=END, key_seed="private").secret != secret
    assert make_masks(FILINGS[:-1], start=START, end=END).secret != secret


IDENTITY = [
    s
    for f in FILINGS
    for s in (f.issuer, f.cik, f.cik.lstrip("0"), f.accession, f.accession.replace("-", ""), f.url, f.ticker)
    if s
] + ["ACME", "ZEPHYR", "NORTHWIND", "Ünïcødé", "sec.gov", "Archives"]


@pytest.mark.parametrize("arm", ["redacted", "shifted"])
def test_control_arms_carry_no_identity(rel: Path, arm: str) -> None:
    raw = (rel / ARM_FILES[arm]).read_bytes()
    for needle in IDENTITY:
        assert needle.encode() not in raw, (arm, needle)
        assert json.dumps(needle).encode() not in raw, (arm, needle)  # escaped form too
    for r in lines(rel / ARM_FILES[arm]):
        assert set(r) <= {
            "row_key",
            "form",
            "title",
            "partition_date",
            "published_at",
            "acceptance_at",
            "disseminated_at",
        }
        assert r["title"] == f"[ISSUER] {r['form']}"


def test_arms_share_row_keys_and_order(rel: Path) -> None:
    keys = {arm: [r["row_key"] for r in lines(rel / ARM_FILES[arm])] for arm in ARMS}
    keys["answer_key"] = [r["row_key"] for r in lines(rel / ANSWER_KEY_FILE)]
    assert keys["main"] == keys["redacted"] == keys["shifted"] == keys["answer_key"]
    assert sorted(keys["main"]) == sorted(KEYS.values())


def test_shifted_arm_moves_every_date_onto_the_nyse_calendar_a_secret_offset_on(rel: Path) -> None:
    red = {r["row_key"]: r for r in lines(rel / ARM_FILES["redacted"])}
    sh = {r["row_key"]: r for r in lines(rel / ARM_FILES["shifted"])}
    shift = Release.load(rel).shift
    cal = nyse()
    leap = sh[KEYS["0000789019-24-000404"]]  # a Thursday session, 29 February 2024, 18:10 New York
    image = shift.session_date(D(2024, 2, 29))
    assert cal.session_on(image) is not None and image.weekday() < 5
    # The offset is drawn from the mask secret: at least the table's length plus a year of sessions away.
    offset = cal.index_of(image) - cal.index_of(D(2024, 2, 29))
    assert offset == shift.session_offset
    assert abs(offset) >= len(shift.pairs) + 252
    assert leap["partition_date"] == leap["published_at"] == image.isoformat()
    assert Z(leap["acceptance_at"][:-1]).astimezone(NEW_YORK).time() == dt.time(18, 10)  # time of day kept
    d = sh[KEYS["0000789019-23-000303"]]  # accepted 1 s before the bell, disseminated 1 min after it
    bell = cal.session_on(shift.session_date(D(2023, 3, 10)))
    assert bell is not None
    assert d["partition_date"] == bell.date.isoformat()
    assert Z(d["acceptance_at"][:-1]) == bell.open - dt.timedelta(seconds=1)
    assert Z(d["disseminated_at"][:-1]) == bell.open + dt.timedelta(minutes=1)
    for k, r in sh.items():
        assert {
            f: v
            for f, v in r.items()
            if f not in ("partition_date", "published_at", "acceptance_at", "disseminated_at")
        } == {
            f: v
            for f, v in red[k].items()
            if f not in ("partition_date", "published_at", "acceptance_at", "disseminated_at")
        }
        real = D.fromisoformat(red[k]["partition_date"])
        assert r["partition_date"] == shift.date(real).isoformat()
        assert cal.session_on(D.fromisoformat(r["partition_date"])) is not None  # every one a real session
        assert abs((D.fromisoformat(r["partition_date"]) - real).days) > 365


def test_same_input_same_bytes_and_digest(tmp_path: Path) -> None:
    a = make(tmp_path / "a")
    b = make(tmp_path / "b", filings=list(reversed(FILINGS)))
    for relpath in (MANIFEST_FILE, ANSWER_KEY_FILE, MASKS_FILE, *ARM_FILES.values()):
        assert (a / relpath).read_bytes() == (b / relpath).read_bytes(), relpath
    assert Release.load(a).content_digest == Release.load(b).content_digest


def test_different_input_different_digest(tmp_path: Path) -> None:
    a = Release.load(make(tmp_path / "a"))
    b = Release.load(make(tmp_path / "b", filings=FILINGS[:-1]))
    c = Release.load(make(tmp_path / "c", name="other-name"))
    assert len({a.content_digest, b.content_digest, c.content_digest}) == 3


def test_refuses_non_empty_output_and_duplicates(tmp_path: Path) -> None:
    out = make(tmp_path / "rel")
    before = (out / MANIFEST_FILE).read_bytes()
    with pytest.raises(ReleaseError, match="not empty"):
        make(out)
    assert (out / MANIFEST_FILE).read_bytes() == before
    make(out, name="again", overwrite=True)
    assert json.loads((out / MANIFEST_FILE).read_bytes())["name"] == "again"
    with pytest.raises(ReleaseError, match=FILINGS[0].accession):
        make(tmp_path / "dup", filings=[FILINGS[0], FILINGS[0]])
    assert not (tmp_path / "dup").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel"]


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make(tmp_path / "rel", provenance={"x": float("nan")})
    assert list(tmp_path.iterdir()) == []


# --- loading --------------------------------------------------------------------------------------------------


def test_load_frames(rel: Path) -> None:
    r = Release.load(rel)
    assert r.name == "test-release"
    assert r.window == (START, END)
    assert r.forms == ("10-Q", "4", "8-K", "SC 13G")
    assert r.root == rel.resolve()
    main = r.arm("main")
    assert main.height == 5
    assert main.schema["partition_date"] == pl.Date
    assert main.schema["acceptance_at"] == pl.Datetime("us", "UTC")
    assert main.get_column("acceptance_at").null_count() == 1
    row = main.filter(pl.col("row_key") == KEYS["0000320193-22-000101"]).to_dicts()[0]
    assert row["acceptance_at"] == Z("2022-11-15T21:05:00")
    assert row["partition_date"] == D(2022, 11, 15)
    assert row["issuer"] == "ACME WIDGETS INC"
    for arm in ARMS:
        assert sorted(r.arm(arm).get_column("row_key").to_list()) == sorted(KEYS.values())
    assert sorted(r.answer_key.get_column("row_key").to_list()) == sorted(KEYS.values())
    assert r.arm("redacted").get_column("issuer").null_count() == 5
    sh = r.arm("shifted").filter(pl.col("row_key") == KEYS["0000789019-24-000404"]).to_dicts()[0]
    image = r.shift.session_date(D(2024, 2, 29))
    assert sh["partition_date"] == image
    assert sh["acceptance_at"] == r.shift.instant(Z("2024-02-29T23:10:00"))
    assert sh["acceptance_at"].astimezone(NEW_YORK).replace(tzinfo=None) == dt.datetime.combine(image, dt.time(18, 10))
    with pytest.raises(ReleaseError, match="unknown arm"):
        r.arm("answer_key")


def test_load_filters(rel: Path) -> None:
    r = Release.load(rel, forms=["8-K"])
    want = {KEYS["0001318605-22-000202"], KEYS["0000789019-24-000404"]}
    for arm in ARMS:
        assert set(r.arm(arm).get_column("row_key").to_list()) == want
    assert set(r.answer_key.get_column("row_key").to_list()) == want

    r = Release.load(rel, start="2022-11-18", end=D(2023, 3, 10))  # inclusive, on main-arm dates
    want = {KEYS["0001318605-22-000202"], KEYS["0001652044-23-000505"], KEYS["0000789019-23-000303"]}
    for arm in ARMS:
        assert set(r.arm(arm).get_column("row_key").to_list()) == want, arm
    assert set(r.answer_key.get_column("row_key").to_list()) == want

    r = Release.load(rel, forms=["8-K", "4"], start="2023-01-01")
    assert set(r.arm("shifted").get_column("row_key").to_list()) == {
        KEYS["0000789019-23-000303"],
        KEYS["0000789019-24-000404"],
    }
    assert Release.load(rel, start="2023-03-11", end="2024-02-28").arm("main").height == 0


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"forms": ["10-K"]}, "10-K"),
        ({"start": "2023-02-01", "end": "2023-01-01"}, "after"),
        ({"start": "2022-01-01"}, "outside"),
        ({"end": "2025-01-01"}, "outside"),
        ({"start": "not-a-date"}, "not-a-date"),
    ],
)
def test_bad_filters(rel: Path, kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ReleaseError, match=needle):
        Release.load(rel, **kw)


def test_clocks_run_on_a_loaded_arm(rel: Path) -> None:
    main = Release.load(rel).arm("main")
    out = with_entry(main, "pit")
    for r, entry in zip(main.to_dicts(), out.get_column("entry_date").to_list(), strict=True):
        assert entry == entry_session(r, "pit").date
    by_key = dict(
        zip(out.get_column("row_key").to_list(), out.get_column("entry_date").to_list(), strict=True)
    )
    assert by_key[KEYS["0000789019-23-000303"]] == D(2023, 3, 13)  # disseminated after the bell
    assert by_key[KEYS["0001318605-22-000202"]] == D(2022, 11, 22)  # fallback: published Monday 21st
    assert out.get_column("known_at_fallback").sum() == 1


@settings(max_examples=12)
@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True).flatmap(
        lambda ids: st.tuples(*[filings_args(i) for i in ids])
    )
)
def test_round_trip_property(args: tuple[dict[str, Any], ...]) -> None:
    import tempfile

    filings = [Filing(**a) for a in args]
    with tempfile.TemporaryDirectory() as d:
        root = write_release(
            Path(d) / "r",
            name="prop",
            start=D(2022, 11, 1),
            end=D(2023, 3, 31),
            filings=filings,
            provenance={},
        )
        r = Release.load(root, use_cache=False)
        assert check_release(root) == []
    main = {x["row_key"]: x for x in r.arm("main").to_dicts()}
    assert len(main) == len(filings)
    for f in filings:
        m = main[r.masks.row_key(f.accession)]
        assert (m["issuer"], m["cik"], m["form"], m["accession"], m["url"]) == (
            f.issuer,
            f.cik,
            f.form,
            f.accession,
            f.url,
        )
        assert m["partition_date"] == f.partition_date
        assert m["acceptance_at"] == f.acceptance_at
    assert r.manifest["row_counts"]["with_acceptance_at"] == sum(f.acceptance_at is not None for f in filings)


# --- bad input --------------------------------------------------------------------------------------------------


def rewrite(root: Path, relpath: str, data: bytes) -> None:
    """Replace a release file and re-seal the manifest, so only the content itself is wrong."""
    (root / relpath).write_bytes(data)
    m = json.loads((root / MANIFEST_FILE).read_bytes())
    m["files"][relpath] = file_digest(root / relpath)
    m["content_digest"] = digest({k: v for k, v in m.items() if k != "content_digest"})
    (root / MANIFEST_FILE).write_text(json.dumps(m, indent=2, sort_keys=True))


def load_error(root: Path) -> str:
    with pytest.raises(ReleaseError) as exc:
        Release.load(root)
    return str(exc.value)


@pytest.mark.parametrize("relpath", [MANIFEST_FILE, ANSWER_KEY_FILE, *ARM_FILES.values()])
def test_missing_file(rel: Path, relpath: str) -> None:
    (rel / relpath).unlink()
    msg = load_error(rel)
    assert str(rel.resolve() / relpath) in msg
    assert "missing" in msg


def test_missing_directory(tmp_path: Path) -> None:
    assert "not found" in load_error(tmp_path / "nowhere")


@pytest.mark.parametrize("relpath", [ARM_FILES["main"], ARM_FILES["shifted"], ANSWER_KEY_FILE])
def test_malformed_jsonl_line_names_file_and_line(rel: Path, relpath: str) -> None:
    raw = (rel / relpath).read_bytes().splitlines(keepends=True)
    raw[2] = raw[2][:25] + b"\n"  # a truncated line 3
    rewrite(rel, relpath, b"".join(raw))
    msg = load_error(rel)
    assert str(rel.resolve() / relpath) in msg
    assert "line 3" in msg


def test_non_object_line(rel: Path) -> None:
    raw = (rel / ARM_FILES["redacted"]).read_bytes().splitlines(keepends=True)
    raw[1] = b"[1, 2, 3]\n"
    rewrite(rel, ARM_FILES["redacted"], b"".join(raw))
    msg = load_error(rel)
    assert "redacted.jsonl" in msg
    assert "line 2" in msg


@pytest.mark.parametrize("arm", ["main", "redacted"])
def test_row_without_row_key(rel: Path, arm: str) -> None:
    rows = lines(rel / ARM_FILES[arm])
    del rows[3]["row_key"]
    rewrite(rel, ARM_FILES[arm], b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    msg = load_error(rel)
    assert f"{arm}.jsonl" in msg
    assert "line 4" in msg
    assert "row_key" in msg


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("partition_date", "15/11/2022", "partition_date"),
        ("acceptance_at", "2022-11-15 21:05", "acceptance_at"),
    ],
)
def test_bad_field_value_names_line_and_field(rel: Path, field: str, value: str, needle: str) -> None:
    rows = lines(rel / ARM_FILES["main"])
    rows[1][field] = value
    rewrite(rel, ARM_FILES["main"], b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    msg = load_error(rel)
    assert "main.jsonl" in msg
    assert "line 2" in msg
    assert needle in msg


def test_arms_with_different_row_key_sets(rel: Path) -> None:
    raw = (rel / ARM_FILES["shifted"]).read_bytes().splitlines(keepends=True)
    rewrite(rel, ARM_FILES["shifted"], b"".join(raw[:-1]))
    msg = load_error(rel)
    assert "shifted.jsonl" in msg
    assert "row_key" in msg


def test_arms_with_same_count_but_different_keys(rel: Path) -> None:
    rows = lines(rel / ARM_FILES["redacted"])
    rows[0]["row_key"] = "r" + "0" * 20
    rewrite(rel, ARM_FILES["redacted"], b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    msg = load_error(rel)
    assert "redacted.jsonl" in msg
    assert "r" + "0" * 20 in msg


def test_answer_key_with_different_keys(rel: Path) -> None:
    rows = lines(rel / ANSWER_KEY_FILE)
    rewrite(rel, ANSWER_KEY_FILE, b"".join(json.dumps(r).encode() + b"\n" for r in rows[1:]))
    assert "answer_key.jsonl" in load_error(rel)


def test_duplicate_row_key_in_main(rel: Path) -> None:
    raw = (rel / ARM_FILES["main"]).read_bytes().splitlines(keepends=True)
    rewrite(rel, ARM_FILES["main"], b"".join([*raw, raw[0]]))
    msg = load_error(rel)
    assert "main.jsonl" in msg
    assert "more than once" in msg


@pytest.mark.parametrize("relpath", [ANSWER_KEY_FILE, *ARM_FILES.values()])
def test_file_digest_mismatch(rel: Path, relpath: str) -> None:
    p = rel / relpath
    data = p.read_bytes()
    p.write_bytes(data.replace(b"10-Q", b"10-K", 1))
    assert p.read_bytes() != data
    msg = load_error(rel)
    assert str(rel.resolve() / relpath) in msg
    assert "sha256" in msg
    problems = check_release(rel)
    assert len(problems) == 1
    assert relpath in problems[0]


def test_manifest_content_digest_mismatch(rel: Path) -> None:
    m = json.loads((rel / MANIFEST_FILE).read_bytes())
    m["window"]["end"] = "2024-12-31"
    (rel / MANIFEST_FILE).write_text(json.dumps(m))
    msg = load_error(rel)
    assert MANIFEST_FILE in msg
    assert "content_digest" in msg
    assert any("content_digest" in p for p in check_release(rel))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda m: m.pop("files"), "'files'"),
        (lambda m: m["files"].pop(ANSWER_KEY_FILE), ANSWER_KEY_FILE),
        (lambda m: m.__setitem__("name", 7), "'name'"),
    ],
)
def test_malformed_manifest(rel: Path, edit, needle: str) -> None:
    m = json.loads((rel / MANIFEST_FILE).read_bytes())
    edit(m)
    (rel / MANIFEST_FILE).write_text(json.dumps(m))
    msg = load_error(rel)
    assert MANIFEST_FILE in msg
    assert needle in msg


def test_manifest_not_json(rel: Path) -> None:
    (rel / MANIFEST_FILE).write_text("{")
    assert "not valid JSON" in load_error(rel)


# --- the Parquet cache ------------------------------------------------------------------------------------------


def _cache_for(r: Release) -> Path:
    return Path(os.environ["EVALKIT_CACHE_DIR"]) / "releases" / r.content_digest.removeprefix("sha256:")


def _frames(r: Release) -> dict[str, pl.DataFrame]:
    return {**{a: r.arm(a) for a in ARMS}, "answer_key": r.answer_key}


def test_cache_lives_under_evalkit_cache_dir(rel: Path) -> None:
    r = Release.load(rel)
    cdir = _cache_for(r)
    assert sorted(p.name for p in cdir.iterdir()) == [
        "answer_key.parquet",
        "main.parquet",
        "redacted.parquet",
        "shifted.parquet",
        "stamp.json",
    ]


def test_second_load_hits_the_cache(rel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = Release.load(rel)

    def boom(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the second load re-read the JSONL instead of the cache")

    monkeypatch.setattr(release_mod, "_read_jsonl", boom)
    monkeypatch.setattr(release_mod, "file_digest", boom)
    second = Release.load(rel)
    for name, f in _frames(first).items():
        assert _frames(second)[name].equals(f), name
    assert second.content_digest == first.content_digest
    # use_cache=False goes back to the files
    with pytest.raises(AssertionError, match="re-read"):
        Release.load(rel, use_cache=False)


def test_filtered_load_from_cache(rel: Path) -> None:
    Release.load(rel)
    r = Release.load(rel, forms=["8-K"])
    assert r.arm("shifted").height == 2


def test_tampered_file_after_cached_load_is_caught(rel: Path) -> None:
    Release.load(rel)
    Release.load(rel)  # from the cache
    p = rel / ARM_FILES["main"]
    data = p.read_bytes()
    tampered = data.replace(b"ACME WIDGETS INC", b"ACME WIDGETS INK", 1)
    assert len(tampered) == len(data)
    with p.open("r+b") as fh:  # in place: same inode, same size
        fh.write(tampered)
    msg = load_error(rel)
    assert str(p.resolve()) in msg
    assert "sha256" in msg


def test_tampered_file_with_restored_mtime_is_caught(rel: Path) -> None:
    """A same-size edit that restores the file's mtime (or lands within the filesystem's timestamp
    granularity) must not be served from the Parquet cache as if it were the release."""
    Release.load(rel)
    p = rel / ARM_FILES["redacted"]
    st_before = p.stat()
    data = p.read_bytes()
    tampered = data.replace(b"[ISSUER] 10-Q", b"[ISSUER] 10-K", 1)
    assert tampered != data
    assert len(tampered) == len(data)
    with p.open("r+b") as fh:
        fh.write(tampered)
    os.utime(p, ns=(st_before.st_atime_ns, st_before.st_mtime_ns))
    msg = load_error(rel)
    assert "redacted.jsonl" in msg


def test_replaced_file_after_cached_load_is_caught(rel: Path) -> None:
    Release.load(rel)
    p = rel / ANSWER_KEY_FILE
    data = p.read_bytes().replace(b"ZPHR", b"ZPHX")
    tmp = rel / "ak.tmp"
    tmp.write_bytes(data)
    tmp.replace(p)  # a new inode
    assert "answer_key.jsonl" in load_error(rel)


def test_copied_release_does_not_reuse_a_stale_stamp(tmp_path: Path) -> None:
    import shutil

    a = make(tmp_path / "a")
    Release.load(a)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / ARM_FILES["main"]).write_bytes(b"garbage\n")
    assert "main.jsonl" in load_error(b)


# --- the Parquet cache is content-addressed ---------------------------------------------------------------------


def _poison_answer_key(cdir: Path, *, restamp: bool) -> None:
    """Move every acceptance stamp in the cached answer key a day earlier (what a look-ahead forger wants)."""
    path = cdir / "answer_key.parquet"
    frame = pl.read_parquet(path).with_columns(pl.col("acceptance_at") - pl.duration(days=1))
    frame.write_parquet(path)
    if restamp:
        stamp = json.loads((cdir / "stamp.json").read_text())
        stamp["parquet"]["answer_key"] = digest_bytes(path.read_bytes())
        (cdir / "stamp.json").write_text(json.dumps(stamp))


def test_edited_parquet_is_rebuilt_not_trusted(rel: Path) -> None:
    truth = Release.load(rel, use_cache=False)
    first = Release.load(rel)
    cdir = _cache_for(first)
    _poison_answer_key(cdir, restamp=False)
    again = Release.load(rel)
    assert again.answer_key.equals(truth.answer_key)
    # ... and the cache was rewritten from the JSONL: the next load is clean too, from the cache.
    assert Release.load(rel).answer_key.equals(truth.answer_key)
    stamp = json.loads((cdir / "stamp.json").read_text())
    assert stamp["parquet"]["answer_key"] == digest_bytes((cdir / "answer_key.parquet").read_bytes())


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong schema, restamped", "stamp without digests"])
def test_damaged_cache_is_rebuilt_without_a_traceback(rel: Path, damage: str) -> None:
    truth = Release.load(rel, use_cache=False)
    cdir = _cache_for(Release.load(rel))
    path = cdir / "main.parquet"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "garbage":
        path.write_bytes(b"PAR1 not parquet PAR1")
    elif damage == "wrong schema, restamped":
        pl.DataFrame({"row_key": ["x"], "form": [1]}).write_parquet(path)
        stamp = json.loads((cdir / "stamp.json").read_text())
        stamp["parquet"]["main"] = digest_bytes(path.read_bytes())
        (cdir / "stamp.json").write_text(json.dumps(stamp))
    else:
        stamp = json.loads((cdir / "stamp.json").read_text())
        del stamp["parquet"]
        (cdir / "stamp.json").write_text(json.dumps(stamp))
    assert Release.load(rel).arm("main").equals(truth.arm("main"))


def test_a_consistently_restamped_cache_is_what_verify_exists_for(rel: Path) -> None:
    """Rewriting a Parquet file and its stamp together passes the run-time check (the stamp is no secret);
    ``use_cache=False``, which verify uses, reads the JSONL and sees the truth. The PIT verify tests show that
    such a run does not verify."""
    truth = Release.load(rel, use_cache=False)
    cdir = _cache_for(Release.load(rel))
    _poison_answer_key(cdir, restamp=True)
    assert not Release.load(rel).answer_key.equals(truth.answer_key)
    assert Release.load(rel, use_cache=False).answer_key.equals(truth.answer_key)


def test_load_by_release_name_from_the_releases_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shelf = tmp_path / "shelf"
    make(shelf / "dir-name", name="manifest-name")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EVALKIT_RELEASES", str(shelf))
    by_dir = Release.load("dir-name")
    by_manifest = Release.load("manifest-name")
    assert by_dir.root == by_manifest.root == (shelf / "dir-name").resolve()
    assert by_dir.name == "manifest-name"
    # a path that exists wins over a name; a path with a separator is never a name
    local = make(tmp_path / "manifest-name", name="local")
    assert Release.load("manifest-name").root == local.resolve()
    with pytest.raises(ReleaseError, match="release directory not found"):
        Release.load("sub/dir-name")
    # an unknown name lists what is there, and says where it looked
    with pytest.raises(ReleaseError) as exc:
        Release.load("nope")
    message = str(exc.value)
    assert "no release of that name in" in message
    assert str(shelf) in message
    assert "releases there: dir-name, manifest-name" in message


def test_releases_directory_defaults_under_evalkit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALKIT_RELEASES", raising=False)
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "home" / "releases" / "r1")
    assert Release.load("r1").root == (tmp_path / "home" / "releases" / "r1").resolve()
    with pytest.raises(ReleaseError, match=r"releases there: r1, test-release"):
        Release.load("r2")
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "empty"))
    with pytest.raises(ReleaseError, match="releases there: none"):
        Release.load("r1")
