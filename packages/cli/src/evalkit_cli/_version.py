from __future__ import annotations

import typer

__all__ = ["version_callback"]


def version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import version  # only here: importing it costs every command about 10 ms

        typer.echo(f"evalkit {version('evalkit-cli')}")
        raise typer.Exit
