"""Receipt envelope, atomic writes and binding checks."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math

import pytest
from hypothesis import given

from evalkit_core import (
    Binding,
    CanonicalError,
    ReceiptError,
    atomic_open,
    atomic_write_bytes,
    atomic_write_text,
    canonical_bytes,
    check_bindings,
    check_receipt,
    digest,
    make_receipt,
    read_receipt,
    write_receipt,
)
from strategies import json_values

T0 = dt.datetime(2023, 3, 13, 13, 30, tzinfo=dt.UTC)
BODY = {
    "run": {
        "release": "sha256:" + "0" * 64,
        "cells": [{"arm": "main", "clock": "pit", "return": 0.0123456789}],
    }
}


def test_make_receipt_shape_and_hash() -> None:
    r = make_receipt(BODY, emitted_at=T0)
    assert set(r) == {"body", "body_sha256", "emitted_at"}
    assert r["body"] == BODY
    assert r["body_sha256"] == digest(BODY)
    assert r["body_sha256"] == "sha256:" + hashlib.sha256(canonical_bytes(BODY)).hexdigest()
    assert r["emitted_at"] == "2023-03-13T13:30:00Z"
    assert check_receipt(r)


def test_emitted_at_is_rendered_in_utc() -> None:
    ny = dt.timezone(dt.timedelta(hours=-4))
    r = make_receipt({}, emitted_at=dt.datetime(2023, 3, 13, 9, 30, tzinfo=ny))
    assert r["emitted_at"] == "2023-03-13T13:30:00Z"


def test_default_emitted_at_is_now_utc() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    r = make_receipt(BODY)
    when = dt.datetime.fromisoformat(r["emitted_at"].replace("Z", "+00:00"))
    assert r["emitted_at"].endswith("Z")
    assert before <= when <= dt.datetime.now(dt.UTC)


def test_body_hash_ignores_emitted_at(tmp_path) -> None:
    a = make_receipt(BODY, emitted_at=T0)
    b = make_receipt(BODY, emitted_at=T0 + dt.timedelta(days=400))
    assert a["body_sha256"] == b["body_sha256"]
    assert a["emitted_at"] != b["emitted_at"]
    write_receipt(tmp_path / "a.json", a)
    write_receipt(tmp_path / "b.json", b)
    ra, rb = read_receipt(tmp_path / "a.json"), read_receipt(tmp_path / "b.json")
    assert canonical_bytes(ra["body"]) == canonical_bytes(rb["body"])
    # ... and changing emitted_at in the file does not break the check
    doc = json.loads((tmp_path / "a.json").read_bytes())
    doc["emitted_at"] = "1999-01-01T00:00:00Z"
    (tmp_path / "a.json").write_text(json.dumps(doc))
    assert check_receipt(read_receipt(tmp_path / "a.json"))


def test_write_read_round_trip_bytes(tmp_path) -> None:
    r = make_receipt(BODY, emitted_at=T0)
    p = tmp_path / "out" / "receipt.json"  # parent is created
    write_receipt(p, r)
    raw = p.read_bytes()
    assert raw.endswith(b"}\n")
    assert raw == canonical_bytes(r) + b"\n"
    back = read_receipt(p)
    assert check_receipt(back)
    assert back["body_sha256"] == r["body_sha256"]
    # the float in the body was normalised on write, and the hash (taken on the normalised body) still holds
    assert back["body"]["run"]["cells"][0]["return"] == 0.012346
    write_receipt(tmp_path / "again.json", back)
    assert (tmp_path / "again.json").read_bytes() == raw


@given(json_values)
def test_round_trip_property(body: object) -> None:
    import tempfile
    from pathlib import Path

    r = make_receipt({"v": body}, emitted_at=T0)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.json"
        write_receipt(p, r)
        back = read_receipt(p)
    assert check_receipt(back)
    assert back["body_sha256"] == r["body_sha256"]


def test_check_receipt_detects_a_changed_body(tmp_path) -> None:
    r = make_receipt(BODY, emitted_at=T0)
    write_receipt(tmp_path / "r.json", r)
    text = (tmp_path / "r.json").read_text().replace('"main"', '"shifted"')
    (tmp_path / "r.json").write_text(text)
    back = read_receipt(tmp_path / "r.json")
    assert back["body"]["run"]["cells"][0]["arm"] == "shifted"
    assert not check_receipt(back)


def test_check_receipt_detects_a_changed_hash() -> None:
    r = make_receipt(BODY, emitted_at=T0)
    r["body_sha256"] = "sha256:" + "f" * 64
    assert not check_receipt(r)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"body_sha256": "sha256:x", "emitted_at": "x"}', "'body'"),
        (b'{"body": [], "body_sha256": "sha256:x", "emitted_at": "x"}', "'body'"),
        (b'{"body": {}, "emitted_at": "x"}', "'body_sha256'"),
        (b'{"body": {}, "body_sha256": "sha256:x"}', "'emitted_at'"),
    ],
)
def test_read_receipt_rejects_bad_files_naming_them(tmp_path, content: bytes, needle: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(ReceiptError) as exc:
        read_receipt(p)
    assert str(p) in str(exc.value)
    assert needle in str(exc.value)


def test_read_missing_receipt(tmp_path) -> None:
    with pytest.raises(ReceiptError, match="not found") as exc:
        read_receipt(tmp_path / "absent.json")
    assert "absent.json" in str(exc.value)


# --- atomic writes ----------------------------------------------------------------------------------------------


def _listing(path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_atomic_write_leaves_no_temp_files(tmp_path) -> None:
    atomic_write_bytes(tmp_path / "a.bin", b"one")
    atomic_write_text(tmp_path / "b.txt", "z\u00e9")
    atomic_write_bytes(tmp_path / "a.bin", b"two")
    assert _listing(tmp_path) == ["a.bin", "b.txt"]
    assert (tmp_path / "a.bin").read_bytes() == b"two"
    assert (tmp_path / "b.txt").read_bytes() == "z\u00e9".encode()


def test_failed_receipt_write_keeps_old_file(tmp_path) -> None:
    p = tmp_path / "receipt.json"
    good = make_receipt(BODY, emitted_at=T0)
    write_receipt(p, good)
    before = p.read_bytes()
    bad = dict(good, body={"x": math.nan})
    with pytest.raises(CanonicalError):
        write_receipt(p, bad)
    assert p.read_bytes() == before
    assert _listing(tmp_path) == ["receipt.json"]


def test_failure_inside_atomic_open_keeps_old_file_and_removes_temp(tmp_path) -> None:
    p = tmp_path / "data.jsonl"
    p.write_bytes(b"old\n")

    def write() -> None:
        with atomic_open(p) as f:
            f.write(b"partial line\n")
            f.write(canonical_bytes({"bad": math.inf}))

    with pytest.raises(CanonicalError):
        write()
    assert p.read_bytes() == b"old\n"
    assert _listing(tmp_path) == ["data.jsonl"]


def test_keyboard_interrupt_inside_atomic_open_cleans_up(tmp_path) -> None:
    p = tmp_path / "data.bin"

    def write() -> None:
        with atomic_open(p) as f:
            f.write(b"x")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write()
    assert not p.exists()
    assert _listing(tmp_path) == []


def test_atomic_open_success_replaces(tmp_path) -> None:
    p = tmp_path / "sub" / "data.bin"
    with atomic_open(p) as f:
        f.write(b"hello")
        assert not p.exists()  # nothing visible until the block ends
    assert p.read_bytes() == b"hello"
    assert _listing(p.parent) == ["data.bin"]


# --- bindings --------------------------------------------------------------------------------------------------


def test_check_bindings_names_each_mismatch_and_missing_file(tmp_path) -> None:
    (tmp_path / "traj.jsonl").write_bytes(b'{"e":1}\n')
    (tmp_path / "config.json").write_bytes(b"{}")
    (tmp_path / "release.json").write_bytes(b"{}")
    good = "sha256:" + hashlib.sha256(b'{"e":1}\n').hexdigest()
    wrong = "sha256:" + "a" * 64
    results = check_bindings(
        [
            Binding("trajectory", good, tmp_path / "traj.jsonl"),
            Binding("config", wrong, tmp_path / "config.json"),
            Binding("prices", good, tmp_path / "prices.csv"),
            Binding("release", wrong, str(tmp_path / "release.json")),
        ]
    )
    assert [r.name for r in results] == ["trajectory", "config", "prices", "release"]
    assert [r.ok for r in results] == [True, False, False, False]
    ok, cfg, prices, rel = results
    assert ok.actual == good
    assert ok.detail == ""
    assert cfg.expected == wrong
    assert cfg.actual == "sha256:" + hashlib.sha256(b"{}").hexdigest()
    assert "config.json" in cfg.detail
    assert wrong in cfg.detail
    assert cfg.actual in cfg.detail
    assert prices.actual is None
    assert "prices.csv" in prices.detail
    assert "cannot read" in prices.detail
    assert "release.json" in rel.detail


def test_check_bindings_empty() -> None:
    assert check_bindings([]) == []


def test_binding_converts_path(tmp_path) -> None:
    from pathlib import Path

    b = Binding("x", "sha256:" + "0" * 64, str(tmp_path))
    assert isinstance(b.path, Path)
