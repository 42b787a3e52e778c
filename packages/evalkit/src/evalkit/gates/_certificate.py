"""Contamination certificates: the verdicts of a verified PIT receipt as an in-toto Statement in a DSSE envelope.

A certificate is written only for a receipt that verifies (signature, every bound hash, the replay of every
cell). Its envelope is standard DSSE (``payloadType`` ``application/vnd.in-toto+json``, the payload the canonical
bytes of an in-toto Statement v1, Ed25519 over DSSE's PAE), signed with the same key as receipts, so any DSSE
implementation checks it. The statement's subjects are the receipt, the trajectory, the release and the price
file (names and sha256); its predicate (:data:`PREDICATE_TYPE`, documented in docs/certificates.md) carries the
verdicts. Nothing in it is a wall-clock value: one receipt certified twice gives the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit.gates._gate import pit_field
from evalkit.pit import Check, verify_pit_receipt
from evalkit_core import (
    ConfigError,
    EvalkitError,
    PublicKey,
    SigningKey,
    canonical_bytes,
    dsse_pae,
    file_digest,
    read_json_object,
    read_receipt,
)

__all__ = [
    "CERTIFICATE_VERSION",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "CertificateRefusedError",
    "certify_receipt",
    "is_certificate",
    "verify_certificate",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "urn:evalkit:pit-contamination-certificate:v1"
CERTIFICATE_VERSION = 1
_NEUTRAL = 1e-6


class CertificateRefusedError(EvalkitError):
    """The receipt does not verify, so no certificate is written (the CLI exits 1 with the reason)."""


def _hex(d: object) -> str:
    return str(d).removeprefix("sha256:")


def _interpret(name: str, value: Any, reachable: bool) -> str:
    other = "redacted" if name.endswith("redacted") else "shifted"
    hint = "issuer identity" if other == "redacted" else "the real dates"
    if value is None:
        return "not measured: no priced trades in one of the two cells"
    v = float(value)
    where = "" if reachable else " (leaky clock: an unreachable cell, shown for scale)"
    if abs(v) <= _NEUTRAL:
        return f"no difference: seeing {hint} did not change the return{where}"
    if v > 0:
        return (
            f"the main arm out-earned the {other} arm by {v:.6f}: consistent with recall keyed on {hint} "
            f"(contamination), not proof of it{where}"
        )
    return f"the {other} arm out-earned the main arm by {-v:.6f}: no sign that {hint} helped{where}"


def _holdout(body: Mapping[str, Any]) -> dict[str, Any]:
    """Per model, whether the run's window starts after its declared training cutoff."""
    models = pit_field(body, "holdout_models")
    if isinstance(models, list):
        return {"models": cast("list[Any]", models)}
    p2 = cast("Mapping[str, Any]", pit_field(body, "p2") or {})
    window = cast("Mapping[str, Any]", pit_field(body, "window") or {})
    cutoff = p2.get("declared")
    p1 = cast("Mapping[str, Any]", pit_field(body, "p1") or {})
    model = p1.get("declared") or None
    start = window.get("start")
    post = None if cutoff is None or start is None else str(start) > str(cutoff)
    return {"models": [{"model": model, "training_cutoff": cutoff, "post_cutoff": post}]}


def _subject(name: str, sha: object) -> dict[str, Any]:
    return {"name": name, "digest": {"sha256": _hex(sha)}}


