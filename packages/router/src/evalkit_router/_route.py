"""Cost-aware routing: calibrate each model's quality and cost from a campaign, then send each task to the
cheapest model that is good enough, escalating when the verifier's public tests fail.

Calibration (per model, and per model and task family): over scored rollouts (graded, no infrastructure error),
``quality`` is the Wilson lower bound, at confidence ``z``, of the share of rollouts that pass every hidden and
adversarial test; ``cost`` is the mean exact cost per rollout. It is stored with the digest of the campaign
results it came from.

Policy for one task: the candidates are the models whose calibrated quality (for the task's family when the
family has enough rollouts, else overall) clears the threshold, in increasing cost; the strongest model (highest
quality) is always the last resort. Each candidate answers in turn; an answer that fails the public tests (the
only tests available at serving time) escalates to the next; the first answer that passes them is served. If
none does, the last resort's answer is served. Every escalation is recorded.

Simulation replays the policy on stored rollouts (no model calls): for each held-out task and each sample index
``s``, the candidate's answer is its stored rollout ``s`` for that task, and its cost is that rollout's cost.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import cast

import attrs

from evalkit import JSON, Task
from evalkit_core import ConfigError, digest

__all__ = [
    "Calibration",
    "LiveDecision",
    "ModelQuality",
    "RouteOutcome",
    "RoutingReport",
    "calibrate",
    "family_of",
    "route_live",
    "route_order",
    "simulate_routing",
    "split_tasks",
    "sweep",
    "wilson_lower_bound",
]

MIN_FAMILY_ROLLOUTS = 20


def wilson_lower_bound(successes: int, n: int, z: float = 1.96) -> float:
    """Lower end of the Wilson score interval for ``successes`` out of ``n`` (0 when ``n`` is 0)."""
    if n == 0:
        return 0.0
    p = successes / n
    denom = 1 + z * z / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - margin) / denom)


def family_of(task_id: str) -> str:
    return task_id.split("/", 1)[0]


def _passes(row: Mapping[str, JSON], part: str) -> bool:
    block = cast("Mapping[str, int]", row[part])
    return block["passed"] == block["total"]


def _scored(row: Mapping[str, JSON]) -> bool:
    return row.get("status") == "graded" and row.get("infra_error") is None


def _good(row: Mapping[str, JSON]) -> bool:
    """Passes every test the policy never saw: hidden and adversarial."""
    return _passes(row, "hidden") and _passes(row, "adversarial")


@attrs.frozen
class ModelQuality:
    model: str
    n: int
    successes: int
    quality: float  # Wilson lower bound
    mean_cost: Decimal

    def ci95(self) -> list[float] | None:
        """The Wilson 95% interval of the pass rate (None without scored samples)."""
        from evalkit.grading._stats import wilson_interval

        ci = wilson_interval(self.successes, self.n)
        return None if ci is None else [ci[0], ci[1]]

    def to_json(self) -> dict[str, JSON]:
        return {
            "model": self.model,
            "n": self.n,
            "successes": self.successes,
            "pass_rate": round(self.successes / self.n, 6) if self.n else None,
            "pass_rate_ci95": cast("JSON", self.ci95()),
            "quality": round(self.quality, 6),
            "mean_cost_usd": format(self.mean_cost, "f"),
        }


@attrs.frozen
class Calibration:
    campaign: str
    results_digest: str
    tasks: tuple[str, ...]
    z: float
    overall: Mapping[str, ModelQuality]
    by_family: Mapping[str, Mapping[str, ModelQuality]]

    def quality(self, model: str, task_id: str) -> ModelQuality:
        fam = self.by_family.get(family_of(task_id), {}).get(model)
        if fam is not None and fam.n >= MIN_FAMILY_ROLLOUTS:
            return fam
        return self.overall[model]

    @property
    def strongest(self) -> str:
        return max(self.overall.values(), key=lambda q: (q.quality, -q.mean_cost, q.model)).model

    @property
    def cheapest(self) -> str:
        return min(self.overall.values(), key=lambda q: (q.mean_cost, q.model)).model

    def to_json(self) -> dict[str, JSON]:
        return {
            "campaign": self.campaign,
            "results_digest": self.results_digest,
            "tasks": list(self.tasks),
            "tasks_digest": digest(list(self.tasks)),
            "z": self.z,
            "min_family_rollouts": MIN_FAMILY_ROLLOUTS,
            "overall": {m: q.to_json() for m, q in sorted(self.overall.items())},
            "by_family": {
                f: {m: q.to_json() for m, q in sorted(qs.items())} for f, qs in sorted(self.by_family.items())
            },
        }


def _quality(model: str, rows: Sequence[Mapping[str, JSON]], z: float) -> ModelQuality:
    scored = [r for r in rows if _scored(r)]
    successes = sum(1 for r in scored if _good(r))
    cost = sum((Decimal(cast("str", r["cost"])) for r in rows), Decimal(0))
    mean = cost / len(rows) if rows else Decimal(0)
    return ModelQuality(model, len(scored), successes, wilson_lower_bound(successes, len(scored), z), mean)


def calibrate(
    rows: Iterable[Mapping[str, JSON]], *, campaign: str, results_digest: str, tasks: Iterable[str], z: float = 1.96
) -> Calibration:
    """Per-model and per-(model, family) quality and cost over the rollouts of ``tasks``."""
    wanted = set(tasks)
    mine = [r for r in rows if r["task_id"] in wanted]
    if not mine:
        raise ConfigError(f"campaign {campaign!r} has no rollouts for the calibration tasks")
    models = sorted({cast("str", r["model_id"]) for r in mine})
    overall = {m: _quality(m, [r for r in mine if r["model_id"] == m], z) for m in models}
    families = sorted({family_of(cast("str", r["task_id"])) for r in mine})
    by_family = {
        f: {
            m: _quality(m, [r for r in mine if r["model_id"] == m and family_of(cast("str", r["task_id"])) == f], z)
            for m in models
        }
        for f in families
    }
    return Calibration(campaign, results_digest, tuple(sorted(wanted)), z, overall, by_family)


def route_order(calibration: Calibration, task_id: str, threshold: float) -> list[str]:
    """The models to try for ``task_id``: those clearing ``threshold``, cheapest first; the strongest last."""
    qualities = [calibration.quality(m, task_id) for m in calibration.overall]
    eligible = sorted((q for q in qualities if q.quality >= threshold), key=lambda q: (q.mean_cost, q.model))
    order = [q.model for q in eligible]
    strongest = calibration.strongest
    if strongest in order:
        order.remove(strongest)
    order.append(strongest)
    return order


@attrs.frozen
class RouteOutcome:
    task_id: str
    sample: int
    tried: tuple[str, ...]
    served_by: str
    passed: bool
    cost: Decimal


@attrs.frozen
class RoutingReport:
    threshold: float
    label: str  # "out_of_sample" or "in_sample"
    tasks: int
    decisions: int
    routed_pass_rate: float
    routed_cost: Decimal
    strongest: str
    strongest_pass_rate: float
    strongest_cost: Decimal
    cheapest: str
    cheapest_pass_rate: float
    cheapest_cost: Decimal
    escalations: int
    served_by: Mapping[str, int]
    outcomes: tuple[RouteOutcome, ...] = attrs.field(repr=False)

    @property
    def cost_reduction(self) -> float:
        if self.strongest_cost == 0:
            return 0.0
        return float(1 - self.routed_cost / self.strongest_cost)

    @property
    def quality_kept(self) -> float:
        return self.routed_pass_rate / self.strongest_pass_rate if self.strongest_pass_rate else 0.0

    def ci95(self, rate: float) -> list[float] | None:
        """The Wilson 95% interval of a pass rate over this report's decisions."""
        from evalkit.grading._stats import wilson_interval

        ci = wilson_interval(round(rate * self.decisions), self.decisions)
        return None if ci is None else [ci[0], ci[1]]

    def to_json(self) -> dict[str, JSON]:
        from evalkit.grading._stats import INTERVAL_METHOD

        return {
            "threshold": self.threshold,
            "label": self.label,
            "tasks": self.tasks,
            "decisions": self.decisions,
            "interval_method": INTERVAL_METHOD,
            "routed": {
                "pass_rate": round(self.routed_pass_rate, 6),
                "pass_rate_ci95": cast("JSON", self.ci95(self.routed_pass_rate)),
                "cost_usd": format(self.routed_cost, "f"),
            },
            "always_strongest": {
                "model": self.strongest,
                "pass_rate": round(self.strongest_pass_rate, 6),
                "pass_rate_ci95": cast("JSON", self.ci95(self.strongest_pass_rate)),
                "cost_usd": format(self.strongest_cost, "f"),
            },
            "always_cheapest": {
                "model": self.cheapest,
                "pass_rate": round(self.cheapest_pass_rate, 6),
                "pass_rate_ci95": cast("JSON", self.ci95(self.cheapest_pass_rate)),
                "cost_usd": format(self.cheapest_cost, "f"),
            },
            "cost_reduction": round(self.cost_reduction, 6),
            "quality_kept": round(self.quality_kept, 6),
            "pass_rate_delta_points": round(100 * (self.routed_pass_rate - self.strongest_pass_rate), 4),
            "escalations": self.escalations,
            "served_by": dict(sorted(self.served_by.items())),
        }


