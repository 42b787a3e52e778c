"""Signing keys (0600, atomic, one per home) and DSSE-signed receipts: every forgery is named, nothing is trusted
that the reader did not choose to trust."""

from __future__ import annotations

import base64
import copy
import json
import stat
import threading

import pytest

from evalkit_core import (
    PAYLOAD_TYPE,
    SigningError,
    SigningKey,
    canonical_bytes,
    check_receipt,
    check_signature,
    dsse_pae,
    ensure_signing_key,
    generate_signing_key,
    load_signing_key,
    local_public_key,
    make_receipt,
    parse_trusted_key,
    read_receipt,
    signing_key_paths,
    write_receipt,
)

BODY = {"kind": "test", "numbers": [1, 2.5, None], "nested": {"b": "x", "a": True}}


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def test_generate_writes_a_0600_key_in_a_0700_directory(home):
    key = generate_signing_key(home)
    private, public = signing_key_paths(home)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert key.key_id.startswith("ed25519:") and len(key.key_id) == len("ed25519:") + 64
    assert load_signing_key(home).key_id == key.key_id
    assert local_public_key(home).key_id == key.key_id
    assert parse_trusted_key(str(public)) == key.key_id
    assert {p.name for p in private.parent.iterdir()} == {
        "ed25519.pem",
        "ed25519.pub.pem",
    }  # no temp files left


def test_generate_refuses_to_replace_unless_forced(home):
    first = generate_signing_key(home)
    with pytest.raises(SigningError, match="exists already"):
        generate_signing_key(home)
    assert load_signing_key(home).key_id == first.key_id
    second = generate_signing_key(home, force=True)
    assert second.key_id != first.key_id
    assert load_signing_key(home).key_id == second.key_id
    assert local_public_key(home).key_id == second.key_id


def test_ensure_creates_once_and_concurrent_callers_agree(home):
    ids: list[str] = []
    created: list[bool] = []

    def worker() -> None:
        key, made = ensure_signing_key(home)
        ids.append(key.key_id)
        created.append(made)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1
    assert created.count(True) == 1
    assert ensure_signing_key(home)[1] is False


def test_a_key_others_can_read_is_refused(home):
    generate_signing_key(home)
    private, _ = signing_key_paths(home)
    private.chmod(0o644)
    with pytest.raises(SigningError, match="0644"):
        load_signing_key(home)


