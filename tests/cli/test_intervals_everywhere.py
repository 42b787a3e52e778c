"""Every pass rate evalkit prints or exports carries its interval (Wilson score, 95%, stated), and pass@k its
standard error: ``eval``, ``campaign report`` (text and ``--json``), ``route simulate`` (text and ``--json``),
``report --json`` for an eval and a campaign, and the HTML page made from it (which the view serves as is).

One small campaign of the simulated models over five seed-bank tasks (enough for the routing frontier, which needs
four), one replay eval with right and wrong answers; the intervals are recomputed here from the counts.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit_cli import app

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "router"))
from campaign_support import write_campaign  # noqa: E402  # pyright: ignore[reportImplicitRelativeImport]

BANK = ROOT / "tests" / "evalkit" / "fixtures" / "tasks"
IDS = ("code/median/001", "code/second-largest/001", "code/to-roman/001", "structured/access-log/001",
       "structured/contact-card/001")  # fmt: skip
runner = CliRunner()
PCT = r"\d+\.\d%"
CI = rf"\[{PCT}, ?{PCT}\]"


def wilson(s: int, n: int) -> list[float]:
    """The interval as the test states it (not evalkit's code): Wilson score, z = 1.96 (to 1e-9)."""
    z = 1.959963984540054
    p = s / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6)]


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout  # stdout only: a warning on stderr (the weaker wall) is not part of what is parsed


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Any:
    work = tmp_path_factory.mktemp("intervals")
    mp = pytest.MonkeyPatch()
    mp.chdir(work)
    mp.setenv("EVALKIT_HOME", str(work / "home"))
    mp.setenv("XDG_CACHE_HOME", str(work / "cache"))
    cli("campaign", "run", str(write_campaign(work / "campaign-file", name="c", k=3, ids=IDS)))
    from evalkit import load_tasks, reference_solution

    lines = [json.dumps({"task_id": t.id, "completion": "def double(x):\n    return x + 1\n"
                         if t.id.startswith("code/double") else reference_solution(t)}) for t in load_tasks(BANK)]
    (work / "answers.jsonl").write_text("\n".join(lines) + "\n")
    cli(*EVAL_ARGS)
    yield work
    mp.undo()


EVAL_ARGS = ("eval", "--tasks", str(BANK), "--solver", "replay:answers.jsonl", "--out", "res.jsonl",
             "--receipt", "eval-receipt.json")  # fmt: skip


@pytest.mark.slow
def test_eval_prints_and_exports_intervals(place):
    args = EVAL_ARGS
    data = json.loads(cli(*args, "--json"))
    rows = [json.loads(x) for x in (place / "res.jsonl").read_text().splitlines()]
    for part in ("public", "hidden"):
        blocks = [r[part] for r in rows if r["infra_error"] is None and r[part]["total"]]
        passed = sum(b["passed"] == b["total"] for b in blocks)
        assert data["intervals"][f"{part}_pass_rate"] == wilson(passed, len(blocks)), part
        tests = sum(b["total"] for b in blocks)
        assert data["intervals"][f"{part}_test_pass_rate"] == wilson(sum(b["passed"] for b in blocks), tests), part
        assert data["summary"][f"{part}_test_pass_rate"] is not None
    assert "Wilson" in data["intervals"]["method"]
    text = cli(*args)
    assert re.search(rf"public pass rate {PCT} {CI}", text) and re.search(rf"hidden pass rate {PCT} {CI}", text), text
    model = json.loads(cli("report", str(place / "eval-receipt.json"), "--json"))
    for block in [model["rates"]["public"], model["rates"]["hidden"],
                  *(f[p] for f in model["families"] for p in ("public", "hidden"))]:  # fmt: skip
        assert [block["low"], block["high"]] == wilson(block["passed"], block["n"]), block


def _campaign_counts(place: Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(x) for x in (place / "home" / "campaigns" / "c" / "results.jsonl").read_text().splitlines()]
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["status"] != "graded" or r["infra_error"] is not None:
            continue
        m = out.setdefault(r["model_id"], {"n": 0, "public": 0, "hidden": 0, "tasks": {}})
        m["n"] += 1
        for part in ("public", "hidden"):
            m[part] += r[part]["passed"] == r[part]["total"]
        t = m["tasks"].setdefault(r["task_id"], [0, 0])
        t[0] += 1
        t[1] += bool(r["solved"])
    return out


def _se_of_pass_at_k(tasks: dict[str, list[int]], k: int) -> float:
    values = [1 - math.comb(n - c, k) / math.comb(n, k) for n, c in tasks.values() if n >= k]
    mean = sum(values) / len(values)
    return round(math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values)), 6)


