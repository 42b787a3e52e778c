"""The toolbox answers only with what was knowable at its bell, in every arm and clock, and says so.

The oracle here is independent of CellView: known_at from the rules in DESIGN.md computed row by row from the
main arm, then the first NYSE session whose opening bell is strictly after it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalkit.pit import CellView, RunConfig, Toolbox, run, stub_agent
from evalkit_core import Clock, Release, ShiftMap, canonical_bytes, known_at, nyse

UTC = dt.UTC
ARMS = ("main", "redacted", "shifted")
CLOCKS = ("leaky", "dump", "pit")
ENVELOPE = ("arm", "clock", "session_date", "known_at")
IDENTITY_FIELDS = ("issuer", "cik", "accession", "url", "ticker")


def _oracle_known_at(row: dict[str, Any], clock: str) -> dt.datetime:
    if clock == "leaky":
        return dt.datetime.combine(row["partition_date"], dt.time(0), tzinfo=UTC)
    dump = dt.datetime.combine(row["published_at"], dt.time(23, 59, 59), tzinfo=UTC)
    if clock == "dump" or row["acceptance_at"] is None:
        return dump
    later = row["acceptance_at"]
    if row["disseminated_at"] is not None and row["disseminated_at"] > later:
        later = row["disseminated_at"]
    return later


@pytest.fixture(scope="module")
def oracle(synth_release: Release) -> dict[str, dict[str, int]]:
    """clock -> row_key -> calendar index of the entry session (computed without CellView)."""
    cal = nyse()
    opens = [s.open for s in cal.all]
    import bisect

    out: dict[str, dict[str, int]] = {}
    rows = list(synth_release.arm("main").iter_rows(named=True))
    for clock in CLOCKS:
        out[clock] = {r["row_key"]: bisect.bisect_right(opens, _oracle_known_at(r, clock)) for r in rows}
    return out


SHIFT: dict[str, ShiftMap] = {}  # the synthetic release's shift map, set by the views fixture


@pytest.fixture(scope="module")
def views(synth_release: Release) -> dict[tuple[str, str], CellView]:
    cal = nyse()
    main = synth_release.arm("main")
    SHIFT["map"] = synth_release.shift
    return {
        (a, c): CellView(a, Clock(c), synth_release.arm(a), main, cal, synth_release.shift)
        for a in ARMS
        for c in CLOCKS
    }


def _image(day: dt.date) -> dt.date:
    return SHIFT["map"].session_date(day)


def _z(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))


def _check_shifted_known_at(row: dict[str, Any], clock: str) -> None:
    """A shifted row's known_at reads like any row's: the clock's rule on its (shifted) fields, entering at its
    entry_session: before that session's bell and not before the bell of the session before."""
    cal = nyse()
    entry = cal.session_on(dt.date.fromisoformat(row["entry_session"]))
    assert entry is not None, row  # a real NYSE session of the shifted calendar
    shown = _z(row["known_at"])
    assert cal.all[cal.index_of(entry.date) - 1].open <= shown < entry.open, row
    rule = known_at(row, clock).at
    if cal.next_session_after(rule).date == entry.date:
        assert shown == rule, row


@pytest.fixture(scope="module")
def session_indices() -> list[int]:
    cal = nyse()
    return [cal.index_of(s.date) for s in cal.between("2023-02-01", "2023-04-10")]


def _toolbox(view: CellView, s_idx: int, log: list | None = None) -> Toolbox:
    def record(tool, args, result):
        if log is not None:
            log.append((tool, args, result))

    return Toolbox(view, s_idx, record)


def _check_envelope(ans: dict[str, Any], arm: str, clock: str, s_idx: int) -> None:
    session = nyse().all[s_idx]
    shifted = arm == "shifted"
    want_date = (_image(session.date) if shifted else session.date).isoformat()
    image = nyse().session_on(_image(session.date))
    assert image is not None
    want_bell = image.open if shifted else session.open
    assert ans["arm"] == arm
    assert ans["clock"] == clock
    assert ans["session_date"] == want_date
    assert ans["known_at"] == want_bell.strftime("%Y-%m-%dT%H:%M:%SZ")


