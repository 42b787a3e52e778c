"""The shifted arm served with decoys, drawn times of day and a hidden window (issue 29, item 6), end to end.

The decoder figures asserted here are the receipt's own, computed by the harness's decoders over the arm as the
agent was served it (decoys included); nothing is compared with a constant but the threshold. The attackers
written here know the window and the record (the demo's generator is public) and try to find the real dates and
the real rows anyway. The figures printed (``-s | grep FIGURE``) are the ones docs/pit-harness.md quotes.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any, cast

import attrs
import polars as pl
import pytest

from evalkit.pit import RunConfig, from_callable, run, stub_agent, verify_pit_receipt
from evalkit.pit._decoders import THRESHOLD
from evalkit.pit._decoders_served import expected, window_placement
from evalkit.pit._decoys import time_class
from evalkit.pit._serving import HIDDEN_DAYS, ServedMask, serve_mask
from evalkit_core import (
    ConfigError,
    Release,
    SigningKey,
    canonical_bytes,
    digest_bytes,
    make_receipt,
    nyse,
    read_receipt,
    write_receipt,
)
from evalkit_core._synth import DEMO, PRICE_SOURCE, write_demo_release, write_synth_release

V2 = Path(__file__).parent / "fixtures" / "receipt-v2-main"

KEY = SigningKey.from_seed(bytes(range(32)))
SERVED_DECODERS = {
    "calendar_inversion",
    "public_rule_search",
    "sec_calendar_fingerprint",
    "window_anchor",
    "window_placement",
    "count_alignment",
    "total_correlation",
    "form_mix_nearest",
    "entry_counts",
    "containment",
    "time_of_day_match",
    "nearest_time_of_day",
    "window_uniform_guess",
}
REDACTED_DECODERS = {
    "date_form_match",
    "signature_match",
    "instant_match",
    "dissemination_match",
    "nearest_instant",
    "row_order",
}
V3 = Path(__file__).parent / "fixtures" / "receipt-v3-served"


def _say(name: str, value: float) -> None:
    print(f"\nFIGURE {name} = {value:.4f}")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo_release(tmp_path_factory.mktemp("demo") / "demo")


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> Release:
    return Release.load(demo_dir)


def _run(base: Path, demo_dir: Path, agent: Any = stub_agent, **fields: Any) -> dict[str, Any]:
    cfg = RunConfig(
        bundle_path=str(demo_dir),
        mask_decoys=True,
        prices_path=str(demo_dir / DEMO.prices_file),
        price_source=PRICE_SOURCE,
        trajectory_path=str(base / "t.jsonl"),
        receipt_path=str(base / "r.json"),
        **fields,
    )
    result = run(agent, cfg, key=KEY)
    return {"result": result, "config": cfg, "receipt": base / "r.json", "trajectory": base / "t.jsonl"}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, demo_dir: Path) -> dict[str, Any]:
    """The demo run (the stub over the whole demo release, every arm and clock) with the mask served."""
    return _run(tmp_path_factory.mktemp("demo-run"), demo_dir)


@pytest.fixture(scope="module")
def served(demo: Release, demo_run: dict[str, Any]) -> ServedMask:
    """What the run served, rebuilt here (as verify does) from the release and its secret."""
    body = demo_run["result"].body
    return serve_mask(
        demo,
        (dt.date.fromisoformat(body["window"]["start"]), dt.date.fromisoformat(body["window"]["end"])),
        nyse(),
    )


def _shifted_figures(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in body["decoders"]["arms"]["shifted"]["decoders"]}


# --- the demo run ----------------------------------------------------------------------------------------------


def test_the_demo_runs_shifted_arm_holds_against_every_decoder(demo_run: dict[str, Any]):
    body = demo_run["result"].body
    assert body["receipt_version"] == 4 and body["valid"]
    figures = _shifted_figures(body)
    assert set(figures) == SERVED_DECODERS
    for name, f in sorted(figures.items()):
        _say(f"served/shifted/{name}/dates", f["dates_recovered"])
        _say(f"served/shifted/{name}/issuers", f["issuers_recovered"])
        assert f["dates_recovered"] < THRESHOLD, name
        assert f["issuers_recovered"] < THRESHOLD, name
        assert not f["breaks"]
    # scored over the real rows only: as many as the main arm has
    rows = body["protocol"]["P5_window_provenance"]["rows"]
    assert {f["rows"] for f in figures.values()} == {body["decoders"]["arms"]["shifted"]["rows"]} == {rows}
    assert not [b for b in body["decoders"]["broken_by"] if b.startswith("shifted/")]
    # The redacted arm is served with clones too (the default): every decoder of it is under the threshold, the
    # demo's window (61 sessions) is long enough to hold, and the run's masks hold.
    redacted = {d["name"]: d for d in body["decoders"]["arms"]["redacted"]["decoders"]}
    assert set(redacted) == REDACTED_DECODERS
    for name, f in sorted(redacted.items()):
        _say(f"served/redacted/{name}/issuers", f["issuers_recovered"])
        assert f["issuers_recovered"] < THRESHOLD and not f["breaks"], name
    assert body["decoders"]["broken_by"] == [] and body["decoders"]["limits"] == []
    assert body["receipt_version"] == 4 and body["masks"] == "hold"


def test_decoys_and_hidden_sessions_are_accepted_never_traded(demo_run: dict[str, Any], served: ServedMask):
    """The stub buys every row fresh at each bell: in the shifted cells it buys decoys too, and at the hidden
    sessions it buys what is there. None of it is traded: the shifted cells trade exactly what the main cells do."""
    body = demo_run["result"].body
    cells = {(c["arm"], c["clock"]): c for c in body["cells"]}
    for clock in ("leaky", "dump", "pit"):
        main, shifted = cells["main", clock], cells["shifted", clock]
        assert main["sessions"] == len(served.window) and shifted["sessions"] == len(served.sessions)
        assert shifted["agent_calls"] == len(served.sessions)
        assert shifted["decoy_picks"] > 0
        assert shifted["trades"] == main["trades"] and shifted["trades_by_form"] == main["trades_by_form"]
        assert shifted["lookahead_trades"] == main["lookahead_trades"]
        assert shifted["rejected_picks"] == main["rejected_picks"]
        assert "decoy_picks" not in main
        # the redacted cells run the window's sessions, show clones and trade exactly what the main cells do
        redacted = cells["redacted", clock]
        assert redacted["sessions"] == len(served.window) and redacted["decoy_picks"] > 0
        assert redacted["trades"] == main["trades"] and redacted["trades_by_form"] == main["trades_by_form"]
    assert (
        len(served.sessions) - len(served.window) >= HIDDEN_DAYS - 2
    )  # a few hidden days may be exchange holidays


def test_decoys_never_enter_the_probe(demo_run: dict[str, Any], served: ServedMask, demo: Release):
    body = demo_run["result"].body
    keys = [i["row_key"] for i in body["probe"]["items"]]
    assert keys and not served.decoys.intersection(keys)
    assert set(keys) <= set(demo.answer_key.get_column("row_key").to_list())


def test_the_demo_run_verifies(demo_run: dict[str, Any], demo_dir: Path):
    checks = verify_pit_receipt(
        demo_run["receipt"],
        trajectory=demo_run["trajectory"],
        bundle=demo_dir,
        prices=demo_dir / DEMO.prices_file,
        key=KEY.key_id,
    )
    assert [c.name for c in checks if not c.ok] == []
    assert "returns not recomputed" not in next(c for c in checks if c.name == "replay").detail


# --- what the agent's jail sees ----------------------------------------------------------------------------------


def _sent(trajectory: Path) -> tuple[list[dict[str, Any]], str]:
    """The shifted rows in tool answers, and everything the agent was sent (prompts and answers) as text."""
    rows: list[dict[str, Any]] = []
    sent: list[str] = []
    for line in trajectory.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "agent_call":
            sent.append(event["prompt"])
        if event.get("type") == "tool_call":
            result = event["result"]
            sent.append(json.dumps(result))
            if event.get("arm") == "shifted":
                rows.extend(result["rows"] if isinstance(result.get("rows"), list) else [])
                if "row" in result:
                    rows.append(result["row"])
    return rows, "\n".join(sent)


def test_nothing_but_the_rows_says_which_are_decoys(
    demo_run: dict[str, Any], served: ServedMask, demo_dir: Path
):
    """A decoy is served with the fields a real row has, in the same forms, and nothing the agent is sent names
    the decoys, the secret or the hidden days' number before the window."""
    rows, text = _sent(demo_run["trajectory"])
    decoy = [r for r in rows if r["row_key"] in served.decoys]
    real = [r for r in rows if r["row_key"] not in served.decoys]
    assert decoy and real
    shapes = Counter(tuple(sorted(r)) for r in real)
    assert {tuple(sorted(r)) for r in decoy} <= set(shapes)
    assert "decoy" not in text.lower()
    secret = json.loads((demo_dir / "answer_key.masks.json").read_text())["shift"]["secret"]
    assert secret not in demo_run["trajectory"].read_text() and secret not in demo_run["receipt"].read_text()
    body = demo_run["result"].body
    assert "lead" not in body["decoders"]["served"]


