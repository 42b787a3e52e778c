"""``evalkit verify --workers N``: the cells replayed in parallel give the one-worker report byte for byte.

A run of the demo release (nine cells and a probe) is verified with one worker and with several: the same lines,
the same ``--json``, the same exit code, for the clean run and for trajectories tampered in every way the replay
tells apart (an answer edited, a line dropped, added, moved, made non-canonical or not JSON, cells swapped, a
stopped run, a cut file, an edited probe). The matrix runs the parallel pass on an in-process pool that answers
lazily (as workers do: a cell's result is taken when gathered), so every worker count is cheap to try; the CLI
tests run real processes. An old receipt (before the trajectory's ``encoding`` field, over a format-2 release)
and a ``.zst`` trajectory verify alike. ``--executor ray`` replays on the session's local Ray cluster.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.pit import RunConfig, load_prices, run, stub_agent
from evalkit.pit._verify_cells import CellJob, CellReplayer, CellResult, WorkerLostError, parallel_pass
from evalkit.pit._verify_replay import Replay, replay_body
from evalkit_core import canonical_bytes, ensure_signing_key, make_receipt, read_receipt, write_receipt
from evalkit_core._synth import write_demo_release

START, END = "2023-03-01", "2023-03-10"


def _run(base: Path, release: Path, trajectory: str, **fields: Any) -> dict[str, Path]:
    prices = release / "prices.synthetic.csv"
    old = Path.cwd()
    base.mkdir(parents=True, exist_ok=True)
    os.chdir(base)
    try:
        cfg = RunConfig(bundle_path=str(release), start=START, end=END, prices_path=str(prices),
                        price_source="synthetic", trajectory_path=trajectory, receipt_path="receipt.json",
                        probe_items=3, **fields)  # fmt: skip
        run(stub_agent, cfg, None, load_prices(prices, source="synthetic"))
    finally:
        os.chdir(old)
    return {
        "release": release,
        "prices": prices,
        "receipt": base / "receipt.json",
        "trajectory": base / trajectory,
    }


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The demo release, one stub run over it (all arms and clocks: nine cells) with a plain and a .zst trajectory,
    and one over the demo as a format-2 release."""
    base = tmp_path_factory.mktemp("pit-verify-workers")
    release = write_demo_release(base / "demo")
    old_release = write_demo_release(base / "demo2", release_format="evalkit-release/2")
    return {
        "plain": _run(base / "plain", release, "t.jsonl", mask_decoys=False),
        "zst": _run(base / "zst", release, "t.jsonl.zst", mask_decoys=False),
        # a format-2 release has no mask secret to draw decoys from: it runs with the masks as released
        "old": _run(base / "old", old_release, "t.jsonl", mask_decoys=False),
        # the default: the shifted arm served with decoys over hidden days, the redacted arm with clones
        "masked": _run(base / "masked", release, "t.jsonl"),
    }


# --- the pass on an in-process pool, for many tamperings and worker counts ----------------------------------------


class LazyPool:
    """Cells replayed in this process, each when its result is asked for (as a worker's arrives when gathered)."""

    def __init__(self, workers: int, release: Path, config: dict[str, Any]) -> None:
        self.workers = workers
        self.replayer = CellReplayer(config, str(release))
        self.jobs: list[CellJob] = []
        self.results: list[CellResult] = []

    def submit(self, job: CellJob) -> Callable[[], CellResult]:
        self.jobs.append(job)

        def result() -> CellResult:
            got = self.replayer.replay(job)
            self.results.append(got)
            return got

        return result


# the one-worker replay of a trajectory, by its bytes: the matrix compares each tampering under four worker counts
# with the same serial result, computed once
_SERIAL: dict[tuple[str, bytes], Replay] = {}


