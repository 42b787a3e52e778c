"""Store failures after open are one line naming the file and the cause, exit 2: read-only, disk full, damaged,
newer schema. Whatever fails is rolled back whole."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from decimal import Decimal

import pytest

from evalkit_core.models import budget_status, set_budget_cap
from evalkit_core.store import STORE_FILE, Store, StoreError


def test_read_only_is_named_read_only_and_changes_nothing(tmp_path):
    with Store.open(tmp_path) as store:
        set_budget_cap(store, Decimal(1))
        store._db.execute("PRAGMA query_only = ON")  # what a read-only file or home looks like to SQLite
        with pytest.raises(StoreError, match="the store is read-only") as info:
            set_budget_cap(store, Decimal(2))
        assert str(tmp_path / STORE_FILE) in str(info.value)
        store._db.execute("PRAGMA query_only = OFF")
        assert budget_status(store).cap == 1


def test_disk_full_is_named_disk_full_and_rolls_back(tmp_path):
    with Store.open(tmp_path) as store:
        (pages,) = store._db.execute("PRAGMA page_count").fetchone()
        store._db.execute(f"PRAGMA max_page_count = {pages}")  # no room to grow: what a full disk does
        with pytest.raises(StoreError, match="the disk is full"), store.transaction() as db:
            db.execute("INSERT INTO registries VALUES ('d', ?, 'x')", ("x" * 200_000,))
        assert store._db.execute("SELECT count(*) FROM registries").fetchone()[0] == 0


def test_a_damaged_page_is_named_damaged(tmp_path):
    with Store.open(tmp_path) as store, store.transaction() as db:
        for i in range(200):
            db.execute("INSERT INTO registries VALUES (?, ?, 'x')", (f"d{i}", "y" * 500))
    path = tmp_path / STORE_FILE
    data = bytearray(path.read_bytes())
    page = 4096
    for p in range(2, len(data) // page):  # scribble over every page but the header and schema
        data[p * page : p * page + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with (
        pytest.raises(StoreError, match="damaged") as info,
        Store.open(tmp_path) as store,
        store.snapshot() as db,
    ):
        db.execute("SELECT count(*), sum(length(content)) FROM registries").fetchone()
    assert str(path) in str(info.value)


CLI = textwrap.dedent(
    """
    import sys
    import evalkit_core.store._store as m
    fault = sys.argv.pop(1)
    original = m.Store._migrate
    def migrate(self):
        original(self)
        if fault == "read-only":
            self._db.execute("PRAGMA query_only = ON")
    m.Store._migrate = migrate
    from evalkit_cli import main
    main()
    """
)


@pytest.mark.parametrize(
    ("fault", "args", "needle"),
    [
        ("read-only", ["budget", "set", "5"], "the store is read-only"),
        ("damaged", ["calls", "list"], "damaged"),
        ("newer", ["budget", "show"], "schema version 99 is newer"),
    ],
)
def test_the_cli_prints_one_line_naming_file_and_cause_and_exits_2(tmp_path, fault, args, needle):
    home = tmp_path / "home"
    with Store.open(home) as store, store.transaction() as db:
        for i in range(200):
            db.execute("INSERT INTO registries VALUES (?, ?, 'x')", (f"d{i}", "y" * 500))
    path = home / STORE_FILE
    if fault == "damaged":
        data = bytearray(path.read_bytes())
        for p in range(2, len(data) // 4096):
            data[p * 4096 : p * 4096 + 64] = b"\xff" * 64
        path.write_bytes(bytes(data))
    if fault == "newer":
        with Store.open(home) as store:
            store._db.execute("PRAGMA user_version = 99")
    env = {**os.environ, "EVALKIT_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-c", CLI, fault, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"error: {path}: ")
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


def test_a_read_only_directory_is_not_called_damaged(tmp_path):
    """Where permissions apply (not as root), a home whose directory cannot be written is named read-only."""
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions; the query_only tests above cover the message")
    home = tmp_path / "home"
    with Store.open(home) as store:
        set_budget_cap(store, Decimal(1))
    for f in home.iterdir():
        f.chmod(0o444)
    home.chmod(0o555)
    try:
        with pytest.raises(StoreError, match="read-only") as info, Store.open(home) as store:
            set_budget_cap(store, Decimal(2))
        assert "damaged" not in str(info.value)
    finally:
        home.chmod(0o755)
        for f in home.iterdir():
            f.chmod(0o644)
