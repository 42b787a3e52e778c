"""Routing: Wilson bounds, calibration, the escalation policy replayed on stored rollouts, splits."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from evalkit_core import ConfigError
from evalkit_router import calibrate, route_order, simulate_routing, split_tasks, wilson_lower_bound


def row(model: str, task: str, sample: int, *, public: bool, hidden: bool, cost: str, adv: bool = True) -> dict[str, Any]:
    return {
        "model_id": model,
        "task_id": task,
        "sample": sample,
        "status": "graded",
        "infra_error": None,
        "cost": cost,
        "public": {"passed": 3 if public else 2, "total": 3},
        "hidden": {"passed": 4 if hidden else 1, "total": 4},
        "adversarial": {"passed": 1 if adv else 0, "total": 1},
    }


def test_wilson_lower_bound_known_values() -> None:
    assert wilson_lower_bound(0, 0) == 0.0
    assert wilson_lower_bound(10, 10) == pytest.approx(0.7225, abs=1e-4)
    assert wilson_lower_bound(5, 10) == pytest.approx(0.2366, abs=1e-4)
    # more evidence for the same rate tightens the bound
    assert wilson_lower_bound(50, 100) > wilson_lower_bound(5, 10)


def _bank() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for t in range(10):
        task = f"code/t{t}/001"
        for s in range(2):
            # cheap: right on even tasks; on odd tasks wrong but passes public on t=1 (a shallow answer)
            cheap_ok = t % 2 == 0
            rows.append(row("cheap", task, s, public=cheap_ok or t == 1, hidden=cheap_ok, cost="0.001"))
            rows.append(row("strong", task, s, public=True, hidden=t != 9, cost="0.010"))
    return rows


def test_policy_escalates_on_public_failure_and_counts_every_cost() -> None:
    rows = _bank()
    tasks = sorted({r["task_id"] for r in rows})
    cal = calibrate(rows, campaign="c", results_digest="sha256:x", tasks=tasks)
    assert cal.strongest == "strong" and cal.cheapest == "cheap"
    assert route_order(cal, tasks[0], 0.0) == ["cheap", "strong"]
    assert route_order(cal, tasks[0], 0.99) == ["strong"]  # nothing clears: the strongest is the last resort
    rep = simulate_routing(cal, rows, tasks=tasks, threshold=0.0, label="in_sample")
    assert rep.decisions == 20
    # even tasks: cheap serves (right). t1: cheap passes public, served, wrong. t3,5,7,9: escalate to strong.
    served = {(o.task_id, o.sample): o.served_by for o in rep.outcomes}
    assert served[("code/t0/001", 0)] == "cheap"
    assert served[("code/t1/001", 0)] == "cheap"
    assert served[("code/t3/001", 1)] == "strong"
    assert rep.escalations == 8
    assert rep.routed_cost == Decimal("0.001") * 20 + Decimal("0.010") * 8
    assert rep.strongest_cost == Decimal("0.010") * 20
    # routed right on: 10 even + 3,5,7 via strong (x2 samples) = 16 of 20; strong alone: 18 of 20
    assert rep.routed_pass_rate == pytest.approx(16 / 20)
    assert rep.strongest_pass_rate == pytest.approx(18 / 20)
    assert rep.cost_reduction == pytest.approx(1 - 0.1 / 0.2)


def test_infra_errors_are_not_scored_for_any_policy() -> None:
    rows = _bank()
    rows[0] = {**rows[0], "infra_error": "sandbox died"}
    tasks = sorted({r["task_id"] for r in rows})
    cal = calibrate(rows, campaign="c", results_digest="sha256:x", tasks=tasks)
    rep = simulate_routing(cal, rows, tasks=tasks, threshold=0.0)
    assert rep.decisions == 19


def test_split_is_stable_disjoint_and_stratified() -> None:
    ids = [f"code/a{i}/001" for i in range(10)] + [f"structured/b{i}/001" for i in range(6)]
    a, b = split_tasks(ids, fraction=0.5, seed=1)
    assert (a, b) == split_tasks(list(reversed(ids)), fraction=0.5, seed=1)
    assert not set(a) & set(b) and sorted(a + b) == sorted(ids)
    assert sum(t.startswith("structured/") for t in a) == 3
    assert split_tasks(ids, fraction=0.5, seed=2) != (a, b)
    with pytest.raises(ConfigError):
        split_tasks(ids, fraction=1.5)