def _replays(w: dict[str, Path], workers: int) -> tuple[Replay, Replay, LazyPool]:
    body = read_receipt(w["receipt"])["body"]
    key = (str(w["receipt"]), hashlib.sha256(Path(w["trajectory"]).read_bytes()).digest())
    serial = _SERIAL.get(key)
    if serial is None:
        serial = _SERIAL[key] = replay_body(body, w["trajectory"], w["release"], w["prices"])
    pool = LazyPool(workers, w["release"], body["config"])
    parallel = replay_body(
        body, w["trajectory"], w["release"], w["prices"],
        walker=lambda b, setup, traj, scorer: parallel_pass(b, setup, traj, scorer, pool),
    )  # fmt: skip
    return serial, parallel, pool


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_bytes().splitlines()]


def _cells(events: list[dict[str, Any]]) -> list[int]:
    """The indices of the cell_start events."""
    return [i for i, e in enumerate(events) if e["type"] == "cell_start"]


def _line(e: dict[str, Any]) -> bytes:
    return canonical_bytes(e) + b"\n"


def _first(events: list[dict[str, Any]], kind: str, after: int) -> int:
    return next(i for i in range(after, len(events)) if events[i]["type"] == kind)


def _answer(ev: list[dict[str, Any]]) -> bytes:  # a re-served answer edited in the fifth cell
    i = _first(ev, "tool_call", _cells(ev)[4])
    ev[i] = copy.deepcopy(ev[i])
    ev[i]["result"]["edited"] = True
    return b"".join(map(_line, ev))


def _dropped(ev: list[dict[str, Any]]) -> bytes:  # a line of the third cell dropped
    del ev[_cells(ev)[2] + 3]
    return b"".join(map(_line, ev))


def _added(ev: list[dict[str, Any]]) -> bytes:  # an agent call of the second cell given twice
    i = _first(ev, "agent_call", _cells(ev)[1])
    ev.insert(i, ev[i])
    return b"".join(_line({**e, "seq": n}) for n, e in enumerate(ev))


def _swapped(ev: list[dict[str, Any]]) -> bytes:  # the second and third cells swapped, renumbered
    c = _cells(ev)
    ev[c[1] : c[3]] = ev[c[2] : c[3]] + ev[c[1] : c[2]]
    return b"".join(_line({**e, "seq": n}) for n, e in enumerate(ev))


def _noncanonical(ev: list[dict[str, Any]]) -> bytes:  # a line of the seventh cell with a space in it
    lines = list(map(_line, ev))
    i = _cells(ev)[6] + 2
    lines[i] = lines[i].replace(b"{", b"{ ", 1)
    return b"".join(lines)


def _noncanonical_then_seq(
    ev: list[dict[str, Any]],
) -> bytes:  # a line of the third cell with a space, a later seq
    c = _cells(ev)
    ev[c[7] + 1] = {**ev[c[7] + 1], "seq": 10**6}
    lines = list(map(_line, ev))
    lines[c[2] + 2] = lines[c[2] + 2].replace(b"{", b"{ ", 1)
    return b"".join(lines)


def _not_json(ev: list[dict[str, Any]]) -> bytes:  # a line of the fourth cell that is not JSON
    lines = list(map(_line, ev))
    lines[_cells(ev)[3] + 5] = b"garbage\n"
    return b"".join(lines)


def _seq(ev: list[dict[str, Any]]) -> bytes:  # a seq edited in the eighth cell (and one in the ninth)
    c = _cells(ev)
    ev[c[7] + 1] = {**ev[c[7] + 1], "seq": 10**6}
    ev[c[8] + 1] = {**ev[c[8] + 1], "seq": 10**7}
    return b"".join(map(_line, ev))


def _stopped(ev: list[dict[str, Any]]) -> bytes:  # the sixth cell's first decision replaced by an agent error
    i = _first(ev, "decision", _cells(ev)[5])
    where = {k: ev[i][k] for k in ("arm", "clock", "session_date")}
    ev[i] = {"type": "agent_error", "seq": ev[i]["seq"], **where, "error": "boom"}
    return b"".join(map(_line, ev))