# --- attackers who know the window and the record ------------------------------------------------------------------


def _pairs(served: ServedMask, demo: Release) -> list[tuple[dt.date, dt.date]]:
    real = demo.arm("main").select("row_key", pl.col("partition_date").alias("real"))
    joined = served.arm.join(real, on="row_key")
    return list(
        zip(joined.get_column("partition_date").to_list(), joined.get_column("real").to_list(), strict=True)
    )


def _tod(t: dt.datetime) -> int:
    from zoneinfo import ZoneInfo

    local = t.astimezone(ZoneInfo("America/New_York"))
    return local.hour * 3600 + local.minute * 60 + local.second


def test_knowing_the_window_and_the_record_names_the_placement_one_time_in_hidden_days(
    served: ServedMask, demo: Release
):
    """The attacker knows the window, the rule (HIDDEN_DAYS decoy-only days, at least one on each side) and the
    record. It tries every placement and scores it by containment and per-day counts (the harness's
    window_placement): all tie, so it names the right one 1/(HIDDEN_DAYS - 1) of the time. Knowing the right one
    would give every date; then, to find the real rows among the decoys, it looks each shown row's (form, date,
    time of day) up in the record: the drawn times leave almost nothing to find, even at the right placement."""
    record = demo.arm("main")
    pairs = _pairs(served, demo)
    guesses = window_placement(served.arm, record)
    share = expected(pairs, guesses) / len(pairs)
    _say("attacker/window_and_record/placement", share)
    assert share < THRESHOLD
    assert len(guesses) > 1 / THRESHOLD  # the tie is what keeps it under the threshold
    known = {
        (f, d, _tod(t))
        for f, d, t in record.select("form", "partition_date", "acceptance_at").iter_rows()
        if t is not None
    }
    days = sorted(set(served.arm.get_column("partition_date").to_list()))
    real_days = sorted(set(record.get_column("partition_date").to_list()))
    truth = next(p for p in range(len(days)) if days[p] == next(s for s, r in pairs if r == real_days[0]))
    found: dict[int, tuple[int, int]] = {}
    for p in range(1, len(days) - len(real_days)):
        mapping = {days[p + i]: d for i, d in enumerate(real_days) if p + i < len(days)}
        hits = [
            k
            for k, f, d, t in served.arm.select(
                "row_key", "form", "partition_date", "acceptance_at"
            ).iter_rows()
            if t is not None and (f, mapping.get(d), _tod(t)) in known
        ]
        real_hits = sum(k not in served.decoys for k in hits)
        found[p] = (real_hits, len(hits) - real_hits)
    n_real = served.arm.height - len(served.decoys)
    _say("attacker/window_and_record/real_rows_found_at_the_right_placement", found[truth][0] / n_real)
    assert found[truth][0] / n_real < THRESHOLD