@pytest.mark.parametrize(
    "content", [b"", b"not a key", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"]
)
def test_a_damaged_key_file_is_one_named_error(home, content):
    private, _ = signing_key_paths(home)
    private.parent.mkdir(parents=True)
    private.write_bytes(content)
    private.chmod(0o600)
    with pytest.raises(SigningError, match=str(private)):
        load_signing_key(home)


def _write_key(home, data: bytes):
    private, _ = signing_key_paths(home)
    private.parent.mkdir(parents=True, exist_ok=True)
    private.write_bytes(data)
    private.chmod(0o600)
    return private


@pytest.mark.parametrize("seed", [bytes(32), bytes(range(32)), b"\xff" * 32, bytes(range(100, 132))])
def test_the_key_file_reads_as_cryptography_reads_it(home, seed):
    """The form generate_signing_key writes is read by hand (no import of cryptography's serialization); the key
    is the one cryptography's own PEM reader finds, and other spellings of the same key take that reader."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.from_private_bytes(seed)
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    want = SigningKey.from_seed(seed)
    theirs = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(theirs, Ed25519PrivateKey)
    assert SigningKey(theirs).key_id == want.key_id
    line = pem.split(b"\n")[1]  # the base64 body (one line of 64 characters)
    for spelled in (
        pem,
        pem.replace(b"\n", b"\r\n"),  # CRLF
        b"\n\n" + pem + b"\n\n",  # blank lines around it
        pem.replace(line, line[:20] + b"\n" + line[20:]),  # the body on two lines
    ):
        _write_key(home, spelled)
        got = load_signing_key(home)
        assert got.key_id == want.key_id, spelled
        assert got.sign(b"x") == want.sign(b"x")


@pytest.mark.parametrize(
    "der_hex",
    [
        "302e020101300506032b657004220420" + "11" * 32,  # version 1 (not 0)
        "302e020100300506032b657104220420" + "11" * 32,  # id-Ed448's OID with a 32-byte key
        "302f020100300506032b65700423042000" + "11" * 32,  # a 33-byte inner string
        "302e020100300506032b657004220420" + "11" * 31,  # a byte short
    ],
)
def test_a_key_file_that_is_almost_the_form_is_not_read_by_hand(home, der_hex):
    """What differs from the exact form in any byte goes to cryptography's reader, which refuses these: one error
    naming the file, never a key made of the wrong bytes."""
    der = bytes.fromhex(der_hex)
    pem = b"-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(der) + b"\n-----END PRIVATE KEY-----\n"
    private = _write_key(home, pem)
    with pytest.raises(SigningError, match=str(private)):
        load_signing_key(home)


def test_missing_key_is_named(home):
    with pytest.raises(SigningError, match="evalkit keys generate"):
        load_signing_key(home)
    assert local_public_key(home) is None
    assert not home.exists()  # looking does not create anything


def test_pae_is_the_dsse_encoding():
    assert dsse_pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_signed_receipt_is_deterministic_and_verifies(home, tmp_path):
    key = generate_signing_key(home)
    a = make_receipt(BODY, key=key)
    b = make_receipt(BODY, key=key)
    assert a["dsse"] == b["dsse"] and a["signer"] == b["signer"]
    assert a["dsse"]["payloadType"] == PAYLOAD_TYPE
    assert base64.b64decode(a["dsse"]["payload"]) == canonical_bytes(BODY)
    write_receipt(tmp_path / "r.json", a)
    back = read_receipt(tmp_path / "r.json")
    assert check_receipt(back)
    result = check_signature(back, {key.key_id})
    assert (result.ok, result.key_id, result.detail) == (True, key.key_id, "")


def _resign(receipt, key):
    out = copy.deepcopy(receipt)
    out.update(make_receipt(out["body"], key=key))
    return out


FORGERIES = {
    "body edited, hash recomputed": lambda r, k: {
        **r,
        "body": {**r["body"], "numbers": [9]},
        "body_sha256": make_receipt({**r["body"], "numbers": [9]})["body_sha256"],
    },
    "payload edited": lambda r, k: {
        **r,
        "dsse": {**r["dsse"], "payload": base64.b64encode(canonical_bytes({**r["body"], "x": 1})).decode()},
    },
    "payload not base64": lambda r, k: {**r, "dsse": {**r["dsse"], "payload": "***"}},
    "wrong payload type": lambda r, k: {**r, "dsse": {**r["dsse"], "payloadType": "application/json"}},
    "signature bit flipped": lambda r, k: {
        **r,
        "dsse": {
            **r["dsse"],
            "signatures": [
                {
                    "keyid": r["dsse"]["signatures"][0]["keyid"],
                    "sig": base64.b64encode(
                        bytes([base64.b64decode(r["dsse"]["signatures"][0]["sig"])[0] ^ 1])
                        + base64.b64decode(r["dsse"]["signatures"][0]["sig"])[1:]
                    ).decode(),
                }
            ],
        },
    },
    "no signatures": lambda r, k: {**r, "dsse": {**r["dsse"], "signatures": []}},
    "signer key swapped, id kept": lambda r, k: {
        **r,
        "signer": {**r["signer"], "public_key": k.public.to_json()["public_key"]},
    },
    "signer id swapped, key kept": lambda r, k: {**r, "signer": {**r["signer"], "keyid": k.key_id}},
    "re-signed by another key": _resign,
    "unsigned": lambda r, k: {key: r[key] for key in ("body", "body_sha256", "emitted_at")},
    "signer not an object": lambda r, k: {**r, "signer": "ed25519:00"},
    "public key too short": lambda r, k: {
        **r,
        "signer": {**r["signer"], "public_key": base64.b64encode(b"x" * 31).decode()},
    },
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_every_forgery_fails_with_a_reason(home, name):
    key = generate_signing_key(home)
    other = SigningKey.from_seed(b"\x07" * 32)
    receipt = json.loads(json.dumps(make_receipt(BODY, key=key)))
    forged = json.loads(json.dumps(FORGERIES[name](receipt, other)))
    result = check_signature(forged, {key.key_id})
    assert not result.ok, name
    assert result.detail


def test_another_signer_is_trusted_only_when_named(home):
    generate_signing_key(home)
    other = SigningKey.from_seed(b"\x09" * 32)
    receipt = make_receipt(BODY, key=other)
    assert not check_signature(receipt, set()).ok
    assert "not a trusted key" in check_signature(receipt, {local_public_key(home).key_id}).detail
    assert check_signature(receipt, {other.key_id}).ok
    pub = home / "other.pub.pem"
    pub.write_bytes(other.public.pem())
    assert parse_trusted_key(str(pub)) == other.key_id
    assert parse_trusted_key(other.key_id) == other.key_id


@pytest.mark.parametrize(
    "spec", ["ed25519:xyz", "ed25519:" + "A" * 64, "rsa:" + "0" * 64, "/no/such/key.pem"]
)
def test_bad_key_specs_are_one_line_errors(spec):
    with pytest.raises(SigningError, match="--key"):
        parse_trusted_key(spec)


def test_unsigned_make_receipt_is_unchanged():
    r = make_receipt(BODY)
    assert set(r) == {"body", "body_sha256", "emitted_at"}
