from __future__ import annotations

from importlib.metadata import version

import typer

__all__ = ["version_callback"]


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"evalkit {version('evalkit-cli')}")
        raise typer.Exit
