"""Scoring on a hand-built release whose every number is worked out by hand (see the table in conftest.py)."""

from __future__ import annotations

import pytest

from evalkit.pit import PricesError, RunConfig, from_callable, load_prices, run, stub_agent
from evalkit_core import Release

HOLD = 2


def _cfg(release_dir, **kw) -> RunConfig:
    base = {"bundle_path": str(release_dir), "start": "2023-03-01", "end": "2023-03-10", "hold_sessions": HOLD,
            "probe_items": 0, "mask_decoys": False}  # the window's sessions only: the masks as released (a served shifted cell runs hidden days too)
    return RunConfig(**{**base, **kw})


@pytest.fixture
def stub_run(hand_release_dir, hand_prices_path, in_tmp):
    prices = load_prices(hand_prices_path, source="hand-written test prices", pulled_at="2026-01-01")
    return run(stub_agent, _cfg(hand_release_dir), Release.load(hand_release_dir), prices)


def test_stub_returns_match_the_hand_computation(stub_run):
    for arm in ("main", "redacted", "shifted"):
        leaky, dump, pit = (stub_run.cell(arm, c) for c in ("leaky", "dump", "pit"))
        # leaky: A 03-02 -> 03-06 = +0.2 ; B 03-03 -> 03-07 = +0.2
        assert leaky["total_return"] == pytest.approx(0.2, abs=1e-6)
        # dump: A 03-03 -> 03-07 = -2/11 ; B 03-06 -> 03-08 = -3/11
        assert dump["total_return"] == pytest.approx(round((-2 / 11 - 3 / 11) / 2, 6), abs=1e-6)
        # pit: A 03-03 -> 03-07 = -2/11 ; B 03-03 -> 03-07 = +0.2
        assert pit["total_return"] == pytest.approx(round((-2 / 11 + 0.2) / 2, 6), abs=1e-6)
        for c in (leaky, dump, pit):
            assert c["trades"] == 5  # every row enters inside the window under every clock
            assert c["scored_trades"] == 2  # A and B
            assert c["unpriced_trades"] == 3  # C and E have no ticker, DDD has no prices
            assert c["trades_by_form"] == {"8-K": 5}
            assert c["rejected_picks"] == {"unknown": 0, "not_yet_knowable": 0, "duplicate": 0}
        assert leaky["reachable"] is False
        assert dump["reachable"] is True
        assert pit["reachable"] is True
        # Lookahead: leaky enters A (bell 14:30Z < 15:00Z), D (< 22:00Z) and E (< real 15:00Z) before acceptance;
        # C has no acceptance stamp anywhere and is not checked.
        assert (leaky["lookahead_trades"], leaky["lookahead_checked"]) == (3, 4)
        assert (dump["lookahead_trades"], dump["lookahead_checked"]) == (0, 4)
        assert (pit["lookahead_trades"], pit["lookahead_checked"]) == (0, 4)
        assert pit["pit_fallback_rows"] == 2  # C and E fall back to the dump rule
        assert leaky["pit_fallback_rows"] == dump["pit_fallback_rows"] == 0
    assert stub_run.body["protocol"]["P3_retrieval_timestamps"]["pit_fallback_rows"] == 2
    assert all(v == {"main_minus_shifted": 0.0, "main_minus_redacted": 0.0} for v in stub_run.body["contamination"].values())


def test_entry_sessions_in_decisions_match_the_hand_table(stub_run, hand_keys, events_of):
    want = {
        "leaky": {"A": "2023-03-02", "B": "2023-03-03", "C": "2023-03-06", "D": "2023-03-07", "E": "2023-03-09"},
        "dump": {"A": "2023-03-03", "B": "2023-03-06", "C": "2023-03-07", "D": "2023-03-08", "E": "2023-03-10"},
        "pit": {"A": "2023-03-03", "B": "2023-03-03", "C": "2023-03-07", "D": "2023-03-08", "E": "2023-03-10"},
    }
    name = {v: k for k, v in hand_keys.items()}
    got: dict[str, dict[str, str]] = {c: {} for c in want}
    for ev in events_of(stub_run.trajectory_path):
        if ev["type"] == "decision" and ev["arm"] == "main":
            for k in ev["picks"]:
                got[ev["clock"]][name[k]] = ev["session_date"]
    assert got == want


