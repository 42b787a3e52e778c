"""Artifacts the report and view tests look at: a short PIT run over the demo release, an eval (a replay with
right and wrong answers over the fixture bank) and a small campaign of the simulated models, all made through the
CLI into one directory and one store."""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from evalkit_cli import app

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "tests" / "evalkit" / "fixtures" / "tasks"
sys.path.insert(0, str(ROOT / "tests" / "router"))
from campaign_support import write_campaign  # noqa: E402  # pyright: ignore[reportImplicitRelativeImport]

runner = CliRunner()

WRONG_DOUBLE = "def double(x):\n    return x + 1\n"


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout  # stdout only: a warning on stderr (the weaker wall) is not part of what is parsed


def make_artifacts(base: Path) -> dict[str, Any]:
    from evalkit_core._synth import DEMO, PRICE_SOURCE, demo_release_path

    demo = demo_release_path()
    pit = base / "pit"
    pit.mkdir(parents=True)
    config = {
        "bundle_path": str(demo),
        "prices_path": str(demo / DEMO.prices_file),
        "price_source": PRICE_SOURCE,
        "start": "2023-01-03",
        "end": "2023-01-13",
        "probe_items": 4,
        "trajectory_path": str(pit / "trajectory.jsonl"),
        "receipt_path": str(pit / "receipt.json"),
    }
    (pit / "run.json").write_text(json.dumps(config))
    invoke("run", "--config", str(pit / "run.json"), "--json")

    ev = base / "eval"
    ev.mkdir()
    replay = ev / "answers.jsonl"
    from evalkit import load_tasks, reference_solution

    lines = []
    for task in load_tasks(BANK):
        text = WRONG_DOUBLE if task.id.startswith("code/double") else reference_solution(task)
        lines.append(json.dumps({"task_id": task.id, "completion": text}))
    replay.write_text("\n".join(lines) + "\n")
    invoke("eval", "--tasks", str(BANK), "--solver", f"replay:{replay}", "--out", str(ev / "results.jsonl"),
           "--receipt", str(ev / "receipt.json"))

    home = base / "home"
    path = write_campaign(base / "camp", name="small", k=2)
    invoke("campaign", "run", str(path), "--home", str(home))
    return {"pit": pit / "receipt.json", "eval": ev / "receipt.json", "results": ev / "results.jsonl",
            "campaign": "small", "home": home, "base": base}


def lookup(model: Any, path: str) -> Any:
    node = model
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def shown(value: Any, fmt: str) -> str:
    """How a page shows a number (the test's own statement of the page's formats)."""
    if value is None:
        return "n/a"
    return {
        "pct": lambda v: f"{v * 100:.1f}%",
        "ret": lambda v: f"{v * 100:+.3f}%",
        "usd": lambda v: f"${v:.6f}",
        "int": lambda v: str(int(v)),
        "float": lambda v: f"{v:.6g}",
    }[fmt](value)


class _Text(HTMLParser):
    """The ``data-path`` spans of a page with their text, and every other run of visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.numbers: list[tuple[str, str, str]] = []
        self.bare: list[str] = []
        self._stack: list[tuple[str, str | None, str | None]] = []
        self._span: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        a = dict(attrs)
        self._stack.append((tag, a.get("data-path"), a.get("data-fmt")))
        if a.get("data-path"):
            self._span.append([a["data-path"] or "", a.get("data-fmt") or "", ""])

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            t, path, _ = self._stack.pop()
            if path:
                p, fmt, text = self._span.pop()
                self.numbers.append((p, fmt, text))
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._span:
            self._span[-1][2] += data
        elif not any(t in {"script", "style", "title"} for t, _, _ in self._stack) and data.strip():
            self.bare.append(data)


VOID = {"br", "meta", "input", "img", "link", "hr", "wbr", "col", "source"}
TOKEN = re.compile(r"[\w./:@+\-]*\d[\w./:@+\-]*")


def page_text(html: str) -> tuple[list[tuple[str, str, str]], list[str]]:
    parser = _Text()
    parser.feed(html)
    return parser.numbers, parser.bare


def tokens(text: str) -> set[str]:
    return {t.strip(".,:;-+") for t in TOKEN.findall(text)} - {""}


def assert_page_is_the_model(html: str, model: Any) -> int:
    """Every marked number on the page is the model's number at its path, shown in its format; every other
    digit-bearing word on the page is a word of the model's JSON (a date, an id, a digest, a message) or of the
    page template's own text (a heading such as "pass@1"). Returns how many marked numbers there were."""
    numbers, bare = page_text(html)
    for path, fmt, text in numbers:
        assert text == shown(lookup(model, path), fmt), path
    allowed = tokens(json.dumps(model, ensure_ascii=False)) | tokens(json.dumps(model))
    for source in TEMPLATES:
        allowed |= tokens(source.read_text(encoding="utf-8"))
    stray = sorted({t for chunk in bare for t in tokens(chunk)} - allowed)
    assert stray == [], f"numbers on the page that are not in the model: {stray[:20]}"
    return len(numbers)


TEMPLATES = [ROOT / "packages" / "cli" / "src" / "evalkit_cli" / name for name in ("_report_html.py", "_view_server.py",
                                                                                  "_view_page.py", "_view_index.py")]
