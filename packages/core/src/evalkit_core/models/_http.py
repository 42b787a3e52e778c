"""The model layer's HTTP client on aiohttp: keep-alive connections pooled by aiohttp's connector.

It replaced a hand-written HTTP/1.1 client (itself written because httpx's pool fell to 35-62 calls/s at
concurrency 64): a home-made HTTP/TLS client is a lasting security and maintenance cost, and aiohttp, made for
asyncio at high request rates, sustains the same order of throughput (``tools/bench/campaign.py``; figures in
docs/campaigns.md).

aiohttp does the protocol (connections, TLS, CONNECT tunnels, framing: content-length, chunked, read-to-close,
interim replies). This module keeps what the model layer needs on top of it and pins it down:

- **One deadline per attempt.** The caller wraps :meth:`HttpPool.post` in ``asyncio.timeout``; aiohttp's own
  timeouts are off except ``connect_timeout``, for establishing a new connection (and its TLS and tunnel).
- **A hard cap on the reply's size,** decompressed too: aiohttp's automatic decompression is off; the body is
  read in pieces up to the cap and decompressed here with the same cap, so a gzip bomb costs at most the cap.
- **No redirect is ever followed** (``allow_redirects=False``): a 3xx comes back like any other status.
- **Whether request bytes may have left** (:attr:`HttpError.sent`, :class:`Progress`): set the moment aiohttp
  has a connection for the request (a new one made, or a pooled one taken), just before it writes; a failure
  before that cannot have been billed.
- **Headers are checked before anything is sent:** a name or value with a line break, a NUL or a character
  outside latin-1 is refused without echoing it (it may hold a key).
- **Proxies come from the environment the client was given,** not from the process's (``HTTPS_PROXY`` /
  ``HTTP_PROXY`` / ``NO_PROXY``, as urllib reads them): a CONNECT tunnel for ``https``, an absolute-form request
  for ``http``; credentials in the proxy URL travel as ``Proxy-Authorization``.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import attrs

if TYPE_CHECKING:  # imported on the first request: a client that only calls simulated models never pays for it
    import aiohttp

__all__ = ["MAX_BODY_BYTES", "HttpError", "HttpPool", "HttpResponse", "Progress", "proxies_from_env"]

MAX_BODY_BYTES = 32 * 1024 * 1024  # a reply larger than this (after decompression) is refused
_IDLE_SECONDS = 4.0  # a pooled connection idle longer than this is closed rather than reused
_READ_CHUNK = 65536


class HttpError(Exception):
    """The exchange failed. ``sent`` is False only when no byte of the request can have reached the server
    (so the provider cannot have billed it); ``phase`` says where it failed: connect, send or receive."""

    def __init__(self, message: str, *, sent: bool, phase: str) -> None:
        super().__init__(message)
        self.sent = sent
        self.phase = phase


@attrs.define
class Progress:
    """Set by :meth:`HttpPool.post` as the exchange goes: ``sent`` once the request has a connection and its
    bytes are about to be written (from then on the provider may have billed it, whatever happens next)."""

    sent: bool = False


@attrs.frozen
class HttpResponse:
    status: int
    reason: str
    headers: Mapping[str, str]  # lower-case names; repeated headers joined with ", "
    content: bytes


def proxies_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``{"https": url, "http": url, "no": hosts}`` from ``*_PROXY`` variables (either case), as urllib reads
    them."""
    out: dict[str, str] = {}
    for name, value in environ.items():
        low = name.lower()
        scheme = low.removesuffix("_proxy")
        # the lower-case spelling wins, as in urllib
        if (
            value
            and low.endswith("_proxy")
            and scheme in ("http", "https", "no")
            and (name.islower() or scheme not in out)
        ):
            out[scheme] = value
    return out


def _bypass(host: str, no_proxy: str) -> bool:
    if not no_proxy:
        return False
    if no_proxy.strip() == "*":
        return True
    found: object = getattr(urllib.request, "proxy_bypass_environment")  # noqa: B009 - not in the stubs
    bypass = cast("Callable[[str, dict[str, str]], object]", found)
    return bool(bypass(host, {"no": no_proxy}))


def _default_ssl() -> ssl.SSLContext:
    try:
        import certifi  # only when a TLS connection is made

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - certifi is a dependency; the system store is the fallback
        return ssl.create_default_context()


def _check_headers(headers: Mapping[str, str]) -> None:
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n\0") or ":" in name or not name:
            # a key or value with a line break would inject headers; never send it (and never echo it)
            raise HttpError(f"header {name!r} holds a control character; not sent", sent=False, phase="connect")
        try:
            name.encode("latin-1")
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise HttpError(
                "a header holds a character outside latin-1; not sent", sent=False, phase="connect"
            ) from None


async def _mark_sent(_session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: object) -> None:
    progress = cast("Progress | None", getattr(ctx, "trace_request_ctx", None))
    if progress is not None:
        progress.sent = True


def _trace() -> aiohttp.TraceConfig:
    import aiohttp

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(_mark_sent)
    trace.on_connection_reuseconn.append(_mark_sent)
    trace.freeze()
    return trace


