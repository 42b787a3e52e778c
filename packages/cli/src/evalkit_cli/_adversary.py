"""``evalkit adversary``: mine counterexamples against candidate solutions and bank them in the store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from evalkit_cli._progress import progress_bar

if TYPE_CHECKING:
    from evalkit import MiningResult

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.command("mine")
def mine(
    tasks: Path = typer.Option(..., "--tasks", help="Task bank directory."),
    solver: str = typer.Option(
        ..., "--solver", help="Candidates: reference, replay:FILE.jsonl (task_id, completion) or model:<id>."
    ),
    proposer: str = typer.Option("fuzz", "--proposer", help="fuzz (offline, seeded) or model:<id>."),
    budget: int = typer.Option(200, "--budget", min=1, help="Proposals per task and candidate."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the fuzz proposer (the sample index for a model)."),
    task: list[str] = typer.Option([], "--task", help="Only these task ids (repeatable)."),
    keep: int = typer.Option(
        3, "--keep", min=1, help="Counterexamples kept per task and candidate (smallest per category)."
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Sandbox workers (default: one per CPU and one more, at most 8)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Propose inputs, validate them in the sandbox against the reference, bank the counterexamples."""
    from evalkit import mine_bank

    def run(progress: Callable[[int, int], None] | None = None) -> tuple[list[MiningResult], str | None]:
        return mine_bank(
            tasks,
            solver,
            proposer=proposer,
            budget=budget,
            seed=seed,
            task_ids=task,
            max_counterexamples=keep,
            workers=workers,
            progress=progress,
        )

    with progress_bar("mining", enabled=not as_json) as show:
        results, stopped = run(show)
    invalid: dict[str, int] = {}
    for r in results:
        for reason, n in r.invalid_counts().items():
            invalid[reason] = invalid.get(reason, 0) + n
    totals: dict[str, object] = {
        "candidates": len(results),
        "proposals": sum(r.proposals for r in results),
        "counterexamples": sum(len(r.counterexamples) for r in results),
        "banked": sum(r.banked for r in results),
        "tasks_broken": len({r.task_id for r in results if r.counterexamples}),
        "invalid": dict(sorted(invalid.items())),
    }
    if as_json:
        payload = {"results": [r.to_json() for r in results], "totals": totals, "stopped": stopped}
        typer.echo(json.dumps(payload, ensure_ascii=False))
    else:
        for r in results:
            if r.note:
                typer.echo(f"{r.task_id}  {r.candidate}  skipped ({r.note})")
                continue
            reasons = " ".join(f"{k}={v}" for k, v in r.invalid_counts().items())
            typer.echo(
                f"{r.task_id}  {r.candidate}  proposals {r.proposals}  counterexamples {len(r.counterexamples)}"
                f" (new {r.banked})  invalid: {reasons or '-'}"
            )
            for c in r.counterexamples:
                shown = json.dumps(c.input_json["args"], ensure_ascii=False)
                shown = shown if len(shown) <= 80 else shown[:79] + "…"
                typer.echo(
                    f"    [{c.category}] {shown} -> expected {json.dumps(c.expected, ensure_ascii=False)[:60]}"
                )
        reasons = " ".join(f"{k}={v}" for k, v in sorted(invalid.items()))
        typer.echo(
            f"candidates {totals['candidates']}  proposals {totals['proposals']}  counterexamples "
            f"{totals['counterexamples']}  banked (new) {totals['banked']}  tasks broken {totals['tasks_broken']}"
        )
        typer.echo(f"invalid: {reasons or '-'}")
    if stopped is not None:
        typer.echo(f"stopped: {stopped}", err=True)
        raise typer.Exit(1)