def simulate_routing(
    calibration: Calibration,
    rows: Iterable[Mapping[str, JSON]],
    *,
    tasks: Iterable[str],
    threshold: float,
    label: str = "out_of_sample",
) -> RoutingReport:
    """Replay the policy on stored rollouts of ``tasks`` (no model calls); compare with the fixed policies."""
    index: dict[tuple[str, str, int], Mapping[str, JSON]] = {}
    for r in rows:
        index[(cast("str", r["model_id"]), cast("str", r["task_id"]), cast("int", r["sample"]))] = r
    task_list = sorted(set(tasks))
    samples = sorted({s for (_, t, s) in index if t in set(task_list)})
    outcomes: list[RouteOutcome] = []
    fixed: dict[str, list[tuple[bool, Decimal]]] = {calibration.strongest: [], calibration.cheapest: []}
    escalations = 0
    for task_id in task_list:
        order = route_order(calibration, task_id, threshold)
        for s in samples:
            if not all((m, task_id, s) in index for m in {*order, *fixed}):
                continue  # a rollout missing for some model: skip this decision for every policy alike
            if any(not _scored(index[(m, task_id, s)]) for m in {*order, *fixed}):
                continue  # infrastructure errors are not scored, for any policy
            for m, results in fixed.items():
                r = index[(m, task_id, s)]
                results.append((_good(r), Decimal(cast("str", r["cost"]))))
            cost = Decimal(0)
            tried: list[str] = []
            served = order[-1]
            for m in order:
                r = index[(m, task_id, s)]
                tried.append(m)
                cost += Decimal(cast("str", r["cost"]))
                if _passes(r, "public"):
                    served = m
                    break
            escalations += len(tried) - 1
            final = index[(served, task_id, s)]
            outcomes.append(RouteOutcome(task_id, s, tuple(tried), served, _good(final), cost))
    n = len(outcomes)
    if n == 0:
        raise ConfigError("no routing decision could be replayed: the evaluation tasks have no complete rollouts")

    def rate(xs: Sequence[tuple[bool, Decimal]]) -> float:
        return sum(1 for ok, _ in xs if ok) / len(xs)

    served_by: dict[str, int] = {}
    for o in outcomes:
        served_by[o.served_by] = served_by.get(o.served_by, 0) + 1
    strong, cheap = fixed[calibration.strongest], fixed[calibration.cheapest]
    return RoutingReport(
        threshold=threshold,
        label=label,
        tasks=len({o.task_id for o in outcomes}),
        decisions=n,
        routed_pass_rate=sum(o.passed for o in outcomes) / n,
        routed_cost=sum((o.cost for o in outcomes), Decimal(0)),
        strongest=calibration.strongest,
        strongest_pass_rate=rate(strong),
        strongest_cost=sum((c for _, c in strong), Decimal(0)),
        cheapest=calibration.cheapest,
        cheapest_pass_rate=rate(cheap),
        cheapest_cost=sum((c for _, c in cheap), Decimal(0)),
        escalations=escalations,
        served_by=served_by,
        outcomes=tuple(outcomes),
    )


