"""The report models of the verifier stack: an eval (results file and receipt) and a campaign in the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from evalkit_cli._report_common import Model, ReportError, read_jsonl

__all__ = ["campaign_model", "eval_model"]



def _family(task_id: str) -> str:
    return task_id.split("/", 1)[0]


def _all_pass(block: Mapping[str, Any]) -> bool:
    return bool(block.get("total")) and block.get("passed") == block.get("total")


def _rate_block(passed: int, n: int) -> dict[str, Any]:
    from evalkit.grading._stats import wilson_interval

    ci = wilson_interval(passed, n)
    return {"passed": passed, "n": n, "rate": round(passed / n, 6) if n else None,
            "low": ci[0] if ci else None, "high": ci[1] if ci else None}


def _failing(part: str, block: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in cast("list[Any]", block.get("tests") or []):
        if isinstance(t, list):  # a campaign row: [name, passed, reason]
            name, passed, reason = cast("list[Any]", t)
            detail = ""
        else:
            test = cast("dict[str, Any]", t)
            name, passed, reason = test.get("name"), test.get("passed"), test.get("reason")
            detail = str(test.get("detail") or "")
        if not passed:
            # a hidden test's detail is withheld by the verifier already; keep only its reason and that note
            out.append({"part": part, "test": name, "reason": reason, "detail": detail[:500]})
    return out


def _beside(recorded: str, receipt: Path | None) -> Path | None:
    """A path a receipt records: relative to the receipt's directory (how eval receipts record them), else as
    written (older receipts), else its name beside the receipt."""
    p = Path(recorded)
    candidates = [p]
    if receipt is not None:
        candidates = [receipt.parent / p, p, receipt.parent / p.name]
    return next((c for c in candidates if recorded and c.exists()), None)


def _eval_code(
    body: Mapping[str, Any] | None, tasks_dir: Path | None, receipt: Path | None = None
) -> tuple[dict[tuple[str, int], str], str]:
    """(code by (task_id, sample), note): replayed completions or the bank's references; a model eval keeps none."""
    if body is None:
        return {}, "a bare results file names no solver: its code is not recorded"
    solver = cast("dict[str, Any]", body.get("solver") or {})
    files = cast("dict[str, Any]", body.get("files") or {})
    name = solver.get("name")
    if name == "replay" and isinstance(files.get("solver_file"), str):
        replay = _beside(files["solver_file"], receipt)
        if replay is None or not replay.is_file():
            return {}, f"the replay file {files['solver_file']} was not found"
        code: dict[tuple[str, int], str] = {}
        counts: dict[str, int] = {}
        for row in read_jsonl(replay):
            tid, text = row.get("task_id"), row.get("completion")
            if isinstance(tid, str) and isinstance(text, str):
                j = counts.get(tid, 0)
                counts[tid] = j + 1
                code[tid, j] = text
        return code, f"code from the replay file {replay}"
    if name == "reference" and tasks_dir is not None and tasks_dir.is_dir():
        from evalkit import load_tasks, reference_solution

        return (
            {(t.id, 0): reference_solution(t) for t in load_tasks(tasks_dir)},
            f"the bank's reference solutions ({tasks_dir})",
        )
    if name == "model":
        return {}, "this model eval's results file keeps no answers (made before evalkit eval kept them)"
    return {}, "the candidate's code is not recorded"


