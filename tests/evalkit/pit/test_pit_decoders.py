"""Decoding the shifted arm from outside: the attacks an agent can run with public code and public calendars, the
harness's own decoders in the receipt, old releases, determinism, and tampering with the secret or the figures.

Each attack is scored against the main arm (joined on row_key, which the attacker does not get to do): the share
of shifted rows whose real filing date it names.
"""

from __future__ import annotations

import bisect
import copy
import datetime as dt
import itertools
import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunConfig, from_callable, run, verify_pit_receipt
from evalkit.pit._decoders import THRESHOLD, run_decoders
from evalkit_core import (
    MASKS_FILE,
    Release,
    ReleaseError,
    check_release,
    digest,
    file_digest,
    load_signing_key,
    make_receipt,
    read_receipt,
    write_receipt,
)
from evalkit_core._synth import write_demo_release, write_synth_release

D = dt.date
OLD = "evalkit-release/2"


# --- the public calendar, as an agent in the jail reads it ------------------------------------------------------


def _pmc_sessions() -> list[dt.date]:
    """Every NYSE session 1970..2060 straight from pandas-market-calendars (readable inside the jail)."""
    import pandas_market_calendars as mcal

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = mcal.get_calendar("NYSE").schedule(start_date="1970-01-01", end_date="2060-12-31")
    return [t.date() for t in sched.index]


@pytest.fixture(scope="module")
def sessions() -> list[dt.date]:
    return _pmc_sessions()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return Release.load(write_demo_release(tmp_path_factory.mktemp("demo") / "demo"))