def test_the_probe_tells_its_own_process_which_rows_are_real(
    demo_run: dict[str, Any], served: ServedMask, demo: Release
):
    """What still breaks the mask, measured: the probe asks only about real rows, so its process (one for all the
    items, after every cell) is told several rows it knows are real. Keeping the placements under which each of
    them has a record row of its form and time class on the mapped day leaves the right one alone on the demo.
    The cells' processes never see a probe item (each cell is its own process, ended before the probe), so no
    trade can use it; an agent that then answers the probe with what it found is caught by the probe."""
    record = demo.arm("main")
    have = {
        (f, d, time_class(t))
        for f, d, t in record.select("form", "partition_date", "acceptance_at").iter_rows()
    }
    items = [i["row_key"] for i in demo_run["result"].body["probe"]["items"]]
    shown = (
        served.arm.filter(pl.col("row_key").is_in(items))
        .select("form", "partition_date", "acceptance_at")
        .rows()
    )
    days = sorted(set(served.arm.get_column("partition_date").to_list()))
    real_days = sorted(set(record.get_column("partition_date").to_list()))
    pairs = _pairs(served, demo)
    truth = next(p for p in range(len(days)) if days[p] == next(s for s, r in pairs if r == real_days[0]))
    left: list[int] = []
    for p in range(1, len(days) - len(real_days)):
        mapping = {days[p + i]: d for i, d in enumerate(real_days) if p + i < len(days)}
        if all((f, mapping.get(d), time_class(t)) in have for f, d, t in shown):
            left.append(p)
    assert truth in left
    _say("attacker/probe_items_and_record/placement", 1 / len(left))
    events = [json.loads(line) for line in demo_run["trajectory"].read_text().splitlines()]
    first_item = next(n for n, e in enumerate(events) if e["type"] == "agent_call" and "probe_item" in e)
    assert all(e["type"] != "cell_start" for e in events[first_item:])