def test_contamination_deltas_are_main_minus_control(hand_release_dir, hand_prices_path, hand_keys, in_tmp):
    """main picks every fresh row; redacted picks only B; shifted picks only A."""
    only = {"main": None, "redacted": {hand_keys["B"]}, "shifted": {hand_keys["A"]}}

    def picky(prompt, tools):
        fresh = list(stub_agent(prompt, tools).picks)
        keep = only[tools.arm]
        return fresh if keep is None else [k for k in fresh if k in keep]

    prices = load_prices(hand_prices_path, source="hand")
    result = run(from_callable(picky, name="picky"), _cfg(hand_release_dir), Release.load(hand_release_dir), prices)
    a_leaky, a_dump, a_pit = 0.2, -2 / 11, -2 / 11
    b_leaky, b_dump, b_pit = 0.2, -3 / 11, 0.2
    main = {"leaky": 0.2, "dump": (a_dump + b_dump) / 2, "pit": (a_pit + b_pit) / 2}
    for clock, red, shf in (("leaky", b_leaky, a_leaky), ("dump", b_dump, a_dump), ("pit", b_pit, a_pit)):
        assert result.total_return("redacted", clock) == pytest.approx(red, abs=1e-6)
        assert result.total_return("shifted", clock) == pytest.approx(shf, abs=1e-6)
        delta = result.body["contamination"][clock]
        assert delta["main_minus_redacted"] == pytest.approx(main[clock] - red, abs=2e-6)
        assert delta["main_minus_shifted"] == pytest.approx(main[clock] - shf, abs=2e-6)
    assert result.body["contamination"]["pit"]["main_minus_redacted"] == pytest.approx(1 / 110 - 0.2, abs=2e-6)


def test_delta_is_null_when_a_side_has_no_scored_trade(hand_release_dir, hand_prices_path, in_tmp):
    def main_only(prompt, tools):
        return list(stub_agent(prompt, tools).picks) if tools.arm == "main" else []

    prices = load_prices(hand_prices_path, source="hand")
    result = run(from_callable(main_only), _cfg(hand_release_dir), Release.load(hand_release_dir), prices)
    assert result.total_return("shifted", "pit") is None
    assert result.cell("shifted", "pit")["trades"] == 0
    assert result.body["contamination"]["pit"] == {"main_minus_shifted": None, "main_minus_redacted": None}


def test_unknown_future_and_duplicate_picks_are_recorded_never_traded(
    hand_release_dir, hand_prices_path, hand_keys, in_tmp, events_of
):
    bogus = "r" + "f" * 20

    first_seen: set[tuple[str, str]] = set()

    def greedy(prompt, tools):
        fresh = list(stub_agent(prompt, tools).picks)
        # E is knowable from 03-09 at the earliest: picking it at the first session must be refused. (The first
        # session of each cell: the shifted arm's dates are a secret offset away, so no date says which it is.)
        cell = (tools.arm, tools.clock)
        early = [hand_keys["E"]] if cell not in first_seen else []
        first_seen.add(cell)
        return [bogus, "not-a-key", *early, *fresh, *fresh]

    prices = load_prices(hand_prices_path, source="hand")
    result = run(from_callable(greedy), _cfg(hand_release_dir), Release.load(hand_release_dir), prices)
    stub = run(stub_agent, _cfg(hand_release_dir, trajectory_path="s.jsonl", receipt_path="s.json"),
               Release.load(hand_release_dir), prices)
    for arm in ("main", "redacted", "shifted"):
        for clock in ("leaky", "dump", "pit"):
            got, ref = result.cell(arm, clock), stub.cell(arm, clock)
            for field in ("trades", "scored_trades", "unpriced_trades", "total_return", "lookahead_trades"):
                assert got[field] == ref[field], (arm, clock, field)
            assert got["rejected_picks"] == {"unknown": 2 * 8, "not_yet_knowable": 1, "duplicate": 5}
    decisions = [e for e in events_of(result.trajectory_path) if e["type"] == "decision"]
    first = decisions[0]
    assert {"row_key": bogus, "reason": "unknown"} in first["rejected"]
    assert {"row_key": "not-a-key", "reason": "unknown"} in first["rejected"]
    assert {"row_key": hand_keys["E"], "reason": "not_yet_knowable"} in first["rejected"]
    assert bogus not in {k for d in decisions for k in d["picks"]}


