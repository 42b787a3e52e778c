"""The masks file: the shifted calendar over every year the calendar supports, instants on closed days, and a
masks file or answer key that was tampered with."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from evalkit_core import MASKS_FILE, Release, ReleaseError, ShiftMap, check_release, digest, file_digest, nyse
from evalkit_core._edgar_rules import NEW_YORK
from evalkit_core._synth import write_synth_release

UTC = dt.UTC
D = dt.date


def _ny(day: D, h: int, m: int = 0) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(h, m), tzinfo=NEW_YORK).astimezone(UTC)


@pytest.mark.parametrize("anchor", [1995, 2001, 2008, 2012, 2020, 2023, 2024, 2029])
def test_every_session_maps_onto_a_session_consecutively(anchor: int):
    cal = nyse()
    m = ShiftMap.build(D(anchor - 1, 12, 1), D(anchor + 9, 12, 31), anchor)
    images = [s for _, s in m.pairs]
    assert all(cal.session_on(s) is not None for s in images)  # no weekend, no exchange holiday
    idx = [cal.index_of(s) for s in images]
    assert idx == list(range(idx[0], idx[0] + len(idx)))  # consecutive sessions stay consecutive
    # The anchor year maps session k to session k ten years on.
    real_year = [r for r, _ in m.pairs if r.year == anchor]
    first_shifted = cal.between(D(anchor + 10, 1, 1), D(anchor + 10, 12, 31))[0].date
    assert m.session_date(real_year[0]) == first_shifted
    for k, r in enumerate(real_year[: len(cal.between(D(anchor + 10, 1, 1), D(anchor + 10, 12, 31)))]):
        assert m.session_date(r) == cal.between(D(anchor + 10, 1, 1), D(anchor + 10, 12, 31))[k].date
    # Ten years on, give or take the sessions by which years differ (at most 9 over a ten-year release, which
    # with weekends and holidays is at most 16 calendar days).
    assert all(abs((s - r).days - 3652) <= 16 for r, s in m.pairs)


def test_per_year_matching_could_not_be_one_to_one():
    """Why a constant session offset: some years have more sessions than the year ten on."""
    cal = nyse()
    count = {y: len(cal.between(D(y, 1, 1), D(y, 12, 31))) for y in (2024, 2034)}
    assert count == {2024: 252, 2034: 250}


def test_instants_keep_their_offset_from_the_bell_and_closed_days_stay_between():
    cal = nyse()
    m = ShiftMap.build(D(2023, 1, 1), D(2023, 12, 31), 2023)
    for real, shifted in m.pairs[1:-1]:
        for hh, mm in ((6, 0), (9, 29), (9, 30), (16, 5), (17, 31), (21, 59), (23, 59)):
            got = m.instant(_ny(real, hh, mm)).astimezone(NEW_YORK)
            assert (got.date(), got.time()) == (shifted, dt.time(hh, mm)), (real, hh, mm)
    # Good Friday 2023-04-07, a weekend, Thanksgiving: instants on closed days map strictly between the image
    # of the session before and the image of the session after, in order.
    for closed in (D(2023, 4, 7), D(2023, 4, 8), D(2023, 4, 9), D(2023, 11, 23), D(2023, 7, 4)):
        before = max(r for r, _ in m.pairs if r < closed)
        after = min(r for r, _ in m.pairs if r > closed)
        lo, hi = cal.session_on(m.session_date(before)), cal.session_on(m.session_date(after))
        assert lo is not None and hi is not None
        last = lo.open
        for hh in (0, 6, 12, 18, 23):
            got = m.instant(_ny(closed, hh))
            assert lo.open < got < hi.open
            assert got >= last
            last = got
        assert lo.date < m.date(closed) <= hi.date


def test_lookups_outside_the_table_are_refused():
    m = ShiftMap.build(D(2023, 3, 1), D(2023, 3, 10), 2023)
    with pytest.raises(ReleaseError, match="outside the shift table"):
        m.instant(dt.datetime(2023, 1, 3, 15, tzinfo=UTC))
    with pytest.raises(ReleaseError, match="outside the shift table"):
        m.instant(dt.datetime(2023, 6, 1, 15, tzinfo=UTC))
    last_real, last_image = m.pairs[-1]
    bell = nyse().session_on(last_real)
    assert bell is not None
    assert m.instant(bell.open).astimezone(NEW_YORK).date() == last_image  # the last session's own day is in


@pytest.fixture
def rel(tmp_path: Path) -> Path:
    return write_synth_release(tmp_path / "rel", rows=120, start=D(2023, 3, 1), end=D(2023, 3, 10), seed=4)


def _rebind(root: Path) -> None:
    """Recompute every digest release.json binds, as a forger would after editing a file."""
    manifest = json.loads((root / "release.json").read_text())
    for rel in manifest["files"]:
        manifest["files"][rel] = file_digest(root / rel)
    manifest["content_digest"] = digest({k: v for k, v in manifest.items() if k != "content_digest"})
    (root / "release.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def test_a_reassigned_row_key_is_caught_even_with_every_digest_recomputed(rel: Path):
    path = rel / "answer_key.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["accession"], rows[1]["accession"] = rows[1]["accession"], rows[0]["accession"]
    path.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows))
    _rebind(rel)
    problems = check_release(rel)
    assert len(problems) == 1
    assert "line 1: field 'row_key'" in problems[0] and "is not the keyed hash" in problems[0]


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda m: m["shift"]["sessions"][3].__setitem__(1, "2033-03-05"),
            "not an NYSE session",
        ),  # a Saturday
        (lambda m: m["shift"].__setitem__("session_offset", 7), "sessions on"),
        (lambda m: m["shift"]["sessions"].pop(4), "session by session"),
        (lambda m: m["row_key"].__setitem__("key", "00"), "64 hex digits"),
        (lambda m: m.__setitem__("format", "evalkit-masks/0"), "format"),
    ],
)
def test_a_tampered_masks_file_is_refused(rel: Path, edit, needle: str):
    path = rel / MASKS_FILE
    masks = json.loads(path.read_text())
    edit(masks)
    path.write_text(json.dumps(masks))
    _rebind(rel)
    with pytest.raises(ReleaseError, match=needle):
        Release.load(rel, use_cache=False)
    assert any(needle in p for p in check_release(rel))


def test_a_release_of_the_old_format_is_refused_with_a_reason(rel: Path):
    manifest = json.loads((rel / "release.json").read_text())
    manifest["format"] = "evalkit-release/1"
    (rel / "release.json").write_text(json.dumps(manifest))
    with pytest.raises(ReleaseError, match=r"field 'format' is 'evalkit-release/1'.*rebuild it"):
        Release.load(rel)
