"""The model layer's HTTP/1.1 client (``evalkit_core.models._http``): keep-alive, framing, limits, TLS and a
CONNECT proxy, against servers on 127.0.0.1 that these tests start and stop."""

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
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello", "bad content-length"),
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
    assert needle in str(err)
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
        with pytest.raises(HttpError) as info:
            await pool.post(
                "http://127.0.0.1:9/", b"{}", {"authorization": "Bearer a\r\nx-evil: 1"}, connect_timeout=1
            )
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
        with pytest.raises(HttpError) as info:
            await pool.post(f"http://127.0.0.1:{port}/", b"{}", {}, connect_timeout=1)
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
