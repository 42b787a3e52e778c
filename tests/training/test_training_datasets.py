"""Every export loads with `datasets.load_dataset("json", ...)`, offline, and the grpo rows feed the TRL-style
reward call exactly as a datasets-backed GRPOTrainer would pass them."""

from __future__ import annotations

import pytest

from evalkit_training import RolloutRecord, score_rollouts, write_export

datasets = pytest.importorskip("datasets")

GOOD = "```python\ndef double(n):\n    return 2 * n\n```"
WRONG = "```python\ndef double(n):\n    return n + 1\n```"


@pytest.fixture(scope="module")
def scored(bank, sandbox):
    records = [
        RolloutRecord("a", "code/double/001", "sim/strong", 0, GOOD, campaign="c"),
        RolloutRecord("b", "code/double/001", "sim/weak", 0, WRONG, campaign="c"),
        RolloutRecord("c", "code/double/001", "sim/weak", 1, GOOD, campaign="c"),
    ]
    return score_rollouts(records, list(bank.values()), sandbox=sandbox)


@pytest.mark.parametrize(
    ("fmt", "columns"),
    [
        ("jsonl", {"prompt", "completion", "reward", "task_id", "model", "rollout_key"}),
        ("grpo", {"prompt", "task_id"}),
        ("dpo", {"prompt", "chosen", "rejected"}),
        ("sft", {"messages"}),
    ],
)
def test_export_loads_with_datasets(fmt, columns, scored, tmp_path):
    out = tmp_path / f"{fmt}.jsonl"
    write_export(fmt, scored, out, tasks_dir="tests/evalkit/fixtures/tasks")
    ds = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows > 0
    assert columns <= set(ds.column_names)
    if fmt == "jsonl":
        assert sorted(ds["reward"]) == [0.0, 1.0, 1.0]
    if fmt == "dpo":
        assert ds[0]["chosen"] != ds[0]["rejected"]
    if fmt == "sft":
        assert {m["role"] for m in ds[0]["messages"]} == {"user", "assistant"}


def test_trl_style_call_with_datasets_rows(scored, tmp_path, monkeypatch):
    from evalkit_training.trl import reward

    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    out = tmp_path / "grpo.jsonl"
    write_export("grpo", scored, out, tasks_dir="tests/evalkit/fixtures/tasks")
    ds = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    rows = [ds[0], ds[0]]
    keys = [k for k in ds.column_names if k != "prompt"]
    got = reward(
        prompts=[r["prompt"] for r in rows],
        completions=[GOOD, WRONG],
        completion_ids=[[1], [2]],
        trainer_state=None,
        **{k: [r[k] for r in rows] for k in keys},
    )
    assert got == [1.0, 0.0]
