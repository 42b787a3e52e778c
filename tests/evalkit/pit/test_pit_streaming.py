"""What the run holds does not grow with what it serves: the rows an agent is handed travel as the text the
trajectory records (never built as dicts on the harness's side), a cell's trades are tallied as they are decided
(counts and an exact running sum, never a list of trades), and the clocks' entry tables share one index of keys.
Each piece must give exactly what the whole-list version gave."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalkit.pit import CellView, Toolbox
from evalkit.pit._entries import EntryTable, entry_table, key_index
from evalkit.pit._jail_process import _result_message  # pyright: ignore[reportPrivateUsage]
from evalkit.pit._score import _exact_add  # pyright: ignore[reportPrivateUsage]
from evalkit.pit._toolbox import Unrendered
from evalkit_core import Clock, Release, nyse, with_entry

_FINITE = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)


@given(st.lists(st.one_of(_FINITE, st.floats(min_value=-1e-12, max_value=1e-12), st.integers(-5, 5).map(float)), min_size=1))
def test_the_running_exact_sum_gives_fmean_to_the_bit(xs: list[float]) -> None:
    partials: list[float] = []
    for x in xs:
        _exact_add(partials, x)
    assert math.fsum(partials) == math.fsum(xs)
    assert math.fsum(partials) / len(xs) == statistics.fmean(xs)


def test_the_running_sum_stays_small_over_many_returns() -> None:
    partials: list[float] = []
    for n in range(200_000):
        _exact_add(partials, ((n * 7919) % 1000 - 500) / 997.0)
    assert len(partials) < 40  # bounded by the exponent range, not by the count


@pytest.mark.parametrize("arm", ["main", "redacted", "shifted"])
@pytest.mark.parametrize("clock", ["leaky", "pit"])
def test_unrendered_answers_carry_exactly_the_rendered_rows(synth_release: Release, arm: str, clock: str) -> None:
    cal = nyse()
    view = CellView(arm, Clock(clock), synth_release.arm(arm), synth_release.arm("main"), cal, synth_release.shift)
    s_idx = cal.index_of(cal.between("2023-02-01", "2023-03-31")[-1].date)
    plain: list[dict[str, Any]] = []
    text: list[dict[str, Any]] = []
    rendered = Toolbox(view, s_idx, lambda _t, _a, r: plain.append(r))
    lean = Toolbox(view, s_idx, lambda _t, _a, r: text.append(r), render_rows=False)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("pit_list", {"limit": 50}),
        ("pit_list", {"limit": 7, "offset": 30, "form": "8-K"}),
        ("pit_search", {"query": "report", "limit": 25}),
        ("pit_search", {"query": "no such words anywhere", "limit": 5}),
        ("pit_list", {"limit": 0}),  # refused: an error answer, no rows
        ("pit_read", {"row_key": view.row_keys[3]}),
        ("pit_coverage", {}),
    ]
    served = 0
    for name, args in calls:
        want = rendered.call(name, args)
        got = lean.call(name, args)
        message = _result_message(lean, got)
        if isinstance(got.get("rows"), Unrendered):
            assert lean.unrendered == "rows"
            assert [r["row_key"] for r in got["rows"]] == [r["row_key"] for r in want["rows"]]
            # what the agent's process rebuilds from the message: the rendered answer, row for row
            head, field, rows_json = message[1], message[2], message[3]
            assert field not in head
            assert {**head, field: json.loads(rows_json)} == want
            assert rows_json == rendered.rows_json
            served += len(want["rows"])
        else:
            assert lean.unrendered is None
            assert message == ["result", want]
            assert got == want
    assert served > 50  # the calls above served rows: the comparison compared something


def test_entry_tables_share_one_index_and_answer_as_dicts(synth_release: Release) -> None:
    cal = nyse()
    main = synth_release.arm("main")
    index = key_index(main)
    for clock in ("leaky", "dump", "pit"):
        table = entry_table(synth_release, Clock(clock), cal, index)
        frame = with_entry(main.select("row_key", "partition_date", "published_at", "acceptance_at", "disseminated_at"), Clock(clock), cal)
        want = dict(zip(frame.get_column("row_key").to_list(), frame.get_column("entry_index").to_list(), strict=True))
        assert dict(table) == want
        assert len(table) == len(want)
        some = next(iter(want))
        assert table[some] == want[some] and table.get(some) == want[some] and some in table
        for odd in ("nope", 3, None, b"x", ("a",)):
            assert table.get(odd) is None
            assert odd not in table
    with pytest.raises(ValueError, match="one entry per key"):
        EntryTable(index, [1, 2])


@given(
    st.lists(st.tuples(st.integers(0, 86_399), st.integers(0, 30)), min_size=1, max_size=60),
    st.integers(-100, 86_500),
)
def test_the_nearest_time_of_day_by_bisection_is_the_scan(cands: list[tuple[int, int]], tod: int) -> None:
    """The decoder's nearest-time lookup (bisection over sorted times) names the dates a scan of every candidate
    names, in the record's order, ties on both sides included."""
    import datetime as dt

    from evalkit.pit._decoders_served import _nearest_dates  # pyright: ignore[reportPrivateUsage]

    rows = [(t, dt.date(2020, 1, 1) + dt.timedelta(days=d)) for t, d in cands]
    gap = min(abs(t - tod) for t, _ in rows)
    want = tuple(d for t, d in rows if abs(t - tod) == gap)
    group: dict[int, list[tuple[int, dt.date]]] = {}
    for i, (t, d) in enumerate(rows):
        group.setdefault(t, []).append((i, d))
    assert _nearest_dates(group, sorted(group), tod) == want


_ODD_TEXT = ['say "hi"', "back\\slash", "tab\there", "ctl\x01\x1f", "line\u2028sep", "emoji \U0001f600", "é ñ 中文", "", "}{],["]


def test_rows_sent_as_text_survive_every_character_a_release_can_hold(synth_release: Release) -> None:
    """Titles and issuers holding what canonical JSON escapes (quotes, backslashes, control characters), separators
    JSON allows raw, text outside the BMP and JSON punctuation: the agent's decoded rows are the rendered rows."""
    import polars as pl

    cal = nyse()
    main = synth_release.arm("main")
    odd = pl.Series([_ODD_TEXT[i % len(_ODD_TEXT)] for i in range(main.height)], dtype=pl.String)
    arm = main.with_columns(odd.alias("title"), odd.reverse().alias("issuer"))
    view = CellView("main", Clock("pit"), arm, main, cal)
    s_idx = cal.index_of(cal.between("2023-02-01", "2023-03-31")[-1].date)
    rendered = Toolbox(view, s_idx, lambda *_: None)
    lean = Toolbox(view, s_idx, lambda *_: None, render_rows=False)
    seen: set[str] = set()
    for offset in range(0, 400, 100):
        want = rendered.call("pit_list", {"limit": 100, "offset": offset})
        message = _result_message(lean, lean.call("pit_list", {"limit": 100, "offset": offset}))
        assert {**message[1], message[2]: json.loads(message[3])} == want
        seen.update(r["title"] for r in want["rows"])
    assert set(_ODD_TEXT) <= seen
