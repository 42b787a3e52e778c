"""The report model of a PIT run: its receipt, verification, cells, cumulative returns and trajectory."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from evalkit_cli._report_common import Model, ReportError, read_json

__all__ = ["pit_model", "trajectory_cells", "trajectory_event"]



CONTAMINATION_MEANING = (
    "main minus redacted: how much of the return needs the issuer's identity; main minus shifted: how much "
    "needs the real calendar. Near zero under the pit clock means the agent's edge does not come from "
    "recognising who filed or when (a model that memorised history gains in main, not in the masked arms)."
)


def _lines(path: Path, max_line: int) -> Iterator[bytes]:
    """The trajectory's lines, plain or zstd-compressed (told by its first bytes), none longer than ``max_line``
    (a few KB of zstd can hold gigabytes without a newline): a file that breaks either is a :class:`ReportError`."""
    from evalkit.pit import TrajectoryFileError, trajectory_lines

    try:
        yield from trajectory_lines(path, max_line)
    except TrajectoryFileError as exc:
        raise ReportError(str(exc)) from None


def trajectory_event(path: Path, n: int, line: bytes) -> dict[str, Any]:
    """Line ``n`` (from 0) of a trajectory as its event, or one :class:`ReportError` naming the file and line."""
    try:
        e = json.loads(line)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
        raise ReportError(f"{path}: line {n + 1} is not a JSON event ({type(exc).__name__})") from None
    if not isinstance(e, dict):
        raise ReportError(f"{path}: line {n + 1} is not a JSON object")
    return cast("dict[str, Any]", e)


def _events(path: Path, max_line: int) -> Iterator[dict[str, Any]]:
    for n, line in enumerate(_lines(path, max_line)):
        if line.strip():
            yield trajectory_event(path, n, line)


def trajectory_cells(path: Path, max_line: int | None = None) -> list[dict[str, Any]]:
    """Per cell (in trajectory order): arm, clock and one entry per session with its decision's picks,
    rejected picks, tool calls and line numbers. The probe's calls are a last pseudo-cell named ``probe``.
    ``max_line``: the longest line to read (its receipt's :func:`evalkit.pit.line_bound`; default: the default
    bound's)."""
    from evalkit.pit import line_bound

    cells: list[dict[str, Any]] = []
    cell: dict[str, Any] | None = None
    session: dict[str, Any] | None = None
    for n, line in enumerate(_lines(path, max_line or line_bound(None))):
        if not line.strip():
            continue
        e = trajectory_event(path, n, line)
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
    from evalkit.pit import line_bound

    for e in _events(traj, line_bound(body)):
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
            ret, _sessions, place = scorer
            total, n = 0.0, 0
            for j, (picks, _) in enumerate(per_cell[arm, clock]):
                i = place(arm, j)  # the window's session number of the cell's j-th decision (None: a hidden day)
                if i is None:
                    continue
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
    """(return_of(row_key, session_number) -> float | None, sessions, place(arm, decision_number) -> session_number
    or None) with the harness's own inputs and rule."""
    from evalkit.pit import RunConfig, load_prices
    from evalkit.pit._runner import (
        _check_window,  # pyright: ignore[reportPrivateUsage]
        answers_by_key,
        opens_for,
        served_for,
    )
    from evalkit_core import EvalkitError, Release, nyse

    try:
        recorded = cast("dict[str, Any]", body["config"])
        config = RunConfig.from_recorded({**recorded, "bundle_path": str(bundle)})
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

    # A served shifted cell also runs hidden days around the window (their picks are never traded): its j-th
    # decision is at the j-th session it served, rebuilt from the release's secret as the run and verify do.
    try:
        served = served_for(config, release, (start, end), calendar)
    except EvalkitError:
        return None
    window_pos = {calendar_index: n for n, calendar_index in enumerate(index)}

    def place(arm: str, j: int) -> int | None:
        if served is None or arm != "shifted":
            return j
        return window_pos.get(served.indices[j]) if j < len(served.indices) else None

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

    return ret, [s.date for s in sessions], place


def _demo_inputs(body: Mapping[str, Any]) -> tuple[Path | None, Path | None]:
    """The built-in demo release and its prices, when the receipt is a demo run (same source, same digest)."""
    from evalkit_core._synth import DEMO, PRICE_SOURCE, demo_release_path

    statement = body.get("prices")
    if not isinstance(statement, dict) or cast("dict[str, Any]", statement).get("source") != PRICE_SOURCE:
        return None, None
    demo = demo_release_path()
    manifest = read_json(demo / "release.json")
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
    from evalkit_core import check_receipt, check_signature, digest, trusted_key_ids

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
        from evalkit.pit import TrajectoryFileError, trajectory_digest

        try:
            got = trajectory_digest(traj)  # of the canonical stream (decompressed when stored compressed)
            detail = "" if got == want else f"{traj} has {got}"
        except TrajectoryFileError as exc:
            got, detail = None, str(exc)
        checks.append({"name": "trajectory_sha256", "status": "ok" if got == want else "MISMATCH", "detail": detail})
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
        candidates += [path.parent / "trajectory.jsonl", path.parent / "trajectory.jsonl.zst"]
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


