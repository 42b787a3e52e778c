"""The campaign report: per-model pass rates, pass@k, cost, infra errors; its results file, JSON and receipt.

Definitions (per model; a rollout with a sandbox infrastructure error is counted, never scored):

- *public / hidden / adversarial pass@1*: over tasks with at least one scored sample, the mean share of samples
  passing every test of that set (adversarial: over tasks that have banked adversarial tests; n/a if none).
- *gap*: public pass@1 minus hidden pass@1.
- *solved*: a sample passing every public and hidden test. *pass@k* (k = 1..K) is the unbiased estimator of
  Chen et al. (2021) on solved, ``1 - C(n-c, k) / C(n, k)`` per task, averaged over tasks with ``n >= k``.
- *cost*: exact Decimal sum of the stored completions' costs (infra-error rollouts cost money too);
  *cost per task* = cost / tasks; *cost per solved task* = cost / tasks solved by at least one sample.
  Ratios are rounded to 1e-9 USD; totals are exact.

Integrity. Before a report (and so a results file or a receipt) is made, every stored rollout's cost is checked
against the model layer's record of the call it came from (:func:`check_rollout_costs`): the completion JSON,
the call row, the attempt that settled it and the budget ledger must agree, and the cost must be what the
recorded usage costs at the recorded registry's prices (or, for a flagged reply, the bound charged instead).
A mismatch is a :class:`CampaignIntegrityError` naming the row; no report is made from a damaged store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import cast

import attrs

from evalkit import JSON, TaskError, bank_digest
from evalkit_core import (
    ReceiptError,
    atomic_write_bytes,
    canonical_bytes,
    check_receipt,
    check_signature,
    digest,
    ensure_signing_key,
    file_digest,
    make_receipt,
    read_receipt,
    trusted_key_ids,
    write_receipt,
)
from evalkit_core.models import RegistryError, load_registry
from evalkit_core.store import Store
from evalkit_router._campaign import load_stored_campaign
from evalkit_router._config import CampaignError, load_campaign, select_tasks
from evalkit_router._integrity import CampaignIntegrityError, check_rollout_costs

__all__ = [
    "CampaignIntegrityError",
    "CampaignReport",
    "ReceiptCheck",
    "campaign_report",
    "check_rollout_costs",
    "default_out_dir",
    "digest_of_rows",
    "pass_at_k",
    "render_table",
    "summarize_results",
    "verify_campaign_receipt",
    "write_campaign_outputs",
]

RECEIPT_KIND = "evalkit.campaign"
RECEIPT_FORMAT = 1
_RATIO = Decimal("0.000000001")


def pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The unbiased pass@k estimate for one task with ``n`` samples of which ``c`` are correct (Chen et al.)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return Fraction(1)
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def _usd(value: Decimal) -> str:
    return format(value, "f")


def _ratio(value: Decimal, by: int) -> str | None:
    if by == 0:
        return None
    return _usd((value / by).quantize(_RATIO, rounding=ROUND_HALF_EVEN))


def _rate(x: Fraction | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _all_pass(row: Mapping[str, JSON], part: str) -> bool:
    block = cast("dict[str, int]", row[part])
    return block["passed"] == block["total"]


def _mean(values: list[Fraction]) -> Fraction | None:
    return sum(values, Fraction(0)) / len(values) if values else None


def summarize_results(
    rows: Sequence[Mapping[str, JSON]], *, models: Sequence[str], task_ids: Sequence[str], k: int
) -> dict[str, JSON]:
    """The report's numbers, a pure function of the results rows (so a receipt's summary can be re-checked)."""
    per_model: list[JSON] = []
    totals = {"planned": 0, "stored": 0, "graded": 0, "scored": 0, "infra_errors": 0}
    for model in models:
        mine = [r for r in rows if r["model_id"] == model]
        graded = [r for r in mine if r["status"] == "graded"]
        scored = [r for r in graded if r["infra_error"] is None]
        by_task: dict[str, list[Mapping[str, JSON]]] = {}
        for r in scored:
            by_task.setdefault(cast("str", r["task_id"]), []).append(r)
        pub: list[Fraction] = []
        hid: list[Fraction] = []
        adv: list[Fraction] = []
        at_k: dict[int, list[Fraction]] = {j: [] for j in range(1, k + 1)}
        solved_tasks = 0
        for samples in by_task.values():
            n = len(samples)
            pub.append(Fraction(sum(_all_pass(r, "public") for r in samples), n))
            hid.append(Fraction(sum(_all_pass(r, "hidden") for r in samples), n))
            if any(cast("dict[str, int]", r["adversarial"])["total"] for r in samples):
                adv.append(Fraction(sum(_all_pass(r, "adversarial") for r in samples), n))
            c = sum(1 for r in samples if r["solved"])
            solved_tasks += c > 0
            for j in range(1, min(n, k) + 1):
                at_k[j].append(pass_at_k(n, c, j))
        cost = sum((Decimal(cast("str", r["cost"])) for r in mine), Decimal(0))
        pub_m, hid_m = _mean(pub), _mean(hid)
        planned = k * len(task_ids)
        infra = len(graded) - len(scored)
        per_model.append(
            {
                "model": model,
                "planned": planned,
                "stored": len(mine),
                "graded": len(graded),
                "scored": len(scored),
                "infra_errors": infra,
                "missing": planned - len(mine),
                "public_pass@1": _rate(pub_m),
                "hidden_pass@1": _rate(hid_m),
                "adversarial_pass@1": _rate(_mean(adv)),
                "adversarial_tasks": len(adv),
                "gap": None if pub_m is None or hid_m is None else _rate(pub_m - hid_m),
                "pass@k": {str(j): _rate(_mean(v)) for j, v in at_k.items()},
                "solved_tasks": solved_tasks,
                "cost_usd": _usd(cost),
                "cost_per_task_usd": _ratio(cost, len(task_ids)),
                "cost_per_solved_task_usd": _ratio(cost, solved_tasks),
            }
        )
        totals["planned"] += planned
        totals["stored"] += len(mine)
        totals["graded"] += len(graded)
        totals["scored"] += len(scored)
        totals["infra_errors"] += infra
    total_cost = sum((Decimal(cast("str", r["cost"])) for r in rows), Decimal(0))
    return {
        "k": k,
        "tasks": len(task_ids),
        "models": list(models),
        "rollouts": {**totals, "missing": totals["planned"] - totals["stored"]},
        "cost_usd": _usd(total_cost),
        "per_model": per_model,
    }


def summary_intervals(
    rows: Sequence[Mapping[str, JSON]], *, models: Sequence[str], k: int
) -> dict[str, JSON]:
    """Per model: Wilson 95% intervals on the pooled public, hidden and adversarial pass shares (passing samples
    over scored samples; equal to pass@1 when every task has the same number of samples), and the standard error over tasks
    of each pass@k. Kept out of the summary a receipt binds, so older receipts still verify."""
    from evalkit.grading._stats import INTERVAL_METHOD, standard_error, wilson_interval

    per_model: dict[str, JSON] = {}
    for model in models:
        scored = [r for r in rows if r["model_id"] == model and r["status"] == "graded" and r["infra_error"] is None]
        by_task: dict[str, list[Mapping[str, JSON]]] = {}
        for r in scored:
            by_task.setdefault(cast("str", r["task_id"]), []).append(r)
        block: dict[str, JSON] = {}
        for part in ("public", "hidden", "adversarial"):
            # adversarial: the samples of tasks that have banked adversarial tests (as adversarial pass@1)
            mine = [r for r in scored if part != "adversarial" or cast("dict[str, int]", r[part])["total"]]
            ci = wilson_interval(sum(_all_pass(r, part) for r in mine), len(mine))
            block[f"{part}_pass@1_ci95"] = None if ci is None else [ci[0], ci[1]]
        se: dict[str, JSON] = {}
        for j in range(1, k + 1):
            values = [
                float(pass_at_k(len(v), sum(1 for r in v if r["solved"]), j)) for v in by_task.values() if len(v) >= j
            ]
            se[str(j)] = standard_error(values)
        block["pass@k_se"] = se
        per_model[model] = block
    return {
        "method": f"{INTERVAL_METHOD} on pooled samples; pass@k: standard error of the mean over tasks",
        "per_model": per_model,
    }


@attrs.frozen
class CampaignReport:
    """A campaign's report as read from the store: its config, status, result rows and summary."""

    name: str
    status: str
    config: Mapping[str, JSON]
    rows: tuple[Mapping[str, JSON], ...]
    summary: Mapping[str, JSON]

    @property
    def identity(self) -> Mapping[str, JSON]:
        return cast("Mapping[str, JSON]", self.config["identity"])

    @property
    def intervals(self) -> dict[str, JSON]:
        return summary_intervals(
            self.rows, models=cast("list[str]", self.summary["models"]), k=cast("int", self.summary["k"])
        )

    def to_json(self) -> dict[str, JSON]:
        ident = self.identity
        file_block = cast("dict[str, JSON]", self.config["file"])
        registry = cast("dict[str, JSON]", self.config["registry"])
        return {
            "campaign": self.name,
            "status": self.status,
            "summary": dict(self.summary),
            "intervals": self.intervals,
            "digests": {
                "campaign_file": file_block["digest"],
                "tasks": ident["tasks_digest"],
                "registry": registry["digest"],
                "results": digest_of_rows(self.rows),
            },
        }


