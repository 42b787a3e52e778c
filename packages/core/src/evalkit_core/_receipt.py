"""The receipt envelope ``{body, body_sha256, emitted_at}``, atomic writes, and binding checks.

``emitted_at`` is the only wall-clock value and sits outside the hash: two runs of one configuration over one
release give byte-identical bodies and body hashes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import attrs

from evalkit_core._canonical import canonical_bytes, digest, file_digest
from evalkit_core._errors import ConfigError, ReceiptError
from evalkit_core._jsonfile import read_json_object

if TYPE_CHECKING:
    from evalkit_core._signing import SigningKey

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


def check_output_path(path: str | Path, what: str = "output") -> Path:
    """Refuse, before any work, a path that cannot be written as a file: a directory, or one under a file.

    ``what`` names the option or field in the one-line error (``--out``, ``receipt``)."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{what} {target}: is a directory; expected a file path")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{what} {target}: {parent} is a file, not a directory")
            break
    return target


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """Open a temp file beside ``path`` for binary writing; rename it over ``path`` only if the block succeeds.

    On any error the temp file is removed and ``path`` is left as it was, and so are its directories: those made
    here (a run refused before its first cell, say) are removed again when nothing else was put in them.
    """
    target = check_output_path(path)
    made = [d for d in target.parents if not d.exists()]  # deepest first
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.fchmod(fd, 0o644)  # mkstemp makes 0600; receipts and releases are meant to be read by others
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        for d in made:
            with contextlib.suppress(OSError):  # not empty (another writer's file): kept
                d.rmdir()
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file and a rename: readers see the old file or the new one."""
    with atomic_open(path) as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


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
        from evalkit_core._signing import sign_body

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