# --- verify, determinism, tampering ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory: pytest.TempPathFactory, demo_dir: Path) -> list[dict[str, Any]]:
    """8-Ks of February and March, main and shifted arms, twice. (A window shorter than 1/THRESHOLD = 20 days
    cannot hold against the record: a uniform guess among its days names the right one more often than that.)"""
    return [
        _run(
            tmp_path_factory.mktemp(f"small-{n}"),
            demo_dir,
            forms=("8-K",),
            start="2023-02-01",
            end="2023-03-31",
            arms=("main", "shifted"),
        )
        for n in range(2)
    ]


def test_same_release_same_secret_same_bytes(small_runs: list[dict[str, Any]], demo: Release):
    a, b = small_runs
    assert a["trajectory"].read_bytes() == b["trajectory"].read_bytes()
    bodies = [copy.deepcopy(r["result"].body) for r in small_runs]
    for body in bodies:
        del body["trajectory"]["path"]  # where each run wrote it
    assert canonical_bytes(bodies[0]) == canonical_bytes(bodies[1])
    window = (dt.date(2023, 2, 1), dt.date(2023, 3, 31))
    one, two = serve_mask(demo, window, nyse()), serve_mask(demo, window, nyse())
    assert one.arm.equals(two.arm) and one.main.equals(two.main) and one.decoys == two.decoys
    other = attrs.evolve(demo, masks=attrs.evolve(demo.masks, shift_secret=bytes([7]) * 32))
    assert serve_mask(other, window, nyse()).decoys.isdisjoint(one.decoys)


def test_a_run_of_main_and_shifted_holds(small_runs: list[dict[str, Any]], demo_dir: Path):
    run_ = small_runs[0]
    body = run_["result"].body
    for name, f in sorted(_shifted_figures(body).items()):
        _say(f"served/8k_feb_mar/shifted/{name}/dates", f["dates_recovered"])
        assert not f["breaks"], name
    assert body["probe"]["verdict"] == "mask_holds"
    assert body["masks"] == "hold"
    checks = verify_pit_receipt(
        run_["receipt"], trajectory=run_["trajectory"], bundle=demo_dir, key=KEY.key_id
    )
    assert [c.name for c in checks if not c.ok] == []


def _resigned(run_: dict[str, Any], tmp: Path, lines: list[bytes]) -> tuple[Path, Path]:
    """The trajectory as ``lines``, and the receipt re-signed over it by an insider holding the key."""
    traj = tmp / "t.jsonl"
    traj.write_bytes(b"".join(lines))
    body = copy.deepcopy(read_receipt(run_["receipt"])["body"])
    sha = digest_bytes(traj.read_bytes())
    body["binding"]["trajectory_sha256"] = body["trajectory"]["sha256"] = sha
    receipt = tmp / "r.json"
    write_receipt(receipt, make_receipt(body, key=KEY))
    return receipt, traj


