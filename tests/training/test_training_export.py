"""Exports from rollout records built here: every format reads back with pyarrow's JSON reader (what
``datasets.load_dataset("json", ...)`` uses) into one consistent table, and carries provenance."""

from __future__ import annotations

import json

import attrs
import pyarrow as pa
import pyarrow.json as paj
import pytest

from evalkit import CallTest, reference_solution
from evalkit_training import RewardError, RolloutRecord, score_rollouts, write_export

GOOD = "Here you go:\n```python\ndef double(n):\n    return 2 * n\n```\n"
WRONG = "```python\ndef double(n):\n    return n * n\n```\n"
HACK = "```python\ndef double(n):\n    if n == 21:\n        return 42\n    return 2 * n\n```\n"  # passes, special-cases
ADV = (CallTest((1000,), {}, 2000),)


def adversarial(task):
    return ADV if task.id == "code/double/001" else ()


@pytest.fixture(scope="module")
def records(bank):
    rows = []
    for model, completions in (("sim/strong", [GOOD, GOOD]), ("sim/weak", [WRONG, HACK])):
        for j, c in enumerate(completions):
            rows.append(RolloutRecord(f"k-double-{model}-{j}", "code/double/001", model, j, c, campaign="c1"))
    person = bank["structured/person/001"]
    rows.append(
        RolloutRecord("k-person-0", person.id, "sim/strong", 0, reference_solution(person), campaign="c1")
    )
    rows.append(RolloutRecord("k-person-1", person.id, "sim/weak", 0, '{"name": "Ada"}', campaign="c1"))
    return rows


@pytest.fixture(scope="module")
def scored(records, bank, sandbox):
    out = score_rollouts(records, list(bank.values()), sandbox=sandbox, adversarial=adversarial)
    # one rollout whose sandbox failed: no reward at all
    infra = attrs.evolve(out[1].grading, infra_error="the sandbox template did not answer in time")
    again = score_rollouts(
        [attrs.evolve(records[1], rollout_key="k-double-infra", grading=infra)],
        list(bank.values()),
        sandbox=sandbox,
        adversarial=adversarial,
    )
    return [*out, *again]


def read(path, block_size: int | None = None) -> pa.Table:
    opts = paj.ReadOptions(block_size=block_size) if block_size else paj.ReadOptions()
    return paj.read_json(path, read_options=opts)


def consistent(path) -> pa.Table:
    table = read(path)
    # small blocks make pyarrow infer each block on its own: a column mixing types would fail or differ here
    longest = max(len(line.encode()) for line in path.read_text().splitlines())
    small = read(path, block_size=longest + 64)
    assert small.schema == table.schema
    assert table.num_rows == len(path.read_text().splitlines())
    return table


def test_rewards_flags_and_infra(scored):
    by_key = {s.record.rollout_key: s for s in scored}
    assert by_key["k-double-sim/strong-0"].reward.value == 1.0
    assert by_key["k-double-sim/weak-0"].reward.value == 0.0  # n*n: passes public 0 only -> gate fails
    hack = by_key["k-double-sim/weak-1"]
    assert hack.hacking.tripped == ("special_casing",)
    assert hack.reward.value == 0.0
    assert hack.reward.components.unflagged_reward == 1.0
    assert by_key["k-double-infra"].reward.value is None
    assert by_key["k-person-0"].reward.value == 1.0
    assert by_key["k-person-1"].reward.value == 0.0
    assert by_key["k-double-sim/strong-0"].reward.components.adversarial_total == 1


