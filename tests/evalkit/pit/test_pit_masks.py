"""Hostile decoding of the control arms' masks: row keys, the shifted calendar, the existence oracle, the probe.

Each test plays an attacker who knows how evalkit works (the code is public) but not the release's key.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from evalkit.pit import RunConfig, from_callable, run, score_answer
from evalkit.pit._serving import HIDDEN_DAYS
from evalkit.pit._toolbox import CellView, Toolbox
from evalkit_core import MASKS_FILE, Clock, Release, nyse
from evalkit_core._synth import write_synth_release

UTC = dt.UTC
ARMS = ("main", "redacted", "shifted")
CLOCKS = ("leaky", "dump", "pit")
RUN_START, RUN_END = "2023-03-01", "2023-03-10"
DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"


# --- row keys: enumeration does not invert them ---------------------------------------------------------------


def _public_recipes(accession: str, release: Release) -> list[str]:
    """Every key an attacker can compute from an accession number and what an agent or a reader can see."""
    acc = accession.encode()
    bare = accession.replace("-", "").encode()
    out = [
        "r" + hashlib.sha256(b"evalkit-row-key/1\x00" + acc).hexdigest()[:20],  # the old unkeyed scheme
        "r" + hashlib.sha256(b"evalkit-row-key/2\x00" + acc).hexdigest()[:20],
        "r" + hashlib.sha256(acc).hexdigest()[:20],
        "r" + hashlib.sha256(bare).hexdigest()[:20],
        "r" + hashlib.md5(acc).hexdigest()[:20],
    ]
    prov = release.manifest.get("provenance", {})
    guesses = [
        b"",
        b"evalkit",
        release.name.encode(),
        release.content_digest.encode(),
        str(prov.get("seed", "")).encode(),
    ]
    for key in guesses:
        for tag in (b"evalkit-row-key/1\x00", b"evalkit-row-key/2\x00", b""):
            out.append("r" + hmac.new(key, tag + acc, hashlib.sha256).hexdigest()[:20])
    return out


def _decoded(release: Release) -> int:
    """How many row keys an attacker who enumerates every accession number (the strongest enumerator: it has
    the true list) maps back to their accession with a public recipe."""
    keys = set(release.arm("shifted").get_column("row_key").to_list())
    hits = 0
    for acc in release.answer_key.get_column("accession").to_list():
        if keys.intersection(_public_recipes(acc, release)):
            hits += 1
    return hits


def test_enumerating_accessions_decodes_no_row_key(synth_release: Release):
    assert synth_release.answer_key.height == 1500
    assert _decoded(synth_release) == 0
    # The recipe that does work needs the key from the masks file, which no agent is given.
    acc = synth_release.answer_key.get_column("accession")[0]
    key = synth_release.answer_key.get_column("row_key")[0]
    secret = bytes.fromhex(json.loads((synth_release.root / MASKS_FILE).read_text())["row_key"]["key"])
    assert (
        "r" + hmac.new(secret, b"evalkit-row-key/2\x00" + acc.encode(), hashlib.sha256).hexdigest()[:20]
        == key
    )


@pytest.mark.realdata
@pytest.mark.skipif(not (DATA / "edgar-submissions-sample").is_dir(), reason="../shared/data is absent")
def test_enumerating_real_8k_accessions_decodes_none(tmp_path: Path):
    """The issue's attack inverted 116 of 142 real 8-K row keys; with keyed row keys it inverts none."""
    from evalkit_core.edgar import build_edgar_release

    build_edgar_release(
        tmp_path / "rel",
        submissions=DATA / "edgar-submissions-sample",
        start=dt.date(2022, 11, 1),
        end=dt.date(2023, 3, 31),
        name="edgar-sample",
        forms=["8-K"],
    )
    release = Release.load(tmp_path / "rel")
    assert release.answer_key.height == 142
    assert _decoded(release) == 0


