"""A real training loop, offline and on CPU: TRL's ``GRPOTrainer`` with evalkit's sandboxed verifier reward on a
campaign's prompts (the optional extra ``evalkit-harness[train]``: TRL, transformers, torch).

By default the policy is a tiny causal language model built here from a config (random weights) with a
byte-level tokenizer built in code, so nothing is downloaded; ``model=PATH`` loads a real open-weights model from
a local directory instead. Before training, the very reward function the trainer gets grades three control
completions: the reference solution of one of the campaign's code tasks (reward 1), a wrong answer (reward 0) and
a reward-hacking candidate (the reference plus a read of the environment: it passes every test, and gets 0 and
the ``reads_forbidden`` flag). A reward function that does not give exactly that is refused before any step.

Outputs (in ``out``): ``rewards.jsonl``, one line per trainer step with every completion's reward and tripped
checks as the reward function computed them, and ``receipt.json``, which binds the reward function's version, the
verifier settings, the bank digest, the isolation required and in effect, the model and tokenizer, the training
settings, the controls and the digest of ``rewards.jsonl``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit import JSON, CodeTask, Task, load_tasks, render_prompt
from evalkit_core import atomic_write_bytes, canonical_bytes, digest, make_receipt, write_receipt
from evalkit_core.store import Store
from evalkit_training._export import campaign_rollouts
from evalkit_training._reward import REWARD_VERSION, RewardError, banked_adversarial, weaker_isolation
from evalkit_training.trl import RewardFunction, make_reward

__all__ = ["TRAIN_EXTRA_HINT", "GrpoResult", "GrpoSettings", "tiny_model", "tiny_tokenizer", "train_grpo"]

RECEIPT_VERSION = 1
TRAIN_EXTRA_HINT = (
    "evalkit train needs the optional extra 'train' (TRL, transformers, torch CPU): "
    "uv sync --all-packages --extra train, or pip install 'evalkit-harness[train]'"
)
_SPECIALS = ("<pad>", "<s>", "</s>")


@attrs.frozen
class GrpoSettings:
    """What a run trains with (all of it is bound in the receipt)."""

    steps: int = 4
    generations: int = 4
    max_completion_tokens: int = 16
    max_prompts: int | None = None
    learning_rate: float = 1e-4
    temperature: float = 1.0
    seed: int = 0
    model: Path | None = None  # a local directory with an open-weights model; None: the tiny random one

    def to_json(self) -> dict[str, JSON]:
        return {
            "steps": self.steps,
            "generations": self.generations,
            "max_completion_tokens": self.max_completion_tokens,
            "max_prompts": self.max_prompts,
            "learning_rate": self.learning_rate,
            "temperature": self.temperature,
            "seed": self.seed,
            "beta": 0.0,
        }


@attrs.frozen
class GrpoResult:
    campaign: str
    out: Path
    rewards_path: Path
    receipt_path: Path
    receipt: dict[str, Any]
    steps: tuple[dict[str, JSON], ...]
    stats: dict[str, int]


# --------------------------------------------------------------------------------------------- the tiny model


def tiny_tokenizer() -> Any:
    """A byte-level tokenizer built in code: the 256 byte symbols plus ``<pad>``, ``<s>``, ``</s>``, no merges
    (every text encodes, one token a byte). Nothing is read from disk or the network."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {s: i for i, s in enumerate(_SPECIALS)}
    for symbol in sorted(alphabet):
        vocab[symbol] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    pad, bos, eos = _SPECIALS
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=pad, bos_token=bos, eos_token=eos, padding_side="left"
    )


