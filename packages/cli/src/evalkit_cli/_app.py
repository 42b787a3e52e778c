"""The root typer app. One module per command group; heavy imports happen inside the commands."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import typer

from evalkit_cli import _bundle, _holdout, _keys, _models, _pit, _tasks
from evalkit_cli._adversary import app as adversary_app
from evalkit_cli._campaign import app as campaign_app
from evalkit_cli._certify import certify as certify_command
from evalkit_cli._errors import run_app
from evalkit_cli._eval import eval_command
from evalkit_cli._gate import gate as gate_command
from evalkit_cli._report import report_command
from evalkit_cli._rewards import app as rewards_app
from evalkit_cli._route import app as route_app
from evalkit_cli._train import app as train_app
from evalkit_cli._version import version_callback
from evalkit_cli._view import view_command

__all__ = ["app", "main", "pit_app", "pit_main"]

app = typer.Typer(
    name="evalkit",
    help="evalkit: evaluation you can re-check. The point-in-time harness and the verifier stack.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
)
pit_app = typer.Typer(
    name="pit-harness",
    help="pit-harness: the point-in-time commands of evalkit (run, verify, export).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


@app.callback()
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


@pit_app.callback()
def _pit_root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True, help="Show the version and exit."),
) -> None:
    """pit-harness: point-in-time runs, verification and export."""


app.add_typer(_bundle.app, name="bundle", help="Build, inspect and check releases (bundles).")
app.add_typer(_keys.app, name="keys", help="The Ed25519 key that signs receipts: generate or show it.")
app.add_typer(_tasks.app, name="tasks", help="Validate task banks and import task sets.")
app.command("eval")(eval_command)
app.command("gate")(gate_command)
app.command("certify")(certify_command)
app.add_typer(_holdout.app, name="holdout", help="Post-cutoff holdouts: the windows of a release after models' training cutoffs.")
app.add_typer(_models.models_app, name="models", help="The model registry: ids, providers, prices.")
app.add_typer(_models.budget_app, name="budget", help="The global spending cap (USD): show or set it.")
app.add_typer(_models.calls_app, name="calls", help="The record of model calls in the store.")
app.add_typer(adversary_app, name="adversary", help="Mine counterexamples against candidates and bank them.")
app.add_typer(campaign_app, name="campaign", help="Campaigns: K rollouts x tasks x models, resumable.")
app.add_typer(route_app, name="route", help="Cost-aware routing: calibrate, simulate on stored rollouts, route live.")
app.add_typer(rewards_app, name="rewards", help="Export verifier rewards for fine-tuning (jsonl, grpo, dpo, sft).")
app.command("report")(report_command)
app.command("view")(view_command)
app.add_typer(train_app, name="train", help="Train on a campaign's prompts with the verifier reward (extra 'train').")
for _target in (app, pit_app):
    _target.command("run")(_pit.run)
    _target.command("verify")(_pit.verify)
    _target.command("export")(_pit.export)


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


@contextlib.contextmanager
def _only_the_named(target: typer.Typer, argv: list[str]) -> Iterator[None]:
    """Let ``target`` hold only the command or group ``argv`` names while it runs: typer builds the options of
    every command it holds before it parses anything (some 40 ms for this app, on every run), and a run needs one.
    The root's own options and callback stay; a name that is not a command leaves the app whole, so the error
    and its suggestions are typer's own."""
    name = _named(argv)
    commands = [c for c in target.registered_commands if c.name == name]
    groups = [g for g in target.registered_groups if g.name == name]
    if name is None or not (commands or groups):
        yield
        return
    saved = target.registered_commands, target.registered_groups
    target.registered_commands, target.registered_groups = commands, groups
    try:
        yield
    finally:
        target.registered_commands, target.registered_groups = saved


def main() -> None:
    with _only_the_named(app, sys.argv[1:]):
        run_app(app, "evalkit")


def pit_main() -> None:
    with _only_the_named(pit_app, sys.argv[1:]):
        run_app(pit_app, "pit-harness")
