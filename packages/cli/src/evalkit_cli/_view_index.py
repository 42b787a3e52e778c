"""The rows of ``evalkit view``'s index: one per run (a PIT run, an eval, a campaign), with what a person scans for.

Each row names the model or agent, a score (PIT: the total return of the main arm under the pit clock; eval: the
hidden pass rate; campaign: the share of graded rollouts passing every hidden test), the date (the receipt's
``emitted_at``), and a status:

- ``valid`` / ``invalid``: a PIT run as its receipt records it (``valid``: no network attempt, no leak); an eval
  or a campaign whose receipt's body hash holds and, for an eval, whose results file is the one it binds;
- ``in progress``: an eval whose journal (``results.jsonl.partial``) is locked by the eval writing it, or a
  campaign the store marks running; ``interrupted``: a journal nobody holds (the same command resumes it);
- ``unsigned``: eval results written without a receipt.

An eval is one row: a results file that a receipt found in the same scan binds is folded into that receipt's row.
Everything here reads; nothing is written (a journal's lock is tested with a shared lock held for an instant).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import attrs

__all__ = ["MAX_JSON_BYTES", "Item", "campaign_items", "describe", "fold"]

MAX_JSON_BYTES = 4 << 20


@attrs.frozen
class Item:
    kind: str  # "pit" | "eval" | "campaign" | "journal"
    target: str  # a file path, or a campaign name
    label: str
    home: str | None = None
    model: str = ""
    score: float | None = None
    score_fmt: str = "pct"  # how the page shows the score: pct (a rate) or ret (a signed return)
    score_of: str = ""  # what the score is
    date: str = ""
    status: str = ""
    detail: str = ""
    binds: str | None = None  # an eval receipt: the results file it binds (resolved), folded into its row


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _first_line(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.loads(fh.readline(MAX_JSON_BYTES) or "null")
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _pit(path: Path, receipt: dict[str, Any], body: dict[str, Any]) -> Item:
    agent = cast("dict[str, Any]", body.get("agent") or {})
    score = next((c.get("total_return") for c in cast("list[dict[str, Any]]", body.get("cells") or [])
                  if c.get("arm") == "main" and c.get("clock") == "pit"), None)  # fmt: skip
    return Item(
        "pit", str(path), f"PIT run {body.get('run_id')} ({agent.get('spec')}): {path}",
        model=str(agent.get("spec") or ""), score=score if isinstance(score, int | float) else None, score_fmt="ret",
        score_of="total return, main arm, pit clock", date=str(receipt.get("emitted_at") or ""),
        status="valid" if body.get("valid") is True else "invalid",
    )  # fmt: skip


def _eval(path: Path, receipt: dict[str, Any], body: dict[str, Any]) -> Item:
    from evalkit_core import check_receipt, file_digest

    solver = cast("dict[str, Any]", body.get("solver") or {})
    summary = cast("dict[str, Any]", body.get("summary") or {})
    files = cast("dict[str, Any]", body.get("files") or {})
    binding = cast("dict[str, Any]", body.get("binding") or {})
    results: Path | None = None
    if isinstance(files.get("results"), str):
        recorded = Path(files["results"])
        results = recorded if recorded.is_absolute() or body.get("files_relative_to") != "receipt" \
            else path.parent / recorded
    ok = check_receipt(receipt)
    try:
        ok = ok and results is not None and file_digest(results) == binding.get("results")
    except OSError:
        ok = False
    score = summary.get("hidden_pass_rate")
    name = str(solver.get("model_id") or solver.get("name") or "")
    return Item(
        "eval", str(path), f"eval {name}: {path}", model=name,
        score=score if isinstance(score, int | float) else None, score_of="hidden pass rate",
        date=str(receipt.get("emitted_at") or ""), status="valid" if ok else "invalid",
        detail=f"{summary.get('rollouts')} rollouts", binds=str(results.resolve()) if results is not None else None,
    )  # fmt: skip


def _results(path: Path) -> Item | None:
    first = _first_line(path)
    if not isinstance(first, dict) or not {"task_id", "public", "hidden"} <= cast("dict[str, Any]", first).keys() \
            or "model_id" in first:
        return None
    rows = 0
    passed = 0
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                rows += 1
                hidden = row["hidden"]
                passed += row.get("infra_error") is None and hidden["passed"] == hidden["total"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    return Item("eval", str(path), f"eval results (no receipt): {path}", score=passed / rows if rows else None,
                score_of="share of rollouts passing every hidden test", status="unsigned",
                detail=f"{rows} rollouts")  # fmt: skip


def _journal(path: Path) -> Item | None:
    from evalkit.grading._eval_journal import JOURNAL_KIND, journal_running

    try:
        with path.open("rb") as fh:
            header = json.loads(fh.readline(MAX_JSON_BYTES))
            done = sum(1 for _ in fh)
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict) or cast("dict[str, Any]", header).get("kind") != JOURNAL_KIND:
        return None
    h = cast("dict[str, Any]", header)
    solver = cast("dict[str, Any]", h.get("solver") or {})
    name = str(solver.get("model_id") or solver.get("name") or "")
    running = journal_running(path)
    return Item(
        "journal", str(path), f"eval {name}: {path}", model=name, score_of="verdicts so far",
        status="in progress" if running else "interrupted",
        detail=f"{done} of {h.get('items')} verdicts" + ("" if running else "; the same command resumes it"),
    )  # fmt: skip


def describe(path: Path) -> Item | None:
    """The row of one file found under the view's directories, or None when it is not a run."""
    from evalkit_cli._report_data import EVAL_KIND, PIT_KIND

    if path.name.endswith(".partial"):
        return _journal(path)
    if path.suffix == ".jsonl":
        return _results(path)
    data = _read_json(path)
    body = cast("dict[str, Any]", data).get("body") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        return None
    b = cast("dict[str, Any]", body)
    if b.get("kind") == PIT_KIND:
        return _pit(path, cast("dict[str, Any]", data), b)
    if b.get("kind") == EVAL_KIND:
        return _eval(path, cast("dict[str, Any]", data), b)
    return None


