"""``evalkit_training.trl.reward`` called exactly as TRL's GRPOTrainer calls a reward function: the dataset rows
(read back from a grpo export with pyarrow, as ``datasets`` would) repeated per generation, every non-prompt
column as a keyword list, plus ``completion_ids`` and ``trainer_state``. No GPU, no weights."""

from __future__ import annotations

from pathlib import Path

import pyarrow.json as paj
import pytest

import evalkit_training._reward as reward_module
import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit import Verdict
from evalkit_training import RewardError, RolloutRecord, score_rollouts, write_export
from evalkit_training.trl import completion_text, make_reward, reward

GOOD = "```python\ndef double(n):\n    return 2 * n\n```"
WRONG = "```python\ndef double(n):\n    return n + 1\n```"
HACK = "```python\ndef double(n):\n    if n == 21:\n        return 42\n    return 2 * n\n```"
BANK = Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks"
PERSON = '{"name": "Ada Lovelace", "born": "1815-12-10", "city": "London", "topics": ["Analytical Engine"], "height_m": 1.65}'


def trl_call(fn, rows, completions, *, conversational=False):
    """What GRPOTrainer._calculate_rewards does: inputs are dataset rows, one per completion."""
    assert len(rows) == len(completions)
    if conversational:
        prompts = [[{"role": "user", "content": r["prompt"]}] for r in rows]
        completions = [[{"role": "assistant", "content": c}] for c in completions]
    else:
        prompts = [r["prompt"] for r in rows]
    keys = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    reward_kwargs = {k: [r[k] for r in rows] for k in keys}
    reward_kwargs["trainer_state"] = object()
    completion_ids = [[1, 2, 3] for _ in completions]
    return fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **reward_kwargs)


@pytest.fixture(scope="module")
def rows(bank, sandbox, tmp_path_factory):
    records = [
        RolloutRecord("a", "code/double/001", "m", 0, GOOD),
        RolloutRecord("b", "structured/person/001", "m", 0, PERSON),
    ]
    scored = score_rollouts(records, list(bank.values()), sandbox=sandbox)
    out = tmp_path_factory.mktemp("grpo") / "grpo.jsonl"
    write_export("grpo", scored, out, tasks_dir=str(BANK))
    table = paj.read_json(out)
    return {r["task_id"]: r for r in table.to_pylist()}


def test_standard_completions(rows, monkeypatch, tmp_path):
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path))  # no store there: no adversarial tests
    double, person = rows["code/double/001"], rows["structured/person/001"]
    batch = [double, double, double, person, person]
    got = trl_call(reward, batch, [GOOD, WRONG, HACK, PERSON, '{"name": "Ada"}'])
    assert got == [1.0, 0.0, 0.0, 1.0, 0.0]  # the special-casing hack passes every test but is flagged


def test_conversational_completions(rows, monkeypatch, tmp_path):
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path))
    double = rows["code/double/001"]
    assert trl_call(reward, [double, double], [GOOD, WRONG], conversational=True) == [1.0, 0.0]


def test_make_reward_options(rows, bank):
    double = rows["code/double/001"]
    lenient = make_reward(BANK, allow_flagged=True, adversarial=lambda task: (), workers=1)
    assert lenient.__name__ == "evalkit_reward"
    row = {k: v for k, v in double.items() if k != "tasks_dir"}  # the bank comes from make_reward
    assert trl_call(lenient, [row], [HACK]) == [1.0]
    assert lenient(prompts=["p"], completions=[GOOD], task_id="code/double/001") == [1.0]  # one id for all
    lenient.close()  # pyright: ignore[reportAttributeAccessIssue]


def test_infra_error_is_none(rows, monkeypatch, tmp_path):
    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path))

    def broken(items, sandbox, settings=None, *, extract=True, progress=None):
        return [
            Verdict(t.id, t.digest, "sha256:x", (), (), infra_error="the sandbox template did not start")
            for t, _ in items
        ]

    monkeypatch.setattr(reward_module, "grade_many", broken)
    double = rows["code/double/001"]
    assert trl_call(make_reward(adversarial=lambda task: ()), [double], [GOOD]) == [None]


def test_errors_are_loud(rows):
    double = dict(rows["code/double/001"])
    fn = make_reward(adversarial=lambda task: ())
    with pytest.raises(RewardError, match="task_id"):
        fn(prompts=["p"], completions=[GOOD])
    with pytest.raises(RewardError, match="task_digest"):
        trl_call(fn, [{**double, "task_digest": "sha256:" + "0" * 64}], [GOOD])
    with pytest.raises(RewardError, match="2 values for 1"):
        fn(prompts=["p"], completions=[GOOD], task_id=["code/double/001", "code/double/001"])


def test_completion_text():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"}]) == "a"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "b"}]}]) == "b"
    with pytest.raises(RewardError):
        completion_text(3)


def test_grpo_rows_carry_the_campaigns_isolation(rows, sandbox):
    assert {r["isolation"] for r in rows.values()} == {sandbox.isolation.label}


def test_weaker_isolation_than_required_is_refused_and_counted():
    """A sandbox without seccomp asked for the full wall's trust: None for every completion, counted; the same
    sandbox asked for no more than it has scores as usual."""
    from evalkit import Sandbox

    machine.need("bwrap", "root")  # the sandbox is weaker by seccomp alone only where the rest of the wall holds
    with Sandbox(workers=1, without=("seccomp",)) as weak:
        assert weak.isolation.label == "weaker: seccomp"
        strict = make_reward(BANK, adversarial=lambda task: (), sandbox=weak, required_isolation="full")
        assert strict(prompts=["p", "p"], completions=[GOOD, WRONG], task_id="code/double/001") == [None, None]
        assert strict.stats == {"scored": 0, "weaker_isolation": 2, "no_reward": 0, "flagged": 0}
        fitting = make_reward(BANK, adversarial=lambda task: (), sandbox=weak, required_isolation="weaker: seccomp")
        assert fitting(prompts=["p", "p"], completions=[GOOD, WRONG], task_id="code/double/001") == [1.0, 0.0]
        assert fitting.stats["weaker_isolation"] == 0
        # the requirement can come per sample from the grpo export's isolation column
        column = make_reward(BANK, adversarial=lambda task: (), sandbox=weak)
        got = column(
            prompts=["p", "p"],
            completions=[GOOD, GOOD],
            task_id="code/double/001",
            isolation=["full", "weaker: seccomp, user"],
        )
        assert got == [None, 1.0]
        assert column.stats == {"scored": 1, "weaker_isolation": 1, "no_reward": 0, "flagged": 0}


def test_stronger_isolation_than_required_scores(sandbox):
    machine.need("bwrap", "seccomp", "root")
    if sandbox.isolation.label != "full":
        pytest.skip(f"this machine's sandbox is not the full wall ({sandbox.isolation.label})")
    fn = make_reward(BANK, adversarial=lambda task: (), sandbox=sandbox, required_isolation="weaker: seccomp")
    assert fn(prompts=["p"], completions=[HACK], task_id="code/double/001") == [0.0]
    assert fn.stats == {"scored": 1, "weaker_isolation": 0, "no_reward": 0, "flagged": 1}


def test_a_malformed_isolation_requirement_is_refused():
    with pytest.raises(RewardError, match="required_isolation: expected 'full' or 'weaker: '"):
        make_reward(BANK, required_isolation="strong")
