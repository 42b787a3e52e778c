"""``evalkit models``, ``evalkit budget`` and ``evalkit calls``: the registry, the spending cap, the call record.

The store lives in ``--home`` (default ``$EVALKIT_HOME``, else ``.evalkit/`` in the working directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from evalkit_core.models import BudgetStatus, UnknownOutcome

__all__ = ["budget_app", "calls_app", "models_app"]

models_app = typer.Typer(no_args_is_help=True, help="The model registry (shipped entries plus your files).")
budget_app = typer.Typer(
    no_args_is_help=True,
    help="The global spending cap (USD) kept in the store; reconcile calls whose process died.",
)
calls_app = typer.Typer(no_args_is_help=True, help="The record of model calls in the store.")

_HOME_HELP = "Store directory (default: $EVALKIT_HOME, else .evalkit/ in the working directory)."
_SIM_LABEL = "SIMULATED"


def _echo_json(data: object) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for line in [header, *rows]:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


@models_app.command("list")
def models_list(
    registry: list[Path] = typer.Option(
        [], "--registry", help="A user registry TOML merged on top (repeatable; also $EVALKIT_REGISTRY)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """List the models of the registry with their prices (USD per million tokens)."""
    from evalkit_core.models import load_registry

    reg = load_registry(registry)
    if as_json:
        _echo_json(
            {
                "digest": reg.digest,
                "sources": list(reg.sources),
                "prices_as_of": reg.prices_as_of,
                "prices_unit": "USD per million tokens",
                "models": [
                    {
                        "id": e.id,
                        "provider": e.provider,
                        "api_model": e.api_model,
                        "base_url": e.base_url,
                        "api_key_env": e.api_key_env,
                        "prices": {
                            k: str(getattr(e.prices, k))
                            for k in ("input", "output", "cache_read", "cache_write")
                        },
                        "context_window": e.context_window,
                        "max_output": e.max_output,
                        "requests_per_minute": e.requests_per_minute,
                        "tokens_per_minute": e.tokens_per_minute,
                        "simulated": e.simulated,
                        "sim_success_rate": None if e.sim is None else e.sim.success_rate,
                        "as_of": e.as_of,
                        "source": e.source,
                    }
                    for e in reg.models.values()
                ],
            }
        )
        return
    typer.echo(f"registry  {reg.digest}")
    typer.echo(f"sources   {', '.join(reg.sources)}")
    typer.echo(
        f"prices    USD per million tokens as of {reg.prices_as_of or 'an unstated date'}; "
        "check them against the provider before trusting a cost"
    )
    typer.echo("")
    rows = [
        [
            e.id,
            e.provider,
            e.api_model,
            str(e.prices.input),
            str(e.prices.output),
            str(e.prices.cache_read),
            str(e.prices.cache_write),
            str(e.context_window),
            str(e.max_output),
            e.as_of or "unstated",
            f"{_SIM_LABEL} (success rate {e.sim.success_rate:.0%})" if e.sim is not None else "",
        ]
        for e in reg.models.values()
    ]
    _table(
        ["MODEL", "PROVIDER", "API MODEL", "IN", "OUT", "CACHE-R", "CACHE-W", "CONTEXT", "MAX-OUT", "AS OF", ""],
        rows,
    )
    typer.echo("")
    typer.echo("sources (`--json` for each entry's):")
    for source in sorted({e.source for e in reg.models.values() if e.source}):
        typer.echo(f"  {source}")


def _status_json(status: BudgetStatus) -> dict[str, Any]:
    return {
        "cap": None if status.cap is None else str(status.cap),
        "spent": str(status.spent),
        "reserved": str(status.reserved),
        "remaining": None if status.remaining is None else str(status.remaining),
        "outstanding_reservations": status.outstanding,
        "unknown_outcomes": status.unknown,
        "unknown_charged": str(status.unknown_charged),
    }


def _outcome_json(u: UnknownOutcome) -> dict[str, Any]:
    return {
        "call_id": u.call_id,
        "model_id": u.model_id,
        "label": u.label,
        "charged": str(u.charged),
        "started_at": u.started_at,
        "invoiced": u.invoiced,
    }


def _missing_store(home: Path | None) -> Path | None:
    """Where the store would be, when there is none there yet (a PostgreSQL store always counts as there)."""
    from evalkit_core.store import sqlite_store_path

    path = sqlite_store_path(home)
    if path is None or path.exists() or (path.parent.exists() and not path.parent.is_dir()):
        return None  # not a store file, or a home that is a file: opening it says what is wrong
    return path


def _print_status(status: BudgetStatus, path: Path | str) -> None:
    typer.echo(f"store      {path}")
    typer.echo(
        f"cap        {'none (spending is recorded, not limited)' if status.cap is None else f'${status.cap}'}"
    )
    typer.echo(f"spent      ${status.spent}")
    typer.echo(f"reserved   ${status.reserved}  ({status.outstanding} call(s) in flight)")
    if status.remaining is not None:
        typer.echo(f"remaining  ${status.remaining}")
    if status.unknown:
        typer.echo(
            f"unknown    {status.unknown} call(s) whose process died with the request in flight, charged "
            f"${status.unknown_charged} at their worst case (`evalkit budget reconcile --actual FILE` settles "
            "them from an invoice)"
        )


_SHOWN = 20  # unknown outcomes listed in text (all of them in --json)


def _print_outcomes(title: str, outcomes: list[UnknownOutcome]) -> None:
    if not outcomes:
        return
    typer.echo(title)
    if len(outcomes) > _SHOWN:
        typer.echo(f"  ... {len(outcomes) - _SHOWN} older ones (all of them with --json)")
    for u in outcomes[-_SHOWN:]:
        how = f"settled from {u.invoiced}" if u.invoiced else "outcome unknown"
        typer.echo(
            f"  call {u.call_id}  {u.model_id}  ${u.charged}  {how}" + (f"  [{u.label}]" if u.label else "")
        )


@budget_app.command("show")
def budget_show(
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Show the cap, what has been spent, and what is reserved by calls in flight.

    Reservations left by processes that are gone are first charged at their worst case as unknown outcomes
    (never released as zero) and listed by call id."""
    from decimal import Decimal

    from evalkit_core.models import BudgetStatus, budget_status, reconcile, unknown_outcomes
    from evalkit_core.store import Store

    missing = _missing_store(home)
    if missing is not None:  # a question asked where there is no store makes none
        empty = BudgetStatus(cap=None, spent=Decimal(0), reserved=Decimal(0), outstanding=0)
        if as_json:
            _echo_json({"store": str(missing), **_status_json(empty), "reconciled_now": [], "unknown": []})
        else:
            _print_status(empty, missing)
            typer.echo("(no store there yet: nothing has been recorded; `evalkit budget set` or a model call makes one)")
        return
    with Store.open(home) as store:
        found = reconcile(store)
        status = budget_status(store)
        unknown = unknown_outcomes(store)
        if as_json:
            _echo_json(
                {
                    "store": str(store.path),
                    **_status_json(status),
                    "reconciled_now": [_outcome_json(u) for u in found],
                    "unknown": [_outcome_json(u) for u in unknown],
                }
            )
        else:
            _print_status(status, store.path)
            _print_outcomes("unknown outcomes (charged at their worst case):", unknown)