def fold(items: list[Item]) -> list[Item]:
    """One row per eval: drop a results file that an eval receipt in the list binds."""
    bound = {i.binds for i in items if i.kind == "eval" and i.binds}
    return [i for i in items if not (i.kind == "eval" and i.binds is None and str(Path(i.target).resolve()) in bound)]


def campaign_items(home: Path) -> list[Item]:
    from evalkit_core import check_receipt
    from evalkit_core.store import Store, store_exists
    from evalkit_router._report import default_out_dir  # pyright: ignore[reportPrivateUsage]

    if not store_exists(home):  # $EVALKIT_STORE (a PostgreSQL URL or a file) counts, as for every command
        return []
    out: list[Item] = []
    with Store.open(home) as store, store.snapshot() as db:
        found = [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in db.execute(
            "SELECT name, status, config, created_at FROM campaigns WHERE name IS NOT NULL ORDER BY name")]  # fmt: skip
        for name, status, config, created in found:
            graded = passed = 0
            for (result,) in db.execute("SELECT result FROM rollouts WHERE campaign_id = ? AND status = 'graded'"
                                        " AND infra_error IS NULL", (name,)):  # fmt: skip
                hidden = json.loads(str(result))["hidden"]
                graded += 1
                passed += hidden["passed"] == hidden["total"]
            try:  # as the campaign file lists them (the stored settings), else the identity's
                stored = cast("dict[str, Any]", json.loads(config))
                settings = cast("dict[str, Any]", stored.get("settings") or {})
                identity = cast("dict[str, Any]", stored.get("identity") or {})
                listed = cast("list[object]", list(settings.get("models") or identity.get("models") or []))
                models = [str(m) for m in listed]
            except (ValueError, AttributeError):
                models = []
            receipt = _read_json(default_out_dir(store, name) / "receipt.json")
            if status == "running":
                state = "in progress"
            elif isinstance(receipt, dict):
                state = "valid" if check_receipt(cast("dict[str, Any]", receipt)) else "invalid"
            else:
                state = status
            date = str(cast("dict[str, Any]", receipt).get("emitted_at") or created) if isinstance(receipt, dict) \
                else created
            out.append(Item(
                "campaign", name, f"campaign {name}", str(home), model=", ".join(models),
                score=passed / graded if graded else None, score_of="graded rollouts passing every hidden test",
                date=date, status=state, detail=f"{graded} rollouts graded",
            ))  # fmt: skip
    return out
