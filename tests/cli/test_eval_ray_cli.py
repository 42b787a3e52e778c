"""``evalkit eval --executor ray``: the bank graded on the session's two-node Ray cluster (``ray_cluster`` in
tests/conftest.py) gives the local executor's results file byte for byte, and its ``--json`` parses."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evalkit_cli import app

BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
runner = CliRunner()


def test_eval_on_ray_gives_the_local_verdicts_and_json(ray_cluster: object, tmp_path: Path) -> None:
    del ray_cluster
    out: dict[str, dict[str, object]] = {}
    for executor in ("local", "ray"):
        result = runner.invoke(
            app,
            ["eval", "--tasks", str(BANK), "--solver", "reference", "--k", "2", "--executor", executor,
             "--out", str(tmp_path / f"{executor}.jsonl"), "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        out[executor] = json.loads(result.stdout)
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert out["ray"]["summary"] == out["local"]["summary"]
    assert out["ray"]["isolation"] == out["local"]["isolation"]
    summary = out["ray"]["summary"]
    assert summary["rollouts"] == 2 * summary["tasks"] > 0