def test_a_private_key_seed_gives_other_row_keys(tmp_path: Path):
    args: dict[str, Any] = {"rows": 200, "start": dt.date(2023, 3, 1), "end": dt.date(2023, 3, 10), "seed": 5}
    a = Release.load(write_synth_release(tmp_path / "a", **args))
    b = Release.load(write_synth_release(tmp_path / "b", **args))
    assert a.arm("main").get_column("row_key").to_list() == b.arm("main").get_column("row_key").to_list()
    from evalkit_core import write_release
    from evalkit_core._synth import synth_filings

    filings = synth_filings(200, dt.date(2023, 3, 1), dt.date(2023, 3, 10), 5)
    c = Release.load(
        write_release(
            tmp_path / "c",
            name="c",
            start=dt.date(2023, 3, 1),
            end=dt.date(2023, 3, 10),
            filings=filings,
            provenance={},
            key_seed="kept private",
        )
    )
    # Same filings, another seed: no row key in common, so one release's decoded keys carry to no other.
    assert set(a.arm("main").get_column("row_key")).isdisjoint(set(c.arm("main").get_column("row_key")))
    assert sorted(a.answer_key.get_column("accession")) == sorted(c.answer_key.get_column("accession"))


# --- the shifted calendar: weekday and holiday analysis finds nothing ----------------------------------------


def test_every_shifted_date_an_agent_sees_is_a_real_session(
    synth_release_dir: Path, synth_release: Release, tmp_path
):
    """Run an agent that lists everything it can in the shifted arm and collect every date it is shown (from the
    trajectory: the agent runs in its own jailed process, and the harness records what it answered)."""

    def collector(prompt: str, tools: Any) -> list[str]:
        if tools.arm == "shifted":
            tools.pit_list(limit=200)
        return []

    cfg = RunConfig(
        bundle_path=str(synth_release_dir),
        start="2023-02-01",
        end="2023-03-31",
        arms=("shifted",),
        trajectory_path=str(tmp_path / "t.jsonl"),
        receipt_path=str(tmp_path / "r.json"),
        probe_items=0,
    )
    run(from_callable(collector), cfg, synth_release)
    events = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    seen = [e["result"] for e in events if e["type"] == "tool_call" and e["arm"] == "shifted"]
    cal = nyse()
    session_dates = {a["session_date"] for a in seen} | {r["entry_session"] for a in seen for r in a["rows"]}
    row_dates = {r[f] for a in seen for r in a["rows"] for f in ("partition_date", "published_at")}
    assert len(session_dates) > 40
    for d in sorted(session_dates):
        day = dt.date.fromisoformat(d)
        assert cal.session_on(day) is not None, d  # a real NYSE session: no weekend, no exchange holiday
        assert abs((day - dt.date(2023, 3, 1)).days) > 365, d  # a secret offset: at least a year away
    shown = sorted(cal.index_of(dt.date.fromisoformat(d)) for d in session_dates)
    assert shown == list(range(shown[0], shown[0] + len(shown)))  # order and spacing kept: consecutive sessions
    # Filing dates are SEC business days; in this window every one is an NYSE session, and so is its image.
    assert all(cal.session_on(dt.date.fromisoformat(d)) is not None for d in row_dates)
    weekday_of_image = {dt.date.fromisoformat(d).weekday() for d in row_dates}
    assert weekday_of_image <= {0, 1, 2, 3, 4}
    # The old "+10 years by date" would have put these rows on weekends: this test can fail.
    real_dates = set(synth_release.arm("main").get_column("partition_date").to_list())
    assert any(d.replace(year=d.year + 10).weekday() >= 5 for d in real_dates)


def test_the_shift_is_a_secret_offset_away_from_every_public_rule(synth_release: Release):
    from evalkit_core._shift import PUBLIC_MARGIN, public_offsets

    cal = nyse()
    shift = synth_release.shift
    table = shift.pairs
    assert shift.scheme == "secret-offset"
    assert synth_release.masks.shift_secret is not None
    assert all(cal.index_of(s) - cal.index_of(r) == shift.session_offset for r, s in table)
    # No public rule (k-th session of the year, the same date, 52-week spans, any year offset) comes within
    # PUBLIC_MARGIN sessions of the drawn offset.
    nearest = min(abs(shift.session_offset - c) for c in public_offsets(shift.anchor[0], cal))
    assert nearest > PUBLIC_MARGIN
    # The table the harness uses is the one recorded with the answer key.
    recorded = json.loads((synth_release.root / MASKS_FILE).read_text())["shift"]["sessions"]
    assert [(dt.date.fromisoformat(r), dt.date.fromisoformat(s)) for r, s in recorded] == list(table)