@budget_app.command("reconcile")
def budget_reconcile(
    actual: Path | None = typer.Option(
        None,
        "--actual",
        help="A provider invoice export: CSV with columns call_id, cost_usd (or JSON lines with those keys). "
        "Replaces the worst-case charge of those unknown outcomes with what they cost.",
    ),
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Charge the reservations of processes that are gone at their worst case (as unknown outcomes), and with
    --actual settle unknown outcomes from the provider's invoice export (all rows or none)."""
    from evalkit_core.models import budget_status, reconcile, settle_from_invoice
    from evalkit_core.store import Store

    with Store.open(home) as store:
        found = reconcile(store)
        settled = settle_from_invoice(store, actual) if actual is not None else []
        status = budget_status(store)
        if as_json:
            _echo_json(
                {
                    "store": str(store.path),
                    **_status_json(status),
                    "reconciled_now": [_outcome_json(u) for u in found],
                    "settled_from_invoice": [_outcome_json(u) for u in settled],
                }
            )
            return
        if not found and not settled:
            typer.echo("nothing to reconcile: every reservation belongs to a live process")
        _print_outcomes(
            f"charged at their worst case as unknown outcomes ({len(found)} call(s) whose process is gone):",
            found,
        )
        _print_outcomes(f"settled from {actual} ({len(settled)} call(s)):", settled)
        _print_status(status, store.path)


@budget_app.command("set", context_settings={"ignore_unknown_options": True})  # so "-5" reaches the check
def budget_set(
    amount: str = typer.Argument(..., help="The cap in USD, e.g. 5 or 0.25; 'none' removes the cap."),
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Set the global spending cap. Spend so far is kept: a cap below it refuses every further call."""
    from evalkit_core.models import parse_cap, set_budget_cap
    from evalkit_core.store import Store

    cap = parse_cap(amount)
    with Store.open(home) as store:
        status = set_budget_cap(store, cap)
        if as_json:
            _echo_json({"store": str(store.path), **_status_json(status)})
        else:
            _print_status(status, store.path)


@calls_app.command("list")
def calls_list(
    since: str | None = typer.Option(
        None, "--since", help="Only calls started since: an ISO date/instant or 30m, 2h, 7d."
    ),
    limit: int | None = typer.Option(None, "--limit", min=0, help="Only the last N calls."),
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """List recorded model calls, oldest first: model, status, attempts, tokens, cost."""
    from evalkit_core.models import list_calls, parse_since
    from evalkit_core.store import Store

    cutoff = None if since is None else parse_since(since)
    missing = _missing_store(home)
    if missing is not None:  # a question asked where there is no store makes none
        if as_json:
            _echo_json([])
        else:
            typer.echo(f"no calls recorded: there is no store at {missing} yet")
        return
    with Store.open(home) as store:
        calls = list_calls(store, since=cutoff, limit=limit)
    if as_json:
        _echo_json(
            [
                {
                    "call_id": c.call_id,
                    "started_at": c.started_at,
                    "finished_at": c.finished_at,
                    "model_id": c.model_id,
                    "reported_model": c.reported_model,
                    "simulated": c.simulated,
                    "status": c.status,
                    "error": c.error,
                    "attempts": c.attempts,
                    "usage": None
                    if c.usage is None
                    else {
                        "input_tokens": c.usage.input_tokens,
                        "output_tokens": c.usage.output_tokens,
                        "cache_read_tokens": c.usage.cache_read_tokens,
                        "cache_write_tokens": c.usage.cache_write_tokens,
                    },
                    "cost": None if c.cost is None else str(c.cost),
                    "charged": str(c.charged),
                    "worst_case": None if c.worst_case is None else str(c.worst_case),
                    "label": c.label,
                    "anomaly": c.anomaly,
                    "invoiced": c.invoiced,
                    "request_digest": c.request_digest,
                    "response_digest": c.response_digest,
                    "registry_digest": c.registry_digest,
                }
                for c in calls
            ]
        )
        return
    if not calls:
        typer.echo("no calls recorded" + ("" if since is None else f" since {cutoff}"))
        return
    rows = [
        [
            c.started_at[:19].replace("T", " "),
            c.call_id[:12],
            c.model_id + (f" [{_SIM_LABEL}]" if c.simulated else ""),
            c.status,
            str(c.attempts),
            "-" if c.usage is None else str(c.usage.total_input_tokens),
            "-" if c.usage is None else str(c.usage.output_tokens),
            "-" if c.cost is None else f"${c.cost}",
            f"${c.charged}",
            _note(c.anomaly, c.status, c.invoiced),
        ]
        for c in calls
    ]
    _table(["STARTED (UTC)", "CALL", "MODEL", "STATUS", "ATT", "IN", "OUT", "COST", "CHARGED", "NOTE"], rows)


def _note(anomaly: str | None, status: str, invoiced: str | None) -> str:
    if anomaly is not None:
        return f"ANOMALY: {anomaly}"
    if status == "unknown":
        return f"settled from {invoiced}" if invoiced else "process died in flight: charged at worst case"
    return ""
