"""Receipt forgery, as an attacker would try it: each attempt must fail ``verify`` with a MISMATCH line naming it.

- re-hashed (and re-signed) edits of returns and of validity;
- a body that contradicts its own trajectory;
- a receipt for a run that never happened (a fabricated trajectory, scored with the harness's own code);
- a receipt re-signed with another key;
- dropped trajectory lines; swapped cells;
- poisoned caches (release Parquet, NYSE calendar JSON): an edit is rebuilt and the run is unchanged; an edit
  that also rewrites the recorded digest is used, and the run then does not verify.

The insider variants re-sign with the local key itself: the signature then holds, and the replay is what fails.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunConfig, from_callable, load_prices, run, stub_agent, verify_pit_receipt
from evalkit.pit._verify import replay_body
from evalkit_core import (
    SigningKey,
    canonical_bytes,
    digest_bytes,
    load_signing_key,
    make_receipt,
    read_receipt,
    write_receipt,
)

OTHER = SigningKey.from_seed(b"\x42" * 32)  # the forger's own key


def _config(base: Path, release: Path, prices: Path | None, **extra: Any) -> RunConfig:
    fields: dict[str, Any] = {
        "bundle_path": str(release),
        "forms": ("8-K",),
        "start": "2023-03-01",
        "end": "2023-03-10",
        "trajectory_path": str(base / "t.jsonl"),
        "receipt_path": str(base / "r.json"),
        "probe_items": 3,
    }
    if prices is not None:
        fields.update(prices_path=str(prices), price_source="synthetic")
    return RunConfig(**{**fields, **extra})


@pytest.fixture(scope="module")
def clean(synth_release_dir, synth_prices_path, tmp_path_factory):
    base = tmp_path_factory.mktemp("forgery")
    release = base / "release"
    shutil.copytree(synth_release_dir, release)
    prices = base / "prices.csv"
    shutil.copyfile(synth_prices_path, prices)
    cfg = _config(base, release, prices)
    run(stub_agent, cfg, None, load_prices(prices, source="synthetic"))
    return {"base": base, "release": release, "prices": prices, "receipt": base / "r.json", "trajectory": base / "t.jsonl"}


@pytest.fixture
def work(clean, tmp_path):
    """A private copy of the clean run's receipt and trajectory, to forge."""
    shutil.copyfile(clean["receipt"], tmp_path / "r.json")
    shutil.copyfile(clean["trajectory"], tmp_path / "t.jsonl")
    return {**clean, "receipt": tmp_path / "r.json", "trajectory": tmp_path / "t.jsonl", "dir": tmp_path}


def _verify(w: dict[str, Path], **kw: Any) -> dict[str, tuple[str, str]]:
    checks = verify_pit_receipt(
        w["receipt"], trajectory=w["trajectory"], bundle=w["release"], prices=w["prices"], **kw
    )
    got: dict[str, tuple[str, str]] = {}
    for c in checks:  # a name can repeat (one "trajectory" line per problem): keep every detail
        if c.name in got:
            status = "MISMATCH" if "MISMATCH" in (got[c.name][0], c.status) else c.status
            got[c.name] = (status, f"{got[c.name][1]} | {c.detail}")
        else:
            got[c.name] = (c.status, c.detail)
    return got


def _mismatches(got: dict[str, tuple[str, str]]) -> set[str]:
    return {name for name, (status, _) in got.items() if status == "MISMATCH"}


def _body(w: dict[str, Path]) -> dict[str, Any]:
    return copy.deepcopy(read_receipt(w["receipt"])["body"])


def _write(w: dict[str, Path], body: dict[str, Any], key: SigningKey | None, *, keep_signature: bool = False) -> None:
    old = read_receipt(w["receipt"])
    receipt = make_receipt(body, key=key)
    if keep_signature:
        receipt = {**old, **receipt}
    write_receipt(w["receipt"], receipt)


def _cell(body: dict[str, Any], arm: str, clock: str) -> dict[str, Any]:
    return next(c for c in body["cells"] if (c["arm"], c["clock"]) == (arm, clock))


