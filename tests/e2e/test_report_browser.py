"""The report and view pages in a real headless Chromium (Debian's ``chromium``), driven over the DevTools
protocol (tests/cdp.py): they load with no console error and no failed request, make no request beyond the page
itself (file:, data:, or the loopback view), show the receipt's nine cells, draw their charts, sort and filter
their tables, and every number they show equals the JSON ``evalkit report --json`` prints. One browser serves the
whole module; a screenshot of each page goes to the test's temp dir.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "cli"))
from report_support import WRONG_DOUBLE, invoke, lookup, make_artifacts, shown  # noqa: E402  # pyright: ignore[reportImplicitRelativeImport]
from view_support import running_view  # noqa: E402  # pyright: ignore[reportImplicitRelativeImport]

from cdp import Browser, Page, click, type_into  # noqa: E402  # pyright: ignore[reportImplicitRelativeImport]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,  # a real browser
    # a machine without chromium skips, saying so; .ci/run's full leg installs it and requires it (EVALKIT_REQUIRE)
    pytest.mark.needs("chromium"),
]

CHART_MARKS = {
    "chart-cumulative": ".scatterlayer path.js-line",
    "chart-rates": ".barlayer .point path",
    "chart-heatmap": ".heatmaplayer image",
}


@pytest.fixture(scope="module")
def art(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    a = make_artifacts(tmp_path_factory.mktemp("browser"))
    out = a["base"] / "pages"
    out.mkdir()
    targets = {"pit": [str(a["pit"])], "eval": [str(a["eval"])], "campaign": ["small", "--home", str(a["home"])]}
    a["pages"], a["models"] = {}, {}
    for name, args in targets.items():
        a["models"][name] = json.loads(invoke("report", *args, "--json"))
        invoke("report", *args, "--out", str(out / f"{name}.html"))
        a["pages"][name] = out / f"{name}.html"
    return a


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def open_page(browser: Browser, url: str, shots: Path, name: str, *, charts: bool = True, min_png: int = 10_000) -> Page:
    page = browser.new_page()
    page.goto(url)
    if charts:
        page.wait_for("document.querySelectorAll('.chart').length === 0 || "
                      "document.querySelectorAll('.chart .main-svg').length > 0", timeout=60)
    shot = page.screenshot(shots / f"{name}.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > min_png
    return page


def assert_clean(page: Page, allowed_hosts: tuple[str, ...] = ()) -> None:
    assert page.console_errors() == []
    assert page.failed_requests() == []
    urls = page.requests()
    assert urls, "the page's own load is observed"
    for url in urls:
        parts = urlsplit(url)
        assert parts.scheme in {"file", "data"} or (parts.scheme == "http" and parts.hostname in allowed_hosts), url


def assert_numbers_match(page: Page, model: dict[str, Any]) -> int:
    found = page.eval("Array.from(document.querySelectorAll('[data-path]'))"
                      ".map(e => [e.dataset.path, e.dataset.fmt, e.innerText.trim()])")
    for path, fmt, text in found:
        assert text == shown(lookup(model, path), fmt), path
    return len(found)


def assert_chart(page: Page, chart: str) -> None:
    marks = page.eval(f"document.querySelectorAll('#{chart} svg.main-svg').length > 0 && "
                      f"document.querySelectorAll('#{chart} {CHART_MARKS[chart]}').length")
    assert marks and marks > 0, chart


def test_pit_report_grid_chart_numbers_and_no_network(art, browser, shots):
    page = open_page(browser, art["pages"]["pit"].as_uri(), shots, "report-pit")
    assert_clean(page)
    cells = page.eval("Array.from(document.querySelectorAll('#pit-grid td.cell')).map(td => "
                      "[td.dataset.arm, td.dataset.clock, td.querySelector('.ret').innerText.trim(), td.innerText])")
    assert len(cells) == 9
    receipt = json.loads(art["pit"].read_text())["body"]
    for arm, clock, ret, text in cells:
        theirs = next(c for c in receipt["cells"] if (c["arm"], c["clock"]) == (arm, clock))
        assert ret == shown(theirs["total_return"], "ret")
        assert f"look-ahead {theirs['lookahead_trades']} of {theirs['lookahead_checked']}" in text
        assert f"unpriced {theirs['unpriced_trades']}" in text
        assert f"rejected {sum(theirs['rejected_picks'].values())}" in text
    assert_chart(page, "chart-cumulative")
    assert page.eval("document.querySelectorAll('#chart-cumulative .scatterlayer .trace').length") == 9
    assert assert_numbers_match(page, art["models"]["pit"]) > 60


def test_eval_report_sorts_filters_shows_code_and_numbers(art, browser, shots):
    page = open_page(browser, art["pages"]["eval"].as_uri(), shots, "report-eval")
    assert_clean(page)
    assert_chart(page, "chart-rates")
    assert assert_numbers_match(page, art["models"]["eval"]) > 20
    visible = ("Array.from(document.querySelectorAll('#rollouts tbody tr'))"
               ".filter(r => r.style.display !== 'none').map(r => r.cells[0].innerText)")
    before = page.eval(visible)
    assert len(before) == len(art["models"]["eval"]["rollouts"]) >= 4
    click(page, "#rollouts th:nth-child(1)")
    ascending = page.eval(visible)
    click(page, "#rollouts th:nth-child(1)")
    descending = page.eval(visible)
    assert ascending == sorted(before) and descending == sorted(before, reverse=True) and ascending != descending
    click(page, "#rollouts th:nth-child(6)")  # hidden passed, numerically
    hidden = page.eval("Array.from(document.querySelectorAll('#rollouts tbody tr')).map(r => +r.cells[5].dataset.v)")
    assert hidden == sorted(hidden)
    type_into(page, "input.filter[data-for=rollouts]", "double")
    assert page.eval(visible) == ["code/double/001"]
    assert page.eval("document.querySelector('.rowcount[data-for=rollouts]').innerText").startswith("1 of ")
    page.eval("(() => { const i = document.querySelector('input.filter[data-for=rollouts]'); i.value = '';"
              " i.dispatchEvent(new Event('input')); })()")
    page.eval("(() => { const s = document.querySelector('select.filter[data-field=status]'); s.value = 'fail';"
              " s.dispatchEvent(new Event('input')); })()")
    assert page.eval(visible) == ["code/double/001"]
    click(page, "#rollouts tr[data-status=fail] button.code")
    assert page.eval("document.getElementById('code-view').textContent") == WRONG_DOUBLE
    assert page.eval("getComputedStyle(document.getElementById('code-panel')).display") == "block"
    page.screenshot(shots / "report-eval-code.png")


def test_campaign_report_heatmap_table_and_numbers(art, browser, shots):
    page = open_page(browser, art["pages"]["campaign"].as_uri(), shots, "report-campaign")
    assert_clean(page)
    assert_chart(page, "chart-heatmap")
    assert assert_numbers_match(page, art["models"]["campaign"]) > 50
    rows = ("Array.from(document.querySelectorAll('#rollouts tbody tr'))"
            ".filter(r => r.style.display !== 'none').map(r => r.cells[0].innerText)")
    assert len(page.eval(rows)) == 12
    page.eval("(() => { const s = document.querySelector('select.filter[data-field=model]'); s.value = 'sim/weak';"
              " s.dispatchEvent(new Event('input')); })()")
    assert page.eval(rows) == ["sim/weak"] * 6


def test_view_pages_and_trajectory_browser(art, browser, shots):
    with running_view(art["base"], art["home"]) as (url, items):
        index = open_page(browser, url, shots, "view-index", charts=False)
        assert_clean(index, ("127.0.0.1",))
        assert index.eval("document.querySelectorAll('#items tbody tr').length") == len(items)
        for n, item in enumerate(items):
            page = open_page(browser, f"{url}item/{n}", shots, f"view-item-{n}-{item['kind']}")
            assert_clean(page, ("127.0.0.1",))
            model = art["models"]["campaign" if item["kind"] == "campaign" else item["kind"]]
            if item["target"].endswith(".jsonl"):
                model = json.loads(invoke("report", item["target"], "--json"))
            assert assert_numbers_match(page, model) > 10
        pit = next(n for n, i in enumerate(items) if i["kind"] == "pit")
        traj = open_page(browser, f"{url}item/{pit}/trajectory", shots, "view-trajectory", charts=False)
        assert_clean(traj, ("127.0.0.1",))
        assert traj.eval("document.querySelectorAll('details').length") == 10  # nine cells and the probe
        click(traj, "details a")
        traj.browser.wait_event("Page.loadEventFired", traj.session, traj.mark)
        traj.wait_for("location.pathname.endsWith('/trajectory/0/0') && document.readyState === 'complete'")
        assert traj.console_errors() == [] and traj.failed_requests() == []
        text = traj.eval("document.body.innerText")
        assert "Sent to the agent" in text and "Answer and picks" in text
        traj.screenshot(shots / "view-session.png")
        assert traj.eval("document.querySelectorAll('details').length") >= 1  # the tool calls, each openable


def test_the_network_checks_can_fail(art, browser, shots, tmp_path):
    # a page that loads an image from a loopback port nobody listens on: the observation sees the request and
    # its failure, and the checks above would refuse it
    leaky = tmp_path / "leaky.html"
    leaky.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    page = open_page(browser, leaky.as_uri(), shots, "control-leaky", charts=False, min_png=500)
    page.wait_for("performance.getEntriesByType('resource').length > 0 || "
                  "document.querySelector('img').complete")
    assert any(u.startswith("http://127.0.0.1:9/") for u in page.requests())
    with pytest.raises(AssertionError):
        assert_clean(page)
    # and a report page that tries to reach out is stopped by its own Content-Security-Policy, loudly
    report = open_page(browser, art["pages"]["eval"].as_uri(), shots, "control-csp")
    report.eval("fetch('http://127.0.0.1:9/beacon').catch(() => null)")
    report.wait_for("true")
    errors = report.console_errors()
    assert any("Content Security Policy" in e for e in errors), errors
    assert not any(u.startswith("http://127.0.0.1:9/") for u in report.requests())


def test_view_index_sorts_and_follows_a_run_in_progress(browser, shots, tmp_path):
    """The index in Chromium: one row per run with its score, date and status; a click on a heading sorts by that
    column (again: reversed); while a run is in progress the page polls /index.json and shows it move on, then
    stop, with no reload and no request beyond the view."""
    from evalkit import run_eval
    from evalkit.grading._eval_journal import Journal
    from evalkit_core import ensure_signing_key

    bank = ROOT / "evalkit" / "fixtures" / "tasks"
    base = tmp_path / "runs"
    run_eval(bank, "reference", out=base / "all-pass" / "results.jsonl", receipt=base / "all-pass" / "receipt.json")
    replay = tmp_path / "half.jsonl"
    replay.write_text(json.dumps({"task_id": "code/double/001", "completion": "```python\ndef double(n):\n"
                                  "    return 3 * n\n```"}) + "\n")  # fmt: skip
    wrong = run_eval(bank, f"replay:{replay}", out=base / "wrong" / "results.jsonl",
                     receipt=base / "wrong" / "receipt.json")  # fmt: skip
    journal = Journal(base / "live" / "results.jsonl.partial",
                      {"bank": "sha256:x", "settings": "sha256:y", "solver": {"name": "reference"}, "k": None,
                       "items": 3}, ensure_signing_key()[0])  # fmt: skip
    row = wrong.rollouts[0].to_json()
    journal.append("key-0", row)
    home = tmp_path / "home"
    home.mkdir()
    try:
        with running_view(base, home) as (url, items):
            assert len(items) == 3
            page = open_page(browser, url, shots, "view-index-live", charts=False, min_png=5_000)
            rows = "Array.from(document.querySelectorAll('#items tbody tr'))"
            status = f"{rows}.map(r => r.dataset.status)"
            assert sorted(page.eval(status)) == ["in progress", "valid", "valid"]
            scores = f"{rows}.map(r => r.cells[3].innerText)"
            click(page, "#items th:nth-child(4)")
            assert page.eval(scores) == ["0.0%", "100.0%", "n/a"] or page.eval(scores) == ["n/a", "0.0%", "100.0%"]
            click(page, "#items th:nth-child(4)")
            descending = page.eval(scores)
            assert descending[:2] == ["100.0%", "0.0%"] or descending[1:] == ["100.0%", "0.0%"]
            dates = page.eval(f"{rows}.filter(r => r.dataset.status === 'valid').map(r => r.cells[4].innerText)")
            assert all(d.startswith("20") and "T" in d for d in dates), dates
            live = f"{rows}.filter(r => r.cells[1].innerText.indexOf('/live/') >= 0)[0]"
            assert page.eval(f"{live}.cells[6].innerText") == "1 of 3 verdicts"
            journal.append("key-1", row)  # the run moves on: the page shows it without a reload
            page.wait_for(f"{live}.cells[6].innerText === '2 of 3 verdicts'", timeout=20)
            journal.close()  # its writer lets go: interrupted, and the page stops saying it refreshes
            page.wait_for(f"{live}.dataset.status === 'interrupted' && "
                          "document.getElementById('items').dataset.live === '0'", timeout=20)  # fmt: skip
            assert page.eval("document.getElementById('live').innerText") == ""
            assert page.eval("performance.getEntriesByType('navigation').length") == 1  # never reloaded
            assert_clean(page, ("127.0.0.1",))
            assert any(u.endswith("/index.json") for u in page.requests())
            page.screenshot(shots / "view-index-after.png")
    finally:
        journal.close()
