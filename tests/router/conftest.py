"""Fixtures for campaign tests (the helpers live in ``campaign_support``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from campaign_support import FakeModelServer, start_server  # pyright: ignore[reportImplicitRelativeImport]


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeModelServer]:
    fake = FakeModelServer(latency=0.1)
    server, thread = start_server(fake)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
