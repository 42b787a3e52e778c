"""Every command, bad input: exit code 2, one line on stderr naming the file or option (and the field), no
traceback, nothing written. The commands are read from the typer app, so a new command is walked too: the
generic cases (an unknown option, a malformed number, a number out of range) apply to it at once, and it must
have a row in ``BAD`` (or a reason in ``NO_FILE_INPUT``) or ``test_every_command_has_a_bad_input_row`` fails.

Runs in-process through the real entry point (``evalkit_cli._app.main``, the same error mapping as the console
script) in a fresh directory with ``$EVALKIT_HOME`` and the cache inside it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from evalkit_cli._app import app, main
from evalkit_core.store import Store

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "tests" / "evalkit" / "fixtures" / "tasks"


def _leaves() -> Iterator[tuple[tuple[str, ...], Any]]:
    def walk(cmd: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd

    yield from walk(typer.main.get_command(app), ())


COMMANDS = dict(_leaves())

# Values every required parameter can take so that parsing gets past it (the bad value is the one under test).
FILLER: dict[str, str] = {
    "--tasks": str(BANK), "--solver": "reference", "--start": "2024-01-02", "--end": "2024-01-31",
    "--name": "n", "--out": "out-file", "--rows": "10", "--bundle": "no-bundle", "--format": "jsonl",
    "--calibrate-on": "no-campaign",
}  # fmt: skip


def _required(cmd: Any, skip: str | None = None) -> list[str]:
    """Arguments for the required parameters of ``cmd`` (all but ``skip``)."""
    args: list[str] = []
    positional: list[str] = []
    for p in cmd.params:
        if not p.required or p.name == skip or (p.opts and p.opts[0] == skip):
            continue
        if p.param_type_name == "argument":
            positional.append("x")
        else:
            args += [p.opts[0], FILLER.get(p.opts[0], "x")]
    return [*positional, *args]


# (command, argv after the command, a text the one line must contain). Files named here do not exist unless
# ``_fixtures`` makes them: bad.json (not JSON), typo.json (a RunConfig with a misspelled field),
# empty.csv (a header only), notes.txt (a text file), a-dir/ (a directory).
BAD: list[tuple[str, list[str], str]] = [
    ("adversary mine", ["--tasks", "no-bank", "--solver", "reference"], "no-bank"),
    ("budget reconcile", ["--actual", "no-invoice.csv"], "no-invoice.csv"),
    ("budget set", ["-5"], "budget cap"),
    ("budget set", ["lots"], "budget cap"),
    ("budget show", ["--home", "notes.txt"], "notes.txt"),
    ("bundle build", ["--submissions", "no-subs", "--index", "no-index", "--tickers", "no-tickers.json",
                      "--start", "2024-01-02", "--end", "2024-01-31", "--name", "n", "--out", "rel"], "no-"),
    ("bundle check", ["no-release"], "no-release"),
    ("bundle demo", ["--out", "notes.txt"], "notes.txt"),
    ("bundle info", ["no-release"], "no-release"),
    ("bundle synth", ["--rows", "10", "--start", "2024-13-01", "--end", "2024-01-31", "--out", "rel"], "--start"),
    ("calls list", ["--since", "yesterday-ish"], "--since"),
    ("campaign report", ["no-campaign"], "no-campaign"),
    ("campaign run", ["no-campaign.toml"], "no-campaign.toml"),
    ("campaign run", ["bad.json"], "bad.json"),
    ("campaign run", ["bad.json", "--executor", "dask"], "--executor"),
    ("campaign run", ["bad.json", "--address", "127.0.0.1:6379"], "--address"),
    ("campaign run", ["bad.json", "--executor", "ray", "--address", " "], "--address"),
    ("campaign status", ["no-campaign"], "no-campaign"),
    ("campaign verify", ["no-receipt.json"], "no-receipt.json"),
    ("certify", ["no-receipt.json", "--out", "cert.json", "--bundle", "no-release"], "no-receipt.json"),
    ("certify", ["bad.json", "--out", "a-dir", "--bundle", "no-release"], "--out a-dir"),
    ("eval", ["--tasks", "no-bank", "--solver", "reference"], "no-bank"),
    ("eval", ["--tasks", str(BANK), "--solver", "reference", "--out", "a-dir"], "--out"),
    ("eval", ["--tasks", str(BANK), "--solver", "guess"], "--solver"),
    ("eval", ["--tasks", str(BANK), "--solver", "replay:no-replay.jsonl"], "no-replay.jsonl"),
    ("eval", ["--tasks", str(BANK), "--solver", "reference", "--executor", "dask"], "--executor"),
    ("eval", ["--tasks", str(BANK), "--solver", "reference", "--address", "127.0.0.1:6379"], "--address"),
    ("export", ["--bundle", "no-release", "--out", "samples.jsonl"], "no-release"),
    ("gate", ["no-receipt.json", "--baseline", "no-baseline.json"], "no-baseline.json"),
    ("gate", ["bad.json", "--baseline", "bad.json"], "bad.json"),
    ("gate", ["no-receipt.json", "--baseline", "no-baseline.json", "--policy", "notes.txt"], "notes.txt"),
    ("holdout plan", ["--model", "sim/strong", "--release", "no-release"], "--model sim/strong"),
    ("keys generate", ["--home", "notes.txt"], "notes.txt"),
    ("keys show", ["--home", "notes.txt"], "notes.txt"),
    ("models list", ["--registry", "no-registry.toml"], "no-registry.toml"),
    ("report", ["no-such-receipt.json"], "no-such-receipt.json"),
    ("rewards export", ["no-campaign", "--format", "jsonl", "--out", "r.jsonl"], "no-campaign"),
    ("rewards export", ["no-campaign", "--format", "parquet", "--out", "r.jsonl"], "--format"),
    ("route run", ["--tasks", "no-bank", "--calibrate-on", "no-campaign"], "no-"),
    ("route simulate", ["--calibrate-on", "no-campaign"], "no-campaign"),
    ("run", ["--config", "no-config.json"], "no-config.json"),
    ("run", ["--config", "typo.json"], "bundel_path"),
    ("run", ["--config", "bad.json"], "bad.json"),
    ("run", ["--agent", "stub", "--prices", "empty.csv", "--price-source", "s"], "empty.csv"),
    ("tasks demo", ["--out", "notes.txt"], "notes.txt"),
    ("tasks demo", ["--out", "a-dir-with-files"], "a-dir-with-files"),
    ("campaign demo", ["--out", "notes.txt"], "notes.txt"),
    ("tasks import", ["nothing", "--out", "bank"], "nothing"),
    ("tasks validate", ["no-bank"], "no-bank"),
    ("train grpo", ["--campaign", "no-campaign"], "no-campaign"),
    ("trajectory cat", ["no-trajectory.jsonl.zst"], "no-trajectory.jsonl.zst"),
    ("trajectory cat", ["a-dir"], "a-dir"),
    ("trajectory cat", ["cut.jsonl.zst"], "cut.jsonl.zst: not a readable zstd trajectory"),
    ("verify", ["no-receipt.json"], "no-receipt.json"),
    ("verify", ["bad.json"], "bad.json"),
    ("view", ["no-dir"], "no-dir"),
]  # fmt: skip

# Commands whose every input is an option typer checks (covered by the generic cases), with the reason.
NO_FILE_INPUT: dict[str, str] = {}


def _fixtures(d: Path) -> None:
    (d / "bad.json").write_text("{not json")
    (d / "typo.json").write_text(json.dumps({"bundel_path": "x"}))
    (d / "empty.csv").write_text("ticker,date,open,high,low,close,volume\n")
    (d / "notes.txt").write_text("a file, not a directory\n")
    (d / "cut.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd\x00")  # the zstd magic, then a frame cut short
    (d / "a-dir").mkdir()
    (d / "a-dir-with-files").mkdir()
    (d / "a-dir-with-files" / "keep.txt").write_text("mine\n")
    with Store.open(d / "home"):  # a store that exists already: a read-only question must leave it as it is
        pass


def _tree(d: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and directory under ``d``: a file by size, mtime and bytes; a directory by its presence (its
    mtime moves when SQLite makes and removes its -wal/-shm files beside a store it only read)."""
    return {
        str(p.relative_to(d)): (0, 0, b"")
        if p.is_dir()
        else (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(d.rglob("*"))
    }


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    _fixtures(work)
    monkeypatch.chdir(work)
    monkeypatch.setenv("EVALKIT_HOME", str(work / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(work / "cache"))
    monkeypatch.delenv("EVALKIT_RELEASES", raising=False)
    return work


def _run(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["evalkit", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def _assert_one_line(argv: list[str], needle: str, place: Path, capsys: Any, monkeypatch: Any) -> None:
    before = _tree(place)
    code, err = _run(argv, capsys, monkeypatch)
    assert code == 2, (argv, code, err)
    assert "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, (argv, err)
    assert needle in err, (argv, needle, err)
    assert _tree(place) == before, f"{argv} wrote {set(_tree(place)) ^ set(before)}"


def test_every_command_has_a_bad_input_row():
    covered = {c for c, _, _ in BAD} | set(NO_FILE_INPUT)
    assert sorted(set(map(" ".join, COMMANDS)) - covered) == []
    assert sorted(covered - set(map(" ".join, COMMANDS))) == []


@pytest.mark.parametrize(("command", "args", "needle"), BAD, ids=[f"{c}:{' '.join(a)}" for c, a, _ in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(command, args, needle, place, capsys, monkeypatch):
    _assert_one_line([*command.split(), *args], needle, place, capsys, monkeypatch)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_an_unknown_option_is_one_line_naming_it(path, place, capsys, monkeypatch):
    argv = [*path, *_required(COMMANDS[path]), "--no-such-option-xyz"]
    _assert_one_line(argv, "--no-such-option-xyz", place, capsys, monkeypatch)


NUMERIC = [
    (path, p)
    for path, cmd in sorted(COMMANDS.items())
    for p in cmd.params
    if p.param_type_name == "option" and p.type.name in ("integer", "float", "integer range", "float range")
]


@pytest.mark.parametrize(("path", "param"), NUMERIC, ids=[f"{' '.join(c)}:{p.opts[0]}" for c, p in NUMERIC])
def test_every_numeric_option_has_a_range_and_refuses_what_is_outside(
    path, param, place, capsys, monkeypatch
):
    assert "range" in param.type.name, f"{' '.join(path)} {param.opts[0]} has no range (typer min=/max=)"
    low, high = param.type.min, param.type.max
    outside = str(low - 1) if low is not None else str(high + 1)
    base = [*path, *_required(COMMANDS[path], skip=param.opts[0])]
    _assert_one_line([*base, f"{param.opts[0]}={outside}"], param.opts[0], place, capsys, monkeypatch)
    _assert_one_line([*base, f"{param.opts[0]}=three"], param.opts[0], place, capsys, monkeypatch)


@pytest.mark.parametrize(
    "argv",
    [["campaign", "run", "bad.json", "--executor", "ray"],
     ["eval", "--tasks", str(BANK), "--solver", "reference", "--executor", "ray"]],
    ids=["campaign run", "eval"],
)  # fmt: skip
def test_the_ray_executor_without_ray_says_what_to_install(argv, place, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed: `import ray` fails
    needle = "--executor ray: Ray is not installed; install the extra: uv pip install 'evalkit-harness[ray]'"
    _assert_one_line(argv, needle, place, capsys, monkeypatch)


FRESH = [
    ["campaign", "status", "no-campaign"],
    ["campaign", "report", "no-campaign"],
    ["route", "simulate", "--calibrate-on", "no-campaign"],
    ["rewards", "export", "no-campaign", "--format", "jsonl", "--out", "r.jsonl"],
    ["report", "no-campaign"],
]


@pytest.mark.parametrize("argv", FRESH, ids=" ".join)
def test_asking_for_a_campaign_where_there_is_no_store_makes_none(argv, tmp_path, capsys, monkeypatch):
    """A newcomer's typo in a fresh directory: one line naming the campaign, and no store created to say so."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALKIT_HOME", raising=False)
    monkeypatch.delenv("EVALKIT_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, err = _run(argv, capsys, monkeypatch)
    assert code == 2, err
    assert err.count("\n") == 1 and "no-campaign" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["budget", "show"], "nothing has been recorded"),
        (["budget", "show", "--json"], '"spent": "0"'),
        (["calls", "list"], "no calls recorded: there is no store at"),
        (["calls", "list", "--json"], "[]"),
    ],
    ids=["budget show", "budget show --json", "calls list", "calls list --json"],
)
def test_looking_at_spending_where_there_is_no_store_makes_none(argv, shown, tmp_path, capsys, monkeypatch):
    """`budget show` and `calls list` in a fresh directory answer that nothing is recorded, and create nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALKIT_HOME", raising=False)
    monkeypatch.delenv("EVALKIT_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "argv", ["evalkit", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    assert shown in out.out, out.out
    if "--json" in argv:
        json.loads(out.out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], out.out
    # once a store exists, the same command reads it (and still says where it is)
    (tmp_path / ".evalkit").mkdir()
    monkeypatch.setattr(sys, "argv", ["evalkit", "budget", "set", "5"])
    with pytest.raises(SystemExit):
        main()
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["evalkit", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    assert "nothing has been recorded" not in out.out and "there is no store" not in out.out