def _predicate(
    body: Mapping[str, Any], receipt: Mapping[str, Any], checks: Sequence[Check], locations: Mapping[str, str | None]
) -> dict[str, Any]:
    cells = cast("list[Mapping[str, Any]]", pit_field(body, "cells") or [])
    reach = {str(c.get("clock")): bool(c.get("reachable")) for c in cells}
    lookahead = {
        f"{c.get('arm')}/{c.get('clock')}": {
            "reachable": bool(c.get("reachable")),
            "trades": c.get("trades"),
            "lookahead_trades": c.get("lookahead_trades"),
            "lookahead_checked": c.get("lookahead_checked"),
        }
        for c in cells
    }
    probe = cast("Mapping[str, Any]", pit_field(body, "probe") or {})
    items = [
        {k: i.get(k) for k in ("item", "row_key", "date_recovered", "year_only", "issuer_recovered", "issuer_matched_by")}
        for i in cast("list[Mapping[str, Any]]", probe.get("items") or [])
    ]
    contamination: dict[str, Any] = {}
    for clock, deltas in sorted(cast("Mapping[str, Any]", pit_field(body, "contamination") or {}).items()):
        if isinstance(deltas, Mapping):
            contamination[clock] = {
                name: {"value": value, "interpretation": _interpret(name, value, reach.get(clock, True))}
                for name, value in sorted(cast("Mapping[str, Any]", deltas).items())
            }
    network = {k: pit_field(body, f) for k, f in (("clean", "network_clean"), ("egress_attempts", "egress_attempts"),
                                                  ("policy", "network_policy"), ("scope", "network_scope"))}
    holdout = _holdout(body)
    decoders = cast("Mapping[str, Any]", pit_field(body, "decoders") or {})
    masks = {  # what the harness's own decoders recovered (receipts from release format 3 on; empty before)
        "verdict": pit_field(body, "masks"),
        **{k: decoders[k] for k in ("holds", "holds_against_public_knowledge", "broken_by", "threshold") if k in decoders},
    }
    reachable_lookahead = sum(int(v["lookahead_trades"] or 0) for v in lookahead.values() if v["reachable"])
    gaps = cast("list[str]", pit_field(body, "protocol_gaps") or [])
    return {
        "certificate_version": CERTIFICATE_VERSION,
        "receipt": {
            "body_sha256": receipt.get("body_sha256"),
            "run_id": pit_field(body, "run_id"),
            "receipt_version": pit_field(body, "receipt_version"),
            "valid": pit_field(body, "valid"),
        },
        "signer": receipt.get("signer"),
        "locations": dict(locations),
        "verification": {
            "replayed": any(c.name == "replay" and c.status == "ok" for c in checks),
            "checks": [{"name": c.name, "status": c.status} for c in checks],
        },
        "network": network,
        "lookahead": lookahead,
        "probe": {
            "verdict": probe.get("verdict"),
            **{k: probe.get(k) for k in ("items_asked", "date_recovered", "year_only", "issuer_recovered") if k in probe},
            "items": items,
        },
        "masks": masks,
        "protocol": pit_field(body, "protocol"),
        "protocol_gaps": gaps,
        "holdout": holdout,
        "contamination": contamination,
        "verdicts": {
            "network_clean": network["clean"] is True and not network["egress_attempts"],
            "lookahead_trades_in_reachable_cells": reachable_lookahead,
            "probe": probe.get("verdict"),
            "masks_hold_against_public_knowledge": decoders.get("holds_against_public_knowledge"),
            "protocol_complete": not gaps,
            "post_cutoff": [m.get("post_cutoff") for m in cast("list[Mapping[str, Any]]", holdout["models"])],
        },
    }


def certify_receipt(
    receipt_path: str | Path,
    *,
    bundle: str | Path,
    key: SigningKey,
    trajectory: str | Path | None = None,
    prices: str | Path | None = None,
    trusted: str | None = None,
) -> dict[str, Any]:
    """Verify a PIT receipt (replay included) and return the signed certificate envelope.

    Raises :class:`CertificateRefusedError` naming every failed check when the receipt does not verify. ``trusted``
    is the signer to require of the receipt (as ``evalkit verify --key``; default the local key).
    """
    receipt = read_receipt(receipt_path)
    body = cast("dict[str, Any]", receipt["body"])
    if body.get("kind", "pit_run") != "pit_run":
        raise ConfigError(f"{receipt_path}: a {body.get('kind')!r} receipt; certificates are for PIT receipts")
    bound_prices = pit_field(body, "prices_digest")
    if bound_prices is not None and prices is None:
        raise ConfigError(f"{receipt_path}: the receipt binds a price file ({bound_prices}); pass it with --prices")
    checks = verify_pit_receipt(receipt_path, bundle=bundle, trajectory=trajectory, prices=prices, key=trusted)
    bad = [c for c in checks if c.status == "MISMATCH"]
    if bad:
        raise CertificateRefusedError(
            f"{receipt_path} does not verify: " + "; ".join(f"{c.name} ({c.detail})" if c.detail else c.name for c in bad)
        )
    traj = str(trajectory) if trajectory is not None else str(pit_field(body, "trajectory_path"))
    release_name = str(pit_field(body, "release_name") or Path(bundle).name)
    subjects = [
        _subject(str(receipt_path), file_digest(receipt_path)),
        # The file's own bytes, as an in-toto subject is checked: for plain JSONL that is what the receipt binds; a
        # compressed trajectory's receipt binds its canonical stream, which the replay above checked.
        _subject(traj, file_digest(traj)),
        _subject(f"release:{release_name}", pit_field(body, "release_digest")),
    ]
    if prices is not None:
        subjects.append(_subject(str(prices), pit_field(body, "prices_digest")))
    locations = {"receipt": str(receipt_path), "trajectory": traj, "bundle": str(bundle),
                 "prices": str(prices) if prices is not None else None}
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": _predicate(body, receipt, checks, locations) | {"certifier": key.public.to_json()},
    }
    payload = canonical_bytes(statement)
    sig = key.sign(dsse_pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key.key_id, "sig": base64.b64encode(sig).decode("ascii")}],
    }


def is_certificate(path: str | Path) -> bool:
    """True when ``path`` holds a JSON object shaped like a DSSE envelope of an in-toto statement."""
    try:
        data = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and cast("dict[str, Any]", data).get("payloadType") == PAYLOAD_TYPE


