"""``evalkit certify`` and ``evalkit verify CERT.json``: a DSSE-wrapped in-toto statement over a verified receipt.

The envelope is checked with securesystemslib's DSSE implementation as well as evalkit's own.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from evalkit.gates._certificate import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE
from evalkit.gates._gate import pit_field


@pytest.fixture(scope="module")
def run_dir(hand_release_dir, hand_prices_path, tmp_path_factory):
    from evalkit.pit import RunConfig, load_prices, run, stub_agent

    base = tmp_path_factory.mktemp("pit-cert")
    shutil.copytree(hand_release_dir, base / "release")
    shutil.copyfile(hand_prices_path, base / "prices.csv")
    cfg = RunConfig(bundle_path="release", forms=("8-K",), start="2023-03-01", end="2023-03-10", hold_sessions=2,
                    prices_path="prices.csv", price_source="hand-written test prices", model_version="stub-1",
                    training_cutoff="2023-02-15", trajectory_path="run/trajectory.jsonl",
                    receipt_path="run/receipt.json", probe_items=3)
    old = Path.cwd()
    os.chdir(base)
    try:
        run(stub_agent, cfg, None, load_prices("prices.csv", source="hand-written test prices"))
    finally:
        os.chdir(old)
    return base


@pytest.fixture
def work(run_dir, tmp_path):
    """A private copy of the run (tests edit files), as the working directory."""
    shutil.copytree(run_dir, tmp_path / "w")
    old = Path.cwd()
    os.chdir(tmp_path / "w")
    try:
        yield tmp_path / "w"
    finally:
        os.chdir(old)


ARGS = ["run/receipt.json", "--bundle", "release", "--prices", "prices.csv"]


def _statement(cert: Path) -> dict:
    env = json.loads(cert.read_text())
    return json.loads(base64.b64decode(env["payload"]))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_certificate_binds_the_files_and_carries_the_verdicts(work, cli):
    code, out, err = cli("certify", *ARGS, "--out", "cert.json")
    assert code == 0, err
    assert out.startswith("wrote cert.json: certificate for run/receipt.json, signed ed25519:")
    env = json.loads((work / "cert.json").read_text())
    assert env["payloadType"] == PAYLOAD_TYPE
    st = _statement(work / "cert.json")
    assert st["_type"] == STATEMENT_TYPE
    assert st["predicateType"] == PREDICATE_TYPE
    receipt = json.loads((work / "run/receipt.json").read_text())
    body = receipt["body"]
    release = json.loads((work / "release/release.json").read_text())
    assert st["subject"] == [
        {"name": "run/receipt.json", "digest": {"sha256": _sha(work / "run/receipt.json")}},
        {"name": "run/trajectory.jsonl", "digest": {"sha256": _sha(work / "run/trajectory.jsonl")}},
        {"name": "release:hand-built", "digest": {"sha256": release["content_digest"].removeprefix("sha256:")}},
        {"name": "prices.csv", "digest": {"sha256": _sha(work / "prices.csv")}},
    ]
    pred = st["predicate"]
    assert pred["certificate_version"] == 1
    assert pred["receipt"]["body_sha256"] == receipt["body_sha256"]
    assert pred["verification"]["replayed"] is True
    assert pred["verdicts"]["network_clean"] is True
    assert pred["verdicts"]["lookahead_trades_in_reachable_cells"] == 0
    assert {k: v["lookahead_trades"] for k, v in pred["lookahead"].items()} == {
        f"{c['arm']}/{c['clock']}": c["lookahead_trades"] for c in body["cells"]
    }
    assert pred["lookahead"]["main/leaky"]["lookahead_trades"] == 3
    assert pred["probe"]["verdict"] == body["probe"]["verdict"]
    assert [i["row_key"] for i in pred["probe"]["items"]] == [i["row_key"] for i in body["probe"]["items"]]
    assert "answer" not in pred["probe"]["items"][0]  # scores, not the agent's text
    assert pred["protocol"] == body["protocol"]
    assert pred["holdout"]["models"] == [{"model": "stub-1", "training_cutoff": "2023-02-15", "source": None, "post_cutoff": True}]
    assert set(pred["contamination"]) == set(body["contamination"])
    for clock, deltas in pred["contamination"].items():
        for name, d in deltas.items():
            assert d["value"] == body["contamination"][clock][name]
            assert d["interpretation"]
    # Same receipt, same key: the same bytes (nothing wall-clock inside).
    assert cli("certify", *ARGS, "--out", "again.json")[0] == 0
    assert (work / "again.json").read_bytes() == (work / "cert.json").read_bytes()


def test_a_standard_dsse_implementation_verifies_the_envelope(work, cli):
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    assert cli("certify", *ARGS, "--out", "cert.json")[0] == 0
    data = json.loads((work / "cert.json").read_text())
    certifier = _statement(work / "cert.json")["predicate"]["certifier"]
    raw = base64.b64decode(certifier["public_key"])
    key = SSlibKey(certifier["keyid"], "ed25519", "ed25519", {"public": raw.hex()})
    # from_dict converts the signatures it is given in place: hand it copies.
    assert set(Envelope.from_dict(copy.deepcopy(data)).verify([key], 1)) == {certifier["keyid"]}
    forged = dict(copy.deepcopy(data), payload=base64.b64encode(base64.b64decode(data["payload"]).replace(b"mask_holds", b"mask_leaks")).decode())
    with pytest.raises(VerificationError):
        Envelope.from_dict(forged).verify([key], 1)


def test_verify_certificate_rechecks_signature_receipt_and_replay(work, cli):
    assert cli("certify", *ARGS, "--out", "cert.json")[0] == 0
    code, out, err = cli("verify", "cert.json")
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("ok        certificate signature")
    assert any(ln.startswith("ok        receipt replay") for ln in lines)
    assert any(ln.startswith("ok        subject release:hand-built") for ln in lines)
    assert any(ln.startswith("probe       ") for ln in lines)
    assert any(ln.startswith("holdout     stub-1: post-cutoff") for ln in lines)
    # An edited statement (re-encoded, old signature) fails on the signature.
    data = json.loads((work / "cert.json").read_text())
    payload = base64.b64decode(data["payload"]).replace(b'"network_clean":true', b'"network_clean":false')
    (work / "forged.json").write_text(json.dumps(dict(data, payload=base64.b64encode(payload).decode())))
    code, out, _ = cli("verify", "forged.json")
    assert code == 1
    assert out.startswith("MISMATCH  certificate signature")
    # A trajectory edited after certification: the replay of the named receipt catches it.
    traj = work / "run/trajectory.jsonl"
    traj.write_bytes(traj.read_bytes().replace(b'"seq":0', b'"seq":0 ', 1))
    code, out, _ = cli("verify", "cert.json")
    assert code == 1
    assert "MISMATCH  receipt trajectory_sha256" in out


def test_verify_certificate_requires_a_trusted_certifier(work, cli):
    assert cli("certify", *ARGS, "--out", "cert.json")[0] == 0
    code, out, _ = cli("verify", "cert.json", "--key", "ed25519:" + "0" * 64)
    assert code == 1
    assert "not a trusted key" in out.splitlines()[0]


def test_a_receipt_that_does_not_verify_is_refused(work, cli):
    from evalkit_core import digest

    receipt = json.loads((work / "run/receipt.json").read_text())
    leaky = next(c for c in receipt["body"]["cells"] if c["lookahead_trades"])
    leaky["lookahead_trades"] = 0  # the leak hidden, the body re-hashed: the signature and the replay disagree
    receipt["body_sha256"] = digest(receipt["body"])
    (work / "run/receipt.json").write_text(json.dumps(receipt))
    code, out, err = cli("certify", *ARGS, "--out", "cert.json")
    assert code == 1
    assert out == ""
    assert err.startswith("refused: run/receipt.json does not verify: signature")
    assert len(err.strip().splitlines()) == 1
    assert not (work / "cert.json").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["certify", "run/receipt.json", "--bundle", "release", "--out", "c.json"], "--prices"),
        (["certify", "missing.json", "--bundle", "release", "--prices", "prices.csv", "--out", "c.json"], "missing.json"),
        (["certify", *ARGS], "--out"),
        (["certify", "run/receipt.json", "--prices", "prices.csv", "--out", "c.json"], "--bundle"),
        (["verify", "bad-cert.json"], "payload"),
    ],
)
def test_bad_input_exits_2_with_one_line(work, cli, args, needle):
    (work / "bad-cert.json").write_text(json.dumps({"payloadType": PAYLOAD_TYPE, "payload": "not base64!", "signatures": []}))
    code, out, err = cli(*args)
    assert code == 2, out + err
    assert needle in err
    assert not (work / "c.json").exists()


def test_json_prints_the_statement(work, cli):
    code, out, _ = cli("certify", *ARGS, "--out", "cert.json", "--json")
    assert code == 0
    assert json.loads(out) == _statement(work / "cert.json")


def test_verify_certificate_json(work, cli):
    assert cli("certify", *ARGS, "--out", "cert.json")[0] == 0
    code, out, _ = cli("verify", "cert.json", "--json")
    assert code == 0, out
    found = json.loads(out)
    assert (found["kind"], found["ok"], found["certificate"]) == ("certificate", True, "cert.json")
    assert found["statement"] == _statement(work / "cert.json")
    names = {c["name"]: c["status"] for c in found["checks"]}
    assert names["certificate signature"] == "ok"
    assert names["receipt replay"] == "ok"
    # a replay that now disagrees: the same object says so, with exit 1
    traj = work / "run/trajectory.jsonl"
    traj.write_bytes(traj.read_bytes().replace(b'"seq":0', b'"seq":0 ', 1))
    code, out, _ = cli("verify", "cert.json", "--json")
    assert code == 1
    found = json.loads(out)
    assert found["ok"] is False
    assert {"name": "receipt trajectory_sha256", "status": "MISMATCH"}.items() <= next(
        c for c in found["checks"] if c["name"] == "receipt trajectory_sha256"
    ).items()


def test_out_may_not_overwrite_an_input(work, cli):
    before = (work / "run/receipt.json").read_bytes()
    code, out, err = cli("certify", *ARGS, "--out", "run/receipt.json")
    assert (code, out) == (2, "")
    assert "--out" in err
    assert (work / "run/receipt.json").read_bytes() == before
    code, _, err = cli("gate", *ARGS, "--baseline", "run/receipt.json", "--write-baseline")
    assert code == 2 and "--baseline" in err
    assert (work / "run/receipt.json").read_bytes() == before


def test_a_compressed_trajectory_is_bound_by_its_own_bytes(work, cli):
    """A ``.zst`` trajectory: the receipt binds its canonical stream, the certificate's subject the file's own bytes
    (what an in-toto verifier hashes). The same stream compressed again (other frames, other bytes) still replays,
    but no longer matches the subject."""
    import pyarrow as pa

    from evalkit.pit import RunConfig, load_prices, run, stub_agent, trajectory_chunks, trajectory_digest

    cfg = RunConfig(bundle_path="release", forms=("8-K",), start="2023-03-01", end="2023-03-10", hold_sessions=2,
                    prices_path="prices.csv", price_source="hand-written test prices", model_version="stub-1",
                    training_cutoff="2023-02-15", trajectory_path="zrun/trajectory.jsonl.zst",
                    receipt_path="zrun/receipt.json", probe_items=3)
    run(stub_agent, cfg, None, load_prices("prices.csv", source="hand-written test prices"))
    zst = work / "zrun/trajectory.jsonl.zst"
    args = ["zrun/receipt.json", "--bundle", "release", "--prices", "prices.csv"]
    assert cli("certify", *args, "--out", "zcert.json")[0] == 0
    subjects = {s["name"]: s["digest"]["sha256"] for s in _statement(work / "zcert.json")["subject"]}
    body = json.loads((work / "zrun/receipt.json").read_text())["body"]
    assert subjects["zrun/trajectory.jsonl.zst"] == _sha(zst)
    bound = str(pit_field(body, "trajectory_digest"))
    assert bound.removeprefix("sha256:") == trajectory_digest(zst).removeprefix("sha256:") != _sha(zst)
    code, out, err = cli("verify", "zcert.json")
    assert code == 0, out + err
    assert "ok        subject zrun/trajectory.jsonl.zst" in out
    before = trajectory_digest(zst)
    stream = b"".join(trajectory_chunks(zst))
    zst.write_bytes(pa.compress(stream, codec="zstd", asbytes=True))  # one frame: other bytes, the same stream
    assert trajectory_digest(zst) == before
    assert _sha(zst) != subjects["zrun/trajectory.jsonl.zst"]
    code, out, _ = cli("verify", "zcert.json")
    assert code == 1
    assert "ok        receipt replay" in out
    assert "MISMATCH  subject zrun/trajectory.jsonl.zst" in out
