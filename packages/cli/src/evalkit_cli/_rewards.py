"""``evalkit rewards``: export a campaign's verifier rewards for fine-tuning (jsonl, grpo, dpo, sft)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["app"]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Verifier rewards from campaigns, with reward-hacking checks, in fine-tuning formats.",
)


@app.command("export")
def export(
    campaign: str = typer.Argument(..., help="Campaign name or id in the store ($EVALKIT_HOME)."),
    fmt: str = typer.Option(..., "--format", help="jsonl | grpo | dpo | sft"),
    out: Path = typer.Option(..., "--out", help="Write the JSON Lines export here."),
    allow_flagged: bool = typer.Option(
        False,
        "--allow-flagged",
        help="Keep the reward of rollouts flagged for reward hacking (default: zero).",
    ),
    tasks: Path | None = typer.Option(
        None, "--tasks", help="Task bank (default: the one the campaign's configuration names)."
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Sandbox workers for rollouts graded at export."
    ),
    regrade: bool = typer.Option(
        False,
        "--regrade",
        help="Grade every rollout again in the sandbox instead of reading the verdicts stored with them.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    show_progress: bool = typer.Option(
        False, "--progress", help="Show progress on stderr even when it is not a terminal (plain lines)."
    ),
) -> None:
    """Score every rollout of CAMPAIGN (hidden + adversarial tests, gated on public; hacking checks) and write
    one export format.

    The verdicts stored with the rollouts are used as they are, after a digest check (refused, exit 2, when they
    were graded under other verifier settings, another task bank or another adversarial set); --regrade grades
    them all again. A rollout graded under weaker sandbox isolation than the campaign's gets no reward."""
    from evalkit import load_tasks
    from evalkit_core.store import Store
    from evalkit_training import (
        FORMATS,
        RewardError,
        banked_adversarial,
        campaign_rollouts,
        score_rollouts,
        write_export,
    )

    if fmt not in FORMATS:
        raise RewardError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    from evalkit_router import require_store

    require_store(campaign)
    with Store.open() as store:
        found = campaign_rollouts(store, campaign)
        bank = tasks or found.tasks_dir
        if bank is None:
            raise RewardError(
                f"campaign {found.name}: its configuration names no task bank; pass --tasks DIR"
            )
        tasks_now = load_tasks(bank)
        from evalkit_cli._progress import progress_bar

        with progress_bar("rollouts scored", enabled=not as_json, force=show_progress) as show:
            scored = score_rollouts(
                found.records,
                tasks_now,
                settings=found.settings,
                adversarial=banked_adversarial(store),
                allow_flagged=allow_flagged,
                workers=workers,
                regrade=regrade,
                bank_digest=found.bank_digest(tasks_now),
                required_isolation=found.isolation,
                progress=show,
            )
    summary = write_export(fmt, scored, out, tasks_dir=str(Path(bank).resolve()))
    if as_json:
        typer.echo(json.dumps({"campaign": found.name, **summary.to_json()}, ensure_ascii=False))
        return
    typer.echo(
        f"campaign {found.name}  rollouts {summary.rollouts}  rewarded {summary.rewarded}  "
        f"infra errors {summary.infra_errors}  passing {summary.passing}  flagged {summary.flagged}  "
        f"graded now {summary.graded_now}  weaker isolation {summary.weaker_isolation}"
    )
    if summary.flags:
        typer.echo("flags " + "  ".join(f"{k} {v}" for k, v in sorted(summary.flags.items())))
    typer.echo(f"{summary.format}: {summary.rows} rows -> {summary.path}")
