"""Eval gates: compare a verified receipt with a committed baseline, one violation per broken rule.

The gate works on *metrics*: a small, canonical summary of a receipt body (:func:`metrics_of`) that is also what
a baseline file stores. Rules come in two kinds: absolute rules that need no baseline (an egress attempt, a
look-ahead trade in a reachable cell, a rejected pick, a probe that leaked or did not run, a window that ends
before the declared training cutoff, reward-hacking flags) and relative rules that compare with the baseline (a
cell return or contamination delta that moved, a release or calendar digest that changed, a pass rate that fell
beyond its binomial interval, a public-hidden gap that grew, a cost per solved task that grew).

Verifying the receipt (signature, hashes, replay) is the caller's job: this module only reads bodies that have
already been checked. Every PIT receipt field is read through :func:`pit_field`, so a renamed field is one edit.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from evalkit_core import ConfigError, read_json_object

__all__ = [
    "BASELINE_FORMAT",
    "PIT_FIELDS",
    "RULES",
    "GatePolicy",
    "Violation",
    "compare",
    "drop_tolerance",
    "load_baseline",
    "load_policy",
    "metrics_of",
    "not_checked_for",
    "pit_field",
    "rules_for",
    "wilson",
]

BASELINE_FORMAT = "evalkit-gate-baseline/1"
PIT_KIND = "pit_run"
EVAL_KIND = "evalkit.eval"
CAMPAIGN_KIND = "evalkit.campaign"

# Where each PIT receipt field the gate (and the certificate) reads lives in the body: the one place to edit
# when the receipt's shape changes.
PIT_FIELDS: dict[str, tuple[str, ...]] = {
    "cells": ("cells",),
    "egress_attempts": ("network", "egress_attempts"),
    "network_clean": ("network", "clean"),
    "network_policy": ("network", "policy"),
    "probe": ("probe",),
    "probe_verdict": ("probe", "verdict"),
    "masks": ("masks",),
    "decoders": ("decoders",),
    "contamination": ("contamination",),
    "window_ends_before_cutoff": ("protocol", "P2_training_cutoff", "window_ends_before_cutoff"),
    "protocol": ("protocol",),
    "protocol_gaps": ("protocol_gaps",),
    "release_digest": ("binding", "bundle_content_digest"),
    "calendar_digest": ("binding", "calendar_sha256"),
    "trajectory_digest": ("binding", "trajectory_sha256"),
    "prices_digest": ("binding", "prices_sha256"),
    "release_name": ("protocol", "P5_window_provenance", "release"),
    "trajectory_path": ("trajectory", "path"),
    "window": ("window",),
    "run_id": ("run_id",),
    "valid": ("valid",),
    "network_scope": ("network", "scope"),
    "p1": ("protocol", "P1_model_version"),
    "p2": ("protocol", "P2_training_cutoff"),
    "holdout_models": ("protocol", "P2_training_cutoff", "models"),
    "receipt_version": ("receipt_version",),
}

# Every rule, with the one line the docs and --help give for it.
RULES: dict[str, str] = {
    "verify": "the receipt does not verify (signature, a bound hash, or a replayed number)",
    "egress": "any egress attempt recorded in the run",
    "lookahead": "any look-ahead trade in a reachable cell (dump, pit)",
    "lookahead_unreachable": "more look-ahead trades in an unreachable (leaky) cell than the baseline",
    "rejected_picks": "any rejected pick (unknown, duplicate, not yet knowable)",
    "probe": "probe verdict mask_leaks or not_run",
    "masks_public": "a decoder that needs only public knowledge (calendars, public code) broke a mask (receipts from release format 3 on)",
    "cutoff": "P2: the window ends before the declared training cutoff",
    "cells": "a cell of the baseline is missing from the run, or a new one appeared",
    "cell_return": "a cell's total return moved by more than return_tolerance",
    "contamination": "a contamination delta moved by more than contamination_tolerance",
    "release_digest": "the release content digest changed",
    "calendar_digest": "the calendar digest changed",
    "holdout": "a model whose baseline run was post-cutoff (a holdout) is not post-cutoff in this run",
    "pass_rate": "a pass rate fell below the baseline by more than its binomial tolerance",
    "gap": "the public-hidden gap grew by more than gap_tolerance",
    "hacking": "rollouts flagged for reward hacking (any, or more than the baseline with hacking = 'grew')",
    "cost_per_solved": "the cost per solved task grew by more than cost_tolerance (relative)",
    "models": "a model of the baseline is missing from the run",
}


def pit_field(body: Mapping[str, Any], name: str) -> Any:
    """The value of a named PIT receipt field (:data:`PIT_FIELDS`), or None where the body lacks it."""
    value: Any = body
    for part in PIT_FIELDS[name]:
        if not isinstance(value, Mapping):
            return None
        value = cast("Mapping[str, Any]", value).get(part)
    return value


@attrs.frozen
class Violation:
    """One broken rule: its id and one line saying what and by how much."""

    rule: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


@attrs.frozen
class GatePolicy:
    """The tolerances of the relative rules and the rules to skip. Defaults suit deterministic runs: a replayed
    PIT receipt reproduces its numbers to the sixth decimal, so anything that moves has changed."""

    confidence: float = 0.95
    return_tolerance: float = 1e-6
    contamination_tolerance: float = 1e-6
    gap_tolerance: float = 0.0
    cost_tolerance: float = 0.0
    hacking: str = "any"
    ignore: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["ignore"] = list(self.ignore)
        return d


def load_policy(path: str | Path | None) -> GatePolicy:
    """A policy from a TOML file's ``[gate]`` table (every key optional); the defaults without a file."""
    if path is None:
        return GatePolicy()
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: policy file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: not valid TOML ({exc})") from None
    table = data.get("gate")
    if not isinstance(table, dict):
        raise ConfigError(f"{p}: expected a [gate] table")
    gate = cast("dict[str, Any]", table)
    known = {f.name for f in attrs.fields(GatePolicy)}
    unknown = sorted(set(gate) - known)
    if unknown:
        raise ConfigError(f"{p}: [gate] unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for name in ("confidence", "return_tolerance", "contamination_tolerance", "gap_tolerance", "cost_tolerance"):
        if name in gate:
            v = gate[name]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"{p}: [gate] {name}: expected a non-negative number, got {v!r}")
            values[name] = float(v)
    if "confidence" in values and not 0.5 <= values["confidence"] < 1:
        raise ConfigError(f"{p}: [gate] confidence: expected a number in [0.5, 1), got {values['confidence']!r}")
    if "hacking" in gate:
        if gate["hacking"] not in ("any", "grew"):
            raise ConfigError(f"{p}: [gate] hacking: expected 'any' or 'grew', got {gate['hacking']!r}")
        values["hacking"] = gate["hacking"]
    if "ignore" in gate:
        ignore = gate["ignore"]
        if not isinstance(ignore, list) or not all(isinstance(r, str) and r in RULES for r in cast("list[Any]", ignore)):
            raise ConfigError(f"{p}: [gate] ignore: expected a list of rule ids ({', '.join(RULES)}), got {ignore!r}")
        values["ignore"] = tuple(cast("list[str]", ignore))
    return GatePolicy(**values)