def test_shifted_instants_keep_their_new_york_time_of_day(synth_release: Release):
    from evalkit_core._edgar_rules import NEW_YORK

    main = {r["row_key"]: r for r in synth_release.arm("main").iter_rows(named=True)}
    checked = 0
    for r in synth_release.arm("shifted").iter_rows(named=True):
        real = main[r["row_key"]]["acceptance_at"]
        if real is None:
            continue
        shown = r["acceptance_at"]
        assert shown.astimezone(NEW_YORK).time() == real.astimezone(NEW_YORK).time()
        assert shown.astimezone(NEW_YORK).date() == synth_release.shift.date(real.astimezone(NEW_YORK).date())
        checked += 1
    assert checked > 300


# --- one answer for rows that do not exist and rows not yet knowable ------------------------------------------


def _other_release_key(tmp_path: Path) -> str:
    other = write_synth_release(
        tmp_path / "other", rows=50, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 10), seed=99
    )
    return Release.load(other).arm("main").get_column("row_key")[0]


def test_a_row_that_does_not_exist_answers_exactly_as_one_not_yet_knowable(synth_release: Release, tmp_path):
    cal = nyse()
    s_idx = cal.index_of(dt.date(2023, 3, 1))
    main = synth_release.arm("main")
    probes = [
        "r" + "0" * 20,
        "r" + hashlib.sha256(b"x").hexdigest()[:20],
        _other_release_key(tmp_path),
        "abc",
        "",
        synth_release.answer_key.get_column("accession")[0],  # an accession number is not a row key
    ]
    for arm in ARMS:
        for clock in CLOCKS:
            view = CellView(arm, Clock(clock), synth_release.arm(arm), main, cal, synth_release.shift)
            tb = Toolbox(view, s_idx, lambda *_: None)
            future = next(view.row_keys[i] for i in range(len(view)) if view.entry_index[i] > s_idx)
            want = tb.pit_read(future)
            assert want["status"] == "not_yet_knowable"
            for fake in probes:
                got = tb.pit_read(fake)
                assert {**got, "row_key": future} == want, (arm, clock, fake)
                assert json.dumps({**got, "row_key": None}, sort_keys=True) == json.dumps(
                    {**want, "row_key": None}, sort_keys=True
                )


def test_a_run_records_the_same_answer_for_both(
    synth_release_dir: Path, synth_release: Release, tmp_path, events_of
):
    cal = nyse()
    main = synth_release.arm("main")
    # Filed after the window: not knowable at any of its bells under any clock.
    late = main.filter(main.get_column("partition_date") > dt.date(2023, 3, 14))
    future = late.get_column("row_key")[0]
    fake = "r" + "9" * 20

    def oracle_seeker(prompt: str, tools: Any) -> list[str]:
        tools.pit_read(future)
        tools.pit_read(fake)
        return []

    cfg = RunConfig(
        bundle_path=str(synth_release_dir),
        start=RUN_START,
        end=RUN_END,
        trajectory_path=str(tmp_path / "t.jsonl"),
        receipt_path=str(tmp_path / "r.json"),
        probe_items=0,
    )
    body = run(from_callable(oracle_seeker), cfg, synth_release).body
    reads = [
        e for e in events_of(tmp_path / "t.jsonl") if e["type"] == "tool_call" and e["tool"] == "pit_read"
    ]
    # two reads per session of every cell: the window's 8, and a served shifted cell's hidden days around them
    window = len(cal.between(RUN_START, RUN_END))
    assert [c["sessions"] for c in body["cells"]] == [window] * 6 + [window + HIDDEN_DAYS] * 3
    assert len(reads) == 2 * sum(c["sessions"] for c in body["cells"])
    for a, b in zip(reads[::2], reads[1::2], strict=True):
        assert a["args"]["row_key"] == future and b["args"]["row_key"] == fake
        assert {**a["result"], "row_key": fake} == b["result"]


# --- the probe: not_run leaves the masks unproven; answers are normalised -------------------------------------


