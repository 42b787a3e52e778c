"""The zygote's program: its own source, the codec's and the payload's, compiled once and kept like bytecode.

A zygote is handed the marshalled program (in a memfd) rather than 50 kB of source to compile; the compiled form
is cached beside this module in ``__pycache__``, with the trust of a ``.pyc`` (whoever can write there can already
change evalkit), and used only when the source it holds is the one asked for, byte for byte.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys
import sysconfig
import threading
import zlib
from functools import cache
from pathlib import Path

__all__ = ["sandbox_payload_source"]

def _own_source(name: str) -> str:
    """The source of a module of this package, read as text for a zygote's command line (beside this file: a
    zipped install could not run the wall's ``python -c`` anyway, and ``importlib.resources`` alone costs a
    grading command's start tens of milliseconds)."""
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


@cache
def _zygote_source() -> str:
    return _own_source("_zygote_child.py")


@cache
def _codec_source() -> str:
    return _own_source("_codec.py")


@cache
def interpreter_reachable() -> bool:
    """Whether a uid of no privilege can read this interpreter's standard library on the host's filesystem (under
    bubblewrap the jail makes it so; without it, an interpreter under ``/root`` is not)."""
    path = Path(sysconfig.get_paths()["stdlib"])
    for d in [*reversed(path.parents), path]:
        try:
            if not d.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


@cache
def zygote_program(payload: str, optimize: int) -> bytes:
    """The zygote's whole program (its own source, the codec's, then the payload's), compiled and marshalled. A
    zygote handed this starts some 15 ms of CPU sooner than one given the 50 kB of source to compile, and there is
    one zygote per worker."""
    appended = [_strip_future(src) for src in (_codec_source(), payload)]
    return compiled_program("\n".join([_zygote_source(), *appended, "_zygote_main()"]), optimize)


def compiled_program(source: str, optimize: int, cache_dir: Path | None = None) -> bytes:
    """``source`` compiled and marshalled, kept in ``cache_dir`` (default: this module's own ``__pycache__``, where
    Python keeps its bytecode, with the same trust) under a name from its checksum, with the whole source in front:
    a file is used only when the source it holds is this one, byte for byte, and an interpreter of this exact
    version wrote it. Where the directory cannot be written (or bytecode writing is off) the source is compiled on
    each start."""
    text = source.encode()
    head = f"evalkit wall program\n{sys.version}\n{optimize}\n{len(text)}\n".encode()
    name = f"wall-zygote.{sys.implementation.cache_tag}.{zlib.crc32(text):08x}.bin"
    path = (cache_dir or Path(__file__).with_name("__pycache__")) / name
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        if data[: len(head)] == head and data[len(head) : len(head) + len(text)] == text:
            return data[len(head) + len(text) :]
    program = marshal.dumps(compile(source, "<string>", "exec", dont_inherit=True, optimize=optimize))
    if not sys.dont_write_bytecode:
        tmp = path.with_name(f"{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(exist_ok=True)
            tmp.write_bytes(head + text + program)
            tmp.replace(path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return program


def _strip_future(source: str) -> str:
    """A module's source made fit to follow another one (a ``from __future__`` import must come first)."""
    return "\n".join("" if ln.startswith("from __future__ import") else ln for ln in source.splitlines())


def sandbox_payload_source() -> str:
    return _own_source("_sandbox_child.py")


