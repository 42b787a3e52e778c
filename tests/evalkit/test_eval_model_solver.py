"""`evalkit eval --solver model:<id>`: completions come through the model layer (sim models offline)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from evalkit import load_tasks, render_prompt, run_eval
from evalkit.grading._eval import model_request

BANK = Path(__file__).parent / "fixtures" / "tasks"


def test_sim_models_are_graded_like_any_solver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))  # an empty response cache: every answer is asked
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


def test_temperature_0_answers_come_from_the_cache_cost_nothing_and_are_recorded_as_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalkit_core.models import budget_status, list_calls
    from evalkit_core.store import Store

    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    n = len(load_tasks(BANK))
    first = run_eval(BANK, "model:sim/strong", k=2, out=tmp_path / "a.jsonl", receipt=tmp_path / "a.json")
    assert (first.solver["calls"], first.solver["cached"]) == (2 * n, 0)
    with Store.open(tmp_path / "home") as store:
        spent, calls = budget_status(store).spent, len(list_calls(store))
    again = run_eval(BANK, "model:sim/strong", k=2, out=tmp_path / "b.jsonl", receipt=tmp_path / "b.json")
    # sample 0 (temperature 0) is answered from the cache; sample 1 (temperature 0.8) is asked again
    assert (again.solver["calls"], again.solver["cached"]) == (n, n)
    assert Decimal(str(again.solver["cost_usd"])) * 2 == Decimal(str(first.solver["cost_usd"]))
    with Store.open(tmp_path / "home") as store:
        assert len(list_calls(store)) == calls + n  # no request made for a cached answer
        assert budget_status(store).spent - spent == Decimal(str(again.solver["cost_usd"]))
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()  # the same answers
    assert json.loads((tmp_path / "b.json").read_text())["body"]["solver"]["cached"] == n
    # --no-cache asks every time; a damaged entry is asked again, not trusted
    bypass = run_eval(BANK, "model:sim/strong", k=1, cache=False)
    assert (bypass.solver["calls"], bypass.solver["cached"]) == (n, 0)
    entries = sorted((tmp_path / "home" / "response-cache").rglob("*.json"))
    assert len(entries) == n
    entries[0].write_text("{damaged")
    healed = run_eval(BANK, "model:sim/strong", k=1)
    assert (healed.solver["calls"], healed.solver["cached"]) == (1, n - 1)
