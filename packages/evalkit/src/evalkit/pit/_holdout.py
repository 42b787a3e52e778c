"""Post-cutoff holdouts: the part of a release that no named model can have read about in training.

A model's training cutoff is a date declared in the model registry with the source of that statement. A session
is a holdout session for a set of models when it comes after every one of their cutoffs (strictly after: a window
that touches a cutoff day is never a holdout). :func:`holdout_plan` lists those sessions of a release with the
rows filed on each, by form; :func:`post_cutoff` is the one rule the run's receipt applies per model.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import attrs

from evalkit_core import ConfigError

__all__ = ["Cutoff", "cutoffs_from_registry", "holdout_plan", "post_cutoff"]


@attrs.frozen
class Cutoff:
    """A model's declared training cutoff and who says so."""

    model: str
    date: dt.date
    source: str

    def to_json(self) -> dict[str, str]:
        return {"model": self.model, "training_cutoff": self.date.isoformat(), "source": self.source}


def post_cutoff(window_start: dt.date, cutoff: dt.date | None) -> bool | None:
    """True when the window starts strictly after the cutoff; False when it starts on or before it (it overlaps
    what the model may have read); None when no cutoff is declared."""
    if cutoff is None:
        return None
    return window_start > cutoff


def cutoffs_from_registry(model_ids: Sequence[str]) -> list[Cutoff]:
    """Each model's declared cutoff from the registry; ConfigError names a model that declares none."""
    from evalkit_core.models import load_registry

    registry = load_registry()
    out: list[Cutoff] = []
    for model_id in model_ids:
        entry = registry.get(model_id)
        if entry.training_cutoff is None:
            raise ConfigError(
                f"--model {model_id}: the registry ({', '.join(registry.sources)}) declares no training_cutoff "
                "for it; add training_cutoff and training_cutoff_source to its table"
            )
        out.append(Cutoff(model_id, entry.training_cutoff, entry.training_cutoff_source or ""))
    return out


def holdout_plan(release: Any, cutoffs: Sequence[Cutoff]) -> dict[str, Any]:
    """The sessions of ``release``'s window that start after every cutoff, with the rows filed on each by form
    (rows filed on a day without a session count towards the next session), and the holdout window they make."""
    import polars as pl

    from evalkit_core import nyse

    if not cutoffs:
        raise ConfigError("--model: name at least one model")
    latest = max(c.date for c in cutoffs)
    start, end = release.window
    calendar = nyse()
    sessions = [s.date for s in calendar.between(start, end) if s.date > latest]
    frame = release.arm("main").select("partition_date", "form")
    by_session: dict[dt.date, dict[str, int]] = {d: {} for d in sessions}
    if sessions:
        rows = frame.filter(pl.col("partition_date") > latest).group_by("partition_date", "form").len()
        for day, form, n in rows.iter_rows():
            d = day if isinstance(day, dt.date) else dt.date.fromisoformat(str(day))
            target = next((s for s in sessions if s >= d), None)
            if target is None:
                continue
            counts = by_session[target]
            counts[str(form)] = counts.get(str(form), 0) + int(n)
    listed = [
        {"session": d.isoformat(), "rows": sum(c.values()), "by_form": dict(sorted(c.items()))}
        for d, c in by_session.items()
    ]
    total: dict[str, int] = {}
    for c in by_session.values():
        for form, n in c.items():
            total[form] = total.get(form, 0) + n
    window = (
        {"start": sessions[0].isoformat(), "end": sessions[-1].isoformat(), "sessions": len(sessions),
         "rows": sum(total.values()), "by_form": dict(sorted(total.items()))}
        if sessions
        else None
    )
    return {
        "release": release.name,
        "release_window": {"start": start.isoformat(), "end": end.isoformat()},
        "models": [c.to_json() for c in cutoffs],
        "latest_cutoff": latest.isoformat(),
        "holdout": window,
        "sessions": listed,
    }
