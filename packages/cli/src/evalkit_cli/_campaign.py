"""``evalkit campaign``: run (or resume) a campaign, show its status, print its report.

The store lives in ``--home`` (default ``$EVALKIT_HOME``, else ``.evalkit/`` in the working directory); a run
writes ``results.jsonl``, ``report.json`` and ``receipt.json`` to ``--out`` (default
``<home>/campaigns/<name>/``).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from evalkit_cli._progress import progress_bar

if TYPE_CHECKING:
    from evalkit_router import CampaignReport, RunOutcome

__all__ = ["app"]

app = typer.Typer(
    no_args_is_help=True, help="Campaigns: K rollouts per task per model, resumable, with receipts."
)

_HOME_HELP = "Store directory (default: $EVALKIT_HOME, else .evalkit/ in the working directory)."


def _print_report(report: CampaignReport) -> None:
    from evalkit_router import render_table

    s = report.summary
    r = s["rollouts"]
    models = s["models"]
    assert isinstance(r, dict)
    assert isinstance(models, list)
    typer.echo(
        f"campaign {report.name} ({report.status}): {s['tasks']} tasks x {len(models)} models x K={s['k']}"
        f"  rollouts graded {r['graded']}/{r['planned']}  infra errors {r['infra_errors']}  spent ${s['cost_usd']}"
    )
    for line in render_table(s, report.intervals):
        typer.echo(line)


def _print_outcome(outcome: RunOutcome) -> None:
    typer.echo(
        f"run: {outcome.called} model call(s), {outcome.regraded} re-graded without a call, "
        f"{outcome.skipped} already graded; charged ${outcome.spent_this_run} this run, ${outcome.spent_total} in all"
    )
    if outcome.lost:
        total = sum((c.charged for c in outcome.lost), Decimal(0))
        typer.echo(
            f"paid, answer lost: {len(outcome.lost)} call(s) in flight when an earlier run died, ${total} in all "
            f"(charged at their worst case; made again): {', '.join(c.call_id for c in outcome.lost[:10])}"
            + (" ..." if len(outcome.lost) > 10 else ""),
            err=True,
        )
    if outcome.flagged:
        typer.echo(
            f"flagged: {outcome.flagged} answer(s) came with unusable or impossible usage; stored, charged at "
            "their bound (see `evalkit calls list`)",
            err=True,
        )
    if outcome.mined:
        typer.echo(f"mined: {outcome.mined} new counterexample(s) banked; affected rollouts re-graded")
    for note in outcome.notes:
        typer.echo(f"note: {note}")
    for err in outcome.model_errors[:5]:
        typer.echo(f"model error: {err}", err=True)
    if len(outcome.model_errors) > 5:
        typer.echo(f"... and {len(outcome.model_errors) - 5} more model errors", err=True)
    if outcome.halted_by is not None:
        typer.echo(f"halted: {outcome.halted_by}", err=True)
    if outcome.remaining:
        typer.echo(
            f"{outcome.remaining} rollout(s) left, at most ${outcome.remaining_worst_case} more "
            f"(worst case); run the same command again to resume",
            err=True,
        )


@app.command("run")
def run(
    file: Path = typer.Argument(..., help="The campaign file (TOML)."),
    new_name: str | None = typer.Option(
        None, "--new-name", help="Run under this name (needed when the file changed under its old name)."
    ),
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    out: Path | None = typer.Option(
        None, "--out", help="Directory for results.jsonl, report.json, receipt.json."
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Sandbox workers (default: the number of cores)."
    ),
    timeout: str | None = typer.Option(
        None,
        "--timeout",
        help="Model-call deadlines in seconds, over the campaign file's and the registry's: "
        "connect=5,attempt=120,call=600 (any subset), or one number for the attempt deadline.",
    ),
    executor: str = typer.Option(
        "local", "--executor",
        help="Where calls and grading run: local (this process and its sandbox workers) or ray (caller actors and "
        "a pool of sandbox-worker actors on a Ray cluster, sharing the store's budget and rate limits; needs the "
        "extra evalkit-harness\\[ray]).",
    ),
    address: str | None = typer.Option(
        None, "--address",
        help="With --executor ray: the Ray cluster to join (HOST:PORT of its head, or 'auto'); default: start a "
        "single-machine Ray on 127.0.0.1 with --workers CPUs.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    show_progress: bool = typer.Option(False, "--progress", help="Show progress on stderr even when it is not a terminal (plain lines)."),
) -> None:
    """Run or resume a campaign; print its report and write results, report and receipt."""
    from evalkit import check_executor
    from evalkit_core.models import parse_timeouts

    check_executor(executor, address)
    from evalkit_core.store import Store
    from evalkit_router import campaign_report, default_out_dir, run_campaign, write_campaign_outputs

    deadlines = None if timeout is None else parse_timeouts(timeout, "--timeout")

    def announce(line: str) -> None:
        typer.echo(line, err=True)

    with progress_bar("rollouts", enabled=not as_json, force=show_progress) as show:

        def progress(done: int, total: int, spent: Decimal) -> None:
            if show is not None:
                show(done, total, f"rollouts (spent ${spent:f})")

        outcome = run_campaign(
            file, new_name=new_name, home=home, workers=workers, progress=progress if show else None,
            timeouts=deadlines, announce=announce, executor=executor, address=address,
        )  # fmt: skip
    with Store.open(home) as store:
        report = campaign_report(store, outcome.name)
        target = out if out is not None else default_out_dir(store, outcome.name)
    results, report_path, receipt = write_campaign_outputs(report, target, home=home)
    if as_json:
        payload = report.to_json()
        payload["run"] = {
            "status": outcome.status,
            "called": outcome.called,
            "regraded": outcome.regraded,
            "skipped": outcome.skipped,
            "spent_this_run_usd": str(outcome.spent_this_run),
            "remaining": outcome.remaining,
            "remaining_worst_case_usd": str(outcome.remaining_worst_case),
            "halted_by": outcome.halted_by,
            "model_errors": list(outcome.model_errors),
            "notes": list(outcome.notes),
            "mined": outcome.mined,
            "spent_total_usd": str(outcome.spent_total),
            "lost": [c.to_json() for c in outcome.lost],
            "flagged": outcome.flagged,
        }
        payload["files"] = {"results": str(results), "report": str(report_path), "receipt": str(receipt)}
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
        return
    _print_outcome(outcome)
    _print_report(report)
    typer.echo(f"results {results}")
    typer.echo(f"report  {report_path}")
    typer.echo(f"receipt {receipt}")


@app.command("demo")
def demo(
    out: Path = typer.Option(..., "--out", help="Directory to write campaigns/sim-seed.toml and tasks/ into."),
    force: bool = typer.Option(False, "--force", help="Replace OUT/campaigns and OUT/tasks if they hold files."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write the seed campaign that ships with evalkit (70 tasks x 3 simulated models x K=5, offline) and the
    bank it names, laid out as in evalkit's repository: OUT/campaigns/sim-seed.toml and OUT/tasks/."""
    from evalkit.grading._seed import write_seed_campaign

    campaign, tasks, wrote = write_seed_campaign(out, force=force)
    if as_json:
        typer.echo(json.dumps({"campaign": str(campaign), "tasks": str(tasks), "tasks_written": wrote}))
        return
    typer.echo(f"wrote {campaign} and {tasks}/" if wrote else f"wrote {campaign} (the seed bank already in {tasks}/)")
    typer.echo(f"next: evalkit campaign run {campaign}")