def _fake_cell_start(ev: list[dict[str, Any]]) -> bytes:  # the fifth cell's cell_start copied into the fourth
    c = _cells(ev)
    ev.insert(c[3] + 4, ev[c[4]])
    return b"".join(_line({**e, "seq": n}) for n, e in enumerate(ev))


def _cut(ev: list[dict[str, Any]]) -> bytes:  # the file cut in the middle of a line of the eighth cell
    data = b"".join(map(_line, ev))
    return data[: data.index(_line(ev[_cells(ev)[7] + 2])) + 40]


def _probe(ev: list[dict[str, Any]]) -> bytes:  # a probe item's row_key edited
    i = _first(ev, "probe_item", 0)
    ev[i] = {**ev[i], "row_key": "not-a-key"}
    return b"".join(map(_line, ev))


def _trailing(ev: list[dict[str, Any]]) -> bytes:  # an event after run_end
    return b"".join(map(_line, ev)) + _line({**ev[-2], "seq": len(ev)})


def _first_cell(ev: list[dict[str, Any]]) -> bytes:  # the first cell's cell_start edited
    c = _cells(ev)
    ev[c[0]] = {**ev[c[0]], "rows": ev[c[0]]["rows"] + 1}
    return b"".join(map(_line, ev))


TAMPERS: dict[str, Callable[[list[dict[str, Any]]], bytes]] = {
    "answer": _answer,
    "dropped": _dropped,
    "added": _added,
    "swapped": _swapped,
    "noncanonical": _noncanonical,
    "noncanonical_then_seq": _noncanonical_then_seq,
    "not_json": _not_json,
    "seq": _seq,
    "stopped": _stopped,
    "fake_cell_start": _fake_cell_start,
    "cut": _cut,
    "probe": _probe,
    "trailing": _trailing,
    "first_cell": _first_cell,
}


def _tampered(demo: dict[str, Any], tmp_path: Path, name: str, run: str = "plain") -> dict[str, Path]:
    w = dict(demo[run])
    traj = tmp_path / "t.jsonl"
    traj.write_bytes(TAMPERS[name](_events(w["trajectory"])))
    return {**w, "trajectory": traj}


def test_the_clean_run_is_walked_by_the_workers_with_the_serial_result(demo):
    serial, parallel, pool = _replays(demo["plain"], 2)
    assert serial.body is not None and serial.problems == []
    assert parallel == serial
    # every cell went to a worker and came back clean: nothing was walked again here
    assert [j.index for j in pool.jobs] == list(range(9))
    assert [r.clean for r in pool.results] == [True] * 9
    assert serial.counts["tool_calls"] > 0 and serial.counts["probe_items"] == 3


def test_the_trajectory_is_read_once_whatever_the_workers(demo, monkeypatch):
    """The verifying process reads the file once; the workers are handed the cells' lines and never open it."""
    from evalkit.pit import _trajfile as trajfile

    opened: list[Path] = []
    real = trajfile.trajectory_chunks

    def counting(path: str | Path) -> Any:
        opened.append(Path(path))
        yield from real(path)

    monkeypatch.setattr(trajfile, "trajectory_chunks", counting)
    w = demo["zst"]
    _SERIAL.clear()  # the serial replay reads the file here, whatever ran before
    serial, parallel, pool = _replays(w, 3)
    assert parallel == serial and serial.problems == []
    assert opened == [w["trajectory"], w["trajectory"]]  # once by the serial replay, once by the parallel one
    assert len(pool.jobs) == 9


def test_a_masked_run_is_walked_by_the_workers_with_the_serial_result(demo):
    """The default run serves decoys, clones and hidden days: each worker rebuilds the served arms' views (shipped
    with the release) and walks the shifted cells over their hidden sessions as the run did."""
    body = read_receipt(demo["masked"]["receipt"])["body"]
    assert body["decoders"]["served"]["redacted"]["clones"] > 0  # the masks were served
    serial, parallel, pool = _replays(demo["masked"], 2)
    assert serial.body is not None and serial.problems == []
    assert parallel == serial
    assert [j.index for j in pool.jobs] == list(range(9))
    assert [r.clean for r in pool.results] == [True] * 9


