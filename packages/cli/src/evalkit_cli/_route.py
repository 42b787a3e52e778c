"""``evalkit route``: calibrate from a campaign, replay the routing policy, or route live."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from evalkit_core import ConfigError

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Cost-aware routing: cheapest good-enough model, escalate on failure.")

SWEEP = (0.0, 0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def _pct(value: object) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "n/a"


def _ci(ci: list[float] | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:.1%}, {ci[1]:.1%}]"


def _load(campaign: str) -> tuple[list[Any], str]:
    from evalkit_core.store import Store
    from evalkit_router import campaign_report, digest_of_rows, require_store

    require_store(campaign)
    with Store.open() as store:
        report = campaign_report(store, campaign)
    rows = [dict(r) for r in report.rows]
    return rows, digest_of_rows(report.rows)


def _save_calibration(data: dict[str, Any]) -> Path:
    from evalkit_core import atomic_write_text
    from evalkit_core.store import evalkit_home

    name = f"{data['campaign']}-{data['results_digest'][7:19]}-{data['tasks_digest'][7:19]}.json"
    path = evalkit_home() / "calibrations" / name
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


@app.command("simulate")
def simulate(
    calibrate_on: str = typer.Option(..., "--calibrate-on", help="Campaign whose rollouts calibrate quality and cost."),
    evaluate_on: str = typer.Option(
        "split:0.5:0",
        "--evaluate-on",
        help="Another campaign's name, or split:FRACTION:SEED to hold out part of the calibration campaign's tasks.",
    ),
    threshold: float = typer.Option(0.5, "--threshold", min=0.0, max=1.0, help="Minimum calibrated quality (Wilson lower bound)."),
    confidence_z: float = typer.Option(1.96, "--z", min=0.01, max=10.0, help="z of the Wilson lower bound (1.96 = 95%)."),
    do_sweep: bool = typer.Option(False, "--sweep", help="Print the cost/quality frontier over thresholds."),
    in_sample: bool = typer.Option(False, "--in-sample", help="Allow evaluating on the calibration tasks (labelled)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Replay the routing policy on stored rollouts (no model calls) and compare with fixed policies."""
    from evalkit_router import calibrate, simulate_routing, split_tasks, sweep

    rows, results_digest = _load(calibrate_on)
    all_tasks = sorted({r["task_id"] for r in rows})
    if evaluate_on.startswith("split:"):
        try:
            _, frac, seed = evaluate_on.split(":")
            cal_tasks, eval_tasks = split_tasks(all_tasks, fraction=float(frac), seed=int(seed))
        except ValueError:
            raise ConfigError(f"--evaluate-on: expected split:FRACTION:SEED, got {evaluate_on!r}") from None
        eval_rows = rows
    else:
        cal_tasks = all_tasks
        eval_rows, _ = _load(evaluate_on)
        eval_tasks = sorted({r["task_id"] for r in eval_rows})
    overlap = sorted(set(cal_tasks) & set(eval_tasks))
    label = "out_of_sample"
    if overlap:
        if not in_sample:
            raise ConfigError(
                f"--evaluate-on shares {len(overlap)} task(s) with --calibrate-on (e.g. {overlap[0]}); "
                "hold tasks out (split:0.5:0) or pass --in-sample to allow it, labelled as such"
            )
        label = "in_sample"
    cal = calibrate(rows, campaign=calibrate_on, results_digest=results_digest, tasks=cal_tasks, z=confidence_z)
    saved = _save_calibration(cal.to_json())
    reports = (
        sweep(cal, eval_rows, tasks=eval_tasks, thresholds=SWEEP, label=label)
        if do_sweep
        else [simulate_routing(cal, eval_rows, tasks=eval_tasks, threshold=threshold, label=label)]
    )
    if as_json:
        out = {"calibration": cal.to_json(), "calibration_file": str(saved), "reports": [r.to_json() for r in reports]}
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    typer.echo(f"calibration  {calibrate_on}: {len(cal_tasks)} tasks, results {results_digest}  ({saved})")
    for m, q in sorted(cal.overall.items()):
        j = q.to_json()
        typer.echo(f"  {m:<22} quality {j['quality']:.3f} (pass {_pct(j['pass_rate'])} {_ci(q.ci95())}, n {j['n']})  "
                   f"mean cost ${float(q.mean_cost):.6f}")
    typer.echo(f"evaluation   {len(eval_tasks)} tasks ({label.replace('_', '-')})")
    first = reports[0]
    typer.echo(
        f"baselines    always {first.strongest}: pass {first.strongest_pass_rate:.1%} "
        f"{_ci(first.ci95(first.strongest_pass_rate))} cost ${float(first.strongest_cost):.6f}   "
        f"always {first.cheapest}: pass {first.cheapest_pass_rate:.1%} {_ci(first.ci95(first.cheapest_pass_rate))} "
        f"cost ${float(first.cheapest_cost):.6f}"
    )
    typer.echo(f"{'threshold':>9}  {'pass':>6}  {'95% CI':>15}  {'Δ pts':>6}  {'cost':>10}  {'saved':>6}  {'kept':>6}  escalations  served by")
    for r in reports:
        served = ", ".join(f"{m} {n}" for m, n in sorted(r.served_by.items()))
        shown = _ci(r.ci95(r.routed_pass_rate))
        typer.echo(
            f"{r.threshold:>9.2f}  {r.routed_pass_rate:>6.1%}  {shown:>15}  {100 * (r.routed_pass_rate - r.strongest_pass_rate):>+6.1f}  "
            f"${float(r.routed_cost):>9.6f}  {r.cost_reduction:>6.1%}  {r.quality_kept:>6.1%}  {r.escalations:>11}  {served}"
        )
    typer.echo("pass: hidden tests (calibration: over its scored samples; routing: over the routed decisions); "
               "[low, high]: Wilson score interval, 95% (z = 1.96)")


