"""A small asyncio HTTP/1.1 client for provider APIs: keep-alive connections pooled per origin.

Why not httpx. Profiled at concurrency 64 against a loopback provider answering in 200 ms, two thirds of the
client's CPU went to httpcore's pool: every request event re-scans every connection of the pool
(``_assign_requests_to_connections`` and ``is_idle``, ten million calls for 680 requests), and each request
tried and failed to ``import sniffio``. Throughput *fell* as concurrency rose (35 calls/s at 64). This client
does one thing (POST a JSON body, read one reply) with O(1) pool operations, and it gives the model layer what
it needs and httpx did not: the whole attempt under one deadline (a provider that trickles its body cannot
stretch an attempt; the caller wraps :meth:`HttpPool.post` in ``asyncio.timeout``), a hard cap on the reply's
size (decompressed too), no redirects ever followed, and the knowledge of whether request bytes may have left
(``HttpError.sent``), which decides whether a failed attempt may have been billed.

Supported: ``http`` and ``https`` (TLS via ``ssl`` with certifi's CA bundle), ``Content-Length``, chunked and
read-to-close bodies, ``gzip``/``deflate`` content encodings, interim 1xx replies, and a proxy from the
environment (``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY``, as urllib reads them): a CONNECT tunnel for
``https``, an absolute-form request for ``http``.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import ssl
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from typing import cast

import attrs

__all__ = ["MAX_BODY_BYTES", "HttpError", "HttpPool", "HttpResponse", "Progress", "proxies_from_env"]

MAX_BODY_BYTES = 32 * 1024 * 1024  # a reply larger than this (after decompression) is refused
_LINE_LIMIT = 64 * 1024  # a status line, header line or chunk-size line longer than this is refused
_MAX_HEADERS = 200
_IDLE_SECONDS = 4.0  # a pooled connection idle longer than this is closed rather than reused


class HttpError(Exception):
    """The exchange failed. ``sent`` is False only when no byte of the request can have reached the server
    (so the provider cannot have billed it); ``phase`` says where it failed: connect, send or receive."""

    def __init__(self, message: str, *, sent: bool, phase: str) -> None:
        super().__init__(message)
        self.sent = sent
        self.phase = phase


@attrs.define
class Progress:
    """Set by :meth:`HttpPool.post` as the exchange goes: ``sent`` once the first request byte is handed to
    the socket (from then on the provider may have billed it, whatever happens next)."""

    sent: bool = False


@attrs.frozen
class HttpResponse:
    status: int
    reason: str
    headers: Mapping[str, str]  # lower-case names; repeated headers joined with ", "
    content: bytes


@attrs.define
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        return (
            now - self.idle_since < _IDLE_SECONDS
            and not self.reader.at_eof()
            and not self.writer.is_closing()
            and not self.reader.exception()
        )

    def abort(self) -> None:
        self.writer.transport.abort()


Origin = tuple[str, str, int]


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


class HttpPool:
    """POSTs over pooled keep-alive connections. One per :class:`ModelClient`; safe for many concurrent
    requests on one event loop."""

    def __init__(
        self,
        *,
        max_connections: int = 256,
        max_body: int = MAX_BODY_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        proxies: Mapping[str, str] | None = None,
        user_agent: str = "evalkit",
    ) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[Origin, collections.deque[_Conn]] = {}
        self._max_body = max_body
        self._ssl = ssl_context
        self._proxies = dict(proxies or {})
        self._user_agent = user_agent
        self._closed = False

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = _default_ssl()
        return self._ssl

    async def aclose(self) -> None:
        self._closed = True
        for pool in self._idle.values():
            while pool:
                pool.pop().abort()
        self._idle.clear()

    # ------------------------------------------------------------------------------------------ connect

    def _proxy(self, scheme: str, host: str) -> urllib.parse.SplitResult | None:
        url = self._proxies.get(scheme)
        if not url or _bypass(host, self._proxies.get("no", "")):
            return None
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        return parsed if parsed.hostname else None

    async def _open(self, origin: Origin, connect_timeout: float) -> _Conn:
        scheme, host, port = origin
        proxy = self._proxy(scheme, host)
        try:
            async with asyncio.timeout(connect_timeout):
                if proxy is None:
                    tls = self._ssl_context() if scheme == "https" else None
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=tls, server_hostname=host if tls else None, limit=_LINE_LIMIT
                    )
                    return _Conn(reader, writer)
                reader, writer = await asyncio.open_connection(
                    proxy.hostname, proxy.port or 80, limit=_LINE_LIMIT
                )
                conn = _Conn(reader, writer)
                if scheme == "https":
                    await self._tunnel(conn, proxy, host, port)
                return conn
        except TimeoutError:
            raise HttpError(
                f"connect timed out after {connect_timeout:g}s", sent=False, phase="connect"
            ) from None
        except (
            OSError,
            ssl.SSLError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as exc:
            raise HttpError(f"{type(exc).__name__}: {exc}", sent=False, phase="connect") from None

    async def _tunnel(self, conn: _Conn, proxy: urllib.parse.SplitResult, host: str, port: int) -> None:
        lines = [f"CONNECT {host}:{port} HTTP/1.1", f"host: {host}:{port}"]
        if proxy.username is not None:
            creds = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
            lines.append(f"proxy-authorization: Basic {base64.b64encode(creds.encode()).decode()}")
        conn.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await conn.writer.drain()
        status, reason, _, _ = await _read_head(conn.reader)
        if status != 200:
            conn.abort()
            raise OSError(f"proxy {proxy.hostname}:{proxy.port} refused CONNECT: {status} {reason}")
        await conn.writer.start_tls(self._ssl_context(), server_hostname=host)

    def _checkout(self, origin: Origin) -> _Conn | None:
        pool = self._idle.get(origin)
        now = time.monotonic()
        while pool:
            conn = pool.pop()  # the most recently used: the least likely to have been closed by the server
            if conn.usable(now):
                return conn
            conn.abort()
        return None

    def _checkin(self, origin: Origin, conn: _Conn) -> None:
        if self._closed:
            conn.abort()
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(origin, collections.deque()).append(conn)

    # ------------------------------------------------------------------------------------------ request

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
        host = parts.hostname
        port = parts.port or (443 if scheme == "https" else 80)
        origin = (scheme, host, port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if scheme == "http" and self._proxy(scheme, host) is not None:
            target = url  # absolute form through a plain HTTP proxy
        request = _request_bytes(target, host, port, scheme, body, headers, self._user_agent)
        async with self._slots:
            conn = self._checkout(origin)
            if conn is None:
                conn = await self._open(origin, connect_timeout)
            done = keep = False
            try:
                try:
                    if progress is not None:
                        progress.sent = True
                    conn.writer.write(request)
                    await conn.writer.drain()
                except (OSError, RuntimeError) as exc:
                    raise HttpError(
                        f"send failed ({type(exc).__name__}: {exc})", sent=True, phase="send"
                    ) from None
                try:
                    response, keep = await self._read_response(conn.reader)
                except asyncio.IncompleteReadError as exc:
                    got = len(exc.partial)
                    raise HttpError(
                        f"connection closed mid-reply ({got} byte(s) of the part being read)",
                        sent=True,
                        phase="receive",
                    ) from None
                except (OSError, ssl.SSLError) as exc:
                    raise HttpError(
                        f"receive failed ({type(exc).__name__}: {exc})", sent=True, phase="receive"
                    ) from None
                except (ValueError, asyncio.LimitOverrunError) as exc:
                    raise HttpError(f"malformed reply ({exc})", sent=True, phase="receive") from None
                done = True
                return response
            finally:
                if done and keep:
                    self._checkin(origin, conn)
                else:
                    conn.abort()  # a cancelled, failed or read-to-close exchange never goes back to the pool

    async def _read_response(self, reader: asyncio.StreamReader) -> tuple[HttpResponse, bool]:
        while True:
            status, reason, version, headers = await _read_head(reader)
            if 100 <= status < 200 and status != 101:
                continue  # interim reply (100 Continue, 103 Early Hints): the real one follows
            break
        if status == 101:
            raise ValueError("the server switched protocols (101)")
        conn_tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        keep = ("close" not in conn_tokens) if version == "HTTP/1.1" else ("keep-alive" in conn_tokens)
        encoding = headers.get("transfer-encoding", "").lower()
        if status in (204, 304):
            raw = b""
        elif encoding:
            if encoding.split(",")[-1].strip() != "chunked":
                raise ValueError(f"unsupported transfer-encoding {encoding!r}")
            raw = await self._read_chunked(reader)
        elif "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise ValueError(f"bad content-length {headers['content-length']!r}")
            length = int(values.pop())
            if length > self._max_body:
                raise ValueError(f"reply of {length} bytes is over the {self._max_body}-byte limit")
            raw = await reader.readexactly(length)
        else:
            raw = await self._read_to_close(reader)
            keep = False
        content = _decode(raw, headers.get("content-encoding", ""), self._max_body)
        return HttpResponse(status, reason, headers, content), keep

    async def _read_chunked(self, reader: asyncio.StreamReader) -> bytes:
        out = bytearray()
        while True:
            line = await reader.readuntil(b"\n")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ValueError(f"bad chunk size {size_text[:40]!r}") from None
            if size < 0:
                raise ValueError("negative chunk size")
            if size == 0:
                break
            if len(out) + size > self._max_body:
                raise ValueError(f"reply is over the {self._max_body}-byte limit")
            out += await reader.readexactly(size)
            if await reader.readuntil(b"\n") not in (b"\r\n", b"\n"):
                raise ValueError("chunk not followed by CRLF")
        for _ in range(_MAX_HEADERS):  # trailers, then the blank line
            if (await reader.readuntil(b"\n")).strip() == b"":
                return bytes(out)
        raise ValueError("too many trailer lines")

    async def _read_to_close(self, reader: asyncio.StreamReader) -> bytes:
        out = bytearray()
        while chunk := await reader.read(65536):
            out += chunk
            if len(out) > self._max_body:
                raise ValueError(f"reply is over the {self._max_body}-byte limit")
        return bytes(out)


def _request_bytes(
    target: str, host: str, port: int, scheme: str, body: bytes, headers: Mapping[str, str], agent: str
) -> bytes:
    default_port = 443 if scheme == "https" else 80
    host_header = (f"[{host}]" if ":" in host else host) + ("" if port == default_port else f":{port}")
    lines = [
        f"POST {target} HTTP/1.1",
        f"host: {host_header}",
        f"user-agent: {agent}",
        "accept-encoding: identity",
    ]
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n\0") or ":" in name:
            # a key or value with a line break would inject headers; never send it (and never echo it)
            raise HttpError(
                f"header {name!r} holds a control character; not sent", sent=False, phase="connect"
            )
        lines.append(f"{name}: {value}")
    lines.append(f"content-length: {len(body)}")
    try:
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise HttpError(
            "a header holds a character outside latin-1; not sent", sent=False, phase="connect"
        ) from None
    return head + body


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, str, str, dict[str, str]]:
    line = await reader.readuntil(b"\n")
    parts = line.decode("latin-1").strip().split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise ValueError(f"bad status line {line[:80]!r}")
    version, status, reason = parts[0], int(parts[1]), parts[2] if len(parts) > 2 else ""
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADERS):
        raw = await reader.readuntil(b"\n")
        text = raw.decode("latin-1").rstrip("\r\n")
        if not text:
            return status, reason, version, headers
        name, sep, value = text.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError(f"bad header line {raw[:80]!r}")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    raise ValueError(f"more than {_MAX_HEADERS} header lines")


def _decode(raw: bytes, encoding: str, limit: int) -> bytes:
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return raw
    if enc not in ("gzip", "x-gzip", "deflate"):
        raise ValueError(f"unsupported content-encoding {encoding!r}")
    wbits = (
        16 + zlib.MAX_WBITS
        if enc != "deflate"
        else (zlib.MAX_WBITS if raw[:1] == b"\x78" else -zlib.MAX_WBITS)
    )
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"bad {enc} body ({exc})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise ValueError(f"reply decompresses to more than {limit} bytes")
    return out