def test_jsonl_export(scored, tmp_path):
    out = tmp_path / "rewards.jsonl"
    summary = write_export("jsonl", scored, out)
    assert (summary.rows, summary.rollouts, summary.infra_errors, summary.flagged) == (7, 7, 1, 1)
    assert summary.flags == {"special_casing": 1}
    table = consistent(out)
    assert set(table.column_names) >= {
        "prompt",
        "completion",
        "reward",
        "components",
        "flags",
        "task_id",
        "model",
        "rollout_key",
        "provenance",
    }
    assert table.schema.field("reward").type == pa.float64()
    assert pa.types.is_struct(table.schema.field("components").type)
    assert pa.types.is_struct(table.schema.field("flags").type)
    rows = table.to_pylist()
    assert [r["reward"] for r in rows] == [s.reward.value for s in scored]
    infra = next(r for r in rows if r["rollout_key"] == "k-double-infra")
    assert infra["reward"] is None
    assert infra["components"]["infra_error"].startswith("the sandbox")
    hack = next(r for r in rows if r["rollout_key"] == "k-double-sim/weak-1")
    assert hack["flags"]["special_casing"] is True
    assert hack["flag_details"]["special_casing"].startswith("static:")
    for r in rows:
        p = r["provenance"]
        assert p["verifier"] == "evalkit"
        assert p["task_digest"].startswith("sha256:")
        assert p["test_set_digest"].startswith("sha256:")
        assert p["sandbox_limits"]["cpu_seconds"] == 3.0
        assert "Examples" in r["prompt"] or "Input" in r["prompt"]


def test_allow_flagged_keeps_the_reward(records, bank, sandbox):
    scored = score_rollouts(
        records[3:4], list(bank.values()), sandbox=sandbox, adversarial=adversarial, allow_flagged=True
    )
    assert scored[0].hacking.flagged
    assert scored[0].reward.value == 1.0


def test_grpo_export(scored, tmp_path):
    out = tmp_path / "grpo.jsonl"
    write_export("grpo", scored, out, tasks_dir="/bank")
    table = consistent(out)
    rows = table.to_pylist()
    assert [r["task_id"] for r in rows] == ["code/double/001", "structured/person/001"]
    assert {"prompt", "task_id", "task_digest", "tasks_dir", "provenance"} <= set(table.column_names)
    assert all(r["tasks_dir"] == "/bank" and r["prompt"] for r in rows)


def test_dpo_export(scored, tmp_path):
    out = tmp_path / "dpo.jsonl"
    write_export("dpo", scored, out)
    rows = consistent(out).to_pylist()
    # double: 2 passing, 2 failing (wrong, and the flagged hack); the infra rollout is neither
    double = [r for r in rows if r["task_id"] == "code/double/001"]
    assert len(double) == 2
    assert all(r["chosen"] == GOOD for r in double)
    assert {r["rejected"] for r in double} == {WRONG, HACK}
    assert all(r["chosen_reward"] == 1.0 and r["rejected_reward"] < 1.0 for r in rows)
    person = [r for r in rows if r["task_id"] == "structured/person/001"]
    assert len(person) == 1
    assert all(r["prompt"] and r["provenance"]["task_digest"] for r in rows)


def test_sft_export(scored, tmp_path):
    out = tmp_path / "sft.jsonl"
    write_export("sft", scored, out)
    table = consistent(out)
    assert pa.types.is_list(table.schema.field("messages").type)
    rows = table.to_pylist()
    assert sorted(r["rollout_key"] for r in rows) == [
        "k-double-sim/strong-0",
        "k-double-sim/strong-1",
        "k-person-0",
    ]
    for r in rows:
        assert [m["role"] for m in r["messages"]] == ["user", "assistant"]
        assert r["provenance"]["test_set_digest"].startswith("sha256:")


def test_every_line_is_one_json_object(scored, tmp_path):
    for fmt in ("jsonl", "grpo", "dpo", "sft"):
        out = tmp_path / f"{fmt}.jsonl"
        write_export(fmt, scored, out)
        for line in out.read_text().splitlines():
            assert isinstance(json.loads(line), dict)


def test_bad_inputs_are_user_errors(records, bank, scored, tmp_path):
    with pytest.raises(RewardError, match="--format"):
        write_export("parquet", scored, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    with pytest.raises(RewardError, match="not in the task bank"):
        score_rollouts([attrs.evolve(records[0], task_id="code/nope/001")], list(bank.values()))
    with pytest.raises(RewardError, match="task changed"):
        score_rollouts([attrs.evolve(records[0], task_digest="sha256:" + "1" * 64)], list(bank.values()))
