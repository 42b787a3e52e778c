"""One exchange with a provider, and the keys kept out of everything that comes back.

The request body as sent (:func:`wire_bytes`: its length bounds the input tokens a reservation covers), the POST
over the client's pool, and the reading of the reply: a redirect is never followed, a non-2xx status, a body
that is not JSON or not in the provider's format each become a :class:`Failure` that says whether the attempt
may be retried and whether the provider may have billed it. Every text that comes back (error bodies, the
answer, tool calls, the reported model) passes :func:`redact` *before* it is cut to length.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import attrs

from evalkit_core._canonical import canonical_bytes
from evalkit_core.models import _anthropic, _openai
from evalkit_core.models._http import HttpError, HttpPool, HttpResponse, Progress
from evalkit_core.models._providers import Reply, ShapeError
from evalkit_core.models._registry import ModelEntry
from evalkit_core.models._retry import is_retryable_status, retry_after_seconds
from evalkit_core.models._sim import simulate
from evalkit_core.models._types import Request, ToolCall, request_to_json

__all__ = ["Failure", "cut", "endpoint", "provider_message", "redact", "scrub", "send_http", "wire_bytes"]

_REDACTED = "[redacted]"
_ERROR_CHARS = 300
_SCAN_CHARS = 65536  # redaction looks this far into a provider's error body before it is cut to _ERROR_CHARS
_MIN_PREFIX = 8  # any prefix of a key this long or longer is redacted


class Failure(Exception):  # noqa: N818 - internal, never escapes the client
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


def cut(text: str, key: str | None, limit: int = _ERROR_CHARS) -> str:
    return redact(text[:_SCAN_CHARS], key)[:limit]


def provider_message(resp: HttpResponse, key: str | None) -> str:
    body = resp.content[: _SCAN_CHARS * 4].decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return cut(body, key)
    err = cast("dict[str, Any]", data).get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):  # both providers: {"error": {"type": ..., "message": ...}}
        message = cast("dict[str, Any]", err).get("message")
        if isinstance(message, str):
            return cut(message, key)
    return cut(body, key)


async def send_http(
    http: HttpPool, entry: ModelEntry, content: bytes, key: str | None, connect_timeout: float, progress: Progress
) -> tuple[Reply, bytes]:
    if entry.provider == "anthropic":
        url, headers = _anthropic.endpoint(entry), _anthropic.headers(key)
    else:
        url, headers = _openai.endpoint(entry), _openai.headers(key)
    try:
        resp = await http.post(
            url, content, headers, connect_timeout=connect_timeout, progress=progress
        )
    except HttpError as exc:
        said = redact(str(exc), key)  # a reply's broken head, quoted in the error, may echo the key
        if not exc.sent:
            raise Failure(
                f"cannot connect to {url} ({said})", retryable=True, billing_unknown=False
            ) from None
        raise Failure(
            f"connection to {url} failed after the request was sent ({said})",
            retryable=True,
            billing_unknown=True,
        ) from None
    code = resp.status
    if 300 <= code < 400:
        where = cut(resp.headers.get("location", "nowhere"), key, 200)
        raise Failure(
            f"HTTP {code} from {url} redirects to {where}; redirects are never followed (the key would "
            "travel with it): set base_url to the right address",
            retryable=False,
            billing_unknown=False,
            status_code=code,
        )
    if not 200 <= code < 300:
        raise Failure(
            f"HTTP {code} from {url}: {provider_message(resp, key)}",
            retryable=is_retryable_status(code),
            billing_unknown=False,
            status_code=code,
            retry_after=retry_after_seconds(resp.headers),
        )
    try:
        data = json.loads(resp.content)
    except (ValueError, RecursionError):
        raise Failure(
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
        raise Failure(
            f"reply from {url} does not match the {entry.provider} format: {redact(str(exc), key)}",
            retryable=False,
            billing_unknown=True,
            status_code=code,
        ) from None
    return reply, resp.content


def endpoint(entry: ModelEntry) -> str:
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


def scrub(reply: Reply, key: str | None) -> tuple[Reply, bool]:
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


def wire_bytes(entry: ModelEntry, request: Request) -> bytes:
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
