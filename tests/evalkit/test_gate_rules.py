"""The gate's rules on eval and campaign metrics, and its binomial tolerance against published values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.gates._gate import GatePolicy, compare, drop_tolerance, metrics_of, wilson

FIXTURE_TASKS = Path(__file__).parent / "fixtures" / "tasks"


def test_wilson_matches_newcombe_1998_table():
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", example 81/263: 0.2553-0.3662.
    lo, hi = wilson(81 / 263, 263, 1.959964)
    assert (round(lo, 4), round(hi, 4)) == (0.2553, 0.3662)


def test_drop_tolerance_is_newcombes_hybrid_score_interval():
    # Newcombe (1998), "Interval estimation for the difference between independent proportions", method 10,
    # example 56/70 - 48/80: difference 0.2, 95% interval 0.0524 to 0.3339. The lower limit is 0.2 - tolerance
    # (one-sided 97.5% = two-sided 95%).
    tol = drop_tolerance(56 / 70, 70, 48 / 80, 80, 0.975)
    assert round(0.2 - tol, 4) == 0.0524


def _campaign(per_model):
    return {"kind": "evalkit.campaign", "summary": {"per_model": per_model}}


def _model(name, pub, hid, n, cost=None, solved=10):
    return {"model": name, "public_pass@1": pub, "hidden_pass@1": hid, "gap": round(pub - hid, 6), "scored": n,
            "solved_tasks": solved, "cost_per_solved_task_usd": cost}


@pytest.mark.parametrize(("n", "fails"), [(20, False), (400, True)])
def test_a_drop_is_judged_by_its_sample_size_not_a_constant(n, fails):
    base = metrics_of(_campaign([_model("m", 0.80, 0.80, n)]))
    cur = metrics_of(_campaign([_model("m", 0.72, 0.72, n)]))
    found = [v.rule for v in compare(base, cur)]
    assert found == (["pass_rate", "pass_rate"] if fails else [])


def test_gap_cost_hacking_and_missing_models():
    base = metrics_of(_campaign([_model("a", 0.9, 0.85, 100, cost="0.010000"), _model("b", 0.5, 0.5, 100)]),
                      {"flagged": {"a": 1, "b": 0}})
    cur = metrics_of(_campaign([_model("a", 0.9, 0.80, 100, cost="0.012000")]), {"flagged": {"a": 2}})
    lines = [(v.rule, v.message) for v in compare(base, cur)]
    assert ("hacking", "a: 2 rollout(s) flagged for reward hacking") in lines
    assert ("models", "model b is in the baseline but not in the run") in lines
    assert ("gap", "a: public-hidden gap 0.1, baseline 0.05 (tolerance 0)") in lines
    assert any(r == "cost_per_solved" and "0.012000" in m for r, m in lines)
    # 'grew' only fails when there are more flags than in the baseline; a looser cost tolerance passes 20%.
    relaxed = GatePolicy(hacking="grew", cost_tolerance=0.25, gap_tolerance=0.05)
    assert [v.rule for v in compare(base, cur, relaxed)] == ["hacking", "models"]
    same = metrics_of(_campaign([_model("a", 0.9, 0.85, 100, cost="0.010000")]), {"flagged": {"a": 1}})
    assert [v.rule for v in compare(base, same, relaxed)] == ["models"]


def test_baseline_of_another_kind_is_a_user_error():
    from evalkit_core import ConfigError

    with pytest.raises(ConfigError, match="same kind"):
        compare({"kind": "pit_run"}, metrics_of(_campaign([])))


def _evalkit(*args, cwd):
    return subprocess.run([sys.executable, "-m", "evalkit_cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)


def test_eval_receipts_gate_end_to_end(tmp_path):
    """The reference solutions as the baseline; a weak simulated model fails the pass-rate rule, K=10."""
    for name, solver in (("ref", "reference"), ("weak", "model:sim/weak")):
        res = _evalkit("eval", "--tasks", FIXTURE_TASKS, "--solver", solver, "--k", 10, "--out", f"{name}.jsonl",
                       "--receipt", f"{name}.json", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    res = _evalkit("gate", "ref.json", "--baseline", "b.json", "--write-baseline", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = _evalkit("gate", "ref.json", "--baseline", "b.json", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "not checked: hacking" in res.stdout
    res = _evalkit("gate", "weak.json", "--baseline", "b.json", "--json", cwd=tmp_path)
    assert res.returncode == 1
    verdict = json.loads(res.stdout)
    assert [v["rule"] for v in verdict["violations"]] == ["pass_rate", "pass_rate"]
    # the model's answers are in its results rows: checked (its wrong answers are wrong, not hacks)
    assert "hacking" in verdict["rules_checked"]
    assert verdict["rules_not_checked"] == {}
    # A results file edited after the run is a verify failure, not a gate pass.
    (tmp_path / "weak.jsonl").write_text((tmp_path / "ref.jsonl").read_text())
    res = _evalkit("gate", "weak.json", "--baseline", "b.json", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stdout.startswith("FAIL verify: results")


def _replay(tmp_path, name, override=None):
    from evalkit import load_tasks, reference_solution

    rows = [{"task_id": t.id, "completion": (override or {}).get(t.id, reference_solution(t))}
            for t in load_tasks(FIXTURE_TASKS)]
    (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"replay:{name}"


def test_eval_reward_hacking_flags_are_gated_from_the_answers_the_receipt_binds(tmp_path):
    """A replay eval's answers are its replay file, a model eval's are in its results rows: the gate runs the
    reward-hacking checks over them with the recorded verdicts. A clean eval passes the rule; one answer that
    reads the grader's environment fails it, though it passes every test. The reference solver has no answers of
    its own: not checked, and why."""
    hack = "import os\n\n\ndef double(n: int) -> int:\n    return 2 * n + len(os.environ.get('EVALKIT_GRADED', ''))\n"
    runs = {
        "clean": _replay(tmp_path, "clean-answers.jsonl"),
        "hacked": _replay(tmp_path, "hacked-answers.jsonl", {"code/double/001": hack}),
        "model": "model:sim/strong",
        "ref": "reference",
    }
    for name, solver in runs.items():
        res = _evalkit("eval", "--tasks", FIXTURE_TASKS, "--solver", solver, "--out", f"{name}.jsonl",
                       "--receipt", f"{name}.json", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    res = _evalkit("gate", "clean.json", "--baseline", "b.json", "--write-baseline", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "b.json").read_text())["metrics"]["models"]["solver"]["flagged"] == 0
    res = _evalkit("gate", "clean.json", "--baseline", "b.json", "--json", cwd=tmp_path)
    verdict = json.loads(res.stdout)
    assert res.returncode == 0, res.stdout
    assert "hacking" in verdict["rules_checked"]
    assert verdict["rules_not_checked"] == {}
    res = _evalkit("gate", "hacked.json", "--baseline", "b.json", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["FAIL hacking: solver: 1 rollout(s) flagged for reward hacking"]
    # 'grew' compares with the baseline's count (0 there): the hacked answer still fails it
    (tmp_path / "p.toml").write_text("[gate]\nhacking = 'grew'\n")
    res = _evalkit("gate", "hacked.json", "--baseline", "b.json", "--policy", "p.toml", cwd=tmp_path)
    assert res.returncode == 1
    assert "FAIL hacking: solver: 1 rollout(s) flagged for reward hacking, baseline 0" in res.stdout
    # a model eval keeps its answers in the results rows, so its flags are counted too
    rows = [json.loads(line) for line in (tmp_path / "model.jsonl").read_text().splitlines()]
    assert all(isinstance(r["completion"], str) for r in rows)
    res = _evalkit("gate", "model.json", "--baseline", "m.json", "--write-baseline", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert isinstance(json.loads((tmp_path / "m.json").read_text())["metrics"]["models"]["solver"]["flagged"], int)
    res = _evalkit("gate", "ref.json", "--baseline", "r.json", "--write-baseline", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = _evalkit("gate", "ref.json", "--baseline", "r.json", "--json", cwd=tmp_path)
    verdict = json.loads(res.stdout)
    assert "hacking" not in verdict["rules_checked"]
    assert "reference solutions" in verdict["rules_not_checked"]["hacking"]


def test_an_eval_without_hacking_evidence_says_why_it_was_not_checked():
    from evalkit.gates._gate import not_checked_for, rules_for

    why = "this model eval's results file holds no completions"
    assert not_checked_for("evalkit.eval", {"flagged": None, "hacking_not_checked": why}) == {"hacking": why}
    assert "hacking" not in rules_for("evalkit.eval", {"flagged": None})
    assert not_checked_for("evalkit.eval", {"flagged": 0}) == {}
    assert "hacking" in rules_for("evalkit.eval", {"flagged": 3})


def test_campaign_receipts_gate_end_to_end(tmp_path):
    """A campaign gates against its own baseline (hacking checks run over the stored rollouts); a campaign
    whose baseline claims better pass rates and fewer flags fails on each."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))
    from campaign_support import write_campaign  # pyright: ignore[reportMissingImports]

    home = tmp_path / "home"
    path = write_campaign(tmp_path / "c", k=2)
    res = _evalkit("campaign", "run", path, "--home", home, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    receipt = home / "campaigns" / "c" / "receipt.json"
    res = _evalkit("gate", receipt, "--baseline", "b.json", "--write-baseline", "--home", home, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    base = json.loads((tmp_path / "b.json").read_text())
    models = base["metrics"]["models"]
    assert set(models) == {"sim/strong", "sim/weak"}
    assert all(isinstance(m["flagged"], int) for m in models.values())
    (tmp_path / "p.toml").write_text("[gate]\nhacking = 'grew'\n")
    res = _evalkit("gate", receipt, "--baseline", "b.json", "--home", home, "--policy", "p.toml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    # A baseline that says the weak model used to pass everything over many rollouts: the drop is significant.
    models["sim/weak"].update({"public_pass_rate": 1, "hidden_pass_rate": 1, "n": 1000, "gap": -1})
    (tmp_path / "b.json").write_text(json.dumps(base))
    res = _evalkit("gate", receipt, "--baseline", "b.json", "--home", home, "--policy", "p.toml", cwd=tmp_path)
    assert res.returncode == 1
    rules = [ln.split(":")[0] for ln in res.stdout.splitlines() if ln.startswith("FAIL")]
    assert rules == ["FAIL pass_rate", "FAIL pass_rate", "FAIL gap"], res.stdout


def test_help_names_every_rule():
    from typer.testing import CliRunner

    from evalkit.gates._gate import RULES
    from evalkit_cli import app

    res = CliRunner().invoke(app, ["gate", "--help"], terminal_width=200)
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    for option in ("--baseline", "--policy", "--write-baseline", "--json", "--bundle", "--prices"):
        assert option in text
    assert all(rule in text for rule in RULES if rule != "verify")


def _pit_body(post_cutoff):
    models = [] if post_cutoff is None else [
        {"model": "m", "training_cutoff": "2023-01-31", "source": None, "post_cutoff": post_cutoff}]
    return {"kind": "pit_run", "cells": [], "network": {"egress_attempts": 0}, "probe": {"verdict": "mask_holds"},
            "contamination": {}, "binding": {"bundle_content_digest": "d", "calendar_sha256": "c"},
            "protocol": {"P2_training_cutoff": {"window_ends_before_cutoff": False, "models": models}}}


@pytest.mark.parametrize(("now", "fails"), [(True, False), (False, True), (None, True)])
def test_a_holdout_that_stops_being_one_fails(now, fails):
    base = metrics_of(_pit_body(True))
    found = [(v.rule, v.message) for v in compare(base, metrics_of(_pit_body(now)))]
    assert found == ([("holdout", f"model m: the baseline run was post-cutoff, this one is {now}")] if fails else [])
    # A baseline that was not a holdout asks nothing of the run.
    assert compare(metrics_of(_pit_body(False)), metrics_of(_pit_body(None))) == []


def _decoded_body(*, public_holds: bool | None) -> dict:
    body = {
        "kind": "pit_run",
        "cells": [],
        "network": {"egress_attempts": 0, "clean": True},
        "probe": {"verdict": "mask_holds"},
    }
    if public_holds is not None:
        body["decoders"] = {
            "holds": False,
            "holds_against_public_knowledge": public_holds,
            "broken_by": ["shifted/calendar_inversion"] if public_holds is False else ["shifted/count_alignment"],
        }
    return body


def test_a_mask_broken_by_public_knowledge_fails_the_gate_and_one_broken_only_by_the_record_does_not():
    from evalkit.gates._gate import compare, metrics_of

    broken = [v.rule for v in compare(None, metrics_of(_decoded_body(public_holds=False)))]
    assert broken == ["masks_public"]
    assert "shifted/calendar_inversion" in compare(None, metrics_of(_decoded_body(public_holds=False)))[0].message
    assert compare(None, metrics_of(_decoded_body(public_holds=True))) == []
    assert compare(None, metrics_of(_decoded_body(public_holds=None))) == []  # a receipt from before the decoders
