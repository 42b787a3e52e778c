"""``evalkit report PATH``: one self-contained HTML page for a PIT run, an eval, or a campaign."""

from __future__ import annotations

import json
from pathlib import Path

import typer

__all__ = ["report_command"]

_PATH_HELP = (
    "A PIT receipt (its trajectory is found beside it or where it records), an eval results file (.jsonl) or "
    "eval receipt, a directory holding receipt.json, or a campaign name in the store."
)


def report_command(
    path: str = typer.Argument(..., help=_PATH_HELP),
    out: Path = typer.Option(Path("report.html"), "--out", help="The HTML file to write."),
    trajectory: Path | None = typer.Option(None, "--trajectory", help="PIT: the trajectory \\[default: beside the receipt or the path it records]."),
    bundle: Path | None = typer.Option(None, "--bundle", help="PIT: the release the receipt binds, to verify it and chart returns per session \\[default: the demo release for a demo run]."),
    prices: Path | None = typer.Option(None, "--prices", help="PIT: the price file the receipt binds (needed for returns per session)."),
    tasks: Path | None = typer.Option(None, "--tasks", help="Eval: the task bank \\[default: the one the receipt records]."),
    home: Path | None = typer.Option(None, "--home", help="Store directory for campaigns and keys (default: $EVALKIT_HOME, else .evalkit/)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report's data as JSON (every number on the page) and write no HTML."),
) -> None:
    """Write one self-contained HTML report (charts and data inline; the page makes no network request)."""
    from evalkit_cli._report_data import load_model
    from evalkit_cli._report_html import plotly_js, render_page
    from evalkit_core import ConfigError

    for option, given in (("--bundle", bundle), ("--tasks", tasks)):
        if given is not None and not given.is_dir():
            raise ConfigError(f"{option}: {given} is not a directory")
    for option, given in (("--trajectory", trajectory), ("--prices", prices)):
        if given is not None and not given.is_file():
            raise ConfigError(f"{option}: {given} is not a file")
    js = "" if as_json else plotly_js()  # a missing extra is said before any work
    model = load_model(path, home=home, trajectory=trajectory, bundle=bundle, prices=prices, tasks=tasks)
    if as_json:
        typer.echo(json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False))
        return
    from evalkit_core import atomic_write_text

    atomic_write_text(out, render_page(model, js))
    typer.echo(f"report {out} ({model['kind']}: {model['title']})")
