"""``evalkit holdout plan``: the sessions of a release that come after every named model's training cutoff."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Post-cutoff holdout windows.")


@app.command("plan")
def plan(
    model: list[str] = typer.Option(..., "--model", help="A model id of the registry that declares training_cutoff (repeat for several)."),
    release: Path = typer.Option(..., "--release", help="The release directory (or name)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """List the sessions of RELEASE that start after every named model's declared training cutoff, with the
    rows filed on each by form: the holdout window those models cannot have read about in training."""
    from evalkit.pit._holdout import cutoffs_from_registry, holdout_plan
    from evalkit_core import Release

    cutoffs = cutoffs_from_registry(model)
    the_plan = holdout_plan(Release.load(release), cutoffs)
    if as_json:
        typer.echo(json.dumps(the_plan, indent=2, sort_keys=True))
        return
    w = the_plan["release_window"]
    typer.echo(f"release   {the_plan['release']}  {w['start']} .. {w['end']}")
    for m in the_plan["models"]:
        typer.echo(f"model     {m['model']}  training cutoff {m['training_cutoff']}  ({m['source']})")
    h = the_plan["holdout"]
    if h is None:
        typer.echo(f"holdout   none: every session of the release is on or before the latest cutoff {the_plan['latest_cutoff']}")
        return
    forms = ", ".join(f"{f} {n}" for f, n in h["by_form"].items())
    typer.echo(f"holdout   {h['start']} .. {h['end']}  {h['sessions']} sessions, {h['rows']} rows ({forms or 'none'})")
    for s in the_plan["sessions"]:
        by_form = ", ".join(f"{f} {n}" for f, n in s["by_form"].items())
        typer.echo(f"session   {s['session']}  rows {s['rows']:>5}  {by_form}")