def eval_model(path: Path, *, tasks: Path | None) -> Model:
    body: dict[str, Any] | None = None
    receipt_path: Path | None = None
    results = path
    if path.suffix != ".jsonl":
        from evalkit_core import ReceiptError, read_receipt

        try:
            body = cast("dict[str, Any]", read_receipt(path)["body"])
        except ReceiptError as exc:
            raise ReportError(f"{path}: not a readable receipt ({exc})") from None
        receipt_path = path
        files = cast("dict[str, Any]", body.get("files") or {})
        recorded = str(files.get("results") or "")
        found = _beside(recorded, path)
        if found is None or not found.is_file():
            raise ReportError(f"{path}: field 'files.results': {recorded} not found")
        results = found
        if tasks is None and isinstance(files.get("tasks"), str):
            tasks = _beside(files["tasks"], path)
    rows = read_jsonl(results)
    for n, r in enumerate(rows, 1):
        if not {"task_id", "public", "hidden"} <= r.keys():
            raise ReportError(f"{results}:{n}: expected fields task_id, public and hidden")
    from evalkit import summarize

    n_tasks = len({str(r["task_id"]) for r in rows})
    if body is not None:
        n_tasks = int(cast("dict[str, Any]", body.get("tasks") or {}).get("count") or n_tasks)
    summary = summarize(rows, n_tasks)
    scored = [r for r in rows if r.get("infra_error") is None]
    rates: dict[str, Any] = {}
    for part in ("public", "hidden"):
        blocks = [cast("dict[str, Any]", r[part]) for r in scored if cast("dict[str, Any]", r[part]).get("total")]
        rates[part] = _rate_block(sum(_all_pass(b) for b in blocks), len(blocks))
    families: list[dict[str, Any]] = []
    for fam in sorted({_family(str(r["task_id"])) for r in rows}):
        mine = [r for r in scored if _family(str(r["task_id"])) == fam]
        entry: dict[str, Any] = {"family": fam, "rollouts": len(mine)}
        for part in ("public", "hidden"):
            blocks = [cast("dict[str, Any]", r[part]) for r in mine if cast("dict[str, Any]", r[part]).get("total")]
            entry[part] = _rate_block(sum(_all_pass(b) for b in blocks), len(blocks))
        pub, hid = entry["public"]["rate"], entry["hidden"]["rate"]
        entry["gap"] = round(pub - hid, 6) if pub is not None and hid is not None else None
        families.append(entry)
    code, code_note = _eval_code(body, tasks, receipt_path)
    kept = {(str(r["task_id"]), int(r.get("sample") or 0)): str(r["completion"]) for r in rows
            if isinstance(r.get("completion"), str)}
    if kept:  # a model eval keeps its answers in the results rows
        code, code_note = kept, f"the model's answers, kept in the results file {results}"
    table: list[dict[str, Any]] = []
    for r in rows:
        pub, hid = cast("dict[str, Any]", r["public"]), cast("dict[str, Any]", r["hidden"])
        tid, sample = str(r["task_id"]), int(r.get("sample") or 0)
        table.append({
            "task_id": tid,
            "family": _family(tid),
            "sample": sample,
            "public_passed": pub.get("passed"),
            "public_total": pub.get("total"),
            "hidden_passed": hid.get("passed"),
            "hidden_total": hid.get("total"),
            "status": "infra_error" if r.get("infra_error") is not None else (
                "pass" if _all_pass(pub) and (_all_pass(hid) or not hid.get("total")) else "fail"),
            "infra_error": r.get("infra_error"),
            "failing": _failing("public", pub) + _failing("hidden", hid),
            "code": code.get((tid, sample)),
        })
    solver = cast("dict[str, Any]", (body or {}).get("solver") or {})
    return {
        "kind": "eval",
        "title": f"eval {solver.get('model_id') or solver.get('name') or results.name}",
        "source": {"receipt": str(receipt_path) if receipt_path else None, "results": str(results),
                   "tasks": str(tasks) if tasks else None},
        "solver": solver or None,
        "summary": summary,
        "rates": rates,
        "families": families,
        "code_note": code_note,
        "rollouts": table,
        "digests": {
            "settings": (body or {}).get("settings_digest"),
            "tasks": cast("dict[str, Any]", (body or {}).get("tasks") or {}).get("digest"),
            "binding": (body or {}).get("binding"),
        },
    }


# ------------------------------------------------------------------------------------------------ campaign

