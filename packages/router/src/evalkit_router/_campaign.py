"""Running a campaign: K rollouts per task per model, resumable without redoing paid work.

Every rollout has a key (:func:`rollout_key`). The completion is written to the store the moment it arrives
(status ``completed``), the verdict after grading (status ``graded``). A run therefore:

- skips graded rollouts (a verdict with a sandbox infrastructure error counts as not graded: it is re-graded,
  which costs nothing),
- grades stored-but-ungraded completions without calling the model,
- calls the model only for rollouts with no stored completion.

Model calls run concurrently on one asyncio loop through one ``ModelClient`` (its rate limits, retries, budget
and call record). Grading runs in threads that each drive one slot of the sandbox's own process pool (a
template interpreter per slot, sized to the cores), so grading never blocks the calls.

One runner at a time. A run holds the campaign's *lease* (a row naming its process, which the store keeps
alive with a heartbeat): a second run of the same campaign, from any process, is refused with one line naming
the holder; a lease whose process is gone is taken over.

No paid answer is lost to a crash between the model layer and the campaign: the rollout row is written in the
transaction that settles the call (``ModelClient.complete(record=...)``). A call that was in flight when the
process died is charged at its worst case by the model layer as an *unknown outcome*; on resume the run
reports every such call of this campaign ("paid, answer lost") with its cost, and makes it again.

Budget. The campaign's ``budget_usd`` is a :class:`~evalkit_core.models.BudgetScope` over everything the
model layer charged for this campaign's calls (label ``campaign:NAME``): failed attempts of unknown outcome and
lost answers count, not only stored completions. Every attempt reserves its worst case against it as well as
against the global cap. A refusal by the campaign's budget, or a global refusal that is not transient, stops
new calls; calls in flight finish and are stored; the outcome says how many rollouts are left and what they
would cost at most. A *transient* global refusal (the call would fit once the reservations in flight settle,
e.g. those of another campaign sharing the cap) is retried with back-off, reconciling dead processes'
reservations between tries, before the campaign halts.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Literal, Protocol, cast

import attrs

from evalkit import (
    JSON,
    MINING_LIMITS,
    CallTest,
    RayCluster,
    Sandbox,
    SandboxLimits,
    Task,
    VerifierSettings,
    check_executor,
    model_request,
)
from evalkit_core.models import (
    BudgetExceeded,
    BudgetScope,
    Completion,
    ModelClient,
    ModelError,
    Request,
    Timeouts,
    charged_for_label,
    key_routes,
    load_registry,
    reconcile,
)
from evalkit_core.store import Connection, Store, evalkit_home
from evalkit_router._campaign_store import (
    LostCall,
    acquire_lease,
    lost_calls,
    open_campaign,
    release_lease,
    set_status,
)
from evalkit_router._config import (
    CampaignConfig,
    CampaignError,
    identity,
    load_campaign,
    select_tasks,
)
from evalkit_router._integrity import check_rollout_costs
from evalkit_router._rollouts import (
    Answer,
    GradedUnder,
    PlannedRollout,
    adversarial_set,
    grade_one,
    graded_under_by_key,
    insert_rollout,
    mine_campaign,
    plan_rollouts,
    rollout_key,
    set_digest,
    store_verdict,
    stored_text,
)
from evalkit_router._status import (
    CampaignStatus,
    campaign_label,
    campaign_status,
    load_stored_campaign,
    stored_rollouts,
)

__all__ = [
    "CampaignStatus",
    "LostCall",
    "PlannedRollout",
    "ProgressFn",
    "RunOutcome",
    "adversarial_set",
    "campaign_label",
    "campaign_status",
    "load_stored_campaign",
    "plan_rollouts",
    "rollout_key",
    "run_campaign",
    "run_campaign_async",
]

ProgressFn = Callable[[int, int, Decimal], None]
"""``progress(done, total, spent_usd)``: called after each rollout is graded (and once at the start)."""

# a transient global refusal is tried again this many times, waiting REFUSAL_BACKOFF * 2**n seconds (at most
# REFUSAL_MAX_WAIT) before the n-th retry: about 25 s in all before the campaign halts
REFUSAL_RETRIES = 8
REFUSAL_BACKOFF = 0.1
REFUSAL_MAX_WAIT = 8.0


@attrs.frozen
class RunOutcome:
    """What one ``campaign run`` did. ``status``: ``done`` (every rollout graded), ``halted`` (a budget refusal
    stopped it) or ``incomplete`` (model errors left rollouts without a completion; run again to retry them)."""

    name: str
    status: Literal["done", "halted", "incomplete"]
    planned: int
    skipped: int  # graded before this run
    regraded: int  # stored completions graded in this run without a model call
    called: int  # model calls that returned a completion in this run
    model_errors: tuple[str, ...]
    spent_this_run: Decimal  # everything the model layer charged for this campaign in this run
    spent_total: Decimal  # ... and in all its runs (failed attempts and lost answers included)
    remaining: int
    remaining_worst_case: Decimal
    halted_by: str | None
    notes: tuple[str, ...]
    mined: int = 0  # counterexamples newly banked by this run (mine = true)
    lost: tuple[LostCall, ...] = ()  # paid, answer lost: calls in flight when an earlier run died
    flagged: int = (
        0  # completions stored this run whose usage was unusable or impossible (charged at the bound)
    )


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group.exceptions[0]
    while isinstance(exc, BaseExceptionGroup):
        exc = cast("BaseExceptionGroup[BaseException]", exc).exceptions[0]
    return exc


async def run_campaign_async(
    config: CampaignConfig,
    *,
    store: Store,
    client: ModelClient,
    sandbox: Sandbox,
    progress: ProgressFn | None = None,
    announce: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run (or resume) ``config`` with an open store, model client and sandbox. See the module docstring.
    ``announce`` is told, once the run is sure to go ahead and before any request, which key goes to which
    host (one line each)."""
    executor = LocalExecutor(client, sandbox)
    try:
        return await run_with_executor(
            config, store=store, client=client, executor=executor, progress=progress, announce=announce
        )
    finally:
        executor.close()