# --- metrics ---------------------------------------------------------------------------------------------------


def _cell_id(cell: Mapping[str, Any]) -> str:
    return f"{cell.get('arm')}/{cell.get('clock')}"


def _pit_metrics(body: Mapping[str, Any]) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for raw in cast("list[Mapping[str, Any]]", pit_field(body, "cells") or []):
        rejected = cast("Mapping[str, int]", raw.get("rejected_picks") or {})
        cells[_cell_id(raw)] = {
            "reachable": bool(raw.get("reachable")),
            "total_return": raw.get("total_return"),
            "trades": raw.get("trades"),
            "lookahead_trades": int(raw.get("lookahead_trades") or 0),
            "rejected_picks": sum(int(v) for v in rejected.values()),
        }
    contamination: dict[str, Any] = {}
    for clock, deltas in sorted(cast("Mapping[str, Any]", pit_field(body, "contamination") or {}).items()):
        if isinstance(deltas, Mapping):
            for name, value in sorted(cast("Mapping[str, Any]", deltas).items()):
                contamination[f"{clock}.{name}"] = value
    return {
        "cells": cells,
        "contamination": contamination,
        "egress_attempts": int(pit_field(body, "egress_attempts") or 0),
        "probe_verdict": pit_field(body, "probe_verdict"),
        "decoders": pit_field(body, "decoders"),
        "window_ends_before_cutoff": pit_field(body, "window_ends_before_cutoff"),
        "release_digest": pit_field(body, "release_digest"),
        "calendar_digest": pit_field(body, "calendar_digest"),
        "post_cutoff": {
            str(m.get("model")): m.get("post_cutoff")
            for m in cast("list[Mapping[str, Any]]", pit_field(body, "holdout_models") or [])
        },
    }