@given(data=st.data())
def test_no_answer_holds_a_row_not_yet_knowable(data, views, oracle, session_indices, synth_release):
    arm = data.draw(st.sampled_from(ARMS), label="arm")
    clock = data.draw(st.sampled_from(CLOCKS), label="clock")
    s_idx = data.draw(st.sampled_from(session_indices), label="session")
    view = views[(arm, clock)]
    entries = oracle[clock]
    tb = _toolbox(view, s_idx)
    visible = {k for k, e in entries.items() if e <= s_idx}

    answers: list[dict[str, Any]] = []
    limit = data.draw(st.integers(1, 200), label="limit")
    offset = data.draw(st.integers(0, 1600), label="offset")
    form = data.draw(st.sampled_from([None, "8-K", "4", "10-Q", "NOPE"]), label="form")
    listing = tb.pit_list(limit=limit, offset=offset, form=form)
    answers.append(listing)
    want_total = sum(1 for k in visible if form is None or view.frame.row(view.position[k], named=True)["form"] == form)
    assert listing["total"] == want_total
    assert len(listing["rows"]) == max(0, min(limit, want_total - offset))
    if form is not None:
        assert all(r["form"] == form for r in listing["rows"])
    query = data.draw(st.sampled_from(["8-k", "inc", "[issuer]", "energy", "zzz-no-hit", "corp 4"]), label="query")
    answers.append(tb.pit_search(query, limit=data.draw(st.integers(1, 200))))
    keys = data.draw(st.lists(st.sampled_from(sorted(entries)), min_size=1, max_size=8), label="reads")
    reads = [tb.pit_read(k) for k in keys]
    answers.extend(reads)
    answers.append(tb.pit_coverage())

    for ans in answers:
        _check_envelope(ans, arm, clock, s_idx)
        listed = ans.get("rows") if isinstance(ans.get("rows"), list) else []  # pit_coverage's "rows" is a count
        for row in [*listed, *([ans["row"]] if "row" in ans else [])]:
            assert entries[row["row_key"]] <= s_idx, (arm, clock, row)
            want_entry = nyse().all[entries[row["row_key"]]].date
            assert row["entry_session"] == (_image(want_entry) if arm == "shifted" else want_entry).isoformat()
            if arm == "shifted":
                _check_shifted_known_at(row, clock)
    for k, ans in zip(keys, reads, strict=True):
        if k in visible:
            assert ans["status"] == "ok"
            assert ans["row"]["row_key"] == k
        else:
            assert ans == {"status": "not_yet_knowable", "row_key": k, **{f: ans[f] for f in ENVELOPE}}
    cov = answers[-1]
    assert cov["rows"] == len(visible)
    assert sum(cov["by_form"].values()) == len(visible) == sum(cov["by_date"].values())
    acc = cov["acceptance_coverage"]
    assert acc["with_acceptance_at"] + acc["without"] == len(visible)


def test_not_yet_knowable_read_is_exactly_the_key_and_envelope(views, oracle, synth_release):
    cal = nyse()
    s_idx = cal.index_of(dt.date(2023, 3, 1))
    for arm in ARMS:
        for clock in CLOCKS:
            future = next(k for k, e in sorted(oracle[clock].items()) if e > s_idx)
            ans = _toolbox(views[(arm, clock)], s_idx).pit_read(future)
            assert set(ans) == {"status", "row_key", *ENVELOPE}
            assert ans["status"] == "not_yet_knowable"
            assert ans["row_key"] == future
            _check_envelope(ans, arm, clock, s_idx)
    # A row that does not exist gets the same answer as one not yet knowable (no existence oracle).
    unknown = _toolbox(views[("main", "pit")], s_idx).pit_read("r" + "0" * 20)
    assert unknown == {"status": "not_yet_knowable", "row_key": "r" + "0" * 20, **{f: unknown[f] for f in ENVELOPE}}


