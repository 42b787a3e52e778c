"""``evalkit verify``: all ok on a fresh run; one flipped byte in any bound file is a named MISMATCH, exit 1.

The forgeries (re-hashed and re-signed edits, fabricated and cut trajectories, swapped cells, poisoned caches) are
in test_pit_receipt_forgery.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from evalkit.pit import RunConfig, verify_pit_receipt

RELEASE_FILES = ("release.json", "arms/main.jsonl", "arms/redacted.jsonl", "arms/shifted.jsonl", "answer_key.jsonl")


@pytest.fixture(scope="module")
def fresh_run(synth_release_dir, synth_prices_path, tmp_path_factory):
    """A copy of the release and the prices, a config file, and one CLI run over them (module-scoped)."""
    import os

    from evalkit.pit import load_prices, run, stub_agent

    base = tmp_path_factory.mktemp("pit-verify")
    release = base / "release"
    shutil.copytree(synth_release_dir, release)
    prices = base / "prices.csv"
    shutil.copyfile(synth_prices_path, prices)
    cfg = RunConfig(bundle_path=str(release), forms=("8-K",), start="2023-03-01", end="2023-03-10",
                    prices_path=str(prices), price_source="synthetic", trajectory_path=str(base / "t.jsonl"),
                    receipt_path=str(base / "r.json"), probe_items=3)
    cfg.dump(base / "run.json")
    old = Path.cwd()
    os.chdir(base)
    try:
        run(stub_agent, cfg, None, load_prices(prices, source="synthetic"))
    finally:
        os.chdir(old)
    return {"base": base, "release": release, "prices": prices, "config": base / "run.json",
            "receipt": base / "r.json", "trajectory": base / "t.jsonl"}


def _verify_args(fr) -> list[str]:
    return ["verify", str(fr["receipt"]), "--trajectory", str(fr["trajectory"]), "--bundle", str(fr["release"]),
            "--config", str(fr["config"]), "--prices", str(fr["prices"])]


CLOSING = re.compile(r"run_valid (true|false) protocol_complete (true|false)")


def _closing(out: str) -> tuple[bool, bool]:
    """The closing line, which every PIT verify prints last: (run_valid, protocol_complete)."""
    m = CLOSING.fullmatch(out.splitlines()[-1])
    assert m, out
    return m[1] == "true", m[2] == "true"


def _lines(out: str) -> dict[str, str]:
    got = {}
    _closing(out)
    for line in out.splitlines()[:-1]:
        if line.startswith("not checked: "):
            got[line.removeprefix("not checked: ").split(" (")[0]] = "not checked"
            continue
        status, name = line.split()[:2]
        got[name] = status
    return got


ALL_CHECKS = (
    "signature",
    "schema",
    "body_sha256",
    "trajectory_sha256",
    "bundle_content_digest",
    "mask_secret_sha256",
    "config_sha256",
    "config_file",
    "prices_sha256",
    "calendar_sha256",
    "harness_source_sha256",
    "replay",
)
# The checks that compare one bound file each: a flipped byte in one file must leave the others ok.
FILE_CHECKS = ("trajectory_sha256", "bundle_content_digest", "config_file", "prices_sha256")


def test_fresh_run_verifies_ok(fresh_run, cli):
    code, out, err = cli(*_verify_args(fresh_run))
    assert (code, err) == (0, "")
    assert _lines(out) == dict.fromkeys(ALL_CHECKS, "ok")
    assert _closing(out) == (True, False)  # valid; P1 and P2 undeclared
    # each binding's line shows the digest the receipt binds
    doc = json.loads(fresh_run["receipt"].read_text())
    bound = {"body_sha256": doc["body_sha256"], **doc["body"]["binding"]}
    shown = {ln.split()[1]: ln.split()[2] for ln in out.splitlines() if ln.split()[1] in bound}
    assert shown == {k: v for k, v in bound.items() if v is not None}
    checks = verify_pit_receipt(fresh_run["receipt"], trajectory=fresh_run["trajectory"], bundle=fresh_run["release"],
                                config=fresh_run["config"], prices=fresh_run["prices"])
    assert [c.name for c in checks] == list(ALL_CHECKS)
    assert all(c.ok for c in checks)


def test_verify_without_optional_files_says_what_it_did_not_check(fresh_run, cli):
    code, out, _ = cli("verify", fresh_run["receipt"], "--trajectory", fresh_run["trajectory"], "--bundle",
                       fresh_run["release"])
    assert code == 0, out
    got = _lines(out)
    assert got.pop("prices") == "not checked"
    assert "not checked: prices (pass --prices FILE" in out
    assert "returns not recomputed" in out
    assert got == {k: "ok" for k in ALL_CHECKS if k not in {"config_file", "prices_sha256"}}


def test_trajectory_defaults_to_the_recorded_path(fresh_run, cli):
    import os

    old = Path.cwd()
    os.chdir(fresh_run["base"])  # the run recorded an absolute path; any working directory will do
    try:
        code, out, _ = cli("verify", fresh_run["receipt"], "--bundle", fresh_run["release"], "--prices", fresh_run["prices"])
    finally:
        os.chdir(old)
    assert code == 0, out
    assert _lines(out)["replay"] == "ok"


def _value_position(data: bytes, start: int = 0) -> int:
    """A byte inside a hex/decimal run (a digest or a number), so the flip keeps the file well-formed."""
    for i in range(max(start, len(data) // 2), len(data)):
        if data[i : i + 1] in b"0123456789abcdef" and data[i - 1 : i] in b"0123456789abcdef":
            return i
    raise AssertionError("no value byte found")


def _flip_value(data: bytes, pos: int) -> bytes:
    b = bytearray(data)
    c = chr(b[pos])
    b[pos] = ord("1" if c == "0" else "0")
    return bytes(b)


def _targets(fr) -> list[tuple[str, Path, str]]:
    out = [
        ("receipt body", fr["receipt"], "body_sha256"),
        ("trajectory", fr["trajectory"], "trajectory_sha256"),
        ("config", fr["config"], "config_file"),
        ("prices", fr["prices"], "prices_sha256"),
    ]
    out += [(rel, fr["release"] / rel, "bundle_content_digest") for rel in RELEASE_FILES]
    return out


TARGET_NAMES = ["receipt body", "trajectory", "config", "prices", *RELEASE_FILES]


@pytest.mark.parametrize("target", TARGET_NAMES)
def test_one_flipped_value_byte_is_a_named_mismatch(fresh_run, cli, target):
    name, path, check = next(t for t in _targets(fresh_run) if t[0] == target)
    pristine = path.read_bytes()
    if name == "receipt body":
        pos = pristine.index(b'"run_id":"run-') + len(b'"run_id":"run-') + 3
    elif name == "config":
        pos = pristine.index(b'"hold_sessions": ') + len(b'"hold_sessions": ')
    else:
        pos = _value_position(pristine)
    path.write_bytes(_flip_value(pristine, pos))
    try:
        code, out, _ = cli(*_verify_args(fresh_run))
    finally:
        path.write_bytes(pristine)
    assert code == 1
    got = _lines(out)
    assert got[check] == "MISMATCH", out
    assert _closing(out)[0] is False  # whatever the body says, a receipt that does not check out is not valid
    assert {k for k in FILE_CHECKS if got.get(k) == "MISMATCH"} == {check} & set(FILE_CHECKS), out
    mismatched = {k for k, v in got.items() if v == "MISMATCH"}
    if name == "receipt body":
        # the run id no longer matches the signature, the hash, nor what the replay derives from config + release
        assert mismatched == {"signature", "body_sha256", "run_id"}, out
    elif name == "config":
        assert mismatched == {"config_file"}, out  # the replay uses the recorded config: nothing else moves
    elif name == "prices":
        # the replay recomputes returns from the file given, so the returns it changed are named as well
        assert mismatched - {"prices_sha256"} <= {k for k in mismatched if k.startswith(("cells[", "contamination."))}
    elif check == "bundle_content_digest":
        assert mismatched == {"bundle_content_digest"}, out
        assert got["replay"] == "not checked"  # no replay over a release that does not match its digests
        if name != "release.json":
            assert name in out  # the release file that changed is named


@pytest.mark.parametrize("target", TARGET_NAMES)
@pytest.mark.parametrize("where", ["first", "last-but-one", "middle"])
def test_any_flipped_byte_is_caught_as_a_mismatch(fresh_run, cli, target, where):
    """Flipping a structural byte (a brace, a quote) must be caught too: MISMATCH naming the check, exit 1."""
    _name, path, check = next(t for t in _targets(fresh_run) if t[0] == target)
    pristine = path.read_bytes()
    pos = {"first": 0, "last-but-one": len(pristine) - 2, "middle": len(pristine) // 2}[where]
    b = bytearray(pristine)
    b[pos] ^= 0x01
    path.write_bytes(bytes(b))
    try:
        code, out, err = cli(*_verify_args(fresh_run))
    finally:
        path.write_bytes(pristine)
    assert code == 1, (code, out, err)
    # In the receipt, a byte of the body fails its hash; a byte of the envelope (dsse, signer) its signature.
    named = ("body_sha256", "signature") if check == "body_sha256" else (check,)
    assert any(_lines(out).get(c) == "MISMATCH" for c in named), (out, err)


def test_missing_trajectory_is_a_mismatch(fresh_run, cli, tmp_path):
    args = _verify_args(fresh_run)
    args[args.index("--trajectory") + 1] = str(tmp_path / "gone.jsonl")
    code, out, _ = cli(*args)
    assert code == 1
    assert _lines(out)["trajectory_sha256"] == "MISMATCH"
    assert "not found" in out


def test_a_different_release_is_a_mismatch(fresh_run, cli, hand_release_dir):
    args = _verify_args(fresh_run)
    args[args.index("--bundle") + 1] = str(hand_release_dir)
    code, out, _ = cli(*args)
    assert code == 1
    assert _lines(out)["bundle_content_digest"] == "MISMATCH"


def test_moved_inputs_still_verify(fresh_run, cli, tmp_path):
    """Inputs are bound by content, not location: a copied release, price file and config still verify."""
    rel = tmp_path / "elsewhere"
    shutil.copytree(fresh_run["release"], rel)
    cfg = json.loads(fresh_run["config"].read_text())
    cfg["bundle_path"] = str(rel)
    cfg["receipt_path"] = "x.json"
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    shutil.copyfile(fresh_run["prices"], tmp_path / "p.csv")
    code, out, _ = cli("verify", fresh_run["receipt"], "--trajectory", fresh_run["trajectory"], "--bundle", rel,
                       "--config", tmp_path / "run.json", "--prices", tmp_path / "p.csv")
    assert code == 0, out
    assert set(_lines(out).values()) == {"ok"}


def test_edited_receipt_body_with_rehash_still_fails_on_bindings(fresh_run, cli, tmp_path):
    """Editing the body and recomputing body_sha256 passes the body check but not the signature, nor the
    trajectory binding."""
    from evalkit_core import make_receipt, write_receipt

    receipt = json.loads(fresh_run["receipt"].read_text())
    body = receipt["body"]
    body["binding"]["trajectory_sha256"] = "sha256:" + "0" * 64
    forged = tmp_path / "forged.json"
    write_receipt(forged, {**receipt, **make_receipt(body)})  # the old signature kept
    code, out, _ = cli("verify", forged, "--trajectory", fresh_run["trajectory"], "--bundle", fresh_run["release"])
    assert code == 1
    got = _lines(out)
    assert got["body_sha256"] == "ok"
    assert got["signature"] == "MISMATCH"
    assert "the body changed after signing" in out
    assert got["trajectory_sha256"] == "MISMATCH"


def test_verify_without_bundle_is_a_user_error(fresh_run, cli):
    code, out, err = cli("verify", fresh_run["receipt"], "--trajectory", fresh_run["trajectory"])
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert "--bundle" in err
