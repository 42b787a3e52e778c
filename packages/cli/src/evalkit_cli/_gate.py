"""``evalkit gate``: verify a receipt, compare it with a committed baseline, exit 1 naming each broken rule."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import typer

from evalkit_core import ConfigError

__all__ = ["gate", "verify_any"]


def _pit_checks(
    receipt: Path, body: Mapping[str, Any], bundle: Path | None, trajectory: Path | None, prices: Path | None, key: str | None
) -> list[tuple[str, str, str]]:
    from evalkit.gates._gate import pit_field
    from evalkit.pit import verify_pit_receipt

    if bundle is None:
        raise ConfigError(f"{receipt}: a PIT receipt needs --bundle (the release directory it binds)")
    bound_prices = pit_field(body, "prices_digest")
    if bound_prices is not None and prices is None:
        raise ConfigError(
            f"{receipt}: the receipt binds a price file ({bound_prices}); pass it with --prices so every return is replayed"
        )
    found = verify_pit_receipt(receipt, bundle=bundle, trajectory=trajectory, prices=prices, key=key)
    return [(c.status, c.name, c.detail) for c in found]


def verify_any(
    receipt: Path,
    *,
    bundle: Path | None = None,
    trajectory: Path | None = None,
    prices: Path | None = None,
    results: Path | None = None,
    tasks: Path | None = None,
    key: str | None = None,
    home: Path | None = None,
) -> tuple[dict[str, Any], list[tuple[str, str, str]], dict[str, Any]]:
    """Read and verify a receipt of any kind: (body, checks as (status, name, detail), what the gate measured
    from the verified files it binds). A receipt that cannot be read at all is a ConfigError/ReceiptError."""
    from evalkit_core import read_receipt

    body = cast("dict[str, Any]", read_receipt(receipt)["body"])
    kind = str(body.get("kind", "pit_run"))
    extra: dict[str, Any] = {}
    if kind == "pit_run":
        return body, _pit_checks(receipt, body, bundle, trajectory, prices, key), extra
    if kind == "evalkit.eval":
        from evalkit import verify_eval_receipt

        raw = verify_eval_receipt(receipt, results, tasks, key=key)
        checks = [("ok" if ok else "MISMATCH", str(n), str(d)) for n, ok, d in raw]
        if all(s == "ok" for s, _, _ in checks):
            from evalkit.grading._eval_receipt import _recorded  # pyright: ignore[reportPrivateUsage]

            files = cast("dict[str, str]", body.get("files") or {})
            base = receipt.resolve().parent if body.get("files_relative_to") == "receipt" else None
            the_results = results or _recorded(files, "results", base)
            extra["solved"] = _solved_rows(the_results)
            the_tasks = tasks or _recorded(files, "tasks", base)
            flagged, why = _eval_flagged(body, the_results, the_tasks, _recorded(files, "solver_file", base))
            extra["flagged"] = flagged
            if why is not None:
                extra["hacking_not_checked"] = why
        return body, checks, extra
    if kind == "evalkit.campaign":
        from evalkit_core.store import Store
        from evalkit_router import verify_campaign_receipt

        found = verify_campaign_receipt(receipt, key=key, home=home)
        checks = [("ok" if c.ok else "MISMATCH", c.name, c.detail) for c in found]
        if all(s == "ok" for s, _, _ in checks):
            campaign = cast("dict[str, Any]", body.get("campaign") or {})
            with Store.open(home) as store:
                extra["flagged"] = _flagged(store, str(campaign.get("name")), tasks)
        return body, checks, extra
    raise ConfigError(f"{receipt}: receipt kind {kind!r} is not one the gate knows (pit_run, evalkit.eval, evalkit.campaign)")


def _solved_rows(results: Path) -> int:
    """Rollouts in a (verified) eval results file that pass every public and hidden test."""
    solved = 0
    for line in results.read_text(encoding="utf-8").splitlines():
        if not line:
            continue
        row = cast("dict[str, Any]", json.loads(line))
        if row.get("infra_error") is not None:
            continue
        pub, hid = cast("dict[str, int]", row["public"]), cast("dict[str, int]", row["hidden"])
        solved += pub["passed"] == pub["total"] and hid["passed"] == hid["total"]
    return solved


def _eval_flagged(body: Mapping[str, Any], results: Path, tasks: Path, replay: Path) -> tuple[int | None, str | None]:
    """Rollouts of a (verified) eval the reward-hacking checks flag, from the completions the receipt binds (a
    model's answers in the results rows, a replay's in its file) and the verdicts in the results rows; or None and
    why the eval holds no answers to check."""
    from evalkit import load_tasks
    from evalkit_training import check_rollout, grading_from_json

    solver = cast("Mapping[str, Any]", body.get("solver") or {})
    name = solver.get("name")
    if name == "reference":
        return None, "the reference solver's answers are the bank's own reference solutions: no model answer to check"
    rows = [cast("dict[str, Any]", json.loads(line)) for line in results.read_text(encoding="utf-8").splitlines() if line]
    answers: dict[tuple[str, int], str] = {}
    if name == "replay":
        counts: dict[str, int] = {}
        for line in replay.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = cast("dict[str, Any]", json.loads(line))
                tid = str(row.get("task_id"))
                answers[tid, counts.get(tid, 0)] = str(row.get("completion"))
                counts[tid] = counts.get(tid, 0) + 1
    elif name == "model":
        if rows and not all(isinstance(r.get("completion"), str) for r in rows):
            return None, (
                "this model eval's results file holds no completions (made before evalkit eval recorded them); "
                "run the eval again to check reward hacking"
            )
        answers = {(str(r["task_id"]), int(r["sample"])): str(r["completion"]) for r in rows}
    else:
        return None, f"solver {name!r}: the receipt names no completions to check"
    by_id = {t.id: t for t in load_tasks(tasks)}
    flagged = 0
    for r in rows:
        task = by_id.get(str(r["task_id"]))
        completion = answers.get((str(r["task_id"]), int(r["sample"])))
        if task is None or completion is None or r.get("infra_error") is not None:
            continue
        grading = grading_from_json(r, f"{results}: task {r['task_id']} sample {r['sample']}")
        flagged += check_rollout(task, completion, grading).flagged
    return flagged, None


def _flagged(store: Any, campaign: str, tasks: Path | None) -> dict[str, int]:
    """Per model, the campaign's graded rollouts the reward-hacking checks flag (static and dynamic)."""
    from evalkit import load_tasks
    from evalkit_training import campaign_rollouts, check_rollout

    found = campaign_rollouts(store, campaign)
    bank = tasks or found.tasks_dir
    if bank is None:
        raise ConfigError(f"campaign {found.name}: its configuration names no task bank; pass --tasks DIR")
    by_id = {t.id: t for t in load_tasks(bank)}
    out: dict[str, int] = {}
    for r in found.records:
        out.setdefault(r.model, 0)
        task = by_id.get(r.task_id)
        if task is None or r.grading is None:
            continue
        out[r.model] += check_rollout(task, r.completion, r.grading).flagged
    return out


