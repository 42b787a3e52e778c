"""The trajectory on disk: one stream of canonical JSON lines, stored plain or zstd-compressed, and its digest.

The stream is the canonical, documented thing: one RFC 8785 JSON object per line, each ending in ``\\n``. The
receipt's ``binding.trajectory_sha256`` (and ``trajectory.sha256``) is the sha256 of that stream, whichever way
it is stored. A plain trajectory is the stream itself (so a receipt from before compression, whose digest was
over the file's bytes, means the same thing). A compressed one is a sequence of zstd frames (RFC 8878) whose
concatenated content is the stream: ``zstd -dc trajectory.jsonl.zst | sha256sum`` recomputes the digest.

A writer compresses when the path ends in ``.zst``; a reader decides by the first four bytes (the zstd frame
magic ``28 b5 2f fd``), never by the name: a plain stream starts with ``{``, so the two never meet. Frames hold about :data:`FRAME_BYTES` of the stream each, so neither
side holds more than one frame (and one line) in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Final, cast

from evalkit_core import EvalkitError

__all__ = [
    "ENCODINGS",
    "FRAME_BYTES",
    "ZSTD_MAGIC",
    "TrajectoryFileError",
    "TrajectorySink",
    "encoding_for",
    "line_bound",
    "stored_encoding",
    "trajectory_chunks",
    "trajectory_digest",
    "trajectory_lines",
]

ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
FRAME_BYTES: Final = 8 << 20  # stream bytes per zstd frame (and the read size)
ZSTD_LEVEL: Final = 3  # zstd's own default: about 20x on a stub run's tool answers at disk speed
ENCODINGS: Final = ("jsonl", "jsonl+zstd")
_CHUNK: Final = 1 << 20


def _pyarrow() -> Any:
    """pyarrow (a dependency of evalkit_core; untyped), imported on first use: its zstd codec."""
    return importlib.import_module("pyarrow")


class TrajectoryFileError(EvalkitError):
    """A trajectory file that cannot be read as one (missing, unreadable, a damaged or truncated zstd stream)."""


def encoding_for(path: str | Path) -> str:
    """How a run stores its trajectory at ``path``: ``jsonl+zstd`` when the name ends in ``.zst``, else ``jsonl``."""
    return "jsonl+zstd" if str(path).endswith(".zst") else "jsonl"


def stored_encoding(path: str | Path) -> str:
    """How the file at ``path`` is stored, by its first bytes: ``jsonl+zstd`` (zstd frame magic) or ``jsonl``."""
    with _opened(Path(path)) as fh:
        return "jsonl+zstd" if fh.read(len(ZSTD_MAGIC)) == ZSTD_MAGIC else "jsonl"


class TrajectorySink:
    """Writes the stream to ``fh`` (plain, or in zstd frames of about :data:`FRAME_BYTES`) and hashes it.

    :meth:`finish` writes what is buffered; :attr:`digest` is then the stream's ``sha256:<hex>``."""

    def __init__(self, fh: IO[bytes], encoding: str) -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown trajectory encoding {encoding!r}")
        self.encoding = encoding
        self._fh = fh
        self._hash = hashlib.sha256()
        self._buf: list[bytes] = []
        self._buffered = 0
        self.bytes = 0
        self.stored_bytes = 0
        self._codec: Any = None

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        self.bytes += len(data)
        if self.encoding == "jsonl":
            self._fh.write(data)
            self.stored_bytes += len(data)
            return
        self._buf.append(data)
        self._buffered += len(data)
        if self._buffered >= FRAME_BYTES:
            self._frame()

    def _frame(self) -> None:
        if not self._buffered:
            return
        if self._codec is None:
            self._codec = _pyarrow().Codec("zstd", compression_level=ZSTD_LEVEL)
        frame = cast("bytes", self._codec.compress(b"".join(self._buf), asbytes=True))
        self._buf, self._buffered = [], 0
        self._fh.write(frame)
        self.stored_bytes += len(frame)

    def finish(self) -> None:
        self._frame()

    @property
    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[IO[bytes]]:
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise TrajectoryFileError(f"{path}: cannot read the trajectory ({exc.strerror or exc})") from None
    with fh:
        yield fh


def trajectory_chunks(path: str | Path) -> Generator[bytes]:
    """The stream of the trajectory at ``path``, in chunks of at most about a MiB, decompressed if it is stored
    compressed. A damaged or truncated compressed file raises :class:`TrajectoryFileError` (after the chunks
    that could be read)."""
    p = Path(path)
    with _opened(p) as fh:
        compressed = fh.read(len(ZSTD_MAGIC)) == ZSTD_MAGIC
        fh.seek(0)
        if not compressed:
            while chunk := fh.read(_CHUNK):
                yield chunk
            return
        pa = _pyarrow()
        try:
            stream = pa.CompressedInputStream(pa.PythonFile(fh, mode="r"), "zstd")
            while chunk := cast("bytes", stream.read(_CHUNK)):
                yield chunk
        except (OSError, ValueError) as exc:  # pyarrow's ArrowIOError (an OSError) and ArrowInvalid (a ValueError)
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise TrajectoryFileError(f"{p}: not a readable zstd trajectory ({why})") from None


def trajectory_lines(path: str | Path, max_line: int | None = None) -> Generator[bytes]:
    """The lines of the stream, each with its ``\\n`` (a last line without one is yielded as it is). With
    ``max_line``, a line longer than that many bytes raises :class:`TrajectoryFileError` before it is held whole:
    a few kilobytes of zstd can hold gigabytes without a newline, and a reader must not hold what no run writes."""
    pending: list[bytes] = []  # the start of a line longer than what was read so far
    held = 0
    for chunk in trajectory_chunks(path):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start : end + 1]
            if max_line is not None and held + len(piece) > max_line:
                raise _too_long(path, max_line)
            if pending:
                pending.append(piece)
                piece, pending, held = b"".join(pending), [], 0
            yield piece
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
            held += len(chunk) - start
            if max_line is not None and held > max_line:
                raise _too_long(path, max_line)
    if pending:
        yield b"".join(pending)


def line_bound(body: Mapping[str, Any] | None) -> int:
    """The longest line a run bound by this receipt body can have written (its ``bounds.trajectory_cell_bytes``,
    else the default cell bound, plus a MiB of slack): what every reader of a receipt's trajectory passes to
    :func:`trajectory_lines` as ``max_line``."""
    from evalkit.pit._bounds import RunBounds

    bounds = cast("object", body.get("bounds")) if body is not None else None
    bound = cast("Mapping[str, object]", bounds).get("trajectory_cell_bytes") if isinstance(bounds, Mapping) else None
    if type(bound) is not int or bound < 1:
        bound = RunBounds().trajectory_cell_bytes
    return bound + (1 << 20)


def _too_long(path: str | Path, max_line: int) -> TrajectoryFileError:
    return TrajectoryFileError(f"{path}: a line longer than {max_line} bytes (no run writes one that long)")


def trajectory_digest(path: str | Path) -> str:
    """``sha256:<hex>`` of the trajectory's stream (the decompressed content of a compressed file)."""
    h = hashlib.sha256()
    for chunk in trajectory_chunks(path):
        h.update(chunk)
    return "sha256:" + h.hexdigest()
