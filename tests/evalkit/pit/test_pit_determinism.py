"""Two runs of one configuration over one release, into different directories, are byte-identical."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from evalkit.pit import NetworkBlockedError, RunConfig, from_callable, load_prices, run, stub_agent
from evalkit_core import Release, read_receipt

RUN_START, RUN_END = "2023-03-01", "2023-03-10"


def _run_in(directory: Path, agent, cfg: RunConfig, release_dir: Path, prices_path: Path | None):
    old = Path.cwd()
    directory.mkdir(parents=True)
    os.chdir(directory)
    try:
        prices = load_prices(prices_path, source="synthetic test prices") if prices_path else None
        result = run(agent, cfg, Release.load(release_dir), prices)
        return (
            (directory / cfg.trajectory_path).read_bytes(),
            (directory / cfg.receipt_path).read_bytes(),
            result,
        )
    finally:
        os.chdir(old)


def test_two_runs_in_different_directories_are_byte_identical(synth_release_dir, synth_prices_path, tmp_path):
    cfg = RunConfig(bundle_path=str(synth_release_dir), forms=("8-K", "10-Q"), start=RUN_START, end=RUN_END,
                    trajectory_path="out/trajectory.jsonl", receipt_path="out/receipt.json")
    t1, r1, res1 = _run_in(tmp_path / "one", stub_agent, cfg, synth_release_dir, synth_prices_path)
    t2, r2, res2 = _run_in(tmp_path / "two" / "deeper", stub_agent, cfg, synth_release_dir, synth_prices_path)
    assert t1 == t2
    rec1, rec2 = json.loads(r1), json.loads(r2)
    assert rec1["body"] == rec2["body"]
    assert rec1["body_sha256"] == rec2["body_sha256"] == res1.receipt["body_sha256"] == res2.receipt["body_sha256"]
    # The only difference allowed in the receipt file is emitted_at.
    assert {k for k in rec1 if rec1[k] != rec2[k]} <= {"emitted_at"}
    assert res1.body["run_id"] == res2.body["run_id"]
    assert res1.body["valid"] is True
    # The body is written canonically: re-reading and re-hashing gives the stored hash.
    assert read_receipt(tmp_path / "one" / "out" / "receipt.json")["body_sha256"] == rec1["body_sha256"]
    # No wall-clock values inside the trajectory: no event carries a timestamp-ish key.
    for line in t1.decode().splitlines():
        ev = json.loads(line)
        assert not {"ts", "time", "timestamp", "emitted_at", "wall", "elapsed"} & set(ev)


def test_trajectory_is_canonical_jsonl_with_sequence_numbers(synth_release_dir, tmp_path):
    cfg = RunConfig(bundle_path=str(synth_release_dir), forms=("8-K",), start=RUN_START, end=RUN_END)
    traj, _, result = _run_in(tmp_path / "a", stub_agent, cfg, synth_release_dir, None)
    lines = traj.decode().splitlines()
    events = [json.loads(x) for x in lines]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert result.body["trajectory"]["events"] == len(events)
    assert events[0]["type"] == "run_start"
    assert events[-1]["type"] == "run_end"
    for line, ev in zip(lines, events, strict=True):
        assert line == json.dumps(ev, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    types = {e["type"] for e in events}
    assert {"run_start", "cell_start", "agent_call", "tool_call", "decision", "probe_item", "run_end"} <= types


def test_egress_runs_in_different_directories_are_byte_identical(synth_release_dir, tmp_path):
    """An invalid run is still deterministic: the egress call site must not depend on the working directory."""

    def nosy(prompt, tools):
        import socket

        with contextlib.suppress(NetworkBlockedError):
            socket.getaddrinfo("example.invalid", 443)
        return []

    cfg = RunConfig(bundle_path=str(synth_release_dir), forms=("8-K",), start=RUN_START, end="2023-03-02",
                    arms=("main",), clocks=("pit",), network_policy="continue", probe_items=0)
    agent = from_callable(nosy, name="nosy")
    t1, r1, _ = _run_in(tmp_path / "one", agent, cfg, synth_release_dir, None)
    t2, r2, _ = _run_in(tmp_path / "two" / "deeper", agent, cfg, synth_release_dir, None)
    assert json.loads(r1)["body"]["valid"] is False
    assert t1 == t2
    assert json.loads(r1)["body"] == json.loads(r2)["body"]
