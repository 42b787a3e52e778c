"""``evalkit adversary mine``: per-task figures, JSON output, banking in the store, user errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit import adversarial_tests
from evalkit_cli import app
from evalkit_cli._errors import run_app
from evalkit_core.store import Store

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "adversary"
OFF_BY_ONE = "def count_below(xs, t):\n    return sum(1 for x in xs if x <= t)\n"
runner = CliRunner()


def test_mine_replay_json_banks_counterexamples(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"task_id": "code/count-below/001", "completion": OFF_BY_ONE}) + "\n")
    args = ["adversary", "mine", "--tasks", str(BANK), "--solver", f"replay:{replay}", "--budget", "40"]
    result = runner.invoke(app, [*args, "--seed", "1", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    (row,) = payload["results"]
    assert row["task_id"] == "code/count-below/001"
    assert row["proposals"] > 0
    assert row["counterexamples"]
    assert row["banked"] == len(row["counterexamples"])
    assert payload["totals"]["banked"] == row["banked"]
    assert row["invalid"].get("candidate_agrees", 0) > 0
    with Store.open(tmp_path / "home") as store:
        assert len(adversarial_tests(store, "code/count-below/001")) == row["banked"]
    text = runner.invoke(app, [*args, "--seed", "2"])
    assert text.exit_code == 0, text.output
    assert "code/count-below/001  replay/0  proposals" in text.output
    assert "invalid:" in text.output


def test_mine_reference_solver_finds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    result = runner.invoke(
        app,
        ["adversary", "mine", "--tasks", str(BANK), "--solver", "reference", "--budget", "25", "--json"],
    )
    assert result.exit_code == 0, result.output
    totals = json.loads(result.stdout)["totals"]
    assert totals["counterexamples"] == 0
    assert totals["candidates"] == 4
    assert totals["invalid"]["nondeterministic"] > 0  # noisy-len's reference
    assert totals["invalid"]["nan"] > 0  # nan-mean's reference on []


def test_bad_solver_is_a_user_error(monkeypatch):
    monkeypatch.setattr(
        sys, "argv", ["evalkit", "adversary", "mine", "--tasks", str(BANK), "--solver", "oracle"]
    )
    with pytest.raises(SystemExit) as exc:
        run_app(app, "evalkit")
    assert exc.value.code == 2
