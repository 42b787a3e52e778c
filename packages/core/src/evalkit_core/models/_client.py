"""``ModelClient``: the one way evalkit calls a model.

A call goes: registry entry -> key check (``MissingKeyError`` before any request) -> per attempt: rate limits
->
budget reservation of the worst case (``BudgetExceeded``) -> request -> settle to the exact cost -> attempt
row.
The call row is written ``pending`` with the first reservation and finished in the transaction that settles
the
last attempt, so the store never shows a cost the budget did not see, and a crash leaves a visible
``pending``.

Keys are read from the environment per call, sent only in request headers, and scrubbed from every error text;
nothing that is stored, logged or raised contains them.

Seam for the PIT model gateway (a later issue): the gateway process holds a ``ModelClient`` and serves
``ModelBackend.complete(model_id, request)`` over its AF_UNIX socket, carrying requests and completions in the
JSON forms of ``request_to_json`` / ``completion_to_json``; the completion's ``reported_model``, ``usage``,
``cost`` and digests are what the trajectory event and the receipt's P1 and P4 need.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, Self, cast

import attrs
import httpx

from evalkit_core._canonical import canonical_bytes, digest, digest_bytes
from evalkit_core._errors import CanonicalError
from evalkit_core.models import _anthropic, _openai
from evalkit_core.models._budget import settle, try_reserve
from evalkit_core.models._cost import cost_of, plain, worst_case_cost
from evalkit_core.models._errors import BudgetExceeded, MissingKeyError, ModelError
from evalkit_core.models._providers import Reply, ShapeError
from evalkit_core.models._ratelimit import TokenBucket
from evalkit_core.models._registry import ModelEntry, Registry, load_registry
from evalkit_core.models._retry import RetryPolicy, backoff_delay, is_retryable_status, retry_after_seconds
from evalkit_core.models._sim import simulate
from evalkit_core.models._types import Completion, Request, request_to_json
from evalkit_core.store import Store, utc_now

__all__ = ["ModelBackend", "ModelClient", "complete"]

log = logging.getLogger("evalkit_core.models")
_REDACTED = "[redacted]"
_ERROR_CHARS = 300


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


def _redact(text: str, key: str | None) -> str:
    return text.replace(key, _REDACTED) if key else text


def _provider_message(resp: httpx.Response) -> str:
    try:
        data = json.loads(resp.content)
    except ValueError:
        return resp.text[:_ERROR_CHARS]
    body = cast("dict[str, Any]", data) if isinstance(data, dict) else {}
    err = body.get("error")  # both providers: {"error": {"type": ..., "message": ...}}
    if isinstance(err, dict):
        message = cast("dict[str, Any]", err).get("message")
        if isinstance(message, str):
            return message[:_ERROR_CHARS]
    return resp.text[:_ERROR_CHARS]


class ModelClient:
    """Calls models through one registry, one store (budget + records) and one HTTP connection pool.

    Use one client per process (``async with ModelClient() as client: ...``); it is safe for many concurrent
    ``complete`` calls on one event loop. ``env`` replaces ``os.environ`` for key lookup (tests);
    ``transport``
    replaces httpx's network transport; ``sleep`` replaces ``asyncio.sleep`` for backoff waits.
    """

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        store: Store | None = None,
        home: str | Path | None = None,
        registry_paths: Sequence[str | Path] = (),
        retry: RetryPolicy | None = None,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 256,
        seed: int | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.registry = registry if registry is not None else load_registry(registry_paths, env=env)
        self._owns_store = store is None
        self.store = store if store is not None else Store.open(home)
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._env = env
        self._sleep = sleep
        self._rng = random.Random(seed)  # noqa: S311 - backoff jitter, not cryptography
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout, pool=None),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self._buckets: dict[str, tuple[TokenBucket | None, TokenBucket | None]] = {}
        self._registry_recorded = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._owns_store:
            self.store.close()

    # ------------------------------------------------------------------------------------------ helpers

    def _key(self, entry: ModelEntry) -> str | None:
        if entry.api_key_env is None:
            return None
        environ = os.environ if self._env is None else self._env
        key = environ.get(entry.api_key_env, "")
        if not key.strip():
            raise MissingKeyError(entry.id, entry.api_key_env)
        return key.strip()

    def _limits(self, entry: ModelEntry) -> tuple[TokenBucket | None, TokenBucket | None]:
        got = self._buckets.get(entry.id)
        if got is None:
            got = (
                TokenBucket(entry.requests_per_minute) if entry.requests_per_minute else None,
                TokenBucket(entry.tokens_per_minute) if entry.tokens_per_minute else None,
            )
            self._buckets[entry.id] = got
        return got

    def _record_registry(self) -> None:
        if self._registry_recorded:
            return
        content = canonical_bytes(self.registry.content).decode("utf-8")
        with self.store.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO registries (digest, content, first_seen) VALUES (?, ?, ?)",
                (self.registry.digest, content, utc_now()),
            )
        self._registry_recorded = True

    async def _send_http(self, entry: ModelEntry, content: bytes, key: str | None) -> tuple[Reply, bytes]:
        if entry.provider == "anthropic":
            url, headers = _anthropic.endpoint(entry), _anthropic.headers(key)
        else:
            url, headers = _openai.endpoint(entry), _openai.headers(key)
        try:
            resp = await self._http.post(url, content=content, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise _Failure(
                f"cannot connect to {url} ({type(exc).__name__})", retryable=True, billing_unknown=False
            ) from None
        except httpx.TimeoutException as exc:
            raise _Failure(
                f"no reply from {url} within {self.timeout}s ({type(exc).__name__})",
                retryable=True,
                billing_unknown=True,
            ) from None
        except httpx.TransportError as exc:
            raise _Failure(
                f"connection to {url} failed ({type(exc).__name__}: {exc})",
                retryable=True,
                billing_unknown=True,
            ) from None
        code = resp.status_code
        if not 200 <= code < 300:
            raise _Failure(
                f"HTTP {code} from {url}: {_provider_message(resp)}",
                retryable=is_retryable_status(code),
                billing_unknown=False,
                status_code=code,
                retry_after=retry_after_seconds(resp.headers),
            )
        try:
            data = json.loads(resp.content)
        except ValueError:
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
        except ShapeError as exc:
            raise _Failure(
                f"reply from {url} does not match the {entry.provider} format: {exc}",
                retryable=False,
                billing_unknown=True,
                status_code=code,
            ) from None
        return reply, resp.content

    async def _attempt(
        self, entry: ModelEntry, request: Request, content: bytes, key: str | None
    ) -> tuple[Reply, str]:
        if entry.sim is not None:
            if entry.sim.latency_ms:
                await asyncio.sleep(entry.sim.latency_ms / 1000)
            reply = simulate(entry, request)
            return reply, digest(reply.raw)
        reply, raw = await self._send_http(entry, content, key)
        try:
            return reply, digest(reply.raw)
        except CanonicalError:  # e.g. an integer beyond 2**53 somewhere in the reply: hash the bytes received
            return reply, digest_bytes(raw)

    # ------------------------------------------------------------------------------------------ the call

    async def complete(self, model_id: str, request: Request) -> Completion:
        """Call ``model_id`` with ``request``.

        Raises ``MissingKeyError`` (before any request), ``BudgetExceeded``, ``ModelError`` (its message says how
        many attempts were made) or ``RegistryError`` for an unknown model.
        """
        entry = self.registry.get(model_id)
        key = self._key(entry)
        content = _wire_bytes(entry, request)
        call = _Call(
            call_id=uuid.uuid4().hex,
            entry=entry,
            request_digest=digest({"model_id": model_id, "request": request_to_json(request)}),
            worst=worst_case_cost(entry, len(content), request.max_tokens),
        )
        self._record_registry()
        req_bucket, tok_bucket = self._limits(entry)
        token_estimate = len(content) / 4 + request.max_tokens
        while True:
            call.attempt += 1
            if req_bucket is not None:
                await req_bucket.acquire(1)
            if tok_bucket is not None:
                await tok_bucket.acquire(token_estimate)
            reservation = self._reserve(call)
            started, t0 = utc_now(), time.perf_counter()
            try:
                reply, response_digest = await self._attempt(entry, request, content, key)
            except _Failure as f:
                failure = f
                failure.reason = _redact(f.reason, key)
            except (
                BaseException
            ) as exc:  # cancelled, or a bug: the request may have gone out, so charge it all
                kind = (
                    "cancelled"
                    if isinstance(exc, asyncio.CancelledError)
                    else f"internal error ({type(exc).__name__})"
                )
                self._settle(call, reservation, started, t0, call.worst, outcome="error", error=kind)
                raise
            else:
                cost = cost_of(reply.usage, entry.prices)
                self._settle(
                    call, reservation, started, t0, cost, outcome="ok", reply=reply, digest=response_digest
                )
                if tok_bucket is not None:
                    tok_bucket.refund(
                        token_estimate - reply.usage.total_input_tokens - reply.usage.output_tokens
                    )
                log.debug(
                    "model %s call %s ok after %d attempt(s), cost $%s",
                    model_id,
                    call.call_id,
                    call.attempt,
                    cost,
                )
                return Completion(
                    call_id=call.call_id,
                    model_id=model_id,
                    reported_model=reply.reported_model,
                    text=reply.text,
                    tool_calls=reply.tool_calls,
                    stop_reason=reply.stop_reason,
                    usage=reply.usage,
                    cost=cost,
                    simulated=entry.simulated,
                    attempts=call.attempt,
                    request_digest=call.request_digest,
                    response_digest=response_digest,
                    registry_digest=self.registry.digest,
                )
            charge = call.worst if failure.billing_unknown else Decimal(0)
            again = failure.retryable and call.attempt < self.retry.max_attempts
            reason = failure.reason if again or not failure.retryable else f"{failure.reason}; gave up"
            self._settle(
                call, reservation, started, t0, charge,
                outcome="retry" if again else "error", error=reason, status_code=failure.status_code,
            )  # fmt: skip
            if not again:
                raise ModelError(
                    model_id,
                    reason,
                    attempts=call.attempt,
                    status_code=failure.status_code,
                    call_id=call.call_id,
                )
            delay = backoff_delay(call.attempt, self.retry, failure.retry_after, self._rng)
            log.warning(
                "model %s attempt %d failed (%s); retrying in %.3fs", model_id, call.attempt, reason, delay
            )
            await self._sleep(delay)

    def _reserve(self, call: _Call) -> str:
        """One transaction: (first attempt) the pending call row, and the attempt's budget reservation."""
        now = utc_now()
        e = call.entry
        with self.store.transaction() as db:
            if call.attempt == 1:
                db.execute(
                    "INSERT INTO model_calls (call_id, started_at, model_id, provider, api_model, simulated, status,"
                    " attempts, request_digest, registry_digest, charged)"
                    " VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, '0')",
                    (call.call_id, now, e.id, e.provider, e.api_model, int(e.simulated),
                     call.request_digest, self.registry.digest),
                )  # fmt: skip
            reservation = try_reserve(db, call_id=call.call_id, model_id=e.id, amount=call.worst, now=now)
            if isinstance(reservation, BudgetExceeded):
                db.execute(
                    "UPDATE model_calls SET status = 'refused', error = ?, finished_at = ?, attempts = ?, charged = ?"
                    " WHERE call_id = ?",
                    (str(reservation), now, call.attempt - 1, str(plain(call.charged)), call.call_id),
                )
        if isinstance(reservation, BudgetExceeded):
            raise reservation
        return reservation

    def _settle(
        self,
        call: _Call,
        reservation: str,
        started: str,
        t0: float,
        charge: Decimal,
        *,
        outcome: str,
        error: str | None = None,
        status_code: int | None = None,
        reply: Reply | None = None,
        digest: str | None = None,
    ) -> None:
        """One transaction: settle the attempt's reservation, record the attempt, and finish the call unless it
        will be retried."""
        elapsed_ms = (time.perf_counter() - t0) * 1000
        now = utc_now()
        call.charged += charge
        if reply is not None and status_code is None and not call.entry.simulated:
            status_code = 200
        with self.store.transaction() as db:
            settle(db, reservation, charge, note=None if outcome == "ok" else outcome, now=now)
            db.execute(
                "INSERT INTO call_attempts (call_id, attempt, started_at, elapsed_ms, status_code, outcome, error,"
                " charged) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    call.call_id,
                    call.attempt,
                    started,
                    elapsed_ms,
                    status_code,
                    outcome,
                    error,
                    str(plain(charge)),
                ),
            )
            charged = str(plain(call.charged))
            if outcome == "retry":
                db.execute(
                    "UPDATE model_calls SET attempts = ?, charged = ? WHERE call_id = ?",
                    (call.attempt, charged, call.call_id),
                )
            elif reply is None:
                db.execute(
                    "UPDATE model_calls SET status = 'error', error = ?, attempts = ?, charged = ?, finished_at = ?"
                    " WHERE call_id = ?",
                    (error, call.attempt, charged, now, call.call_id),
                )
            else:
                u = reply.usage
                db.execute(
                    "UPDATE model_calls SET status = 'ok', reported_model = ?, attempts = ?, response_digest = ?,"
                    " input_tokens = ?, output_tokens = ?, cache_read_tokens = ?, cache_write_tokens = ?, cost = ?,"
                    " charged = ?, stop_reason = ?, finished_at = ? WHERE call_id = ?",
                    (reply.reported_model, call.attempt, digest, u.input_tokens, u.output_tokens,
                     u.cache_read_tokens, u.cache_write_tokens, str(charge), charged, reply.stop_reason, now,
                     call.call_id),
                )  # fmt: skip


@attrs.define
class _Call:
    """The mutable state of one call across its attempts (internal)."""

    call_id: str
    entry: ModelEntry
    request_digest: str
    worst: Decimal
    attempt: int = 0
    charged: Decimal = Decimal(0)


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
    ``ModelClient`` instead: it keeps the connection pool and the rate-limit buckets."""
    async with ModelClient(home=home, registry_paths=registry_paths, **client_options) as client:
        return await client.complete(model_id, request)
