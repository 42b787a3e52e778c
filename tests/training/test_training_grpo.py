"""``evalkit train grpo`` end to end, offline on the CPU: TRL's GRPOTrainer on a small campaign's prompts with a
tiny random causal LM built in code, rewarded by the sandboxed verifier. Needs the optional extra ``train``
(installed by ``.ci/run``: ``uv sync --all-extras``)."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import machine  # pyright: ignore[reportImplicitRelativeImport]

pytest.importorskip("trl", reason=machine.importorskip_reason("train"))

from evalkit import Sandbox, SandboxLimits, VerifierSettings, bank_digest, load_tasks
from evalkit_cli import app
from evalkit_core import check_receipt
from evalkit_training import REWARD_VERSION, RolloutRecord, score_rollouts

pytestmark = pytest.mark.integration  # trains a model (TRL's GRPOTrainer on the CPU)

ROOT = Path(__file__).resolve().parents[2]
IDS = ("code/median/001", "code/second-largest/001")
runner = CliRunner()


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("grpo")
    home = base / "home"
    campaign = base / "small.toml"
    campaign.write_text(
        'name = "small"\nmodels = ["sim/strong", "sim/weak"]\nk = 1\ntemperature = 0.0\nmax_tokens = 256\n'
        f'budget_usd = "1.00"\nmine = false\ncpu_seconds = 1.0\n\n[tasks]\ndir = "{ROOT / "tasks"}"\n'
        f"ids = {json.dumps(list(IDS))}\n"
    )
    env = {"EVALKIT_HOME": str(home)}
    ran = runner.invoke(app, ["campaign", "run", str(campaign)], env=env)
    assert ran.exit_code == 0, ran.output
    cpu, wall = _cpu(), time.monotonic()
    out = base / "train"
    args = ["train", "grpo", "--campaign", "small", "--out", str(out), "--steps", "3", "--generations", "4",
            "--max-completion-tokens", "12", "--json"]  # fmt: skip
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    return {
        "summary": json.loads(result.stdout),  # --json: one object, nothing else on stdout
        "out": out,
        "home": home,
        "cpu": _cpu() - cpu,
        "wall": time.monotonic() - wall,
    }


def test_trains_the_steps_asked_for_within_the_budget(trained):
    summary = trained["summary"]
    assert summary["steps"] == 3
    rows = [json.loads(line) for line in (trained["out"] / "rewards.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:
        assert len(row["rewards"]) == len(row["completions"]) == len(row["task_ids"]) == 4  # one GRPO group
        assert len(set(row["task_ids"])) == 1 and row["task_ids"][0] in IDS
        assert all(r is not None and 0 <= r <= 1 for r in row["rewards"])  # canonical JSON writes 0.0 as 0
        # the trainer logged the very rewards the verifier gave (TRL's mean of the step)
        assert row["trainer_reward_mean"] == pytest.approx(row["mean"], abs=1e-6)
    # CPU seconds of this process and its sandbox children (a loaded machine stretches the wall clock, not this)
    assert trained["cpu"] < 120, trained


def test_rewards_are_the_sandboxed_verifiers(trained):
    """Every logged completion, graded again through the export's path in a sandbox of the campaign's limits,
    gets exactly the reward the trainer was given."""
    rows = [json.loads(line) for line in (trained["out"] / "rewards.jsonl").read_text().splitlines()]
    records = [
        RolloutRecord(f"{r['step']}-{i}", tid, "tiny", i, text)
        for r in rows
        for i, (tid, text) in enumerate(zip(r["task_ids"], r["completions"], strict=True))
    ]
    tasks = [t for t in load_tasks(ROOT / "tasks") if t.id in IDS]
    with Sandbox(SandboxLimits(cpu_seconds=1.0), workers=1) as box:
        scored = score_rollouts(records, tasks, sandbox=box)
    assert [s.reward.value for s in scored] == [v for r in rows for v in r["rewards"]]


def test_receipt_binds_reward_version_bank_and_verifier_settings(trained):
    receipt = json.loads((trained["out"] / "receipt.json").read_text())
    assert check_receipt(receipt)
    body = receipt["body"]
    assert receipt["body_sha256"] == trained["summary"]["body_sha256"]
    assert body["reward_function"]["version"] == REWARD_VERSION
    settings = VerifierSettings(SandboxLimits(cpu_seconds=1.0))  # the campaign's cpu_seconds
    assert (body["settings_digest"], body["verifier_settings"]) == (settings.digest, settings.to_json())
    tasks = [t for t in load_tasks(ROOT / "tasks") if t.id in IDS]
    assert body["bank_digest"] == bank_digest(tasks)
    assert body["tasks"] == {t.id: t.digest for t in tasks}
    assert body["model"]["kind"] == "tiny-random"
    assert body["isolation"]["required"] == body["isolation"]["in_effect"]
    import hashlib

    data = (trained["out"] / "rewards.jsonl").read_bytes()
    assert body["rewards"]["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert body["rewards"]["stats"]["scored"] == 3 * 4 + 3  # the steps' completions and the three controls


def test_a_reward_hacking_candidate_gets_zero_and_a_flag(trained):
    """The controls went through the very reward function the trainer used: the reference passes (1), a wrong
    answer fails (0), the reference plus an environment read passes every test yet gets 0 and the flag."""
    body = json.loads((trained["out"] / "receipt.json").read_text())["body"]
    controls = {c["name"]: (c["reward"], c["flags"]) for c in body["controls"]}
    assert controls == {"reference": (1.0, []), "wrong": (0.0, []), "reward_hack": (0.0, ["reads_forbidden"])}
    assert body["rewards"]["stats"]["flagged"] >= 1


def test_an_unknown_campaign_is_one_line_and_exit_2(trained, capsys, monkeypatch):
    import sys

    from evalkit_cli._errors import run_app

    monkeypatch.setenv("EVALKIT_HOME", str(trained["home"]))
    monkeypatch.setattr(sys, "argv", ["evalkit", "train", "grpo", "--campaign", "nope", "--out", str(trained["out"] / "x")])
    with pytest.raises(SystemExit) as exc:
        run_app(app, "evalkit")
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "campaign 'nope' not found" in err
    assert len(err.strip().splitlines()) == 1
    assert not (trained["out"] / "x").exists()


def test_a_sandbox_weaker_than_the_campaigns_isolation_trains_nothing(trained, monkeypatch):
    """The campaign's verdicts were graded behind the wall this machine gives; a reward function whose sandbox
    lacks a layer would answer None for every completion, so the command refuses up front and says why."""
    import evalkit_training._grpo as grpo
    from evalkit import Sandbox
    from evalkit_core.store import Store
    from evalkit_training import GrpoSettings, RewardError, train_grpo

    machine.need("seccomp")  # the campaign must have been graded with it, for a sandbox without it to be weaker
    required = json.loads((trained["out"] / "receipt.json").read_text())["body"]["isolation"]["required"]
    if "seccomp" in required:
        pytest.skip(f"the campaign was graded without seccomp already ({required})")
    made = grpo.make_reward
    with Sandbox(SandboxLimits(cpu_seconds=1.0), workers=1, without=("seccomp",)) as weak:
        have = weak.isolation.label
        monkeypatch.setattr(grpo, "make_reward", lambda *a, **k: made(*a, **{**k, "sandbox": weak}))
        monkeypatch.setenv("EVALKIT_HOME", str(trained["home"]))
        out = trained["out"].parent / "weak"
        with Store.open() as store, pytest.raises(RewardError) as exc:
            train_grpo(store, "small", out, GrpoSettings(steps=1, generations=2, max_completion_tokens=4))
    assert f"graded behind the isolation {required!r}, this machine's sandbox has {have!r}" in str(exc.value)
    assert not out.exists()  # nothing written


def test_a_local_open_weights_directory_is_the_policy(trained, tmp_path):
    """--model DIR (as docs/rewards.md shows for a real model): a directory written by save_pretrained is loaded
    offline and trained on; the receipt names it and digests its config."""
    from evalkit_training import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    model_dir = tmp_path / "model"
    tiny_model(tokenizer, seed=7).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "train"
    args = ["train", "grpo", "--campaign", "small", "--model", str(model_dir), "--out", str(out), "--steps", "1",
            "--generations", "2", "--max-completion-tokens", "4", "--json"]  # fmt: skip
    result = runner.invoke(app, args, env={"EVALKIT_HOME": str(trained["home"])})
    assert result.exit_code == 0, result.output
    body = json.loads((out / "receipt.json").read_text())["body"]
    assert (body["model"]["kind"], body["model"]["source"]) == ("pretrained", str(model_dir))
    tiny = json.loads((trained["out"] / "receipt.json").read_text())["body"]["model"]
    assert body["model"]["parameters"] == tiny["parameters"]
    assert [json.loads(line)["step"] for line in (out / "rewards.jsonl").read_text().splitlines()] == [0]
