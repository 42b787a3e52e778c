"""``evalkit eval``: reference and replay solvers, results file, receipt, re-checking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit import verify_eval_receipt
from evalkit_cli import app
from evalkit_core import ConfigError

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
runner = CliRunner()


def evalkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from evalkit_cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_reference_eval_writes_results_and_a_receipt(tmp_path, monkeypatch):
    out, receipt = tmp_path / "results.jsonl", tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "eval",
            "--tasks",
            str(BANK),
            "--solver",
            "reference",
            "--out",
            str(out),
            "--receipt",
            str(receipt),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    summary = payload["summary"]
    assert set(payload["isolation"]) == {"user", "network", "filesystem", "processes", "seccomp", "interpreter", "full"}
    # the whole wall where the machine gives every layer (root, bubblewrap, libseccomp: here and in CI's full leg)
    assert payload["isolation"]["full"] is all(machine.has(c) for c in ("root", "bwrap", "seccomp"))
    assert summary["rollouts"] == 4
    assert summary["public_pass_rate"] == 1
    assert summary["hidden_pass_rate"] == 1
    assert summary["gap"] == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["sample"]) for r in rows] == [
        ("code/double/001", 0),
        ("code/mean/001", 0),
        ("code/run-length-encode/001", 0),
        ("structured/person/001", 0),
    ]
    assert rows[0]["public"]["passed"] == rows[0]["public"]["total"] == 3
    assert len(rows[0]["hidden"]["tests"]) == 3
    body = json.loads(receipt.read_text())["body"]
    assert set(body["binding"]) == {"tasks", "results"}
    # paths relative to the receipt's directory, so the receipt verifies from anywhere
    assert body["files"] == {"tasks": os.path.relpath(BANK, tmp_path), "results": "results.jsonl"}
    assert body["files_relative_to"] == "receipt"
    checks = verify_eval_receipt(receipt, out, BANK)
    assert [name for name, ok, _ in checks if not ok] == []
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert [name for name, ok, _ in verify_eval_receipt(receipt) if not ok] == []
    moved = tmp_path / "moved"
    moved.mkdir()
    out.replace(moved / out.name)
    receipt.replace(moved / receipt.name)  # a receipt moved with its results still finds them
    assert [n for n, ok, _ in verify_eval_receipt(moved / receipt.name, tasks_dir=BANK) if not ok] == []
    (moved / out.name).replace(out)
    (moved / receipt.name).replace(receipt)
    monkeypatch.chdir(tmp_path)
    assert {name for name, _, _ in checks} == {"signature", "body", "results", "summary", "tasks"}
    # the same configuration gives a byte-identical body
    receipt2 = tmp_path / "r2.json"
    runner.invoke(
        app,
        [
            "eval",
            "--tasks",
            str(BANK),
            "--solver",
            "reference",
            "--out",
            str(tmp_path / "o2.jsonl"),
            "--receipt",
            str(receipt2),
        ],
    )
    body2 = json.loads(receipt2.read_text())["body"]
    assert body2["binding"] == body["binding"]
    assert body2["summary"] == body["summary"]


def test_verify_names_tampering(tmp_path):
    out, receipt = tmp_path / "results.jsonl", tmp_path / "r.json"
    runner.invoke(
        app,
        ["eval", "--tasks", str(BANK), "--solver", "reference", "--out", str(out), "--receipt", str(receipt)],
    )
    out.write_text(out.read_text().replace('"passed":true', '"passed":false', 1))
    failed = {name for name, ok, _ in verify_eval_receipt(receipt, out, BANK) if not ok}
    assert "results" in failed
    data = json.loads(receipt.read_text())
    data["body"]["summary"]["hidden_pass_rate"] = 0.5
    receipt.write_text(json.dumps(data))
    failed = {name for name, ok, _ in verify_eval_receipt(receipt, out, BANK) if not ok}
    assert "body" in failed
    assert "signature" in failed  # the signed payload is not the edited body


def test_eval_receipt_rehashed_and_resigned_by_another_key_fails(tmp_path):
    from evalkit_core import SigningKey, make_receipt, write_receipt

    out, receipt = tmp_path / "results.jsonl", tmp_path / "r.json"
    runner.invoke(
        app,
        ["eval", "--tasks", str(BANK), "--solver", "reference", "--out", str(out), "--receipt", str(receipt)],
    )
    data = json.loads(receipt.read_text())
    assert data["dsse"]["payloadType"] == "application/vnd.evalkit.receipt+json"
    assert all(ok for _, ok, _ in verify_eval_receipt(receipt, out, BANK))
    forger = SigningKey.from_seed(b"\x21" * 32)
    write_receipt(receipt, make_receipt(data["body"], key=forger))
    checks = {name: (ok, detail) for name, ok, detail in verify_eval_receipt(receipt, out, BANK)}
    assert checks["signature"][0] is False
    assert forger.key_id in checks["signature"][1]
    assert checks["body"][0] is True  # the hash alone proves nothing
    assert all(ok for _, ok, _ in verify_eval_receipt(receipt, out, BANK, key=forger.key_id))


def test_replay_samples_in_file_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run without --out saves under out/eval/
    replay = tmp_path / "replay.jsonl"
    lines = [
        {"task_id": "code/double/001", "completion": "```python\ndef double(n):\n    return 2 * n\n```"},
        {"task_id": "code/double/001", "completion": "```python\ndef double(n):\n    return abs(2 * n)\n```"},
        {"task_id": "code/double/001", "completion": "no idea"},
        {"task_id": "structured/person/001", "completion": '{"name": "Ada"}'},
    ]
    replay.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out, receipt = tmp_path / "results.jsonl", tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "eval",
            "--tasks",
            str(BANK),
            "--solver",
            f"replay:{replay}",
            "--out",
            str(out),
            "--receipt",
            str(receipt),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["sample"], r["public"]["passed"], r["hidden"]["passed"]) for r in rows] == [
        ("code/double/001", 0, 3, 3),
        ("code/double/001", 1, 3, 2),
        ("code/double/001", 2, 0, 0),
        ("structured/person/001", 0, 0, 0),
    ]
    summary = json.loads(result.stdout)["summary"]
    assert summary["public_pass_rate"] == 0.5
    assert summary["hidden_pass_rate"] == 0.25
    assert summary["gap"] == 0.25
    assert summary["tasks_answered"] == 2
    checks = verify_eval_receipt(receipt)
    assert all(ok for _, ok, _ in checks)
    assert "solver_file" in {n for n, _, _ in checks}
    result = runner.invoke(
        app, ["eval", "--tasks", str(BANK), "--solver", f"replay:{replay}", "--k", "1", "--json"]
    )
    assert json.loads(result.stdout)["summary"]["rollouts"] == 2


def test_user_errors_exit_2(tmp_path):
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"task_id": "code/nope/001", "completion": "x"}) + "\n")
    proc = evalkit("eval", "--tasks", str(BANK), "--solver", f"replay:{replay}")
    assert proc.returncode == 2
    assert "code/nope/001" in proc.stderr
    proc = evalkit("eval", "--tasks", str(BANK), "--solver", "gpt-17")
    assert proc.returncode == 2
    assert "--solver" in proc.stderr


def test_human_readable_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["eval", "--tasks", str(BANK), "--solver", "reference"])
    assert result.exit_code == 0
    assert "public pass rate 100.0% [51.0%, 100.0%]  hidden pass rate 100.0% [51.0%, 100.0%]  gap 0.0%" in result.output
    assert "intervals: Wilson score interval, 95% (z = 1.96)" in result.output


def test_evalkit_verify_checks_an_eval_receipt(tmp_path):
    """`evalkit verify` dispatches on the receipt's kind: an eval receipt is re-checked, a flipped result caught."""
    import subprocess
    import sys

    out, receipt = tmp_path / "r.jsonl", tmp_path / "r.json"
    bank = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
    run = [sys.executable, "-m", "evalkit_cli"]
    made = subprocess.run([*run, "eval", "--tasks", str(bank), "--solver", "reference", "--out", str(out), "--receipt", str(receipt)],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    ok = subprocess.run([*run, "verify", str(receipt)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "MISMATCH" not in ok.stdout and "ok" in ok.stdout
    data = bytearray(out.read_bytes())
    data[5] ^= 0x01
    out.write_bytes(bytes(data))
    bad = subprocess.run([*run, "verify", str(receipt)], capture_output=True, text=True, check=False)
    assert bad.returncode == 1
    assert "MISMATCH" in bad.stdout


def test_out_onto_a_directory_is_refused_before_any_grading(tmp_path):
    result = runner.invoke(app, ["eval", "--tasks", str(BANK), "--solver", "reference", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == f"--out {tmp_path}: is a directory; expected a file path"
    assert list(tmp_path.iterdir()) == []


def test_cpu_and_wall_seconds_reach_the_sandbox_and_the_receipt(tmp_path):
    out, receipt = tmp_path / "r.jsonl", tmp_path / "r.json"
    args = ["eval", "--tasks", str(BANK), "--solver", "reference", "--out", str(out), "--receipt", str(receipt)]
    result = runner.invoke(app, [*args, "--cpu-seconds", "1.5", "--wall-seconds", "7", "--json"])
    assert result.exit_code == 0, result.output
    settings = json.loads(receipt.read_text())["body"]["settings"]
    assert settings["limits"]["cpu_seconds"] == 1.5
    assert settings["limits"]["wall_seconds"] == 7
    refused = runner.invoke(app, [*args, "--cpu-seconds", "5", "--wall-seconds", "2"])
    assert isinstance(refused.exception, ConfigError)
    assert "--wall-seconds 2 is below --cpu-seconds 5" in str(refused.exception)
