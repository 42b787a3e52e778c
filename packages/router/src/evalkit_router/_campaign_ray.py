"""A campaign on Ray: model calls in caller actors, grading on a pool of sandbox-worker actors.

The driver (``evalkit campaign run --executor ray``) keeps what it keeps with the local executor: the lease,
the plan, the skip/re-grade/call decisions, the verdicts' rows and the report. What moves to Ray:

- **Calls.** One caller actor per node (an asyncio actor: many calls in flight, no CPU reserved), each with its
  own :class:`~evalkit_core.models.ModelClient` on the *same store* as the driver (the SQLite file, or the
  PostgreSQL database named by ``$EVALKIT_STORE``). Its calls reserve, settle and are rate-limited through the
  store exactly as the driver's would be: the global cap, the requests-per-minute windows and the campaign's
  own ``budget_usd`` (a :class:`~evalkit_core.models.BudgetScope` shared through the store, read in the
  transaction that reserves) hold across every worker and every machine. The rollout row is written in the
  transaction that settles the call, as locally.
- **Grading.** :class:`evalkit.GradingPool`: a sandbox-worker actor per CPU, spread over the nodes, each keeping
  its sandbox template for its life.

The rollout key is the unit of idempotency. A caller asked for a rollout first looks for its row: a rollout
whose call settled is never called again, whichever process called it. A worker that dies is restarted by Ray
and the work it had in hand is retried there: a grading runs again (free), a call whose rollout was stored is
found stored, and a call that was in flight when its process died is charged at its worst case as an *unknown
outcome* (the model layer's rule: the provider may have billed it), reported as "paid, answer lost", and made
again. No store write depends on the driver: when the driver dies its actors die with it (Ray's fate sharing),
and the next run resumes from the store as it does after a local crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Self, cast

import attrs

from evalkit import JSON, CallTest, CodeTask, GradingPool, RayCluster, SandboxLimits, Task, VerifierSettings
from evalkit_core.models import (
    BudgetExceeded,
    BudgetScope,
    Completion,
    ModelClient,
    ModelError,
    Registry,
    Request,
    Timeouts,
)
from evalkit_core.store import STORE_ENV, Connection, Store
from evalkit_router._rollouts import (
    Answer,
    PlannedRollout,
    insert_rollout,
    set_digest,
    verdict_json,
)

__all__ = ["RayExecutor"]


@attrs.frozen
class _Outcome:
    """What a caller actor sends back: an answer, a refusal (the fields of ``BudgetExceeded``) or an error."""

    kind: str  # "answer" | "refused" | "error"
    answer: Answer | None = None
    refusal: tuple[str, Decimal, Decimal, Decimal, Decimal, str | None] | None = None
    error: tuple[str, str, int] | None = None


class _Caller:
    """One caller actor: a model client on the campaign's store, in a Ray worker process."""

    def __init__(self, home: str, env: Mapping[str, str], registry: Registry, timeouts: Timeouts | None) -> None:
        os.environ.update(env)
        self._home = home
        self._registry = registry
        self._timeouts = timeouts
        self._store: Store | None = None
        self._client: ModelClient | None = None
        self._lock = asyncio.Lock()

    async def _ready(self) -> tuple[Store, ModelClient]:
        async with self._lock:
            if self._store is None or self._client is None:
                self._store = Store.open(self._home)
                self._client = ModelClient(registry=self._registry, store=self._store, timeouts=self._timeouts)
            return self._store, self._client

    async def pid(self) -> int:
        return os.getpid()

    async def call(
        self, campaign: str, p: PlannedRollout, request: Request, label: str, scope: tuple[str, Decimal | None]
    ) -> _Outcome:
        store, client = await self._ready()
        with store.snapshot() as db:  # stored already (by a worker that died before it could answer): no call
            row = db.execute(
                "SELECT completion, cost, anomaly FROM rollouts WHERE rollout_key = ?", (p.key,)
            ).fetchone()
        if row is not None:
            text = cast("str", json.loads(row[0])["text"])
            return _Outcome("answer", Answer(text, row[2], Decimal(0), stored=True))

        def record(db: Connection, completion: Completion) -> None:
            insert_rollout(db, campaign, p, completion)

        shared = BudgetScope(scope[0], scope[1], label=label)
        try:
            completion = await client.complete(p.model_id, request, label=label, scope=shared, record=record)
        except BudgetExceeded as exc:
            return _Outcome("refused", refusal=(exc.model_id, exc.cap, exc.spent, exc.reserved, exc.needed, exc.scope))
        except ModelError as exc:
            return _Outcome("error", error=(exc.model_id, exc.reason, exc.attempts))
        return _Outcome("answer", Answer(completion.text, completion.anomaly, completion.charged))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._store is not None:
            self._store.close()