@pytest.fixture(scope="module")
def old_demo(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return Release.load(write_demo_release(tmp_path_factory.mktemp("demo2") / "demo", release_format=OLD))


def _shown_and_real(release: Release) -> list[tuple[dt.date, dt.date]]:
    shifted = release.arm("shifted").select("row_key", "partition_date")
    real = release.arm("main").select("row_key", pl_real := "partition_date").rename({pl_real: "real"})
    joined = shifted.join(real, on="row_key")
    return list(zip(joined.get_column("partition_date").to_list(), joined.get_column("real").to_list(), strict=True))


def _recovered(pairs: list[tuple[dt.date, dt.date]], guess: Callable[[dt.date], dt.date | None]) -> float:
    return sum(guess(s) == r for s, r in pairs) / len(pairs)


def _by_sessions(sessions: list[dt.date], offset: int) -> Callable[[dt.date], dt.date | None]:
    def guess(shown: dt.date) -> dt.date | None:
        i = bisect.bisect_right(sessions, shown) - 1
        j = i + offset
        return sessions[j] + (shown - sessions[i]) if i >= 0 and 0 <= j < len(sessions) else None

    return guess


def _ten_year_inversion(sessions: list[dt.date], shown: list[dt.date]) -> Callable[[dt.date], dt.date | None]:
    """The inversion of the old rule, exactly as an agent would write it: the first session of the shown year back
    to the first session of the year ten before; every session keeps its distance in sessions."""
    year = min(shown).year
    first_shown = next(d for d in sessions if d.year == year)
    first_real = next(d for d in sessions if d.year == year - 10)
    return _by_sessions(sessions, sessions.index(first_real) - sessions.index(first_shown))


# --- calendar inversion ------------------------------------------------------------------------------------------


def test_the_old_demo_is_undone_by_calendar_inversion(old_demo: Release, sessions: list[dt.date]):
    """The attack that found the hole: on a format-2 demo it names the real date of every shifted row."""
    pairs = _shown_and_real(old_demo)
    assert len(pairs) > 400
    assert _recovered(pairs, _ten_year_inversion(sessions, [s for s, _ in pairs])) > 0.99


def test_the_demo_is_not_undone_by_calendar_inversion(demo: Release, sessions: list[dt.date]):
    pairs = _shown_and_real(demo)
    assert len(pairs) > 400
    assert _recovered(pairs, _ten_year_inversion(sessions, [s for s, _ in pairs])) < 0.01


def test_no_year_offset_by_any_public_rule_undoes_the_demo(demo: Release, sessions: list[dt.date]):
    """Brute force over every year offset the calendar allows, three rules each: k-th session of the year, the same
    calendar date, whole 52-week spans (weekdays kept). Scored as the best of all (an upper bound)."""
    pairs = _shown_and_real(demo)
    shown0 = min(s for s, _ in pairs)
    i0 = bisect.bisect_left(sessions, shown0)
    k = i0 - bisect.bisect_left(sessions, D(shown0.year, 1, 1))
    best = 0.0
    for y in range(1970 - shown0.year, 2061 - shown0.year):
        if y == 0:
            continue
        year_start = bisect.bisect_left(sessions, D(shown0.year + y, 1, 1))
        same_date = bisect.bisect_left(sessions, shown0.replace(year=shown0.year + y, day=min(shown0.day, 28)))
        weeks = bisect.bisect_left(sessions, shown0 + dt.timedelta(weeks=52 * y))
        for j in (year_start + k, same_date, weeks):
            if 0 <= j < len(sessions):
                best = max(best, _recovered(pairs, _by_sessions(sessions, j - i0)))
    assert best < 0.01


def test_holiday_gaps_point_at_the_shown_stretch_not_the_real_one(demo: Release, sessions: list[dt.date]):
    """Match the calendar-day gaps between the shown sessions (weekends, holidays) against the whole calendar:
    the only stretch that fits is the shown one itself, which names no real date."""
    pairs = _shown_and_real(demo)
    shown = sorted({s for s, _ in pairs})
    gaps = [(b - a).days for a, b in itertools.pairwise(shown)]
    fits = [
        i for i in range(len(sessions) - len(shown))
        if [(sessions[i + n + 1] - sessions[i + n]).days for n in range(len(gaps))] == gaps
    ]
    guesses = [_recovered(pairs, _by_sessions(sessions, i - sessions.index(shown[0]))) for i in fits]
    assert guesses and max(guesses) < 0.01


def test_secret_offsets_spread_over_the_calendar_and_miss_every_public_rule():
    from evalkit_core import nyse
    from evalkit_core._shift import PUBLIC_MARGIN, ShiftMap, public_offsets

    cal = nyse()
    offsets = set()
    for n in range(40):
        m = ShiftMap.draw(D(2023, 1, 1), D(2023, 6, 30), D(2023, 1, 3), bytes([n]) * 32)
        assert all(cal.session_on(s) is not None for _, s in m.pairs)
        offsets.add(m.session_offset)
        assert {s.year for _, s in m.pairs}.isdisjoint({r.year for r, _ in m.pairs})  # no real year is shown
        assert min(abs(m.session_offset - c) for c in public_offsets(m.anchor[0], cal)) > PUBLIC_MARGIN
    assert len(offsets) == 40
    assert min(offsets) < 0 < max(offsets)  # into the past and the future: the direction is secret too
    years = {round(o / 252) for o in offsets}
    assert len(years) > 15


# --- the harness's decoders in the receipt --------------------------------------------------------------------


def _figures(block: dict[str, Any], arm: str) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in block["arms"][arm]["decoders"]}


def test_the_decoders_on_the_demo_and_on_the_old_demo(demo: Release, old_demo: Release):
    new = run_decoders(demo, ["redacted", "shifted"])
    old = run_decoders(old_demo, ["redacted", "shifted"])
    fn, fo = _figures(new, "shifted"), _figures(old, "shifted")
    assert fn["calendar_inversion"]["dates_recovered"] < THRESHOLD
    assert fn["public_rule_search"]["dates_recovered"] < THRESHOLD
    assert fn["sec_calendar_fingerprint"]["dates_recovered"] < THRESHOLD
    assert new["holds_against_public_knowledge"] is True
    assert new["mask_secret_sha256"] == demo.masks.secret_sha256 is not None
    assert fo["calendar_inversion"]["dates_recovered"] > 0.99
    assert fo["calendar_inversion"]["breaks"] is True
    assert old["holds_against_public_knowledge"] is False
    assert old["mask_secret_sha256"] is None
    assert "shifted/calendar_inversion" in old["broken_by"]
    # What no date map can hide: the agent is called once per real session, so a known window, or the real
    # per-day counts, give the alignment back. The decoders say so for both formats.
    for block in (new, old):
        f = _figures(block, "shifted")
        assert f["window_anchor"]["dates_recovered"] > 0.99
        assert f["count_alignment"]["dates_recovered"] > 0.99
        assert block["holds"] is False


