"""Offline re-check of a PIT receipt: every hash it binds, recomputed from files the reader holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from evalkit.pit._config import load_config
from evalkit_core import (
    ConfigError,
    ReceiptError,
    ReleaseError,
    check_receipt,
    check_release,
    digest,
    file_digest,
    read_receipt,
)

__all__ = ["Check", "verify_pit_receipt"]


@attrs.frozen
class Check:
    name: str
    ok: bool
    detail: str = ""


def verify_pit_receipt(
    receipt_path: str | Path,
    *,
    trajectory: str | Path,
    bundle: str | Path,
    config: str | Path | None = None,
    prices: str | Path | None = None,
) -> list[Check]:
    """Recompute the body hash, the trajectory hash, the release content digest (from every file it binds)
    and, when given, the config digest and the price file's sha256. One :class:`Check` each."""
    checks: list[Check] = []
    try:
        receipt = read_receipt(receipt_path)
    except ReceiptError as exc:
        if not Path(receipt_path).is_file():
            raise
        # A damaged receipt binds nothing we can trust: every check below fails against an empty binding.
        receipt = None
        checks.append(Check("body_sha256", ok=False, detail=str(exc)))
    body: dict[str, Any] = receipt["body"] if receipt is not None else {}
    binding: dict[str, Any] = body.get("binding", {})
    if receipt is not None:
        ok = check_receipt(receipt)
        checks.append(Check("body_sha256", ok, "" if ok else f"body hashes to {digest(body)}, receipt says {receipt['body_sha256']}"))

    traj = Path(trajectory)
    if traj.is_file():
        got = file_digest(traj)
        want = binding.get("trajectory_sha256")
        checks.append(Check("trajectory_sha256", got == want, "" if got == want else f"{traj} has {got}, receipt binds {want}"))
    else:
        checks.append(Check("trajectory_sha256", ok=False, detail=f"{traj}: not found"))

    try:
        problems = check_release(bundle)
    except ReleaseError as exc:  # e.g. release.json no longer parses: a mismatch, not a usage error
        if not Path(bundle).is_dir():
            raise
        problems = [str(exc)]
    manifest_digest = _manifest_digest(Path(bundle))
    want = binding.get("bundle_content_digest")
    if manifest_digest != want:
        problems.insert(0, f"{bundle} has content digest {manifest_digest}, receipt binds {want}")
    checks.append(Check("bundle_content_digest", not problems, "; ".join(problems)))

    if config is not None:
        want = binding.get("config_sha256")
        try:
            got = load_config(config).digest()
        except ConfigError as exc:  # a config that no longer loads does not match what was run
            if not Path(config).is_file():
                raise
            checks.append(Check("config_sha256", ok=False, detail=str(exc)))
            got = None
        if got is not None:
            checks.append(Check("config_sha256", got == want, "" if got == want else f"{config} digests to {got}, receipt binds {want}"))
    if prices is not None:
        p = Path(prices)
        got = file_digest(p) if p.is_file() else None
        want = binding.get("prices_sha256")
        checks.append(Check("prices_sha256", got == want, "" if got == want else f"{p} has {got}, receipt binds {want}"))
    return checks


def _manifest_digest(root: Path) -> str | None:
    import json

    try:
        return json.loads((root / "release.json").read_text()).get("content_digest")
    except (OSError, ValueError):
        return None
