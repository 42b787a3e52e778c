"""Integrity of a campaign's stored costs: each checked against the model layer's record of its call.

Before a report (and so a results file or a receipt) is made, and before a run builds on a stored campaign,
every stored rollout's cost must agree with the completion it came from, the call row, the attempt that
settled it and the budget ledger's settle, and be what the recorded usage costs at the recorded registry's
prices (or, for a reply charged at its bound, that bound). A mismatch is a :class:`CampaignIntegrityError`
naming the row: the store was changed outside evalkit or is damaged, and nothing is certified from it.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import cast

from evalkit import JSON
from evalkit_core.models import Prices, Usage, cost_of
from evalkit_core.store import Store
from evalkit_router._config import CampaignError

__all__ = ["CampaignIntegrityError", "check_rollout_costs"]


class CampaignIntegrityError(CampaignError):
    """A stored cost disagrees with the model layer's record of the call it came from (the store was changed
    outside evalkit, or damaged). The message names the rollout and what disagrees."""


def _prices(content: str, model_id: str) -> Prices | None:
    try:
        p = json.loads(content)["models"][model_id]["prices"]
        return Prices(
            Decimal(p["input"]), Decimal(p["output"]), Decimal(p["cache_read"]), Decimal(p["cache_write"])
        )
    except (KeyError, TypeError, ValueError, ArithmeticError):
        return None


def check_rollout_costs(store: Store, name: str) -> int:
    """Check every stored rollout of campaign ``name`` against the call record and return how many were
    checked; raise :class:`CampaignIntegrityError` naming the first row that disagrees."""
    with store.snapshot() as db:
        rows = db.execute(
            "SELECT r.rollout_key, r.task_id, r.model_id, r.sample, r.cost, r.completion, r.call_id, c.status,"
            " c.cost, c.response_digest, c.anomaly, c.worst_case, c.input_tokens, c.output_tokens,"
            " c.cache_read_tokens, c.cache_write_tokens, c.registry_digest, c.attempts, c.model_id,"
            " (SELECT a.charged FROM call_attempts a WHERE a.call_id = c.call_id AND a.outcome = 'ok'),"
            " (SELECT group_concat(l.amount, ' ') FROM budget_ledger l WHERE l.call_id = c.call_id"
            "  AND l.kind = 'settle')"
            " FROM rollouts r LEFT JOIN model_calls c ON c.call_id = r.call_id WHERE r.campaign_id = ?"
            " ORDER BY r.model_id, r.task_id, r.sample",
            (name,),
        ).fetchall()
        registries = {str(d): str(c) for d, c in db.execute("SELECT digest, content FROM registries")}
    for row in rows:
        (key, task_id, model_id, sample, cost_text, completion_text, call_id, status, call_cost, resp_digest,
         anomaly, worst, inp, out, cr, cw, reg_digest, _attempts, call_model, attempt_charged, settles) = row  # fmt: skip
        where = f"{store.path}: rollout {key} ({task_id} sample {sample} on {model_id})"

        def fail(what: str, where: str = where, call_id: object = call_id) -> CampaignIntegrityError:
            return CampaignIntegrityError(
                f"{where}, call {call_id}: {what}; the store was changed outside evalkit or is damaged, so no "
                "report or receipt is made from it"
            )

        try:
            cost = Decimal(str(cost_text))
            comp = cast("dict[str, JSON]", json.loads(str(completion_text)))
            comp_cost = Decimal(str(comp.get("cost")))
        except (ValueError, ArithmeticError):
            raise fail(f"stored cost {cost_text!r} or its completion is not readable") from None
        if status is None:
            raise fail("the call behind it is not in the call record")
        if status != "ok" or call_model != model_id or comp.get("call_id") != call_id:
            raise fail(
                f"the call record says status {status!r}, model {call_model!r}; expected an ok call of {model_id}"
            )
        if comp_cost != cost:
            raise fail(f"stored cost ${cost} differs from its completion's ${comp_cost}")
        if call_cost is None or Decimal(str(call_cost)) != cost:
            raise fail(f"stored cost ${cost} differs from the call record's ${call_cost}")
        if attempt_charged is None or Decimal(str(attempt_charged)) != cost:
            raise fail(
                f"stored cost ${cost} differs from the charge of the attempt that answered (${attempt_charged})"
            )
        if settles is None or all(Decimal(a) != cost for a in str(settles).split()):
            raise fail(f"stored cost ${cost} has no matching settle in the budget ledger")
        if comp.get("response_digest") != resp_digest:
            raise fail("the completion's response digest differs from the call record's")
        if anomaly is not None and inp is None:
            if worst is None or Decimal(str(worst)) != cost:
                raise fail(f"a reply charged at its bound must cost the bound ${worst}, not ${cost}")
            continue
        prices = _prices(registries.get(str(reg_digest), "{}"), str(model_id))
        if prices is None or inp is None:
            raise fail("the recorded usage or the recorded registry's prices are missing")
        expected = cost_of(Usage(int(inp), int(out), int(cr), int(cw)), prices)
        if expected != cost:
            raise fail(f"stored cost ${cost} is not what the recorded usage costs (${expected})")
    return len(rows)