def test_the_count_decoder_is_fooled_by_a_record_that_is_not_the_window(demo: Release):
    """The count decoder can fail: against a record of other days (the main arm's dates moved a year) it names
    none of the real dates."""
    moved = demo.arm("main").with_columns(
        (demo.arm("main").get_column("partition_date") + dt.timedelta(days=364)).alias("partition_date")
    )
    fake = copy.copy(demo)
    object.__setattr__(fake, "arms", {**demo.arms, "main": moved})
    f = _figures(run_decoders(fake, ["shifted"]), "shifted")
    assert f["count_alignment"]["dates_recovered"] < 0.01


def test_a_shifted_arm_shown_at_the_calendars_first_year_is_decoded_not_refused(demo: Release):
    """Shown dates in the first year the exchange calendar covers (1993): the inversion's "year before" (1992) is
    outside the calendar and is skipped; the decoders still score the arm (a 287,929-row release whose secret put
    it there ended every run in the receipt's assembly with a ConfigError)."""
    shifted = demo.arm("shifted")
    first = min(shifted.get_column("partition_date").to_list())
    moved_by = D(1993, 1, 4) - first
    moved = shifted.with_columns((shifted.get_column("partition_date") + moved_by).alias("partition_date"))
    fake = copy.copy(demo)
    object.__setattr__(fake, "arms", {**demo.arms, "shifted": moved})
    f = _figures(run_decoders(fake, ["shifted"]), "shifted")
    assert {"calendar_inversion", "window_anchor", "count_alignment"} <= set(f)
    assert f["count_alignment"]["dates_recovered"] > 0.99  # the counts still line up: the arm was really scored


def test_sec_calendar_fingerprint_places_a_long_window_and_not_a_short_one(tmp_path: Path):
    """Where EDGAR's calendar and the exchange's differ (Good Friday filings fall between two sessions; Columbus
    and Veterans Day are sessions with no filing), the shown stretch carries marks that public calendars place:
    over two years the placement is unique and every date comes back, whatever the secret. Over the demo's
    quarter (no such day) nothing does. The decoder says so; this test pins both sides."""
    long = Release.load(
        write_synth_release(tmp_path / "long", rows=3000, start=D(2021, 1, 4), end=D(2022, 12, 30), seed=7)
    )
    f = _figures(run_decoders(long, ["shifted"]), "shifted")["sec_calendar_fingerprint"]
    assert f["knowledge"] == "public"
    assert f["dates_recovered"] > 0.9
    assert f["breaks"] is True
    short = long.select(start=D(2022, 2, 1), end=D(2022, 3, 31))
    f = _figures(run_decoders(short, ["shifted"]), "shifted")["sec_calendar_fingerprint"]
    assert f["dates_recovered"] < 0.01


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """One small run per release format, a blind agent (reads nothing: the probe does not run)."""
    out: dict[str, dict[str, Path]] = {}
    for label, fmt in (("new", None), ("old", OLD)):
        base = tmp_path_factory.mktemp(f"run-{label}")
        release = write_synth_release(
            base / "release", rows=1500, start=D(2023, 2, 1), end=D(2023, 3, 31), seed=5, release_format=fmt
        )
        # a format-2 release has no mask secret to draw decoys from: it runs with the masks as released
        cfg = RunConfig(bundle_path=str(release), forms=("8-K",), start="2023-03-01", end="2023-03-10",
                        trajectory_path=str(base / "t.jsonl"), receipt_path=str(base / "r.json"),
                        mask_decoys=fmt is None)
        run(from_callable(lambda prompt, tools: []), cfg)
        out[label] = {"release": release, "receipt": base / "r.json", "trajectory": base / "t.jsonl"}
    return out