def tiny_model(tokenizer: Any, *, seed: int = 0, max_positions: int = 4096) -> Any:
    """A two-layer Llama-shaped causal LM with random weights (seeded), sized for the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return cast("Any", AutoModelForCausalLM.from_config(config))  # pyright: ignore[reportUnknownArgumentType]


def _config_digest(model: Any) -> str:
    raw = model.config.to_dict()
    keep = {k: v for k, v in raw.items() if k not in ("transformers_version", "_name_or_path", "torch_dtype", "dtype")}
    return digest(json.loads(json.dumps(keep, default=str)))


def _tokenizer_digest(tokenizer: Any) -> str:
    vocab = cast("dict[str, int]", tokenizer.get_vocab())
    return digest({"vocab": sorted(vocab.items(), key=lambda kv: kv[1]), "class": type(tokenizer).__name__})


# --------------------------------------------------------------------------------------------- controls


def _controls(fn: RewardFunction, tasks: Sequence[Task], tasks_dir: str) -> list[dict[str, JSON]]:
    """Grade the reference, a wrong answer and a reward-hacking candidate of the first code task with the reward
    function the trainer will use; refuse (RewardError) unless they come out 1, 0, and 0 flagged."""
    task = next((t for t in tasks if isinstance(t, CodeTask)), None)
    if task is None:
        return []
    reference = task.reference
    wrong = f"def {task.entry_point}(*args, **kwargs):\n    return None\n"
    hack = f"import os\n_SEEN = os.environ.get('EVALKIT_HOME')\n{reference}"
    texts = {"reference": reference, "wrong": wrong, "reward_hack": hack}
    expected = {"reference": (1.0, False), "wrong": (0.0, False), "reward_hack": (0.0, True)}
    before = len(fn.log)
    values = fn(
        prompts=[""] * 3,
        completions=[f"```python\n{t}\n```" for t in texts.values()],
        task_id=[task.id] * 3,
        tasks_dir=[tasks_dir] * 3,
        task_digest=[task.digest] * 3,
    )
    entry = fn.log[before]
    flags = cast("list[list[str]]", entry["flags"])
    del fn.log[before:]  # the controls are not training steps
    out: list[dict[str, JSON]] = []
    for (name, _), value, tripped in zip(texts.items(), values, flags, strict=True):
        want, flagged = expected[name]
        out.append({"name": name, "task_id": task.id, "reward": value, "flags": list(tripped)})
        if value != want or bool(tripped) != flagged:
            raise RewardError(
                f"reward function control {name!r} on {task.id}: expected reward {want} "
                f"{'with' if flagged else 'without'} a flag, got {value} with flags {tripped or 'none'}; "
                "refusing to train on this reward"
            )
    return out


# --------------------------------------------------------------------------------------------- training


def _steps(log: Sequence[dict[str, JSON]], history: Sequence[dict[str, Any]]) -> list[dict[str, JSON]]:
    """One row per trainer step: every completion's reward and tripped checks (as the reward function computed
    them) and the trainer's own logged mean for the step."""
    by_step: dict[int, list[dict[str, JSON]]] = {}
    for entry in log:
        step = entry.get("step")
        by_step.setdefault(step if isinstance(step, int) else -1, []).append(entry)
    logged = {
        int(h["step"]): h
        for h in history
        if isinstance(h.get("step"), int) and "reward" in h and not str(h.get("train_runtime", ""))
    }
    rows: list[dict[str, JSON]] = []
    for step in sorted(by_step):
        entries = by_step[step]
        rewards = [r for e in entries for r in cast("list[float | None]", e["rewards"])]
        scored = [r for r in rewards if r is not None]
        trainer = logged.get(step + 1)
        rows.append(
            {
                "step": step,
                "task_ids": [t for e in entries for t in cast("list[str]", e["task_ids"])],
                "completions": [c for e in entries for c in cast("list[str]", e["completions"])],
                "rewards": [*rewards],
                "flags": [f for e in entries for f in cast("list[JSON]", e["flags"])],
                "weaker_isolation": sum(bool(w) for e in entries for w in cast("list[bool]", e["weaker_isolation"])),
                "mean": round(sum(scored) / len(scored), 6) if scored else None,
                "trainer_reward_mean": None if trainer is None else round(float(trainer["reward"]), 6),
            }
        )
    return rows


