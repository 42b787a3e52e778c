"""What the control arms' masks are made of: the row-key key and the shifted arm's session map.

Both live in ``answer_key.masks.json``, beside the answer key and like it never shown to an agent.

**Row keys.** ``row_key = "r" + the first 20 hex digits of HMAC-SHA256(key, "evalkit-row-key/2\\0" + accession)``.
The key is 32 bytes, ``SHA-256("evalkit-row-key-secret/1\\0" + key seed + "\\0" + digest of the filings)``: the
same filings and the same seed give the same key, so a release stays byte-identical for the same inputs. Knowing
every accession number does not give the keys without the key; whoever holds the builder's inputs and seed can
rebuild the release (key included), as for any deterministic build, so a release meant to resist agents whose
authors hold the same public inputs is built with a private ``key seed``.

**The mask secret** (masks format 2, releases of format 3): 32 bytes, ``SHA-256("evalkit-mask-secret/1\\0" +
key seed + "\\0" + digest of the filings)``, from which the shifted arm's session offset is drawn (see
:mod:`evalkit_core._shift`). A synthetic or demo release is built with a fixed seed and stays byte-reproducible
(its secret is then no secret to whoever runs the generator: the demo shows the machinery, it is not a holdout);
``evalkit bundle build`` draws the seed from ``os.urandom`` unless one is given. The manifest and every receipt
carry the secret's sha256 only. Masks format 1 (releases of format 2) has no secret: its shift is the public
ten-year map, which the harness's decoders invert.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any, cast

import attrs

from evalkit_core._canonical import canonical_bytes, digest_bytes
from evalkit_core._errors import ReleaseError
from evalkit_core._shift import PUBLIC_SCHEME, SECRET_SCHEME, SHIFT_YEARS, ShiftMap

__all__ = [
    "LEGACY_MASKS_FORMAT",
    "MASKS_FILE",
    "MASKS_FORMAT",
    "MASKS_FORMATS",
    "SHIFT_YEARS",
    "Masks",
    "ShiftMap",
    "filings_digest",
    "mask_secret",
    "row_key_for",
    "row_key_secret",
]

MASKS_FILE = "answer_key.masks.json"
LEGACY_MASKS_FORMAT = "evalkit-masks/1"
MASKS_FORMAT = "evalkit-masks/2"
MASKS_FORMATS = (LEGACY_MASKS_FORMAT, MASKS_FORMAT)
_ROW_KEY_TAG = b"evalkit-row-key/2\x00"
_SECRET_TAG = b"evalkit-row-key-secret/1\x00"
_MASK_SECRET_TAG = b"evalkit-mask-secret/1\x00"
ROW_KEY_RULE = (
    "'r' + first 20 hex digits of HMAC-SHA256(key, 'evalkit-row-key/2' NUL accession number (UTF-8))"
)
KEY_RULE = "SHA-256('evalkit-row-key-secret/1' NUL key seed NUL digest of the filings written)"
MASK_SECRET_RULE = "SHA-256('evalkit-mask-secret/1' NUL key seed NUL digest of the filings written)"  # noqa: S105


# --- row keys ------------------------------------------------------------------------------------------------


def row_key_secret(filings_sha256: str, key_seed: str = "") -> bytes:
    """The release's row-key key (32 bytes) from the digest of its filings and the builder's key seed."""
    return hashlib.sha256(
        _SECRET_TAG + key_seed.encode("utf-8") + b"\x00" + filings_sha256.encode("ascii")
    ).digest()


def mask_secret(filings_sha256: str, key_seed: str = "") -> bytes:
    """The release's mask secret (32 bytes), from which the shifted arm's offset is drawn."""
    return hashlib.sha256(
        _MASK_SECRET_TAG + key_seed.encode("utf-8") + b"\x00" + filings_sha256.encode("ascii")
    ).digest()


def row_key_for(accession: str, secret: bytes) -> str:
    """An opaque, stable key for a filing: a keyed hash that reveals no accession number, CIK or date."""
    if len(secret) < 16:
        raise ValueError("a row-key key must be at least 16 bytes")
    return "r" + hmac.new(secret, _ROW_KEY_TAG + accession.encode("utf-8"), hashlib.sha256).hexdigest()[:20]


def filings_digest(rows: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 (hex) over the canonical bytes of ``rows`` in order: the filings a release is written from."""
    h = hashlib.sha256()
    for row in rows:
        h.update(canonical_bytes(row))
        h.update(b"\n")
    return h.hexdigest()


@attrs.frozen
class Masks:
    """The row-key key, the shift map and (format 2) the mask secret of one release (harness side only)."""

    secret: bytes = attrs.field(repr=False)
    shift: ShiftMap
    shift_secret: bytes | None = attrs.field(default=None, repr=False)

    @property
    def format(self) -> str:
        return LEGACY_MASKS_FORMAT if self.shift_secret is None else MASKS_FORMAT

    @property
    def secret_sha256(self) -> str | None:
        """``sha256:`` of the mask secret: what the manifest and a receipt bind (None for format 1)."""
        return digest_bytes(self.shift_secret) if self.shift_secret is not None else None

    def row_key(self, accession: str) -> str:
        return row_key_for(accession, self.secret)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": self.format,
            "row_key": {
                "scheme": "hmac-sha256",
                "rule": ROW_KEY_RULE,
                "key_rule": KEY_RULE,
                "key": self.secret.hex(),
            },
            "shift": self.shift.to_json(),
        }
        if self.shift_secret is not None:
            out["shift"]["secret"] = self.shift_secret.hex()
            out["shift"]["secret_rule"] = MASK_SECRET_RULE
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> Masks:
        fmt = cast("dict[str, Any]", data).get("format") if isinstance(data, dict) else None
        if fmt not in MASKS_FORMATS:
            raise ReleaseError(f"{where}: expected a JSON object with format {MASKS_FORMAT!r} (or {LEGACY_MASKS_FORMAT!r})")
        d = cast("dict[str, Any]", data)
        key = d.get("row_key", {}).get("key") if isinstance(d.get("row_key"), dict) else None
        secret = _hex32(key)
        if secret is None:
            raise ReleaseError(f"{where}: field 'row_key.key' expected 64 hex digits")
        shift = ShiftMap.from_json(d.get("shift"), where)
        if fmt == LEGACY_MASKS_FORMAT:
            if shift.scheme != PUBLIC_SCHEME:
                raise ReleaseError(f"{where}: field 'shift.scheme' expected {PUBLIC_SCHEME!r} in {LEGACY_MASKS_FORMAT}")
            return cls(secret=secret, shift=shift)
        raw = cast("dict[str, Any]", d["shift"]).get("secret")
        shift_secret = _hex32(raw)
        if shift_secret is None:
            raise ReleaseError(f"{where}: field 'shift.secret' expected 64 hex digits")
        if shift.scheme != SECRET_SCHEME:
            raise ReleaseError(f"{where}: field 'shift.scheme' expected {SECRET_SCHEME!r} in {MASKS_FORMAT}")
        try:
            drawn = ShiftMap.draw(shift.pairs[0][0], shift.pairs[-1][0], shift.anchor[0], shift_secret)
        except ReleaseError as exc:
            raise ReleaseError(f"{where}: field 'shift': {exc}") from None
        if drawn != shift:
            raise ReleaseError(
                f"{where}: field 'shift' is not the map its secret draws (offset {shift.session_offset}, "
                f"the secret gives {drawn.session_offset})"
            )
        return cls(secret=secret, shift=shift, shift_secret=shift_secret)


def _hex32(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None
