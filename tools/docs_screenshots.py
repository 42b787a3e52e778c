"""Take the screenshots in docs/img/ with the browser the tests use (tests/cdp.py): headless Chromium.

    uv run python tools/docs_screenshots.py PIT_RECEIPT EVAL_RECEIPT CAMPAIGN [--home DIR]

Writes the three reports to a temp directory, opens each (and the view's trajectory browser) and saves PNGs of
the sections the docs show.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "cli"))
from view_support import running_view  # noqa: E402

from cdp import Browser, click  # noqa: E402

IMG = ROOT / "docs" / "img"


def report(args: list[str], out: Path) -> None:
    subprocess.run([sys.executable, "-m", "evalkit_cli", "report", *args, "--out", str(out)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pit")
    parser.add_argument("eval")
    parser.add_argument("campaign")
    parser.add_argument("--home", default=None)
    ns = parser.parse_args()
    home = ["--home", ns.home] if ns.home else []
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        report([ns.pit], t / "pit.html")
        report([ns.eval], t / "eval.html")
        report([ns.campaign, *home], t / "campaign.html")
        browser = Browser(t / "profile", width=1280, height=860)
        try:
            page = browser.new_page()
            shots = [
                ("pit", None, "report-pit-grid.png"),
                ("pit", "#cumulative", "report-pit-cumulative.png"),
                ("eval", "#families", "report-eval.png"),
                ("campaign", "#frontier", "report-campaign-frontier.png"),
                ("campaign", "#heatmap", "report-campaign-heatmap.png"),
            ]
            for name, anchor, png in shots:
                page.goto((t / f"{name}.html").as_uri())
                page.wait_for("document.querySelectorAll('.chart .main-svg').length > 0", timeout=90)
                if anchor:
                    page.eval(f"document.querySelector('{anchor}').scrollIntoView({{block: 'start'}})")
                time.sleep(0.5)
                page.screenshot(IMG / png)
            page.goto((t / "campaign.html").as_uri())
            page.eval("(() => { const s = document.querySelector('select.filter[data-field=status]');"
                      " s.value = 'fail'; s.dispatchEvent(new Event('input')); })()")
            click(page, "#rollouts tr[data-status=fail] button.code")
            page.eval("document.querySelector('#tasks').scrollIntoView({block: 'start'})")
            time.sleep(0.5)
            page.screenshot(IMG / "report-campaign-rollouts.png")
            receipt = Path(ns.pit).resolve()
            with running_view(receipt.parent, Path(ns.home or tempfile.mkdtemp())) as (url, items):
                n = next(i for i, item in enumerate(items) if item["kind"] == "pit")
                page.goto(f"{url}item/{n}/trajectory/0/1")
                page.eval("document.querySelector('details').open = true")
                time.sleep(0.5)
                page.screenshot(IMG / "view-session.png")
        finally:
            browser.close()
    print(json.dumps(sorted(p.name for p in IMG.glob("*.png"))))


if __name__ == "__main__":
    main()