def test_a_tampered_decoy_row_is_caught(
    small_runs: list[dict[str, Any]], demo_dir: Path, demo: Release, tmp_path: Path
):
    """Move one decoy's shown acceptance by a second in one answer, re-sign: the replay rebuilds the decoys from the
    secret and names the line."""
    run_ = small_runs[0]
    narrowed = demo.select(forms=["8-K"], start="2023-02-01", end="2023-03-31")
    served = serve_mask(narrowed, (dt.date(2023, 2, 1), dt.date(2023, 3, 31)), nyse())
    lines = run_["trajectory"].read_bytes().splitlines(keepends=True)
    for n, raw in enumerate(lines):
        event: dict[str, Any] = json.loads(raw)
        listed = event.get("result", {}).get("rows") if event.get("type") == "tool_call" else None
        rows = cast("list[dict[str, str]]", listed if isinstance(listed, list) else [])
        target = next((r for r in rows if r["row_key"] in served.decoys and "acceptance_at" in r), None)
        if target is not None:
            t = dt.datetime.fromisoformat(target["acceptance_at"].replace("Z", "+00:00")) + dt.timedelta(
                seconds=1
            )
            target["acceptance_at"] = t.strftime("%Y-%m-%dT%H:%M:%SZ")
            lines[n] = canonical_bytes(event) + b"\n"
            break
    else:
        pytest.fail("no decoy was served in a tool answer")
    receipt, traj = _resigned(run_, tmp_path, lines)
    checks = verify_pit_receipt(receipt, trajectory=traj, bundle=demo_dir, key=KEY.key_id)
    bad = [c for c in checks if not c.ok]
    assert "signature" not in {c.name for c in bad}
    assert any(
        c.name == "trajectory" and f"line {n + 1}:" in c.detail and "not what the release serves" in c.detail
        for c in bad
    ), bad


def test_a_receipt_that_hides_its_decoys_is_caught(
    small_runs: list[dict[str, Any]], demo_dir: Path, tmp_path: Path
):
    """Claim the run served no decoys (config and version edited, re-signed): the config no longer hashes to what
    the receipt binds, and the replay (which then serves no decoys) disagrees with the trajectory."""
    run_ = small_runs[0]
    body = copy.deepcopy(read_receipt(run_["receipt"])["body"])
    del body["config"]["mask_decoys"]
    body["receipt_version"] = 2
    forged = tmp_path / "r.json"
    write_receipt(forged, make_receipt(body, key=KEY))
    checks = verify_pit_receipt(forged, trajectory=run_["trajectory"], bundle=demo_dir, key=KEY.key_id)
    bad = {c.name for c in checks if not c.ok}
    assert "config_sha256" in bad


def test_mask_decoys_needs_a_mask_secret(tmp_path: Path):
    old = write_demo_release(tmp_path / "old", release_format="evalkit-release/2")
    cfg = RunConfig(
        bundle_path=str(old),
        mask_decoys=True,
        forms=("8-K",),
        start="2023-03-01",
        end="2023-03-10",
        trajectory_path=str(tmp_path / "t.jsonl"),
        receipt_path=str(tmp_path / "r.json"),
    )
    with pytest.raises(ConfigError, match=r"mask_decoys.*no mask secret"):
        run(from_callable(lambda prompt, tools: []), cfg, key=KEY)
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "r.json").exists()


def test_the_fields_are_on_by_default_and_off_is_out_of_the_digest():
    on = RunConfig(bundle_path="x")
    assert on.mask_decoys is True and on.mask_redacted is True
    assert on.digest_view()["mask_decoys"] is True and on.digest_view()["mask_redacted"] is True
    plain = attrs.evolve(on, mask_decoys=False)
    # off: out of the JSON and the digest, as a config written before the fields existed
    assert "mask_decoys" not in plain.to_json() and "mask_redacted" not in plain.digest_view()
    assert on.digest() != plain.digest()
    assert RunConfig.from_json(plain.to_json()).mask_decoys is True  # a config file without it: the default
    assert RunConfig.from_recorded(plain.to_json()).mask_decoys is False  # a receipt's config without it: off
    shifted_only = attrs.evolve(on, mask_redacted=False)  # what a version-3 receipt records
    assert "mask_redacted" not in shifted_only.to_json()
    assert RunConfig.from_recorded(shifted_only.to_json()) == shifted_only
    for field in ("mask_decoys", "mask_redacted"):
        with pytest.raises(ConfigError, match=field):
            RunConfig.from_json({"bundle_path": "x", field: "yes"})


