"""Hostile agents against pick acceptance: the harness decides what is traded, from its own tables.

An agent that picks rows it could not have known (learnt elsewhere: a file, a previous cell, a guess) has those
picks refused, counted and never traded; an agent that rewrites the tools it holds (a proxy in its jailed
process: the toolbox itself stays with the harness) changes nothing the harness counts. The entry oracle here is
computed by hand from the release (bisect over the NYSE opening bells), not by the code under test, and handed
to the agents as plain data (they run in their own jailed processes).
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunConfig, from_callable, load_prices, run
from evalkit_core import Release, nyse

UTC = dt.UTC
RUN_START, RUN_END = "2023-03-01", "2023-03-10"  # as in conftest.py
CLOCKS = ("leaky", "dump", "pit")
FAKE = "r" + "f" * 20  # well-formed, exists in no release


def _entries(release: Release) -> dict[str, dict[str, int]]:
    """clock -> row_key -> calendar index of the entry session, by hand."""
    opens = [s.open for s in nyse().all]
    out: dict[str, dict[str, int]] = {c: {} for c in CLOCKS}
    for r in release.arm("main").iter_rows(named=True):
        dump = dt.datetime.combine(r["published_at"], dt.time(23, 59, 59), tzinfo=UTC)
        known = {
            "leaky": dt.datetime.combine(r["partition_date"], dt.time(0), tzinfo=UTC),
            "dump": dump,
            "pit": dump
            if r["acceptance_at"] is None
            else max(r["acceptance_at"], r["disseminated_at"] or r["acceptance_at"]),
        }
        for c in CLOCKS:
            out[c][r["row_key"]] = bisect.bisect_right(opens, known[c])
    return out


def _shown_index(release: Release) -> dict[str, int]:
    """The real session index of every bell an agent is shown: the real date, and in the shifted arm its image."""
    cal = nyse()
    out: dict[str, int] = {}
    for real, image in release.shift.pairs:
        if cal.session_on(real) is not None:
            out[real.isoformat()] = out[image.isoformat()] = cal.index_of(real)
    return out


def _picker(
    release: Release, entries: dict[str, dict[str, int]], before: Callable[[Any], None] | None = None
):
    """Each session: the first row not yet knowable, one knowable row, a fabricated key and the knowable row again."""
    shown_index = _shown_index(release)

    def agent(prompt: str, tools: Any) -> list[str]:
        if "real filing date" in prompt:  # the probe
            return []
        s_idx = shown_index[tools.session_date]
        table = entries[str(tools.clock)]
        if before is not None:
            before(tools)
        future = sorted(k for k, e in table.items() if e > s_idx)[:1]
        known = sorted(k for k, e in table.items() if e <= s_idx)[-1:]
        return [*future, *known, FAKE, *known]

    return agent


def _run(release_dir: Path, prices: Path, agent: Callable[..., Any], out: Path) -> dict[str, Any]:
    cfg = RunConfig(
        bundle_path=str(release_dir),
        forms=("8-K",),
        start=RUN_START,
        end=RUN_END,
        trajectory_path=str(out / "t.jsonl"),
        receipt_path=str(out / "r.json"),
        mask_decoys=False,  # the window's sessions only: the masks as released (a served shifted cell runs hidden days too)
    )
    release = Release.load(release_dir)
    return run(from_callable(agent), cfg, release, load_prices(prices, source="synthetic")).body


@pytest.fixture(scope="module")
def release_8k(synth_release_dir: Path) -> Release:
    return Release.load(synth_release_dir).select(forms=["8-K"], start=RUN_START, end=RUN_END)


def test_future_picks_are_refused_counted_and_never_traded(
    synth_release_dir, synth_prices_path, release_8k, tmp_path, events_of
):
    entries = _entries(release_8k)
    body = _run(synth_release_dir, synth_prices_path, _picker(release_8k, entries), tmp_path)
    cal = nyse()
    sessions = [cal.index_of(s.date) for s in cal.between(RUN_START, RUN_END)]
    assert body["valid"] is True
    for cell in body["cells"]:
        table = entries[cell["clock"]]
        n_future = sum(1 for s in sessions if any(e > s for e in table.values()))
        n_known = sum(1 for s in sessions if any(e <= s for e in table.values()))
        assert n_future > 0, "the window must hold rows not yet knowable for the test to mean anything"
        assert cell["rejected_picks"] == {
            "unknown": len(sessions),
            "not_yet_knowable": n_future,
            "duplicate": n_known,
        }
        assert cell["trades"] == n_known
        if cell["clock"] != "leaky":
            assert cell["lookahead_trades"] == 0
    decisions = [e for e in events_of(tmp_path / "t.jsonl") if e["type"] == "decision"]
    assert len(decisions) == 9 * len(sessions)
    for d in decisions:
        for rej in d["rejected"]:
            assert rej["reason"] in {"not_yet_knowable", "unknown", "duplicate"}
        assert FAKE not in d["picks"]
        assert {r["row_key"] for r in d["rejected"] if r["reason"] == "not_yet_knowable"}.isdisjoint(
            d["picks"]
        )


# Each mutation rewrites what the agent holds: the tools object in its jailed process (the toolbox, its index,
# view and render cache are the harness's, out of reach). (The in-process toolbox these once rewrote is gone.)
MUTATIONS: dict[str, Callable[[Any], None]] = {
    "session index to the end of the calendar": lambda t: (
        object.__setattr__(t, "_index", 10**6),
        object.__setattr__(t, "_visible", 10**9),
    ),
    "bell moved to the last session": lambda t: (
        object.__setattr__(t, "session_date", "2049-12-31"),
        object.__setattr__(t, "known_at", "2049-12-31T14:30:00Z"),
    ),
    "arm and clock relabelled": lambda t: (
        object.__setattr__(t, "arm", "main"),
        object.__setattr__(t, "clock", "leaky"),
    ),
    "tools answer every row as entering at session 0": lambda t: object.__setattr__(
        t, "_tool", lambda name, args: {"status": "ok", "rows": [{"row_key": "x", "entry_session": "1993-01-04"}]}
    ),
    "the tools class rewritten for every later call": lambda t: setattr(
        type(t), "pit_list", lambda self, *a, **k: {"status": "ok", "rows": [], "total": 10**9}
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutating_the_toolbox_changes_nothing_the_harness_counts(
    name, synth_release_dir, synth_prices_path, release_8k, tmp_path
):
    entries = _entries(release_8k)
    honest = _run(synth_release_dir, synth_prices_path, _picker(release_8k, entries), tmp_path / "honest")

    def mutate(tools: Any) -> None:
        MUTATIONS[name](tools)
        # After the mutation the agent reads through its own (now lying or broken) tools: whatever they say,
        # the harness's decisions do not change.
        with contextlib.suppress(Exception):  # a toolbox the agent broke may raise: the agent's business
            tools.call("pit_list", {"limit": 5})

    hostile = _run(
        synth_release_dir, synth_prices_path, _picker(release_8k, entries, mutate), tmp_path / "hostile"
    )
    fields = (
        "trades",
        "scored_trades",
        "total_return",
        "lookahead_trades",
        "lookahead_checked",
        "rejected_picks",
        "rows_in_cell",
        "pit_fallback_rows",
        "trades_by_form",
    )
    assert hostile["valid"] is True, hostile["agent_errors"]
    for h, m in zip(honest["cells"], hostile["cells"], strict=True):
        assert {f: m[f] for f in fields} == {f: h[f] for f in fields}, (name, m["arm"], m["clock"])


def test_picks_that_are_not_strings_are_refused_not_a_crash(synth_release_dir, synth_prices_path, tmp_path):
    from evalkit.pit import AgentReply

    def junk(prompt: str, tools: Any) -> AgentReply:
        return AgentReply(picks=(["r" + "0" * 20], 5, None, {"row_key": "x"}))  # type: ignore[arg-type]

    body = _run(synth_release_dir, synth_prices_path, junk, tmp_path)
    assert body["valid"] is True
    sessions = len(nyse().between(RUN_START, RUN_END))
    for cell in body["cells"]:
        assert cell["trades"] == 0
        assert cell["rejected_picks"] == {"unknown": 4 * sessions, "not_yet_knowable": 0, "duplicate": 0}
