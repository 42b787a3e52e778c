"""What ``evalkit campaign status`` reads: a stored campaign's config and status, and its rollouts by state.

Kept apart from :mod:`evalkit_router._campaign` (which runs campaigns) so that the read-only command imports the
store and the budget ledger, not the grading stack, the fuzzer and the model client.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, cast

import attrs

from evalkit_core.models import charged_for_label
from evalkit_core.store import Store, sqlite_store_path, store_exists
from evalkit_router._errors import CampaignError

if TYPE_CHECKING:
    from evalkit import JSON

__all__ = [
    "CampaignStatus",
    "campaign_label",
    "campaign_row",
    "campaign_status",
    "load_stored_campaign",
    "require_store",
    "stored_rollouts",
]


def campaign_label(name: str) -> str:
    """The label the model layer records on every call a campaign makes (``model_calls.label``)."""
    return f"campaign:{name}"


@attrs.frozen
class CampaignStatus:
    name: str
    status: str
    planned: int
    graded: int
    ungraded: int  # completion stored, verdict not yet (or an infrastructure error)
    missing: int
    infra_errors: int
    spent: Decimal
    budget_usd: Decimal | None
    file: str

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "status": self.status,
            "planned": self.planned,
            "graded": self.graded,
            "ungraded": self.ungraded,
            "missing": self.missing,
            "infra_errors": self.infra_errors,
            "spent_usd": str(self.spent),
            "budget_usd": None if self.budget_usd is None else str(self.budget_usd),
            "file": self.file,
        }


def campaign_row(store: Store, name: str) -> tuple[str, dict[str, JSON], str] | None:
    with store.snapshot() as db:
        row = db.execute(
            "SELECT config_digest, config, status FROM campaigns WHERE campaign_id = ?", (name,)
        ).fetchone()
    if row is None:
        return None
    return cast("str", row[0]), cast("dict[str, JSON]", json.loads(row[1])), cast("str", row[2])


def require_store(name: str, home: Path | None = None) -> None:
    """Raise :class:`CampaignError` naming ``name`` when there is no store to look it up in, so that asking for a
    campaign in a directory without one makes no store there."""
    if not store_exists(home):
        where = sqlite_store_path(home)
        raise CampaignError(f"no campaign named {name!r}: there is no store at {where} yet "
                            "(evalkit campaign run FILE makes one; --home or $EVALKIT_HOME names another)")


def load_stored_campaign(store: Store, name: str) -> tuple[dict[str, JSON], str]:
    """The stored config JSON and status of campaign ``name``; :class:`CampaignError` when there is none."""
    got = campaign_row(store, name)
    if got is None:
        with store.snapshot() as db:
            names = [r[0] for r in db.execute("SELECT campaign_id FROM campaigns ORDER BY campaign_id")]
        known = ", ".join(names) if names else "none yet"
        raise CampaignError(f"no campaign named {name!r} in the store {store.path} (campaigns: {known})")
    return got[1], got[2]


def stored_rollouts(store: Store, name: str) -> dict[str, tuple[str, str | None, Decimal, str | None]]:
    """key -> (status, infra_error, cost, adversarial set digest) of every stored rollout of the campaign."""
    with store.snapshot() as db:
        rows = db.execute(
            "SELECT rollout_key, status, infra_error, cost, json_extract(result, '$.adversarial_set')"
            " FROM rollouts WHERE campaign_id = ?",
            (name,),
        ).fetchall()
    return {r[0]: (r[1], r[2], Decimal(r[3]), r[4]) for r in rows}


def campaign_status(store: Store, name: str) -> CampaignStatus:
    """Counts of a campaign's rollouts by state, and its spend so far."""
    config, status = load_stored_campaign(store, name)
    ident = cast("dict[str, JSON]", config["identity"])
    settings = cast("dict[str, JSON]", config["settings"])
    planned = (
        len(cast("dict[str, JSON]", ident["models"]))
        * len(cast("dict[str, JSON]", ident["tasks"]))
        * cast("int", ident["k"])
    )
    stored = stored_rollouts(store, name)
    graded = sum(1 for s, infra, _, _ in stored.values() if s == "graded" and infra is None)
    infra = sum(1 for s, e, _, _ in stored.values() if s == "graded" and e is not None)
    budget = settings.get("budget_usd")
    file_block = cast("dict[str, JSON]", config["file"])
    answers = sum((c for _, _, c, _ in stored.values()), Decimal(0))
    return CampaignStatus(
        name=name,
        status=status,
        planned=planned,
        graded=graded + infra,
        ungraded=len(stored) - graded - infra,
        missing=planned - len(stored),
        infra_errors=infra,
        spent=max(answers, charged_for_label(store, campaign_label(name))),
        budget_usd=None if budget is None else Decimal(cast("str", budget)),
        file=cast("str", file_block["path"]),
    )
