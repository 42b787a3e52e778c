"""The receipt envelope ``{body, body_sha256, emitted_at}`` and binding checks (the atomic writes it re-exports
live in :mod:`evalkit_core._atomic`, below both this module and the signing key's).

``emitted_at`` is the only wall-clock value and sits outside the hash: two runs of one configuration over one
release give byte-identical bodies and body hashes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from evalkit_core._atomic import atomic_open, atomic_write_bytes, atomic_write_text, check_output_path
from evalkit_core._canonical import canonical_bytes, digest, file_digest
from evalkit_core._errors import ReceiptError
from evalkit_core._jsonfile import read_json_object
from evalkit_core._signing import SigningKey, sign_body

__all__ = [
    "Binding",
    "BindingResult",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_bindings",
    "check_output_path",
    "check_receipt",
    "make_receipt",
    "read_receipt",
    "write_receipt",
]


def make_receipt(
    body: Mapping[str, Any], emitted_at: dt.datetime | None = None, *, key: SigningKey | None = None
) -> dict[str, Any]:
    """Wrap ``body`` in the envelope. ``emitted_at`` defaults to now (UTC); it is never part of the hash nor
    signed. With ``key`` the receipt also carries a DSSE envelope over the canonical body and the signer's
    public key (see :mod:`evalkit_core._signing`)."""
    when = emitted_at or dt.datetime.now(dt.UTC)
    receipt: dict[str, Any] = {
        "body": dict(body),
        "body_sha256": digest(body),
        "emitted_at": when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
    }
    if key is not None:
        receipt.update(sign_body(body, key))
    return receipt


def write_receipt(path: str | Path, receipt: Mapping[str, Any]) -> None:
    """Write a receipt atomically, as canonical JSON followed by a newline."""
    atomic_write_bytes(path, canonical_bytes(receipt) + b"\n")


def read_receipt(path: str | Path) -> dict[str, Any]:
    """Read a receipt and check its shape (not its hash: see :func:`check_receipt`)."""
    p = Path(path)
    receipt = read_json_object(
        p, ReceiptError, missing="receipt file not found", expected="a JSON object with body, body_sha256 and emitted_at"
    )
    for field, kind in (("body", dict), ("body_sha256", str), ("emitted_at", str)):
        if not isinstance(receipt.get(field), kind):
            raise ReceiptError(f"{p}: field {field!r} missing or not a {kind.__name__}")
    return receipt


def check_receipt(receipt: Mapping[str, Any]) -> bool:
    """True when ``body_sha256`` is the digest of the canonical body."""
    return digest(receipt["body"]) == receipt["body_sha256"]


@attrs.frozen
class Binding:
    """A file a receipt binds: its name in reports, the digest the receipt expects, and where the reader holds it."""

    name: str
    expected: str
    path: Path = attrs.field(converter=Path)


@attrs.frozen
class BindingResult:
    name: str
    expected: str
    actual: str | None  # None when the file could not be read
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.actual == self.expected


def check_bindings(bindings: Iterable[Binding]) -> list[BindingResult]:
    """Recompute each bound file's digest; one result per binding, in order, mismatches named."""
    results: list[BindingResult] = []
    for b in bindings:
        try:
            actual = file_digest(b.path)
        except OSError as exc:
            results.append(BindingResult(b.name, b.expected, None, f"cannot read {b.path}: {exc.strerror}"))
            continue
        detail = "" if actual == b.expected else f"{b.path} has {actual}, receipt expects {b.expected}"
        results.append(BindingResult(b.name, b.expected, actual, detail))
    return results
