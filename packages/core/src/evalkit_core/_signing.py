"""Ed25519 signing keys and DSSE envelopes for receipts.

The private key lives in ``$EVALKIT_HOME/keys/ed25519.pem`` (PKCS#8 PEM, mode 0600, in a 0700 directory; the
home defaults to ``.evalkit/`` in the working directory, as for the store), the public key beside it in
``ed25519.pub.pem``. A key is named by its id, ``ed25519:<sha256 of the 32 raw public-key bytes, hex>``.

A signed receipt carries, next to ``body``/``body_sha256``/``emitted_at``:

- ``dsse``: a DSSE envelope (https://github.com/secure-systems-lab/dsse, protocol v1) whose ``payload`` is the
  base64 of the canonical body bytes and whose ``payloadType`` is :data:`PAYLOAD_TYPE`; the signature is Ed25519
  over ``PAE(payloadType, payload)``;
- ``signer``: the algorithm, the key id and the raw public key (base64), so a reader can check the signature
  without a key server. Whom to trust is the reader's choice: :func:`check_signature` takes the trusted key ids.

Ed25519 signatures are deterministic: one body signed with one key gives the same bytes every time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

from evalkit_core._atomic import atomic_write_bytes
from evalkit_core._canonical import canonical_bytes
from evalkit_core._errors import EvalkitError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "KEY_DIR",
    "PAYLOAD_TYPE",
    "PRIVATE_KEY_FILE",
    "PUBLIC_KEY_FILE",
    "PublicKey",
    "SignatureCheck",
    "SigningError",
    "SigningKey",
    "check_signature",
    "dsse_pae",
    "ensure_signing_key",
    "generate_signing_key",
    "load_signing_key",
    "local_public_key",
    "parse_trusted_key",
    "sign_body",
    "signing_key_paths",
    "trusted_key_ids",
]

PAYLOAD_TYPE = "application/vnd.evalkit.receipt+json"
KEY_DIR = "keys"
PRIVATE_KEY_FILE = "ed25519.pem"
PUBLIC_KEY_FILE = "ed25519.pub.pem"
ALGORITHM = "ed25519"
_RAW_LEN = 32


class SigningError(EvalkitError):
    """A signing key is missing, unreadable, too widely readable, or not an Ed25519 key."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None


def key_id_of(raw: bytes) -> str:
    return f"{ALGORITHM}:{hashlib.sha256(raw).hexdigest()}"


