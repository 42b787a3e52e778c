"""The root typer app. One module per command group; heavy imports happen inside the commands."""

from __future__ import annotations

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


def main() -> None:
    run_app(app, "evalkit")


def pit_main() -> None:
    run_app(pit_app, "pit-harness")
