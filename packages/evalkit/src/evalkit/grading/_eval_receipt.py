"""An eval's summary (pass rates and their intervals) and its receipt's offline verification."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

from evalkit.grading._tasks import JSON, TaskError, bank_digest, load_tasks
from evalkit_core import (
    ReceiptError,
    canonical_bytes,
    check_receipt,
    check_signature,
    file_digest,
    read_receipt,
    trusted_key_ids,
)

__all__ = ["RECEIPT_FORMAT", "RECEIPT_KIND", "summarize", "summary_intervals", "verify_eval_receipt"]

RECEIPT_KIND = "evalkit.eval"
RECEIPT_FORMAT = 1


def summarize(rows: Sequence[dict[str, JSON]], n_tasks: int) -> dict[str, JSON]:
    """Pass rates from result rows (as written to ``results.jsonl``); infrastructure errors are not scored."""
    scored = [r for r in rows if r.get("infra_error") is None]

    def rate(part: str) -> float | None:
        # share of rollouts passing every test of that part, over rollouts that have such tests
        blocks = [cast("dict[str, int]", r[part]) for r in scored]
        blocks = [b for b in blocks if b["total"]]
        if not blocks:
            return None
        return round(sum(b["passed"] == b["total"] for b in blocks) / len(blocks), 6)

    def test_rate(part: str) -> float | None:
        total = sum(cast("dict[str, int]", r[part])["total"] for r in scored)
        passed = sum(cast("dict[str, int]", r[part])["passed"] for r in scored)
        return round(passed / total, 6) if total else None

    pub, hid = rate("public"), rate("hidden")
    answered = {cast("str", r["task_id"]) for r in rows}
    return {
        "tasks": n_tasks,
        "tasks_answered": len(answered),
        "rollouts": len(rows),
        "scored": len(scored),
        "infra_errors": len(rows) - len(scored),
        "public_pass_rate": pub,
        "hidden_pass_rate": hid,
        "gap": None if pub is None or hid is None else round(pub - hid, 6),
        "public_test_pass_rate": test_rate("public"),
        "hidden_test_pass_rate": test_rate("hidden"),
    }


def summary_intervals(rows: Sequence[dict[str, JSON]]) -> dict[str, JSON]:
    """Wilson 95% intervals for the summary's pass rates, per rollout and per test (same counts as
    :func:`summarize`). Not part of the
    summary a receipt binds: receipts made before intervals existed still verify."""
    from evalkit.grading._stats import INTERVAL_METHOD, wilson_interval

    scored = [r for r in rows if r.get("infra_error") is None]
    out: dict[str, JSON] = {"method": INTERVAL_METHOD}
    for part in ("public", "hidden"):
        blocks = [b for b in (cast("dict[str, int]", r[part]) for r in scored) if b["total"]]
        ci = wilson_interval(sum(b["passed"] == b["total"] for b in blocks), len(blocks))
        out[f"{part}_pass_rate"] = None if ci is None else [ci[0], ci[1]]
        # the share of tests passed: tests of one rollout are not independent, so this interval is narrower
        # than the truth (the per-rollout rate above is the one to compare)
        total = sum(b["total"] for b in blocks)
        ci = wilson_interval(sum(b["passed"] for b in blocks), total)
        out[f"{part}_test_pass_rate"] = None if ci is None else [ci[0], ci[1]]
    return out


def _recorded(files: Mapping[str, str], name: str, base: Path | None) -> Path:
    """A path the receipt recorded: relative to the receipt's directory (``files_relative_to``), else as written
    (receipts made before, relative to the directory they were made in)."""
    recorded = Path(files.get(name, ""))
    return base / recorded if base is not None and not recorded.is_absolute() else recorded


def _summary_check(body: dict[str, JSON], results: Path) -> tuple[str, bool, str]:
    """Is the receipt's summary what the results file says? A damaged file is a mismatch, not a crash."""
    try:
        rows = [
            cast("dict[str, JSON]", json.loads(line))
            for line in results.read_text(encoding="utf-8").splitlines()
            if line
        ]
        tasks_block = cast("dict[str, int]", body.get("tasks") or {})
        again = summarize(rows, tasks_block.get("count", 0))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return ("summary", False, f"{results} is not a results file this receipt could have made ({exc!r})")
    ok = canonical_bytes(again) == canonical_bytes(body.get("summary"))
    return ("summary", ok, "" if ok else "the summary in the receipt is not what the results file says")


def verify_eval_receipt(
    receipt_path: str | Path,
    results_path: str | Path | None = None,
    tasks_dir: str | Path | None = None,
    *,
    key: str | None = None,
) -> list[tuple[str, bool, str]]:
    """Re-check an eval receipt offline: its signature, its body hash, the results file, the task bank, the replay
    file, and that the summary in the body is what the results file says. One ``(name, ok, detail)`` per check.

    ``results_path`` and ``tasks_dir`` default to the paths recorded in the body's ``files``. The signer must be
    the local key in ``$EVALKIT_HOME``, or the one ``key`` names (a PEM public key file or an ed25519 key id).
    """
    receipt = read_receipt(receipt_path)
    body = cast("dict[str, JSON]", receipt["body"])
    if body.get("kind") != RECEIPT_KIND:
        raise ReceiptError(f"{receipt_path}: not an evalkit eval receipt (kind {body.get('kind')!r})")
    binding = cast("dict[str, str]", body.get("binding") or {})
    files = cast("dict[str, str]", body.get("files") or {})
    base = Path(receipt_path).resolve().parent if body.get("files_relative_to") == "receipt" else None
    checks: list[tuple[str, bool, str]] = []
    sig = check_signature(receipt, trusted_key_ids(key))
    checks.append(("signature", sig.ok, str(sig.key_id) if sig.ok else sig.detail))
    ok = check_receipt(receipt)
    checks.append(("body", ok, "" if ok else "body_sha256 does not match the canonical body"))
    results = Path(results_path) if results_path is not None else _recorded(files, "results", base)
    try:
        actual = file_digest(results)
    except OSError as exc:
        checks.append(("results", False, f"cannot read {results}: {exc.strerror}"))
    else:
        ok = actual == binding.get("results")
        checks.append(
            ("results", ok, "" if ok else f"{results} has {actual}, receipt expects {binding.get('results')}")
        )
        checks.append(_summary_check(body, results))
    bank = Path(tasks_dir) if tasks_dir is not None else _recorded(files, "tasks", base)
    try:
        actual = bank_digest(load_tasks(bank))
        ok = actual == binding.get("tasks")
        checks.append(
            (
                "tasks",
                ok,
                "" if ok else f"task bank {bank} has {actual}, receipt expects {binding.get('tasks')}",
            )
        )
    except TaskError as exc:
        checks.append(("tasks", False, str(exc)))
    if "solver_file" in binding:
        path = _recorded(files, "solver_file", base)
        try:
            actual = file_digest(path)
            ok = actual == binding["solver_file"]
            checks.append(
                (
                    "solver_file",
                    ok,
                    "" if ok else f"{path} has {actual}, receipt expects {binding['solver_file']}",
                )
            )
        except OSError as exc:
            checks.append(("solver_file", False, f"cannot read {path}: {exc.strerror}"))
    return checks
