"""``evalkit run``, ``evalkit verify`` and ``evalkit export`` (also ``pit-harness run|verify|export``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from evalkit_cli._progress import progress_bar
from evalkit_core import ConfigError

__all__ = ["export", "run", "verify"]


def _fmt_return(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:+.2f}%"


def _print_run(result_body: dict[str, Any], receipt_path: Path, receipt_sha: str, bundle_root: Path) -> None:
    b = result_body
    typer.echo(f"run         {b['run_id']}  valid={b['valid']}" + (f"  invalidated_by={','.join(b['invalidated_by'])}" if b["invalidated_by"] else ""))
    typer.echo(f"release     {b['protocol']['P5_window_provenance']['release']}  {b['binding']['bundle_content_digest']}")
    typer.echo(f"window      {b['window']['start']} .. {b['window']['end']}  ({b['window']['sessions']} sessions)")
    typer.echo(f"receipt     {receipt_path}  body {receipt_sha}")
    typer.echo(f"trajectory  {b['trajectory']['path']}  {b['trajectory']['sha256']}  {b['trajectory']['events']} events")
    net = b["network"]
    typer.echo(
        f"network     guard={net['guard']} policy={net['policy']} egress_attempts={net['egress_attempts']} scope: {net['scope']}"
    )
    wall: dict[str, Any] = b["agent"].get("wall") or {}
    if wall.get("full"):
        typer.echo(
            "wall        full: own read-only root, pid/mount/IPC/network namespaces, own uid, seccomp; a fresh process per cell"
        )
    elif wall:
        typer.echo("wall        WEAKER than designed: " + "; ".join(wall.get("weaker", [])))
    typer.echo("")
    for c in b["cells"]:
        typer.echo(
            f"{c['arm']:<9} {c['clock']:<6} total_return {_fmt_return(c['total_return']):>8}  trades {c['trades']:>5}  "
            f"scored {c['scored_trades']:>5}  lookahead {c['lookahead_trades']:>4}  reachable={c['reachable']}"
        )
    typer.echo("")
    p = b["probe"]
    if p["verdict"] == "not_run":
        typer.echo(f"probe       not run ({p.get('reason', '')})")
    else:
        typer.echo(
            f"probe       {p['verdict']}  ({p['items_asked']} items: date recovered {p['date_recovered']}, "
            f"year only {p['year_only']}, issuer recovered {p['issuer_recovered']})"
        )
    gaps = b["protocol_gaps"]
    typer.echo(f"protocol    {'complete' if not gaps else 'gaps: ' + ', '.join(gaps)}")
    if b["window_ends_before_cutoff"]:
        typer.echo("warning     the window ends before the declared training cutoff: the model may have seen the outcome")
    typer.echo(
        f"verify with evalkit verify {receipt_path} --trajectory {b['trajectory']['path']} --bundle {bundle_root}"
    )


def run(
    config: Path | None = typer.Option(
        None, "--config", help="RunConfig JSON. Without it: the stub over the built-in demo release."
    ),
    trajectory: str | None = typer.Option(
        None, "--trajectory", help="Where to write the trajectory JSONL [default: out/pit/trajectory.jsonl]."
    ),
    receipt: str | None = typer.Option(
        None, "--receipt", help="Where to write the receipt [default: out/pit/receipt.json]."
    ),
    agent: str | None = typer.Option(
        None, "--agent", help="'stub' or 'module:function' (a fn(prompt, tools))."
    ),
    prices: str | None = typer.Option(
        None, "--prices", help="Daily bars CSV/Parquet (ticker,date,open,...)."
    ),
    price_source: str | None = typer.Option(
        None, "--price-source", help="Where the prices came from (required with --prices)."
    ),
    pulled_at: str | None = typer.Option(
        None, "--pulled-at", help="When the prices were pulled (YYYY-MM-DD)."
    ),
    netns: bool = typer.Option(
        False,
        "--netns",
        help="Refuse to run unless the agent gets a network namespace of its own (bubblewrap).",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the receipt body as JSON instead of the table."
    ),
) -> None:
    """Run an agent over a release: 3 arms x 3 clocks, the probe, and a receipt anyone can re-check."""
    import attrs

    from evalkit.pit import RunConfig, load_config, resolve_agent
    from evalkit.pit import run as pit_run
    from evalkit_core._synth import DEMO, PRICE_SOURCE, demo_release_path

    overrides: dict[str, Any] = {}
    if config is None:
        demo = demo_release_path()
        cfg = RunConfig(
            bundle_path=str(demo),
            prices_path=str(demo / DEMO.prices_file),
            price_source=PRICE_SOURCE,
            trajectory_path="out/pit/trajectory.jsonl",
            receipt_path="out/pit/receipt.json",
        )
    else:
        cfg = load_config(config)
    if trajectory:
        overrides["trajectory_path"] = trajectory
    if receipt:
        overrides["receipt_path"] = receipt
    if agent:
        overrides["agent"] = agent
    if prices:
        overrides.update(prices_path=prices, price_source=price_source, prices_pulled_at=pulled_at)
    elif price_source or pulled_at:
        raise ConfigError("--price-source/--pulled-at: given without --prices")
    if overrides:
        cfg = attrs.evolve(cfg, **overrides)
    the_agent = resolve_agent(cfg.agent)
    # the release and the prices are loaded by the run itself, while the agent's jail starts
    with progress_bar("cells", enabled=not as_json) as bar:

        def report(label: str, done: int, total: int) -> None:
            if bar is not None:
                bar(done, total, label)

        result = pit_run(the_agent, cfg, progress=report, require_network_namespace=netns)
    if as_json:
        typer.echo(json.dumps(result.body, indent=2, sort_keys=True))
    else:
        _print_run(result.body, result.receipt_path, result.receipt["body_sha256"], Path(cfg.bundle_path))
    if not result.valid:
        raise typer.Exit(1)


def verify(
    receipt: Path = typer.Argument(..., help="The receipt to check."),
    trajectory: Path | None = typer.Option(None, "--trajectory", help="The trajectory the receipt binds (PIT runs)."),
    bundle: Path | None = typer.Option(None, "--bundle", help="The release directory the receipt binds (PIT runs)."),
    config: Path | None = typer.Option(None, "--config", help="Also check the config digest against this RunConfig JSON."),
    prices: Path | None = typer.Option(None, "--prices", help="Also check the price file's sha256."),
    results: Path | None = typer.Option(None, "--results", help="The results file an eval receipt binds [default: as recorded]."),
    tasks: Path | None = typer.Option(None, "--tasks", help="The task bank an eval receipt binds [default: as recorded]."),
) -> None:
    """Recompute every hash a receipt binds, offline. One ok/MISMATCH line each; exit 0 only if all match."""
    from evalkit_core import ReceiptError, read_receipt

    body: dict[str, Any]
    try:
        body = read_receipt(receipt)["body"]
    except ReceiptError:
        if not receipt.is_file():
            raise
        body = {}  # a damaged receipt: checked (and reported MISMATCH) as a PIT receipt below
    kind = body.get("kind", "pit_run")
    checks: list[tuple[str, bool, str]]
    if kind == "pit_run":
        from evalkit.pit import verify_pit_receipt

        if trajectory is None or bundle is None:
            raise ConfigError("verify: a PIT receipt needs --trajectory and --bundle")
        found = verify_pit_receipt(receipt, trajectory=trajectory, bundle=bundle, config=config, prices=prices)
        checks = [(c.name, c.ok, c.detail) for c in found]
    else:
        checks = _verify_other(kind, receipt, results, tasks)
    for name, ok, detail in checks:
        typer.echo(f"{'ok' if ok else 'MISMATCH':<9} {name}" + (f"  ({detail})" if detail and not ok else ""))
    if not all(ok for _, ok, _ in checks):
        raise typer.Exit(1)


def _verify_other(kind: str, receipt: Path, results: Path | None, tasks: Path | None) -> list[tuple[str, bool, str]]:
    from evalkit import verify_eval_receipt
    from evalkit._eval import RECEIPT_KIND as EVAL_KIND

    if kind == "evalkit.campaign":
        raise ConfigError(f"{receipt}: a campaign receipt; check it with `evalkit campaign verify NAME`")
    if kind != EVAL_KIND:
        raise ConfigError(f"{receipt}: receipt kind {kind!r} is not one this version can verify")
    # Without --results/--tasks the paths the receipt recorded are used.
    return [(str(n), bool(ok), str(d)) for n, ok, d in verify_eval_receipt(receipt, results, tasks)]


def export(
    bundle: Path = typer.Option(..., "--bundle", help="Release directory."),
    arm: str = typer.Option("main", "--arm", help="main, redacted or shifted."),
    clock: str = typer.Option("pit", "--clock", help="leaky, dump or pit."),
    out: Path = typer.Option(..., "--out", help="Output JSONL."),
    fmt: str = typer.Option("inspect", "--format", help="inspect, promptfoo or lm-eval."),
    forms: str | None = typer.Option(None, "--forms", help="Comma-separated forms, e.g. 8-K,10-Q."),
    start: str | None = typer.Option(None, "--start", help="First date (YYYY-MM-DD)."),
    end: str | None = typer.Option(None, "--end", help="Last date (YYYY-MM-DD)."),
    hold_sessions: int = typer.Option(5, "--hold-sessions", help="Holding period stated in each prompt."),
    max_rows: int = typer.Option(50, "--max-rows", help="At most this many new filings per prompt."),
) -> None:
    """Export one decision point per session (prompt + metadata, no tools) for Inspect, promptfoo or lm-eval."""
    from evalkit.pit import EXPORT_FORMATS, export_samples, session_samples
    from evalkit_core import Release

    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"--format: expected one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
    form_list = [f.strip() for f in forms.split(",") if f.strip()] if forms else None
    release = Release.load(bundle, forms=form_list, start=start, end=end)
    import datetime as dt

    samples = session_samples(
        release,
        arm,
        clock,
        hold_sessions=hold_sessions,
        max_rows=max_rows,
        start=dt.date.fromisoformat(start) if start else None,
        end=dt.date.fromisoformat(end) if end else None,
    )
    n = export_samples(samples, out, fmt)
    typer.echo(f"wrote {n} samples ({fmt}) to {out}")