def _events(w: dict[str, Path]) -> list[dict[str, Any]]:
    return [json.loads(x) for x in w["trajectory"].read_text().splitlines()]


def _write_events(w: dict[str, Path], events: list[dict[str, Any]], *, renumber: bool = True) -> None:
    lines = []
    for n, e in enumerate(events):
        lines.append(canonical_bytes({**e, "seq": n} if renumber else e) + b"\n")
    w["trajectory"].write_bytes(b"".join(lines))


def _rebody(w: dict[str, Path], key: SigningKey) -> None:
    """What a forger holding our code does after editing the trajectory: recompute a body that agrees with it
    (the harness's own scoring), bind the new trajectory, and sign."""
    replayed = replay_body(_body(w), w["trajectory"], w["release"], w["prices"])
    assert replayed.body is not None, replayed.error
    _write(w, replayed.body, key)


def test_the_clean_run_verifies(work):
    got = _verify(work)
    assert _mismatches(got) == set(), got
    assert got["replay"][0] == "ok"
    assert got["signature"] == ("ok", f"{load_signing_key().key_id}, the local key")


# --- re-hashed edits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("signer", ["old signature", "forger's key", "local key"])
def test_rehashed_edit_of_returns(work, signer):
    body = _body(work)
    cell = _cell(body, "main", "pit")
    cell["total_return"] = round((cell["total_return"] or 0) + 0.05, 6)
    body["contamination"]["pit"]["main_minus_shifted"] = 0.05
    key = {"old signature": None, "forger's key": OTHER, "local key": load_signing_key()}[signer]
    _write(work, body, key, keep_signature=signer == "old signature")
    got = _verify(work)
    assert got["body_sha256"][0] == "ok"  # the hash was recomputed
    assert got["cells[main/pit].total_return"][0] == "MISMATCH"
    assert got["contamination.pit.main_minus_shifted"][0] == "MISMATCH"
    if signer == "local key":
        assert got["signature"][0] == "ok"  # an insider with the key: the replay still catches it
    else:
        assert got["signature"][0] == "MISMATCH"


def test_rehashed_edit_of_validity(synth_release_dir, tmp_path):
    """An invalid run (the agent tried the network) re-labelled valid, re-signed with the local key."""

    def nosy(prompt, tools):
        import contextlib
        import socket

        from evalkit.pit import NetworkBlockedError

        with contextlib.suppress(NetworkBlockedError):
            socket.getaddrinfo("example.invalid", 443)
        return []

    cfg = _config(tmp_path, synth_release_dir, None, arms=("main",), clocks=("pit",), network_policy="continue",
                  probe_items=0, end="2023-03-02")
    result = run(from_callable(nosy, name="nosy"), cfg)
    assert result.body["valid"] is False
    w = {"receipt": tmp_path / "r.json", "trajectory": tmp_path / "t.jsonl", "release": synth_release_dir, "prices": None}
    assert _mismatches(_verify(w)) == set()
    body = _body(w)
    body.update(valid=True, invalidated_by=[])
    body["network"].update(clean=True, egress_attempts=0, attempts=[])
    _write(w, body, load_signing_key())
    got = _verify(w)
    assert {"valid", "invalidated_by.length", "network.clean", "network.egress_attempts", "network.attempts.length"} <= _mismatches(got)
    assert got["signature"][0] == "ok"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda b: _cell(b, "main", "leaky").update(lookahead_trades=0), "cells[main/leaky].lookahead_trades"),
        (lambda b: _cell(b, "shifted", "dump").update(trades=1), "cells[shifted/dump].trades"),
        (lambda b: _cell(b, "redacted", "pit")["rejected_picks"].update(not_yet_knowable=3), "cells[redacted/pit].rejected_picks.not_yet_knowable"),
        (lambda b: b["probe"].update(verdict="mask_leaks"), "probe.verdict"),
        (lambda b: b["probe"]["items"][0].update(date_recovered=True), "probe.items[0].date_recovered"),
        (lambda b: b["protocol"]["P3_retrieval_timestamps"].update(tool_calls=1), "protocol.P3_retrieval_timestamps.tool_calls"),
        (lambda b: b["protocol"]["P4_costs_and_frictions"].update(model_calls=2), "protocol.P4_costs_and_frictions.model_calls"),
        (lambda b: b.update(completed=False), "completed"),
        (lambda b: b["trajectory"].update(events=3), "trajectory.events"),
        (lambda b: b["window"].update(sessions=5), "window.sessions"),
    ],
)
def test_a_body_contradicting_its_trajectory(work, edit, field):
    body = _body(work)
    edit(body)
    _write(work, body, load_signing_key())
    got = _verify(work)
    assert got["signature"][0] == "ok"
    assert got[field][0] == "MISMATCH", got


