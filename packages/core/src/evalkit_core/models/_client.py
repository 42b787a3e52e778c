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
import json
import logging
import os
import random
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn, Protocol, Self, cast

import attrs

from evalkit_core._canonical import canonical_bytes, digest, digest_bytes
from evalkit_core._errors import CanonicalError
from evalkit_core.models import _anthropic, _openai
from evalkit_core.models._budget import (
    BudgetScope,
    UnknownOutcome,
    reconcile,
    settle,
    try_reserve,
)
from evalkit_core.models._cost import cost_of, plain, worst_case_cost
from evalkit_core.models._errors import BudgetExceeded, MissingKeyError, ModelError
from evalkit_core.models._http import HttpError, HttpPool, HttpResponse, Progress, proxies_from_env
from evalkit_core.models._providers import Reply, ShapeError
from evalkit_core.models._ratelimit import RateLimit, settle_slot, take_slot
from evalkit_core.models._registry import ModelEntry, Registry, Timeouts, load_registry
from evalkit_core.models._retry import RetryPolicy, backoff_delay, is_retryable_status, retry_after_seconds
from evalkit_core.models._sim import simulate
from evalkit_core.models._types import Completion, Request, ToolCall, Usage, request_to_json
from evalkit_core.store import Connection, Store, utc_now

__all__ = ["ModelBackend", "ModelClient", "RecordFn", "complete", "redact"]

log = logging.getLogger("evalkit_core.models")
_REDACTED = "[redacted]"
_ERROR_CHARS = 300
_SCAN_CHARS = 65536  # redaction looks this far into a provider's error body before it is cut to _ERROR_CHARS
_MIN_PREFIX = 8  # any prefix of a key this long or longer is redacted

RecordFn = Callable[[Connection, Completion], None]
"""Called inside the transaction that settles a successful call, with that transaction's connection: what it
writes commits together with the settle or not at all (a campaign stores its rollout this way)."""


class ModelBackend(Protocol):
    """What a solver, an agent adapter or the PIT gateway calls. ``ModelClient`` is the implementation."""

    async def complete(self, model_id: str, request: Request) -> Completion: ...


