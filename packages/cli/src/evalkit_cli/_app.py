"""The root typer app. One module per command group; heavy imports happen inside the commands.

The apps are built on first use (``app``, ``pit_app``), and a run of the console scripts builds one holding only
the command or group its arguments name: typer builds the options of every command an app holds before it parses
anything (some 40 ms for this app), and each command's module costs its import.
"""

from __future__ import annotations

import importlib
import sys
from functools import cache
from typing import TYPE_CHECKING, Any

import typer

from evalkit_cli._errors import run_app
from evalkit_cli._version import version_callback

__all__ = ["app", "main", "pit_app", "pit_main"]

if TYPE_CHECKING:  # built on first use (module __getattr__ below)
    app: typer.Typer
    pit_app: typer.Typer

# (name, module, attribute, help for a group or None for a command), in the order `--help` lists them; the
# point-in-time commands are evalkit's last three and all of pit-harness
_PIT: tuple[tuple[str, str, str, str | None], ...] = (
    ("run", "evalkit_cli._pit", "run", None),
    ("verify", "evalkit_cli._pit", "verify", None),
    ("export", "evalkit_cli._pit", "export", None),
)
_EVALKIT: tuple[tuple[str, str, str, str | None], ...] = (
    ("bundle", "evalkit_cli._bundle", "app", "Build, inspect and check releases (bundles)."),
    ("keys", "evalkit_cli._keys", "app", "The Ed25519 key that signs receipts: generate or show it."),
    ("tasks", "evalkit_cli._tasks", "app", "Validate task banks and import task sets."),
    ("eval", "evalkit_cli._eval", "eval_command", None),
    ("gate", "evalkit_cli._gate", "gate", None),
    ("certify", "evalkit_cli._certify", "certify", None),
    ("holdout", "evalkit_cli._holdout", "app", "Post-cutoff holdouts: the windows of a release after models' training cutoffs."),
    ("models", "evalkit_cli._models", "models_app", "The model registry: ids, providers, prices."),
    ("budget", "evalkit_cli._models", "budget_app", "The global spending cap (USD): show or set it."),
    ("calls", "evalkit_cli._models", "calls_app", "The record of model calls in the store."),
    ("adversary", "evalkit_cli._adversary", "app", "Mine counterexamples against candidates and bank them."),
    ("campaign", "evalkit_cli._campaign", "app", "Campaigns: K rollouts x tasks x models, resumable."),
    ("route", "evalkit_cli._route", "app", "Cost-aware routing: calibrate, simulate on stored rollouts, route live."),
    ("rewards", "evalkit_cli._rewards", "app", "Export verifier rewards for fine-tuning (jsonl, grpo, dpo, sft)."),
    ("report", "evalkit_cli._report", "report_command", None),
    ("view", "evalkit_cli._view", "view_command", None),
    ("train", "evalkit_cli._train", "app", "Train on a campaign's prompts with the verifier reward (extra 'train')."),
    ("trajectory", "evalkit_cli._trajectory", "app", "PIT trajectories: write one's canonical JSONL (plain or .zst) to stdout."),
    *_PIT,
)


def _root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Show the version and exit."),
    store: str | None = typer.Option(
        None,
        "--store",
        metavar="URL",
        help="The store: a postgresql://... URL (needs evalkit-core\\[postgres]) or a SQLite file; "
        "default $EVALKIT_STORE, else evalkit.sqlite3 in $EVALKIT_HOME.",
    ),
) -> None:
    """evalkit: evaluation you can re-check."""
    del version  # eager: its callback printed it and exited
    if store:
        import os

        os.environ["EVALKIT_STORE"] = store  # read by Store.open in every command (and its subprocesses)


def _pit_root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Show the version and exit."),
) -> None:
    """pit-harness: point-in-time runs, verification and export."""


def _build(pit: bool, only: str | None = None) -> typer.Typer:
    """The evalkit (or pit-harness) app, holding every command and group, or only the one named ``only``."""
    if pit:
        target = typer.Typer(
            name="pit-harness",
            help="pit-harness: the point-in-time commands of evalkit (run, verify, export).",
            no_args_is_help=True,
            add_completion=True,
            pretty_exceptions_enable=False,
        )
        target.callback()(_pit_root)
    else:
        target = typer.Typer(
            name="evalkit",
            help="evalkit: evaluation you can re-check. The point-in-time harness and the verifier stack.",
            no_args_is_help=True,
            add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
            pretty_exceptions_enable=False,
        )
        target.callback()(_root)
    for name, module, attribute, group_help in _PIT if pit else _EVALKIT:
        if only is not None and name != only:
            continue
        found = getattr(importlib.import_module(module), attribute)
        if group_help is None:
            target.command(name)(found)
        else:
            target.add_typer(found, name=name, help=group_help)
    return target


@cache
def _whole(pit: bool) -> typer.Typer:
    return _build(pit)


def __getattr__(name: str) -> Any:
    if name in ("app", "pit_app"):
        return _whole(name == "pit_app")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _named(argv: list[str]) -> str | None:
    """The top-level command or group ``argv`` names, when it names one after nothing but ``--store``; None for
    anything else (``--help``, ``--version``, completion, no command)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--store":
            i += 2
        elif a.startswith("--store="):
            i += 1
        elif a.startswith("-"):
            return None
        else:
            return a
    return None


def _for_run(pit: bool, argv: list[str]) -> typer.Typer:
    """The app a run of the console script needs: one holding only the command or group ``argv`` names (and the
    root's own options and callback), or the whole app for anything else (``--help``, ``--version``,
    completion, a name that is not a command: typer's own error and suggestions need them all)."""
    name = _named(argv)
    if name is not None and any(entry[0] == name for entry in (_PIT if pit else _EVALKIT)):
        return _build(pit, only=name)
    return _whole(pit)


def main() -> None:
    run_app(_for_run(False, sys.argv[1:]), "evalkit")


def pit_main() -> None:
    run_app(_for_run(True, sys.argv[1:]), "pit-harness")