def _read(path: Path) -> tuple[dict[str, Any], bytes, dict[str, Any]]:
    env = read_json_object(
        path, missing="certificate not found", expected="a DSSE envelope (payloadType, payload, signatures)"
    )
    if env.get("payloadType") != PAYLOAD_TYPE:
        raise ConfigError(f"{path}: field 'payloadType': expected {PAYLOAD_TYPE!r}, got {env.get('payloadType')!r}")
    try:
        payload = base64.b64decode(str(env.get("payload")).encode("ascii"), validate=True)
        statement = json.loads(payload)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise ConfigError(f"{path}: field 'payload': expected the base64 of an in-toto statement") from None
    if not isinstance(statement, dict) or cast("dict[str, Any]", statement).get("predicateType") != PREDICATE_TYPE:
        raise ConfigError(f"{path}: the statement's predicateType is not {PREDICATE_TYPE!r}")
    return env, payload, cast("dict[str, Any]", statement)


@attrs.frozen
class CertificateCheck:
    """What :func:`verify_certificate` found: each check line, and the statement it read (None if unreadable)."""

    checks: list[Check]
    statement: dict[str, Any]


def _signature(env: Mapping[str, Any], payload: bytes, statement: Mapping[str, Any], trusted: set[str]) -> Check:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    certifier = cast("Mapping[str, Any]", cast("Mapping[str, Any]", statement.get("predicate") or {}).get("certifier") or {})
    try:
        raw = base64.b64decode(str(certifier.get("public_key")).encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raw = b""
    if len(raw) != 32:
        return Check("certificate signature", ok=False, detail="predicate.certifier.public_key is not an Ed25519 key")
    key_id = PublicKey(raw).key_id
    sigs = [cast("Mapping[str, Any]", s) for s in cast("list[Any]", env.get("signatures") or []) if isinstance(s, dict)]
    mine = [s for s in sigs if s.get("keyid") == key_id]
    if not mine:
        return Check("certificate signature", ok=False, detail=f"no signature by the certifier {key_id}")
    try:
        sig = base64.b64decode(str(mine[0].get("sig")).encode("ascii"), validate=True)
        Ed25519PublicKey.from_public_bytes(raw).verify(sig, dsse_pae(PAYLOAD_TYPE, payload))
    except (binascii.Error, UnicodeEncodeError, InvalidSignature):
        return Check("certificate signature", ok=False, detail=f"the signature by {key_id} does not verify over the payload")
    if key_id not in trusted:
        return Check("certificate signature", ok=False,
                     detail=f"signed by {key_id}, not a trusted key (trusted: {', '.join(sorted(trusted)) or 'none'}); pass --key")
    return Check("certificate signature", ok=True, detail=key_id)


def verify_certificate(
    path: str | Path,
    *,
    bundle: str | Path | None = None,
    trajectory: str | Path | None = None,
    prices: str | Path | None = None,
    key: str | None = None,
    home: str | Path | None = None,
) -> CertificateCheck:
    """Check a certificate's signature, then re-verify the receipt it names (replay included) from the
    locations it records (or those given), and that every subject's digest is what is there now."""
    from evalkit_core import trusted_key_ids

    p = Path(path)
    env, payload, statement = _read(p)
    trusted = set(trusted_key_ids(key, home))
    checks = [_signature(env, payload, statement, trusted)]
    pred = cast("dict[str, Any]", statement.get("predicate") or {})
    loc = cast("dict[str, Any]", pred.get("locations") or {})
    receipt = Path(str(loc.get("receipt")))
    the_bundle = bundle if bundle is not None else loc.get("bundle")
    the_traj = trajectory if trajectory is not None else loc.get("trajectory")
    the_prices = prices if prices is not None else loc.get("prices")
    if not receipt.is_file():
        checks.append(Check("receipt", ok=False, detail=f"{receipt}: not found (the certificate names it)"))
        return CertificateCheck(checks, statement)
    subjects = {str(s.get("name")): cast("dict[str, Any]", s.get("digest") or {}).get("sha256")
                for s in cast("list[dict[str, Any]]", statement.get("subject") or [])}
    got = _hex(file_digest(receipt))
    want = subjects.get(str(loc.get("receipt")))
    checks.append(Check("receipt sha256", got == want, "" if got == want else f"{receipt} has {got}, certificate binds {want}"))
    found = verify_pit_receipt(receipt, bundle=str(the_bundle), trajectory=the_traj, prices=the_prices, key=key, home=home)
    checks.extend(attrs.evolve(c, name=f"receipt {c.name}") for c in found)
    body = cast("dict[str, Any]", read_receipt(receipt)["body"])
    traj_name = str(loc.get("trajectory"))
    want = subjects.get(traj_name)
    got = _hex(file_digest(the_traj)) if the_traj is not None and Path(str(the_traj)).is_file() else None
    detail = "" if got == want else f"{the_traj} has {got}, the certificate binds {want}"
    checks.append(Check(f"subject {traj_name}", got == want, detail))
    expected = [(f"release:{pit_field(body, 'release_name')}", "release_digest")]
    if loc.get("prices") is not None:
        expected.append((str(loc.get("prices")), "prices_digest"))
    for name, field in expected:
        want = subjects.get(name)
        bound = pit_field(body, field)
        ok = bound is not None and _hex(bound) == want
        checks.append(Check(f"subject {name}", ok, "" if ok else f"the receipt binds {bound}, the certificate {want}"))
    return CertificateCheck(checks, statement)
