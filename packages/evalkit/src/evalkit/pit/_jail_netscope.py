"""The network scope of the agent's jail, measured from the host: whether the zygote has a network namespace of
its own, its interfaces and its routes (read from the host's ``/proc``, never declared)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["network_of"]


def network_of(pid: int | None, *, inside_bwrap: bool) -> tuple[bool, list[str], int]:
    """(own network namespace?, its interfaces, its routes not on loopback) of the zygote started as ``pid``,
    read from the host's /proc and compared with this process's own namespace. Inside bubblewrap the zygote is a
    descendant of ``pid`` (bubblewrap's outer process stays in the host's namespaces)."""
    if pid is None:
        return False, [], 0
    mine = _netns("self")
    candidates = _descendants(pid) if inside_bwrap else [pid]
    target, theirs = pid, None
    for c in candidates:
        theirs = _netns(str(c))
        if theirs is not None:
            target = c
            break
    if theirs is None or theirs == mine:
        return False, [], 0
    interfaces: list[str] = []
    routes = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{target}/net/dev").read_text().splitlines()[2:]:
            interfaces.append(line.split(":", 1)[0].strip())
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{target}/net/route").read_text().splitlines()[1:]:
            if line.split() and line.split()[0] != "lo":
                routes += 1
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{target}/net/ipv6_route").read_text().splitlines():
            if line.split() and line.split()[-1] != "lo":
                routes += 1
    return True, sorted(interfaces), routes


def _netns(pid: str) -> str | None:
    try:
        return str(Path(f"/proc/{pid}/ns/net").readlink())
    except OSError:
        return None


def _descendants(pid: int) -> list[int]:
    """Every descendant of ``pid``, parents before children (from /proc/*/stat)."""
    parent_of: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            parent_of[int(entry.name)] = int(fields[1])
    out: list[int] = []
    frontier = [pid]
    while frontier:
        nxt = [c for c, p in parent_of.items() if p in frontier]
        out += nxt
        frontier = nxt
    return out
