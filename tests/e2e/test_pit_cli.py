"""End to end, through real subprocesses: `evalkit run|verify|export` and the `pit-harness` alias.

Each command runs with its own EVALKIT_CACHE_DIR and working directory under tmp; nothing touches the network.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
CELL_LINE = re.compile(
    r"^(main|redacted|shifted)\s+(leaky|dump|pit)\s+total_return\s+(n/a|[+-]\d+\.\d\d%)\s+trades\s+(\d+)\s+.*reachable=(True|False)(?:\s+decoy_picks \d+)?$"
)


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update({"EVALKIT_CACHE_DIR": str(cache), "EVALKIT_HOME": str(cache.parent / "home"), **extra})
    return env


def _evalkit(*args: object, cwd: Path, env: dict[str, str], prog: str = "evalkit") -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "evalkit_cli", *map(str, args)] if prog == "evalkit" else [str(BIN / prog), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache per module, so the demo release is generated once for these tests."""
    return tmp_path_factory.mktemp("e2e-pit") / "cache"


def _check_table(stdout: str) -> dict[tuple[str, str], tuple[str, int, bool]]:
    cells = {}
    for line in stdout.splitlines():
        m = CELL_LINE.match(line)
        if m:
            cells[(m[1], m[2])] = (m[3], int(m[4]), m[5] == "True")
    assert set(cells) == {(a, c) for a in ("main", "redacted", "shifted") for c in ("leaky", "dump", "pit")}, stdout
    for (_, clock), (ret, trades, reachable) in cells.items():
        assert ret != "n/a"
        assert trades > 0
        assert reachable is (clock != "leaky")
    return cells


def _verify_command(stdout: str) -> list[str]:
    line = next(x for x in stdout.splitlines() if x.startswith("verify with "))
    return line.removeprefix("verify with ").split()[2:]  # drop "evalkit verify"


