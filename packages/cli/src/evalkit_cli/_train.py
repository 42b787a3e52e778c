"""``evalkit train``: training loops on a campaign's prompts with the sandboxed verifier reward (extra ``train``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["app"]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Train on a campaign's prompts with the sandboxed verifier reward (optional extra 'train').",
)


@app.command("grpo")
def grpo(
    campaign: str = typer.Option(..., "--campaign", help="Campaign name or id in the store ($EVALKIT_HOME)."),
    out: Path = typer.Option(Path("out/train"), "--out", help="Directory for rewards.jsonl and receipt.json."),
    steps: int = typer.Option(4, "--steps", min=1, help="Trainer steps."),
    generations: int = typer.Option(4, "--generations", min=2, help="Completions per prompt (GRPO's group)."),
    max_completion_tokens: int = typer.Option(16, "--max-completion-tokens", min=1, help="Tokens per completion."),
    max_prompts: int | None = typer.Option(None, "--max-prompts", min=1, help="Train on the first N tasks only."),
    learning_rate: float = typer.Option(1e-4, "--learning-rate", min=1e-12, max=1.0, help="The optimizer's learning rate."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed for the model's weights, sampling and data order."),
    model: Path | None = typer.Option(
        None,
        "--model",
        help="A local directory with an open-weights causal LM (default: a tiny random model built in code).",
    ),
    tasks: Path | None = typer.Option(
        None, "--tasks", help="Task bank (default: the one the campaign's configuration names)."
    ),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Sandbox workers for the reward."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run TRL's GRPOTrainer on CAMPAIGN's prompts with evalkit's sandboxed verifier reward, offline on the CPU;
    write the rewards of every step and a receipt binding the reward function's version, the bank digest and the
    verifier settings."""
    from evalkit_core.store import Store
    from evalkit_router import require_store
    from evalkit_training import GrpoSettings, RewardError, train_grpo

    if model is not None and not model.is_dir():
        raise RewardError(f"--model: {model} is not a directory (expected a local model: config.json, weights, tokenizer)")
    settings = GrpoSettings(
        steps=steps,
        generations=generations,
        max_completion_tokens=max_completion_tokens,
        max_prompts=max_prompts,
        learning_rate=learning_rate,
        seed=seed,
        model=model,
    )
    quiet = as_json

    def announce(line: str) -> None:
        if not quiet:
            typer.echo(line)

    require_store(campaign)  # a campaign looked up where there is no store makes none there
    with Store.open() as store:
        result = train_grpo(store, campaign, out, settings, tasks_dir=tasks, workers=workers, announce=announce)
    body = result.receipt["body"]
    means = [s["mean"] for s in result.steps]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "campaign": result.campaign,
                    "steps": len(result.steps),
                    "step_means": means,
                    "stats": result.stats,
                    "rewards": str(result.rewards_path),
                    "receipt": str(result.receipt_path),
                    "body_sha256": result.receipt["body_sha256"],
                },
                ensure_ascii=False,
            )
        )
        return
    for s in result.steps:
        typer.echo(f"step {s['step']}  reward mean {s['mean']}  rewards {s['rewards']}")
    stats = result.stats
    typer.echo(
        f"campaign {result.campaign}  steps {len(result.steps)}  scored {stats['scored']}  "
        f"no reward {stats['no_reward']}  flagged {stats['flagged']}  weaker isolation {stats['weaker_isolation']}"
    )
    typer.echo(f"bank {body['bank_digest']}  verifier settings {body['settings_digest']}")
    typer.echo(f"rewards {result.rewards_path}")
    typer.echo(f"receipt {result.receipt_path}  body {result.receipt['body_sha256']}")
