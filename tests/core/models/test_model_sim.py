"""Simulated models: generic mutators, deterministic choice at the declared rate, costs through the same path."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal

import pytest

from evalkit_core.models import (
    ModelClient,
    ModelError,
    Request,
    SimContext,
    budget_status,
    json_mutants,
    list_calls,
    load_registry,
    text_mutants,
)
from evalkit_core.models._sim import drop_edge_case_branch, flip_comparison, off_by_one, simulate

REF = """def clamp(x, lo, hi):
    if lo > hi:
        raise ValueError("empty range")
    if x < lo:
        return lo
    return min(x, hi)
"""


def test_off_by_one():
    assert off_by_one("return xs[1] + 10") == [
        "return xs[2] + 10",
        "return xs[0] + 10",
        "return xs[1] + 11",
        "return xs[1] + 9",
    ]
    assert off_by_one("x0 = 1.5") == []  # identifiers and floats are left alone
    assert off_by_one("n = 0") == ["n = 1"]


def test_flip_comparison():
    assert flip_comparison("a < b and c >= d") == ["a <= b and c >= d", "a < b and c > d"]
    assert flip_comparison("x == 1") == ["x != 1"]
    assert flip_comparison("def f() -> int: return a << 2") == []


def test_drop_edge_case_branch():
    out = drop_edge_case_branch(REF)
    assert "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    return min(x, hi)\n" in out
    assert (
        'def clamp(x, lo, hi):\n    if lo > hi:\n        raise ValueError("empty range")\n    return min(x, hi)\n'
        in out
    )
    assert len(out) == 2
    assert drop_edge_case_branch("if a:\n    x = 1\nelse:\n    return 2\n") == []  # has an else: left alone
    assert drop_edge_case_branch("def f(n):\n    if n == 0: return 1\n    return n\n") == [
        "def f(n):\n    return n\n"
    ]


def test_text_mutants_are_distinct_and_named():
    muts = text_mutants(REF + "\nLIMIT = 10\n")
    assert len({m for _, m in muts}) == len(muts)
    assert REF + "\nLIMIT = 10\n" not in {m for _, m in muts}
    assert {name for name, _ in muts} == {"off_by_one", "flip_comparison", "drop_edge_case_branch"}


def test_json_mutants():
    muts = dict.fromkeys(json.dumps(v, sort_keys=True) for _, v in json_mutants({"a": 1, "b": [True, "x"]}))
    assert json.dumps({"b": [True, "x"]}, sort_keys=True) in muts  # dropped key
    assert json.dumps({"a": 2, "b": [True, "x"]}, sort_keys=True) in muts  # perturbed value
    assert json.dumps({"a": 1, "b": [True]}, sort_keys=True) in muts  # dropped item
    assert json.dumps({"a": 1, "b": [False, "x"]}, sort_keys=True) in muts


def _req(sample: int, **kw) -> Request:
    return Request.of(
        "Write clamp.", max_tokens=256, sim_context=SimContext(reference=REF, sample=sample, **kw)
    )


def test_deterministic_and_at_the_declared_rate():
    reg = load_registry(env={})
    n = 400
    solved: dict[str, set[int]] = {}
    for model in ("sim/weak", "sim/mid", "sim/strong"):
        entry = reg.get(model)
        replies = [simulate(entry, _req(i)) for i in range(n)]
        assert [r.text for r in replies[:20]] == [
            simulate(entry, _req(i)).text for i in range(20)
        ]  # deterministic
        solved[model] = {i for i, r in enumerate(replies) if r.text == REF}
        assert entry.sim is not None
        rate = len(solved[model]) / n
        assert abs(rate - entry.sim.success_rate) < 0.08, (model, rate)
        wrong = [r for r in replies if r.text != REF]
        assert all(r.raw["variant"].startswith("mutant:") for r in wrong)
        assert len({r.text for r in wrong}) > 3  # several different plausible mistakes
    # one shared draw: a stronger sim solves everything a weaker one solves
    assert solved["sim/weak"] <= solved["sim/mid"] <= solved["sim/strong"]


def test_given_mutants_and_json_reference():
    entry = load_registry(env={}).get("sim/weak")
    texts = {simulate(entry, _req(i, mutants=("WRONG ANSWER",))).text for i in range(200)}
    assert "WRONG ANSWER" in texts
    ref = {"name": "Ada", "tags": ["x", "y"]}
    req = [Request.of("json", sim_context=SimContext(reference_json=ref, sample=i)) for i in range(100)]
    outs = [json.loads(simulate(entry, r).text) for r in req]
    assert ref in outs
    assert any(o != ref for o in outs)


def test_tokens_from_text_and_max_tokens():
    entry = load_registry(env={}).get("sim/strong")
    reply = simulate(entry, Request.of("x", max_tokens=5, sim_context=SimContext(reference="a" * 100)))
    assert reply.stop_reason == "max_tokens"
    assert reply.usage.output_tokens == 5
    assert len(reply.text) == 20


def test_sim_without_context_is_a_clear_error(tmp_path):
    async def go():
        async with ModelClient(home=tmp_path, env={}) as c:
            await c.complete("sim/mid", Request.of("free-form question"))

    with pytest.raises(ModelError, match=r"SIMULATED .*sim_context"):
        asyncio.run(go())


def test_sim_cost_flows_through_store_and_budget(tmp_path):
    async def go():
        async with ModelClient(home=tmp_path, env={}) as c:
            return await c.complete("sim/mid", _req(7))

    c = asyncio.run(go())
    assert c.simulated
    assert c.reported_model == "sim/mid (simulated)"
    entry = load_registry(env={}).get("sim/mid")
    expected = (
        Decimal(c.usage.input_tokens) * entry.prices.input
        + Decimal(c.usage.output_tokens) * entry.prices.output
    ) / Decimal(10**6)
    assert c.cost == expected
    assert c.usage.output_tokens == -(-len(c.text) // 4)
    from evalkit_core.store import Store

    with Store.open(tmp_path) as s:
        [rec] = list_calls(s)
        assert rec.simulated
        assert rec.cost == c.cost
        assert budget_status(s).spent == c.cost


def test_request_and_completion_json_round_trip(tmp_path):
    from evalkit_core.models import (
        Message,
        ToolCall,
        ToolSpec,
        complete,
        completion_from_json,
        completion_to_json,
        request_from_json,
        request_to_json,
    )

    req = Request(
        messages=(
            Message("user", "hi"),
            Message("assistant", "", (ToolCall.of("t1", "f", {"a": 1}),)),
            Message("tool", "ok", tool_call_id="t1"),
        ),
        system="s",
        max_tokens=99,
        temperature=0.0,
        stop=("END",),
        tools=(ToolSpec("f", "does f"),),
        tool_choice="auto",
        sim_context=SimContext(reference=REF, mutants=("m",), sample=3),
    )
    assert request_from_json(request_to_json(req)) == req
    c = asyncio.run(complete("sim/strong", req, home=tmp_path, env={}))
    assert completion_from_json(json.loads(json.dumps(completion_to_json(c)))) == c