SWEEP = (0.0, 0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def campaign_model(name: str, *, home: Path | None) -> Model:
    from evalkit.grading._stats import INTERVAL_METHOD
    from evalkit_core.store import Store
    from evalkit_router import calibrate, campaign_report, digest_of_rows, split_tasks, sweep
    from evalkit_training import campaign_rollouts

    with Store.open(home) as store:
        report = campaign_report(store, name)
        rollouts = campaign_rollouts(store, name)
    as_json = report.to_json()
    summary = cast("dict[str, Any]", as_json["summary"])
    intervals = cast("dict[str, Any]", as_json["intervals"])
    rows = [dict(r) for r in report.rows]
    models = [str(m) for m in summary["models"]]
    task_ids = sorted({str(r["task_id"]) for r in rows})

    def interval(model: str) -> dict[str, Any]:
        return cast("dict[str, Any]", intervals["per_model"].get(model) or {})

    per_model = [
        {
            "model": m["model"],
            "pass@1": m["hidden_pass@1"],
            "pass@1_ci95": interval(m["model"]).get("hidden_pass@1_ci95"),
            "public_pass@1": m["public_pass@1"],
            "public_pass@1_ci95": interval(m["model"]).get("public_pass@1_ci95"),
            "pass@k": m["pass@k"].get(str(summary["k"])),
            "pass@k_se": cast("dict[str, Any]", interval(m["model"]).get("pass@k_se") or {}).get(str(summary["k"])),
            "solved_tasks": m["solved_tasks"],
            "cost_usd": float(m["cost_usd"]),
            "cost_per_solved_task_usd": float(m["cost_per_solved_task_usd"]) if m["cost_per_solved_task_usd"] is not None else None,
            "infra_errors": m["infra_errors"],
            "graded": m["graded"],
        }
        for m in cast("list[dict[str, Any]]", summary["per_model"])
    ]
    # the heat map: share of a model's samples of a task that were solved (public and hidden)
    solved: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        cell = solved.setdefault((str(r["model_id"]), str(r["task_id"])), [0, 0])
        if r["status"] == "graded" and r["infra_error"] is None:
            cell[0] += bool(r["solved"])
            cell[1] += 1
    heat = [[round(solved[m, t][0] / solved[m, t][1], 6) if (m, t) in solved and solved[m, t][1] else None
             for t in task_ids] for m in models]
    frontier: dict[str, Any] = {"points": [], "note": ""}
    if len(models) >= 2 and len(task_ids) >= 4:
        cal_tasks, eval_tasks = split_tasks(task_ids, fraction=0.5, seed=0)
        cal = calibrate(rows, campaign=name, results_digest=digest_of_rows(report.rows), tasks=cal_tasks)
        reports = sweep(cal, rows, tasks=eval_tasks, thresholds=SWEEP)
        if reports:
            first = reports[0]
            frontier = {
                "note": (f"calibrated on {len(cal_tasks)} tasks, evaluated out of sample on {len(eval_tasks)} "
                         "(split:0.5:0, as evalkit route simulate --sweep)"),
                "points": [{"threshold": r.threshold, "pass_rate": round(r.routed_pass_rate, 6),
                            "pass_rate_ci95": r.ci95(r.routed_pass_rate),
                            "cost_usd": round(float(r.routed_cost), 6), "escalations": r.escalations}
                           for r in reports],
                "always_strong": {"model": first.strongest, "pass_rate": round(first.strongest_pass_rate, 6),
                                  "pass_rate_ci95": first.ci95(first.strongest_pass_rate),
                                  "cost_usd": round(float(first.strongest_cost), 6)},
                "always_cheap": {"model": first.cheapest, "pass_rate": round(first.cheapest_pass_rate, 6),
                                 "pass_rate_ci95": first.ci95(first.cheapest_pass_rate),
                                 "cost_usd": round(float(first.cheapest_cost), 6)},
                "method": INTERVAL_METHOD + " over the routed decisions",
            }
    else:
        frontier["note"] = "routing needs at least two models and four tasks"
    flags, flag_note = _hacking_flags(rollouts)
    code = {(r.model, r.task_id, r.sample): r.completion for r in rollouts.records}
    table = [
        {
            "model": r["model_id"],
            "task_id": r["task_id"],
            "sample": r["sample"],
            "status": "infra_error" if r["infra_error"] is not None else ("pass" if r["solved"] else "fail"),
            "public_passed": cast("dict[str, Any]", r["public"])["passed"],
            "public_total": cast("dict[str, Any]", r["public"])["total"],
            "hidden_passed": cast("dict[str, Any]", r["hidden"])["passed"],
            "hidden_total": cast("dict[str, Any]", r["hidden"])["total"],
            "cost_usd": float(str(r["cost"])),
            "failing": _failing("public", cast("dict[str, Any]", r["public"]))
            + _failing("hidden", cast("dict[str, Any]", r["hidden"])),
            "flags": flags.get(str(r["key"]), []),
            "code": code.get((str(r["model_id"]), str(r["task_id"]), int(cast("int", r["sample"])))),
        }
        for r in rows
    ]
    digests = cast("dict[str, Any]", report.to_json()["digests"])
    return {
        "kind": "campaign",
        "title": f"campaign {name}",
        "source": {"campaign": name, "status": report.status},
        "k": summary["k"],
        "intervals": intervals["method"],
        "tasks": summary["tasks"],
        "cost_usd": float(summary["cost_usd"]),
        "models": per_model,
        "frontier": frontier,
        "heatmap": {"models": models, "tasks": task_ids, "solved": heat},
        "hacking": {"note": flag_note, "flagged": sum(1 for r in table if r["flags"]),
                    "by_check": _count_checks(table)},
        "rollouts": table,
        "digests": digests,
    }


def _hacking_flags(rollouts: Any) -> tuple[dict[str, list[str]], str]:
    """Reward-hacking checks (evalkit_training) on every graded rollout, from the stored verdicts: no re-grading."""
    from evalkit import load_tasks
    from evalkit_training import check_rollout

    tasks_dir = cast("Path | None", rollouts.tasks_dir)
    if tasks_dir is None or not tasks_dir.is_dir():
        return {}, f"not checked: the campaign's task bank {tasks_dir} was not found"
    by_id = {t.id: t for t in load_tasks(tasks_dir)}
    out: dict[str, list[str]] = {}
    for rec in cast("Sequence[Any]", rollouts.records):
        task = by_id.get(rec.task_id)
        if task is None or rec.grading is None or task.digest != rec.task_digest:
            continue
        report = check_rollout(task, rec.completion, rec.grading, ())
        if report.flagged:
            out[rec.rollout_key] = sorted(str(c) for c in report.tripped)
    return out, f"static and dynamic checks over the stored verdicts, tasks from {tasks_dir}"


def _count_checks(table: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in table:
        for f in cast("list[str]", r["flags"]):
            counts[f] = counts.get(f, 0) + 1
    return dict(sorted(counts.items()))