class HttpPool:
    """POSTs over pooled keep-alive connections (an aiohttp session, made on first use inside the running loop).
    One per :class:`ModelClient`; safe for many concurrent requests on one event loop."""

    def __init__(
        self,
        *,
        max_connections: int = 256,
        max_body: int = MAX_BODY_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        proxies: Mapping[str, str] | None = None,
        user_agent: str = "evalkit",
    ) -> None:
        self._max_connections = max_connections
        self._max_body = max_body
        self._ssl = ssl_context
        self._proxies = dict(proxies or {})
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = _default_ssl()
        return self._ssl

    def _session_now(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=0, keepalive_timeout=_IDLE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,  # decompressed here, under the size cap
                trust_env=False,  # proxies come from the environment the client was given
                timeout=aiohttp.ClientTimeout(total=None),
                trace_configs=[_trace()],
                skip_auto_headers=("Accept-Encoding", "Content-Type"),
            )
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    def _proxy(self, scheme: str, host: str) -> tuple[str, dict[str, str]] | None:
        """(proxy URL without credentials, proxy headers) for a request to ``host``, or None."""
        url = self._proxies.get(scheme)
        if not url or _bypass(host, self._proxies.get("no", "")):
            return None
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if not parsed.hostname:
            return None
        headers: dict[str, str] = {}
        if parsed.username is not None:
            import aiohttp

            headers["Proxy-Authorization"] = aiohttp.encode_basic_auth(
                urllib.parse.unquote(parsed.username), urllib.parse.unquote(parsed.password or "")
            )
        netloc = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
        return f"http://{netloc}:{parsed.port or 80}", headers

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        connect_timeout: float,
        progress: Progress | None = None,
    ) -> HttpResponse:
        """POST ``body`` to ``url`` and read the whole reply. Raises :class:`HttpError`. Never follows a
        redirect: a 3xx is returned like any other status. ``progress`` learns when the request went out."""
        if self._closed:
            raise HttpError("the HTTP pool is closed", sent=False, phase="connect")
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"not an http(s) URL: {url!r}", sent=False, phase="connect")
        _check_headers(headers)
        import aiohttp

        state = progress if progress is not None else Progress()
        proxy = self._proxy(scheme, parts.hostname)
        extra: dict[str, Any] = {}
        if proxy is not None:
            extra["proxy"], extra["proxy_headers"] = proxy[0], proxy[1] or None
        if scheme == "https":
            extra["ssl"] = self._ssl_context()
        session = self._session_now()
        response: aiohttp.ClientResponse | None = None
        done = False
        try:
            response = await session.post(
                url,
                data=body,
                headers={**headers, "user-agent": self._user_agent, "accept-encoding": "identity"},
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
                trace_request_ctx=state,
                **extra,
            )
            raw = await self._read(response)
            content = _decode(raw, response.headers.get("content-encoding", ""), self._max_body)
            out = HttpResponse(response.status, response.reason or "", _headers(response), content)
            done = True
        except HttpError:
            raise
        except aiohttp.ConnectionTimeoutError:
            raise HttpError(f"connect timed out after {connect_timeout:g}s", sent=False, phase="connect") from None
        except (aiohttp.ClientError, OSError, ValueError, zlib.error) as exc:
            text = f"{type(exc).__name__}: {exc}"
            if not state.sent:
                raise HttpError(text, sent=False, phase="connect") from None
            if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
                raise HttpError(f"connection closed mid-reply ({text})", sent=True, phase="receive") from None
            if isinstance(exc, aiohttp.ClientResponseError):  # the reply's head or framing did not parse
                raise HttpError(f"malformed reply ({exc.message})", sent=True, phase="receive") from None
            raise HttpError(f"receive failed ({text})", sent=True, phase="receive") from None
        finally:
            if response is not None:
                if done:
                    response.release()
                else:
                    response.close()  # a cancelled or failed exchange never goes back to the pool
        return out

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        length = response.content_length
        if length is not None and length > self._max_body:
            raise HttpError(
                f"malformed reply (reply of {length} bytes is over the {self._max_body}-byte limit)",
                sent=True,
                phase="receive",
            )
        out = bytearray()
        while chunk := await response.content.read(_READ_CHUNK):
            out += chunk
            if len(out) > self._max_body:
                raise HttpError(
                    f"malformed reply (reply is over the {self._max_body}-byte limit)", sent=True, phase="receive"
                )
        return bytes(out)


def _headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in response.headers.items():
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _decode(raw: bytes, encoding: str, limit: int) -> bytes:
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return raw
    if enc not in ("gzip", "x-gzip", "deflate"):
        raise HttpError(f"malformed reply (unsupported content-encoding {encoding!r})", sent=True, phase="receive")
    wbits = (
        16 + zlib.MAX_WBITS
        if enc != "deflate"
        else (zlib.MAX_WBITS if raw[:1] == b"\x78" else -zlib.MAX_WBITS)
    )
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise HttpError(f"malformed reply (bad {enc} body ({exc}))", sent=True, phase="receive") from None
    if len(out) > limit or d.unconsumed_tail:
        raise HttpError(f"malformed reply (reply decompresses to more than {limit} bytes)", sent=True, phase="receive")
    return out