def metrics_of(body: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The gate's view of a receipt body: ``kind`` plus the numbers the rules read.

    ``extra`` carries what the body does not hold and the caller measured from the files it binds: for an eval
    receipt ``solved`` (rollouts passing every public and hidden test) and ``flagged`` (rollouts flagged for reward
    hacking, None when the eval holds no answers to check, with ``hacking_not_checked`` saying why); for a
    campaign receipt ``flagged`` (per model).
    """
    extra = extra or {}
    kind = str(body.get("kind", PIT_KIND))
    if kind == PIT_KIND:
        return {"kind": kind, **_pit_metrics(body)}
    if kind == EVAL_KIND:
        summary = cast("Mapping[str, Any]", body.get("summary") or {})
        solver = cast("Mapping[str, Any]", body.get("solver") or {})
        cost = solver.get("cost_usd")
        solved = extra.get("solved")
        # One entry, keyed "solver" whatever the solver is: gating a new model against a baseline of another
        # compares the two, which is what a CI gate on "the eval" wants.
        return {
            "kind": kind,
            "solver": str(solver.get("model_id") or solver.get("name") or ""),
            "models": {
                "solver": {
                    "n": summary.get("scored"),
                    "public_pass_rate": summary.get("public_pass_rate"),
                    "hidden_pass_rate": summary.get("hidden_pass_rate"),
                    "gap": summary.get("gap"),
                    "solved": solved,
                    "cost_per_solved_task_usd": _per_solved(cost, solved),
                    "flagged": extra.get("flagged"),
                }
            },
        }
    if kind == CAMPAIGN_KIND:
        summary = cast("Mapping[str, Any]", body.get("summary") or {})
        flagged = cast("Mapping[str, int]", extra.get("flagged") or {})
        models: dict[str, Any] = {}
        for m in cast("list[Mapping[str, Any]]", summary.get("per_model") or []):
            name = str(m.get("model"))
            models[name] = {
                "n": m.get("scored"),
                "public_pass_rate": m.get("public_pass@1"),
                "hidden_pass_rate": m.get("hidden_pass@1"),
                "gap": m.get("gap"),
                "solved": m.get("solved_tasks"),
                "cost_per_solved_task_usd": m.get("cost_per_solved_task_usd"),
                "flagged": flagged.get(name),
            }
        return {"kind": kind, "models": models}
    raise ConfigError(f"receipt kind {kind!r}: the gate knows {PIT_KIND}, {EVAL_KIND} and {CAMPAIGN_KIND}")


def _per_solved(cost: Any, solved: Any) -> str | None:
    from decimal import Decimal, InvalidOperation

    if cost is None or not isinstance(solved, int) or solved == 0:
        return None
    try:
        return str((Decimal(str(cost)) / solved).quantize(Decimal("0.000001")))
    except InvalidOperation:
        return None


def load_baseline(path: str | Path) -> dict[str, Any]:
    """A baseline file written by ``evalkit gate --write-baseline``; ConfigError names what is wrong."""
    p = Path(path)
    d = read_json_object(
        p, missing=f"baseline not found (write one with `evalkit gate RECEIPT --baseline {p} --write-baseline`)"
    )
    if d.get("format") != BASELINE_FORMAT:
        raise ConfigError(f"{p}: field 'format': expected {BASELINE_FORMAT!r}, got {d.get('format')!r}")
    metrics = d.get("metrics")
    if not isinstance(metrics, dict) or "kind" not in metrics:
        raise ConfigError(f"{p}: field 'metrics': expected an object with a 'kind'")
    return d


# --- binomial tolerance ------------------------------------------------------------------------------------------


def wilson(p: float, n: int, z: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``p`` observed over ``n`` trials."""
    if n <= 0:
        return 0.0, 1.0
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def drop_tolerance(base: float, n_base: int, cur: float, n_cur: int, confidence: float) -> float:
    """How far below ``base`` a rate ``cur`` may fall before the drop is significant at ``confidence``
    (one-sided): Newcombe's hybrid score interval for a difference of two proportions (his method 10), built
    from the two Wilson intervals. The drop ``base - cur`` is significant when it exceeds
    ``sqrt((base - l_base)^2 + (u_cur - cur)^2)``."""
    z = statistics.NormalDist().inv_cdf(confidence)
    l_base, _ = wilson(base, n_base, z)
    _, u_cur = wilson(cur, n_cur, z)
    return math.sqrt((base - l_base) ** 2 + (u_cur - cur) ** 2)


# --- rules -------------------------------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    return "null" if v is None else (f"{v:.6f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v))


def _moved(a: Any, b: Any, tol: float) -> bool:
    if a is None or b is None:
        return a is not b
    return abs(float(a) - float(b)) > tol + 1e-12


def _pit_rules(base: Mapping[str, Any] | None, cur: Mapping[str, Any], policy: GatePolicy) -> list[Violation]:
    out: list[Violation] = []
    if cur["egress_attempts"]:
        out.append(Violation("egress", f"{cur['egress_attempts']} egress attempt(s) recorded"))
    cells = cast("dict[str, dict[str, Any]]", cur["cells"])
    for cid, c in cells.items():
        if c["reachable"] and c["lookahead_trades"]:
            out.append(Violation("lookahead", f"cell {cid} (reachable) made {c['lookahead_trades']} look-ahead trade(s)"))
        if c["rejected_picks"]:
            out.append(Violation("rejected_picks", f"cell {cid} has {c['rejected_picks']} rejected pick(s)"))
    if cur["probe_verdict"] in ("mask_leaks", "not_run"):
        out.append(Violation("probe", f"probe verdict {cur['probe_verdict']}"))
    decoders = cur.get("decoders")
    if isinstance(decoders, Mapping) and decoders.get("holds_against_public_knowledge") is False:
        broken = ", ".join(str(b) for b in cast("list[Any]", decoders.get("broken_by") or []))
        out.append(Violation("masks_public", f"a public-knowledge decoder broke a mask (broken by: {broken})"))
    if cur["window_ends_before_cutoff"] is True:
        out.append(Violation("cutoff", "P2: the window ends before the declared training cutoff"))
    if base is None:
        return out
    bcells = cast("dict[str, dict[str, Any]]", base.get("cells") or {})
    for cid in sorted(set(bcells) - set(cells)):
        out.append(Violation("cells", f"cell {cid} is in the baseline but not in the run"))
    for cid in sorted(set(cells) - set(bcells)):
        out.append(Violation("cells", f"cell {cid} is in the run but not in the baseline"))
    for cid in sorted(set(cells) & set(bcells)):
        b, c = bcells[cid], cells[cid]
        if not c["reachable"] and c["lookahead_trades"] > int(b.get("lookahead_trades") or 0):
            out.append(
                Violation(
                    "lookahead_unreachable",
                    f"cell {cid} (unreachable) made {c['lookahead_trades']} look-ahead trade(s), baseline {b.get('lookahead_trades')}",
                )
            )
        if _moved(b.get("total_return"), c["total_return"], policy.return_tolerance):
            out.append(
                Violation(
                    "cell_return",
                    f"cell {cid} total_return {_fmt(c['total_return'])}, baseline {_fmt(b.get('total_return'))} "
                    f"(tolerance {_fmt(policy.return_tolerance)})",
                )
            )
    bcont = cast("dict[str, Any]", base.get("contamination") or {})
    ccont = cast("dict[str, Any]", cur["contamination"])
    for name in sorted(set(bcont) | set(ccont)):
        if _moved(bcont.get(name), ccont.get(name), policy.contamination_tolerance):
            out.append(
                Violation(
                    "contamination",
                    f"contamination {name} {_fmt(ccont.get(name))}, baseline {_fmt(bcont.get(name))} "
                    f"(tolerance {_fmt(policy.contamination_tolerance)})",
                )
            )
    for rule, label in (("release_digest", "release content digest"), ("calendar_digest", "calendar digest")):
        if base.get(rule) != cur[rule]:
            out.append(Violation(rule, f"{label} {cur[rule]}, baseline {base.get(rule)}"))
    now = cast("dict[str, Any]", cur.get("post_cutoff") or {})
    for model, was in sorted(cast("dict[str, Any]", base.get("post_cutoff") or {}).items()):
        if was is True and now.get(model) is not True:
            out.append(Violation("holdout", f"model {model}: the baseline run was post-cutoff, this one is {now.get(model)}"))
    return out


def _model_rules(base: Mapping[str, Any] | None, cur: Mapping[str, Any], policy: GatePolicy) -> list[Violation]:
    out: list[Violation] = []
    models = cast("dict[str, dict[str, Any]]", cur["models"])
    bmodels = cast("dict[str, dict[str, Any]]", (base or {}).get("models") or {})
    for name, m in models.items():
        flagged, bflagged = m.get("flagged"), bmodels.get(name, {}).get("flagged")
        if isinstance(flagged, int) and flagged > 0:
            if policy.hacking == "any":
                out.append(Violation("hacking", f"{name}: {flagged} rollout(s) flagged for reward hacking"))
            elif flagged > int(bflagged or 0):
                out.append(Violation("hacking", f"{name}: {flagged} rollout(s) flagged for reward hacking, baseline {bflagged or 0}"))
    if base is None:
        return out
    for name in sorted(set(bmodels) - set(models)):
        out.append(Violation("models", f"model {name} is in the baseline but not in the run"))
    for name in sorted(set(bmodels) & set(models)):
        b, c = bmodels[name], models[name]
        for part in ("public_pass_rate", "hidden_pass_rate"):
            pb, pc, nb, nc = b.get(part), c.get(part), b.get("n"), c.get("n")
            if pb is None or pc is None or not isinstance(nb, int) or not isinstance(nc, int):
                if pb is not None and pc is None:
                    out.append(Violation("pass_rate", f"{name}: {part} is null, baseline {_fmt(pb)}"))
                continue
            tol = drop_tolerance(float(pb), nb, float(pc), nc, policy.confidence)
            if float(pb) - float(pc) > tol:
                out.append(
                    Violation(
                        "pass_rate",
                        f"{name}: {part} {_fmt(float(pc))} (n={nc}), baseline {_fmt(float(pb))} (n={nb}): "
                        f"a drop of {_fmt(float(pb) - float(pc))} > tolerance {tol:.4f} "
                        f"(Newcombe-Wilson, one-sided {policy.confidence:.0%})",
                    )
                )
        gb, gc = b.get("gap"), c.get("gap")
        if gb is not None and gc is not None and float(gc) > float(gb) + policy.gap_tolerance + 1e-12:
            out.append(
                Violation("gap", f"{name}: public-hidden gap {_fmt(float(gc))}, baseline {_fmt(float(gb))} (tolerance {_fmt(policy.gap_tolerance)})")
            )
        cb, cc = b.get("cost_per_solved_task_usd"), c.get("cost_per_solved_task_usd")
        if cb is not None and cc is not None and float(cc) > float(cb) * (1 + policy.cost_tolerance) + 1e-12:
            out.append(
                Violation(
                    "cost_per_solved",
                    f"{name}: cost per solved task {cc} USD, baseline {cb} USD (tolerance {_fmt(policy.cost_tolerance)} relative)",
                )
            )
        elif cb is not None and cc is None and b.get("solved"):
            out.append(Violation("cost_per_solved", f"{name}: no task solved, baseline {cb} USD per solved task"))
    return out


def compare(
    baseline: Mapping[str, Any] | None, current: Mapping[str, Any], policy: GatePolicy | None = None
) -> list[Violation]:
    """Every violated rule, in a stable order; rules in ``policy.ignore`` are skipped. Without a baseline only
    the absolute rules run."""
    policy = policy or GatePolicy()
    if baseline is not None and baseline.get("kind") != current["kind"]:
        raise ConfigError(
            f"the baseline is of a {baseline.get('kind')!r} receipt, the receipt is {current['kind']!r}: expected the same kind"
        )
    if current["kind"] == PIT_KIND:
        found = _pit_rules(baseline, current, policy)
    else:
        found = _model_rules(baseline, current, policy)
    return [v for v in found if v.rule not in policy.ignore]


def rules_for(kind: str, extra: Mapping[str, Any] | None = None) -> Sequence[str]:
    """The rule ids that apply to a receipt kind (``extra`` as for :func:`metrics_of`)."""
    pit = ("verify", "egress", "lookahead", "lookahead_unreachable", "rejected_picks", "probe", "masks_public", "cutoff", "cells",
           "cell_return", "contamination", "release_digest", "calendar_digest", "holdout")
    if kind == PIT_KIND:
        return pit
    skip = {*pit[1:], *not_checked_for(kind, extra)}
    return tuple(r for r in RULES if r not in skip)


def not_checked_for(kind: str, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Rules that cannot be checked for a receipt, with the reason (reported, never passed in silence): for an
    eval, ``hacking`` when it holds no answers to check (``extra`` as for :func:`metrics_of`)."""
    extra = extra or {}
    if kind == EVAL_KIND and extra.get("flagged") is None:
        why = extra.get("hacking_not_checked") or "the eval's reward-hacking evidence was not read"
        return {"hacking": str(why)}
    return {}
