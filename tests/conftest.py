"""Shared test configuration: the hypothesis profile, an isolated evalkit home/cache, and a no-network guard.

- Hypothesis: profile ``ci`` (deterministic, no deadline, modest example counts, no example database so
  nothing is written to the working directory) is loaded unless ``HYPOTHESIS_PROFILE`` names another
  (``dev`` runs more examples).
- ``EVALKIT_CACHE_DIR`` and ``EVALKIT_HOME`` point into one per-session temp directory, set in ``os.environ``
  so subprocesses inherit them: no test writes to the home directory or the working directory.
- Any connection (or datagram) to a non-loopback INET/INET6 address fails the test that made it. Loopback stays
  open because later tests run local fake servers.
- What the machine lacks (``tests/machine.py``): a test marked ``@pytest.mark.needs(...)`` skips with one reason
  naming what to install. ``EVALKIT_TEST_BARE=1`` hides the system components from the tests and tells evalkit
  (here and in every subprocess) to run without bubblewrap and libseccomp; ``EVALKIT_REQUIRE_WALL=1`` fails, instead
  of skipping, every test that would skip for a missing layer of the wall.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# tests/strategies.py is imported as ``strategies`` whatever pytest's import mode is.
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

import machine  # noqa: E402  # pyright: ignore[reportImplicitRelativeImport]

if machine.BARE:
    # before any test module is imported: evalkit's walls, here and in every subprocess, leave these layers out
    os.environ["EVALKIT_WALL_WITHOUT"] = "bwrap,seccomp"

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, database=None, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Hugging Face libraries (datasets, in the export tests) read these when first imported: never reach the hub.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

# The suite starts some hundreds of Python subprocesses (the CLI, jailed agents, verify workers). Where the caller's
# environment says PYTHONDONTWRITEBYTECODE (some CI images and containers do), every one of them would compile
# pandas, polars' wrappers and evalkit from source again: about 3 s more per `evalkit run`, twice the README's
# test command in all. The subprocesses cache bytecode as on an ordinary machine instead; this process keeps the
# caller's setting (sys.dont_write_bytecode is read at start), and a read-only tree simply gets no cache.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


# --- what the machine gives -------------------------------------------------------------------------------

# words of a skip reason that mean a layer of the wall is missing (the full leg may not skip those)
_WALL_WORDS = re.compile(r"bubblewrap|bwrap|seccomp|full wall|needs? root", re.IGNORECASE)


# fixtures that start a cluster of their own: a test that uses one is an integration test (deselected by the
# README's `uv run pytest`; run by `uv run pytest -m integration` and by CI's full leg)
_INTEGRATION_FIXTURES = frozenset({"pg_cluster", "ray_cluster"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``integration`` every test that starts a PostgreSQL or Ray cluster (through a fixture, or the
    ``postgres`` case of ``store_location``), before ``-m`` selects."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if _INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())) or params.get("store_location") == "postgres":
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs(...)`` skips (or, for the wall under EVALKIT_REQUIRE_WALL=1, fails) before any of its
    fixtures is set up where the machine lacks one of them."""
    for mark in item.iter_markers("needs"):
        machine.need(*mark.args)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Under EVALKIT_REQUIRE_WALL=1, any skip whose reason names a layer of the wall (however the test skipped:
    marker, ``pytest.skip``, ``skipif``) is a failure."""
    report: pytest.TestReport = yield
    if machine.REQUIRE_WALL and report.skipped and isinstance(report.longrepr, tuple):
        why = str(report.longrepr[2])
        if _WALL_WORDS.search(why):
            report.outcome = "failed"
            report.longrepr = f"EVALKIT_REQUIRE_WALL=1: a test of the wall skipped ({why})"
    return report


# --- isolated evalkit home and cache -------------------------------------------------------------------------

_ENV_VARS = ("EVALKIT_CACHE_DIR", "EVALKIT_HOME")


@pytest.fixture(scope="session", autouse=True)
def evalkit_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Point evalkit's cache and home at a per-session temp directory (inherited by subprocesses)."""
    base = tmp_path_factory.mktemp("evalkit-session")
    dirs = {"EVALKIT_CACHE_DIR": base / "cache", "EVALKIT_HOME": base / "home"}
    saved = {k: os.environ.get(k) for k in (*_ENV_VARS, "EVALKIT_STORE")}
    os.environ.pop("EVALKIT_STORE", None)  # the default store unless a test asks for another
    for k, p in dirs.items():
        p.mkdir()
        os.environ[k] = str(p)
    try:
        yield dirs
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