def _hidden_session(ev: list[dict[str, Any]]) -> bytes:
    """A served shifted cell's call at a hidden day (before the window) relabelled as the next day's."""
    shifted = next(i for i, e in enumerate(ev) if e["type"] == "cell_start" and e["arm"] == "shifted")
    calls = [i for i in range(shifted, len(ev)) if ev[i]["type"] == "agent_call" and "probe_item" not in ev[i]]
    ev[calls[0]] = {**ev[calls[0]], "session_date": ev[calls[1]]["session_date"]}
    return b"".join(map(_line, ev))


def _decoy_traded(ev: list[dict[str, Any]]) -> bytes:
    """A decision in the served shifted cell whose picks are listed twice over (a decoy's pick counted as two)."""
    shifted = next(i for i, e in enumerate(ev) if e["type"] == "cell_start" and e["arm"] == "shifted")
    i = next(i for i in range(shifted, len(ev)) if ev[i]["type"] == "decision" and ev[i]["picks"])
    ev[i] = {**ev[i], "picks": ev[i]["picks"] * 2}
    return b"".join(map(_line, ev))


MASKED_TAMPERS = {**TAMPERS, "hidden_session": _hidden_session, "decoy_traded": _decoy_traded}


@pytest.mark.parametrize("workers", [2])
@pytest.mark.parametrize("name", sorted(MASKED_TAMPERS))
def test_a_tampered_masked_trajectory_replays_to_the_serial_result(demo, tmp_path, name, workers):
    w = dict(demo["masked"])
    w["trajectory"] = tmp_path / "t.jsonl"
    w["trajectory"].write_bytes(MASKED_TAMPERS[name](_events(demo["masked"]["trajectory"])))
    serial, parallel, _ = _replays(w, workers)
    assert serial.problems, "the tampering must be found"
    assert parallel == serial


@pytest.mark.parametrize("workers", [1, 2, 3, 9])
@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_tampered_trajectory_replays_to_the_serial_result(demo, tmp_path, name, workers):
    w = _tampered(demo, tmp_path, name)
    serial, parallel, pool = _replays(w, workers)
    assert serial.problems, "the tampering must be found"
    assert parallel == serial
    assert pool.jobs, "the cells before the tampering went to the workers"


# --- the command, with real worker processes -----------------------------------------------------------------------


def _cli(cli, w: dict[str, Path], *extra: str) -> tuple[int, str, str]:
    return cli("verify", w["receipt"], "--trajectory", w["trajectory"], "--bundle", w["release"], "--prices",
               w["prices"], *extra)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", [None, "answer", "swapped"])
def test_the_command_prints_the_same_report_under_one_two_and_three_workers(demo, tmp_path, cli, name):
    w = demo["plain"] if name is None else _tampered(demo, tmp_path, name)
    want = _cli(cli, w, "--workers", "1")
    assert want[0] == (0 if name is None else 1), want
    if name == "answer":
        assert "the answer to pit_" in want[1]
    if name == "swapped":
        assert "MISMATCH  trajectory  (line " in want[1]
    # every worker count and every tampering meet on the in-process pool above; here, with real processes, the
    # clean run is tried at two and three workers and in --json, a tampered one at two
    for workers in ("2", "3") if name is None else ("2",):
        assert _cli(cli, w, "--workers", workers) == want
    if name is None:
        js = _cli(cli, w, "--workers", "1", "--json")
        assert _cli(cli, w, "--workers", "2", "--json") == js


@pytest.mark.slow
def test_a_masked_run_verifies_alike_on_worker_processes(demo, cli):
    """Real worker processes, handed the served arms by the verifying process: the one-worker report."""
    w = demo["masked"]
    want = _cli(cli, w, "--workers", "1")
    assert want[0] == 0, want
    assert _cli(cli, w, "--workers", "2") == want


