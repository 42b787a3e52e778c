"""A campaign's own rows in the store: its definition (inserted once, then checked against on every run), its
status, its lease (one runner at a time, taken over from a dead process) and the calls it paid for whose answers
never reached a rollout."""

from __future__ import annotations

from decimal import Decimal
from typing import cast

import attrs

from evalkit import JSON
from evalkit_core import canonical_bytes
from evalkit_core.models import Registry
from evalkit_core.store import Process, Store, is_alive, utc_now
from evalkit_router._config import (
    CampaignChangedError,
    CampaignConfig,
    CampaignError,
    identity_diff,
    identity_digest,
)
from evalkit_router._status import campaign_label, campaign_row

__all__ = [
    "LostCall",
    "acquire_lease",
    "lost_calls",
    "open_campaign",
    "release_lease",
    "set_status",
]


@attrs.frozen
class LostCall:
    """A call of this campaign that was paid (or may have been) but whose answer never reached a rollout: its
    process died with the request in flight (status ``unknown``, charged at its worst case), or an older
    evalkit lost it between settling and storing."""

    call_id: str
    model_id: str
    status: str
    charged: Decimal

    def to_json(self) -> dict[str, JSON]:
        return {
            "call_id": self.call_id,
            "model_id": self.model_id,
            "status": self.status,
            "charged_usd": str(self.charged),
        }


def set_status(store: Store, name: str, status: str) -> None:
    with store.transaction() as db:
        db.execute("UPDATE campaigns SET status = ? WHERE campaign_id = ?", (status, name))


def open_campaign(
    store: Store, config: CampaignConfig, ident: dict[str, JSON], registry: Registry
) -> list[str]:
    """Insert the campaign, or check that the stored one has the same identity. Returns notes on run settings
    that changed (allowed). Raises :class:`CampaignChangedError` listing what changed otherwise."""
    ident_digest = identity_digest(ident)
    stored = campaign_row(store, config.name)
    body: dict[str, JSON] = {
        "identity": ident,
        "settings": config.settings_json(),
        "file": {"path": str(config.path), "digest": config.file_digest, "text": config.text},
        "registry": {
            "digest": registry.digest,
            "sources": [s for s in registry.sources if not s.startswith("<")],
        },
    }
    notes: list[str] = []
    if stored is not None:
        old_digest, old, old_status = stored
        if old_status == "done":
            notes.append("was done")
        if old_digest != ident_digest:
            old_ident = cast("dict[str, JSON]", old.get("identity") or {})
            changes = identity_diff(old_ident, ident)
            old_file = cast("dict[str, JSON]", old.get("file") or {})
            raise CampaignChangedError(
                f"{config.path}: campaign {config.name!r} already exists in the store with a different "
                f"definition (first run from {old_file.get('path')}); changed: {'; '.join(changes)}. "
                "Run it under another name with --new-name NAME, or restore the file"
            )
        old_settings = cast("dict[str, JSON]", old.get("settings") or {})
        new_settings = config.settings_json()
        for key in ("budget_usd", "concurrency", "timeouts"):
            if old_settings.get(key) != new_settings[key]:
                notes.append(f"{key} changed: {old_settings.get(key)} -> {new_settings[key]}")
    with store.transaction() as db:
        if stored is None:
            db.execute(
                "INSERT INTO campaigns (campaign_id, created_at, name, config_digest, config, status)"
                " VALUES (?, ?, ?, ?, ?, 'running')",
                (config.name, utc_now(), config.name, ident_digest, canonical_bytes(body).decode()),
            )
        else:
            db.execute(
                "UPDATE campaigns SET config = ?, status = 'running' WHERE campaign_id = ?",
                (canonical_bytes(body).decode(), config.name),
            )
    return notes


def acquire_lease(store: Store, name: str) -> None:
    """Take the campaign's lease, or refuse naming the live process that holds it."""
    owner = store.owner_id
    with store.transaction() as db:
        row = db.execute(
            "SELECT o.host, o.boot_id, o.pid, o.start_ticks, o.heartbeat_at, l.acquired_at"
            " FROM campaign_leases l JOIN owners o ON o.owner_id = l.owner_id WHERE l.campaign_id = ?",
            (name,),
        ).fetchone()
        if row is not None:
            host, boot, pid, ticks, beat, since = row
            if is_alive(Process(str(host), str(boot), int(pid), int(ticks)), str(beat)):
                raise CampaignError(
                    f"campaign {name!r} is already running: process {pid} on {host} holds its lease since "
                    f"{since}; wait for it to finish (or stop it) and run again"
                )
        db.execute(
            "INSERT INTO campaign_leases (campaign_id, owner_id, acquired_at) VALUES (?, ?, ?) ON CONFLICT"
            " (campaign_id) DO UPDATE SET owner_id = excluded.owner_id, acquired_at = excluded.acquired_at",
            (name, owner, utc_now()),
        )


def release_lease(store: Store, name: str) -> None:
    with store.transaction() as db:
        db.execute(
            "DELETE FROM campaign_leases WHERE campaign_id = ? AND owner_id = ?", (name, store.owner_id)
        )


def lost_calls(store: Store, name: str) -> list[LostCall]:
    """Calls of this campaign that were (or may have been) paid and whose answer is in no rollout."""
    with store.snapshot() as db:
        rows = db.execute(
            "SELECT c.call_id, c.model_id, c.status, c.charged FROM model_calls c"
            " WHERE c.label = ? AND c.status IN ('unknown', 'ok')"
            " AND NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.call_id = c.call_id)"
            " ORDER BY c.started_at, c.call_id",
            (campaign_label(name),),
        ).fetchall()
    return [LostCall(str(a), str(b), str(c), Decimal(d)) for a, b, c, d in rows]
