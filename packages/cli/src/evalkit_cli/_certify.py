"""``evalkit certify``: a signed contamination certificate (in-toto Statement in DSSE) for a verified PIT receipt;
and the certificate half of ``evalkit verify``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import typer

__all__ = ["certify", "print_certificate_verification"]


def certify(
    receipt: Path = typer.Argument(..., help="The PIT receipt to certify."),
    out: Path = typer.Option(..., "--out", help="Where to write the certificate (a DSSE envelope, JSON)."),
    bundle: Path = typer.Option(..., "--bundle", help="The release directory the receipt binds."),
    prices: Path | None = typer.Option(None, "--prices", help="The price file the receipt binds (required when it binds one)."),
    trajectory: Path | None = typer.Option(None, "--trajectory", help="The trajectory the receipt binds \\[default: the path it records]."),
    key: str | None = typer.Option(None, "--key", help="Require this signer of the receipt: a PEM public key file or an ed25519:<hex> key id \\[default: the local key]."),
    as_json: bool = typer.Option(False, "--json", help="Print the in-toto statement as JSON."),
) -> None:
    """Verify a PIT receipt (signature, hashes, replay) and write a contamination certificate: an in-toto
    Statement v1 in a DSSE envelope, signed with the local receipt key, whose subjects are the receipt, the
    trajectory, the release and the price file and whose predicate carries the verdicts. Exit 1 (nothing
    written) when the receipt does not verify, 2 on bad input."""
    import base64

    from evalkit.gates._certificate import CertificateRefusedError, certify_receipt
    from evalkit_cli._keys import signing_key
    from evalkit_core import ConfigError, ReceiptError, atomic_write_text, check_output_path

    # bad input before anything is written (the signing key is made on first use)
    if not receipt.is_file():
        raise ReceiptError(f"{receipt}: receipt file not found")
    check_output_path(out, "--out")
    for given in (receipt, trajectory, prices):
        if given is not None and out.resolve() == given.resolve():
            raise ConfigError(f"--out: {out} is an input ({given}); expected a new file for the certificate")
    try:
        envelope = certify_receipt(receipt, bundle=bundle, key=signing_key(), trajectory=trajectory, prices=prices,
                                   trusted=key)
    except CertificateRefusedError as exc:
        typer.echo(f"refused: {exc}", err=True)
        raise typer.Exit(1) from None
    atomic_write_text(out, json.dumps(envelope, indent=2, sort_keys=True) + "\n")
    statement = cast("dict[str, Any]", json.loads(base64.b64decode(envelope["payload"])))
    if as_json:
        typer.echo(json.dumps(statement, indent=2, sort_keys=True))
        return
    typer.echo(f"wrote {out}: certificate for {receipt}, signed {envelope['signatures'][0]['keyid']}")
    _print_verdicts(statement)


def _print_verdicts(statement: Mapping[str, Any]) -> None:
    pred = cast("Mapping[str, Any]", statement["predicate"])
    for s in cast("list[Mapping[str, Any]]", statement["subject"]):
        typer.echo(f"subject     {s['name']}  sha256:{cast('Mapping[str, str]', s['digest'])['sha256']}")
    v = cast("Mapping[str, Any]", pred["verdicts"])
    net = cast("Mapping[str, Any]", pred["network"])
    typer.echo(f"network     {'clean' if v['network_clean'] else 'NOT CLEAN'} (egress attempts {net['egress_attempts']})")
    for cell, c in cast("Mapping[str, Mapping[str, Any]]", pred["lookahead"]).items():
        typer.echo(f"lookahead   {cell:<15} {c['lookahead_trades']} of {c['trades']} trades  reachable={c['reachable']}")
    probe = cast("Mapping[str, Any]", pred["probe"])
    typer.echo(f"probe       {probe['verdict']}  ({len(cast('list[Any]', probe['items']))} items scored)")
    gaps = cast("list[str]", pred["protocol_gaps"])
    typer.echo(f"protocol    {'complete' if not gaps else 'gaps: ' + ', '.join(gaps)}")
    for m in cast("list[Mapping[str, Any]]", cast("Mapping[str, Any]", pred["holdout"])["models"]):
        status = {True: "post-cutoff (holdout)", False: "NOT post-cutoff", None: "unknown (no cutoff declared)"}[m.get("post_cutoff")]
        typer.echo(f"holdout     {m.get('model') or '(model not declared)'}: {status}")
    for clock, deltas in cast("Mapping[str, Mapping[str, Mapping[str, Any]]]", pred["contamination"]).items():
        for name, d in deltas.items():
            typer.echo(f"delta       {clock}.{name} {d['value']}: {d['interpretation']}")


def print_certificate_verification(
    cert: Path,
    *,
    bundle: Path | None,
    trajectory: Path | None,
    prices: Path | None,
    key: str | None,
    as_json: bool = False,
) -> None:
    """``evalkit verify CERT.json``: the certificate's signature, the receipt it names re-verified, the verdicts
    (with ``--json``: one object, ``checks`` as for a receipt and the ``statement`` it verified; same exit code)."""
    from evalkit.gates._certificate import verify_certificate

    found = verify_certificate(cert, bundle=bundle, trajectory=trajectory, prices=prices, key=key)
    mismatch = any(c.status == "MISMATCH" for c in found.checks)
    if as_json:
        payload = {
            "certificate": str(cert),
            "kind": "certificate",
            "ok": not mismatch,
            "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in found.checks],
            "statement": found.statement,
        }
        typer.echo(json.dumps(payload, indent=2, sort_keys=True))
        if mismatch:
            raise typer.Exit(1)
        return
    for c in found.checks:
        if c.status == "not checked":
            typer.echo(f"not checked: {c.name}" + (f" ({c.detail})" if c.detail else ""))
        else:
            typer.echo(f"{c.status:<9} {c.name}" + (f"  ({c.detail})" if c.detail else ""))
    typer.echo("")
    _print_verdicts(found.statement)
    if any(c.status == "MISMATCH" for c in found.checks):
        raise typer.Exit(1)