def _row(raw: Sequence[object]) -> dict[str, JSON]:
    key, model_id, task_id, task_digest, sample, status, completion, cost, result, infra = raw
    comp = cast("dict[str, JSON]", json.loads(cast("str", completion)))
    out: dict[str, JSON] = {
        "key": cast("str", key),
        "model_id": cast("str", model_id),
        "task_id": cast("str", task_id),
        "task_digest": cast("str", task_digest),
        "sample": cast("int", sample),
        "status": cast("str", status),
        "cost": cast("str", cost),
        "completion_digest": digest({"text": comp["text"]}),
        "response_digest": comp.get("response_digest"),
        "infra_error": cast("str | None", infra),
    }
    empty: dict[str, JSON] = {"passed": 0, "total": 0, "tests": []}
    verdict = cast("dict[str, JSON]", json.loads(cast("str", result))) if result is not None else None
    for part in ("public", "hidden", "adversarial"):
        block = cast("dict[str, JSON]", verdict[part]) if verdict is not None else empty
        tests = cast("list[dict[str, JSON]]", block["tests"])
        out[part] = {
            "passed": block["passed"],
            "total": block["total"],
            "tests": [[t["name"], t["passed"], t["reason"]] for t in tests],
        }
    out["adversarial_set"] = verdict["adversarial_set"] if verdict is not None else None
    out["solved"] = (
        verdict is not None and infra is None and _all_pass(out, "public") and _all_pass(out, "hidden")
    )
    return out