def gate(
    receipt: Path = typer.Argument(..., help="The receipt to gate (PIT run, eval or campaign)."),
    baseline: Path = typer.Option(..., "--baseline", help="The committed baseline JSON (written by --write-baseline)."),
    policy: Path | None = typer.Option(None, "--policy", help="A TOML file with a \\[gate] table: tolerances, confidence, rules to ignore."),
    write_baseline: bool = typer.Option(False, "--write-baseline", help="Verify the receipt and write --baseline from it instead of gating."),
    bundle: Path | None = typer.Option(None, "--bundle", help="The release directory a PIT receipt binds."),
    trajectory: Path | None = typer.Option(None, "--trajectory", help="The trajectory a PIT receipt binds \\[default: the path it records]."),
    prices: Path | None = typer.Option(None, "--prices", help="The price file a PIT receipt binds (required when it binds one)."),
    results: Path | None = typer.Option(None, "--results", help="The results file an eval receipt binds \\[default: as recorded]."),
    tasks: Path | None = typer.Option(None, "--tasks", help="The task bank an eval or campaign receipt binds \\[default: as recorded]."),
    key: str | None = typer.Option(None, "--key", help="Require this signer: a PEM public key file or an ed25519:<hex> key id \\[default: the local key]."),
    home: Path | None = typer.Option(None, "--home", help="The store a campaign receipt's rollouts are in (reward-hacking checks) and its signer's key \\[default: $EVALKIT_HOME]."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
) -> None:
    """Gate a receipt against a baseline: verify it (signature, hashes, replay), then check every rule. Exit 0
    when all hold, 1 with one line per violated rule, 2 on bad input. Rules (PIT): egress, lookahead,
    lookahead_unreachable, rejected_picks, probe, masks_public, cutoff, cells, cell_return, contamination, release_digest,
    calendar_digest, holdout. Rules (eval, campaign): pass_rate (binomial tolerance), gap, hacking, cost_per_solved,
    models."""
    from evalkit.gates._gate import (
        BASELINE_FORMAT,
        Violation,
        compare,
        load_baseline,
        load_policy,
        metrics_of,
        not_checked_for,
        rules_for,
    )
    from evalkit_core import atomic_write_text

    the_policy = load_policy(policy)  # bad input first: nothing is verified or written with a bad policy
    if write_baseline and baseline.resolve() in {p.resolve() for p in (receipt, trajectory, prices, results) if p is not None}:
        raise ConfigError(f"--baseline: {baseline} is an input; expected the baseline's own file")
    base = None if write_baseline else load_baseline(baseline)
    body, checks, extra = verify_any(
        receipt, bundle=bundle, trajectory=trajectory, prices=prices, results=results, tasks=tasks, key=key, home=home
    )
    failed = [Violation("verify", f"{name}: {detail}" if detail else name) for status, name, detail in checks if status == "MISMATCH"]
    kind = str(body.get("kind", "pit_run"))
    metrics = metrics_of(body, extra) if not failed else None
    if write_baseline:
        if metrics is None:
            _report(receipt, kind, failed, [], as_json, wrote=None)
            raise typer.Exit(1)
        data = {"format": BASELINE_FORMAT, "receipt_body_sha256": read_body_sha(receipt), "metrics": metrics}
        atomic_write_text(baseline, json.dumps(data, indent=2, sort_keys=True) + "\n")
        _report(receipt, kind, [], [], as_json, wrote=baseline)
        return
    assert base is not None
    violations = failed if metrics is None else compare(cast("dict[str, Any]", base["metrics"]), metrics, the_policy)
    checked = [] if metrics is None else [r for r in rules_for(kind, extra) if r not in the_policy.ignore]
    skipped = {} if metrics is None else not_checked_for(kind, extra)
    _report(receipt, kind, violations, checked, as_json, wrote=None, skipped=skipped)
    if violations:
        raise typer.Exit(1)


def read_body_sha(receipt: Path) -> str:
    from evalkit_core import read_receipt

    return str(read_receipt(receipt)["body_sha256"])


def _report(
    receipt: Path,
    kind: str,
    violations: list[Any],
    checked: list[str],
    as_json: bool,
    wrote: Path | None,
    skipped: Mapping[str, str] | None = None,
) -> None:
    skipped = skipped or {}
    if as_json:
        out: dict[str, Any] = {
            "receipt": str(receipt),
            "kind": kind,
            "ok": not violations,
            "violations": [v.to_json() for v in violations],
            "rules_checked": checked,
            "rules_not_checked": dict(skipped),
        }
        if wrote is not None:
            out["baseline_written"] = str(wrote)
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    for v in violations:
        typer.echo(f"FAIL {v.rule}: {v.message}")
    for rule, why in skipped.items():
        typer.echo(f"not checked: {rule} ({why})")
    if wrote is not None:
        typer.echo(f"wrote baseline {wrote} from {receipt} ({kind}, verified)")
    elif not violations:
        typer.echo(f"ok   {len(checked)} rules hold for {receipt} ({kind}, verified): {', '.join(checked)}")
