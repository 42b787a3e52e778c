"""Artifacts the report and view tests look at: a short PIT run over the demo release, an eval (a replay with
right and wrong answers over the fixture bank) and a small campaign of the simulated models, all made through the
CLI into one directory and one store."""

from __future__ import annotations

import json
import sys
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
    return result.output


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
