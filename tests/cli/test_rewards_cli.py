"""``evalkit rewards export CAMPAIGN``: reads the campaign's rollouts from the store (tables as the campaign
code writes them), scores them and writes each format; user errors exit 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.json as paj
import pytest
from typer.testing import CliRunner

from evalkit import Sandbox, SandboxLimits, VerifierSettings, bank_digest, grade, load_tasks
from evalkit_cli import app
from evalkit_core import canonical_bytes
from evalkit_core.store import Store

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
GOOD = "```python\ndef double(n):\n    return 2 * n\n```"
HACK = "```python\nimport os\ndef double(n):\n    os.environ.get('X')\n    return 2 * n\n```"
WRONG = "```python\ndef double(n):\n    return n\n```"
runner = CliRunner()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    task = next(t for t in load_tasks(BANK) if t.id == "code/double/001")
    config = {
        "identity": {"tasks": {task.id: task.digest}, "cpu_seconds": None},
        "settings": {"name": "sim-seed", "tasks": {"dir": str(BANK)}},
    }
    with Store.open() as store, Sandbox(workers=1) as box, store.transaction() as db:
        # what the campaign records beside each verdict (schema 3)
        under = (VerifierSettings(box.limits).digest, bank_digest([task]), box.isolation.label)
        db.execute(
            "INSERT INTO campaigns (campaign_id, created_at, name, config_digest, config, status) "
            "VALUES ('c-1', 'now', 'sim-seed', 'sha256:x', ?, 'done')",
            (canonical_bytes(config).decode(),),
        )
        for j, (model, text) in enumerate((("sim/strong", GOOD), ("sim/weak", HACK), ("sim/weak", WRONG))):
            graded = j < 2  # the last one completed but was never graded: graded at export
            verdict = grade(task, text, box).to_json()
            verdict.pop("task_id")  # the campaign stores the verdict without it (the row names the task)
            result = canonical_bytes(verdict).decode() if graded else None
            db.execute(
                "INSERT INTO rollouts (rollout_key, campaign_id, task_id, task_digest, model_id, sample, "
                "call_id, status, completion, cost, result, infra_error, created_at, graded_at, "
                "settings_digest, bank_digest, isolation) "
                "VALUES (?, 'c-1', ?, ?, ?, ?, NULL, ?, ?, '0', ?, NULL, 'now', NULL, ?, ?, ?)",
                (
                    f"rk-{j}",
                    task.id,
                    task.digest,
                    model,
                    j,
                    "graded" if graded else "completed",
                    json.dumps({"text": text, "model_id": model}),
                    result,
                    *(under if graded else (None, None, None)),
                ),
            )
    return tmp_path


@pytest.mark.parametrize("fmt", ["jsonl", "grpo", "dpo", "sft"])
def test_export_each_format(home, fmt):
    out = home / f"{fmt}.jsonl"
    result = runner.invoke(
        app, ["rewards", "export", "sim-seed", "--format", fmt, "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["campaign"], summary["rollouts"], summary["flagged"]) == ("sim-seed", 3, 1)
    assert summary["flags"] == {"reads_forbidden": 1}
    table = paj.read_json(out)
    assert table.num_rows == summary["rows"] == {"jsonl": 3, "grpo": 1, "dpo": 2, "sft": 1}[fmt]
    if fmt == "jsonl":
        rows = {r["rollout_key"]: r for r in table.to_pylist()}
        assert [rows[k]["reward"] for k in ("rk-0", "rk-1", "rk-2")] == [1.0, 0.0, 0.0]
        assert rows["rk-1"]["flags"]["reads_forbidden"] is True
        assert rows["rk-0"]["campaign"] == "sim-seed"


def test_allow_flagged(home):
    out = home / "r.jsonl"
    args = ["rewards", "export", "c-1", "--format", "jsonl", "--out", str(out), "--allow-flagged"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "flagged 1" in result.output
    rows = {r["rollout_key"]: r for r in paj.read_json(out).to_pylist()}
    assert rows["rk-1"]["reward"] == 1.0


def test_user_errors_exit_2(home, capsys):
    from evalkit_cli._errors import run_app

    for args, message in (
        (
            ["rewards", "export", "nope", "--format", "jsonl", "--out", str(home / "x")],
            "campaign 'nope' not found",
        ),
        (["rewards", "export", "sim-seed", "--format", "csv", "--out", str(home / "x")], "--format"),
    ):
        import sys

        old = sys.argv
        sys.argv = ["evalkit", *args]
        try:
            with pytest.raises(SystemExit) as exc:
                run_app(app, "evalkit")
        finally:
            sys.argv = old
        assert exc.value.code == 2
        assert not (home / "x").exists()
        assert message in capsys.readouterr().err


def _export(home, *extra):
    out = home / "r.jsonl"
    result = runner.invoke(app, ["rewards", "export", "sim-seed", "--format", "jsonl", "--out", str(out), "--json", *extra])
    return result, out


def _rows(out):
    return {r["rollout_key"]: r for r in paj.read_json(out).to_pylist()}


def _sql(home, statement, *args):
    with Store.open(home / "home") as store, store.transaction() as db:
        db.execute(statement, args)


def test_stored_verdicts_are_read_not_regraded(home):
    """The export takes the stored verdict as it is (a doctored verdict shows through); --regrade grades again."""
    _sql(
        home,
        "UPDATE rollouts SET result = json_set(result, '$.hidden.tests[0].passed', json('false')) WHERE rollout_key = 'rk-0'",
    )
    result, out = _export(home)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["graded_now"] == 1  # only rk-2, which was never graded
    rows = _rows(out)
    assert rows["rk-0"]["reward"] < 1.0  # the stored verdict, not a fresh grading
    assert rows["rk-0"]["isolation"] == rows["rk-2"]["isolation"]
    result, out = _export(home, "--regrade")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["graded_now"] == 3
    assert _rows(out)["rk-0"]["reward"] == 1.0


def _refused(home, capsys, message, *extra):
    from evalkit_cli._errors import run_app

    out = home / "refused.jsonl"
    import sys

    old = sys.argv
    sys.argv = ["evalkit", "rewards", "export", "sim-seed", "--format", "jsonl", "--out", str(out), *extra]
    try:
        with pytest.raises(SystemExit) as exc:
            run_app(app, "evalkit")
    finally:
        sys.argv = old
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert not out.exists()
    assert len(err.strip().splitlines()) == 1, err
    assert message in err
    assert "--regrade" in err


def test_other_verifier_settings_are_refused(home, capsys):
    other = VerifierSettings(SandboxLimits(cpu_seconds=7.0)).digest
    _sql(home, "UPDATE rollouts SET result = json_set(result, '$.settings_digest', ?) WHERE rollout_key = 'rk-1'", other)
    _refused(home, capsys, "field 'settings_digest': graded under verifier settings " + other)
    result, _ = _export(home, "--regrade")
    assert result.exit_code == 0, result.output


def test_other_bank_is_refused(home, capsys):
    _sql(home, "UPDATE rollouts SET bank_digest = 'sha256:' || hex(zeroblob(32)) WHERE rollout_key = 'rk-0'")
    _refused(home, capsys, "field 'bank_digest': graded against task bank sha256:0000")


def test_a_verdict_graded_before_schema_3_is_refused_with_one_line(home, capsys):
    _sql(home, "UPDATE rollouts SET settings_digest = NULL, bank_digest = NULL, isolation = NULL WHERE rollout_key = 'rk-1'")
    _refused(home, capsys, "graded before evalkit recorded the bank")
    result, out = _export(home, "--regrade")
    assert result.exit_code == 0, result.output
    assert _rows(out)["rk-1"]["reward"] == 0.0  # flagged, as before


def test_weaker_isolation_gets_no_reward_and_is_counted(home):
    """rk-0 is recorded behind the full wall; rk-1 behind one without seccomp: it gets None, counted."""
    _sql(home, "UPDATE rollouts SET isolation = 'full' WHERE rollout_key = 'rk-0'")
    _sql(home, "UPDATE rollouts SET isolation = 'weaker: seccomp' WHERE rollout_key = 'rk-1'")
    result, out = _export(home)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    rows = _rows(out)
    assert rows["rk-0"]["reward"] == 1.0
    assert (rows["rk-1"]["reward"], rows["rk-1"]["weaker_isolation"]) == (None, True)
    assert summary["weaker_isolation"] == 1 + (rows["rk-2"]["weaker_isolation"] is True)
    assert summary["rewarded"] == 3 - summary["weaker_isolation"]