def digest_of_rows(rows: Sequence[Mapping[str, JSON]]) -> str:
    """The digest of a results file's bytes (what the receipt binds), without writing it."""
    from evalkit_core import digest_bytes

    return digest_bytes(_rows_bytes(rows))


def _rows_bytes(rows: Sequence[Mapping[str, JSON]]) -> bytes:
    return b"".join(canonical_bytes(dict(r)) + b"\n" for r in rows)


def campaign_report(store: Store, name: str) -> CampaignReport:
    """Read campaign ``name`` from the store and compute its report (no model call, no grading). The stored
    costs are checked first (:func:`check_rollout_costs`)."""
    config, status = load_stored_campaign(store, name)
    check_rollout_costs(store, name)
    ident = cast("dict[str, JSON]", config["identity"])
    with store.snapshot() as db:
        raw = db.execute(
            "SELECT rollout_key, model_id, task_id, task_digest, sample, status, completion, cost, result,"
            " infra_error FROM rollouts WHERE campaign_id = ? ORDER BY model_id, task_id, sample",
            (name,),
        ).fetchall()
    rows = tuple(_row(r) for r in raw)
    summary = summarize_results(
        rows,
        models=list(cast("dict[str, JSON]", ident["models"])),
        task_ids=list(cast("dict[str, JSON]", ident["tasks"])),
        k=cast("int", ident["k"]),
    )
    return CampaignReport(name=name, status=status, config=config, rows=rows, summary=summary)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "campaign"


