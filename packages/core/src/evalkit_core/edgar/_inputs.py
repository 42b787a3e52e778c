"""The record of one input file, as the release's provenance lists it."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["InputFile"]


@attrs.frozen
class InputFile:
    """An input the builder read: its name relative to the input it came from, sha256, size and kind."""

    name: str
    sha256: str
    size: int
    kind: str  # submissions | index | tickers
    members: int | None = None  # documents read from a zip archive

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "sha256": self.sha256,
            "bytes": self.size,
            "kind": self.kind,
        }
        if self.members is not None:
            out["members_read"] = self.members
        return out