def test_visibility_is_a_growing_prefix(views, oracle, session_indices):
    """What is visible at S stays visible at every later session; totals never shrink."""
    for clock in CLOCKS:
        view = views[("main", clock)]
        last_total, last_keys = -1, set()
        for s_idx in session_indices:
            ans = _toolbox(view, s_idx).pit_list(limit=200)
            keys = {r["row_key"] for r in ans["rows"]}
            assert ans["total"] >= last_total
            assert ans["total"] == sum(1 for e in oracle[clock].values() if e <= s_idx)
            last_total = ans["total"]
            if ans["total"] <= 200:
                assert last_keys <= keys
                last_keys = keys


def test_list_is_newest_first_and_pages_tile(views):
    view = views[("main", "pit")]
    s_idx = nyse().index_of(dt.date(2023, 3, 10))
    tb = _toolbox(view, s_idx)
    total = tb.pit_list(limit=1)["total"]
    pages = []
    for off in range(0, total, 137):
        pages.extend(r["row_key"] for r in tb.pit_list(limit=137, offset=off)["rows"])
    assert len(pages) == total == len(set(pages))
    rows = [view.render(view.position[k]) for k in pages]
    order = [(r["entry_session"], r["known_at"], r["row_key"]) for r in rows]
    assert order == sorted(order, reverse=True)


def test_answers_are_deterministic(views):
    s_idx = nyse().index_of(dt.date(2023, 3, 8))
    for arm in ARMS:
        view = views[(arm, "pit")]
        a, b = _toolbox(view, s_idx), _toolbox(view, s_idx)
        assert a.pit_list(limit=50, offset=3) == b.pit_list(limit=50, offset=3)
        assert a.pit_search("8-k", limit=30) == b.pit_search("8-k", limit=30)
        assert a.pit_coverage() == b.pit_coverage()
        assert json.dumps(a.pit_coverage()) == json.dumps(b.pit_coverage())


def test_arm_renderings(views, answer_key):
    s_idx = nyse().index_of(dt.date(2023, 3, 10))
    by_arm = {arm: _toolbox(views[(arm, "pit")], s_idx).pit_list(limit=200)["rows"] for arm in ARMS}
    assert [r["row_key"] for r in by_arm["main"]] == [r["row_key"] for r in by_arm["redacted"]] == [
        r["row_key"] for r in by_arm["shifted"]
    ]
    for main, red, shf in zip(by_arm["main"], by_arm["redacted"], by_arm["shifted"], strict=True):
        truth = answer_key[main["row_key"]]
        assert main["issuer"] == truth["issuer"]
        assert main["cik"] == truth["cik"]
        assert main["accession"] == truth["accession"]
        assert "url" in main
        assert "ticker" not in main  # tickers live in the answer key only
        for row in (red, shf):
            assert not set(IDENTITY_FIELDS) & set(row)
            assert truth["issuer"] not in row["title"]
            assert row["title"] == f"[ISSUER] {main['form']}"
        shift = SHIFT["map"]
        for field in ("partition_date", "published_at", "entry_session"):
            assert red[field] == main[field]
            assert shf[field] == shift.date(dt.date.fromisoformat(main[field])).isoformat()
            assert nyse().session_on(dt.date.fromisoformat(shf[field])) is not None or field != "entry_session"
        for field in ("acceptance_at", "disseminated_at"):
            if field not in main:
                assert field not in red
                assert field not in shf
                continue
            assert red[field] == main[field]
            assert shf[field] == shift.instant(_z(main[field])).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert red["known_at"] == main["known_at"]
        _check_shifted_known_at(shf, "pit")