@app.command("run")
def run(
    tasks: Path = typer.Option(..., "--tasks", help="Task bank directory."),
    threshold: float = typer.Option(0.5, "--threshold", min=0.0, max=1.0, help="Minimum calibrated quality."),
    calibrate_on: str = typer.Option(..., "--calibrate-on", help="Campaign to calibrate from."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    show_progress: bool = typer.Option(False, "--progress", help="Show progress on stderr even when it is not a terminal (plain lines)."),
) -> None:
    """Route live through the model layer: cheapest eligible model first, escalate when public tests fail."""
    from evalkit import load_tasks
    from evalkit_router import calibrate, route_live

    rows, results_digest = _load(calibrate_on)
    bank = load_tasks(tasks)
    cal_tasks = sorted({r["task_id"] for r in rows})
    cal = calibrate(rows, campaign=calibrate_on, results_digest=results_digest, tasks=cal_tasks)
    from evalkit_cli._progress import progress_bar

    with progress_bar("tasks routed", enabled=not as_json, force=show_progress) as show:
        decisions = route_live(cal, bank, threshold=threshold, progress=show)
    if as_json:
        typer.echo(json.dumps([d.to_json() for d in decisions], indent=2, sort_keys=True))
        return
    n = len(decisions)
    hidden = sum(d.hidden_passed for d in decisions)
    cost = sum(float(d.cost) for d in decisions)
    esc = sum(len(d.tried) - 1 for d in decisions)
    served: dict[str, int] = {}
    for d in decisions:
        served[d.served_by] = served.get(d.served_by, 0) + 1
    from evalkit.grading._stats import wilson_interval

    ci = wilson_interval(hidden, n)
    shown = "" if ci is None else f" [{ci[0]:.1%}, {ci[1]:.1%}] (Wilson 95%)"
    typer.echo(
        f"routed {n} tasks at threshold {threshold}: hidden pass {hidden / n:.1%}{shown}  cost ${cost:.6f}  escalations {esc}"
    )
    typer.echo("served by  " + ", ".join(f"{m} {k}" for m, k in sorted(served.items())))
