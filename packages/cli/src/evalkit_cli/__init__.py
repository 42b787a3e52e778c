"""The ``evalkit`` command line and its ``pit-harness`` alias."""

from evalkit_cli._app import app, main, pit_app, pit_main

__all__ = ["app", "main", "pit_app", "pit_main"]
