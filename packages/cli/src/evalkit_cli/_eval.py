"""``evalkit eval``: grade a solver over a task bank; write per-rollout results and a receipt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import typer

from evalkit_cli._progress import progress_bar

__all__ = ["eval_command"]


def _rate(value: object) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.1%}"


def _ci(value: object) -> str:
    if not isinstance(value, list) or len(value) != 2:  # pyright: ignore[reportUnknownArgumentType]
        return ""
    lo, hi = cast("list[float]", value)
    return f"[{lo:.1%}, {hi:.1%}]"


def eval_command(
    tasks: Path = typer.Option(..., "--tasks", help="Task bank directory."),
    solver: str = typer.Option(
        ..., "--solver", help="reference, replay:FILE.jsonl (lines of task_id and completion), or model:<id> (a registry model, e.g. model:sim/strong)."
    ),
    k: int | None = typer.Option(
        None, "--k", min=1, help="Samples per task (reference: repeat; replay: keep the first K)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Write one JSON line per rollout here."),
    receipt: Path | None = typer.Option(
        None, "--receipt", help="Write a receipt binding tasks, settings and results."
    ),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Sandbox workers (default: one per CPU, at most 8)."),
    cpu_seconds: float | None = typer.Option(
        None, "--cpu-seconds", min=0.01, max=60.0, help="CPU seconds per test in the sandbox (default 3, as campaigns)."
    ),
    wall_seconds: float | None = typer.Option(
        None, "--wall-seconds", min=0.01, max=600.0, help="Wall-clock seconds per test (default 3 x CPU + 2)."
    ),
    cache: bool = typer.Option(
        True, "--cache/--no-cache",
        help="model: solvers: answer a temperature-0 request from the response cache in $EVALKIT_HOME when it holds "
        "one (recorded as cached, costs nothing); --no-cache asks the model every time.",
    ),
    executor: str = typer.Option(
        "local", "--executor",
        help="Where grading runs: local (this machine's sandbox workers) or ray (a pool of sandbox-worker actors "
        "on a Ray cluster, for large banks; needs the extra evalkit-harness\\[ray]).",
    ),
    address: str | None = typer.Option(
        None, "--address",
        help="With --executor ray: the Ray cluster to join (HOST:PORT of its head, or 'auto'); default: start a "
        "single-machine Ray on 127.0.0.1 with --workers CPUs.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    show_progress: bool = typer.Option(False, "--progress", help="Show progress on stderr even when it is not a terminal (plain lines)."),
) -> None:
    """Grade solutions with the sandboxed verifiers; print public and hidden pass rates and their gap."""
    from evalkit import SandboxLimits, check_executor, run_eval
    from evalkit_core import ConfigError

    check_executor(executor, address)
    limits = None
    if cpu_seconds is not None or wall_seconds is not None:
        limits = SandboxLimits(cpu_seconds=cpu_seconds if cpu_seconds is not None else SandboxLimits().cpu_seconds,
                               wall_seconds=wall_seconds)  # fmt: skip
        if limits.wall < limits.cpu_seconds:
            raise ConfigError(
                f"--wall-seconds {limits.wall:g} is below --cpu-seconds {limits.cpu_seconds:g}; a test could never "
                "use its CPU allowance"
            )
    with progress_bar("grading", enabled=not as_json, force=show_progress) as show:
        report = run_eval(
            tasks, solver, k=k, out=out, receipt=receipt, workers=workers, limits=limits, progress=show, cache=cache,
            executor=executor, address=address,
        )
    from evalkit.grading._eval import summary_intervals

    s = report.summary
    ci = summary_intervals([r.to_json() for r in report.rollouts])
    if not report.isolation.full:
        # never silently: the verdicts were made behind a weaker wall than the design's
        typer.echo(f"warning: weaker sandbox isolation: {'; '.join(report.isolation.weaker)}", err=True)
    if as_json:
        payload = {
            "summary": s,
            "intervals": ci,
            "solver": dict(report.solver),
            "bank_digest": report.bank_digest,
            "settings_digest": report.settings.digest,
            "isolation": report.isolation.to_json(),
            "results": str(report.results_path) if report.results_path else None,
            "receipt": str(report.receipt_path) if report.receipt_path else None,
        }
        typer.echo(json.dumps(payload, ensure_ascii=False))
        return
    typer.echo(
        f"tasks {s['tasks']}  rollouts {s['rollouts']}  scored {s['scored']}  infra errors {s['infra_errors']}"
    )
    typer.echo(
        f"public pass rate {_rate(s['public_pass_rate'])} {_ci(ci['public_pass_rate'])}  "
        f"hidden pass rate {_rate(s['hidden_pass_rate'])} {_ci(ci['hidden_pass_rate'])}  gap {_rate(s['gap'])}"
    )
    typer.echo(f"intervals: {ci['method']}")
    if report.solver.get("name") == "model":
        typer.echo(
            f"model {report.solver['model_id']}: {report.solver['calls']} call(s), {report.solver['cached']} answered "
            f"from the cache (cost nothing), ${report.solver['cost_usd']}"
        )
    if report.results_path:
        typer.echo(f"results {report.results_path}")
    if report.receipt_path:
        typer.echo(f"receipt {report.receipt_path}")
