"""``evalkit run``, ``evalkit verify`` and ``evalkit export`` (also ``pit-harness run|verify|export``)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from evalkit_cli._keys import signing_key
from evalkit_cli._progress import progress_bar
from evalkit_core import ConfigError

__all__ = ["export", "run", "verify"]


def _fmt_return(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:+.2f}%"


def _shown(value: object) -> str:
    """Text the agent chose (what it raised, a network target it named) as the terminal may print it: one line,
    every character that is not printable (an escape sequence's ESC, a carriage return, a backspace, NUL) a ``?``,
    so an agent's message cannot move the cursor, erase the table's lines above it or print lines of its own."""
    return "".join(ch if ch.isprintable() else "?" for ch in " ".join(str(value).split()))


def _cause(event: dict[str, Any]) -> str:
    """Why a cell failed, in a few words: an unknown model id, what the agent raised, what it was blocked from."""
    if event.get("type") == "egress_attempt":
        where = f" (at {_shown(event['call_site'])})" if event.get("call_site") else ""
        kind, target = _shown(event.get("kind", "network")), _shown(event.get("target"))
        return f"agent blocked: {kind} to {target}{where}"
    message = _shown(event.get("message", ""))
    unknown = re.search(r"unknown model '([^']*)'", message)
    if unknown:
        return f"unknown model id {unknown.group(1)!r} (`evalkit models list` shows the ids)"
    if len(message) > 200:
        message = message[:200] + "..."
    error_type = _shown(event.get("error_type", "an error"))
    if event.get("raised_by") == "harness":  # a cause the harness named (older receipts do not say)
        return f"stopped by the harness, {error_type}: {message}"
    return f"agent raised {error_type}: {message}"


def failures(body: dict[str, Any]) -> list[str]:
    """One line per cell that failed (an agent error or a blocked connection), from the receipt body."""
    events = [*body.get("agent_errors", []), *({"type": "egress_attempt", **e} for e in body["network"].get("attempts", []))]
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for event in events:
        cell = (str(event.get("arm", "probe")), str(event.get("clock", "")))
        if cell in seen:
            continue
        seen.add(cell)
        when = f" {event['session_date']}" if event.get("session_date") else ""
        lines.append(f"{cell[0]}/{cell[1]}{when}: {_cause(event)}")
    return lines


def _print_run(
    receipt: dict[str, Any], receipt_path: Path, verify_args: list[str]
) -> None:
    b = receipt["body"]
    receipt_sha = receipt["body_sha256"]
    typer.echo(
        f"run         {b['run_id']}  valid={b['valid']}  masks={b['masks']}"
        + (f"  invalidated_by={','.join(b['invalidated_by'])}" if b["invalidated_by"] else "")
    )
    typer.echo(f"release     {b['protocol']['P5_window_provenance']['release']}  {b['binding']['bundle_content_digest']}")
    typer.echo(f"window      {b['window']['start']} .. {b['window']['end']}  ({b['window']['sessions']} sessions)")
    typer.echo(f"receipt     {receipt_path}  body {receipt_sha}")
    typer.echo(f"signed      {receipt['signer']['keyid']}")
    typer.echo(f"trajectory  {b['trajectory']['path']}  {b['trajectory']['sha256']}  {b['trajectory']['events']} events")
    net = b["network"]
    typer.echo(f"network     guard={net['guard']} policy={net['policy']} egress_attempts={net['egress_attempts']} scope: {net['scope']}")
    wall: dict[str, Any] = b["agent"].get("wall") or {}
    if wall.get("full"):
        typer.echo("wall        full: own read-only root, pid/mount/IPC/network namespaces, own uid, seccomp; a fresh process per cell")
    elif wall:
        typer.echo("wall        WEAKER than designed: " + "; ".join(wall.get("weaker", [])))
    typer.echo("")
    for c in b["cells"]:
        typer.echo(
            f"{c['arm']:<9} {c['clock']:<6} total_return {_fmt_return(c['total_return']):>8}  trades {c['trades']:>5}  "
            f"scored {c['scored_trades']:>5}  lookahead {c['lookahead_trades']:>4}  reachable={c['reachable']}"
            # a shifted cell served with decoys: how many picks named a decoy (refused, never traded)
            + (f"  decoy_picks {c['decoy_picks']}" if c.get("decoy_picks") is not None else "")
        )
    if not b["cells"]:
        typer.echo("no cell finished")
    for line in failures(b):
        typer.echo(f"FAILED    {line}")
    typer.echo("")
    p = b["probe"]
    if p["verdict"] == "not_run":
        reason = p.get("reason") or "the run stopped before the probe"
        typer.echo(f"probe       not run ({reason}): " + ("the masks are unproven" if b["masks"] == "unproven" else "the probe tested nothing"))
    else:
        typer.echo(
            f"probe       {p['verdict']}  ({p['items_asked']} items: date recovered {p['date_recovered']}, "
            f"year only {p['year_only']}, issuer recovered {p['issuer_recovered']})"
        )
    decoders: dict[str, Any] = b.get("decoders") or {}
    if decoders.get("arms"):
        typer.echo("decoders    " + ("none breaks the masks" if decoders["holds"] else "broken by " + ", ".join(decoders["broken_by"])))
    limits: list[Any] = list(decoders.get("limits") or [])
    for limit in limits:
        typer.echo(f"limit       {limit}")
    gaps = b["protocol_gaps"]
    typer.echo(f"protocol    {'complete' if not gaps else 'gaps: ' + ', '.join(gaps)}")
    for m in b["protocol"]["P2_training_cutoff"].get("models", []):
        label = "post-cutoff: a holdout" if m["post_cutoff"] else "NOT post-cutoff: the window starts on or before the cutoff"
        typer.echo(f"holdout     {m['model'] or '(model not declared)'} cutoff {m['training_cutoff']}: {label}")
    if b["window_ends_before_cutoff"]:
        typer.echo("warning     the window ends before the declared training cutoff: the model may have seen the outcome")
    typer.echo("verify with evalkit verify " + " ".join(shlex.quote(a) for a in verify_args))


def run(
    config: Path | None = typer.Option(None, "--config", help="RunConfig JSON. Without it: the stub over the built-in demo release."),
    trajectory: str | None = typer.Option(None, "--trajectory", help="Where to write the trajectory JSONL; a path ending in .zst is written zstd-compressed \\[default: out/pit/trajectory.jsonl]."),
    receipt: str | None = typer.Option(None, "--receipt", help="Where to write the receipt \\[default: out/pit/receipt.json]."),
    agent: str | None = typer.Option(None, "--agent", help="'stub', 'model:ID', 'inspect:MODULE:SOLVER@MODEL' (an Inspect AI solver; extra evalkit-harness\\[inspect]) or 'module:function' (a fn(prompt, tools))."),
    prices: str | None = typer.Option(None, "--prices", help="Daily bars CSV/Parquet (ticker,date,open,...)."),
    price_source: str | None = typer.Option(None, "--price-source", help="Where the prices came from (required with --prices)."),
    pulled_at: str | None = typer.Option(None, "--pulled-at", help="When the prices were pulled (YYYY-MM-DD)."),
    netns: bool = typer.Option(False, "--netns", help="Refuse to run unless the agent gets a network namespace of its own (bubblewrap)."),
    mask_decoys: bool | None = typer.Option(None, "--mask-decoys/--no-mask-decoys", help="Serve the masked arms with decoys (the shifted arm: decoys, drawn times of day and a hidden window; the redacted arm: clones and drawn instants) or not (RunConfig.mask_decoys) \\[default: the config's; on]."),
    as_json: bool = typer.Option(False, "--json", help="Print the receipt body as JSON instead of the table."),
    show_progress: bool = typer.Option(False, "--progress", help="Show progress on stderr even when it is not a terminal (plain lines)."),
) -> None:
    """Run an agent over a release: 3 arms x 3 clocks, the probe, and a receipt anyone can re-check."""
    import attrs

    from evalkit.pit import AgentSpecError, PricesError, RunConfig, load_config, load_prices, resolve_agent
    from evalkit.pit import run as pit_run
    from evalkit_core import Release, ReleaseError
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
    if mask_decoys is not None:
        overrides["mask_decoys"] = mask_decoys
    if prices:
        overrides.update(prices_path=prices, price_source=price_source, prices_pulled_at=pulled_at)
    elif price_source or pulled_at:
        raise ConfigError("--price-source/--pulled-at: given without --prices")
    if overrides:
        cfg = attrs.evolve(cfg, **overrides)
    cfg = _cutoff_from_registry(cfg)
    cfg.check_outputs()  # before any work: a run that cannot write its outputs must not start
    _agent_modules_from_working_directory()
    try:
        the_agent = resolve_agent(cfg.agent)
    except (ConfigError, AgentSpecError) as exc:
        message = str(exc).removeprefix("agent: ")
        raise (ConfigError(f"--agent: {message}") if agent else cfg.error("agent", message)) from None
    try:
        bundle = Release.load(cfg.bundle_path)
    except ReleaseError as exc:
        raise cfg.error("bundle_path", str(exc)) from None
    the_prices = None
    if cfg.prices_path:
        try:
            the_prices = load_prices(cfg.prices_path, source=cfg.price_source or "", pulled_at=cfg.prices_pulled_at)
        except PricesError as exc:
            if prices:  # the file came from --prices: its own message names it
                raise
            raise cfg.error("prices_path", str(exc)) from None
    key = signing_key()
    with progress_bar("cells", enabled=not as_json, force=show_progress) as bar:

        def report(label: str, done: int, total: int) -> None:
            if bar is not None:
                bar(done, total, label)

        result = pit_run(the_agent, cfg, bundle, the_prices, progress=report, key=key, require_network_namespace=netns)
    if as_json:
        typer.echo(json.dumps(result.body, indent=2, sort_keys=True))
    else:
        # Every path verify needs, so the printed line checks everything (the config is the recorded one unless
        # a file was given, and then the file is compared too).
        args = [str(result.receipt_path), "--trajectory", str(result.trajectory_path), "--bundle", str(bundle.root)]
        if cfg.prices_path:
            args += ["--prices", cfg.prices_path]
        if config is not None and not overrides:
            args += ["--config", str(config)]
        _print_run(result.receipt, result.receipt_path, args)
    if not result.valid:
        raise typer.Exit(1)


def _cutoff_from_registry(cfg: Any) -> Any:
    """A ``model:ID`` agent whose registry entry declares a training cutoff fills P1 and P2 when the config leaves
    them empty (the config records it, so the receipt binds and replays it)."""
    import attrs

    from evalkit_core.models import RegistryError, load_registry

    if not cfg.agent.startswith("model:") or cfg.training_cutoff is not None:
        return cfg
    model_id = cfg.agent.removeprefix("model:")
    try:
        entry = load_registry().get(model_id)
    except RegistryError:  # an unknown model: the agent's own resolution says so, with the config's field
        return cfg
    if entry.training_cutoff is None:
        return cfg
    return attrs.evolve(
        cfg,
        model_version=cfg.model_version or model_id,
        training_cutoff=entry.training_cutoff.isoformat(),
        training_cutoff_source=f"model registry: {entry.training_cutoff_source}",
    )


def verify(
    receipt: Path = typer.Argument(..., help="The receipt (or a certificate from `evalkit certify`) to check."),
    trajectory: Path | None = typer.Option(None, "--trajectory", help="The trajectory the receipt binds \\[default: the path it records] (PIT runs)."),
    bundle: Path | None = typer.Option(None, "--bundle", help="The release directory the receipt binds (PIT runs)."),
    config: Path | None = typer.Option(None, "--config", help="Also compare this RunConfig JSON with the config the receipt records (the replay uses the recorded one)."),
    prices: Path | None = typer.Option(None, "--prices", help="The price file the receipt binds: needed to recompute returns."),
    key: str | None = typer.Option(None, "--key", help="Require this signer: a PEM public key file or an ed25519:<hex> key id \\[default: the local key in $EVALKIT_HOME]."),
    results: Path | None = typer.Option(None, "--results", help="The results file an eval receipt binds \\[default: as recorded]."),
    tasks: Path | None = typer.Option(None, "--tasks", help="The task bank an eval receipt binds \\[default: as recorded]."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON (same exit code)."),
    workers: int | None = typer.Option(
        None, "--workers", min=1,
        help="PIT runs: processes that replay the cells in parallel \\[default: one per core, for a trajectory of "
        "16 MB or more on disk; with --executor ray, one per CPU of the cluster]; 1 replays them in this process. "
        "The report is the same whatever the count.",
    ),
    executor: str = typer.Option(
        "local", "--executor",
        help="PIT runs: where the cells are replayed: local (this machine's processes) or ray (actors on a Ray "
        "cluster, each reading the release at the same path; needs the extra evalkit-harness\\[ray]).",
    ),
    address: str | None = typer.Option(
        None, "--address",
        help="With --executor ray: the Ray cluster to join (HOST:PORT of its head, or 'auto'); default: start a "
        "single-machine Ray on 127.0.0.1 with --workers CPUs.",
    ),
) -> None:
    """Check a receipt offline: its signature, its schema, every hash it binds, and (PIT runs) a replay of every
    cell from the trajectory, the release and the prices. One line each: ok, MISMATCH <field>, not checked: <what>
    (pass the file it names), or note. Exit 0 only if nothing disagrees."""
    from evalkit.gates._certificate import is_certificate
    from evalkit_core import ReceiptError, read_receipt

    if is_certificate(receipt):  # a certificate from `evalkit certify`: its signature, then its receipt
        from evalkit_cli._certify import print_certificate_verification

        print_certificate_verification(
            receipt, bundle=bundle, trajectory=trajectory, prices=prices, key=key, as_json=as_json
        )
        return
    body: dict[str, Any]
    bound: dict[str, Any] = {}
    try:
        doc = read_receipt(receipt)
        body = doc["body"]
        # Each digest the receipt binds, printed beside its check.
        binding = body.get("binding")
        bound = {**(binding if isinstance(binding, dict) else {}), "body_sha256": doc.get("body_sha256")}
    except ReceiptError:
        if not receipt.is_file() or bundle is None:
            raise  # missing, or damaged with nothing to check it against: the error names the file
        body = {}  # a damaged receipt: checked (and reported MISMATCH) as a PIT receipt below
    kind = body.get("kind", "pit_run")
    checks: list[tuple[str, str, str]]
    if kind == "pit_run":
        from evalkit.pit import verify_pit_receipt

        if bundle is None:
            raise ConfigError("verify: a PIT receipt needs --bundle (the release directory it binds)")
        found = verify_pit_receipt(
            receipt, trajectory=trajectory, bundle=bundle, config=config, prices=prices, key=key,
            workers=workers, executor=executor, address=address,
        )  # fmt: skip
        checks = [(c.status, c.name, c.detail) for c in found]
    else:
        checks = [
            ("ok" if ok else "MISMATCH", name, detail) for name, ok, detail in _verify_other(kind, receipt, results, tasks, key)
        ]
    mismatch = any(status == "MISMATCH" for status, _, _ in checks)
    if as_json:
        payload: dict[str, Any] = {
            "receipt": str(receipt),
            "kind": kind,
            "ok": not mismatch,
            "checks": [
                {"name": name, "status": status, "detail": detail, "bound": bound.get(name)}
                for status, name, detail in checks
            ],
        }
        if kind == "pit_run":
            payload["run_valid"] = body.get("valid") is True and not mismatch
            payload["protocol_complete"] = body.get("protocol_complete") is True
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
        if mismatch:
            raise typer.Exit(1)
        return
    for status, name, detail in checks:
        value = bound.get(name)
        shown = f"  {value}" if isinstance(value, str) and status != "not checked" else ""
        if status == "not checked":
            typer.echo(f"not checked: {name}" + (f" ({detail})" if detail else ""))
        else:
            typer.echo(f"{status:<9} {name}{shown}" + (f"  ({detail})" if detail else ""))
    mismatch = any(status == "MISMATCH" for status, _, _ in checks)
    if kind == "pit_run":
        # The closing line: the run is valid only if its body says so and nothing above disagrees with it.
        run_valid = body.get("valid") is True and not mismatch
        complete = body.get("protocol_complete") is True
        typer.echo(f"run_valid {str(run_valid).lower()} protocol_complete {str(complete).lower()}")
    if mismatch:
        raise typer.Exit(1)


def _verify_other(
    kind: str, receipt: Path, results: Path | None, tasks: Path | None, key: str | None
) -> list[tuple[str, bool, str]]:
    from evalkit import verify_eval_receipt
    from evalkit.grading._eval import RECEIPT_KIND as EVAL_KIND

    if kind == "evalkit.campaign":
        raise ConfigError(f"{receipt}: a campaign receipt; check it with `evalkit campaign verify NAME`")
    if kind != EVAL_KIND:
        raise ConfigError(f"{receipt}: receipt kind {kind!r} is not one this version can verify")
    # Without --results/--tasks the paths the receipt recorded are used.
    return [(str(n), bool(ok), str(d)) for n, ok, d in verify_eval_receipt(receipt, results, tasks, key=key)]


def export(
    bundle: Path = typer.Option(..., "--bundle", help="Release directory."),
    arm: str = typer.Option("main", "--arm", help="main, redacted or shifted."),
    clock: str = typer.Option("pit", "--clock", help="leaky, dump or pit."),
    out: Path = typer.Option(..., "--out", help="Output JSONL."),
    fmt: str = typer.Option("inspect", "--format", help="inspect, promptfoo or lm-eval."),
    forms: str | None = typer.Option(None, "--forms", help="Comma-separated forms, e.g. 8-K,10-Q."),
    start: str | None = typer.Option(None, "--start", help="First date (YYYY-MM-DD)."),
    end: str | None = typer.Option(None, "--end", help="Last date (YYYY-MM-DD)."),
    hold_sessions: int = typer.Option(5, "--hold-sessions", min=1, help="Holding period stated in each prompt."),
    max_rows: int = typer.Option(50, "--max-rows", min=1, help="At most this many new filings per prompt."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
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
    if as_json:
        typer.echo(json.dumps({"samples": n, "format": fmt, "arm": arm, "clock": clock, "out": str(out)}))
        return
    typer.echo(f"wrote {n} samples ({fmt}) to {out}")


def _agent_modules_from_working_directory() -> None:
    """An agent named ``module:function`` (or ``inspect:MODULE:...``) is found in the working directory too, as
    ``python -m evalkit_cli`` finds it: the ``evalkit`` console script does not put that directory on the path.
    It goes last, so a file in the working directory never shadows an installed module."""
    cwd = str(Path.cwd())
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)