@pytest.mark.slow
def test_a_zst_trajectory_and_a_cut_one_verify_alike(demo, tmp_path, cli):
    w = demo["zst"]
    want = _cli(cli, w, "--workers", "1")
    assert want[0] == 0, want
    assert _cli(cli, w, "--workers", "2") == want
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(w["trajectory"].read_bytes()[:-200])  # a truncated zstd stream
    bad = {**w, "trajectory": cut}
    want = _cli(cli, bad, "--workers", "1")
    assert want[0] == 1 and "not a readable zstd trajectory" in want[1], want
    assert _cli(cli, bad, "--workers", "2") == want


@pytest.mark.slow
def test_an_old_receipt_over_a_format_2_release_verifies_alike(demo, tmp_path, cli):
    w = dict(demo["old"])
    body = read_receipt(w["receipt"])["body"]
    del body["trajectory"]["encoding"]  # what every receipt before the field held
    old = tmp_path / "old-receipt.json"
    write_receipt(old, make_receipt(body, key=ensure_signing_key()[0]))
    w["receipt"] = old
    want = _cli(cli, w, "--workers", "1")
    assert want[0] == 0, want
    assert "ok        mask_secret_sha256  (none: the release's shift is the public map)" in want[1]
    assert _cli(cli, w, "--workers", "3") == want


