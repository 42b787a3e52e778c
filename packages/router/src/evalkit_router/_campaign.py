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
import json
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
    CodeTask,
    ExtractionError,
    RayCluster,
    Sandbox,
    SandboxLimits,
    Task,
    TestVerdict,
    Verdict,
    VerifierSettings,
    adversarial_tests,
    bank_counterexamples,
    banked_counterexamples,
    check_executor,
    extract_code,
    fuzz_proposals,
    grade_many,
    mine,
    model_request,
)
from evalkit_core import canonical_bytes, digest
from evalkit_core.models import (
    BudgetExceeded,
    BudgetScope,
    Completion,
    ModelClient,
    ModelError,
    Registry,
    Request,
    Timeouts,
    charged_for_label,
    completion_to_json,
    key_routes,
    load_registry,
    reconcile,
)
from evalkit_core.store import Connection, Process, Store, evalkit_home, is_alive, utc_now
from evalkit_router._config import (
    CampaignChangedError,
    CampaignConfig,
    CampaignError,
    identity,
    identity_diff,
    identity_digest,
    load_campaign,
    select_tasks,
)
from evalkit_router._integrity import check_rollout_costs
from evalkit_router._status import (
    CampaignStatus,
    campaign_label,
    campaign_row,
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

MINE_BUDGET = 200  # fuzz proposals per mined candidate
MINE_SEED = 0
# a transient global refusal is tried again this many times, waiting REFUSAL_BACKOFF * 2**n seconds (at most
# REFUSAL_MAX_WAIT) before the n-th retry: about 25 s in all before the campaign halts
REFUSAL_RETRIES = 8
REFUSAL_BACKOFF = 0.1
REFUSAL_MAX_WAIT = 8.0


def rollout_key(campaign: str, model_id: str, task_id: str, task_digest: str, sample: int) -> str:
    """The key of one rollout: the digest of (campaign name, model id, task id, task content digest, sample)."""
    return digest(
        {
            "campaign": campaign,
            "model": model_id,
            "task": task_id,
            "task_digest": task_digest,
            "sample": sample,
        }
    )


@attrs.frozen
class PlannedRollout:
    key: str
    model_id: str
    task: Task
    sample: int


@attrs.frozen
class Answer:
    """What a campaign needs of a settled call: the text to grade, the usage anomaly (if any) and what the call
    was charged. ``stored``: found already stored (a worker that died after settling it), not called again."""

    text: str
    anomaly: str | None
    charged: Decimal
    stored: bool = False


@attrs.frozen
class LostCall:
    """A call of this campaign that was paid (or may have been) but whose answer never reached a rollout: its
    process died with the request in flight (status ``unknown``, charged at its worst case), or an older
    evalkit lost it between settling and storing."""

    call_id: str
    model_id: str
    status: str
    charged: Decimal

    def to_json(self) -> dict[str, JSON]:
        return {
            "call_id": self.call_id,
            "model_id": self.model_id,
            "status": self.status,
            "charged_usd": str(self.charged),
        }


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


# --------------------------------------------------------------------------------------------- adversary


def adversarial_set(store: Store, task: Task) -> tuple[CallTest, ...]:
    """The banked adversarial tests of ``task`` mined against this version of it (``evalkit.adversarial_tests``
    with the task's digest); empty for structured tasks. Never shown in prompts."""
    if not isinstance(task, CodeTask):
        return ()
    return tuple(adversarial_tests(store, task.id, task_digest=task.digest))


def set_digest(tests: Sequence[CallTest]) -> str:
    return digest({"tests": [t.to_json() for t in tests]})


def _mineable(task: Task) -> bool:
    return isinstance(task, CodeTask) and all(
        isinstance(t, CallTest) for t in (*task.public_tests, *task.hidden_tests)
    )


def _mine_campaign(store: Store, name: str, tasks: Sequence[Task], sandbox: Sandbox) -> int:
    """Mine (fuzz, seeded) every distinct candidate of the campaign that passes all public and hidden tests of a
    call-based code task: those are the answers the static tests cannot tell from the reference. Banks what it
    finds and returns how many counterexamples were new."""
    new = 0
    for task in tasks:
        if not isinstance(task, CodeTask) or not _mineable(task):
            continue
        with store.snapshot() as db:
            rows = db.execute(
                "SELECT completion, result FROM rollouts WHERE campaign_id = ? AND task_id = ?"
                " AND status = 'graded' AND infra_error IS NULL",
                (name, task.id),
            ).fetchall()
        candidates: set[str] = set()
        for completion, result in rows:
            verdict = cast("dict[str, dict[str, int]]", json.loads(result))
            if any(verdict[p]["passed"] != verdict[p]["total"] for p in ("public", "hidden")):
                continue
            try:
                source = extract_code(cast("str", json.loads(completion)["text"]), task.entry_point)
            except ExtractionError:
                continue
            if source.strip() != task.reference.strip():
                candidates.add(source)
        for source in sorted(candidates):
            known = {c.input_digest for c in banked_counterexamples(store, task.id)}
            proposals = fuzz_proposals(task, budget=MINE_BUDGET, seed=MINE_SEED)
            _, found, _ = mine(task, source, proposals, sandbox, known=known)
            new += bank_counterexamples(store, found)
    return new


# --------------------------------------------------------------------------------------------- store


def _set_status(store: Store, name: str, status: str) -> None:
    with store.transaction() as db:
        db.execute("UPDATE campaigns SET status = ? WHERE campaign_id = ?", (status, name))


def _open_campaign(
    store: Store, config: CampaignConfig, ident: dict[str, JSON], registry: Registry
) -> list[str]:
    """Insert the campaign, or check that the stored one has the same identity. Returns notes on run settings
    that changed (allowed). Raises :class:`CampaignChangedError` listing what changed otherwise."""
    ident_digest = identity_digest(ident)
    stored = campaign_row(store, config.name)
    body: dict[str, JSON] = {
        "identity": ident,
        "settings": config.settings_json(),
        "file": {"path": str(config.path), "digest": config.file_digest, "text": config.text},
        "registry": {
            "digest": registry.digest,
            "sources": [s for s in registry.sources if not s.startswith("<")],
        },
    }
    notes: list[str] = []
    if stored is not None:
        old_digest, old, old_status = stored
        if old_status == "done":
            notes.append("was done")
        if old_digest != ident_digest:
            old_ident = cast("dict[str, JSON]", old.get("identity") or {})
            changes = identity_diff(old_ident, ident)
            old_file = cast("dict[str, JSON]", old.get("file") or {})
            raise CampaignChangedError(
                f"{config.path}: campaign {config.name!r} already exists in the store with a different "
                f"definition (first run from {old_file.get('path')}); changed: {'; '.join(changes)}. "
                "Run it under another name with --new-name NAME, or restore the file"
            )
        old_settings = cast("dict[str, JSON]", old.get("settings") or {})
        new_settings = config.settings_json()
        for key in ("budget_usd", "concurrency", "timeouts"):
            if old_settings.get(key) != new_settings[key]:
                notes.append(f"{key} changed: {old_settings.get(key)} -> {new_settings[key]}")
    with store.transaction() as db:
        if stored is None:
            db.execute(
                "INSERT INTO campaigns (campaign_id, created_at, name, config_digest, config, status)"
                " VALUES (?, ?, ?, ?, ?, 'running')",
                (config.name, utc_now(), config.name, ident_digest, canonical_bytes(body).decode()),
            )
        else:
            db.execute(
                "UPDATE campaigns SET config = ?, status = 'running' WHERE campaign_id = ?",
                (canonical_bytes(body).decode(), config.name),
            )
    return notes


def _graded_under(store: Store, name: str) -> dict[str, GradedUnder]:
    """key -> what each graded rollout of the campaign was graded under (rows graded before schema 3 have none)."""
    with store.snapshot() as db:
        rows = db.execute(
            "SELECT rollout_key, settings_digest, bank_digest, isolation FROM rollouts"
            " WHERE campaign_id = ? AND settings_digest IS NOT NULL AND bank_digest IS NOT NULL"
            " AND isolation IS NOT NULL",
            (name,),
        ).fetchall()
    return {str(k): GradedUnder(str(s), str(b), str(i)) for k, s, b, i in rows}


def insert_rollout(db: Connection, name: str, p: PlannedRollout, completion: Completion) -> None:
    """Inside the model layer's settle transaction: the rollout commits with the payment or not at all."""
    data = completion_to_json(completion)
    db.execute(
        "INSERT INTO rollouts (rollout_key, campaign_id, task_id, task_digest, model_id, sample, call_id,"
        " status, completion, cost, created_at, anomaly) VALUES (?, ?, ?, ?, ?, ?, ?, 'completed', ?, ?, ?, ?)",
        (p.key, name, p.task.id, p.task.digest, p.model_id, p.sample, completion.call_id,
         json.dumps(data, ensure_ascii=False, sort_keys=True), data["cost"], utc_now(), completion.anomaly),
    )  # fmt: skip


def _acquire_lease(store: Store, name: str) -> None:
    """Take the campaign's lease, or refuse naming the live process that holds it."""
    owner = store.owner_id
    with store.transaction() as db:
        row = db.execute(
            "SELECT o.host, o.boot_id, o.pid, o.start_ticks, o.heartbeat_at, l.acquired_at"
            " FROM campaign_leases l JOIN owners o ON o.owner_id = l.owner_id WHERE l.campaign_id = ?",
            (name,),
        ).fetchone()
        if row is not None:
            host, boot, pid, ticks, beat, since = row
            if is_alive(Process(str(host), str(boot), int(pid), int(ticks)), str(beat)):
                raise CampaignError(
                    f"campaign {name!r} is already running: process {pid} on {host} holds its lease since "
                    f"{since}; wait for it to finish (or stop it) and run again"
                )
        db.execute(
            "INSERT INTO campaign_leases (campaign_id, owner_id, acquired_at) VALUES (?, ?, ?) ON CONFLICT"
            " (campaign_id) DO UPDATE SET owner_id = excluded.owner_id, acquired_at = excluded.acquired_at",
            (name, owner, utc_now()),
        )


def _release_lease(store: Store, name: str) -> None:
    with store.transaction() as db:
        db.execute(
            "DELETE FROM campaign_leases WHERE campaign_id = ? AND owner_id = ?", (name, store.owner_id)
        )


def _lost_calls(store: Store, name: str) -> list[LostCall]:
    """Calls of this campaign that were (or may have been) paid and whose answer is in no rollout."""
    with store.snapshot() as db:
        rows = db.execute(
            "SELECT c.call_id, c.model_id, c.status, c.charged FROM model_calls c"
            " WHERE c.label = ? AND c.status IN ('unknown', 'ok')"
            " AND NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.call_id = c.call_id)"
            " ORDER BY c.started_at, c.call_id",
            (campaign_label(name),),
        ).fetchall()
    return [LostCall(str(a), str(b), str(c), Decimal(d)) for a, b, c, d in rows]


@attrs.frozen
class GradedUnder:
    """What a verdict was graded under, stored beside it (a rewards export reads the verdict instead of grading
    again, and refuses it when these no longer match): the verifier settings digest, the digest of the
    campaign's task bank (its selection) and the sandbox isolation in effect (``Isolation.label``)."""

    settings_digest: str
    bank_digest: str
    isolation: str


def _store_verdict(
    store: Store, key: str, result: dict[str, JSON], infra_error: str | None, under: GradedUnder
) -> None:
    with store.transaction() as db:
        db.execute(
            "UPDATE rollouts SET status = 'graded', result = ?, infra_error = ?, graded_at = ?,"
            " settings_digest = ?, bank_digest = ?, isolation = ? WHERE rollout_key = ?",
            (canonical_bytes(result).decode(), infra_error, utc_now(), under.settings_digest,
             under.bank_digest, under.isolation, key),
        )  # fmt: skip


def _stored_text(store: Store, key: str) -> str:
    with store.snapshot() as db:
        (raw,) = db.execute("SELECT completion FROM rollouts WHERE rollout_key = ?", (key,)).fetchone()
    return cast("str", json.loads(raw)["text"])


# --------------------------------------------------------------------------------------------- grading


def _rename(tests: Sequence[TestVerdict], prefix: str) -> list[dict[str, JSON]]:
    return [{**t.to_json(), "name": f"{prefix}/{i}"} for i, t in enumerate(tests)]


def _block(tests: list[dict[str, JSON]]) -> dict[str, JSON]:
    return {"passed": sum(1 for t in tests if t["passed"]), "total": len(tests), "tests": list(tests)}


def verdict_json(verdict: Verdict, n_hidden: int, adv_digest: str) -> dict[str, JSON]:
    hidden = verdict.hidden[:n_hidden]
    adversarial = verdict.hidden[n_hidden:]
    return {
        "task_digest": verdict.task_digest,
        "settings_digest": verdict.settings_digest,
        "public": _block(_rename(verdict.public, "public")),
        "hidden": _block(_rename(hidden, "hidden")),
        "adversarial": _block(_rename(adversarial, "adversarial")),
        "adversarial_set": adv_digest,
        "infra_error": verdict.infra_error,
    }


def _grade_one(
    task: Task,
    text: str,
    adversarial: tuple[CallTest, ...],
    sandbox: Sandbox,
    settings: VerifierSettings,
) -> tuple[dict[str, JSON], str | None]:
    """Grade one completion on public, hidden and adversarial tests in one sandbox run (adversarial tests ride
    after the hidden ones and are split off the verdict)."""
    n_hidden = len(task.hidden_tests) if isinstance(task, CodeTask) else len(task.hidden_assertions)
    graded_task: Task = task
    if adversarial and isinstance(task, CodeTask):
        graded_task = attrs.evolve(task, hidden_tests=(*task.hidden_tests, *adversarial))
    verdict = grade_many([(graded_task, text)], sandbox, settings, extract=True)[0]
    return verdict_json(verdict, n_hidden, set_digest(adversarial)), verdict.infra_error


# --------------------------------------------------------------------------------------------- running


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group.exceptions[0]
    while isinstance(exc, BaseExceptionGroup):
        exc = cast("BaseExceptionGroup[BaseException]", exc).exceptions[0]
    return exc


def plan_rollouts(name: str, models: Sequence[str], tasks: Sequence[Task], k: int) -> list[PlannedRollout]:
    """Every rollout of a campaign, in a fixed order (sample, task, model): a halted campaign has spread its
    spend over all models and tasks rather than finishing one model first."""
    return [
        PlannedRollout(rollout_key(name, m, t.id, t.digest, s), m, t, s)
        for s in range(k)
        for t in tasks
        for m in models
    ]


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
    _acquire_lease(store, config.name)
    try:
        return await _run_leased(
            config, tasks, store=store, client=client, executor=executor, progress=progress, announce=announce
        )
    finally:
        _release_lease(store, config.name)


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
            self._pool, _grade_one, p.task, text, adversarial, self._sandbox, settings
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
    notes = _open_campaign(store, config, ident, registry)
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
    lost = _lost_calls(store, config.name)

    settings = VerifierSettings(executor.limits)
    under = GradedUnder(settings.digest, cast("str", ident["tasks_digest"]), executor.isolation_label)
    graded_under = _graded_under(store, config.name)

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
        _store_verdict(store, p.key, result, infra, attrs.evolve(under, isolation=isolation))
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
                grading.create_task(grade(p, _stored_text(store, p.key)))
            async with asyncio.TaskGroup() as callers:
                for _ in range(min(config.concurrency, max(1, len(to_call)))):
                    callers.create_task(call_worker(grading))
        remaining = [*to_call, *failed]
        # mine once every rollout is graded; a finished campaign that had nothing to do is not mined again
        if config.mine and halt is None and not remaining and (called or to_grade or not was_done):
            with Sandbox(MINING_LIMITS, workers=min(executor.workers, os.cpu_count() or 1)) as mining_box:
                mined = await loop.run_in_executor(None, _mine_campaign, store, config.name, tasks, mining_box)
            if mined:  # the adversarial sets grew: grade every rollout of those tasks on them (no model call)
                adversarial = {t.id: adversarial_set(store, t) for t in tasks}
                regrade = [p for p in plan if set_digest(adversarial[p.task.id]) != adv_digests[p.task.id]]
                done -= len(regrade)
                async with asyncio.TaskGroup() as grading:
                    for p in regrade:
                        grading.create_task(grade(p, _stored_text(store, p.key)))
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
    _set_status(store, config.name, status)
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
