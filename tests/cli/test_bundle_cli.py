"""`evalkit bundle demo|synth|info|check` through the real entry point (exit codes included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def evalkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalkit_cli", *args], capture_output=True, text=True, check=False, cwd=cwd, env=os.environ.copy()
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "release"
    proc = evalkit("bundle", "demo", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_help_lists_the_command_groups() -> None:
    proc = evalkit("--help")
    assert proc.returncode == 0
    for group in ("bundle", "run", "verify", "export"):
        assert group in proc.stdout


def test_demo_is_deterministic(demo: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert evalkit("bundle", "demo", "--out", str(again)).returncode == 0
    for rel in ("release.json", "arms/main.jsonl", "arms/redacted.jsonl", "arms/shifted.jsonl", "answer_key.jsonl", "prices.synthetic.csv"):
        assert (demo / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_synth_same_seed_same_digest_other_seed_other_digest(tmp_path: Path) -> None:
    digests = []
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        proc = evalkit("bundle", "synth", "--rows", "500", "--start", "2023-01-03", "--end", "2023-02-28", "--seed", seed, "--out", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
        digests.append(json.loads((tmp_path / name / "release.json").read_text())["content_digest"])
    assert digests[0] == digests[1] != digests[2]
    rows = (tmp_path / "a" / "arms" / "main.jsonl").read_text().splitlines()
    assert len(rows) == 500


def test_info_reports_window_forms_coverage_and_digest(demo: Path) -> None:
    proc = evalkit("bundle", "info", str(demo), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    manifest = json.loads((demo / "release.json").read_text())
    assert info["content_digest"] == manifest["content_digest"]
    assert info["window"] == {"start": "2023-01-03", "end": "2023-03-31"}
    assert info["rows"] == 2400 == sum(info["forms"].values())
    # Form 4 is the most common form, as on EDGAR; a minority of rows carry acceptance_at.
    assert max(info["forms"], key=info["forms"].get) == "4"
    assert 0.2 < info["acceptance_coverage"]["share"] < 0.5


def test_check_ok_then_each_flipped_file_is_named(demo: Path, tmp_path: Path) -> None:
    import shutil

    assert evalkit("bundle", "check", str(demo)).returncode == 0
    for rel in ("arms/main.jsonl", "arms/shifted.jsonl", "answer_key.jsonl", "prices.synthetic.csv"):
        copy = tmp_path / rel.replace("/", "_")
        shutil.copytree(demo, copy)
        target = copy / rel
        data = bytearray(target.read_bytes())
        data[10] ^= 0x01
        target.write_bytes(bytes(data))
        proc = evalkit("bundle", "check", str(copy))
        assert proc.returncode == 2, rel
        assert rel.split("/")[-1] in proc.stderr
        assert proc.stderr.count("\n") >= 2  # the MISMATCH line and the one-line error


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("missing_file", "answer_key.jsonl: missing"),
        ("bad_json_line", "line 3"),
        ("no_manifest", "release.json: missing"),
    ],
)
def test_info_on_a_broken_release_is_one_line_and_exit_2(demo: Path, tmp_path: Path, breakage: str, expected: str) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(demo, broken)
    if breakage == "missing_file":
        (broken / "answer_key.jsonl").unlink()
    elif breakage == "no_manifest":
        (broken / "release.json").unlink()
    else:
        lines = (broken / "arms" / "main.jsonl").read_text().splitlines(keepends=True)
        lines[2] = lines[2][:-5] + "\n"
        (broken / "arms" / "main.jsonl").write_text("".join(lines))
        # keep the digests consistent so that the parser, not the digest check, meets the bad line
        import hashlib

        manifest = json.loads((broken / "release.json").read_text())
        manifest["files"]["arms/main.jsonl"] = "sha256:" + hashlib.sha256((broken / "arms" / "main.jsonl").read_bytes()).hexdigest()
        from evalkit_core import digest

        manifest["content_digest"] = digest({k: v for k, v in manifest.items() if k != "content_digest"})
        (broken / "release.json").write_text(json.dumps(manifest))
    proc = evalkit("bundle", "info", str(broken))
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_synth_refuses_a_non_empty_out_dir(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("precious")
    proc = evalkit("bundle", "synth", "--rows", "10", "--start", "2023-01-03", "--end", "2023-01-31", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "not empty" in proc.stderr
    assert (tmp_path / "keep.txt").read_text() == "precious"


def test_info_and_check_say_the_format_and_bind_the_secret_by_digest_only(demo: Path, tmp_path: Path) -> None:
    info = json.loads(evalkit("bundle", "info", str(demo), "--json").stdout)
    masks = json.loads((demo / "answer_key.masks.json").read_text())
    assert info["format"] == "evalkit-release/3"
    assert info["masks"]["shift_scheme"] == "secret-offset"
    assert info["masks"]["mask_secret_sha256"].startswith("sha256:")
    text = evalkit("bundle", "info", str(demo)).stdout
    assert masks["shift"]["secret"] not in text
    assert "mask secret sha256:" in text
    check = evalkit("bundle", "check", str(demo), "--json")
    assert check.returncode == 0
    assert json.loads(check.stdout)["format"] == "evalkit-release/3"
    # The same demo in the old format: it loads and checks, and both commands say its shift is the public map.
    from evalkit_core._synth import write_demo_release

    old = write_demo_release(tmp_path / "old", release_format="evalkit-release/2")
    proc = evalkit("bundle", "check", str(old))
    assert proc.returncode == 0, proc.stderr
    assert "the shifted arm is the public ten-year map" in proc.stdout
    assert "public ten-year map" in evalkit("bundle", "info", str(old)).stdout
    assert json.loads(evalkit("bundle", "info", str(old), "--json").stdout)["masks"]["mask_secret_sha256"] is None


def test_synth_key_seed_changes_the_secret_and_not_the_filings(tmp_path: Path) -> None:
    base = ["bundle", "synth", "--rows", "50", "--start", "2023-01-03", "--end", "2023-01-31", "--seed", "4", "--json"]
    a = json.loads(evalkit(*base, "--out", str(tmp_path / "a")).stdout)
    b = json.loads(evalkit(*base, "--out", str(tmp_path / "b")).stdout)
    c = json.loads(evalkit(*base, "--key-seed", "private", "--out", str(tmp_path / "c")).stdout)
    assert a["mask_secret_sha256"] == b["mask_secret_sha256"] != c["mask_secret_sha256"]
    assert a["content_digest"] == b["content_digest"] != c["content_digest"]
    assert a["rows"] == c["rows"] == 50