def test_a_body_breaking_the_schema(work):
    body = _body(work)
    body["cells"][0]["trades"] = "many"
    body["surprise"] = 1
    _write(work, body, load_signing_key())
    got = _verify(work)
    assert got["schema"][0] == "MISMATCH"
    assert "surprise" in got["schema"][1] and "many" in got["schema"][1]


# --- runs that never happened ----------------------------------------------------------------------------------


def _future_row(w, session_date: str) -> dict[str, Any]:
    """A main-arm row that is not knowable at the bell of ``session_date`` under the pit clock."""
    main = [json.loads(x) for x in (w["release"] / "arms/main.jsonl").read_text().splitlines()]
    later = [r for r in main if r["form"] == "8-K" and r["partition_date"] > "2023-03-08"]
    assert later
    return later[0]


def test_fabricated_trajectory_serving_and_picking_the_future(work):
    """A forger writes tool answers that serve a future filing and picks it, then scores the fabrication with
    the harness's own code and signs it: the replay re-serves the call and sees the lie."""
    events = _events(work)
    i = next(n for n, e in enumerate(events) if e["type"] == "decision" and (e["arm"], e["clock"]) == ("main", "pit"))
    decision = events[i]
    row = _future_row(work, decision["session_date"])
    where = {k: decision[k] for k in ("arm", "clock", "session_date")}
    read = {"type": "tool_call", **where, "tool": "pit_read", "args": {"row_key": row["row_key"]},
            "result": {**where, "known_at": events[i - 1].get("known_at", "x"), "status": "ok", "row": row}}
    events[i] = {**decision, "picks": [*decision["picks"], row["row_key"]]}
    events.insert(i, read)
    _write_events(work, events)
    for key in (OTHER, load_signing_key()):
        _rebody(work, key)
        got = _verify(work)
        problems = [d for n, (s, d) in got.items() if n == "trajectory" and s == "MISMATCH"]
        assert got["trajectory"][0] == "MISMATCH", got
        assert got["signature"][0] == ("MISMATCH" if key is OTHER else "ok")
        details = " ".join(d for _, (s, d) in got.items() if s == "MISMATCH") + " ".join(problems)
        assert "not_yet_knowable" in details or "not what the release serves" in details


def test_fabricated_trajectory_consistent_with_the_release_needs_a_trusted_signer(work):
    """A fabrication that breaks no rule (knowable picks, true answers: what hindsight would choose) cannot be told
    from a run by a replay; only the signature says who ran it. Signed by another key it fails; the reader who
    chooses to trust that key (--key) gets what they asked for."""
    events = _events(work)
    # Keep only the picks of the main/pit cell, dropping every other accepted pick: a 'selective' agent.
    for e in events:
        if e["type"] == "decision" and (e["arm"], e["clock"]) == ("main", "pit"):
            e["picks"] = e["picks"][:1]
    _write_events(work, events)
    _rebody(work, OTHER)
    got = _verify(work)
    assert _mismatches(got) == {"signature"}, got
    assert "not a trusted key" in got["signature"][1]
    assert _mismatches(_verify(work, key=OTHER.key_id)) == set()


