"""Export one decision point per session (prompt + metadata, no tools) for other evaluation frameworks.

Each sample shows the filings that became knowable at that session's opening bell under the chosen clock
(newest first, at most ``max_rows``), rendered exactly as the toolbox renders them for that arm (so the shifted
arm's dates are shifted), and asks for the row_keys to buy. Formats:

- ``inspect``: Inspect AI ``json_dataset`` records (``id``, ``input``, ``target``, ``metadata``);
- ``promptfoo``: promptfoo test cases (``description``, ``vars``, ``metadata``);
- ``lm-eval``: plain JSONL records (``id``, ``prompt``, ``metadata``) that ``datasets.load_dataset("json", ...)`` reads.

The answer key never enters an export: metadata holds only what the agent could see plus the run coordinates.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.pit._toolbox import CellView
from evalkit_core import (
    ARMS,
    Clock,
    ConfigError,
    Release,
    atomic_open,
    canonical_bytes,
    nyse,
    parse_clock,
)

__all__ = ["EXPORT_FORMATS", "export_samples", "session_samples"]

EXPORT_FORMATS = ("inspect", "promptfoo", "lm-eval")


def session_samples(
    release: Release,
    arm: str,
    clock: Clock | str,
    *,
    hold_sessions: int = 5,
    max_rows: int = 50,
    start: dt.date | None = None,
    end: dt.date | None = None,
) -> list[dict[str, Any]]:
    """One neutral sample per session in [start, end] (default: the release's window)."""
    if arm not in ARMS:
        raise ConfigError(f"--arm: unknown arm {arm!r}; expected one of {', '.join(ARMS)}")
    clk = parse_clock(str(clock))
    calendar = nyse()
    w0, w1 = release.window
    start, end = start or w0, end or w1
    if start < w0 or end > w1 or start > end:
        raise ConfigError(f"export window {start}..{end} is not inside the release window {w0}..{w1}")
    main = release.arm("main")
    view = CellView(arm, clk, release.arm(arm), main, calendar, release.shift)
    out: list[dict[str, Any]] = []
    for session in calendar.between(start, end):
        s_idx = calendar.index_of(session.date)
        lo = view.visible_count(s_idx - 1)
        hi = view.visible_count(s_idx)
        fresh = [view.render(i) for i in range(hi - 1, max(lo - 1, hi - 1 - max_rows), -1)]
        shown_date = (release.shift.session_date(session.date) if arm == "shifted" else session.date).isoformat()
        listing = "\n".join(json.dumps(r, sort_keys=True) for r in fresh) or "(no new filings)"
        prompt = (
            f"Trading session {shown_date}, opening bell. These SEC filings became knowable since the previous bell "
            f"({len(fresh)} shown of {hi - lo}):\n{listing}\n"
            f"Reply with a JSON list of the row_keys whose issuers you would buy at today's open, held {hold_sessions} "
            "sessions. An empty list is a valid answer."
        )
        out.append(
            {
                "id": f"{release.name}/{arm}/{clk}/{shown_date}",
                "prompt": prompt,
                "metadata": {
                    "release": release.name,
                    "bundle_content_digest": release.content_digest,
                    "arm": arm,
                    "clock": str(clk),
                    "session_date": shown_date,
                    "hold_sessions": hold_sessions,
                    "row_keys": [r["row_key"] for r in fresh],
                    "new_rows": hi - lo,
                },
            }
        )
    return out


def _format(sample: dict[str, Any], fmt: str) -> dict[str, Any]:
    if fmt == "inspect":
        return {"id": sample["id"], "input": sample["prompt"], "target": "", "metadata": sample["metadata"]}
    if fmt == "promptfoo":
        return {"description": sample["id"], "vars": {"prompt": sample["prompt"]}, "metadata": sample["metadata"]}
    return {"id": sample["id"], "prompt": sample["prompt"], "metadata": sample["metadata"]}


def export_samples(samples: Sequence[dict[str, Any]], out: str | Path, fmt: str) -> int:
    """Write samples as JSONL in ``fmt`` atomically; returns how many were written."""
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"--format: expected one of {', '.join(EXPORT_FORMATS)}, got {fmt!r}")
    with atomic_open(out) as fh:
        for s in samples:
            fh.write(canonical_bytes(_format(s, fmt)) + b"\n")
    return len(samples)
