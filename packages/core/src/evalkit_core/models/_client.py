"""``ModelClient``: the one way evalkit calls a model.

A call goes: registry entry -> key check (``MissingKeyError`` before any request) -> per attempt: rate limits
-> budget reservation of the worst case (``BudgetExceeded``) -> request -> settle -> attempt row. The call row
is written ``pending`` with the first reservation and finished in the transaction that settles the last
attempt, so the store never shows a cost the budget did not see.

What a provider says is not taken at its word:

- **Usage is bounded.** A request cannot have cost more than its bytes as input tokens (plus the entry's
  overhead) and ``max_tokens`` as output tokens: that is the worst case reserved before it went out. A reply
  whose usage claims more, or whose usage is missing, negative, fractional or unreadable, keeps its answer
  but is charged at that bound, with the reason in ``Completion.anomaly`` and in the call record
  (``evalkit calls list`` shows it). So a settle never charges more than its reservation, and
  ``spent + reserved <= cap`` holds whatever the provider reports.
- **Every path out of an attempt settles it.** A refusal settles nothing (nothing was reserved); a failure
  settles at zero (the request never left) or at the full reservation (it may have been billed); a
  cancellation, a ``KeyboardInterrupt``, a shutdown (:meth:`ModelClient.aclose` cancels calls in flight) or a
  bug settles at the full reservation. If even that fails (the store is gone), the reservation stays, owned by
  this process, and is charged at its worst case as an *unknown outcome* by whoever next finds the process
  dead (``evalkit_core.models._budget.reconcile``; a new client does that when it starts).
- **Deadlines, not read timeouts.** ``connect``, ``attempt`` (from connect to the last byte of the reply,
  however slowly it trickles) and ``call`` (all attempts and waits) come from the model's registry entry
  (``timeouts``), overridden by the client's ``timeouts``.
- **Keys** are read from the environment per call, sent only in request headers, and scrubbed (the key and
  any prefix of it of 8 or more characters) from every error text *before* it is cut to length, and from the
  answer itself; nothing that is stored, logged or raised contains them. Redirects are never followed.

Seam for the PIT model gateway: the gateway process holds a ``ModelClient`` and serves
``ModelBackend.complete(model_id, request)`` over its AF_UNIX socket, carrying requests and completions in the
JSON forms of ``request_to_json`` / ``completion_to_json``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn, Protocol, Self

import attrs

from evalkit_core._canonical import canonical_bytes, digest, digest_bytes
from evalkit_core._errors import CanonicalError
from evalkit_core.models._budget import (
    BudgetScope,
    UnknownOutcome,
    reconcile,
)
from evalkit_core.models._cost import cost_of, plain, worst_case_cost
from evalkit_core.models._errors import MissingKeyError, ModelError
from evalkit_core.models._exchange import Failure, cut, endpoint, redact, scrub, send_http, wire_bytes
from evalkit_core.models._http import HttpPool, Progress, proxies_from_env
from evalkit_core.models._ledger import Call, RecordFn, reserve, settle_attempt
from evalkit_core.models._providers import Reply
from evalkit_core.models._ratelimit import RateLimit, take_slot
from evalkit_core.models._registry import ModelEntry, Registry, Timeouts, load_registry
from evalkit_core.models._retry import RetryPolicy, backoff_delay
from evalkit_core.models._sim import simulate
from evalkit_core.models._types import Completion, Request, Usage, request_to_json
from evalkit_core.store import Store, utc_now

__all__ = ["ModelBackend", "ModelClient", "RecordFn", "complete", "redact"]

log = logging.getLogger("evalkit_core.models")
_wire_bytes = wire_bytes  # the name tests/core/models and tools/bench/model_layer.py import from here
class ModelBackend(Protocol):
    """What a solver, an agent adapter or the PIT gateway calls. ``ModelClient`` is the implementation."""

    async def complete(self, model_id: str, request: Request) -> Completion: ...


def _digits(n: int) -> str:
    text = str(n) if n < 10**30 else f"{str(n)[:12]}...({len(str(n))} digits)"
    return text


class ModelClient:
    """Calls models through one registry, one store (budget + records) and one HTTP connection pool.

    Use one client per process (``async with ModelClient() as client: ...``); it is safe for many concurrent
    ``complete`` calls on one event loop. ``env`` replaces ``os.environ`` for key and proxy lookup (tests);
    ``timeouts`` overrides the registry entries' deadlines field by field; ``sleep`` replaces
    ``asyncio.sleep`` for backoff waits; ``ssl_context`` replaces the default TLS trust (certifi's CAs).

    Starting a client reconciles the store: reservations left by processes that are gone are charged at
    their worst case as unknown outcomes (``reconciled`` lists them).
    """

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        store: Store | None = None,
        home: str | Path | None = None,
        registry_paths: Sequence[str | Path] = (),
        retry: RetryPolicy | None = None,
        timeouts: Timeouts | None = None,
        env: Mapping[str, str] | None = None,
        max_connections: int = 256,
        seed: int | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.registry = registry if registry is not None else load_registry(registry_paths, env=env)
        self._owns_store = store is None
        self.store = store if store is not None else Store.open(home)
        self.retry = retry or RetryPolicy()
        self.timeouts = timeouts or Timeouts()
        self._env = env
        self._sleep = sleep
        self._rng = random.Random(seed)  # noqa: S311 - backoff jitter, not cryptography
        environ = os.environ if env is None else env
        self._http = HttpPool(
            max_connections=max_connections, ssl_context=ssl_context, proxies=proxies_from_env(environ)
        )
        self._registry_recorded = False
        self._inflight: set[asyncio.Task[Any]] = set()
        self._closed = False
        try:
            self.reconciled: list[UnknownOutcome] = reconcile(self.store)
        except BaseException:
            if self._owns_store:
                self.store.close()
            raise
        for u in self.reconciled:
            log.warning(
                "call %s (%s) was in flight in process %s that is gone: outcome unknown, charged $%s",
                u.call_id,
                u.model_id,
                u.pid,
                u.charged,
            )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client. Calls still in flight are cancelled and settled (at their worst case: their
        requests may have gone out) before the store closes."""
        if self._closed:
            return
        self._closed = True
        me = asyncio.current_task()
        pending = [t for t in self._inflight if t is not me and not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self._http.aclose()
        if self._owns_store:
            self.store.close()

    # ------------------------------------------------------------------------------------------ helpers

    def _key(self, entry: ModelEntry) -> str | None:
        if entry.api_key_env is None:
            return None
        environ = os.environ if self._env is None else self._env
        key = environ.get(entry.api_key_env, "").strip()
        if not key:
            raise MissingKeyError(entry.id, entry.api_key_env)
        if any(ord(c) < 32 or ord(c) == 127 for c in key):
            raise ModelError(
                entry.id,
                f"environment variable {entry.api_key_env} holds a control character or line break; "
                "a key is one line of printable text (nothing was sent)",
                attempts=0,
            )
        return key

    @staticmethod
    def _rate_limit(entry: ModelEntry) -> RateLimit | None:
        """The entry's limits, shared through the store by every process calling that provider and model."""
        rpm, tpm = entry.requests_per_minute, entry.tokens_per_minute
        if not rpm and not tpm:
            return None
        return RateLimit(
            f"{entry.provider}/{entry.api_model}", max(1, int(rpm)) if rpm else None, float(tpm) if tpm else None
        )

    async def _take_slot(self, limit: RateLimit, tokens: float, call_id: str) -> str:
        """Wait for a slot under ``limit`` (one write transaction per try; see ``_ratelimit.take_slot``)."""
        while True:
            with self.store.transaction() as db:
                event, wait = take_slot(db, limit, tokens, now=self.store.clock(db), call_id=call_id)
            if event is not None:
                return event
            await asyncio.sleep(wait + self._rng.uniform(0, 0.02))  # a little jitter: waiters do not collide

    def _record_registry(self) -> None:
        if self._registry_recorded:
            return
        content = canonical_bytes(self.registry.content).decode("utf-8")
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO registries (digest, content, first_seen) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (self.registry.digest, content, utc_now()),
            )
        self._registry_recorded = True

    def worst_case(self, model_id: str, request: Request) -> Decimal:
        """What one attempt of ``request`` to ``model_id`` reserves: the most it can cost."""
        entry = self.registry.get(model_id)
        return worst_case_cost(entry, len(wire_bytes(entry, request)), request.max_tokens)

    def timeouts_for(self, model_id: str) -> Timeouts:
        """The deadlines a call to ``model_id`` runs under (this client's over the registry entry's)."""
        return self.timeouts.over(self.registry.get(model_id).timeouts)

    async def _attempt(
        self,
        entry: ModelEntry,
        request: Request,
        content: bytes,
        key: str | None,
        connect_timeout: float,
        progress: Progress,
    ) -> tuple[Reply, str]:
        if entry.sim is not None:
            progress.sent = True  # a simulated request "leaves" at once, like a real one would
            if entry.sim.latency_ms:
                await asyncio.sleep(entry.sim.latency_ms / 1000)
            reply = simulate(entry, request)
            return reply, digest(reply.raw)
        reply, raw = await send_http(self._http, entry, content, key, connect_timeout, progress)
        try:
            return reply, digest(reply.raw)
        except (CanonicalError, RecursionError):  # e.g. an integer beyond 2**53: hash the bytes received
            return reply, digest_bytes(raw)

    # ------------------------------------------------------------------------------------------ the call

    async def complete(
        self,
        model_id: str,
        request: Request,
        *,
        label: str | None = None,
        scope: BudgetScope | None = None,
        record: RecordFn | None = None,
    ) -> Completion:
        """Call ``model_id`` with ``request``.

        ``label`` is stored with the call (a campaign uses ``campaign:NAME``); ``scope`` is a second cap each
        attempt reserves against (a campaign's ``budget_usd``); ``record`` writes the caller's own rows in the
        transaction that settles the call (see :data:`RecordFn`).

        Raises ``MissingKeyError`` (before any request), ``BudgetExceeded``, ``ModelError`` (its message says
        how many attempts were made) or ``RegistryError`` for an unknown model.
        """
        if self._closed:
            raise ModelError(model_id, "the model client is closed; no request was made", attempts=0)
        entry = self.registry.get(model_id)
        key = self._key(entry)
        content = wire_bytes(entry, request)
        call = Call(
            call_id=uuid.uuid4().hex,
            entry=entry,
            request_digest=digest({"model_id": model_id, "request": request_to_json(request)}),
            worst=worst_case_cost(entry, len(content), request.max_tokens),
            input_bound=len(content) + entry.reserve_overhead_tokens,
            output_bound=request.max_tokens,
            label=label,
        )
        self._record_registry()
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            return await self._complete(call, request, content, key, scope, record)
        finally:
            if task is not None:
                self._inflight.discard(task)

    async def _complete(
        self,
        call: Call,
        request: Request,
        content: bytes,
        key: str | None,
        scope: BudgetScope | None,
        record: RecordFn | None,
    ) -> Completion:
        entry = call.entry
        model_id = entry.id
        deadlines = self.timeouts.over(entry.timeouts)
        assert deadlines.connect is not None
        assert deadlines.attempt is not None
        assert deadlines.call is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadlines.call
        rate = self._rate_limit(entry)
        token_estimate = len(content) / 4 + request.max_tokens
        while True:
            call.attempt += 1
            call.slot = None
            try:
                async with asyncio.timeout_at(deadline):
                    if rate is not None:
                        call.slot = await self._take_slot(rate, token_estimate, call.call_id)
            except TimeoutError:
                self._give_up(
                    call, f"the call deadline of {deadlines.call:g}s passed waiting for the rate limit"
                )
            budget = min(deadlines.attempt, deadline - loop.time())
            if budget <= 0:
                self._give_up(call, f"the call deadline of {deadlines.call:g}s passed")
            reservation = reserve(self.store, self.registry.digest, call, scope)
            call.open = reservation
            started, t0 = utc_now(), time.perf_counter()
            progress = Progress()
            try:
                failure: Failure | None = None
                answer: tuple[Reply, str] | None = None
                try:
                    async with asyncio.timeout(budget):
                        answer = await self._attempt(
                            entry, request, content, key, min(deadlines.connect, budget), progress
                        )
                except TimeoutError:
                    which, limit = (
                        ("attempt", deadlines.attempt)
                        if budget == deadlines.attempt
                        else ("call", deadlines.call)
                    )
                    failure = Failure(
                        f"no complete reply from {endpoint(entry)} within the {which} deadline of {limit:g}s"
                        + ("" if progress.sent else " (the request was never sent)"),
                        retryable=True,
                        billing_unknown=progress.sent,
                    )
                except Failure as f:
                    failure = f
                if failure is None:
                    assert answer is not None
                    completion = self._finish(
                        call, reservation, scope, started, t0, answer[0], answer[1], key, record
                    )
                    log.debug(
                        "model %s call %s ok after %d attempt(s), cost $%s",
                        model_id,
                        call.call_id,
                        call.attempt,
                        completion.cost,
                    )
                    return completion
                failure.reason = redact(failure.reason, key)
                charge = call.worst if failure.billing_unknown else Decimal(0)
                delay = backoff_delay(call.attempt, self.retry, failure.retry_after, self._rng)
                in_time = loop.time() + delay < deadline
                again = failure.retryable and call.attempt < self.retry.max_attempts and in_time
                reason = failure.reason
                if failure.retryable and not again:
                    reason += (
                        "; gave up" if in_time else f"; gave up (the call deadline of {deadlines.call:g}s)"
                    )
                settle_attempt(
                    self.store, call, reservation, scope, started, t0, charge,
                    outcome="retry" if again else "error", error=reason, status_code=failure.status_code,
                )  # fmt: skip
                if not again:
                    raise ModelError(  # noqa: TRY301 - settled above; the handler below lets it through
                        model_id,
                        reason,
                        attempts=call.attempt,
                        status_code=failure.status_code,
                        call_id=call.call_id,
                        charged=call.charged,
                    )
            except BaseException as exc:
                if call.held() is not None:  # cancelled, interrupted, shut down, or a bug
                    kind = (
                        "cancelled"
                        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit)
                        else f"internal error ({type(exc).__name__})"
                    )
                    sent = progress.sent
                    settle_attempt(
                        self.store, call, reservation, scope, started, t0, call.worst if sent else Decimal(0), outcome="error",
                        error=f"{kind}: " + ("the request may have been sent; charged at its worst case"
                                             if sent else "the request was never sent"),
                    )  # fmt: skip
                raise
            log.warning(
                "model %s attempt %d failed (%s); retrying in %.3fs", model_id, call.attempt, reason, delay
            )
            await self._sleep(delay)

    def _give_up(self, call: Call, reason: str) -> NoReturn:
        """Finish a call that cannot make another attempt (no reservation is held) and raise."""
        if call.attempt > 1:
            with self.store.transaction() as db:
                db.execute(
                    "UPDATE model_calls SET status = 'error', error = ?, finished_at = ? WHERE call_id = ?",
                    (reason, utc_now(), call.call_id),
                )
        raise ModelError(
            call.entry.id, reason, attempts=call.attempt - 1, call_id=call.call_id, charged=call.charged
        )

    def _usage_verdict(self, call: Call, reply: Reply) -> tuple[Decimal, Usage, str | None]:
        """(charge, usage to record, anomaly): the reported usage when it is usable and within what the
        request could cost; else the bound (the attempt's worst case), zero usage and the reason."""
        u = reply.usage
        if u is None:
            return (
                call.worst,
                Usage(),
                f"usage unusable ({reply.usage_problem}); charged at the bound ${call.worst}",
            )
        total_in = u.total_input_tokens
        if total_in > call.input_bound or u.output_tokens > call.output_bound:
            return (
                call.worst,
                Usage(),
                (
                    f"reported usage beyond what the request could cost (input {_digits(total_in)} tokens, "
                    f"bound {call.input_bound}; output {_digits(u.output_tokens)}, bound {call.output_bound}); "
                    f"charged at the bound ${call.worst}"
                ),
            )
        cost = cost_of(u, call.entry.prices)
        if cost > call.worst:  # cannot happen with the bounds above; kept as a guard
            return call.worst, Usage(), f"cost ${cost} above the bound; charged at the bound ${call.worst}"
        return cost, u, None

    def _finish(
        self,
        call: Call,
        reservation: str,
        scope: BudgetScope | None,
        started: str,
        t0: float,
        reply: Reply,
        response_digest: str,
        key: str | None,
        record: RecordFn | None,
    ) -> Completion:
        reply, echoed = scrub(reply, key)
        cost, usage, anomaly = self._usage_verdict(call, reply)
        if anomaly is not None:  # a usage field may have held the key
            anomaly = cut(anomaly, key, 1000)
        if echoed:
            note = "the reply echoed the API key (redacted from it)"
            anomaly = note if anomaly is None else f"{anomaly}; {note}"
        completion = Completion(
            call_id=call.call_id,
            model_id=call.entry.id,
            reported_model=reply.reported_model,
            text=reply.text,
            tool_calls=reply.tool_calls,
            stop_reason=reply.stop_reason,
            usage=usage,
            cost=cost,
            simulated=call.entry.simulated,
            attempts=call.attempt,
            request_digest=call.request_digest,
            response_digest=response_digest,
            registry_digest=self.registry.digest,
            charged=plain(call.charged + cost),
            anomaly=anomaly,
        )
        if anomaly is not None:
            log.warning("model %s call %s: %s", call.entry.id, call.call_id, anomaly)
        try:
            charged = settle_attempt(
                self.store,
                call,
                reservation,
                scope,
                started,
                t0,
                cost,
                outcome="ok",
                completion=completion,
                record=record,
            )
        except BaseException:
            if record is None or call.held() is None:
                raise
            # the caller's rows could not be written with it: settle alone, so the money is recorded, then
            # let the caller's error through
            settle_attempt(self.store, call, reservation, scope, started, t0, cost, outcome="ok", completion=completion)
            raise
        if charged != cost:  # already charged at its worst case by a reconcile that took us for dead
            completion = attrs.evolve(completion, charged=call.charged)
        return completion

async def complete(
    model_id: str,
    request: Request,
    *,
    home: str | Path | None = None,
    registry_paths: Sequence[str | Path] = (),
    **client_options: Any,
) -> Completion:
    """One call with a short-lived client (store in ``home`` or ``$EVALKIT_HOME``). For many calls, hold a
    ``ModelClient`` instead: it keeps the connection pool."""
    async with ModelClient(home=home, registry_paths=registry_paths, **client_options) as client:
        return await client.complete(model_id, request)
