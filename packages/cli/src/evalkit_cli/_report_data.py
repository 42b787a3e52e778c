"""What a report shows, as JSON: one model per PIT run, eval or campaign, built from the files the CLI writes.

``evalkit report PATH --json`` prints exactly this model; the HTML page (:mod:`evalkit_cli._report_html`) and the
web view render it and nothing else, so every number on a page is a number of this JSON. Building a model reads
files and the store and writes nothing. Hidden tests contribute their name, pass/fail and reason only: their
expected values never enter a model (the results files do not hold them either).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from evalkit_cli._report_common import (
    CAMPAIGN_KIND,
    EVAL_KIND,
    PIT_KIND,
    Model,
    ReportError,
    first_row,
    read_json,
    read_jsonl,
)
from evalkit_cli._report_eval import campaign_model, eval_model
from evalkit_cli._report_pit import pit_model, trajectory_cells

__all__ = [
    "CAMPAIGN_KIND",
    "EVAL_KIND",
    "PIT_KIND",
    "Model",
    "ReportError",
    "campaign_model",
    "classify",
    "eval_model",
    "load_model",
    "pit_model",
    "read_jsonl",
    "trajectory_cells",
]


def classify(path: str, home: Path | None = None) -> tuple[str, Path | str]:
    """What PATH is: ``("pit", receipt)``, ``("eval", receipt or results file)`` or ``("campaign", name)``.

    A directory holding a ``receipt.json`` is that receipt; a path that does not exist is a campaign name in the
    store. Anything else raises :class:`ReportError` (exit 2) naming what was expected.
    """
    p = Path(path)
    expected = "expected a PIT receipt, an eval results file or receipt, or a campaign name"
    if p.is_dir():
        if (p / "receipt.json").is_file():
            p = p / "receipt.json"
        elif (p / "results.jsonl").is_file():
            p = p / "results.jsonl"
        else:
            raise ReportError(f"{path}: a directory without receipt.json or results.jsonl ({expected})")
    if p.is_file():
        if p.suffix == ".jsonl":
            first = first_row(p)
            if first is not None and {"task_id", "public", "hidden"} <= first.keys():
                if "model_id" in first:
                    raise ReportError(
                        f"{path}: a campaign results file; report the campaign by its name instead ({expected})"
                    )
                return "eval", p
            raise ReportError(f"{path}: not an eval results file (its first line has no task_id/public/hidden)")
        data = read_json(p)
        body: object = cast("dict[str, Any]", data).get("body") if isinstance(data, dict) else None
        kind = cast("dict[str, Any]", body).get("kind") if isinstance(body, dict) else None
        if kind == PIT_KIND:
            return "pit", p
        if kind == EVAL_KIND:
            return "eval", p
        if kind == CAMPAIGN_KIND:
            name = cast("dict[str, Any]", body).get("campaign")
            if isinstance(name, str):
                return "campaign", name
        raise ReportError(f"{path}: field 'body.kind' is {kind!r}, not a PIT, eval or campaign receipt ({expected})")
    if p.suffix in {".json", ".jsonl"} or "/" in path:
        raise ReportError(f"{path}: no such file ({expected})")
    from evalkit_core.store import STORE_FILE, Store, evalkit_home, store_exists

    where = (home if home is not None else evalkit_home()) / STORE_FILE
    if not store_exists(home):  # never create a store to look a name up in it ($EVALKIT_STORE counts)
        raise ReportError(f"{path}: not a file, and there is no store at {where} to find a campaign in ({expected})")
    with Store.open(home) as store, store.snapshot() as db:
        names = [str(r[0]) for r in db.execute("SELECT name FROM campaigns WHERE name IS NOT NULL ORDER BY name")]
        where = store.path
    if path not in names:
        known = f"; campaigns in the store: {', '.join(names)}" if names else "; the store has no campaigns"
        raise ReportError(f"{path}: not a file, and no campaign of that name in {where} ({expected}){known}")
    return "campaign", path



def load_model(
    path: str,
    *,
    home: Path | None = None,
    trajectory: Path | None = None,
    bundle: Path | None = None,
    prices: Path | None = None,
    tasks: Path | None = None,
) -> Model:
    kind, target = classify(path, home)
    if kind == "pit":
        return pit_model(Path(target), trajectory=trajectory, bundle=bundle, prices=prices, home=home)
    if kind == "eval":
        return eval_model(Path(target), tasks=tasks)
    return campaign_model(str(target), home=home)
