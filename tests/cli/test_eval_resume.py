"""``evalkit eval`` keeps every finished verdict: Ctrl-C stops at once (exit 130) with the verdicts made so far in
``OUT.partial``, and the same command resumes from them to the same results file, byte for byte, as a run never
interrupted. The journal is an input to a signed receipt, so a line it did not write (forged, moved from another
run, torn) is graded again, never trusted. Without ``--out`` an eval saves under ``out/eval/``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit import run_eval
from evalkit_cli import app

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
runner = CliRunner()
N_SLOW = 24


def _slow_replay(path: Path) -> Path:
    """24 answers to code/double/001 that each sleep 0.1 s per test (6 tests): a few seconds of grading in all;
    every third is wrong, so the verdicts differ."""
    lines = []
    for n in range(N_SLOW):
        body = "2 * n" if n % 3 else "3 * n"
        code = f"import time\ntime.sleep(0.1)\n\ndef double(n: int) -> int:\n    return {body}\n"
        lines.append({"task_id": "code/double/001", "completion": f"```python\n{code}```"})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _evalkit(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", "from evalkit_cli import main; main()", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


# Runs the eval as its child with PR_SET_CHILD_SUBREAPER set, forwards Ctrl-C to it, reaps what is re-parented
# to it (as init would), and once the eval has exited (and a second has passed) prints the pids of any process of
# its tree still alive: an orphaned jail or zygote would be re-parented here instead of to init.
_REAPER = """
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
child = subprocess.Popen([sys.executable, "-c", "from evalkit_cli import main; main()", *sys.argv[1:]])
signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGINT))
while True:  # reap whatever is re-parented here at once, as init would, until the eval itself exits
    pid, status = os.waitpid(-1, 0)
    if pid == child.pid:
        rc = os.waitstatus_to_exitcode(status)
        break
time.sleep(1.0)
while True:
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            break
    except ChildProcessError:
        break
me = os.getpid()
left = open(f"/proc/{me}/task/{me}/children").read().split()
print(json.dumps({"rc": rc, "left": left}), file=sys.stderr)
"""


def _reaped(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _REAPER, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


@pytest.mark.slow
def test_ctrl_c_keeps_the_finished_verdicts_and_the_same_command_resumes_them(tmp_path: Path) -> None:
    replay = _slow_replay(tmp_path / "slow.jsonl")
    whole = tmp_path / "whole"
    whole.mkdir()
    args = ["eval", "--tasks", str(BANK), "--solver", f"replay:{replay}", "--workers", "2"]
    done = _evalkit([*args, "--out", "results.jsonl"], whole)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    expected = (whole / "results.jsonl").read_bytes()
    assert len(expected.splitlines()) == N_SLOW
    assert not (whole / "results.jsonl.partial").exists()  # a finished run leaves no journal

    cut = tmp_path / "cut"
    cut.mkdir()
    journal = cut / "results.jsonl.partial"
    proc = _reaped([*args, "--out", "results.jsonl"], cut)
    deadline = time.monotonic() + 300
    while len(_lines(journal)) < 1 + 6 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # a header and six verdicts, then Ctrl-C
    assert proc.poll() is None, "the eval ended before it could be interrupted"
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    outcome = json.loads(err.strip().splitlines()[-1])
    stopped = time.monotonic() - sent - 1.0  # the reaper's second of watching for leftovers
    assert outcome["rc"] == 130, err
    assert stopped < 3.0, f"took {stopped:.2f} s to stop"
    assert outcome["left"] == [], "processes of the interrupted eval outlived it"
    assert not (cut / "results.jsonl").exists()  # no half results file
    kept = [json.loads(x) for x in _lines(journal)[1:]]
    assert 6 <= len(kept) < N_SLOW
    assert f"interrupted: {len(kept)} finished verdict(s) kept in results.jsonl.partial" in err
    # every kept verdict is the uninterrupted run's verdict for that sample, as it will be written
    by_sample = {json.loads(x)["sample"]: x for x in expected.splitlines()}
    for entry in kept:
        row = entry["row"]
        assert json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() == \
            by_sample[row["sample"]]

    again = _evalkit([*args, "--out", "results.jsonl"], cut)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert f"resumed: {len(kept)} verdict(s) from the interrupted run, {N_SLOW} in all" in out
    assert (cut / "results.jsonl").read_bytes() == expected
    assert not journal.exists()


def _journaled(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A finished reference eval's results, and a journal written for the same run (as if it had stopped just
    before the results file was written)."""
    out = tmp_path / "results.jsonl"
    run_eval(BANK, "reference", k=2, out=out)
    expected = out.read_bytes()
    journal = tmp_path / "results.jsonl.partial"
    import evalkit.grading._eval_journal as j

    real = j.Journal.discard
    try:
        j.Journal.discard = j.Journal.close  # type: ignore[method-assign]  # keep it this once
        out.unlink()
        run_eval(BANK, "reference", k=2, out=out)
    finally:
        j.Journal.discard = real  # type: ignore[method-assign]
    assert journal.exists()
    out.unlink()
    return out, journal, expected


def _rerun(out: Path) -> tuple[int, bytes]:
    report = run_eval(BANK, "reference", k=2, out=out)
    return report.resumed, out.read_bytes()


def test_a_full_journal_is_resumed_whole_to_the_same_bytes(tmp_path: Path) -> None:
    out, journal, expected = _journaled(tmp_path)
    rows = len(expected.splitlines())
    assert len(_lines(journal)) == 1 + rows
    assert _rerun(out) == (rows, expected)
    assert not journal.exists()