def test_resigned_with_another_key(work, tmp_path):
    body = _body(work)
    _write(work, body, OTHER)
    got = _verify(work)
    assert _mismatches(got) == {"signature"}
    assert OTHER.key_id in got["signature"][1]
    pub = tmp_path / "other.pub.pem"
    pub.write_bytes(OTHER.public.pem())
    assert _mismatches(_verify(work, key=str(pub))) == set()
    # --key requires that signer: the local key's own receipt fails against it.
    shutil.copyfile(work["base"] / "r.json", work["receipt"])
    assert _mismatches(_verify(work, key=str(pub))) == {"signature"}


def test_unsigned_receipt(work):
    receipt = read_receipt(work["receipt"])
    write_receipt(work["receipt"], {k: receipt[k] for k in ("body", "body_sha256", "emitted_at")})
    got = _verify(work)
    assert _mismatches(got) == {"signature"}
    assert "not signed" in got["signature"][1]


# --- dropped lines, swapped cells ---------------------------------------------------------------------------------


def test_dropped_line_without_renumbering(work):
    events = _events(work)
    n = next(i for i, e in enumerate(events) if e["type"] == "tool_call")
    del events[n]
    _write_events(work, events, renumber=False)
    got = _verify(work)
    assert {"trajectory_sha256", "trajectory"} <= _mismatches(got)
    assert "seq is" in got["trajectory"][1]


@pytest.mark.parametrize("kind", ["decision", "agent_call", "cell_start", "probe_item", "run_end"])
def test_dropped_line_renumbered_and_resigned_by_an_insider(work, kind):
    events = _events(work)
    n = max(i for i, e in enumerate(events) if e["type"] == kind)
    del events[n]
    _write_events(work, events)
    _rebody(work, load_signing_key())
    got = _verify(work)
    assert got["signature"][0] == "ok"
    assert got["trajectory"][0] == "MISMATCH", got


def test_dropped_tool_call_renumbered_without_a_new_body(work):
    events = _events(work)
    del events[next(i for i, e in enumerate(events) if e["type"] == "tool_call")]
    _write_events(work, events)
    got = _verify(work)
    assert {"trajectory_sha256", "trajectory.events", "protocol.P3_retrieval_timestamps.tool_calls"} <= _mismatches(got)


def test_swapped_cells_in_the_body(work):
    body = _body(work)
    body["cells"][2], body["cells"][5] = body["cells"][5], body["cells"][2]
    _write(work, body, load_signing_key())
    got = _verify(work)
    assert got["cells.order"][0] == "MISMATCH"
    assert "main/pit" in got["cells.order"][1]


def test_swapped_cell_results_under_kept_labels(work):
    body = _body(work)
    a, b = _cell(body, "main", "leaky"), _cell(body, "main", "pit")
    for k in ("trades", "lookahead_trades", "total_return", "scored_trades"):
        a[k], b[k] = b[k], a[k]
    _write(work, body, load_signing_key())
    mism = _mismatches(_verify(work))
    assert {"cells[main/leaky].lookahead_trades", "cells[main/pit].lookahead_trades"} <= mism


def test_swapped_cells_in_the_trajectory(work):
    events = _events(work)

    def block(arm: str, clock: str) -> tuple[int, int]:
        start = next(i for i, e in enumerate(events) if e["type"] == "cell_start" and (e["arm"], e["clock"]) == (arm, clock))
        end = next(i for i in range(start + 1, len(events)) if events[i]["type"] in {"cell_start", "run_end"} or "probe_item" in events[i])
        return start, end

    (a0, a1), (b0, b1) = block("main", "pit"), block("redacted", "leaky")
    assert a1 == b0  # adjacent
    events = events[:a0] + events[b0:b1] + events[a0:a1] + events[b1:]
    _write_events(work, events)
    _rebody(work, load_signing_key())
    got = _verify(work)
    assert got["trajectory"][0] == "MISMATCH"
    assert "cell_start" in got["trajectory"][1]


