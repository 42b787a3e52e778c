"""``evalkit report``: the JSON model, the self-contained page, user errors (exit 2), the missing extra."""

from __future__ import annotations

import builtins
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from report_support import (  # pyright: ignore[reportImplicitRelativeImport]
    assert_page_is_the_model,
    make_artifacts,
    runner,
)

from evalkit_cli import app
from evalkit_core import ConfigError


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return make_artifacts(tmp_path_factory.mktemp("report"))


def evalkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from evalkit_cli import main; main()", *args],
                          capture_output=True, text=True, check=False)


def report_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["report", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class _Numbers(HTMLParser):
    """Every ``data-path`` span of a page with its text."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []
        self._open: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "span" and a.get("data-path"):
            self._open.append([a["data-path"] or "", a.get("data-fmt") or "", ""])

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1][2] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._open:
            path, fmt, text = self._open.pop()
            self.found.append((path, fmt, text))


def page_numbers(html: str) -> list[tuple[str, str, str]]:
    parser = _Numbers()
    parser.feed(html)
    return parser.found


def write(args: list[str], out: Path) -> str:
    result = runner.invoke(app, ["report", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


@pytest.mark.slow
def test_pit_report_grid_cumulative_and_verification(art, tmp_path):
    model = report_json(str(art["pit"]))
    body = json.loads(art["pit"].read_text())["body"]
    assert model["kind"] == "pit"
    assert len(model["grid"]["cells"]) == 9
    for cell, theirs in zip(model["grid"]["cells"], body["cells"], strict=True):
        assert cell["total_return"] == theirs["total_return"]
        assert cell["lookahead_trades"] == theirs["lookahead_trades"]
        assert cell["unpriced_trades"] == theirs["unpriced_trades"]
        assert cell["rejected_picks"] == sum(theirs["rejected_picks"].values())
    # returns per session replayed from the release and prices: each series ends at the receipt's number
    cum = model["cumulative"]
    assert cum["measure"] == "mean_return"
    assert len(cum["dates"]) == body["window"]["sessions"]
    for series in cum["series"]:
        cell = next(c for c in body["cells"] if (c["arm"], c["clock"]) == (series["arm"], series["clock"]))
        assert len(series["values"]) == len(cum["dates"])
        assert series["values"][-1] == pytest.approx(cell["total_return"], abs=1e-6)
    statuses = {c["name"]: c["status"] for c in model["verification"]["checks"]}
    assert statuses["signature"] == "ok"
    assert statuses["body_sha256"] == "ok"
    assert all(s != "MISMATCH" for s in statuses.values()), statuses
    assert model["probe"]["items_asked"] == body["probe"]["items_asked"]
    assert [s["slot"][:2] for s in model["protocol"]["slots"]] == ["P1", "P2", "P3", "P4", "P5", "P6"]
    html = write([str(art["pit"])], tmp_path / "pit.html")
    numbers = page_numbers(html)
    assert len([p for p, _, _ in numbers if p.startswith("grid.cells.")]) == 9 * 6
    assert assert_page_is_the_model(html, model) == len(numbers)


@pytest.mark.slow
def test_pit_report_without_the_release_says_what_it_could_not_check(art, monkeypatch):
    from evalkit_cli import _report_pit

    monkeypatch.setattr(_report_pit, "_demo_inputs", lambda body: (None, None))  # not a demo run
    model = _report_pit.pit_model(art["pit"], trajectory=None, bundle=None, prices=None, home=None)
    assert model["cumulative"]["measure"] == "accepted_picks"
    assert "--bundle" in model["cumulative"]["note"]
    body = json.loads(art["pit"].read_text())["body"]
    cell = body["cells"][0]
    assert model["cumulative"]["series"][0]["values"][-1] == cell["trades"]
    statuses = {c["name"]: c["status"] for c in model["verification"]["checks"]}
    assert statuses["replay"] == "not checked"
    assert statuses["trajectory_sha256"] == "ok"


@pytest.mark.slow
def test_eval_report_rates_intervals_families_failures_and_code(art, tmp_path):
    model = report_json(str(art["eval"]))
    assert model["kind"] == "eval"
    results = [json.loads(line) for line in art["results"].read_text().splitlines()]
    hidden_ok = sum(r["hidden"]["passed"] == r["hidden"]["total"] for r in results if r["hidden"]["total"])
    assert model["rates"]["hidden"]["passed"] == hidden_ok
    low, high = model["rates"]["hidden"]["low"], model["rates"]["hidden"]["high"]
    assert low <= model["rates"]["hidden"]["rate"] <= high
    assert {f["family"] for f in model["families"]} == {"code", "structured"}
    double = next(r for r in model["rollouts"] if r["task_id"].startswith("code/double"))
    assert double["status"] == "fail"
    assert double["failing"] and all(f["reason"] for f in double["failing"])
    assert double["code"] == "def double(x):\n    return x + 1\n"  # the replayed completion, shown on click
    ok = next(r for r in model["rollouts"] if r["task_id"].startswith("code/mean"))
    assert ok["status"] == "pass"
    html = write([str(art["eval"])], tmp_path / "eval.html")
    assert assert_page_is_the_model(html, model) > 20
    # the results file alone makes the same numbers (its code is not recorded)
    bare = report_json(str(art["results"]))
    assert bare["rates"] == model["rates"]
    assert all(r["code"] is None for r in bare["rollouts"])


@pytest.mark.slow
def test_no_hidden_expected_value_reaches_a_report(art):
    from evalkit import CodeTask, load_tasks
    from evalkit_core import canonical_bytes

    model = report_json(str(art["eval"]))
    hidden: set[str] = set()
    for task in load_tasks(Path(model["source"]["tasks"])):
        if isinstance(task, CodeTask):
            hidden |= {canonical_bytes(t.expected).decode() for t in task.hidden_tests if hasattr(t, "expected")}
        else:
            hidden |= {canonical_bytes(a.value).decode() for a in task.hidden_assertions}
    hidden = {h.strip('"') for h in hidden if len(h.strip('"')) >= 2}
    assert hidden
    failing_hidden = [f for r in model["rollouts"] for f in r["failing"] if f["part"] == "hidden"]
    assert failing_hidden, "the wrong answer fails hidden tests"
    for f in failing_hidden:
        assert set(f) == {"part", "test", "reason", "detail"}
        for value in hidden:
            assert not re.search(rf"(?<![0-9a-z]){re.escape(value)}(?![0-9a-z])", f["detail"]), (value, f)


@pytest.mark.slow
def test_campaign_report_models_frontier_heatmap_and_flags(art, tmp_path):
    model = report_json("small", "--home", str(art["home"]))
    assert model["kind"] == "campaign"
    report = json.loads((art["home"] / "campaigns" / "small" / "report.json").read_text())
    by_model = {m["model"]: m for m in report["summary"]["per_model"]}
    for m in model["models"]:
        theirs = by_model[m["model"]]
        assert m["pass@1"] == theirs["hidden_pass@1"]
        assert m["pass@k"] == theirs["pass@k"]["2"]
        assert m["cost_usd"] == float(theirs["cost_usd"])
    heat = model["heatmap"]
    assert len(heat["solved"]) == 2 and all(len(row) == len(heat["tasks"]) == 3 for row in heat["solved"])
    assert model["frontier"]["note"]  # three tasks: too few to split, and the page says so
    assert len(model["rollouts"]) == 2 * 3 * 2
    assert all(r["code"] for r in model["rollouts"])
    html = write(["small", "--home", str(art["home"])], tmp_path / "camp.html")
    assert assert_page_is_the_model(html, model) > 50


@pytest.mark.slow
def test_page_is_self_contained_and_deterministic(art, tmp_path):
    a = write([str(art["eval"])], tmp_path / "a.html")
    b = write([str(art["eval"])], tmp_path / "b.html")
    assert a == b
    assert "Content-Security-Policy" in a and "default-src 'none'" in a
    # no element loads anything: no src= or href= outside the page, no <link>
    assert not re.search(r"<(script|img|iframe|link)\b[^>]*\b(src|href)=", a)
    assert "Plotly.newPlot" in a and len(a) > 1_000_000  # plotly.js is inlined


def test_user_errors_exit_2_with_one_line_and_write_nothing(tmp_path):
    out = tmp_path / "r.html"
    not_receipt = tmp_path / "x.json"
    not_receipt.write_text('{"body": {"kind": "other"}}')
    rows = tmp_path / "x.jsonl"
    rows.write_text('{"a": 1}\n')
    empty_dir = tmp_path / "d"
    empty_dir.mkdir()
    for args, words in [
        ([str(tmp_path / "missing.json")], "no such file"),
        ([str(not_receipt)], "field 'body.kind'"),
        ([str(rows)], "not an eval results file"),
        ([str(empty_dir)], "without receipt.json"),
        (["no-such-campaign"], "not a file"),
        ([str(not_receipt), "--bundle", str(tmp_path / "nope")], "--bundle"),
    ]:
        result = evalkit("report", *args, "--out", str(out), "--home", str(tmp_path / "h"))
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], lines
        assert not out.exists()
    assert not (tmp_path / "h").exists()  # looking a campaign up created no store


def test_missing_extra_is_one_line_naming_it(tmp_path, monkeypatch):
    real = builtins.__import__

    def no_plotly(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("plotly"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_plotly)
    result = runner.invoke(app, ["report", "whatever", "--out", str(tmp_path / "r.html")])
    assert isinstance(result.exception, ConfigError)  # run_app turns it into one line and exit 2
    assert "evalkit-harness[report]" in str(result.exception)
    assert "\n" not in str(result.exception)
    assert not (tmp_path / "r.html").exists()


def test_help_names_every_kind():
    result = runner.invoke(app, ["report", "--help"])
    assert result.exit_code == 0
    for word in ("PIT receipt", "eval results", "campaign", "--out", "--json"):
        assert word in result.output
