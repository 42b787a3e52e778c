"""What a report shows, as JSON: one model per PIT run, eval or campaign, built from the files the CLI writes.

``evalkit report PATH --json`` prints exactly this model; the HTML page (:mod:`evalkit_cli._report_html`) and the
web view render it and nothing else, so every number on a page is a number of this JSON. Building a model reads
files and the store and writes nothing. Hidden tests contribute their name, pass/fail and reason only: their
expected values never enter a model (the results files do not hold them either).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from evalkit_core import ConfigError

__all__ = [
    "EVAL_KIND",
    "PIT_KIND",
    "classify",
    "load_model",
    "read_jsonl",
    "trajectory_cells",
]

PIT_KIND = "pit_run"
EVAL_KIND = "evalkit.eval"
CAMPAIGN_KIND = "evalkit.campaign"

Model = dict[str, Any]


class ReportError(ConfigError):
    """PATH is not something a report can be made of."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ReportError(f"{path}:{n}: not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise ReportError(f"{path}:{n}: expected a JSON object")
            rows.append(cast("dict[str, Any]", row))
    return rows


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


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
            first = _first_row(p)
            if first is not None and {"task_id", "public", "hidden"} <= first.keys():
                if "model_id" in first:
                    raise ReportError(
                        f"{path}: a campaign results file; report the campaign by its name instead ({expected})"
                    )
                return "eval", p
            raise ReportError(f"{path}: not an eval results file (its first line has no task_id/public/hidden)")
        data = _read_json(p)
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


def _first_row(p: Path) -> dict[str, Any] | None:
    try:
        with p.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    return cast("dict[str, Any]", row) if isinstance(row, dict) else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None


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


# ------------------------------------------------------------------------------------------------ PIT


CONTAMINATION_MEANING = (
    "main minus redacted: how much of the return needs the issuer's identity; main minus shifted: how much "
    "needs the real calendar. Near zero under the pit clock means the agent's edge does not come from "
    "recognising who filed or when (a model that memorised history gains in main, not in the masked arms)."
)