@pytest.mark.slow
@pytest.mark.parametrize("prog", ["evalkit", "pit-harness"])
def test_run_with_no_arguments_then_verify(prog, cache, tmp_path):
    env = _env(cache, EVALKIT_HOME=str(tmp_path / "fresh-home"))  # a machine that has never signed anything
    res = _evalkit("run", cwd=tmp_path, env=env, prog=prog)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    # The first run makes the signing key and says so in one line (stderr, so --json stays clean).
    assert re.fullmatch(r"key\s+generated ed25519:[0-9a-f]{64} in \S+/keys/ed25519\.pem \(first run; `evalkit keys show`\)\n", res.stderr)
    assert oct((tmp_path / "fresh-home/keys/ed25519.pem").stat().st_mode & 0o777) == "0o600"
    assert re.search(r"^signed\s+ed25519:[0-9a-f]{64}$", out, re.MULTILINE)
    assert re.search(r"^run\s+run-[0-9a-f]{16}\s+valid=True", out, re.MULTILINE)
    assert re.search(r"^receipt\s+out/pit/receipt\.json\s+body sha256:[0-9a-f]{64}", out, re.MULTILINE)
    assert re.search(r"^trajectory\s+out/pit/trajectory\.jsonl\s+sha256:[0-9a-f]{64}\s+\d+ events", out, re.MULTILINE)
    assert re.search(r"^probe\s+mask_holds", out, re.MULTILINE)
    # the quick start serves both masked arms (the default): the harness's decoders do not break them
    assert re.search(r"^run\s+run-[0-9a-f]{16}\s+valid=True  masks=hold$", out, re.MULTILINE)
    assert re.search(r"^decoders\s+none breaks the masks$", out, re.MULTILINE)
    assert re.search(r"^protocol\s+gaps: P1_model_version, P2_training_cutoffs", out, re.MULTILINE)
    _check_table(out)
    receipt = json.loads((tmp_path / "out/pit/receipt.json").read_text())
    assert receipt["body"]["valid"] is True
    assert receipt["body"]["prices"]["source"].startswith("SYNTHETIC")
    ver = _evalkit("verify", *_verify_command(out), cwd=tmp_path, env=env, prog=prog)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    lines = ver.stdout.splitlines()
    # The printed line checks everything: every binding, the signature, the schema and the replay, and
    # nothing is left "not checked".
    assert [ln.split()[:2] for ln in lines[:-1]] == [
        ["ok", name]
        for name in ("signature", "schema", "body_sha256", "trajectory_sha256", "bundle_content_digest", "mask_secret_sha256", "config_sha256",
                     "prices_sha256", "calendar_sha256", "harness_source_sha256", "replay")
    ], ver.stdout
    assert "the local key" in lines[0]
    # each bound digest is printed beside its check, and the closing line says what the run was
    bound = {"body_sha256": receipt["body_sha256"], **receipt["body"]["binding"]}
    for ln in lines[2:-2]:
        name, value = ln.split()[1:3]
        assert value == bound[name], ln
    assert lines[-1] == "run_valid true protocol_complete false"
    assert "returns not recomputed" not in ver.stdout
    again = _evalkit("run", cwd=tmp_path, env=env, prog=prog)  # the key exists now: nothing said about it
    assert again.returncode == 0 and again.stderr == "", again.stderr
    # Tamper with the trajectory: verify names it and exits 1.
    traj = tmp_path / "out/pit/trajectory.jsonl"
    data = bytearray(traj.read_bytes())
    data[len(data) // 2] ^= 0x01
    traj.write_bytes(bytes(data))
    bad = _evalkit("verify", *_verify_command(out), cwd=tmp_path, env=env, prog=prog)
    assert bad.returncode == 1
    assert "MISMATCH  trajectory_sha256" in bad.stdout
    assert bad.stdout.splitlines()[-1] == "run_valid false protocol_complete false"  # the body says valid; verify disagrees


@pytest.mark.slow
def test_run_json_prints_the_receipt_body(cache, tmp_path):
    res = _evalkit("run", "--json", "--receipt", "r.json", "--trajectory", "t.jsonl", cwd=tmp_path, env=_env(cache))
    assert res.returncode == 0, res.stderr
    body = json.loads(res.stdout)
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert body == on_disk["body"]
    assert body["trajectory"]["path"] == "t.jsonl"
    assert len(body["cells"]) == 9


# --- a small release of our own, for the error paths and agents --------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from evalkit_core._synth import synth_prices_csv, write_synth_release

    base = tmp_path_factory.mktemp("e2e-small")
    rel = write_synth_release(base / "release", rows=300, start=dt.date(2023, 3, 1), end=dt.date(2023, 3, 17), seed=5)
    prices = base / "prices.csv"
    prices.write_bytes(synth_prices_csv(["AAA", "BBB"], dt.date(2023, 3, 1), dt.date(2023, 3, 31), 5))
    agents = base / "agents"
    agents.mkdir()
    (agents / "e2e_pit_agents.py").write_text(
        textwrap.dedent(
            """
            import urllib.request

            def boom(prompt, tools):
                tools.pit_list(limit=3)
                raise RuntimeError("agent exploded")

            def nosy(prompt, tools):
                try:
                    urllib.request.urlopen("http://192.0.2.1/", timeout=1)
                except Exception:
                    pass
                return []

            def quiet(prompt, tools):
                return [r["row_key"] for r in tools.pit_list(limit=2)["rows"]]
            """
        )
    )
    return {"base": base, "release": rel, "prices": prices, "agents": agents}


def _write_config(path: Path, small: dict[str, Path], **fields: object) -> Path:
    cfg = {"bundle_path": str(small["release"]), "forms": ["8-K"], "start": "2023-03-01", "end": "2023-03-08",
           "probe_items": 2, **fields}
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"arms": ["main", "sideways"]}, "arms"),
        ({"clocks": ["sundial"]}, "clocks"),
        ({"forms": ["NOPE"]}, "NOPE"),
        ({"start": "2022-01-03", "end": "2022-01-10"}, "outside"),
        ({"hold_sessions": "five"}, "hold_sessions"),
        ({"probe_itmes": 3}, "probe_itmes"),
        ({"agent": "no_such_module_e2e:agent"}, "no_such_module_e2e"),
        ({"agent": "not-a-spec"}, "agent"),
        ({"prices_path": "PRICES_BAD", "price_source": "x"}, "missing column"),
        ({"prices_path": "PRICES_GONE", "price_source": "x"}, "not found"),
        ({"prices_path": "PRICES_OK"}, "price_source"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_receipt(fields, needle, small, cache, tmp_path):
    bad_prices = tmp_path / "bad.csv"
    bad_prices.write_text("ticker,day,close\nAAA,2023-03-01,1\n")
    subst = {"PRICES_BAD": str(bad_prices), "PRICES_GONE": str(tmp_path / "gone.csv"), "PRICES_OK": str(small["prices"])}
    fields = {k: subst.get(v, v) if isinstance(v, str) else v for k, v in fields.items()}
    cfg = _write_config(tmp_path / "run.json", small, **fields)
    res = _evalkit("run", "--config", cfg, cwd=tmp_path, env=_env(cache))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.startswith("error: "), res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert needle in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "receipt.json").exists()
    assert not (tmp_path / "trajectory.jsonl").exists()


def test_bad_cli_flags_exit_2(small, cache, tmp_path):
    res = _evalkit("run", "--agent", "stub", "--price-source", "x", cwd=tmp_path, env=_env(cache))
    assert res.returncode == 2
    assert "--prices" in res.stderr
    cfg = _write_config(tmp_path / "run.json", small)
    res = _evalkit("run", "--config", cfg, "--prices", tmp_path / "missing.csv", "--price-source", "v", cwd=tmp_path,
                   env=_env(cache))
    assert res.returncode == 2
    assert "not found" in res.stderr
    assert not (tmp_path / "receipt.json").exists()


