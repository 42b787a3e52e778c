"""The model layer's HTTP client (``evalkit_core.models._http``, on aiohttp): keep-alive, framing, limits, TLS
and a CONNECT proxy, against servers on 127.0.0.1 that these tests start and stop."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from evalkit_core.models._http import HttpError, HttpPool, Progress, proxies_from_env

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    return head + await reader.readexactly(length)


def _ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def _serve(handler: Handler, **kwargs: object) -> tuple[asyncio.Server, int]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(closing, "127.0.0.1", 0, **kwargs)  # type: ignore[arg-type]
    return server, server.sockets[0].getsockname()[1]


def test_keep_alive_reuses_one_connection_and_progress_says_when_bytes_left():
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            await _read_request(reader)
            writer.write(_ok())
            await writer.drain()

    async def go() -> list[int]:
        server, port = await _serve(handler)
        pool = HttpPool()
        progress = Progress()
        statuses = []
        for _ in range(5):
            r = await pool.post(f"http://127.0.0.1:{port}/x", b"{}", {}, connect_timeout=2, progress=progress)
            statuses.append(r.status)
        assert progress.sent
        await pool.aclose()
        server.close()
        await asyncio.sleep(0.05)
        return statuses

    assert asyncio.run(go()) == [200] * 5
    assert connections == 1


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n", "over the"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello", "content-length"),
        (b"SMTP ready\r\n\r\n", "bad status line"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-encoding: br\r\ncontent-length: 2\r\n\r\nxx",
            "unsupported content-encoding",
        ),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", "connection closed mid-reply"),
        (b"", "connection closed mid-reply"),
    ],
)
def test_malformed_or_oversized_replies_are_errors_after_sending(reply, needle):
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(reply)
        await writer.drain()

    async def go() -> HttpError:
        server, port = await _serve(handler)
        pool = HttpPool(max_body=1024)
        try:
            with pytest.raises(HttpError) as info:
                await pool.post(f"http://127.0.0.1:{port}/", b"{}", {}, connect_timeout=2)
        finally:
            await pool.aclose()
            server.close()
            await asyncio.sleep(0.05)
        return info.value

    err = asyncio.run(go())
    assert needle in str(err).lower()
    assert str(err).startswith(("malformed reply", "connection closed mid-reply")), str(err)
    assert err.sent  # the request had left: the caller must treat it as possibly billed


def test_a_gzip_bomb_is_refused():
    import gzip

    bomb = gzip.compress(b"\0" * 5_000_000)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_ok(bomb, b"content-encoding: gzip\r\n"))
        await writer.drain()

    async def go() -> str:
        server, port = await _serve(handler)
        pool = HttpPool(max_body=100_000)
        try:
            with pytest.raises(HttpError) as info:
                await pool.post(f"http://127.0.0.1:{port}/", b"{}", {}, connect_timeout=2)
        finally:
            await pool.aclose()
            server.close()
            await asyncio.sleep(0.05)
        return str(info.value)

    assert "decompresses to more than" in asyncio.run(go())


def test_header_injection_is_refused_before_anything_is_sent():
    async def go() -> HttpError:
        pool = HttpPool()
        try:
            with pytest.raises(HttpError) as info:
                await pool.post(
                    "http://127.0.0.1:9/", b"{}", {"authorization": "Bearer a\r\nx-evil: 1"}, connect_timeout=1
                )
        finally:
            await pool.aclose()
        return info.value

    err = asyncio.run(go())
    assert not err.sent
    assert "control character" in str(err)


def test_connection_refused_is_not_sent():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def go() -> HttpError:
        pool = HttpPool()
        try:
            with pytest.raises(HttpError) as info:
                await pool.post(f"http://127.0.0.1:{port}/", b"{}", {}, connect_timeout=1)
        finally:
            await pool.aclose()
        return info.value

    err = asyncio.run(go())
    assert (err.sent, err.phase) == (False, "connect")


def test_proxies_from_the_environment():
    env = {
        "HTTPS_PROXY": "http://upper:1",
        "https_proxy": "http://lower:2",
        "NO_PROXY": "example.com",
        "PATH": "/",
    }
    assert proxies_from_env(env) == {"https": "http://lower:2", "no": "example.com"}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_tls_direct_and_through_a_connect_proxy(tls_files):
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    tunnels: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(_ok(b'{"tls":true}'))
        await writer.drain()

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        tunnels.append(head.split(b"\r\n")[0])
        host, port = head.split(b" ")[1].decode().rsplit(":", 1)
        up_r, up_w = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()

        async def pipe(a: asyncio.StreamReader, b: asyncio.StreamWriter) -> None:
            try:
                while data := await a.read(65536):
                    b.write(data)
                    await b.drain()
            except ConnectionError:
                pass
            finally:
                b.close()

        try:
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
        finally:
            up_w.close()

    async def go() -> tuple[bytes, bytes]:
        server, port = await _serve(handler, ssl=server_ctx)
        proxy_server, proxy_port = await _serve(proxy)
        direct = HttpPool(ssl_context=client_ctx)
        tunnelled = HttpPool(ssl_context=client_ctx, proxies={"https": f"http://127.0.0.1:{proxy_port}"})
        untrusted = HttpPool()  # certifi's CAs do not know the test certificate
        try:
            a = await direct.post(f"https://127.0.0.1:{port}/v1", b"{}", {}, connect_timeout=5)
            b = await tunnelled.post(f"https://127.0.0.1:{port}/v1", b"{}", {}, connect_timeout=5)
            with pytest.raises(HttpError, match="CERTIFICATE_VERIFY_FAILED") as info:
                await untrusted.post(f"https://127.0.0.1:{port}/v1", b"{}", {}, connect_timeout=5)
            assert not info.value.sent
        finally:
            for p in (direct, tunnelled, untrusted):
                await p.aclose()
            server.close()
            proxy_server.close()
            await asyncio.sleep(0.05)
        return a.content, b.content

    assert asyncio.run(go()) == (b'{"tls":true}', b'{"tls":true}')
    assert tunnels == [b"CONNECT 127.0.0.1:%d HTTP/1.1" % int(tunnels[0].split(b":")[1].split(b" ")[0])]


# --- neighbours of the pinned attacks: every framing is capped, redirects stay replies, proxy credentials stay
# with the proxy, and a hostile head is an error after sending -------------------------------------------------


def _post_once(reply: bytes, *, max_body: int = 1024, close: bool = False) -> HttpError:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(reply)
        await writer.drain()
        if close:
            writer.close()

    async def go() -> HttpError:
        server, port = await _serve(handler)
        pool = HttpPool(max_body=max_body)
        try:
            with pytest.raises(HttpError) as info:
                await pool.post(f"http://127.0.0.1:{port}/", b"{}", {}, connect_timeout=2)
        finally:
            await pool.aclose()
            server.close()
            await asyncio.sleep(0.05)
        return info.value

    return asyncio.run(go())


def test_a_chunked_body_past_the_cap_is_refused():
    chunk = b"%x\r\n%s\r\n" % (600, b"a" * 600)
    err = _post_once(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 4 + b"0\r\n\r\n")
    assert "over the 1024-byte limit" in str(err)
    assert err.sent


def test_a_read_to_close_body_past_the_cap_is_refused():
    err = _post_once(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + b"b" * 5000, close=True)
    assert "over the 1024-byte limit" in str(err)
    assert err.sent


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_every_compressed_form_is_capped_after_decompression(encoding):
    import zlib

    plain = b"\0" * 2_000_000
    if encoding == "gzip":
        import gzip

        body, header = gzip.compress(plain), b"gzip"
    elif encoding == "deflate":
        body, header = zlib.compress(plain), b"deflate"
    else:
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body, header = c.compress(plain) + c.flush(), b"deflate"
    err = _post_once(_ok(body, b"content-encoding: " + header + b"\r\n"), max_body=100_000)
    assert "decompresses to more than 100000 bytes" in str(err)


def test_a_header_line_too_long_is_an_error_after_sending():
    err = _post_once(b"HTTP/1.1 200 OK\r\nx-junk: " + b"j" * 100_000 + b"\r\ncontent-length: 2\r\n\r\n{}")
    assert str(err).startswith("malformed reply"), str(err)
    assert err.sent


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_a_redirect_is_returned_never_followed(code):
    followed: list[bytes] = []

    async def target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        followed.append(await _read_request(reader))
        writer.write(_ok())
        await writer.drain()

    async def go() -> tuple[int, str]:
        elsewhere, other = await _serve(target)

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _read_request(reader)
            writer.write(b"HTTP/1.1 %d Moved\r\nlocation: http://127.0.0.1:%d/x\r\ncontent-length: 0\r\n\r\n" % (code, other))
            await writer.drain()

        server, port = await _serve(handler)
        pool = HttpPool()
        try:
            r = await pool.post(f"http://127.0.0.1:{port}/", b"{}", {"authorization": "Bearer k"}, connect_timeout=2)
        finally:
            await pool.aclose()
            server.close()
            elsewhere.close()
            await asyncio.sleep(0.05)
        return r.status, r.headers["location"]

    status, location = asyncio.run(go())
    assert status == code
    assert location.endswith("/x")
    assert followed == []


def test_a_connect_tunnel_carries_the_proxy_credentials_and_not_the_api_key():
    """The CONNECT head goes to the proxy in clear: it holds the proxy's credentials, never the request's headers
    (the provider key travels inside the tunnel only). A proxy that refuses the tunnel: nothing was sent."""
    heads: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    async def go() -> HttpError:
        proxy_server, proxy_port = await _serve(proxy)
        pool = HttpPool(proxies={"https": f"http://user:p%40ss@127.0.0.1:{proxy_port}"})
        try:
            with pytest.raises(HttpError) as info:
                await pool.post("https://127.0.0.1:9/v1", b"{}", {"authorization": "Bearer sk-secret-key-1234"},
                                connect_timeout=2)
        finally:
            await pool.aclose()
            proxy_server.close()
            await asyncio.sleep(0.05)
        return info.value

    import base64

    err = asyncio.run(go())
    assert (err.sent, err.phase) == (False, "connect")
    assert len(heads) == 1
    head = heads[0]
    assert head.startswith(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n")
    lines = {line.split(b":", 1)[0].lower(): line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")[1:] if b":" in line}
    assert lines[b"proxy-authorization"] == b"Basic " + base64.b64encode(b"user:p@ss")
    assert b"sk-secret" not in head
    assert b"authorization" not in {k for k in lines if k != b"proxy-authorization"}
    assert "sk-secret" not in str(err)


def test_a_plain_http_request_through_a_proxy_is_in_absolute_form():
    seen_by_proxy: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen_by_proxy.append(await _read_request(reader))
        writer.write(_ok())
        await writer.drain()

    async def go() -> int:
        proxy_server, proxy_port = await _serve(proxy)
        pool = HttpPool(proxies={"http": f"http://127.0.0.1:{proxy_port}", "no": "localhost"})
        try:
            r = await pool.post("http://127.0.0.1:9/v1", b"{}", {}, connect_timeout=2)
        finally:
            await pool.aclose()
            proxy_server.close()
            await asyncio.sleep(0.05)
        return r.status

    assert asyncio.run(go()) == 200
    assert seen_by_proxy[0].startswith(b"POST http://127.0.0.1:9/v1 HTTP/1.1\r\n")


def test_aiohttp_loads_on_the_first_request_only():
    """A client that only calls simulated models (every offline run) never pays aiohttp's import."""
    import sys

    code = (
        "import asyncio, sys\n"
        "from evalkit_core.models import ModelClient, Request, SimContext\n"
        "from evalkit_core.models._http import HttpPool\n"
        "async def go():\n"
        "    async with ModelClient() as c:\n"
        "        await c.complete('sim/strong', Request.of('2+2?', sim_context=SimContext(reference='4')))\n"
        "    HttpPool()\n"
        "asyncio.run(go())\n"
        "print('aiohttp' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