def _events(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield cast("dict[str, Any]", json.loads(line))


def trajectory_cells(path: Path) -> list[dict[str, Any]]:
    """Per cell (in trajectory order): arm, clock and one entry per session with its decision's picks,
    rejected picks, tool calls and line numbers. The probe's calls are a last pseudo-cell named ``probe``."""
    cells: list[dict[str, Any]] = []
    cell: dict[str, Any] | None = None
    session: dict[str, Any] | None = None
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            e = cast("dict[str, Any]", json.loads(line))
            kind = e.get("type")
            if kind == "cell_start":
                cell = {"arm": e.get("arm"), "clock": e.get("clock"), "sessions": []}
                cells.append(cell)
            elif kind == "agent_call":
                if "probe_item" in e and (cell is None or cell["arm"] != "probe"):
                    cell = {"arm": "probe", "clock": "", "sessions": []}
                    cells.append(cell)
                if cell is None:
                    continue
                session = {
                    "session_date": e.get("session_date"),
                    "line": n,
                    "lines": [n],
                    "tool_calls": 0,
                    "picks": 0,
                    "rejected": 0,
                }
                cell["sessions"].append(session)
            elif session is not None and kind in {"tool_call", "decision", "model_call", "probe_item",
                                                  "egress_attempt", "agent_error"}:
                session["lines"].append(n)
                if kind == "tool_call":
                    session["tool_calls"] += 1
                elif kind == "decision":
                    session["picks"] = len(e.get("picks") or [])
                    session["rejected"] = len(e.get("rejected") or [])
    return cells


def _pit_cumulative(
    body: Mapping[str, Any], traj: Path | None, bundle: Path | None, prices: Path | None
) -> dict[str, Any]:
    """Per cell, the running mean return per trade of the trades entered up to each session (its last value is
    the cell's total_return) when the release and prices are at hand; else the running count of accepted picks."""
    if traj is None or not traj.is_file():
        return {"measure": "none", "note": "the trajectory was not found: pass --trajectory", "series": []}
    decisions: list[tuple[str, str, list[str], str]] = []
    in_probe = False
    for e in _events(traj):
        kind = e.get("type")
        if kind == "agent_call" and "probe_item" in e:
            in_probe = True
        if kind == "decision" and not in_probe:
            decisions.append(
                (str(e.get("arm")), str(e.get("clock")), [str(k) for k in cast("list[object]", e.get("picks") or [])], str(e.get("session_date")))
            )
    order: list[tuple[str, str]] = []
    per_cell: dict[tuple[str, str], list[tuple[list[str], str]]] = {}
    for arm, clock, picks, date in decisions:
        if (arm, clock) not in per_cell:
            order.append((arm, clock))
            per_cell[arm, clock] = []
        per_cell[arm, clock].append((picks, date))
    scorer = _return_of(body, bundle, prices) if bundle is not None else None
    dates: list[str] = []
    if scorer is not None:
        dates = [s.isoformat() for s in scorer[1]]
    elif order:
        dates = [d for _, d in per_cell[order[0]]]  # the first cell's session dates (the shifted arm's are moved)
    series: list[dict[str, Any]] = []
    for arm, clock in order:
        values: list[float | int | None] = []
        if scorer is not None:
            ret, _sessions = scorer
            total, n = 0.0, 0
            for i, (picks, _) in enumerate(per_cell[arm, clock]):
                for k in picks:
                    r = ret(k, i)
                    if r is not None:
                        total += r
                        n += 1
                values.append(round(total / n, 6) if n else None)
        else:
            count = 0
            for picks, _ in per_cell[arm, clock]:
                count += len(picks)
                values.append(count)
        series.append({"arm": arm, "clock": clock, "values": values})
    if scorer is not None:
        note = ("running mean return per trade of the trades entered up to each session "
                "(the last point is the cell's total_return)")
        return {"measure": "mean_return", "note": note, "dates": dates, "series": series}
    why = "pass --bundle (and --prices) for returns" if bundle is None else "the release or prices could not be read"
    return {"measure": "accepted_picks", "note": f"running count of accepted picks per session ({why})",
            "dates": dates, "series": series}


def _return_of(body: Mapping[str, Any], bundle: Path, prices: Path | None) -> Any:
    """(return_of(row_key, session_number) -> float | None, sessions) with the harness's own inputs and rule."""
    from evalkit.pit import RunConfig, load_prices
    from evalkit.pit._runner import _check_window, answers_by_key, opens_for  # pyright: ignore[reportPrivateUsage]
    from evalkit_core import EvalkitError, Release, nyse

    try:
        recorded = cast("dict[str, Any]", body["config"])
        config = RunConfig.from_json({**recorded, "bundle_path": str(bundle)}, source="the receipt's config")
        release = Release.load(bundle)
        start, end = _check_window(config, release)
        release = release.select(forms=list(config.forms) or None, start=start, end=end)
        calendar = nyse()
        sessions = calendar.between(start, end)
        statement = cast("dict[str, Any]", body.get("prices") or {})
        if prices is None:
            return None
        loaded = load_prices(prices, source=str(statement.get("source") or ""), pulled_at=statement.get("pulled_at"))
    except (KeyError, TypeError, EvalkitError):
        return None
    answers = answers_by_key(release)
    opens = opens_for(loaded, answers) or {}
    every = calendar.all
    index = [calendar.index_of(s.date) for s in sessions]
    hold = config.hold_sessions

    def ret(row_key: str, i: int) -> float | None:
        truth = answers.get(row_key)
        if truth is None or i >= len(index):
            return None
        entry, exit_ = index[i], index[i] + hold
        ticker = truth.get("ticker")
        if not ticker or exit_ >= len(every):
            return None
        p_in, p_out = opens.get((ticker, every[entry].date)), opens.get((ticker, every[exit_].date))
        if p_in is None or p_out is None:
            return None
        return p_out / p_in - 1.0

    return ret, [s.date for s in sessions]


def _demo_inputs(body: Mapping[str, Any]) -> tuple[Path | None, Path | None]:
    """The built-in demo release and its prices, when the receipt is a demo run (same source, same digest)."""
    from evalkit_core._synth import DEMO, PRICE_SOURCE, demo_release_path

    statement = body.get("prices")
    if not isinstance(statement, dict) or cast("dict[str, Any]", statement).get("source") != PRICE_SOURCE:
        return None, None
    demo = demo_release_path()
    manifest = _read_json(demo / "release.json")
    want = cast("dict[str, Any]", body.get("binding") or {}).get("bundle_content_digest")
    if not isinstance(manifest, dict) or cast("dict[str, Any]", manifest).get("content_digest") != want:
        return None, None
    return demo, demo / DEMO.prices_file


def _verification(receipt: Mapping[str, Any], path: Path, traj: Path | None, bundle: Path | None,
                  prices: Path | None, home: Path | None) -> list[dict[str, str]]:
    if bundle is not None:
        from evalkit.pit import verify_pit_receipt

        found = verify_pit_receipt(path, bundle=bundle, trajectory=traj, prices=prices, home=home)
        return [{"name": c.name, "status": c.status, "detail": c.detail} for c in found]
    from evalkit_core import check_receipt, check_signature, digest, file_digest, trusted_key_ids

    body = cast("dict[str, Any]", receipt["body"])
    sig = check_signature(receipt, trusted_key_ids(home=home))
    ok_body = check_receipt(receipt)
    checks = [
        {"name": "signature", "status": "ok" if sig.ok else "MISMATCH", "detail": (sig.key_id or "") if sig.ok else sig.detail},
        {"name": "body_sha256", "status": "ok" if ok_body else "MISMATCH",
         "detail": "" if ok_body else f"body hashes to {digest(body)}"},
    ]
    want = cast("dict[str, Any]", body.get("binding") or {}).get("trajectory_sha256")
    if traj is not None and traj.is_file():
        got = file_digest(traj)
        checks.append({"name": "trajectory_sha256", "status": "ok" if got == want else "MISMATCH",
                       "detail": "" if got == want else f"{traj} has {got}"})
    else:
        checks.append({"name": "trajectory_sha256", "status": "not checked", "detail": "trajectory not found"})
    checks.append({"name": "replay", "status": "not checked",
                   "detail": "pass --bundle DIR (and --prices) to replay every cell"})
    return checks


def pit_model(
    path: Path, *, trajectory: Path | None, bundle: Path | None, prices: Path | None, home: Path | None
) -> Model:
    from evalkit_core import ReceiptError, read_receipt

    try:
        receipt = read_receipt(path)
    except ReceiptError as exc:
        raise ReportError(f"{path}: not a readable receipt ({exc})") from None
    body = cast("dict[str, Any]", receipt["body"])
    if trajectory is None:
        recorded = cast("dict[str, Any]", body.get("trajectory") or {}).get("path")
        candidates = [Path(str(recorded))] if recorded else []
        candidates += [path.parent / "trajectory.jsonl"]
        if recorded:
            candidates.append(path.parent / Path(str(recorded)).name)
        trajectory = next((c for c in candidates if c.is_file()), None)
    if bundle is None:
        bundle, demo_prices = _demo_inputs(body)
        prices = prices or demo_prices
    cells = cast("list[dict[str, Any]]", body.get("cells") or [])
    grid = [
        {
            "arm": c["arm"],
            "clock": c["clock"],
            "reachable": c.get("reachable"),
            "total_return": c.get("total_return"),
            "trades": c.get("trades"),
            "scored_trades": c.get("scored_trades"),
            "unpriced_trades": c.get("unpriced_trades"),
            "lookahead_trades": c.get("lookahead_trades"),
            "lookahead_checked": c.get("lookahead_checked"),
            "rejected_picks": sum(cast("dict[str, int]", c.get("rejected_picks") or {}).values()),
        }
        for c in cells
    ]
    contamination = cast("dict[str, dict[str, Any]]", body.get("contamination") or {})
    probe = cast("dict[str, Any]", body.get("probe") or {})
    protocol = cast("dict[str, Any]", body.get("protocol") or {})
    gaps = [str(g) for g in cast("list[object]", body.get("protocol_gaps") or [])]
    network = cast("dict[str, Any]", body.get("network") or {})
    config = cast("dict[str, Any]", body.get("config") or {})
    return {
        "kind": "pit",
        "title": f"PIT run {body.get('run_id')}",
        "source": {
            "receipt": str(path),
            "trajectory": str(trajectory) if trajectory else None,
            "bundle": str(bundle) if bundle else None,
            "prices": str(prices) if prices else None,
        },
        "run": {
            "run_id": body.get("run_id"),
            "valid": body.get("valid"),
            "completed": body.get("completed"),
            "invalidated_by": body.get("invalidated_by"),
            "masks": body.get("masks"),
            "agent": cast("dict[str, Any]", body.get("agent") or {}).get("spec"),
            "window": body.get("window"),
            "hold_sessions": config.get("hold_sessions"),
            "receipt_version": body.get("receipt_version"),
            "emitted_at": receipt.get("emitted_at"),
        },
        "grid": {"arms": list(config.get("arms") or []), "clocks": list(config.get("clocks") or []), "cells": grid},
        "cumulative": _pit_cumulative(body, trajectory, bundle, prices),
        "contamination": {
            "meaning": CONTAMINATION_MEANING,
            "deltas": [{"clock": clock, **v} for clock, v in contamination.items()],
        },
        "probe": {
            "verdict": probe.get("verdict"),
            "items_asked": probe.get("items_asked"),
            "date_recovered": probe.get("date_recovered"),
            "year_only": probe.get("year_only"),
            "issuer_recovered": probe.get("issuer_recovered"),
            "stride_rule": probe.get("stride_rule"),
            "items": [
                {k: i.get(k) for k in ("item", "row_key", "date_recovered", "year_only", "issuer_recovered",
                                       "issuer_matched_by", "answer")}
                for i in cast("list[dict[str, Any]]", probe.get("items") or [])
            ],
        },
        "protocol": {
            "complete": body.get("protocol_complete"),
            "gaps": gaps,
            "slots": [
                {"slot": slot, "gap": any(g.split("_", 1)[0] == slot.split("_", 1)[0] for g in gaps), "value": value}
                for slot, value in sorted(protocol.items())
            ],
        },
        "network": {
            "clean": network.get("clean"),
            "egress_attempts": network.get("egress_attempts"),
            "policy": network.get("policy"),
            "guard": network.get("guard"),
            "scope": network.get("scope"),
            "attempts": network.get("attempts") or [],
        },
        "verification": {
            "checks": _verification(receipt, path, trajectory, bundle, prices, home),
            "digests": {"body_sha256": receipt.get("body_sha256"), **cast("dict[str, Any]", body.get("binding") or {})},
        },
    }


# ------------------------------------------------------------------------------------------------ eval


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
