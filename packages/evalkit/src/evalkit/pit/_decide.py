"""What the harness trades of an agent's picks: decided from its own entry table, within the run's bounds.

Each of the first ``RunBounds.picks_per_session`` picks of a session is accepted (a row knowable at this bell,
not picked before in the session) or refused with its reason (``unknown``: no such row, or not a string;
``not_yet_knowable``; ``duplicate``); every pick past them is refused as ``over_limit`` without being looked at.
The decision event lists the accepted picks, the first ``RunBounds.rejected_sample`` refusals (each pick's text
bounded, :func:`evalkit.pit._bounds.pick_label`) and, when there are more, their count by reason in
``rejected_omitted``: what a flood of picks can make the trajectory hold is bounded, whatever the flood holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any, cast

import attrs

from evalkit.pit._bounds import RunBounds, pick_label

__all__ = ["Decision", "decide"]


@attrs.frozen
class Decision:
    picks: list[str]
    rejected: list[dict[str, str]]
    omitted: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        """The decision event's members (``rejected_omitted`` only when some refusals were not listed, so a decision
        within the sample reads as it always has)."""
        out: dict[str, Any] = {"picks": self.picks, "rejected": self.rejected}
        if self.omitted:
            out["rejected_omitted"] = dict(sorted(self.omitted.items()))
        return out


def decide(picks: Iterable[object], entries: Mapping[str, int], session_index: int, bounds: RunBounds) -> Decision:
    """Accept or refuse each pick (see the module); never raises on any pick, whatever its type or size."""
    accepted: list[str] = []
    rejected: list[dict[str, str]] = []
    omitted: dict[str, int] = {}
    seen: set[str] = set()
    it = iter(picks)
    for key in itertools.islice(it, bounds.picks_per_session):
        entry = entries.get(key) if isinstance(key, str) and type(key) is str else None
        status = "unknown" if entry is None else ("ok" if entry <= session_index else "not_yet_knowable")
        if status == "ok" and key in seen:
            status = "duplicate"
        if status == "ok":
            seen.add(cast("str", key))
            accepted.append(cast("str", key))
        elif len(rejected) < bounds.rejected_sample:
            rejected.append({"row_key": pick_label(key), "reason": status})
        else:
            omitted[status] = omitted.get(status, 0) + 1
    over = sum(1 for _ in it)
    if over:
        omitted["over_limit"] = over
    return Decision(accepted, rejected, omitted)