def test_agent_that_raises_exits_non_zero_with_an_invalid_receipt(small, cache, tmp_path):
    cfg = _write_config(tmp_path / "run.json", small, agent="e2e_pit_agents:boom")
    env = _env(cache, PYTHONPATH=str(small["agents"]))
    res = _evalkit("run", "--config", cfg, cwd=tmp_path, env=env)
    assert res.returncode == 1, res.stderr
    assert "valid=False" in res.stdout
    assert "invalidated_by=agent_error" in res.stdout
    # why, in one line for the cell that failed
    failed = [line for line in res.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1
    assert re.fullmatch(r"FAILED    main/leaky \d{4}-\d\d-\d\d: agent raised RuntimeError: agent exploded", failed[0])
    assert "probe       not run (the run stopped before the probe)" in res.stdout
    body = json.loads((tmp_path / "receipt.json").read_text())["body"]
    assert body["valid"] is False
    assert body["agent_errors"][0]["message"] == "agent exploded"
    events = [json.loads(x) for x in (tmp_path / "trajectory.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events][-3:] == ["tool_call", "agent_error", "run_end"]
    # The invalid run still verifies: its receipt is honest about what happened.
    ver = _evalkit("verify", "receipt.json", "--trajectory", "trajectory.jsonl", "--bundle", small["release"],
                   "--config", cfg, cwd=tmp_path, env=env)
    assert ver.returncode == 0, ver.stdout
    assert "ok        replay" in ver.stdout
    assert ver.stdout.splitlines()[-1] == "run_valid false protocol_complete false"  # an honest receipt of an invalid run
    assert "not checked: agent code (module e2e_pit_agents sha256:" in ver.stdout


def test_agent_egress_through_the_cli_is_invalid(small, cache, tmp_path):
    cfg = _write_config(tmp_path / "run.json", small, agent="e2e_pit_agents:nosy")
    res = _evalkit("run", "--config", cfg, cwd=tmp_path, env=_env(cache, PYTHONPATH=str(small["agents"])))
    assert res.returncode == 1
    assert "invalidated_by=network_egress_attempt" in res.stdout
    assert "egress_attempts=1" in res.stdout
    failed = [line for line in res.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and ": agent blocked: " in failed[0] and "192.0.2.1" in failed[0], res.stdout
    body = json.loads((tmp_path / "receipt.json").read_text())["body"]
    assert body["network"]["attempts"][0]["call_site"].endswith("e2e_pit_agents.py:10")  # the urlopen line


def test_an_unknown_model_id_is_named_as_the_cause(small, cache, tmp_path):
    cfg = _write_config(tmp_path / "run.json", small, agent="model:nope/no-such-model")
    res = _evalkit("run", "--config", cfg, cwd=tmp_path, env=_env(cache))
    assert res.returncode == 1
    failed = [line for line in res.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1
    assert failed[0].endswith(": unknown model id 'nope/no-such-model' (`evalkit models list` shows the ids)")


def test_agent_flag_and_prices_flags_override_the_config(small, cache, tmp_path):
    cfg = _write_config(tmp_path / "run.json", small)
    env = _env(cache, PYTHONPATH=str(small["agents"]))
    res = _evalkit("run", "--config", cfg, "--agent", "e2e_pit_agents:quiet", "--prices", small["prices"],
                   "--price-source", "synthetic e2e", "--pulled-at", "2026-02-03", "--receipt", "o/r.json",
                   "--trajectory", "o/t.jsonl", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    body = json.loads((tmp_path / "o/r.json").read_text())["body"]
    assert body["agent"]["spec"] == "e2e_pit_agents:quiet"
    assert body["prices"]["source"] == "synthetic e2e"
    assert body["prices"]["pulled_at"] == "2026-02-03"
    ver = _evalkit("verify", "o/r.json", "--trajectory", "o/t.jsonl", "--bundle", small["release"], "--prices",
                   small["prices"], cwd=tmp_path, env=env)
    assert ver.returncode == 0, ver.stdout
    assert [ln.split()[1] for ln in ver.stdout.splitlines() if ln.startswith("ok ")] == [
        "signature", "schema", "body_sha256", "trajectory_sha256", "bundle_content_digest", "mask_secret_sha256", "config_sha256",
        "prices_sha256", "calendar_sha256", "harness_source_sha256", "replay",
    ], ver.stdout
    assert "MISMATCH" not in ver.stdout


def test_export_writes_a_file_datasets_style_readers_take(small, cache, tmp_path):
    out = tmp_path / "samples.jsonl"
    res = _evalkit("export", "--bundle", small["release"], "--arm", "shifted", "--clock", "pit", "--out", out,
                   "--format", "lm-eval", cwd=tmp_path, env=_env(cache))
    assert res.returncode == 0, res.stderr
    import polars as pl

    frame = pl.read_ndjson(out)
    assert frame.columns == ["id", "prompt", "metadata"] or set(frame.columns) == {"id", "prompt", "metadata"}
    assert frame.height == len(out.read_text().splitlines()) > 0
    from evalkit_core import Release

    shift = Release.load(small["release"]).shift  # the harness's own map (the agent never holds it)
    shown = frame["metadata"].struct.field("session_date").to_list()
    assert set(shown) <= {s.isoformat() for _, s in shift.pairs}
    assert all(abs((dt.date.fromisoformat(d) - dt.date(2023, 3, 1)).days) > 365 for d in shown)
