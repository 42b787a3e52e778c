"""`evalkit route simulate` over a real (sim) campaign: out-of-sample by default, in-sample refused unless asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# a whole campaign (three models over the seed bank) run and routed through the CLI's own processes: minutes;
# the routing itself is tested in tests/router/test_route.py and tests/cli/test_intervals_everywhere.py
pytestmark = pytest.mark.integration


def evalkit(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALKIT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "evalkit_cli", *args], capture_output=True, text=True, check=False, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def campaign_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    spec = home / "c.toml"
    spec.write_text(
        'name = "route-test"\nmodels = ["sim/weak", "sim/mid", "sim/strong"]\nk = 2\ncpu_seconds = 1.0\n'
        f'[tasks]\ndir = "{ROOT / "tasks"}"\n'
    )
    proc = evalkit("campaign", "run", str(spec), home=home)
    assert proc.returncode == 0, proc.stderr
    return home


@pytest.mark.slow
def test_simulate_reports_against_both_baselines(campaign_home: Path) -> None:
    proc = evalkit("route", "simulate", "--calibrate-on", "route-test", "--threshold", "0.4", "--json", home=campaign_home)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (rep,) = out["reports"]
    assert rep["label"] == "out_of_sample"
    assert rep["always_strongest"]["model"] == "sim/strong"
    assert rep["always_cheapest"]["model"] == "sim/weak"
    assert 0 < rep["cost_reduction"] < 1
    assert Path(out["calibration_file"]).is_file()
    assert out["calibration"]["results_digest"].startswith("sha256:")
    cal_tasks = set(out["calibration"]["tasks"])
    assert rep["tasks"] > 0 and len(cal_tasks) > 0


@pytest.mark.slow
def test_in_sample_is_refused_unless_asked_and_then_labelled(campaign_home: Path) -> None:
    refused = evalkit("route", "simulate", "--calibrate-on", "route-test", "--evaluate-on", "route-test", home=campaign_home)
    assert refused.returncode == 2
    assert "--in-sample" in refused.stderr
    ok = evalkit("route", "simulate", "--calibrate-on", "route-test", "--evaluate-on", "route-test", "--in-sample", "--json", home=campaign_home)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["reports"][0]["label"] == "in_sample"


@pytest.mark.slow
def test_sweep_prints_the_frontier(campaign_home: Path) -> None:
    proc = evalkit("route", "simulate", "--calibrate-on", "route-test", "--sweep", home=campaign_home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") > 15
    assert "threshold" in proc.stdout


@pytest.mark.slow
def test_route_run_live_escalates_through_the_model_layer(campaign_home: Path) -> None:
    proc = evalkit(
        "route", "run", "--tasks", str(ROOT / "tasks"), "--threshold", "0.4", "--calibrate-on", "route-test", "--json",
        home=campaign_home,
    )
    assert proc.returncode == 0, proc.stderr
    decisions = json.loads(proc.stdout)
    assert len(decisions) == len(list((ROOT / "tasks").glob("*/*/*/task.json")))
    for d in decisions:
        assert d["served_by"] == d["tried"][-1]
        # a decision that escalated did so because an earlier answer failed its public tests
        if d["escalations"]:
            assert len(d["tried"]) >= 2
    assert any(d["escalations"] for d in decisions)
    assert {d["served_by"] for d in decisions} <= {"sim/weak", "sim/mid", "sim/strong"}
