"""`evalkit eval --solver model:<id>`: completions come through the model layer (sim models offline)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from evalkit import load_tasks, render_prompt, run_eval
from evalkit._eval import model_request

BANK = Path(__file__).parent / "fixtures" / "tasks"


def test_sim_models_are_graded_like_any_solver(tmp_path: Path) -> None:
    strong = run_eval(BANK, "model:sim/strong", k=4, out=tmp_path / "s.jsonl", receipt=tmp_path / "s.json")
    weak = run_eval(BANK, "model:sim/weak", k=4, out=tmp_path / "w.jsonl")
    assert strong.summary["rollouts"] == weak.summary["rollouts"] == 4 * len(load_tasks(BANK))
    # the sims share one difficulty draw per (task, sample): whatever the weak one solves, the strong one solves
    s_rows = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    w_rows = [json.loads(x) for x in (tmp_path / "w.jsonl").read_text().splitlines()]
    for s, w in zip(s_rows, w_rows, strict=True):
        assert (s["task_id"], s["sample"]) == (w["task_id"], w["sample"])
        if w["hidden"]["passed"] == w["hidden"]["total"]:
            assert s["hidden"]["passed"] == s["hidden"]["total"]
    body = json.loads((tmp_path / "s.json").read_text())["body"]
    assert body["solver"]["model_id"] == "sim/strong"
    assert body["solver"]["simulated"] is True
    assert Decimal(body["solver"]["cost_usd"]) > 0
    assert body["solver"]["calls"] == 4 * len(load_tasks(BANK))


def test_model_request_is_the_rendered_prompt_and_sim_context_is_not_in_it() -> None:
    for task in load_tasks(BANK):
        request = model_request(task, 0)
        assert request.messages[0].text == render_prompt(task)
        assert request.sim_context is not None
        assert request.sim_context.sample == 0