@attrs.frozen
class PublicKey:
    """An Ed25519 public key (32 raw bytes) and its id."""

    raw: bytes = attrs.field(repr=False)

    @property
    def key_id(self) -> str:
        return key_id_of(self.raw)

    def to_json(self) -> dict[str, str]:
        return {"algorithm": ALGORITHM, "keyid": self.key_id, "public_key": _b64(self.raw)}

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        key = Ed25519PublicKey.from_public_bytes(self.raw)
        return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    @classmethod
    def from_pem(cls, data: bytes, source: str) -> PublicKey:
        from cryptography.exceptions import InternalError, UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError, UnsupportedAlgorithm, InternalError):
            raise SigningError(
                f"{source}: not a PEM public key (expected -----BEGIN PUBLIC KEY-----)"
            ) from None
        if not isinstance(key, Ed25519PublicKey):
            raise SigningError(f"{source}: a {type(key).__name__}, expected an Ed25519 public key")
        return cls(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


class SigningKey:
    """The private half, loaded from a key file. Holds no state beyond the key; signs bytes."""

    __slots__ = ("_private", "path", "public")

    def __init__(self, private: Ed25519PrivateKey, path: Path | None = None) -> None:
        self._private = private
        self.path = path
        self.public = PublicKey(private.public_key().public_bytes_raw())

    @property
    def key_id(self) -> str:
        return self.public.key_id

    def sign(self, data: bytes) -> bytes:
        return self._private.sign(data)

    def __repr__(self) -> str:
        return f"SigningKey({self.key_id})"

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """A key from 32 seed bytes (tests and tools that need a second, throwaway signer)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(Ed25519PrivateKey.from_private_bytes(seed))


def signing_key_paths(home: str | Path | None = None) -> tuple[Path, Path]:
    """(private key file, public key file) under ``home`` (default ``$EVALKIT_HOME``, else ``.evalkit/``)."""
    from evalkit_core._home import evalkit_home

    base = (Path(home) if home is not None else evalkit_home()) / KEY_DIR
    return base / PRIVATE_KEY_FILE, base / PUBLIC_KEY_FILE


# RFC 8410, section 7: the PKCS #8 PrivateKeyInfo of an Ed25519 key (version 0, the algorithm id-Ed25519 with no
# parameters, no attributes, no public key) is these 16 bytes of DER, then the 32-byte seed. It is the form
# generate_signing_key writes.
_PKCS8_ED25519_PREFIX = bytes.fromhex("302e020100300506032b657004220420")
_PEM_BEGIN, _PEM_END = b"-----BEGIN PRIVATE KEY-----", b"-----END PRIVATE KEY-----"


def _pkcs8_ed25519_seed(pem: bytes) -> bytes | None:
    """The seed of a PEM file in exactly the form :func:`generate_signing_key` writes, else None (any other form,
    well-formed or not, is left to cryptography's PEM parser). Reading that one form by hand spares every grading
    command the import of cryptography's serialization package (some 8 ms of its start)."""
    lines = pem.strip().split(b"\n")
    if len(lines) < 3 or lines[0] != _PEM_BEGIN or lines[-1] != _PEM_END:
        return None
    try:
        der = base64.b64decode(b"".join(lines[1:-1]), validate=True)
    except binascii.Error:
        return None
    if len(der) != len(_PKCS8_ED25519_PREFIX) + _RAW_LEN or not der.startswith(_PKCS8_ED25519_PREFIX):
        return None
    return der[len(_PKCS8_ED25519_PREFIX) :]


def load_signing_key(home: str | Path | None = None) -> SigningKey:
    """The key in ``home``; SigningError (one line, naming the file) when it is missing, open to others or bad."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_path, _ = signing_key_paths(home)
    try:
        fd = os.open(private_path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise SigningError(
            f"{private_path}: no signing key (create one with `evalkit keys generate`)"
        ) from None
    except OSError as exc:
        raise SigningError(f"{private_path}: cannot read the signing key ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        mode = stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
        if mode & 0o077:
            raise SigningError(
                f"{private_path}: permissions {mode:04o} let others read the signing key; expected 0600 (chmod 600)"
            )
        data = fh.read()
    seed = _pkcs8_ed25519_seed(data)
    if seed is not None:
        return SigningKey(Ed25519PrivateKey.from_private_bytes(seed), private_path)
    from cryptography.exceptions import InternalError, UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(data, password=None)
    # InternalError: OpenSSL's own refusal of some malformed keys (an Ed448 identifier over a 32-byte key)
    except (ValueError, TypeError, UnsupportedAlgorithm, InternalError):
        raise SigningError(f"{private_path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{private_path}: a {type(key).__name__}, expected an Ed25519 private key")
    return SigningKey(key, private_path)


def generate_signing_key(home: str | Path | None = None, *, force: bool = False) -> SigningKey:
    """Create a new key in ``home`` (0600, atomically: a reader sees no key or the whole key).

    Refuses when one exists unless ``force`` (receipts signed by the old key then verify only with ``--key``).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_path, public_path = signing_key_paths(home)
    if private_path.exists() and not force:
        raise SigningError(f"{private_path}: a signing key exists already (pass --force to replace it)")
    try:
        private_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SigningError(
            f"{private_path.parent}: cannot create the key directory ({exc.strerror})"
        ) from None
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd, tmp = tempfile.mkstemp(prefix=f".{PRIVATE_KEY_FILE}.", suffix=".tmp", dir=private_path.parent)  # 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
            fh.flush()
            os.fsync(fh.fileno())
        if force:
            Path(tmp).replace(private_path)
        else:
            try:
                os.link(tmp, private_path)  # fails if another process created the key meanwhile
            except FileExistsError:
                raise SigningError(
                    f"{private_path}: a signing key exists already (pass --force to replace it)"
                ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
    key = SigningKey(private, private_path)
    _write_public(public_path, key.public)
    return key


def _write_public(path: Path, public: PublicKey) -> None:
    atomic_write_bytes(path, public.pem())


def ensure_signing_key(home: str | Path | None = None) -> tuple[SigningKey, bool]:
    """The key in ``home``, created on first use. Returns (key, created)."""
    private_path, public_path = signing_key_paths(home)
    if not private_path.exists():
        try:
            return generate_signing_key(home), True
        except SigningError:
            if not private_path.exists():  # not the race with another process: a real failure
                raise
    key = load_signing_key(home)
    if not public_path.is_file():
        _write_public(public_path, key.public)
    return key, False


def local_public_key(home: str | Path | None = None) -> PublicKey | None:
    """The public half of the key in ``home``, or None when there is none (never creates one)."""
    private_path, public_path = signing_key_paths(home)
    if public_path.is_file():
        return PublicKey.from_pem(public_path.read_bytes(), str(public_path))
    if private_path.exists():
        return load_signing_key(home).public
    return None


def trusted_key_ids(key: str | None = None, home: str | Path | None = None) -> frozenset[str]:
    """The signers a verifier trusts: the one ``key`` names (``--key``: a PEM file or a key id) or, by default,
    the local key in ``home`` (none when there is no local key: then nothing is trusted)."""
    if key is not None:
        return frozenset({parse_trusted_key(key)})
    local = local_public_key(home)
    return frozenset({local.key_id}) if local is not None else frozenset()


def parse_trusted_key(spec: str) -> str:
    """A key id from ``--key``: an ``ed25519:<64 hex>`` id, or a file holding a PEM public key."""
    s = spec.strip()
    if s.startswith(f"{ALGORITHM}:"):
        digest_hex = s.removeprefix(f"{ALGORITHM}:")
        if len(digest_hex) != 64 or any(c not in "0123456789abcdef" for c in digest_hex):
            raise SigningError(f"--key: {spec!r} is not a key id (expected ed25519:<64 lowercase hex>)")
        return s
    path = Path(spec)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SigningError(
            f"--key: {path}: cannot read ({exc.strerror}); expected a PEM public key file or a key id"
        ) from None
    return PublicKey.from_pem(data, str(path)).key_id


def dsse_pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def sign_body(body: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """The ``dsse`` and ``signer`` members that sign ``body`` (its canonical bytes) with ``key``."""
    payload = canonical_bytes(body)
    sig = key.sign(dsse_pae(PAYLOAD_TYPE, payload))
    return {
        "dsse": {
            "payloadType": PAYLOAD_TYPE,
            "payload": _b64(payload),
            "signatures": [{"keyid": key.key_id, "sig": _b64(sig)}],
        },
        "signer": key.public.to_json(),
    }


@attrs.frozen
class SignatureCheck:
    """The outcome of :func:`check_signature`: ``ok``, the signer's key id when one is named, and why not."""

    ok: bool
    key_id: str | None
    detail: str


def check_signature(receipt: Mapping[str, Any], trusted: Collection[str]) -> SignatureCheck:
    """Is ``receipt`` signed, over exactly its body, by a key whose id is in ``trusted``?

    The public key is the one embedded in ``signer`` (its id is the sha256 of its bytes, so trusting an id
    trusts exactly that key). Every way this can fail is named in ``detail``.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    envelope = receipt.get("dsse")
    signer = receipt.get("signer")
    if envelope is None and signer is None:
        return SignatureCheck(False, None, "the receipt is not signed (no dsse envelope)")
    if not isinstance(envelope, dict) or not isinstance(signer, dict):
        return SignatureCheck(False, None, "dsse and signer must both be JSON objects")
    env = cast("dict[str, Any]", envelope)
    who = cast("dict[str, Any]", signer)
    key_id = who.get("keyid") if isinstance(who.get("keyid"), str) else None
    if env.get("payloadType") != PAYLOAD_TYPE:
        return SignatureCheck(
            False, key_id, f"payloadType is {env.get('payloadType')!r}, expected {PAYLOAD_TYPE!r}"
        )
    payload = _unb64(env.get("payload"))
    if payload is None:
        return SignatureCheck(False, key_id, "dsse payload is not base64")
    if payload != canonical_bytes(receipt.get("body")):
        return SignatureCheck(
            False, key_id, "the signed payload is not this body (the body changed after signing)"
        )
    raw = _unb64(who.get("public_key"))
    if who.get("algorithm") != ALGORITHM or raw is None or len(raw) != _RAW_LEN:
        return SignatureCheck(False, key_id, "signer.public_key is not a base64 Ed25519 public key")
    actual_id = key_id_of(raw)
    if key_id != actual_id:
        return SignatureCheck(
            False, key_id, f"signer.keyid {key_id} is not the id of the embedded key ({actual_id})"
        )
    sigs = env.get("signatures")
    entries = (
        [cast("dict[str, Any]", s) for s in cast("list[object]", sigs) if isinstance(s, dict)]
        if isinstance(sigs, list)
        else []
    )
    mine = [s for s in entries if s.get("keyid") == key_id]
    if not mine:
        return SignatureCheck(False, key_id, f"the dsse envelope has no signature by {key_id}")
    sig = _unb64(mine[0].get("sig"))
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(sig or b"", dsse_pae(PAYLOAD_TYPE, payload))
    except InvalidSignature:
        return SignatureCheck(False, key_id, f"the signature by {key_id} does not verify over the payload")
    if key_id not in trusted:
        named = ", ".join(sorted(trusted)) or "none"
        return SignatureCheck(
            False,
            key_id,
            f"signed by {key_id}, which is not a trusted key (trusted: {named}); pass --key PUB to trust it",
        )
    return SignatureCheck(True, key_id, "")