# --- the store on both dialects ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """A throwaway PostgreSQL cluster (``tests/pg_cluster.py``), started on first use and stopped at the end of
    the session; skips with the reason where the binaries or psycopg are absent."""
    from pg_cluster import Cluster, find_bin

    machine.need("postgres", "psycopg")
    bindir = find_bin()
    assert bindir is not None
    cluster = Cluster(bindir).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where a store lives, once per dialect: a SQLite file in ``tmp_path``, or a fresh database in the
    session's throwaway PostgreSQL cluster (a ``postgresql://`` URL on a Unix socket whose search_path is a fresh
schema)."""
    if request.param == "sqlite":
        yield str(tmp_path / "store" / "evalkit.sqlite3")
        return
    cluster = request.getfixturevalue("pg_cluster")
    url = cluster.create_schema()
    try:
        yield url
    finally:
        cluster.drop_schema(url)


@pytest.fixture
def any_store(store_location: str) -> Iterator[Any]:
    """An open store on each dialect (see ``store_location``)."""
    from evalkit_core.store import Store

    with Store(store_location if store_location.startswith("postgresql://") else Path(store_location)) as s:
        yield s


# --- no network --------------------------------------------------------------------------------------------


class NetworkAccessError(OSError):
    """Raised by the test guard when a test reaches for a non-loopback address."""


_INET = (socket.AF_INET, socket.AF_INET6)


def _is_loopback_host(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip("[]").split("%", 1)[0].lower()
    if name in {"localhost", "localhost.", "ip6-localhost"} or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _address_host(address: Any) -> object:
    if isinstance(address, tuple) and address:
        return address[0]
    return address


@pytest.fixture(scope="module", autouse=True)
def collect_leaked_anyio_streams() -> Iterator[None]:
    """After each module, collect the anyio memory streams its libraries (inspect_ai, httpx) dropped unclosed, with
    that one ResourceWarning ignored. Left to the garbage collector, such a stream warns from ``__del__`` in
    whatever test happens to run then, which pytest (warnings are errors here) fails as that test's own: once,
    the extraction test after the Inspect ones. Every other warning stays an error."""
    yield
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Unclosed <MemoryObject(Send|Receive)Stream", category=ResourceWarning)
        gc.collect()


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Fail any test that opens an INET/INET6 connection to a non-loopback address.

    The attempt raises :class:`NetworkAccessError` where it happens *and* is recorded, so a test whose code
    swallows the error still fails at teardown.
    """
    attempts: list[str] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_sendto = socket.socket.sendto
    real_create_connection = socket.create_connection

    def refuse(what: str, address: object) -> None:
        msg = f"{request.node.nodeid}: {what} to non-loopback address {address!r} (tests must not use the network)"
        attempts.append(msg)
        raise NetworkAccessError(msg)

    def guard(sock: socket.socket, what: str, address: object) -> None:
        if sock.family in _INET and not _is_loopback_host(_address_host(address)):
            refuse(what, address)

    def connect(self: socket.socket, address: Any) -> None:
        guard(self, "connect", address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        guard(self, "connect_ex", address)
        return real_connect_ex(self, address)

    def sendto(self: socket.socket, *args: Any) -> int:
        guard(self, "sendto", args[-1])
        return real_sendto(self, *args)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        # Checked before name resolution, so no DNS query leaves the machine either.
        if not _is_loopback_host(_address_host(address)):
            refuse("create_connection", address)
        return real_create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket.socket, "sendto", sendto)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    yield attempts
    if attempts:
        pytest.fail("network access attempted:\n" + "\n".join(attempts), pytrace=False)


# --- Ray ----------------------------------------------------------------------------------------------------

RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",  # never report usage to the Ray project
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",  # workers run in this venv, not under `uv run`
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # single-machine mode: every Ray process listens on 127.0.0.1
    "RAY_agent_register_timeout_ms": "120000",  # a loaded 2-core machine starts the node agents slowly
    "RAY_raylet_start_wait_time_s": "120",
}
RAY_OBJECT_STORE = 100 * 1024 * 1024


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A local Ray cluster of two nodes (two raylets on this machine, one CPU each, 100 MB object stores, no
    dashboard, on 127.0.0.1), joined by this process; shut down at the end of the session. Skips where Ray is
    not installed (the extra evalkit-harness[ray]; CI syncs every extra)."""
    machine.need("ray")
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV)  # before Ray is imported: some of it is read at import
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": RAY_OBJECT_STORE, "include_dashboard": False}
    cluster: Any = None
    # Ray gives a starting raylet a fixed 30 s to register, which a loaded 2-core machine can miss (its node
    # agents are Python processes with heavy imports): a start that timed out is torn down and tried again.
    for attempt in range(3):
        cluster = Cluster()
        try:
            cluster.add_node(**node)
            cluster.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
            cluster.wait_for_nodes()
            break
        except Exception as exc:
            cluster.shutdown()
            if attempt == 2 or "timed out during startup" not in str(exc):
                raise
    try:
        ray.init(address=cluster.address, namespace="evalkit", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