def test_a_version_3_receipt_made_by_the_previous_harness_verifies_as_it_did(tmp_path: Path):
    """fixtures/receipt-v3-served was written by the last version-3 harness (the shifted arm served with decoys,
    the redacted arm as released; make_receipt.py there says how). Its recorded config has mask_decoys and no
    mask_redacted: the replay serves the redacted arm as released, as that run did, and agrees byte for byte."""
    release = write_synth_release(
        tmp_path / "release", rows=400, start=dt.date(2023, 2, 1), end=dt.date(2023, 3, 31), seed=11
    )
    body = read_receipt(V3 / "receipt.json")["body"]
    assert body["receipt_version"] == 3 and body["config"]["mask_decoys"] is True
    assert "mask_redacted" not in body["config"] and "redacted" not in body["decoders"]["served"]
    checks = verify_pit_receipt(
        V3 / "receipt.json", trajectory=V3 / "trajectory.jsonl.zst", bundle=release, key=KEY.key_id
    )
    then = [tuple(c) for c in json.loads((V3 / "checks.json").read_text())]
    now = [(c.name, c.status) for c in checks]
    assert ("harness_source_sha256", "note") in now
    assert [c for c in now if c[0] != "harness_source_sha256"] == [
        c for c in then if c[0] != "harness_source_sha256"
    ]
    assert all(c.ok for c in checks)


def test_a_version_2_receipt_made_by_the_previous_harness_verifies_as_it_did(tmp_path: Path):
    """fixtures/receipt-v2-main was written by the harness before decoys were served (make_receipt.py there says
    how). The release is made again from its seed; every check says what that harness's own verify said, but for
    the harness digest, which is now a note (the replay runs this code)."""
    release = write_synth_release(
        tmp_path / "release", rows=400, start=dt.date(2023, 2, 1), end=dt.date(2023, 3, 31), seed=11
    )
    body = read_receipt(V2 / "receipt.json")["body"]
    assert body["receipt_version"] == 2 and "mask_decoys" not in body["config"]
    checks = verify_pit_receipt(
        V2 / "receipt.json", trajectory=V2 / "trajectory.jsonl.zst", bundle=release, key=KEY.key_id
    )
    then = [tuple(c) for c in json.loads((V2 / "checks.json").read_text())]
    now = [(c.name, c.status) for c in checks]
    assert ("harness_source_sha256", "note") in now
    assert [c for c in now if c[0] != "harness_source_sha256"] == [
        c for c in then if c[0] != "harness_source_sha256"
    ]
    assert all(c.ok for c in checks)


def test_the_cli_serves_the_mask_when_asked_and_verify_replays_it(cli, demo_dir: Path, tmp_path: Path):  # pyright: ignore[reportMissingParameterType, reportUnknownParameterType]
    config = tmp_path / "run.json"
    RunConfig(
        bundle_path=str(demo_dir),
        forms=("8-K",),
        start="2023-02-01",
        end="2023-03-31",
        arms=("shifted",),
        clocks=("pit",),
        probe_items=0,
    ).dump(config)
    receipt, traj = tmp_path / "r.json", tmp_path / "t.jsonl"
    code, out, _ = cli("run", "--config", config, "--mask-decoys", "--receipt", receipt, "--trajectory", traj)  # pyright: ignore[reportUnknownVariableType]
    assert code == 0, out
    body = read_receipt(receipt)["body"]
    assert body["receipt_version"] == 3 and body["config"]["mask_decoys"] is True
    assert body["cells"][0]["sessions"] > body["window"]["sessions"]
    # the run's table says how many picks named a decoy (the stub agent picks none)
    assert f"decoy_picks {body['cells'][0]['decoy_picks']}" in out, out
    code, out, _ = cli("verify", receipt, "--trajectory", traj, "--bundle", demo_dir)  # pyright: ignore[reportUnknownVariableType]
    assert code == 0 and "run_valid true" in out, out
