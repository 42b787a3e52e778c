"""``evalkit trajectory cat``: a PIT trajectory's canonical JSONL stream on stdout, plain or compressed on disk."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import typer

__all__ = ["app"]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="PIT trajectories: read one, whichever way it is stored (plain JSONL or zstd-compressed).",
)


@app.command("cat")
def cat(
    path: Path = typer.Argument(..., help="A trajectory file: plain JSONL or zstd frames (told by its first bytes)."),
) -> None:
    """Write the trajectory's canonical JSONL stream to stdout: the bytes the receipt's trajectory_sha256 is
    the sha256 of. A compressed file is decompressed; a damaged or truncated one is one line on stderr, exit 2."""
    from evalkit.pit import trajectory_chunks

    for _ in trajectory_chunks(path):  # read it whole first: a damaged file writes nothing to stdout
        pass
    out = sys.stdout.buffer
    try:
        for chunk in trajectory_chunks(path):
            out.write(chunk)
        out.flush()
    except BrokenPipeError:  # the reader had enough (`| head`): as cat, stop quietly with SIGPIPE's status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's own last flush
        raise SystemExit(128 + signal.SIGPIPE) from None