def test_control_arms_use_the_main_arms_clocks(views, oracle):
    s_idx = nyse().index_of(dt.date(2023, 3, 31))
    for clock in CLOCKS:
        entry = {}
        for arm in ARMS:
            view = views[(arm, clock)]
            tb = _toolbox(view, s_idx)
            got = {}
            for off in range(0, tb.pit_list(limit=1)["total"], 200):
                for r in tb.pit_list(limit=200, offset=off)["rows"]:
                    got[r["row_key"]] = r["entry_session"]
            entry[arm] = got
        assert entry["main"] == entry["redacted"]
        assert set(entry["shifted"]) == set(entry["main"])
        for k, d in entry["main"].items():
            assert entry["shifted"][k] == _image(dt.date.fromisoformat(d)).isoformat()
            assert d == nyse().all[oracle[clock][k]].date.isoformat()


def test_search_stays_within_what_is_visible_and_reports_hits(views, oracle, synth_release):
    s_idx = nyse().index_of(dt.date(2023, 2, 15))
    main = synth_release.arm("main")
    issuer = main.row(0, named=True)["issuer"]
    view = views[("main", "pit")]
    ans = _toolbox(view, s_idx).pit_search(issuer.lower(), limit=200)
    want = {r["row_key"] for r in main.iter_rows(named=True) if r["issuer"] == issuer and oracle["pit"][r["row_key"]] <= s_idx}
    assert {r["row_key"] for r in ans["rows"]} == want
    assert ans["total"] == len(want)
    # The redacted arm cannot be searched by the issuer's name.
    hidden = _toolbox(views[("redacted", "pit")], s_idx).pit_search(issuer.lower(), limit=200)
    assert hidden["total"] == 0
    assert hidden["rows"] == []


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("pit_list", {"limit": 0}),
        ("pit_list", {"limit": 201}),
        ("pit_list", {"limit": "5"}),
        ("pit_list", {"offset": -1}),
        ("pit_list", {"limit": True}),
        ("pit_search", {"query": ""}),
        ("pit_search", {"query": "x", "limit": 0}),
        ("pit_frobnicate", {}),
        ("pit_read", {"row_key": 7}),
    ],
)
def test_bad_tool_arguments_answer_an_error_with_the_envelope(views, call, args):
    s_idx = nyse().index_of(dt.date(2023, 3, 1))
    log: list = []
    ans = _toolbox(views[("shifted", "dump")], s_idx, log).call(call, args)
    assert ans["status"] in {"error", "not_yet_knowable"}
    assert "rows" not in ans
    assert "row" not in ans
    _check_envelope(ans, "shifted", "dump", s_idx)
    assert len(log) == 1  # recorded as a tool call


# --- a whole run: no answer-key identity in the control arms ---------------------------------------------------

_ROW_KEY = re.compile(r"\br[0-9a-f]{20}\b")


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def test_control_arm_events_carry_no_identity_and_no_real_dates(synth_release_dir, answer_key, in_tmp):
    def curious(prompt, tools):
        picks = [r["row_key"] for r in tools.pit_list(limit=200)["rows"]][:3]
        tools.pit_search("inc")
        tools.pit_search("[issuer]", limit=5)
        for k in picks:
            tools.pit_read(k)
        tools.pit_coverage()
        return stub_agent(prompt, tools)

    from evalkit.pit import from_callable

    cfg = RunConfig(bundle_path=str(synth_release_dir), forms=("8-K", "10-Q"), start="2023-03-01", end="2023-03-10")
    result = run(from_callable(curious, name="curious"), cfg)
    issuers = {a["issuer"] for a in answer_key.values()}
    ciks = {a["cik"].lstrip("0") for a in answer_key.values()}
    accessions = {a["accession"] for a in answer_key.values()}
    real_year = re.compile(r"(?<![0-9A-Za-z])(2022|2023)(?![0-9A-Za-z])")
    checked = {"redacted": 0, "shifted": 0}
    main_has_identity = False
    for line in (in_tmp / cfg.trajectory_path).read_text().splitlines():
        ev = json.loads(line)
        if ev.get("type") == "run_start":
            continue
        if ev.get("arm") == "main":
            main_has_identity |= any(i in line for i in issuers)
            continue
        text = _ROW_KEY.sub("", line)
        assert '"ticker"' not in text
        if ev.get("arm") not in checked and ev.get("type") != "probe_item":
            continue
        for name in issuers:
            assert name not in text, (name, ev)
        for acc in accessions:
            assert acc not in text
            assert acc.replace("-", "") not in text
        for raw in _strings(ev):
            s = _ROW_KEY.sub("", raw)
            for cik in re.findall(r"\d{6,10}", s):
                assert cik.lstrip("0") not in ciks, (cik, ev)
            if ev.get("arm") == "shifted" or ev.get("type") == "probe_item":
                assert not real_year.search(s), (s, ev)
        if ev.get("arm") in checked:
            checked[ev["arm"]] += 1
    assert main_has_identity  # the scan would have seen identity had it leaked
    assert checked["redacted"] > 100
    assert checked["shifted"] > 100
    assert result.body["probe"]["items_asked"] > 0