@app.command("status")
def status(
    name: str = typer.Argument(..., help="The campaign's name."),
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Show how far a campaign got: graded, stored but ungraded, missing, spend."""
    from evalkit_core.store import Store
    from evalkit_router import campaign_status, require_store

    require_store(name, home)
    with Store.open(home) as store:
        st = campaign_status(store, name)
    if as_json:
        typer.echo(json.dumps(st.to_json(), indent=2, sort_keys=True))
        return
    cap = "none" if st.budget_usd is None else f"${st.budget_usd}"
    typer.echo(
        f"campaign {st.name} ({st.status}): graded {st.graded}/{st.planned}  stored but ungraded {st.ungraded}  "
        f"missing {st.missing}  infra errors {st.infra_errors}  charged ${st.spent} of budget {cap}"
    )
    typer.echo(f"file {st.file}")


@app.command("report")
def report(
    name: str = typer.Argument(..., help="The campaign's name."),
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Print a campaign's report from the store (no model call, no grading)."""
    from evalkit_core.store import Store
    from evalkit_router import campaign_report, require_store

    require_store(name, home)
    with Store.open(home) as store:
        rep = campaign_report(store, name)
    if as_json:
        typer.echo(json.dumps(rep.to_json(), indent=2, sort_keys=True))
        return
    _print_report(rep)


@app.command("verify")
def verify(
    receipt: Path = typer.Argument(..., help="A campaign receipt (receipt.json)."),
    campaign_file: Path | None = typer.Option(
        None, "--campaign-file", help="Default: the path in the receipt."
    ),
    tasks: Path | None = typer.Option(
        None, "--tasks", help="Task bank directory (default: the campaign file's)."
    ),
    results: Path | None = typer.Option(None, "--results", help="Default: the path in the receipt."),
    registry: list[Path] | None = typer.Option(
        None, "--registry", help="Registry files on top of the shipped one (default: those in the receipt)."
    ),
    home: Path | None = typer.Option(
        None,
        "--home",
        help="Also check every cost against the call record in this store (the 'ledger' check); its key is the trusted signer.",
    ),
    key: str | None = typer.Option(
        None, "--key", help="Require this signer: a PEM public key file or an ed25519:<hex> key id \\[default: the key in --home, else $EVALKIT_HOME]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON (same exit code)."),
) -> None:
    """Re-check a campaign receipt offline (signature, body hash, every binding, the summary); exit 1 naming each
    mismatch. With --home, also check the costs against the store's call record."""
    from evalkit_core.store import Store
    from evalkit_router import verify_campaign_receipt

    if home is not None:
        with Store.open(home) as store:
            checks = verify_campaign_receipt(
                receipt, campaign_file=campaign_file, tasks_dir=tasks, results=results, registry_paths=registry,
                store=store, key=key, home=home,
            )  # fmt: skip
    else:
        checks = verify_campaign_receipt(
            receipt, campaign_file=campaign_file, tasks_dir=tasks, results=results, registry_paths=registry, key=key
        )
    if as_json:
        payload = {
            "receipt": str(receipt),
            "ok": all(c.ok for c in checks),
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
        }
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
    else:
        for c in checks:
            typer.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}{'' if c.ok else ': ' + c.detail}")
    if not all(c.ok for c in checks):
        raise typer.Exit(1)