def test_an_agent_that_reads_nothing_through_the_tools_leaves_the_masks_unproven(
    synth_release_dir, cli, tmp_path, monkeypatch
):
    cfg = RunConfig(
        bundle_path=str(synth_release_dir),
        forms=("8-K",),
        start=RUN_START,
        end=RUN_END,
        trajectory_path=str(tmp_path / "t.jsonl"),
        receipt_path=str(tmp_path / "r.json"),
    )

    def blind(prompt: str, tools: Any) -> list[str]:
        return []

    body = run(from_callable(blind), cfg).body
    assert body["valid"] is True
    assert body["probe"]["verdict"] == "not_run"
    # The harness's decoders still run: this window (8 sessions) is too short for any mask to hold against an
    # attacker who knows it, and the receipt says so (a uniform guess among its days is right 1 time in 8), so the
    # masks leak whatever the agent answered (or did not answer).
    assert body["masks"] == "leak"
    assert "shifted/window_uniform_guess" in body["decoders"]["broken_by"]
    assert [lim.startswith("a window of 8 filing days cannot hold") for lim in body["decoders"]["limits"]] == [True]
    assert body["decoders"]["holds_against_public_knowledge"] is True
    # Without the masks served, the record-holding decoders line the days up and break the shifted arm too.
    plain = attrs.evolve(cfg, mask_decoys=False, trajectory_path=str(tmp_path / "t3.jsonl"), receipt_path=str(tmp_path / "r3.json"))
    body = run(from_callable(blind), plain).body
    assert "shifted/count_alignment" in body["decoders"]["broken_by"] and body["receipt_version"] == 2
    assert "limits" not in body["decoders"]
    # Without a masked arm no decoder runs and the probe has nothing to ask: unproven.
    main_only = attrs.evolve(cfg, arms=("main",), trajectory_path=str(tmp_path / "t2.jsonl"), receipt_path=str(tmp_path / "r2.json"))
    body = run(from_callable(blind), main_only).body
    assert body["masks"] == "unproven"
    assert body["decoders"]["arms"] == {}
    # The same from the command line: the table says so on its first line and on the probe line.
    (tmp_path / "blind_agent_for_masks_test.py").write_text("def agent(prompt, tools):\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    main_only.dump(tmp_path / "run.json")
    code, out, _ = cli(
        "run", "--config", tmp_path / "run.json", "--agent", "blind_agent_for_masks_test:agent"
    )
    assert code == 0
    assert "valid=True  masks=unproven" in out
    assert "the masks are unproven" in out
    # The stub reads through the tools with every arm: its probe holds, the decoders do not.
    cfg.dump(tmp_path / "run3.json")
    code, out, _ = cli("run", "--config", tmp_path / "run3.json")
    assert code == 0
    assert "masks=leak" in out
    assert re.search(r"^probe\s+mask_holds", out, re.MULTILINE)
    assert re.search(r"^decoders\s+broken by .*shifted/window_uniform_guess", out, re.MULTILINE)
    assert re.search(r"^limit\s+a window of 8 filing days cannot hold", out, re.MULTILINE)


@pytest.mark.parametrize(
    "text",
    [
        "March 3, 2023",
        "3 March 2023",
        "2023-03-03",
        "03/03/2023",
        "Mar. 3rd, 2023",
        "the 3rd of March 2023",
        "03-Mar-2023",
        "2023 March 3",
        "2023.03.03",
        "３ March ２０２３",  # full-width digits  # noqa: RUF001
        "March\u00a03,\u00a02023",  # non-breaking spaces
        "2023\u201103\u201103",  # non-breaking hyphens
        "MARCH 3RD, 2023",
        "Mar 3 '23 -- no; 3/3/23",
    ],
)
def test_probe_reads_date_renderings(text):
    truth = {
        "issuer": "MACY'S INC",
        "ticker": "M",
        "cik": "0000794367",
        "partition_date": dt.date(2023, 3, 3),
    }
    assert score_answer(text, truth)["date_recovered"] is True


@pytest.mark.parametrize(
    "text",
    ["Macy\u2019s", "MACYS", "macy's inc.", "Ｍａｃｙ'ｓ", "Ma\u200bcy's", "ma\u0301cy's"],  # noqa: RUF001
)
def test_probe_reads_issuer_names_through_unicode_and_apostrophes(text):
    truth = {
        "issuer": "MACY'S INC",
        "ticker": "M",
        "cik": "0000794367",
        "partition_date": dt.date(2023, 3, 3),
    }
    got = score_answer(text, truth)
    assert got["issuer_recovered"] is True
    assert "name" in got["issuer_matched_by"]


def test_probe_does_not_overreach():
    truth = {
        "issuer": "MACY'S INC",
        "ticker": "M",
        "cik": "0000794367",
        "partition_date": dt.date(2023, 3, 3),
    }
    for text in ("March 2023", "2033-03-03", "3/3/2033", "March 13, 2023", "macy", "the market"):
        got = score_answer(text, truth)
        assert not got["date_recovered"], text
        assert not got["issuer_recovered"], text
