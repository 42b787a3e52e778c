"""The trajectory on disk: plain JSONL or zstd frames, one digest over the canonical stream, both read everywhere.

A run whose trajectory path ends in ``.zst`` writes it compressed; readers tell the two apart by the first bytes.
The receipt's digest is the same for the two forms of one run (it covers the canonical JSONL stream), both verify,
a receipt from before the ``encoding`` field still verifies, and a damaged compressed file is a named MISMATCH in
``verify`` and one line with exit 2 in ``evalkit trajectory cat``, never a traceback.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.pit import (
    RunConfig,
    TrajectoryFileError,
    load_prices,
    run,
    stub_agent,
    trajectory_chunks,
    trajectory_digest,
    trajectory_lines,
    verify_pit_receipt,
)
from evalkit.pit import _trajfile as trajfile
from evalkit_core import Release, ensure_signing_key, make_receipt, read_receipt, write_receipt

RUN_START, RUN_END = "2023-03-01", "2023-03-10"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _sink_bytes(lines: list[bytes], encoding: str) -> tuple[bytes, str]:
    buf = io.BytesIO()
    sink = trajfile.TrajectorySink(buf, encoding)
    for line in lines:
        sink.write(line)
    sink.finish()
    assert sink.bytes == sum(map(len, lines))
    assert sink.stored_bytes == len(buf.getvalue())
    return buf.getvalue(), sink.digest


# Any bytes after the "{" every trajectory line starts with (a canonical JSON object): a plain stream that began
# with the zstd magic instead would be read as compressed, and the harness never writes one.
_LINE = st.binary(max_size=300).map(lambda b: b"{" + b.replace(b"\n", b" ") + b"\n")


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(_LINE, max_size=40), frame=st.integers(min_value=1, max_value=2000))
def test_round_trip_plain_and_compressed_in_any_frame_size(lines, frame, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trajfile, "FRAME_BYTES", frame)
        _round_trip(lines, frame, tmp_path_factory.mktemp("rt"))


def _round_trip(lines: list[bytes], frame: int, d: Path) -> None:
    stream = b"".join(lines)
    want = "sha256:" + hashlib.sha256(stream).hexdigest()
    for encoding in ("jsonl", "jsonl+zstd"):
        data, digest = _sink_bytes(lines, encoding)
        assert digest == want
        path = d / f"t-{encoding}"
        path.write_bytes(data)
        assert (data[:4] == ZSTD_MAGIC) == (encoding == "jsonl+zstd" and bool(stream))
        assert b"".join(trajectory_chunks(path)) == stream
        assert list(trajectory_lines(path)) == lines
        assert trajectory_digest(path) == want
    # a frame closes after the line that fills it: several frames when the lines before the last fill one
    if sum(map(len, lines[:-1])) >= frame:
        data, _ = _sink_bytes(lines, "jsonl+zstd")
        assert data.count(ZSTD_MAGIC) >= 2


def test_a_line_longer_than_a_read_and_a_last_line_without_newline(tmp_path, monkeypatch):
    monkeypatch.setattr(trajfile, "_CHUNK", 7)
    lines = [b"x" * 50 + b"\n", b"\n", b"short\n", b"y" * 23 + b"\n", b"no newline at the end"]
    for encoding in ("jsonl", "jsonl+zstd"):
        data, _ = _sink_bytes(lines, encoding)
        path = tmp_path / encoding
        path.write_bytes(data)
        assert list(trajectory_lines(path)) == lines


def test_readers_go_by_the_first_bytes_not_the_name(tmp_path):
    lines = [b'{"a":1}\n', b'{"b":2}\n']
    packed, _ = _sink_bytes(lines, "jsonl+zstd")
    (tmp_path / "compressed.jsonl").write_bytes(packed)  # compressed under a plain name
    (tmp_path / "plain.jsonl.zst").write_bytes(b"".join(lines))  # plain under a compressed name
    for name in ("compressed.jsonl", "plain.jsonl.zst"):
        assert list(trajectory_lines(tmp_path / name)) == lines
    assert trajfile.stored_encoding(tmp_path / "compressed.jsonl") == "jsonl+zstd"
    assert trajfile.stored_encoding(tmp_path / "plain.jsonl.zst") == "jsonl"
    assert trajfile.encoding_for("a/t.jsonl.zst") == "jsonl+zstd"
    assert trajfile.encoding_for("a/t.zst.jsonl") == "jsonl"


def _damaged(packed: bytes) -> dict[str, bytes]:
    flipped = bytearray(packed)
    flipped[len(packed) // 2] ^= 0xFF
    return {
        "truncated": packed[: len(packed) - 7],
        "cut_in_half": packed[: len(packed) // 2],
        "magic_only": ZSTD_MAGIC,
        "magic_and_a_byte": ZSTD_MAGIC + b"\x00",
        "garbage_after": packed + b"not a frame",
        "second_frame_cut": packed + packed[:20],
        "flipped": bytes(flipped),
    }


def test_a_damaged_compressed_stream_is_a_named_error(tmp_path):
    lines = [json.dumps({"seq": i, "pad": "abc" * (i % 50)}).encode() + b"\n" for i in range(3000)]
    packed, _ = _sink_bytes(lines, "jsonl+zstd")
    for name, data in _damaged(packed).items():
        path = tmp_path / f"{name}.zst"
        path.write_bytes(data)
        if name == "flipped":  # zstd may or may not notice a flipped byte; the digest always does
            try:
                got = trajectory_digest(path)
            except TrajectoryFileError as exc:
                got = str(exc)
                assert got.startswith(str(path))
            assert got != trajectory_digest_of(lines)
            continue
        with pytest.raises(TrajectoryFileError, match=r"not a readable zstd trajectory") as caught:
            trajectory_digest(path)
        assert str(caught.value).startswith(str(path)), name
        assert "\n" not in str(caught.value)
    with pytest.raises(TrajectoryFileError, match="cannot read the trajectory"):
        trajectory_digest(tmp_path / "absent.zst")
    with pytest.raises(TrajectoryFileError, match="cannot read the trajectory"):
        list(trajectory_lines(tmp_path))


def trajectory_digest_of(lines: list[bytes]) -> str:
    return "sha256:" + hashlib.sha256(b"".join(lines)).hexdigest()


# --- real runs ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def both_forms(synth_release_dir, synth_prices_path, tmp_path_factory) -> dict[str, Any]:
    """One configuration run twice from one directory: its trajectory plain, then compressed."""
    base = tmp_path_factory.mktemp("pit-traj-forms")
    release = base / "release"
    shutil.copytree(synth_release_dir, release)
    prices = base / "prices.csv"
    shutil.copyfile(synth_prices_path, prices)
    out: dict[str, Any] = {"base": base, "release": release, "prices": prices}
    old = Path.cwd()
    try:
        for form, name in (("plain", "t.jsonl"), ("zst", "t.jsonl.zst"), ("zst2", "t.jsonl.zst")):
            where = base / form  # the second compressed run: the same configuration from another directory
            where.mkdir()
            os.chdir(where)
            cfg = RunConfig(bundle_path=str(release), forms=("8-K", "10-Q"), start=RUN_START, end=RUN_END,
                            prices_path=str(prices), price_source="synthetic", trajectory_path=name,
                            receipt_path="receipt.json", probe_items=3, mask_decoys=False)  # the window's sessions only
            result = run(stub_agent, cfg, Release.load(release), load_prices(prices, source="synthetic"))
            out[form] = {"trajectory": where / name, "receipt": where / "receipt.json", "result": result}
    finally:
        os.chdir(old)
    return out


def _verify(fr: dict[str, Any], receipt: Path, trajectory: Path) -> list[Any]:
    return verify_pit_receipt(receipt, trajectory=trajectory, bundle=fr["release"], prices=fr["prices"])


def _bad(checks: list[Any]) -> list[str]:
    return [f"{c.name}: {c.detail}" for c in checks if c.status == "MISMATCH"]


def test_the_two_forms_bind_one_digest_and_differ_only_in_how_they_are_stored(both_forms):
    plain, zst = both_forms["plain"], both_forms["zst"]
    pb, zb = plain["result"].body, zst["result"].body
    assert zst["trajectory"].read_bytes()[:4] == ZSTD_MAGIC
    assert plain["trajectory"].read_bytes()[:1] == b"{"
    stream = plain["trajectory"].read_bytes()
    want = "sha256:" + hashlib.sha256(stream).hexdigest()
    assert pb["binding"]["trajectory_sha256"] == zb["binding"]["trajectory_sha256"] == want
    assert pb["trajectory"]["sha256"] == zb["trajectory"]["sha256"] == want
    assert b"".join(trajectory_chunks(zst["trajectory"])) == stream
    assert pb["trajectory"]["encoding"] == "jsonl"
    assert zb["trajectory"]["encoding"] == "jsonl+zstd"
    assert pb["trajectory"]["events"] == zb["trajectory"]["events"] == stream.count(b"\n")
    # Everything else in the bodies is the same run.
    strip = ("trajectory",)
    assert {k: v for k, v in pb.items() if k not in strip} == {k: v for k, v in zb.items() if k not in strip}
    # The size: the stub's tool answers compress well (the bench's figure is for the full window).
    assert zst["trajectory"].stat().st_size * 5 < len(stream)


def test_an_independent_reader_recomputes_the_digest(both_forms):
    zst = both_forms["zst"]
    want = zst["result"].body["binding"]["trajectory_sha256"]
    zstd = shutil.which("zstd")
    if zstd is not None:  # the reference tool, when the machine has it
        out = subprocess.run([zstd, "-dc", str(zst["trajectory"])], capture_output=True, check=True).stdout
    else:  # pyarrow's whole-stream reader, not the harness's
        import pyarrow as pa

        with pa.input_stream(str(zst["trajectory"]), compression="zstd") as fh:
            out = fh.read()
    assert "sha256:" + hashlib.sha256(out).hexdigest() == want


def test_a_compressed_run_is_deterministic(both_forms):
    one, two = both_forms["zst"], both_forms["zst2"]
    assert one["trajectory"].read_bytes() != b""
    assert one["trajectory"].read_bytes() == two["trajectory"].read_bytes()
    r1, r2 = read_receipt(one["receipt"]), read_receipt(two["receipt"])
    assert r1["body"] == r2["body"]
    assert {k for k in r1 if r1[k] != r2[k]} <= {"emitted_at"}


def test_both_forms_verify_and_each_receipt_takes_either_form(both_forms):
    plain, zst = both_forms["plain"], both_forms["zst"]
    for receipt in (plain["receipt"], zst["receipt"]):
        for traj in (plain["trajectory"], zst["trajectory"]):
            checks = _verify(both_forms, receipt, traj)
            assert _bad(checks) == [], (receipt, traj)
            replay = next(c for c in checks if c.name == "replay")
            assert replay.status == "ok"
            assert "tool answers re-served" in replay.detail


def test_an_old_receipt_without_the_encoding_field_still_verifies(both_forms, tmp_path):
    plain = both_forms["plain"]
    receipt = read_receipt(plain["receipt"])
    body = json.loads(json.dumps(receipt["body"]))
    del body["trajectory"]["encoding"]  # what every receipt before the field held
    old = tmp_path / "old-receipt.json"
    write_receipt(old, make_receipt(body, key=ensure_signing_key()[0]))
    checks = _verify(both_forms, old, plain["trajectory"])
    assert _bad(checks) == []
    assert next(c for c in checks if c.name == "schema").ok
    # and its plain trajectory may now be stored compressed: the digest is over the same stream
    assert _bad(_verify(both_forms, old, both_forms["zst"]["trajectory"])) == []


def test_an_encoding_the_schema_does_not_know_is_a_mismatch(both_forms, tmp_path):
    receipt = read_receipt(both_forms["zst"]["receipt"])
    body = json.loads(json.dumps(receipt["body"]))
    body["trajectory"]["encoding"] = "gzip"
    forged = tmp_path / "r.json"
    write_receipt(forged, make_receipt(body, key=ensure_signing_key()[0]))
    bad = _bad(_verify(both_forms, forged, both_forms["zst"]["trajectory"]))
    assert any(b.startswith("schema:") and "encoding" in b for b in bad), bad


def test_a_damaged_compressed_trajectory_is_invalid_in_verify_not_a_traceback(both_forms, tmp_path):
    zst = both_forms["zst"]
    packed = zst["trajectory"].read_bytes()
    for name, data in _damaged(packed).items():
        path = tmp_path / f"{name}.jsonl.zst"
        path.write_bytes(data)
        checks = _verify(both_forms, zst["receipt"], path)
        bad = _bad(checks)
        assert any(b.startswith("trajectory_sha256:") for b in bad), (name, bad)
        if name != "flipped":
            assert any("not a readable zstd trajectory" in b for b in bad), (name, bad)
            replay = next(c for c in checks if c.name == "replay")
            assert replay.status == "not checked"


def test_a_replay_of_a_stream_that_fails_midway_names_it(both_forms, tmp_path):
    """The digest check reads the file first; the replay too must say so when the stream breaks (a file that
    changes between the two reads, or a caller of replay_body)."""
    from evalkit.pit._verify import replay_body

    zst = both_forms["zst"]
    packed = zst["trajectory"].read_bytes()
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(packed[: len(packed) // 2])
    body = read_receipt(zst["receipt"])["body"]
    replayed = replay_body(body, path, both_forms["release"], both_forms["prices"])
    assert replayed.body is None
    assert replayed.error is not None and "not a readable zstd trajectory" in replayed.error


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-c", "from evalkit_cli import main; main()", *args],
                          capture_output=True, check=False)


def test_trajectory_cat_writes_the_canonical_stream_of_either_form(both_forms):
    plain, zst = both_forms["plain"], both_forms["zst"]
    stream = plain["trajectory"].read_bytes()
    for path in (plain["trajectory"], zst["trajectory"]):
        done = _cli("trajectory", "cat", str(path))
        assert done.returncode == 0, done.stderr
        assert done.stdout == stream
        assert done.stderr == b""


def test_trajectory_cat_of_a_damaged_file_is_one_line_exit_2_and_nothing_on_stdout(both_forms, tmp_path):
    packed = both_forms["zst"]["trajectory"].read_bytes()
    cases = {**_damaged(packed)}
    cases.pop("flipped")  # zstd may not notice it (verify's digest does)
    for name, data in cases.items():
        path = tmp_path / f"{name}.zst"
        path.write_bytes(data)
        done = _cli("trajectory", "cat", str(path))
        err = done.stderr.decode()
        assert done.returncode == 2, (name, err)
        assert done.stdout == b"", name
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert str(path) in err and "not a readable zstd trajectory" in err, err


def test_the_report_and_browser_read_both_forms_alike(both_forms):
    from evalkit_cli._report_pit import trajectory_cells

    plain, zst = both_forms["plain"], both_forms["zst"]
    cells = trajectory_cells(plain["trajectory"])
    assert cells == trajectory_cells(zst["trajectory"])
    assert len(cells) >= 9
    assert sum(len(c["sessions"]) for c in cells if c["arm"] != "probe") == 9 * plain["result"].body["window"]["sessions"]


def test_verify_reads_the_trajectory_once_and_line_by_line(both_forms, monkeypatch):
    """The replay hashes the stream as it walks it: one read of the file, never the whole of it at once."""
    opened: list[Path] = []
    largest: list[int] = [0]
    real = trajfile.trajectory_chunks

    def counting(path: str | Path):
        opened.append(Path(path))
        for chunk in real(path):
            largest[0] = max(largest[0], len(chunk))
            yield chunk

    monkeypatch.setattr(trajfile, "trajectory_chunks", counting)
    monkeypatch.setattr(trajfile, "_CHUNK", 4096)
    zst = both_forms["zst"]
    checks = _verify(both_forms, zst["receipt"], zst["trajectory"])
    assert _bad(checks) == []
    assert next(c for c in checks if c.name == "trajectory_sha256").ok
    assert opened == [zst["trajectory"]]
    stream_bytes = len(b"".join(real(zst["trajectory"])))
    assert 0 < largest[0] <= 4096 < stream_bytes


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    others=st.dictionaries(st.text(max_size=6), _JSON, max_size=4),
    result=st.dictionaries(st.text(max_size=6), _JSON, max_size=4),
    kind=st.sampled_from(["tool_call", "decision", "tool_call"]),
)
def test_the_readers_one_pass_encoding_is_canonical_bytes(others, result, kind):
    """verify checks a tool call's line and keeps its result's bytes in one encoding: the same bytes as
    canonical_bytes, whatever the keys (a non-ASCII or escaped key falls back to canonical_bytes)."""
    from evalkit.pit._verify_replay import encode_event
    from evalkit_core import canonical_bytes

    event = {**others, "type": kind, "result": result}
    line, kept = encode_event(event)
    assert line == canonical_bytes(event)
    if kept is not None:
        assert kind == "tool_call"
        assert kept == canonical_bytes(result)


def test_a_forged_tool_answer_in_a_compressed_trajectory_is_caught_by_the_replay(both_forms, tmp_path):
    from evalkit.pit._verify import replay_body
    from evalkit_core import canonical_bytes

    zst = both_forms["zst"]
    lines = list(trajectory_lines(zst["trajectory"]))
    n = next(i for i, raw in enumerate(lines) if b'"type":"tool_call"' in raw and b'"rows":[{' in raw)
    event = json.loads(lines[n])
    event["result"]["rows"][0]["title"] = "a title the release never served"
    lines[n] = canonical_bytes(event) + b"\n"
    forged = tmp_path / "forged.jsonl.zst"
    forged.write_bytes(_sink_bytes(lines, "jsonl+zstd")[0])
    body = read_receipt(zst["receipt"])["body"]
    replayed = replay_body(body, forged, both_forms["release"], both_forms["prices"])
    assert any(p.startswith(f"line {n + 1}: the answer to ") and "not what the release serves" in p
               for p in replayed.problems), replayed.problems
    bad = _bad(_verify(both_forms, zst["receipt"], forged))
    assert any(b.startswith("trajectory_sha256:") for b in bad)
    assert any(b.startswith("trajectory: line ") for b in bad)


def test_the_report_finds_a_compressed_trajectory_beside_its_receipt(both_forms, tmp_path):
    from evalkit_cli._report_pit import pit_model

    zst = both_forms["zst"]
    shutil.copyfile(zst["receipt"], tmp_path / "receipt.json")
    shutil.copyfile(zst["trajectory"], tmp_path / "trajectory.jsonl.zst")
    model = pit_model(tmp_path / "receipt.json", trajectory=None, bundle=both_forms["release"],
                      prices=both_forms["prices"], home=None)
    assert model["source"]["trajectory"] == str(tmp_path / "trajectory.jsonl.zst")
    found = json.dumps(model, default=str)
    assert '"name": "trajectory_sha256", "status": "ok"' in found


@pytest.mark.parametrize("shape", ["one-long-line", "long-last-line", "long-line-in-small-reads"])
def test_a_line_past_the_readers_cap_is_refused_before_it_is_held(tmp_path, monkeypatch, shape):
    """A few KB of zstd can hold gigabytes without a newline: the reader refuses a line past ``max_line`` as a
    named error instead of holding it whole; lines within the cap read as before."""
    if shape == "long-line-in-small-reads":
        monkeypatch.setattr(trajfile, "_CHUNK", 7)
    long = b"{" + b"x" * 5000 + (b"\n" if shape != "long-last-line" else b"")
    lines = [b'{"a":1}\n', long] if shape != "one-long-line" else [long]
    for encoding in ("jsonl", "jsonl+zstd"):
        data, _ = _sink_bytes(lines, encoding)
        path = tmp_path / f"{shape}-{encoding}"
        path.write_bytes(data)
        assert list(trajectory_lines(path, max_line=len(long))) == lines
        seen: list[bytes] = []
        with pytest.raises(TrajectoryFileError, match=r"a line longer than 1000 bytes"):
            seen.extend(trajectory_lines(path, max_line=1000))
        assert all(len(line) <= 1000 for line in seen)


def test_a_decompression_bomb_in_verify_is_a_named_failure_within_the_receipts_bound(both_forms, tmp_path):
    """The compressed trajectory's first lines, then 64 MiB of one line without a newline (about 6 KB of zstd):
    against a receipt whose cells were bounded at 1 MiB, the replay refuses the line at that bound (plus slack)
    and says why; it never holds the 64 MiB, and nothing raises."""
    import pyarrow as pa

    from evalkit.pit._verify import replay_body

    zst = both_forms["zst"]
    head = b"".join(list(trajectory_lines(zst["trajectory"]))[:3])
    bomb = pa.compress(head, codec="zstd", asbytes=True) + pa.compress(b"{" + b"x" * (64 << 20), codec="zstd", asbytes=True)
    assert len(bomb) < 100_000
    path = tmp_path / "bomb.jsonl.zst"
    path.write_bytes(bomb)
    body = copy.deepcopy(read_receipt(zst["receipt"])["body"])
    body["bounds"]["trajectory_cell_bytes"] = 1 << 20
    replayed = replay_body(body, path, both_forms["release"], both_forms["prices"])
    assert replayed.body is None
    assert replayed.error is not None and f"a line longer than {(1 << 20) + (1 << 20)} bytes" in replayed.error
    # The signed receipt, with its own (default, 256 MiB) bound: the 64 MiB line is read, is not JSON, and the
    # file is a mismatch of its own, never a traceback.
    bad = _bad(_verify(both_forms, zst["receipt"], path))
    assert any(b.startswith("trajectory_sha256:") for b in bad), bad
    assert any("not JSON" in b for b in bad), bad


def test_the_report_and_browser_bound_lines_by_the_receipt_and_name_a_bad_line(both_forms, tmp_path):
    """`evalkit report` and `evalkit view` read a trajectory someone handed over: a zstd bomb of one 64 MiB line
    against a receipt whose cells were bounded at 1 MiB is one named error (never held whole), as is a line that
    is not a JSON object; the well-formed trajectory reads as before."""
    import pyarrow as pa

    from evalkit_cli._report_common import ReportError
    from evalkit_cli._report_pit import pit_model, trajectory_cells
    from evalkit_cli._view_server import _line_bound

    zst = both_forms["zst"]
    head = b"".join(list(trajectory_lines(zst["trajectory"]))[:3])
    bomb = pa.compress(head, codec="zstd", asbytes=True) + pa.compress(b"{" + b"x" * (64 << 20), codec="zstd", asbytes=True)
    receipt = read_receipt(zst["receipt"])
    receipt["body"]["bounds"]["trajectory_cell_bytes"] = 1 << 20
    (tmp_path / "receipt.json").write_text(json.dumps(receipt))
    (tmp_path / "trajectory.jsonl.zst").write_bytes(bomb)
    cap = (1 << 20) + (1 << 20)
    assert _line_bound({"source": {"receipt": str(tmp_path / "receipt.json")}}) == cap
    with pytest.raises(ReportError, match=f"a line longer than {cap} bytes"):
        pit_model(tmp_path / "receipt.json", trajectory=None, bundle=None, prices=None, home=None)
    with pytest.raises(ReportError, match=f"a line longer than {cap} bytes"):
        trajectory_cells(tmp_path / "trajectory.jsonl.zst", cap)
    # without a receipt at hand: the default cell bound, plus slack
    assert _line_bound({"source": {"receipt": str(tmp_path / "absent.json")}}) == (256 << 20) + (1 << 20)
    for bad, why in ((b'{"type": "cell_start"\n', "line 4 is not a JSON event"), (b"[1, 2]\n", "line 4 is not a JSON object"),
                     (b'{"a": "\xff"}\n', "line 4 is not a JSON event")):
        path = tmp_path / "bad.jsonl"
        path.write_bytes(head + bad)
        with pytest.raises(ReportError, match=why):
            trajectory_cells(path)
    assert trajectory_cells(zst["trajectory"], _line_bound({"source": {"receipt": str(zst["receipt"])}}))