class _Failure(Exception):  # noqa: N818 - internal, never escapes the client
    def __init__(
        self,
        reason: str,
        retryable: bool,
        billing_unknown: bool,  # the provider may have billed this attempt: settle at the full reservation
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.billing_unknown = billing_unknown
        self.status_code = status_code
        self.retry_after = retry_after


def redact(text: str, key: str | None) -> str:
    """``text`` with ``key``, and every run of 8 or more characters that begins the key, replaced by
    ``[redacted]``. Apply it before cutting a text to length, never after."""
    if not key or not text:
        return text
    if len(key) < _MIN_PREFIX:
        return text.replace(key, _REDACTED)
    head = key[:_MIN_PREFIX]
    out: list[str] = []
    i = 0
    while (j := text.find(head, i)) >= 0:
        k = _MIN_PREFIX
        while j + k < len(text) and k < len(key) and text[j + k] == key[k]:
            k += 1
        out.append(text[i:j])
        out.append(_REDACTED)
        i = j + k
    out.append(text[i:])
    return "".join(out)


def _cut(text: str, key: str | None, limit: int = _ERROR_CHARS) -> str:
    return redact(text[:_SCAN_CHARS], key)[:limit]


def _provider_message(resp: HttpResponse, key: str | None) -> str:
    body = resp.content[: _SCAN_CHARS * 4].decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return _cut(body, key)
    err = cast("dict[str, Any]", data).get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):  # both providers: {"error": {"type": ..., "message": ...}}
        message = cast("dict[str, Any]", err).get("message")
        if isinstance(message, str):
            return _cut(message, key)
    return _cut(body, key)


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
        return worst_case_cost(entry, len(_wire_bytes(entry, request)), request.max_tokens)

    def timeouts_for(self, model_id: str) -> Timeouts:
        """The deadlines a call to ``model_id`` runs under (this client's over the registry entry's)."""
        return self.timeouts.over(self.registry.get(model_id).timeouts)

    async def _send_http(
        self, entry: ModelEntry, content: bytes, key: str | None, connect_timeout: float, progress: Progress
    ) -> tuple[Reply, bytes]:
        if entry.provider == "anthropic":
            url, headers = _anthropic.endpoint(entry), _anthropic.headers(key)
        else:
            url, headers = _openai.endpoint(entry), _openai.headers(key)
        try:
            resp = await self._http.post(
                url, content, headers, connect_timeout=connect_timeout, progress=progress
            )
        except HttpError as exc:
            if not exc.sent:
                raise _Failure(
                    f"cannot connect to {url} ({exc})", retryable=True, billing_unknown=False
                ) from None
            raise _Failure(
                f"connection to {url} failed after the request was sent ({exc})",
                retryable=True,
                billing_unknown=True,
            ) from None
        code = resp.status
        if 300 <= code < 400:
            where = _cut(resp.headers.get("location", "nowhere"), key, 200)
            raise _Failure(
                f"HTTP {code} from {url} redirects to {where}; redirects are never followed (the key would "
                "travel with it): set base_url to the right address",
                retryable=False,
                billing_unknown=False,
                status_code=code,
            )
        if not 200 <= code < 300:
            raise _Failure(
                f"HTTP {code} from {url}: {_provider_message(resp, key)}",
                retryable=is_retryable_status(code),
                billing_unknown=False,
                status_code=code,
                retry_after=retry_after_seconds(resp.headers),
            )
        try:
            data = json.loads(resp.content)
        except (ValueError, RecursionError):
            raise _Failure(
                f"malformed JSON in the HTTP {code} reply from {url}",
                retryable=True,
                billing_unknown=True,
                status_code=code,
            ) from None
        try:
            reply = (
                _anthropic.parse_reply(data)
                if entry.provider == "anthropic"
                else _openai.parse_reply(data, entry)
            )
        except (ShapeError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise _Failure(
                f"reply from {url} does not match the {entry.provider} format: {redact(str(exc), key)}",
                retryable=False,
                billing_unknown=True,
                status_code=code,
            ) from None
        return reply, resp.content

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
        reply, raw = await self._send_http(entry, content, key, connect_timeout, progress)
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
        content = _wire_bytes(entry, request)
        call = _Call(
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
        call: _Call,
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
            reservation = self._reserve(call, scope)
            call.open = reservation
            started, t0 = utc_now(), time.perf_counter()
            progress = Progress()
            try:
                failure: _Failure | None = None
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
                    failure = _Failure(
                        f"no complete reply from {_endpoint(entry)} within the {which} deadline of {limit:g}s"
                        + ("" if progress.sent else " (the request was never sent)"),
                        retryable=True,
                        billing_unknown=progress.sent,
                    )
                except _Failure as f:
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
                self._settle(
                    call, reservation, scope, started, t0, charge,
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
                    self._settle(
                        call, reservation, scope, started, t0, call.worst if sent else Decimal(0), outcome="error",
                        error=f"{kind}: " + ("the request may have been sent; charged at its worst case"
                                             if sent else "the request was never sent"),
                    )  # fmt: skip
                raise
            log.warning(
                "model %s attempt %d failed (%s); retrying in %.3fs", model_id, call.attempt, reason, delay
            )
            await self._sleep(delay)

    def _give_up(self, call: _Call, reason: str) -> NoReturn:
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

    def _usage_verdict(self, call: _Call, reply: Reply) -> tuple[Decimal, Usage, str | None]:
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
        call: _Call,
        reservation: str,
        scope: BudgetScope | None,
        started: str,
        t0: float,
        reply: Reply,
        response_digest: str,
        key: str | None,
        record: RecordFn | None,
    ) -> Completion:
        reply, echoed = _scrub(reply, key)
        cost, usage, anomaly = self._usage_verdict(call, reply)
        if anomaly is not None:  # a usage field may have held the key
            anomaly = _cut(anomaly, key, 1000)
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
            charged = self._settle(
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
            self._settle(call, reservation, scope, started, t0, cost, outcome="ok", completion=completion)
            raise
        if charged != cost:  # already charged at its worst case by a reconcile that took us for dead
            completion = attrs.evolve(completion, charged=call.charged)
        return completion

    def _reserve(self, call: _Call, scope: BudgetScope | None) -> str:
        """One transaction: (first attempt) the pending call row, and the attempt's budget reservation (global
        and, with ``scope``, the scope's). Raises ``BudgetExceeded`` after recording the refusal."""
        now = utc_now()
        e = call.entry
        owner = self.store.owner_id
        refusal: BudgetExceeded | None = None
        reservation = ""
        scoped = False
        try:
            with self.store.transaction() as db:
                if call.attempt == 1:
                    db.execute(
                        "INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated,"
                        " status, attempts, request_digest, registry_digest, charged, label, worst_case,"
                        " owner_id) VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, '0', ?, ?, ?)",
                        (call.call_id, now, e.id, e.provider, e.api_model, int(e.simulated),
                         call.request_digest, self.registry.digest, call.label, str(call.worst), owner),
                    )  # fmt: skip
                if scope is not None:
                    refusal = scope.try_reserve(e.id, call.worst, db)
                    scoped = refusal is None
                if refusal is None:
                    got = try_reserve(
                        db,
                        call_id=call.call_id,
                        model_id=e.id,
                        amount=call.worst,
                        now=now,
                        owner_id=owner,
                        attempt=call.attempt,
                    )
                    if isinstance(got, BudgetExceeded):
                        refusal = got
                    else:
                        reservation = got
                if refusal is not None:
                    if scoped and scope is not None:
                        scope.settle(call.worst, Decimal(0))
                        scoped = False
                    db.execute(
                        "UPDATE model_calls SET status = 'refused', error = ?, finished_at = ?, attempts = ?,"
                        " charged = ? WHERE call_id = ?",
                        (str(refusal), now, call.attempt - 1, str(plain(call.charged)), call.call_id),
                    )
        except BaseException:
            if scoped and scope is not None:
                scope.settle(call.worst, Decimal(0))
            raise
        if refusal is not None:
            raise refusal
        return reservation

    def _settle(
        self,
        call: _Call,
        reservation: str,
        scope: BudgetScope | None,
        started: str,
        t0: float,
        charge: Decimal,
        *,
        outcome: str,
        error: str | None = None,
        status_code: int | None = None,
        completion: Completion | None = None,
        record: RecordFn | None = None,
    ) -> Decimal:
        """One transaction: settle the attempt's reservation, record the attempt, finish the call unless it
        will be retried, and (on success) run ``record``. Returns what the attempt was charged."""
        elapsed_ms = (time.perf_counter() - t0) * 1000
        now = utc_now()
        if completion is not None and status_code is None and not call.entry.simulated:
            status_code = 200
        with self.store.transaction() as db:
            note = None if outcome == "ok" else outcome
            if completion is not None and completion.anomaly is not None:
                note = f"anomaly: {completion.anomaly}"
            got = settle(db, reservation, charge, note=note, now=now)
            charged = call.worst if got is None else got  # None: a reconcile charged it in full already
            total = plain(call.charged + charged)
            db.execute(
                "INSERT INTO call_attempts (call_id, attempt, started_at, elapsed_ms, status_code, outcome, error,"
                " charged) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (call_id, attempt) DO UPDATE SET"
                " started_at = excluded.started_at, elapsed_ms = excluded.elapsed_ms, status_code ="
                " excluded.status_code, outcome = excluded.outcome, error = excluded.error, charged = excluded.charged",
                (call.call_id, call.attempt, started, elapsed_ms, status_code, outcome, error, str(plain(charged))),
            )  # fmt: skip
            if outcome == "retry":
                db.execute(
                    "UPDATE model_calls SET status = 'pending', attempts = ?, charged = ? WHERE call_id = ?",
                    (call.attempt, str(total), call.call_id),
                )
            elif completion is None:
                db.execute(
                    "UPDATE model_calls SET status = 'error', error = ?, attempts = ?, charged = ?, finished_at = ?"
                    " WHERE call_id = ?",
                    (error, call.attempt, str(total), now, call.call_id),
                )
            else:
                u = completion.usage
                bounded = completion.anomaly is not None and completion.cost == call.worst
                db.execute(
                    "UPDATE model_calls SET status = 'ok', reported_model = ?, attempts = ?, response_digest = ?,"
                    " input_tokens = ?, output_tokens = ?, cache_read_tokens = ?, cache_write_tokens = ?, cost = ?,"
                    " charged = ?, stop_reason = ?, finished_at = ?, anomaly = ?, error = NULL WHERE call_id = ?",
                    (completion.reported_model[:500], call.attempt, completion.response_digest,
                     None if bounded else u.input_tokens, None if bounded else u.output_tokens,
                     None if bounded else u.cache_read_tokens, None if bounded else u.cache_write_tokens,
                     str(plain(charge)), str(total), None if completion.stop_reason is None else completion.stop_reason[:200],
                     now, completion.anomaly, call.call_id),
                )  # fmt: skip
                if call.slot is not None and completion.anomaly is None:  # the slot holds what was used
                    settle_slot(db, call.slot, u.total_input_tokens + u.output_tokens)
                if record is not None:
                    record(db, completion)
        call.charged = total
        call.open = None
        if scope is not None:
            scope.settle(call.worst, charged)
        return charged


@attrs.define
class _Call:
    """The mutable state of one call across its attempts (internal)."""

    call_id: str
    entry: ModelEntry
    request_digest: str
    worst: Decimal
    input_bound: int
    output_bound: int
    label: str | None = None
    attempt: int = 0
    charged: Decimal = Decimal(0)
    open: str | None = None  # the reservation of the attempt in flight, until it is settled
    slot: str | None = None  # the attempt's shared rate-limit slot (see _ratelimit.take_slot)

    def held(self) -> str | None:
        """The open reservation (a method, so a check after a settle is not narrowed away by the checker)."""
        return self.open


def _endpoint(entry: ModelEntry) -> str:
    if entry.sim is not None:
        return entry.id
    return _anthropic.endpoint(entry) if entry.provider == "anthropic" else _openai.endpoint(entry)


def _redact_json(value: Any, key: str) -> Any:
    if isinstance(value, str):
        return redact(value, key)
    if isinstance(value, Mapping):
        return {
            redact(str(k), key): _redact_json(v, key) for k, v in cast("Mapping[str, Any]", value).items()
        }
    if isinstance(value, list | tuple):
        return [_redact_json(v, key) for v in cast("Sequence[Any]", value)]
    return value


def _scrub_call(tc: ToolCall, key: str) -> ToolCall:
    raw = redact(tc.raw_arguments, key)
    if tc.arguments is not None:
        clean = _redact_json(tc.arguments, key)
        if clean != tc.arguments:  # the key may sit behind JSON escapes in the raw text: rebuild it
            raw = json.dumps(clean, ensure_ascii=False, sort_keys=True)
    name, tid = redact(tc.name, key), redact(tc.id, key)
    if (raw, name, tid) == (tc.raw_arguments, tc.name, tc.id):
        return tc
    return ToolCall.parse(tid, name, raw)


def _scrub(reply: Reply, key: str | None) -> tuple[Reply, bool]:
    """The reply with the key (and its long prefixes) redacted from every text it carries, and whether it
    held any."""
    if not key:
        return reply, False
    text = redact(reply.text, key)
    model = redact(reply.reported_model, key)
    stop = None if reply.stop_reason is None else redact(reply.stop_reason, key)
    calls = [_scrub_call(tc, key) for tc in reply.tool_calls]
    changed = (
        text != reply.text
        or model != reply.reported_model
        or stop != reply.stop_reason
        or any(a is not b for a, b in zip(calls, reply.tool_calls, strict=True))
    )
    if not changed:
        return reply, False
    return attrs.evolve(
        reply, text=text, reported_model=model, stop_reason=stop, tool_calls=tuple(calls)
    ), True


def _wire_bytes(entry: ModelEntry, request: Request) -> bytes:
    """The request body as sent (its length bounds the input tokens for the budget reservation)."""
    if entry.sim is not None:
        sc = request.sim_context
        if sc is None or (sc.reference is None and sc.reference_json is None):
            simulate(
                entry, request
            )  # raises the ModelError that explains the seam, before anything is recorded
        return canonical_bytes(request_to_json(request, include_sim_context=False))
    body = (
        _anthropic.build_body(entry, request)
        if entry.provider == "anthropic"
        else _openai.build_body(entry, request)
    )
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


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
