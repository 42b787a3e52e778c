"""The public surface of evalkit_core is pinned: changing it must be a deliberate edit here.

Also holds the self-tests of the suite's own guards (tests/conftest.py), which have no package of their own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

import evalkit_core

EXPECTED_ALL = [
    "ANSWER_KEY_FILE",
    "ARMS",
    "ARM_FILES",
    "CALENDAR_SPAN",
    "CLOCKS",
    "MANIFEST_FILE",
    "MASKS_FILE",
    "PAYLOAD_TYPE",
    "RELEASE_FORMAT",
    "SHIFT_YEARS",
    "Binding",
    "BindingResult",
    "Calendar",
    "CanonicalError",
    "Clock",
    "ConfigError",
    "EvalkitError",
    "Filing",
    "KnownAt",
    "Masks",
    "PublicKey",
    "ReceiptError",
    "Release",
    "ReleaseError",
    "Session",
    "ShiftMap",
    "SignatureCheck",
    "SigningError",
    "SigningKey",
    "arm_rows",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "cache_dir",
    "canonical_bytes",
    "canonical_object",
    "canonical_string",
    "check_bindings",
    "check_output_path",
    "check_receipt",
    "check_release",
    "check_signature",
    "digest",
    "digest_bytes",
    "dsse_pae",
    "ensure_signing_key",
    "entry_session",
    "file_digest",
    "format_instant",
    "generate_signing_key",
    "is_sec_business_day",
    "known_at",
    "load_signing_key",
    "local_public_key",
    "make_receipt",
    "next_sec_business_day",
    "next_session_after",
    "normalize",
    "nyse",
    "parse_clock",
    "parse_instant",
    "parse_trusted_key",
    "read_json_object",
    "read_receipt",
    "row_key_for",
    "row_key_secret",
    "sec_business_days",
    "sessions",
    "sign_body",
    "signing_key_paths",
    "trusted_key_ids",
    "us_federal_holidays",
    "with_entry",
    "write_receipt",
    "write_release",
]


def _isort_key(name: str) -> tuple[int, str]:
    """ruff RUF022 order: SCREAMING_CASE, then CamelCase, then everything else, each case-sensitively sorted."""
    if name.isupper() or (name.upper() == name and "_" in name):
        return (0, name)
    if name[0].isupper():
        return (1, name)
    return (2, name)


def test_all_is_pinned() -> None:
    assert evalkit_core.__all__ == EXPECTED_ALL


def test_all_is_sorted_and_unique() -> None:
    assert sorted(EXPECTED_ALL, key=_isort_key) == EXPECTED_ALL
    assert len(set(EXPECTED_ALL)) == len(EXPECTED_ALL)


def test_every_public_name_resolves_to_evalkit_core() -> None:
    for name in EXPECTED_ALL:
        obj = getattr(evalkit_core, name)
        module = getattr(obj, "__module__", None)
        if module is not None and callable(obj):
            assert module.startswith("evalkit_core."), (name, module)


def test_no_public_name_is_left_out_of_all() -> None:
    """Every function, class or constant the package namespace holds from its private modules is exported."""
    import types

    stray = sorted(
        name
        for name, obj in vars(evalkit_core).items()
        if not name.startswith("_")
        and not isinstance(obj, types.ModuleType)
        and name not in evalkit_core.__all__
        and (getattr(obj, "__module__", "") or "").startswith("evalkit_core")
    )
    assert stray == []


def test_errors_share_one_base() -> None:
    for name in ("CanonicalError", "ConfigError", "ReceiptError", "ReleaseError"):
        assert issubclass(getattr(evalkit_core, name), evalkit_core.EvalkitError)


def test_import_is_light() -> None:
    """Importing evalkit_core must not import pandas-market-calendars (the CLI's --help stays fast)."""
    code = "import sys, evalkit_core; print('pandas_market_calendars' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the suite's own guards -----------------------------------------------------------------------------------


def test_evalkit_dirs_are_isolated(evalkit_dirs, tmp_path_factory) -> None:
    base = tmp_path_factory.getbasetemp()
    for var in ("EVALKIT_CACHE_DIR", "EVALKIT_HOME"):
        path = os.environ[var]
        assert path == str(evalkit_dirs[var])
        assert path.startswith(str(base))
    assert str(evalkit_core.cache_dir()) == os.environ["EVALKIT_CACHE_DIR"]
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['EVALKIT_CACHE_DIR'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == os.environ["EVALKIT_CACHE_DIR"]


def _with_socket(family: int, kind: int, call):
    def attempt() -> None:
        with socket.socket(family, kind) as s:
            call(s)

    return attempt


@pytest.mark.parametrize(
    "attempt",
    [
        lambda: socket.create_connection(("192.0.2.1", 80), timeout=0.01),
        lambda: socket.create_connection(("example.com", 443), timeout=0.01),
        _with_socket(socket.AF_INET, socket.SOCK_STREAM, lambda s: s.connect(("198.51.100.7", 80))),
        _with_socket(socket.AF_INET6, socket.SOCK_STREAM, lambda s: s.connect_ex(("2001:db8::1", 80, 0, 0))),
        _with_socket(socket.AF_INET, socket.SOCK_DGRAM, lambda s: s.sendto(b"x", ("203.0.113.9", 53))),
        _with_socket(socket.AF_INET, socket.SOCK_STREAM, lambda s: s.connect(("::ffff:8.8.8.8", 53))),
    ],
)
def test_network_guard_blocks_and_records(no_network, attempt) -> None:
    with pytest.raises(OSError, match="non-loopback") as exc:  # conftest's NetworkAccessError
        attempt()
    assert type(exc.value).__name__ == "NetworkAccessError"
    assert len(no_network) == 1
    no_network.clear()  # this test made the attempt on purpose; do not fail it at teardown


def test_network_guard_allows_loopback(no_network) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            got.append(conn.recv(16))

    t = threading.Thread(target=serve)
    t.start()
    with socket.create_connection(("localhost", port), timeout=5) as c:
        c.sendall(b"ping")
    t.join(5)
    srv.close()
    assert got == [b"ping"]
    assert no_network == []
    a, b = socket.socketpair(socket.AF_UNIX)
    a.sendall(b"unix")
    assert b.recv(4) == b"unix"
    a.close()
    b.close()