def default_out_dir(store: Store, name: str) -> Path:
    return store.home / "campaigns" / _safe(name)


def write_campaign_outputs(
    report: CampaignReport, out_dir: str | Path, *, home: str | Path | None = None
) -> tuple[Path, Path, Path]:
    """Write ``results.jsonl``, ``report.json`` and ``receipt.json`` into ``out_dir`` (each atomically).

    The receipt binds the campaign file, the task bank (digest of the selected tasks), the registry and the
    results file; :func:`verify_campaign_receipt` re-checks it offline."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    atomic_write_bytes(results, _rows_bytes(report.rows))
    report_path = out / "report.json"
    payload = report.to_json()
    atomic_write_bytes(report_path, json.dumps(payload, indent=2, sort_keys=True).encode() + b"\n")
    ident = report.identity
    file_block = cast("dict[str, JSON]", report.config["file"])
    registry = cast("dict[str, JSON]", report.config["registry"])
    settings = cast("dict[str, JSON]", report.config["settings"])
    body: dict[str, JSON] = {
        "kind": RECEIPT_KIND,
        "format": RECEIPT_FORMAT,
        "campaign": {
            "name": report.name,
            "status": report.status,
            "k": ident["k"],
            "models": list(cast("dict[str, JSON]", ident["models"])),
            "tasks": ident["tasks"],
            "temperature": ident["temperature"],
            "max_tokens": ident["max_tokens"],
            "identity_digest": digest(dict(ident)),
        },
        "summary": dict(report.summary),
        "binding": {
            "campaign_file": file_block["digest"],
            "tasks": ident["tasks_digest"],
            "registry": registry["digest"],
            "results": file_digest(results),
        },
        "files": {
            "campaign_file": file_block["path"],
            "tasks": cast("dict[str, JSON]", settings["tasks"])["dir"],
            "registry": registry["sources"],
            "results": str(results.resolve()),
        },
    }
    receipt = out / "receipt.json"
    # Signed with the key in ``home`` (the store's home; default $EVALKIT_HOME), created there on first use.
    write_receipt(receipt, make_receipt(body, key=ensure_signing_key(home)[0]))
    return results, report_path, receipt


@attrs.frozen
class ReceiptCheck:
    """One re-checked binding (or the body hash, or the summary): ``ok`` and what differs when not."""

    name: str
    ok: bool
    detail: str = ""


def _file_check(name: str, path: Path, expected: JSON) -> ReceiptCheck:
    try:
        actual = file_digest(path)
    except OSError as exc:
        return ReceiptCheck(name, False, f"cannot read {path}: {exc.strerror}")
    ok = actual == expected
    return ReceiptCheck(name, ok, "" if ok else f"{path} has {actual}, receipt expects {expected}")


def verify_campaign_receipt(
    receipt_path: str | Path,
    *,
    campaign_file: str | Path | None = None,
    tasks_dir: str | Path | None = None,
    results: str | Path | None = None,
    registry_paths: Sequence[str | Path] | None = None,
    store: Store | None = None,
    key: str | None = None,
    home: str | Path | None = None,
) -> list[ReceiptCheck]:
    """Re-check a campaign receipt offline: the body hash, each binding (campaign file, task bank, registry,
    results) and that the summary is what the results file says. Paths default to those in the body's
    ``files``; the registry is rebuilt from the shipped one plus the recorded files (``$EVALKIT_REGISTRY`` is
    ignored: the recorded list already holds what it named). The signer must be the key in ``home`` (default
    ``$EVALKIT_HOME``) or the one ``key`` names. With ``store``, one more check (``ledger``):
    every row's cost is the stored rollout's, and the stored costs agree with the call record
    (:func:`check_rollout_costs`)."""
    receipt = read_receipt(receipt_path)
    body = cast("dict[str, JSON]", receipt["body"])
    if body.get("kind") != RECEIPT_KIND:
        raise ReceiptError(f"{receipt_path}: not an evalkit campaign receipt (kind {body.get('kind')!r})")
    binding = cast("dict[str, JSON]", body.get("binding") or {})
    files = cast("dict[str, JSON]", body.get("files") or {})
    checks: list[ReceiptCheck] = []
    sig = check_signature(receipt, trusted_key_ids(key, home))
    checks.append(ReceiptCheck("signature", sig.ok, "" if sig.ok else sig.detail))
    ok = check_receipt(receipt)
    checks.append(ReceiptCheck("body", ok, "" if ok else "body_sha256 does not match the canonical body"))
    cfile = (
        Path(campaign_file)
        if campaign_file is not None
        else Path(cast("str", files.get("campaign_file", "")))
    )
    checks.append(_file_check("campaign_file", cfile, binding.get("campaign_file")))
    try:
        config = load_campaign(cfile)
        if tasks_dir is not None:
            config = attrs.evolve(config, tasks_dir=Path(tasks_dir).resolve())
        actual = bank_digest(select_tasks(config))
        ok = actual == binding.get("tasks")
        detail = (
            "" if ok else f"task bank {config.tasks_dir} has {actual}, receipt expects {binding.get('tasks')}"
        )
        checks.append(ReceiptCheck("tasks", ok, detail))
    except (CampaignError, TaskError) as exc:
        checks.append(ReceiptCheck("tasks", False, str(exc)))
    sources = (
        [str(p) for p in registry_paths]
        if registry_paths is not None
        else cast("list[str]", files.get("registry") or [])
    )
    try:
        actual = load_registry(sources, env={}).digest
        ok = actual == binding.get("registry")
        detail = (
            ""
            if ok
            else f"registry ({', '.join(sources) or 'shipped'}) has {actual}, receipt expects {binding.get('registry')}"
        )
        checks.append(ReceiptCheck("registry", ok, detail))
    except RegistryError as exc:
        checks.append(ReceiptCheck("registry", False, str(exc)))
    rpath = Path(results) if results is not None else Path(cast("str", files.get("results", "")))
    checks.append(_file_check("results", rpath, binding.get("results")))
    try:
        rows = [
            cast("dict[str, JSON]", json.loads(line))
            for line in rpath.read_text(encoding="utf-8").splitlines()
            if line
        ]
        campaign = cast("dict[str, JSON]", body.get("campaign") or {})
        again = summarize_results(
            rows,
            models=cast("list[str]", campaign.get("models") or []),
            task_ids=list(cast("dict[str, JSON]", campaign.get("tasks") or {})),
            k=cast("int", campaign.get("k") or 0),
        )
        ok = canonical_bytes(again) == canonical_bytes(body.get("summary"))
        checks.append(
            ReceiptCheck(
                "summary", ok, "" if ok else "the summary in the receipt is not what the results file says"
            )
        )
    except (OSError, ValueError, KeyError) as exc:
        checks.append(ReceiptCheck("summary", False, f"cannot recompute from {rpath}: {exc}"))
    if store is not None:
        checks.append(_ledger_check(store, body, rpath))
    return checks


def _ledger_check(store: Store, body: Mapping[str, JSON], results: Path) -> ReceiptCheck:
    campaign = cast("dict[str, JSON]", body.get("campaign") or {})
    name = str(campaign.get("name"))
    try:
        check_rollout_costs(store, name)
        rows = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line]
    except CampaignIntegrityError as exc:
        return ReceiptCheck("ledger", False, str(exc))
    except (OSError, ValueError) as exc:
        return ReceiptCheck("ledger", False, f"cannot read {results}: {exc}")
    with store.snapshot() as db:
        stored = {
            str(k): str(c)
            for k, c in db.execute("SELECT rollout_key, cost FROM rollouts WHERE campaign_id = ?", (name,))
        }
    for row in cast("list[dict[str, JSON]]", rows):
        key = str(row.get("key"))
        if key not in stored:
            return ReceiptCheck("ledger", False, f"{results}: rollout {key} is not in the store {store.path}")
        if Decimal(str(row.get("cost"))) != Decimal(stored[key]):
            return ReceiptCheck(
                "ledger",
                False,
                f"{results}: rollout {key} costs ${row.get('cost')} but the store says ${stored[key]}",
            )
    return ReceiptCheck("ledger", True)


# --------------------------------------------------------------------------------------------- the table


def _pct(value: JSON) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value * 100:.1f}%"


def _money(value: JSON) -> str:
    if not isinstance(value, str):
        return "n/a"
    d = Decimal(value)
    return f"${d:.6f}" if d < 1 else f"${d:.2f}"


def _ci95(value: JSON) -> str:
    if not isinstance(value, list) or len(value) != 2:
        return "n/a"
    return f"[{_pct(value[0])},{_pct(value[1])}]"


def _with_se(rate: JSON, se: JSON) -> str:
    return _pct(rate) + ("" if not isinstance(se, int | float) else f"±{_pct(se)}")


def render_table(summary: Mapping[str, JSON], intervals: Mapping[str, JSON] | None = None) -> list[str]:
    """The per-model table as plain text lines (fixed width); with ``intervals`` (:func:`summary_intervals`),
    public, hidden and adversarial pass@1 carry their Wilson 95% intervals and each pass@k its standard error (a
    last line says so)."""
    k = cast("int", summary["k"])
    ks = list(range(1, k + 1)) if k <= 6 else sorted({1, 2, 5, 10, k} & set(range(1, k + 1)))
    shown = intervals is not None
    header = ["model", "pub@1", *(["pub@1 95% CI"] if shown else []), "hid@1", *(["hid@1 95% CI"] if shown else []),
              "adv@1", *(["adv@1 95% CI"] if shown else []), "gap",
              *[f"pass@{j}" for j in ks], "solved", "infra", "missing", "cost", "$/task", "$/solved"]  # fmt: skip
    per: Mapping[str, JSON] = cast("Mapping[str, JSON]", intervals["per_model"]) if intervals is not None else {}
    rows: list[list[str]] = []
    for m in cast("list[dict[str, JSON]]", summary["per_model"]):
        at_k = cast("dict[str, JSON]", m["pass@k"])
        iv = cast("dict[str, JSON]", per.get(cast("str", m["model"])) or {})
        se = cast("dict[str, JSON]", iv.get("pass@k_se") or {})
        rows.append(
            [
                cast("str", m["model"]),
                _pct(m["public_pass@1"]),
                *([_ci95(iv.get("public_pass@1_ci95"))] if shown else []),
                _pct(m["hidden_pass@1"]),
                *([_ci95(iv.get("hidden_pass@1_ci95"))] if shown else []),
                _pct(m["adversarial_pass@1"]),
                *([_ci95(iv.get("adversarial_pass@1_ci95"))] if shown else []),
                _pct(m["gap"]),
                *[_with_se(at_k.get(str(j)), se.get(str(j))) for j in ks],
                f"{m['solved_tasks']}/{summary['tasks']}",
                str(m["infra_errors"]),
                str(m["missing"]),
                _money(m["cost_usd"]),
                _money(m["cost_per_task_usd"]),
                _money(m["cost_per_solved_task_usd"]),
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
             for line in [header, *rows]]  # fmt: skip
    out = [line.rstrip() for line in lines]
    if intervals is not None:
        out.append(f"intervals: {intervals['method']} (± is one standard error)")
    return out