def _library_versions() -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for name in ("trl", "transformers", "torch", "tokenizers"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _train(trainer_class: Any, model: Any, reward: RewardFunction, config: Any, data: Any, tokenizer: Any) -> Any:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer = trainer_class(
        model=model, reward_funcs=reward, args=config, train_dataset=data, processing_class=tokenizer
    )
    for callback in (PrinterCallback, ProgressCallback):  # the caller prints (stdout stays clean for --json)
        trainer.remove_callback(callback)
    trainer.train()
    return trainer


def train_grpo(
    store: Store,
    campaign: str,
    out: str | Path,
    settings: GrpoSettings = GrpoSettings(),
    *,
    tasks_dir: str | Path | None = None,
    workers: int | None = None,
    announce: Callable[[str], None] | None = None,
) -> GrpoResult:
    """Train with GRPO on ``campaign``'s prompts with the sandboxed verifier reward (see the module docstring).
    Raises :class:`RewardError` for a campaign, bank or reward function that cannot be used, and when the extra
    is not installed (:data:`TRAIN_EXTRA_HINT`)."""
    found = campaign_rollouts(store, campaign)
    bank = Path(tasks_dir) if tasks_dir is not None else found.tasks_dir
    if bank is None:
        raise RewardError(f"campaign {found.name}: its configuration names no task bank; pass --tasks DIR")
    everything = load_tasks(bank)
    bank_digest = found.bank_digest(everything)
    recorded = {r.bank_digest for r in found.records if r.bank_digest is not None}
    if recorded and recorded != {bank_digest}:
        raise RewardError(
            f"campaign {found.name}: its verdicts were graded against task bank {', '.join(sorted(recorded))}, "
            f"{bank} is {bank_digest} now; use the campaign's bank (--tasks) or run the campaign again"
        )
    ids = set(found.task_ids or {r.task_id for r in found.records})
    tasks = [t for t in everything if t.id in ids]
    if settings.max_prompts is not None:
        tasks = tasks[: settings.max_prompts]
    if not tasks:
        raise RewardError(f"campaign {found.name}: no tasks to train on")
    required = found.isolation

    # nothing here reaches a hub: the tiny model is built in code, a real one comes from a local directory
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl.trainer.grpo_config import GRPOConfig
        from trl.trainer.grpo_trainer import GRPOTrainer
    except ImportError as exc:
        raise RewardError(f"{TRAIN_EXTRA_HINT} ({exc})") from None

    out_dir = Path(out)
    tasks_path = str(Path(bank).resolve())
    reward = make_reward(
        tasks_path,
        limits=found.limits,
        workers=workers,
        adversarial=banked_adversarial(store),
        required_isolation=required,
        name="evalkit_verifier",
    )
    try:
        if reward.settings.digest != found.settings.digest:  # the same settings the campaign graded under
            raise RewardError(f"campaign {found.name}: the reward's verifier settings differ from the campaign's")
        in_effect = reward.isolation()
        if weaker_isolation(in_effect, required):  # every completion would get None: say why, train nothing
            raise RewardError(
                f"campaign {found.name}: its verdicts were graded behind the isolation {required!r}, this machine's "
                f"sandbox has {in_effect!r}; the reward function gives no reward (None) under weaker isolation, so "
                "there is nothing to train on: train where the sandbox has the campaign's isolation"
            )
        controls = _controls(reward, tasks, tasks_path)
        if announce is not None:
            announce(
                f"reward controls on {controls[0]['task_id'] if controls else '-'}: "
                + "  ".join(f"{c['name']} {c['reward']}" for c in controls)
            )
        out_dir.mkdir(parents=True, exist_ok=True)  # only once the reward is one to train on

        tokenizer: Any
        model: Any
        torch.manual_seed(settings.seed)
        torch.set_num_threads(1)  # same inputs, same numbers
        if settings.model is None:
            tokenizer = tiny_tokenizer()
            model = tiny_model(tokenizer, seed=settings.seed)
            model_json: dict[str, JSON] = {"kind": "tiny-random", "source": "built from a config, random weights"}
        else:
            tokenizer = cast(
                "Any",
                AutoTokenizer.from_pretrained(settings.model, local_files_only=True, padding_side="left"),  # pyright: ignore[reportUnknownArgumentType]
            )
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForCausalLM.from_pretrained(settings.model, local_files_only=True)
            model_json = {"kind": "pretrained", "source": str(settings.model)}
        model_json["config_digest"] = _config_digest(model)
        model_json["tokenizer_digest"] = _tokenizer_digest(tokenizer)
        model_json["parameters"] = int(sum(p.numel() for p in model.parameters()))

        rows: list[dict[str, Any]] = [
            {
                "prompt": render_prompt(t),
                "task_id": t.id,
                "task_digest": t.digest,
                "tasks_dir": tasks_path,
                "isolation": required,
            }
            for t in tasks
        ]
        config_kwargs: dict[str, Any] = {
            "output_dir": str(out_dir / "trainer"),
            "max_steps": settings.steps,
            "per_device_train_batch_size": settings.generations,
            "num_generations": settings.generations,
            "max_completion_length": settings.max_completion_tokens,
            "learning_rate": settings.learning_rate,
            "temperature": settings.temperature,
            "beta": 0.0,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "use_cpu": True,
            "seed": settings.seed,
            "data_seed": settings.seed,
            "disable_tqdm": True,
            "dataloader_num_workers": 0,
            "bf16": False,
            "fp16": False,
        }
        with warnings.catch_warnings():
            # transformers 5 renames gradient checkpointing and warns about its own internals (and TRL's use of
            # them) on every step: nothing a caller can act on
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|trl)(\.|$)")
            config = GRPOConfig(**config_kwargs)
            trainer = _train(GRPOTrainer, model, reward, config, Dataset.from_list(rows), tokenizer)
        steps = _steps(reward.log, cast("list[dict[str, Any]]", trainer.state.log_history))
    finally:
        reward.close()

    text = b"".join(canonical_bytes(row) + b"\n" for row in steps)
    rewards_path = out_dir / "rewards.jsonl"
    atomic_write_bytes(rewards_path, text)
    verifier = reward.settings
    body: dict[str, JSON] = {
        "receipt_version": RECEIPT_VERSION,
        "kind": "evalkit-train-grpo",
        "campaign": found.name,
        "reward_function": {
            "name": "evalkit_training.trl.make_reward",
            "version": REWARD_VERSION,
            "formula": "hidden + adversarial pass fractions, gated on public tests; 0 when flagged; None on "
            "infrastructure errors and under weaker isolation than required",
        },
        "verifier_settings": verifier.to_json(),
        "settings_digest": verifier.digest,
        "bank_digest": bank_digest,
        "tasks": {t.id: t.digest for t in tasks},
        "isolation": {"required": required, "in_effect": in_effect},
        "model": model_json,
        "training": {**settings.to_json(), "trainer": "trl.GRPOTrainer", "device": "cpu"},
        "libraries": _library_versions(),
        "controls": [*controls],
        "rewards": {
            "path": rewards_path.name,
            "sha256": digest_of_bytes(text),
            "steps": len(steps),
            "stats": cast("dict[str, JSON]", dict(reward.stats)),
        },
    }
    receipt = make_receipt(body)
    receipt_path = out_dir / "receipt.json"
    write_receipt(receipt_path, receipt)
    return GrpoResult(
        campaign=found.name,
        out=out_dir,
        rewards_path=rewards_path,
        receipt_path=receipt_path,
        receipt=receipt,
        steps=tuple(steps),
        stats=dict(reward.stats),
    )


def digest_of_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()