def sweep(
    calibration: Calibration,
    rows: Sequence[Mapping[str, JSON]],
    *,
    tasks: Iterable[str],
    thresholds: Sequence[float],
    label: str = "out_of_sample",
) -> list[RoutingReport]:
    task_list = list(tasks)
    return [simulate_routing(calibration, rows, tasks=task_list, threshold=t, label=label) for t in thresholds]


def split_tasks(task_ids: Iterable[str], *, fraction: float = 0.5, seed: int = 0) -> tuple[list[str], list[str]]:
    """Split task ids into (calibration, evaluation) by a seeded hash: stable, and stratified by family."""
    if not 0 < fraction < 1:
        raise ConfigError(f"split fraction must be between 0 and 1, got {fraction}")
    by_family: dict[str, list[str]] = {}
    for t in sorted(set(task_ids)):
        by_family.setdefault(family_of(t), []).append(t)
    calib: list[str] = []
    evaluate: list[str] = []
    for fam_tasks in by_family.values():
        ranked = sorted(fam_tasks, key=lambda t: hashlib.sha256(f"{seed}:{t}".encode()).hexdigest())
        cut = round(len(ranked) * fraction)
        calib += ranked[:cut]
        evaluate += ranked[cut:]
    return sorted(calib), sorted(evaluate)