@pytest.mark.slow
def test_campaign_report_json_and_text_carry_intervals_and_standard_errors(place):
    data = json.loads(cli("campaign", "report", "c", "--json"))
    counts = _campaign_counts(place)
    for model, iv in data["intervals"]["per_model"].items():
        c = counts[model]
        assert iv["public_pass@1_ci95"] == wilson(c["public"], c["n"])
        assert iv["hidden_pass@1_ci95"] == wilson(c["hidden"], c["n"])
        assert iv["adversarial_pass@1_ci95"] is None  # no banked adversarial tests: no rate, no interval
        for k in ("1", "2", "3"):
            assert iv["pass@k_se"][k] == pytest.approx(_se_of_pass_at_k(c["tasks"], int(k)), abs=1e-6), (model, k)
    text = cli("campaign", "report", "c").splitlines()
    header = text[1].split()
    assert header[:7] == ["model", "pub@1", "pub@1", "95%", "CI", "hid@1", "hid@1"]
    for line in text[2:4]:
        assert len(re.findall(CI, line)) == 2, line  # public and hidden (adversarial: n/a)
        assert len(re.findall(rf"{PCT}±{PCT}", line)) == 3, line  # pass@1..3 each with its standard error
    assert text[-1].startswith("intervals: Wilson score interval, 95%")


@pytest.mark.slow
def test_route_simulate_calibration_baselines_and_thresholds_carry_intervals(place):
    data = json.loads(cli("route", "simulate", "--calibrate-on", "c", "--json"))
    for q in data["calibration"]["overall"].values():
        assert q["pass_rate_ci95"] == wilson(q["successes"], q["n"])
    for r in data["reports"]:
        for policy in ("routed", "always_strongest", "always_cheapest"):
            assert len(r[policy]["pass_rate_ci95"]) == 2, (policy, r)
    text = cli("route", "simulate", "--calibrate-on", "c", "--sweep")
    calib = [x for x in text.splitlines() if " quality " in x]
    assert len(calib) == 2 and all(re.search(rf"pass {PCT} {CI}, n \d+", x) for x in calib), text
    baselines = next(x for x in text.splitlines() if x.startswith("baselines"))
    assert len(re.findall(rf"pass {PCT} {CI}", baselines)) == 2, baselines
    thresholds = [x for x in text.splitlines() if re.match(r"\s+\d\.\d\d\s", x)]
    assert thresholds and all(re.search(CI, x) for x in thresholds), text
    assert "Wilson score interval, 95%" in text


@pytest.mark.slow
def test_campaign_report_model_and_page_show_every_interval(place, tmp_path):
    model = json.loads(cli("report", "c", "--json"))
    report = json.loads(cli("campaign", "report", "c", "--json"))
    for m in model["models"]:
        iv = report["intervals"]["per_model"][m["model"]]
        assert m["pass@1_ci95"] == iv["hidden_pass@1_ci95"] and m["public_pass@1_ci95"] == iv["public_pass@1_ci95"]
        assert m["pass@k_se"] == iv["pass@k_se"][str(model["k"])]
    fr = model["frontier"]
    assert len(fr["points"]) > 1, fr["note"]
    from evalkit_router import split_tasks

    decisions = 3 * len(split_tasks(sorted(IDS), fraction=0.5, seed=0)[1])  # the held-out tasks, K samples each
    for point in [*fr["points"], fr["always_strong"], fr["always_cheap"]]:
        lo, hi = point["pass_rate_ci95"]
        assert [lo, hi] == wilson(round(point["pass_rate"] * decisions), decisions), point
    assert "Wilson" in model["intervals"] and "Wilson" in fr["method"]
    page = tmp_path / "c.html"
    cli("report", "c", "--out", str(page))
    html = page.read_text()
    paths = set(re.findall(r'data-path="([^"]+)"', html))
    for i in range(len(model["models"])):
        for key in ("pass@1_ci95", "public_pass@1_ci95"):
            assert {f"models.{i}.{key}.0", f"models.{i}.{key}.1"} <= paths, (i, key)
        assert f"models.{i}.pass@k_se" in paths
    for i in range(len(fr["points"])):
        assert {f"frontier.points.{i}.pass_rate_ci95.0", f"frontier.points.{i}.pass_rate_ci95.1"} <= paths
    for which in ("always_strong", "always_cheap"):
        assert f"frontier.{which}.pass_rate_ci95.0" in paths
    # every pass rate a page marks has its interval beside it: no rate path without a low/high or ci95 path
    rates = {p for p in paths if re.search(r"(pass@1|pass_rate|\.rate)$", p)}
    assert rates
    for p in rates:
        base = p.rsplit(".", 1)[0]
        assert (f"{p}_ci95.0" in paths) or (f"{base}.low" in paths and f"{base}.high" in paths), p


@pytest.mark.slow
def test_eval_page_shows_every_interval(place, tmp_path):
    page = tmp_path / "e.html"
    cli("report", str(place / "eval-receipt.json"), "--out", str(page))
    paths = set(re.findall(r'data-path="([^"]+)"', page.read_text()))
    rates = {p for p in paths if p.endswith(".rate")}
    assert any(p.startswith("families.") for p in rates) and "rates.hidden.rate" in rates
    for p in rates:
        base = p.rsplit(".", 1)[0]
        assert f"{base}.low" in paths and f"{base}.high" in paths, p
