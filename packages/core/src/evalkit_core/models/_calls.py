"""Reading the record of model calls back from the store."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal

import attrs

from evalkit_core._errors import ConfigError
from evalkit_core.models._cost import cost_of
from evalkit_core.models._errors import RegistryError
from evalkit_core.models._registry import Prices
from evalkit_core.models._types import Usage
from evalkit_core.store import Store

__all__ = ["CallAttempt", "CallRecord", "call_attempts", "list_calls", "parse_since", "recompute_cost"]

_COLUMNS = (
    "call_id, started_at, finished_at, model_id, provider, api_model, reported_model, simulated, status, error,"
    " attempts, request_digest, response_digest, registry_digest, input_tokens, output_tokens, cache_read_tokens,"
    " cache_write_tokens, cost, charged, stop_reason, label, worst_case, anomaly, invoiced"
)
_AGO = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@attrs.frozen
class CallAttempt:
    attempt: int
    started_at: str
    elapsed_ms: float
    status_code: int | None
    outcome: str
    error: str | None
    charged: Decimal


@attrs.frozen
class CallRecord:
    call_id: str
    started_at: str
    finished_at: str | None
    model_id: str
    provider: str
    api_model: str
    reported_model: str | None
    simulated: bool
    status: str  # pending | ok | error | refused | unknown (its process died with a request in flight)
    error: str | None
    attempts: int
    request_digest: str
    response_digest: str | None
    registry_digest: str
    usage: Usage | None
    cost: Decimal | None  # exact cost of the successful attempt; None if the call did not succeed
    charged: Decimal  # what the budget was charged for the whole call (failed attempts of unknown outcome included)
    stop_reason: str | None
    label: str | None = None  # who made it (a campaign: ``campaign:NAME``)
    worst_case: Decimal | None = None  # what each attempt reserved: the most it could cost
    anomaly: str | None = None  # why the reply was not taken at its word (then ``cost`` is the bound)
    invoiced: str | None = None  # the invoice export an unknown outcome was settled from


def _record(row: tuple[object, ...]) -> CallRecord:
    (
        call_id,
        started,
        finished,
        model_id,
        provider,
        api_model,
        reported,
        simulated,
        status,
        error,
        attempts,
        req_d,
        resp_d,
        reg_d,
        inp,
        out,
        cr,
        cw,
        cost,
        charged,
        stop,
        label,
        worst,
        anomaly,
        invoiced,
    ) = row
    usage = None if inp is None else Usage(int(str(inp)), int(str(out)), int(str(cr)), int(str(cw)))
    return CallRecord(
        call_id=str(call_id),
        started_at=str(started),
        finished_at=None if finished is None else str(finished),
        model_id=str(model_id),
        provider=str(provider),
        api_model=str(api_model),
        reported_model=None if reported is None else str(reported),
        simulated=bool(simulated),
        status=str(status),
        error=None if error is None else str(error),
        attempts=int(str(attempts)),
        request_digest=str(req_d),
        response_digest=None if resp_d is None else str(resp_d),
        registry_digest=str(reg_d),
        usage=usage,
        cost=None if cost is None else Decimal(str(cost)),
        charged=Decimal(str(charged)),
        stop_reason=None if stop is None else str(stop),
        label=None if label is None else str(label),
        worst_case=None if worst is None else Decimal(str(worst)),
        anomaly=None if anomaly is None else str(anomaly),
        invoiced=None if invoiced is None else str(invoiced),
    )


def parse_since(text: str, *, now: dt.datetime | None = None) -> str:
    """``--since`` as the store's timestamp text: an ISO date or instant (UTC if no zone), or an age such as
    ``30m``, ``2h``, ``7d``."""
    t = text.strip()
    m = _AGO.match(t)
    if m:
        when = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    else:
        try:
            when = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"--since: expected an ISO date or instant (2025-06-01, 2025-06-01T12:00Z) or an age (30m, 2h, 7d), got {text!r}"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)  # a naive --since is read as UTC
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def list_calls(store: Store, *, since: str | None = None, limit: int | None = None) -> list[CallRecord]:
    """Calls started at or after ``since`` (store timestamp text, see :func:`parse_since`), oldest first."""
    sql = f"SELECT {_COLUMNS} FROM model_calls"  # noqa: S608 - fixed column list, values are bound
    args: list[object] = []
    if since is not None:
        sql += " WHERE started_at >= ?"
        args.append(since)
    sql += " ORDER BY started_at, call_id"
    with store.snapshot() as db:
        rows = db.execute(sql, args).fetchall()
    records = [_record(tuple(r)) for r in rows]
    return records[-limit:] if limit is not None and limit >= 0 else records


def call_attempts(store: Store, call_id: str) -> list[CallAttempt]:
    with store.snapshot() as db:
        rows = db.execute(
            "SELECT attempt, started_at, elapsed_ms, status_code, outcome, error, charged FROM call_attempts"
            " WHERE call_id = ? ORDER BY attempt",
            (call_id,),
        ).fetchall()
    return [
        CallAttempt(int(a), str(s), float(e), c, str(o), err, Decimal(ch)) for a, s, e, c, o, err, ch in rows
    ]


def recompute_cost(store: Store, call_id: str) -> Decimal:
    """The cost of a recorded call recomputed from its recorded usage and the registry content recorded under
    its
    registry digest (so a price change in a later registry does not change it)."""
    with store.snapshot() as db:
        row = db.execute(
            "SELECT c.model_id, c.input_tokens, c.output_tokens, c.cache_read_tokens, c.cache_write_tokens, r.content"
            " FROM model_calls c JOIN registries r ON r.digest = c.registry_digest WHERE c.call_id = ?",
            (call_id,),
        ).fetchone()
    if row is None or row[1] is None:
        raise ConfigError(f"call {call_id!r}: not in the store, or it has no recorded usage")
    model_id, inp, out, cr, cw, content = row
    try:
        p = json.loads(content)["models"][model_id]["prices"]
        prices = Prices(
            Decimal(p["input"]), Decimal(p["output"]), Decimal(p["cache_read"]), Decimal(p["cache_write"])
        )
    except (KeyError, TypeError) as exc:
        raise RegistryError(
            f"call {call_id!r}: recorded registry lacks prices for {model_id!r} ({exc})"
        ) from None
    return cost_of(Usage(inp, out, cr, cw), prices)