class RayExecutor:
    """A campaign's calls and grading on the Ray cluster joined by ``cluster`` (see the module docstring).
    ``workers``: sandbox-worker actors (default one per CPU of the cluster); one caller actor per live node.
    ``home`` is the driver's store directory; the workers open the same store (with ``$EVALKIT_STORE``, the same
    database). ``env``: variables the workers need that their nodes may lack (API keys), passed to the actors."""

    shared_scope = True

    def __init__(
        self,
        cluster: RayCluster,
        *,
        registry: Registry,
        home: Path,
        timeouts: Timeouts | None,
        limits: SandboxLimits,
        workers: int | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "campaign",
    ) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._ray = ray
        passed = dict(env or {})
        store_env = os.environ.get(STORE_ENV)
        if store_env:
            passed[STORE_ENV] = store_env
        prefix = f"evalkit/{name}/{os.getpid()}"
        self.pool = GradingPool(limits, workers=workers, env=passed, name=prefix)
        self.workers = self.pool.workers
        self.limits = limits
        caller = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(_Caller)
        self._callers: list[Any] = [
            caller.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True), name=f"{prefix}/caller/{i}"
            ).remote(str(home), passed, registry, timeouts)
            for i, node in enumerate(cluster.nodes())
        ]
        self._next = itertools.cycle(self._callers)
        self.isolation_label = self.pool.isolation.label

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def caller_pids(self) -> list[int]:
        return [int(p) for p in self._ray.get([c.pid.remote() for c in self._callers])]

    async def call(
        self, p: PlannedRollout, request: Request, *, campaign: str, label: str, scope: BudgetScope
    ) -> Answer:
        outcome = cast(
            "_Outcome",
            await next(self._next).call.remote(campaign, p, request, label, (scope.name, scope.cap)),
        )
        if outcome.refusal is not None:
            model_id, cap, spent, reserved, needed, which = outcome.refusal
            raise BudgetExceeded(model_id, cap=cap, spent=spent, reserved=reserved, needed=needed, scope=which)
        if outcome.error is not None:
            model_id, reason, attempts = outcome.error
            raise ModelError(model_id, reason, attempts=attempts)
        assert outcome.answer is not None
        scope.spent += outcome.answer.charged  # the driver's view, for progress; the store holds the truth
        return outcome.answer

    async def grade(
        self, p: PlannedRollout, text: str, adversarial: tuple[CallTest, ...], settings: VerifierSettings
    ) -> tuple[dict[str, JSON], str | None, str]:
        task: Task = p.task
        n_hidden = len(task.hidden_tests) if isinstance(task, CodeTask) else len(task.hidden_assertions)
        if adversarial and isinstance(task, CodeTask):
            task = attrs.evolve(task, hidden_tests=(*task.hidden_tests, *adversarial))
        (verdict,) = await self.pool.grade([(task, text)], settings)
        return verdict_json(verdict, n_hidden, set_digest(adversarial)), verdict.infra_error, self.isolation_label

    def close(self) -> None:
        from ray.exceptions import RayError

        for c in self._callers:
            with contextlib.suppress(RayError):  # dead or stuck: killed below either way
                self._ray.get(c.close.remote(), timeout=30)
            self._ray.kill(c, no_restart=True)
        self._callers = []
        self.pool.close()