def _reference_render(view: CellView, i: int) -> dict[str, Any]:
    """Row ``i`` rendered value by value in Python (what the toolbox did before it rendered blocks in polars)."""
    from evalkit_core import format_instant

    raw = view.frame.row(i, named=True)
    out: dict[str, Any] = {}
    for key in ("row_key", "form", "title", "issuer", "cik", "partition_date", "published_at", "acceptance_at",
                "disseminated_at", "accession", "url"):
        v = raw.get(key)
        if v is None:
            continue
        out[key] = format_instant(v) if isinstance(v, dt.datetime) else v.isoformat() if isinstance(v, dt.date) else v
    entry = view.calendar.all[raw["entry_index"]].date
    if view.shift is not None:
        out["known_at"] = format_instant(raw["shown_known_at"])
        out["entry_session"] = view.shift.session_date(entry).isoformat()
    else:
        out["known_at"] = format_instant(raw["known_at"])
        out["entry_session"] = entry.isoformat()
    return out


def test_block_rendering_equals_rendering_each_value(views):
    """Every row of every cell, in key order too: the vectorised rendering is the per-value one, byte for byte."""
    for view in views.values():
        step = max(1, len(view) // 3000)  # a few thousand rows a cell, spread over every block
        for i in [*range(0, len(view), step), len(view) - 1]:
            got, want = view.render(i), _reference_render(view, i)
            assert json.dumps(got) == json.dumps(want), (view.arm, str(view.clock), i)
        got = view.render(0)
        got["row_key"] = "changed"
        assert view.render(0)["row_key"] != "changed"  # callers get a copy


def test_shared_arm_rows_and_clock_order_render_what_a_lone_view_renders(
    synth_release: Release, views: dict[tuple[str, str], CellView]
) -> None:
    """A run formats an arm's rows once for its three cells and orders the rows once per clock for its three arms:
    every row of every cell must read exactly as a view built alone renders it (values, key order, nulls dropped),
    and a returned row is the caller's own (changing it changes nothing the next caller sees)."""
    from evalkit.pit._toolbox import ArmRows, clock_order

    cal = nyse()
    main = synth_release.arm("main")
    orders = {c: clock_order(main, Clock(c), cal) for c in CLOCKS}
    for a in ARMS:
        frame = synth_release.arm(a)
        shared = ArmRows(frame)
        for c in CLOCKS:
            view = CellView(a, Clock(c), frame, main, cal, synth_release.shift, shared, orders[c])
            alone = views[(a, c)]
            assert view.row_keys == alone.row_keys
            assert view.entry_index == alone.entry_index
            for i in range(len(view)):
                got, want = view.render(i), alone.render(i)
                assert list(got.items()) == list(want.items()), (a, c, i)
            first = view.render(0)
            first["title"] = "changed"
            assert view.render(0) == alone.render(0)
    with pytest.raises(ValueError, match="this arm's frame"):
        CellView("main", Clock("pit"), main, main, cal, None, ArmRows(synth_release.arm("redacted")))


# --- the rows' pre-encoded text (what the trajectory splices in) ---------------------------------------------

_AWKWARD = ['a "quoted" title', "back\\slash", "tab\tand\nnewline", "bell\x07 nul\x00 us\x1f", "é ü \u2028 \U0001f600", "\x7f"]


def _awkward_release(release: Release) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The synthetic main arm with every awkward string in titles and issuers (and some instants null)."""
    main = release.arm("main")
    n = main.height
    titles = [_AWKWARD[i % len(_AWKWARD)] + str(i) for i in range(n)]
    issuers = [None if i % 7 == 0 else _AWKWARD[(i * 5) % len(_AWKWARD)] for i in range(n)]
    awkward = main.with_columns(
        pl.Series("title", titles, dtype=pl.String),
        pl.Series("issuer", issuers, dtype=pl.String),
        pl.when(pl.int_range(pl.len()) % 3 == 0).then(None).otherwise(pl.col("disseminated_at")).alias("disseminated_at"),
    )
    return awkward, main


def test_render_json_is_the_canonical_json_of_render(views: dict[tuple[str, str], CellView], synth_release: Release) -> None:
    """Every row of every cell, and rows with quotes, backslashes, control characters, non-BMP text and nulls:
    the text joined from the pre-encoded pieces is byte for byte canonical_bytes of the row."""
    for view in views.values():
        for i in range(len(view)):
            assert view.render_json(i) == canonical_bytes(view.render(i)).decode(), (view.arm, view.clock, i)
    awkward, main = _awkward_release(synth_release)
    view = CellView("main", Clock("pit"), awkward, awkward, nyse())
    texts = [view.render_json(i) for i in range(len(view))]
    assert any('\\"' in t for t in texts) and any("\\u0000" in t for t in texts) and any("\\\\" in t for t in texts)
    for i in range(len(view)):
        assert view.render_json(i) == canonical_bytes(view.render(i)).decode(), i
    assert main.height == awkward.height


def test_rows_json_is_the_canonical_json_of_the_answer_rows(views: dict[tuple[str, str], CellView], session_indices: list[int]) -> None:
    view = views[("shifted", "pit")]
    tb = _toolbox(view, session_indices[-1])
    calls = (
        (lambda: tb.pit_list(limit=50, offset=3), "rows"),
        (lambda: tb.pit_list(limit=20, form="8-K"), "rows"),
        (lambda: tb.pit_search("inc", limit=30), "rows"),
        (lambda: tb.pit_read(view.row_keys[0]), "row"),
    )
    for call, field in calls:
        answer = call()
        assert answer["status"] == "ok"
        assert tb.rows_json == canonical_bytes(answer[field]).decode()
    tb.pit_read("no-such-key")
    assert tb.rows_json is None
    tb.pit_coverage()
    assert tb.rows_json is None


def test_views_of_one_clock_share_lookups_and_match_a_view_built_alone(synth_release: Release) -> None:
    from evalkit.pit._toolbox import cell_views

    cal = nyse()
    made = list(cell_views(synth_release, list(ARMS), list(CLOCKS), cal))
    by_clock: dict[str, list[CellView]] = {}
    for v in made:
        by_clock.setdefault(str(v.clock), []).append(v)
    for clock, vs in by_clock.items():
        assert all(v.lookups is vs[0].lookups for v in vs)  # built once per clock
        for v in vs:
            alone = CellView(v.arm, Clock(clock), synth_release.arm(v.arm), synth_release.arm("main"), cal, synth_release.shift)
            assert alone.lookups is not v.lookups
            assert (alone.row_keys, alone.entry_index, alone.position) == (v.row_keys, v.entry_index, v.position)
            assert (alone.by_form, alone.by_form_entry) == (v.by_form, v.by_form_entry)
            assert [alone.render_json(i) for i in range(len(alone))] == [v.render_json(i) for i in range(len(v))]