def test_a_forged_verdict_in_the_journal_is_graded_again(tmp_path: Path) -> None:
    """Flip a failing test to passing (keeping the line well formed, its mac as it was): the line does not check,
    so it and the lines after it are graded again, and the results are the truth."""
    out, journal, expected = _journaled(tmp_path)
    lines = _lines(journal)
    entry = json.loads(lines[1])
    entry["row"]["hidden"]["passed"] = entry["row"]["hidden"]["passed"] - 1
    lines[1] = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    journal.write_bytes(b"\n".join(lines) + b"\n")
    assert _rerun(out) == (0, expected)


def test_a_forged_line_with_a_recomputed_plain_digest_is_still_refused(tmp_path: Path) -> None:
    import hashlib

    out, journal, expected = _journaled(tmp_path)
    lines = _lines(journal)
    entry = json.loads(lines[-1])
    entry["row"]["infra_error"] = "forged"
    body = json.dumps({"key": entry["key"], "row": entry["row"]}, sort_keys=True, separators=(",", ":")).encode()
    entry["mac"] = hashlib.sha256(body).hexdigest()  # a digest anyone can make, not the keyed one
    lines[-1] = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    journal.write_bytes(b"\n".join(lines) + b"\n")
    resumed, data = _rerun(out)
    assert data == expected
    assert resumed == len(lines) - 2  # every line before the forged one


def test_a_journal_of_another_bank_or_settings_is_not_used(tmp_path: Path) -> None:
    out, journal, expected = _journaled(tmp_path)
    lines = _lines(journal)
    header = json.loads(lines[0])
    header["settings"] = "sha256:" + "0" * 64
    lines[0] = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    journal.write_bytes(b"\n".join(lines) + b"\n")
    assert _rerun(out) == (0, expected)


def test_a_journal_made_under_another_signing_key_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, _, expected = _journaled(tmp_path)
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "other-home"))  # another key: its lines do not check
    assert _rerun(out) == (0, expected)


def test_a_torn_last_line_is_cut_and_graded_again(tmp_path: Path) -> None:
    out, journal, expected = _journaled(tmp_path)
    data = journal.read_bytes()
    journal.write_bytes(data[: len(data) - 25])  # the last line loses its end, as a write cut by a crash
    rows = len(expected.splitlines())
    assert _rerun(out) == (rows - 1, expected)


def test_a_verdict_moved_to_another_sample_is_not_taken(tmp_path: Path) -> None:
    """A valid line under another key (here: another sample's key) does not check: the key is under the mac."""
    out, journal, expected = _journaled(tmp_path)
    lines = _lines(journal)
    a, b = json.loads(lines[1]), json.loads(lines[2])
    a["key"], b["key"] = b["key"], a["key"]
    lines[1] = json.dumps(a, sort_keys=True, separators=(",", ":")).encode()
    lines[2] = json.dumps(b, sort_keys=True, separators=(",", ":")).encode()
    journal.write_bytes(b"\n".join(lines) + b"\n")
    assert _rerun(out) == (0, expected)


def test_without_out_an_eval_saves_under_out_eval_and_says_where(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["eval", "--tasks", str(BANK), "--solver", "reference"])
    assert result.exit_code == 0, result.output
    where = Path("out/eval/reference")
    assert sorted(p.name for p in where.iterdir()) == ["receipt.json", "results.jsonl"]
    saved = [line for line in result.output.splitlines() if line.startswith("saved")]
    assert saved == [f"saved results and receipt in {where}/ (evalkit report {where}; evalkit view)"]
    receipt = json.loads((where / "receipt.json").read_text())
    assert receipt["body"]["kind"] == "evalkit.eval"
    assert receipt["body"]["files"]["results"] == "results.jsonl"
    report = runner.invoke(app, ["report", str(where), "--json"])
    assert report.exit_code == 0, report.output
    assert json.loads(report.stdout)["kind"] == "eval"
    # a replay and a model solver each get a directory of their own
    replay = tmp_path / "my answers.jsonl"
    replay.write_text(json.dumps({"task_id": "code/double/001", "completion": "```python\ndef double(n):\n"
                                  "    return 2 * n\n```"}) + "\n")  # fmt: skip
    result = runner.invoke(app, ["eval", "--tasks", str(BANK), "--solver", f"replay:{replay}", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert Path(payload["results"]) == Path("out/eval/replay-my-answers/results.jsonl")
    assert Path(payload["receipt"]) == Path("out/eval/replay-my-answers/receipt.json")


def test_explicit_out_without_receipt_writes_only_the_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["eval", "--tasks", str(BANK), "--solver", "reference", "--out", "r.jsonl"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]  # no journal left, no receipt unless asked
    assert "saved results r.jsonl" in result.output


def test_a_link_planted_where_the_journal_goes_is_not_written_through(tmp_path: Path) -> None:
    from evalkit_core import ConfigError

    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / "results.jsonl.partial").symlink_to(victim)
    with pytest.raises(ConfigError, match="cannot write the journal"):
        run_eval(BANK, "reference", out=tmp_path / "results.jsonl")
    assert victim.read_text() == "mine\n"
    assert not (tmp_path / "results.jsonl").exists()


def test_a_second_eval_on_the_same_out_is_refused_while_the_first_holds_it(tmp_path: Path) -> None:
    from evalkit.grading._eval_journal import Journal, journal_running
    from evalkit_core import ConfigError, ensure_signing_key

    out = tmp_path / "results.jsonl"
    held = Journal(tmp_path / "results.jsonl.partial", {"bank": "x"}, ensure_signing_key()[0])
    try:
        assert journal_running(held.path)
        with pytest.raises(ConfigError, match="being written by another evalkit eval"):
            run_eval(BANK, "reference", out=out)
        assert not out.exists()
    finally:
        held.close()
    assert not journal_running(held.path)
    run_eval(BANK, "reference", out=out)  # once let go, the journal of another run is simply replaced
    assert out.exists() and not held.path.exists()