def test_exit_beyond_the_price_file_is_unpriced(hand_release_dir, tmp_path, in_tmp):
    short = tmp_path / "short.csv"
    # AWI priced to 03-06 and BBB on 03-03 only: A leaky (03-02 -> 03-06) is the only trade with both opens.
    short.write_text("ticker,date,open\nAWI,2023-03-02,100\nAWI,2023-03-03,110\nAWI,2023-03-06,120\nBBB,2023-03-03,50\n")
    result = run(stub_agent, _cfg(hand_release_dir, arms=("main",)), Release.load(hand_release_dir),
                 load_prices(short, source="hand"))
    leaky = result.cell("main", "leaky")
    assert leaky["scored_trades"] == 1
    assert leaky["unpriced_trades"] == 4
    assert leaky["total_return"] == pytest.approx(0.2, abs=1e-6)
    pit = result.cell("main", "pit")
    assert pit["scored_trades"] == 0
    assert pit["total_return"] is None
    assert pit["unpriced_trades"] == 5


def test_hold_sessions_changes_the_exit(hand_release_dir, hand_prices_path, in_tmp):
    prices = load_prices(hand_prices_path, source="hand")
    result = run(stub_agent, _cfg(hand_release_dir, hold_sessions=1, arms=("main",), clocks=("pit",)),
                 Release.load(hand_release_dir), prices)
    # A 03-03 -> 03-06: 120/110-1 ; B 03-03 -> 03-06: 55/50-1
    assert result.total_return("main", "pit") == pytest.approx(round((120 / 110 - 1 + 0.1) / 2, 6), abs=1e-6)


def test_price_statement_and_sha_are_in_the_receipt(stub_run, hand_prices_path):
    from evalkit_core import file_digest

    sha = file_digest(hand_prices_path)
    assert stub_run.body["prices"] == {"source": "hand-written test prices", "pulled_at": "2026-01-01", "sha256": sha}
    assert stub_run.body["binding"]["prices_sha256"] == sha
    assert stub_run.body["protocol"]["P4_costs_and_frictions"]["price_source"] == stub_run.body["prices"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("ticker,date,close\nAWI,2023-03-02,1\n", "open"),
        ("symbol,date,open\nAWI,2023-03-02,1\n", "ticker"),
        ("ticker,day,open\nAWI,2023-03-02,1\n", "date"),
        ("ticker,date,open\nAWI,03/02/2023,1\n", "date"),
    ],
)
def test_price_file_without_needed_columns_is_one_clear_error(tmp_path, content, needle):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(PricesError) as info:
        load_prices(p, source="x")
    assert needle in str(info.value)
    assert str(p) in str(info.value)


def test_price_source_is_required_and_missing_files_are_named(tmp_path, hand_prices_path):
    with pytest.raises(PricesError, match="source"):
        load_prices(hand_prices_path, source="")
    with pytest.raises(PricesError, match="not found"):
        load_prices(tmp_path / "nope.csv", source="x")


def test_parquet_prices_score_the_same(hand_release_dir, hand_prices_path, tmp_path, in_tmp):
    import polars as pl

    pq = tmp_path / "prices.parquet"
    pl.read_csv(hand_prices_path, try_parse_dates=True).write_parquet(pq)
    result = run(stub_agent, _cfg(hand_release_dir, arms=("main",), clocks=("pit",)), Release.load(hand_release_dir),
                 load_prices(pq, source="hand"))
    assert result.total_return("main", "pit") == pytest.approx(round((-2 / 11 + 0.2) / 2, 6), abs=1e-6)