def test_the_default_is_one_worker_per_core_for_a_trajectory_worth_it(demo, cli, monkeypatch):
    from evalkit.pit import _verify_pools

    seen: list[int] = []
    real = _verify_pools.LocalPool

    def spy(config: dict[str, Any], bundle: str, workers: int, shipped: str | None = None) -> Any:
        seen.append(workers)
        assert (
            shipped is not None and (Path(shipped) / "main.arrow").is_file()
        )  # the workers map these frames
        return real(config, bundle, workers, shipped)

    monkeypatch.setattr(_verify_pools, "LocalPool", spy)
    monkeypatch.setattr(_verify_pools.os, "cpu_count", lambda: 2)
    want = _cli(cli, demo["plain"], "--workers", "1")
    assert _cli(cli, demo["plain"]) == want
    assert seen == []  # the demo's trajectory is under AUTO_MIN_BYTES: replayed in this process
    monkeypatch.setattr(_verify_pools, "AUTO_MIN_BYTES", 0)
    assert _cli(cli, demo["plain"]) == want
    assert seen == [2]
    monkeypatch.setattr(_verify_pools.os, "cpu_count", lambda: 1)
    assert _cli(cli, demo["plain"]) == want
    assert seen == [2]  # one core: the replay runs in this process, with no pool
    assert _cli(cli, demo["plain"], "--workers", "2") == want
    assert seen == [2, 2]  # asked for: workers, whatever the size


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--executor", "threads"), "--executor: expected one of local, ray, got 'threads'"),
        (("--address", "127.0.0.1:6379"), "--address: only with --executor ray"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(demo, cli, extra, message):
    code, out, err = _cli(cli, demo["plain"], *extra)
    assert (code, out) == (2, "")
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_ray_asked_for_without_ray_is_one_line_and_exit_2(demo, cli, monkeypatch):
    monkeypatch.setitem(
        sys.modules, "ray", None
    )  # `import ray` raises ImportError, as on a machine without it
    code, out, err = _cli(cli, demo["plain"], "--executor", "ray")
    assert (code, out) == (2, "")
    assert "--executor ray: Ray is not installed; install the extra" in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
@pytest.mark.needs("ray")
@pytest.mark.parametrize("name", [None, "dropped"])
def test_on_ray_the_report_is_the_one_worker_report(ray_cluster, demo, tmp_path, cli, monkeypatch, name):
    del ray_cluster
    from evalkit.pit import _verify_pools

    sent: list[int] = []
    real = _verify_pools.RayPool.submit

    def counting(self: Any, job: CellJob) -> Callable[[], CellResult]:
        sent.append(job.index)
        return real(self, job)

    monkeypatch.setattr(_verify_pools.RayPool, "submit", counting)
    w = demo["plain"] if name is None else _tampered(demo, tmp_path, name)
    want = _cli(cli, w, "--workers", "1")
    assert want[0] == (0 if name is None else 1), want
    assert sent == []
    assert _cli(cli, w, "--executor", "ray") == want
    assert sent[:3] == [0, 1, 2]  # the cells went to the actors
    assert _cli(cli, w, "--executor", "ray", "--workers", "2") == want


def test_a_copied_release_is_what_the_workers_read(demo, tmp_path, cli):
    """The workers read the release given with --bundle, not the run's: a moved release verifies."""
    w = dict(demo["plain"])
    moved = tmp_path / "moved"
    shutil.copytree(w["release"], moved)
    w["release"] = moved
    want = _cli(cli, w, "--workers", "1")
    assert want[0] == 0, want
    assert _cli(cli, w, "--workers", "2") == want


# --- a worker lost mid-run -------------------------------------------------------------------------------------------


class LosingPool(LazyPool):
    """From the ``lost``-th cell sent on, every handle raises as a pool whose worker died does."""

    def __init__(self, workers: int, release: Path, config: dict[str, Any], lost: int) -> None:
        super().__init__(workers, release, config)
        self.lost = lost

    def submit(self, job: CellJob) -> Callable[[], CellResult]:
        if len(self.jobs) < self.lost:
            return super().submit(job)
        self.jobs.append(job)

        def result() -> CellResult:
            raise WorkerLostError("a replay worker ended abruptly (test)")

        return result


@pytest.mark.parametrize(
    ("lost", "name"), [(0, None), (1, None), (8, None), (4, "answer"), (8, "answer"), (4, "cut")]
)
def test_a_lost_worker_s_cells_are_replayed_here_with_the_serial_result(demo, tmp_path, capsys, lost, name):
    w = demo["plain"] if name is None else _tampered(demo, tmp_path, name)
    body = read_receipt(w["receipt"])["body"]
    serial = replay_body(body, w["trajectory"], w["release"], w["prices"])
    pool = LosingPool(2, w["release"], body["config"], lost)
    parallel = replay_body(
        body, w["trajectory"], w["release"], w["prices"],
        walker=lambda b, setup, traj, scorer: parallel_pass(b, setup, traj, scorer, pool),
    )  # fmt: skip
    assert parallel == serial
    err = capsys.readouterr().err
    if pool.jobs[lost:]:
        assert err.count("verify: a replay worker ended abruptly (test); cell ") == 1, err
    else:
        assert err == ""


def test_a_killed_worker_process_does_not_end_verify(demo, tmp_path, capsys):
    """Real worker processes, killed (SIGKILL, by their ids: processes this test's pool started) after the first
    cell's result: the report is the serial one, and stderr says from which cell this process took over."""
    import signal

    from evalkit.pit._verify_cells import ship_setup
    from evalkit.pit._verify_pools import LocalPool

    w = demo["plain"]
    body = read_receipt(w["receipt"])["body"]
    serial = replay_body(body, w["trajectory"], w["release"], w["prices"])
    killed: list[int] = []

    class KillingPool(LocalPool):
        sent = 0

        def submit(self, job: CellJob) -> Callable[[], CellResult]:
            if self.sent == 3:
                processes = dict(self._pool._processes or {})  # the executor's own map of its workers
                for pid in processes:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            self.sent += 1
            return super().submit(job)

    def walk(b: Any, setup: Any, traj: Path, scorer: Any) -> Any:
        shipped = tmp_path / "shipped"
        shipped.mkdir()
        ship_setup(setup, shipped)
        with KillingPool(b["config"], str(w["release"]), 2, str(shipped)) as pool:
            return parallel_pass(b, setup, traj, scorer, pool)

    parallel = replay_body(body, w["trajectory"], w["release"], w["prices"], walker=walk)
    assert killed, "the pool's processes were running when the fourth cell was sent"
    assert parallel == serial
    assert "verify: a replay worker ended abruptly" in capsys.readouterr().err