async def run_with_executor(
    config: CampaignConfig,
    *,
    store: Store,
    client: ModelClient,
    executor: CampaignExecutor,
    progress: ProgressFn | None = None,
    announce: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run (or resume) ``config``, with its model calls and grading done by ``executor`` (this process's model
    client and sandbox, or Ray workers). ``client`` is the driver's: registry, worst cases, reconciling."""
    registry = client.registry
    for m in config.models:
        registry.get(m)  # RegistryError (a ConfigError) names the unknown model and the known ones
    tasks = select_tasks(config)
    acquire_lease(store, config.name)
    try:
        return await _run_leased(
            config, tasks, store=store, client=client, executor=executor, progress=progress, announce=announce
        )
    finally:
        release_lease(store, config.name)


class CampaignExecutor(Protocol):
    """Who makes a campaign's model calls and grades its completions (the driver keeps the plan, the lease and
    the report). ``call`` stores the rollout in the transaction that settles the call (or finds it stored);
    ``grade`` returns the verdict JSON, its infrastructure error and the isolation it was graded under."""

    workers: int
    limits: SandboxLimits
    isolation_label: str
    shared_scope: bool  # the campaign's budget scope must be shared through the store (many processes)

    async def call(
        self, p: PlannedRollout, request: Request, *, campaign: str, label: str, scope: BudgetScope
    ) -> Answer: ...

    async def grade(
        self, p: PlannedRollout, text: str, adversarial: tuple[CallTest, ...], settings: VerifierSettings
    ) -> tuple[dict[str, JSON], str | None, str]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """The campaign's calls on this process's model client (one asyncio loop), its grading in threads that each
    drive one slot of the local sandbox."""

    shared_scope = False

    def __init__(self, client: ModelClient, sandbox: Sandbox) -> None:
        self._client = client
        self._sandbox = sandbox
        self.workers = sandbox.workers
        self.limits = sandbox.limits
        self.isolation_label = sandbox.isolation.label
        self._pool = ThreadPoolExecutor(max_workers=sandbox.workers, thread_name_prefix="campaign-grade")

    async def call(
        self, p: PlannedRollout, request: Request, *, campaign: str, label: str, scope: BudgetScope
    ) -> Answer:
        def record(db: Connection, completion: Completion) -> None:
            insert_rollout(db, campaign, p, completion)

        c = await self._client.complete(p.model_id, request, label=label, scope=scope, record=record)
        return Answer(c.text, c.anomaly, c.charged)

    async def grade(
        self, p: PlannedRollout, text: str, adversarial: tuple[CallTest, ...], settings: VerifierSettings
    ) -> tuple[dict[str, JSON], str | None, str]:
        loop = asyncio.get_running_loop()
        result, infra = await loop.run_in_executor(
            self._pool, grade_one, p.task, text, adversarial, self._sandbox, settings
        )
        return result, infra, self.isolation_label

    def close(self) -> None:
        self._pool.shutdown(wait=True)


async def _run_leased(
    config: CampaignConfig,
    tasks: Sequence[Task],
    *,
    store: Store,
    client: ModelClient,
    executor: CampaignExecutor,
    progress: ProgressFn | None,
    announce: Callable[[str], None] | None,
) -> RunOutcome:
    registry = client.registry
    registry_models = cast("Mapping[str, JSON]", registry.content.get("models", {}))
    ident = identity(config, tasks, {m: registry_models[m] for m in config.models})
    notes = open_campaign(store, config, ident, registry)
    was_done = "was done" in notes
    notes = [n for n in notes if n != "was done"]
    check_rollout_costs(store, config.name)  # never build on (or certify) a damaged record
    if announce is not None:
        for line in key_routes(registry, config.models):
            announce(f"key {line}")
    plan = plan_rollouts(config.name, config.models, tasks, config.k)
    stored = stored_rollouts(store, config.name)
    adversarial = {t.id: adversarial_set(store, t) for t in tasks}
    adv_digests = {t: set_digest(tests) for t, tests in adversarial.items()}
    lost = lost_calls(store, config.name)

    settings = VerifierSettings(executor.limits)
    under = GradedUnder(settings.digest, cast("str", ident["tasks_digest"]), executor.isolation_label)
    graded_under = graded_under_by_key(store, config.name)

    def stale(p: PlannedRollout) -> bool:
        """Stored but not (validly) graded: no verdict, an infrastructure error, an adversarial set that has
        grown since it was graded, or graded under other settings, another bank or another isolation (or before
        evalkit recorded them). Grading it again costs no model call."""
        status, infra, _, adv = stored[p.key]
        return (
            status != "graded"
            or infra is not None
            or adv != adv_digests[p.task.id]
            or graded_under.get(p.key) != under
        )

    to_grade = [p for p in plan if p.key in stored and stale(p)]
    to_call = deque(p for p in plan if p.key not in stored)
    skipped = len(plan) - len(to_grade) - len(to_call)
    requests = {
        (p.task.id, p.sample): model_request(
            p.task, p.sample, max_tokens=config.max_tokens, temperature=config.temperature
        )
        for p in plan
    }

    label = campaign_label(config.name)
    # what this campaign was charged before: the model layer's record (a store written before calls carried a
    # label knows only the stored completions)
    answers = sum((c for _, _, c, _ in stored.values()), Decimal(0))
    spent_before = max(charged_for_label(store, label), answers)
    scope = BudgetScope(
        f"campaign {config.name!r}",
        config.budget_usd,
        spent=spent_before,
        label=label if executor.shared_scope else None,
    )
    done = skipped
    called = 0
    flagged = 0
    errors: list[str] = []
    failed: list[PlannedRollout] = []
    halt: BudgetExceeded | None = None
    loop = asyncio.get_running_loop()

    def report() -> None:
        if progress is not None:
            progress(done, len(plan), scope.spent)

    async def grade(p: PlannedRollout, text: str) -> None:
        nonlocal done
        result, infra, isolation = await executor.grade(p, text, adversarial[p.task.id], settings)
        store_verdict(store, p.key, result, infra, attrs.evolve(under, isolation=isolation))
        done += 1
        report()

    async def call_worker(grading: asyncio.TaskGroup) -> None:
        nonlocal called, flagged, halt
        refusals = 0
        while to_call and halt is None:
            p = to_call.popleft()
            request = requests[(p.task.id, p.sample)]
            try:
                completion = await executor.call(p, request, campaign=config.name, label=label, scope=scope)
            except BudgetExceeded as exc:
                to_call.appendleft(p)
                if exc.scope is None and exc.transient and refusals < REFUSAL_RETRIES and halt is None:
                    # only reservations in flight stand in the way (this campaign's, another's, or a dead
                    # process's): let them settle, reconcile the dead, and try again
                    await asyncio.sleep(min(REFUSAL_MAX_WAIT, REFUSAL_BACKOFF * 2**refusals))
                    refusals += 1
                    reconcile(store)
                    continue
                if halt is None:
                    halt = exc
                return
            except ModelError as exc:
                errors.append(f"{p.task.id} sample {p.sample} on {p.model_id}: {exc}")
                failed.append(p)
                continue
            refusals = 0
            called += 1
            flagged += completion.anomaly is not None
            grading.create_task(grade(p, completion.text))
            await asyncio.sleep(0)  # a call that never suspends (a sim model) must still let grading start

    mined = 0
    report()
    try:
        async with asyncio.TaskGroup() as grading:
            for p in to_grade:
                grading.create_task(grade(p, stored_text(store, p.key)))
            async with asyncio.TaskGroup() as callers:
                for _ in range(min(config.concurrency, max(1, len(to_call)))):
                    callers.create_task(call_worker(grading))
        remaining = [*to_call, *failed]
        # mine once every rollout is graded; a finished campaign that had nothing to do is not mined again
        if config.mine and halt is None and not remaining and (called or to_grade or not was_done):
            with Sandbox(MINING_LIMITS, workers=min(executor.workers, os.cpu_count() or 1)) as mining_box:
                mined = await loop.run_in_executor(None, mine_campaign, store, config.name, tasks, mining_box)
            if mined:  # the adversarial sets grew: grade every rollout of those tasks on them (no model call)
                adversarial = {t.id: adversarial_set(store, t) for t in tasks}
                regrade = [p for p in plan if set_digest(adversarial[p.task.id]) != adv_digests[p.task.id]]
                done -= len(regrade)
                async with asyncio.TaskGroup() as grading:
                    for p in regrade:
                        grading.create_task(grade(p, stored_text(store, p.key)))
    except BaseExceptionGroup as group:  # surface the first real error (e.g. MissingKeyError), not the group
        raise _first_leaf(group) from None
    if executor.shared_scope:  # the workers' charges (failed attempts too) are in the store, not in this process
        scope.spent = max(charged_for_label(store, label), spent_before)
    worst_left = sum(
        (client.worst_case(p.model_id, requests[(p.task.id, p.sample)]) for p in remaining), Decimal(0)
    )
    halted_by: str | None = None
    if halt is not None:
        if halt.scope is not None:
            cap_text = f"campaign budget ${halt.cap}"
            how = "raise budget_usd in the campaign file and run it again to resume"
        else:
            cap_text = f"global budget cap ${halt.cap}"
            how = "raise the global cap with `evalkit budget set` and run the campaign again to resume"
        halted_by = (
            f"{cap_text} reached: spent ${halt.spent} + in flight ${halt.reserved} + the next call's worst case "
            f"${halt.needed} > ${halt.cap}; {how}"
        )
    status: Literal["done", "halted", "incomplete"] = (
        "halted" if halt is not None else ("incomplete" if remaining else "done")
    )
    set_status(store, config.name, status)
    return RunOutcome(
        name=config.name,
        status=status,
        planned=len(plan),
        skipped=skipped,
        regraded=len(to_grade),
        called=called,
        model_errors=tuple(errors),
        spent_this_run=scope.spent - spent_before,
        spent_total=scope.spent,
        remaining=len(remaining),
        remaining_worst_case=worst_left,
        halted_by=halted_by,
        notes=tuple(notes),
        mined=mined,
        lost=tuple(lost),
        flagged=flagged,
    )


def run_campaign(
    path: str | Path,
    *,
    new_name: str | None = None,
    home: str | Path | None = None,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    timeouts: Timeouts | None = None,
    announce: Callable[[str], None] | None = None,
    executor: str = "local",
    address: str | None = None,
) -> RunOutcome:
    """Run or resume the campaign in ``path`` (under ``new_name`` if given) with the store in ``home``
    (default ``$EVALKIT_HOME``). Sandbox workers default to the number of cores. ``timeouts`` override the
    campaign file's (which override the registry's). ``announce`` is told, before any request, which key
    goes to which host (one line each).

    ``executor="ray"`` makes the calls in caller actors and grades on sandbox-worker actors of the Ray cluster at
    ``address`` (default: a single-machine Ray started here with ``workers`` CPUs); see
    ``evalkit_router._campaign_ray``. Rollouts, verdicts, spend and the report are the local executor's."""
    check_executor(executor, address)
    config = load_campaign(path)
    if new_name is not None:
        if not new_name.strip():
            raise CampaignError("--new-name: expected a non-empty name")
        config = config.renamed(new_name.strip())
    registry = load_registry(config.registry)
    # bad input before any work: an unknown model or a task bank that does not load is refused before the store
    # (a fresh $EVALKIT_HOME's database) is made
    for m in config.models:
        registry.get(m)
    select_tasks(config)
    deadlines = config.timeouts if timeouts is None else timeouts.over(config.timeouts)
    limits = SandboxLimits() if config.cpu_seconds is None else SandboxLimits(cpu_seconds=config.cpu_seconds)

    async def main(store: Store) -> RunOutcome:
        async with ModelClient(registry=registry, store=store, timeouts=deadlines) as client:
            if executor == "ray":
                from evalkit_router._campaign_ray import RayExecutor

                keys = {e.api_key_env for e in (registry.get(m) for m in config.models) if e.api_key_env}
                env = {k: os.environ[k] for k in sorted(keys) if k in os.environ}
                base = Path(home) if home is not None else evalkit_home()
                with (
                    RayCluster(address, num_cpus=workers) as cluster,
                    RayExecutor(
                        cluster, registry=registry, home=base.resolve(), timeouts=deadlines, limits=limits,
                        workers=workers, env=env, name=config.name,
                    ) as ray_executor,
                ):  # fmt: skip
                    return await run_with_executor(
                        config, store=store, client=client, executor=ray_executor, progress=progress,
                        announce=announce,
                    )  # fmt: skip
            with Sandbox(limits, workers=workers or os.cpu_count() or 1) as sandbox:
                return await run_campaign_async(
                    config, store=store, client=client, sandbox=sandbox, progress=progress, announce=announce
                )

    with Store.open(home) as store:
        return asyncio.run(main(store))