# --- poisoned caches ---------------------------------------------------------------------------------------------


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A fresh cache directory for the test (and a fresh in-process calendar), restored afterwards."""
    from evalkit_core import _calendar

    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path / "cache"))
    _calendar.nyse.cache_clear()
    yield tmp_path / "cache"
    _calendar.nyse.cache_clear()


def _run_into(base: Path, release: Path, prices: Path) -> dict[str, Any]:
    base.mkdir()
    cfg = _config(base, release, prices)
    run(stub_agent, cfg, None, load_prices(prices, source="synthetic"))
    return {"base": base, "receipt": base / "r.json", "trajectory": base / "t.jsonl", "release": release, "prices": prices}


def _restamp(cdir: Path, name: str) -> None:
    stamp = json.loads((cdir / "stamp.json").read_text())
    stamp["parquet"][name] = digest_bytes((cdir / f"{name}.parquet").read_bytes())
    (cdir / "stamp.json").write_text(json.dumps(stamp))


def _release_cache(cache: Path) -> Path:
    (cdir,) = (cache / "releases").iterdir()
    return cdir


def _calendar_files(cache: Path) -> tuple[Path, Path]:
    (table,) = (cache / "calendar").glob("nyse-*.json")
    return table, table.with_name(table.name + ".sha256")


def _poison_parquet(cdir: Path, name: str) -> None:
    import polars as pl

    path = cdir / f"{name}.parquet"
    frame = pl.read_parquet(path).with_columns(pl.col("acceptance_at") - pl.duration(days=2))
    frame.write_parquet(path)


def _poison_calendar(table: Path) -> None:
    import datetime as dt

    rows = json.loads(table.read_bytes())
    day = dt.date(2023, 3, 6).toordinal()
    for r in rows:
        if r[0] == day:
            r[1] += 5 * 3600  # the bell five hours later: the day's filings look knowable at it
    table.write_bytes(json.dumps(rows, separators=(",", ":")).encode())


@pytest.mark.parametrize("target", ["answer_key", "main", "calendar"])
def test_an_edited_cache_is_rebuilt_and_the_run_is_unchanged(clean, own_cache, tmp_path, target):
    first = _run_into(tmp_path / "first", clean["release"], clean["prices"])
    if target == "calendar":
        _poison_calendar(_calendar_files(own_cache)[0])
        from evalkit_core import _calendar

        _calendar.nyse.cache_clear()
    else:
        _poison_parquet(_release_cache(own_cache), target)
    second = _run_into(tmp_path / "second", clean["release"], clean["prices"])
    assert first["trajectory"].read_bytes() == second["trajectory"].read_bytes()
    r1, r2 = read_receipt(first["receipt"]), read_receipt(second["receipt"])
    for r in (r1, r2):
        del r["body"]["trajectory"]["path"]  # the only difference: where each run wrote it
    assert r1["body"] == r2["body"]
    assert _mismatches(_verify(second)) == set()


@pytest.mark.parametrize(
    ("target", "named"),
    [
        ("answer_key", "cells[main/leaky].lookahead_trades"),  # look-ahead hidden by earlier acceptance stamps
        ("main", "trajectory"),  # filings served before they were knowable
        ("calendar", "calendar_sha256"),  # a later bell
    ],
)
def test_a_restamped_cache_gives_a_run_that_does_not_verify(clean, own_cache, tmp_path, target, named):
    _run_into(tmp_path / "warm", clean["release"], clean["prices"])  # builds the caches
    if target == "calendar":
        table, recorded = _calendar_files(own_cache)
        _poison_calendar(table)
        recorded.write_text(digest_bytes(table.read_bytes()))
        from evalkit_core import _calendar

        _calendar.nyse.cache_clear()
    else:
        cdir = _release_cache(own_cache)
        _poison_parquet(cdir, target)
        _restamp(cdir, target)
    poisoned = _run_into(tmp_path / "poisoned", clean["release"], clean["prices"])
    got = _verify(poisoned)
    assert got[named][0] == "MISMATCH", got
    assert got["signature"][0] == "ok"  # signed honestly by a harness that was fed a lie; verify does not trust it