def test_an_old_release_runs_and_verifies_and_its_masks_do_not_hold(runs: dict[str, dict[str, Path]]):
    r = runs["old"]
    body = read_receipt(r["receipt"])["body"]
    assert body["masks"] == "leak"
    assert body["binding"]["mask_secret_sha256"] is None
    assert body["decoders"]["release_format"] == OLD
    f = _figures(body["decoders"], "shifted")
    assert f["calendar_inversion"]["dates_recovered"] > 0.99
    assert "shifted/calendar_inversion" in body["decoders"]["broken_by"]
    checks = verify_pit_receipt(r["receipt"], trajectory=r["trajectory"], bundle=r["release"])
    assert [c.name for c in checks if not c.ok] == []
    assert next(c for c in checks if c.name == "mask_secret_sha256").detail.startswith("none")


def test_a_new_release_binds_its_secret_by_digest_only(runs: dict[str, dict[str, Path]]):
    r = runs["new"]
    receipt_text = r["receipt"].read_text()
    body = json.loads(receipt_text)["body"]
    secret = json.loads((r["release"] / MASKS_FILE).read_text())["shift"]["secret"]
    assert secret not in receipt_text
    assert secret not in (r["release"] / "release.json").read_text()
    assert secret not in r["trajectory"].read_text()
    assert body["binding"]["mask_secret_sha256"] == Release.load(r["release"]).masks.secret_sha256
    assert body["decoders"]["holds_against_public_knowledge"] is True
    assert _figures(body["decoders"], "shifted")["calendar_inversion"]["dates_recovered"] < THRESHOLD
    checks = verify_pit_receipt(r["receipt"], trajectory=r["trajectory"], bundle=r["release"])
    assert [c.name for c in checks if not c.ok] == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("decoders", "arms", "shifted", "decoders", 0, "dates_recovered"), 0.5),
        (("decoders", "arms", "shifted", "decoders", 3, "dates_recovered"), 0.5),
        (("decoders", "arms", "redacted", "decoders", 1, "issuers_recovered"), 0.0),
        (("decoders", "holds"), True),
        (("decoders", "broken_by"), []),
        (("masks",), "unproven"),
    ],
)
def test_verify_catches_a_tampered_decoder_figure(runs, tmp_path: Path, path: tuple[Any, ...], value: Any):
    """Edit one figure and re-sign with the local key (an insider): the signature holds, the replay does not."""
    r = runs["new"]
    receipt = read_receipt(r["receipt"])
    body = copy.deepcopy(receipt["body"])
    target: Any = body
    for p in path[:-1]:
        target = target[p]
    assert target[path[-1]] != value
    target[path[-1]] = value
    forged = tmp_path / "r.json"
    write_receipt(forged, make_receipt(body, key=load_signing_key()))
    checks = verify_pit_receipt(forged, trajectory=r["trajectory"], bundle=r["release"])
    bad = {c.name for c in checks if not c.ok}
    assert "signature" not in bad
    assert any(n.startswith(path[0]) for n in bad), bad


def test_verify_catches_a_receipt_that_binds_another_secret(runs, tmp_path: Path):
    r = runs["new"]
    receipt = read_receipt(r["receipt"])
    body = copy.deepcopy(receipt["body"])
    body["binding"]["mask_secret_sha256"] = "sha256:" + "0" * 64
    forged = tmp_path / "r.json"
    write_receipt(forged, make_receipt(body, key=load_signing_key()))
    checks = verify_pit_receipt(forged, trajectory=r["trajectory"], bundle=r["release"])
    assert "signature" not in {c.name for c in checks if not c.ok}
    assert "mask_secret_sha256" in {c.name for c in checks if not c.ok}


# --- determinism and tampering with the secret ----------------------------------------------------------------


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_another_key_seed_another_secret(tmp_path: Path):
    kw: dict[str, Any] = {"rows": 200, "start": D(2023, 2, 1), "end": D(2023, 3, 31), "seed": 3}
    a = write_synth_release(tmp_path / "a", **kw)
    b = write_synth_release(tmp_path / "b", **kw)
    assert _files(a) == _files(b)
    c = write_synth_release(tmp_path / "c", key_seed="private", **kw)
    ra, rc = Release.load(a), Release.load(c)
    assert ra.masks.secret_sha256 != rc.masks.secret_sha256
    assert ra.shift.session_offset != rc.shift.session_offset
    assert (a / "arms/main.jsonl").read_bytes() != (c / "arms/main.jsonl").read_bytes()  # row keys differ too
    d1 = write_demo_release(tmp_path / "d1")
    d2 = write_demo_release(tmp_path / "d2")
    assert _files(d1) == _files(d2)