# --------------------------------------------------------------------------------------------- live routing


@attrs.frozen
class LiveDecision:
    task_id: str
    tried: tuple[str, ...]
    served_by: str
    public_passed: bool
    hidden_passed: bool
    cost: Decimal
    infra_error: str | None

    def to_json(self) -> dict[str, JSON]:
        return {
            "task_id": self.task_id,
            "tried": list(self.tried),
            "escalations": len(self.tried) - 1,
            "served_by": self.served_by,
            "public_passed": self.public_passed,
            "hidden_passed": self.hidden_passed,
            "cost_usd": format(self.cost, "f"),
            "infra_error": self.infra_error,
        }


def route_live(
    calibration: Calibration,
    tasks: Sequence[Task],
    *,
    threshold: float,
    max_tokens: int = 1024,
    concurrency: int = 8,
    home: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[LiveDecision]:
    """Route each task through the model layer: cheapest eligible model first, escalating on public failure.

    Hidden (and banked adversarial) tests are graded only after the answer is served, for the report.
    ``progress(done, total)`` is told after each task is served.
    """
    import asyncio

    from evalkit import Sandbox, grade, model_request
    from evalkit_core.models import ModelClient

    async def go(sandbox: Sandbox) -> list[LiveDecision]:
        gate = asyncio.Semaphore(concurrency)
        done = 0
        async with ModelClient(home=home) as client:

            async def one(task: Task) -> LiveDecision:
                nonlocal done
                order = route_order(calibration, task.id, threshold)
                tried: list[str] = []
                cost = Decimal(0)
                verdict = None
                for model in order:
                    tried.append(model)
                    async with gate:
                        completion = await client.complete(model, model_request(task, 0, max_tokens=max_tokens))
                    cost += completion.cost
                    verdict = await asyncio.to_thread(grade, task, completion.text, sandbox)
                    if verdict.infra_error is None and verdict.all_public:
                        break
                assert verdict is not None
                done += 1
                if progress is not None:
                    progress(done, len(tasks))
                return LiveDecision(
                    task.id, tuple(tried), tried[-1], verdict.all_public, verdict.all_hidden, cost, verdict.infra_error
                )

            return list(await asyncio.gather(*(one(t) for t in tasks)))

    with Sandbox() as sandbox:
        return asyncio.run(go(sandbox))