def _rewrite(root: Path, rel: str, data: bytes) -> None:
    """Replace a bound file and recompute every digest the manifest holds (an insider's edit)."""
    (root / rel).write_bytes(data)
    manifest = json.loads((root / "release.json").read_text())
    manifest["files"][rel] = file_digest(root / rel)
    manifest.pop("content_digest")
    manifest["content_digest"] = digest(manifest)
    (root / "release.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@pytest.fixture
def copy_of_new(runs: dict[str, dict[str, Path]], tmp_path: Path) -> Path:
    return Path(shutil.copytree(runs["new"]["release"], tmp_path / "rel"))


def test_a_shift_table_that_is_not_the_secrets_is_refused(copy_of_new: Path):
    from evalkit_core import nyse

    cal = nyse()
    masks = json.loads((copy_of_new / MASKS_FILE).read_text())
    shift = masks["shift"]
    shift["session_offset"] = c = shift["session_offset"] + 1
    shift["sessions"] = [[r, cal.all[cal.index_of(D.fromisoformat(r)) + c].date.isoformat()] for r, _ in shift["sessions"]]
    shift["anchor"]["shifted"] = cal.all[cal.index_of(D.fromisoformat(shift["anchor"]["real"])) + c].date.isoformat()
    _rewrite(copy_of_new, MASKS_FILE, json.dumps(masks).encode())
    with pytest.raises(ReleaseError, match="not the map its secret draws"):
        Release.load(copy_of_new, use_cache=False)


def test_a_swapped_secret_is_refused_against_the_manifest(copy_of_new: Path):
    masks = json.loads((copy_of_new / MASKS_FILE).read_text())
    masks["shift"]["secret"] = "ab" * 32
    _rewrite(copy_of_new, MASKS_FILE, json.dumps(masks).encode())
    problems = check_release(copy_of_new)
    assert problems and ("secret_sha256" in problems[0] or "not the map its secret draws" in problems[0])


def test_an_old_masks_file_in_a_new_release_is_refused(copy_of_new: Path):
    masks = json.loads((copy_of_new / MASKS_FILE).read_text())
    masks["format"] = "evalkit-masks/1"
    _rewrite(copy_of_new, MASKS_FILE, json.dumps(masks).encode())
    with pytest.raises(ReleaseError, match=r"expected 'public-ten-years'|expects"):
        Release.load(copy_of_new, use_cache=False)


def test_a_new_release_relabelled_old_is_refused(copy_of_new: Path):
    """Claiming format 2 to skip the secret check: the masks file still says format 2 and is refused."""
    manifest = json.loads((copy_of_new / "release.json").read_text())
    manifest["format"] = OLD
    manifest.pop("content_digest")
    manifest["content_digest"] = digest(manifest)
    (copy_of_new / "release.json").write_text(json.dumps(manifest))
    with pytest.raises(ReleaseError, match="expects"):
        Release.load(copy_of_new, use_cache=False)


def test_the_agent_jail_root_holds_no_release_file(runs: dict[str, dict[str, Path]]):
    """The masks file (the secret) and the answer key are never under the jail's read-only root: not the run's
    release, not the demo release in the cache."""
    from evalkit.pit._recipe import jail_roots
    from evalkit_core._synth import demo_release_path

    roots = [Path(p).resolve() for p in jail_roots()]
    assert roots
    for release in (runs["new"]["release"].resolve(), demo_release_path().resolve()):
        for rel in (MASKS_FILE, "answer_key.jsonl", "arms/main.jsonl"):
            f = release / rel
            assert f.is_file()
            assert not any(f.is_relative_to(root) for root in roots), (f, roots)
