"""The root command: groups listed, --version, and `evalkit --help` kept fast by keeping heavy imports lazy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HEAVY = ("polars", "pandas", "pandas_market_calendars", "jsonschema", "pyarrow", "httpx")


def test_help_imports_no_heavy_library() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['evalkit', '--help']\n"
        "from evalkit_cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    assert "Commands" in proc.stdout


def test_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "evalkit_cli", "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert proc.stdout.startswith("evalkit ")


def test_pit_harness_alias_lists_its_commands() -> None:
    code = "import sys; sys.argv=['pit-harness','--help']\nfrom evalkit_cli import pit_main\npit_main()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    for cmd in ("run", "verify", "export"):
        assert cmd in proc.stdout


def test_shell_completion_is_on() -> None:
    """typer's own completion: the options are listed, and the completion protocol completes command names."""
    from pathlib import Path

    evalkit = str(Path(sys.executable).parent / "evalkit")
    helptext = subprocess.run([evalkit, "--help"], capture_output=True, text=True, check=False).stdout
    assert "--install-completion" in helptext
    assert "--show-completion" in helptext
    # the shell named, not detected: detection walks this process's parents for a shell, and a test run started
    # by no shell (a CI runner, a detached job) has none ("Shell  not supported")
    named = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    script = subprocess.run([evalkit, "--show-completion", "bash"], capture_output=True, text=True, check=False,
                            env=named)
    assert script.returncode == 0
    assert "_evalkit_completion" in script.stdout
    env = {"_EVALKIT_COMPLETE": "complete_bash", "COMP_WORDS": "evalkit bu", "COMP_CWORD": "1", "PATH": "/usr/bin:/bin"}
    words = subprocess.run([evalkit], capture_output=True, text=True, env=env, check=False).stdout.split()
    assert sorted(words) == ["budget", "bundle"]


# What a grading command's own process never needs: asyncio (and the ssl it pulls in) only for an event loop,
# ctypes only inside the wall's zygote, importlib.resources not to read the zygote's sources. Each costs the
# start of every `evalkit eval`, the path grade_humaneval.py times.
GRADING_NEVER = ("asyncio", "ctypes", "importlib.resources", "ssl")


def test_eval_with_the_reference_solver_imports_no_event_loop_or_ctypes(tmp_path) -> None:
    # code tasks only: a structured task's schema check imports jsonschema (and importlib.resources with it)
    bank = tmp_path / "bank"
    shutil.copytree(Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks" / "code", bank / "code")
    # main() ends the process itself once a grading command is done; the exit handlers still run first
    code = (
        "import atexit, sys\n"
        f"sys.argv = ['evalkit', 'eval', '--tasks', {str(bank)!r}, '--solver', 'reference', '--json']\n"
        f"atexit.register(lambda: print(sorted(m for m in {GRADING_NEVER!r} if m in sys.modules)))\n"
        "from evalkit_cli import main\n"
        "main()\n"
        "print('main() returned')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[0])["summary"]["hidden_pass_rate"] == 1
    assert lines[-1] == "[]"



def test_a_grading_command_that_fails_exits_with_its_code_and_its_message(tmp_path) -> None:
    """main() ends a grading command's process itself (skipping the interpreter's teardown): a user error still
    exits 2 with its one line, and a thread the command left running is waited for as at a normal exit."""
    missing = tmp_path / "no-such-bank"
    code = "from evalkit_cli import main\nmain()\n"
    proc = subprocess.run(
        [sys.executable, "-c", code, "eval", "--tasks", str(missing), "--solver", "reference"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        (f"error: --tasks {missing}: task directory not found (`evalkit tasks demo --out {missing}` writes the seed "
         "bank that ships with evalkit)")
    ]

    bank = tmp_path / "bank"
    shutil.copytree(Path(__file__).parents[1] / "evalkit" / "fixtures" / "tasks" / "code", bank / "code")
    late = tmp_path / "late.txt"
    code = (
        "import threading, time, sys\n"
        f"def slow():\n    time.sleep(1.5)\n    open({str(late)!r}, 'w').write('done')\n"
        "import evalkit_cli\n"
        "real = evalkit_cli._then_exit\n"
        "def then_exit(run):\n    threading.Thread(target=slow).start()\n    real(run)\n"
        "evalkit_cli._then_exit = then_exit\n"
        "evalkit_cli.main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "eval", "--tasks", str(bank), "--solver", "reference", "--json"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["summary"]["hidden_pass_rate"] == 1
    assert late.read_text() == "done"  # the thread was not cut off by the early exit


def _commands() -> list[tuple[tuple[str, ...], object]]:
    import typer.main

    from evalkit_cli import app

    out: list[tuple[tuple[str, ...], object]] = []

    def walk(cmd: object, path: tuple[str, ...]) -> None:
        out.append((path, cmd))
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return out


def test_every_help_text_is_printed_whole() -> None:
    """`--help` shows each option's and argument's help as written. The help is rendered with rich markup, where
    '[word' opens a style tag and vanishes with its text: brackets meant as text ([default: ...],
    evalkit-harness[inspect], a [gate] table) must be written '\\[' (rich's escape), which prints '['."""
    from typer.testing import CliRunner

    from evalkit_cli import app

    runner = CliRunner()
    def squeeze(text: str) -> str:  # the wrapping moves spaces, line breaks and the panels' borders only
        return "".join(text.translate({ord(c): " " for c in "│╭╮╰╯─"}).split())

    checked = 0
    for path, cmd in _commands():
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "2000"})  # one line per option: no wrapping
        assert shown.exit_code == 0, (path, shown.output)
        for param in getattr(cmd, "params", []):
            text = getattr(param, "help", None)
            if text:
                text = text.replace("\\[", "[")
                assert squeeze(text) in squeeze(shown.output), (path, param.name, text)
                checked += "[" in text
    assert checked >= 10  # the texts with brackets are among those checked


def test_a_run_builds_only_the_command_it_names() -> None:
    """typer builds the options of every command an app holds before it parses anything, and each command's module
    costs its import: the console script builds an app holding only the command (or group) its arguments name,
    and the whole app for anything else."""
    import typer.main

    from evalkit_cli._app import _for_run, _named, app

    assert _named(["eval", "--tasks", "x"]) == "eval"
    assert _named(["--store", "s.sqlite", "budget", "show"]) == "budget"
    assert _named(["--store=s.sqlite", "tasks", "validate"]) == "tasks"
    assert _named(["--help"]) is None
    assert _named(["--version", "eval"]) is None
    assert _named([]) is None
    built = typer.main.get_command(_for_run(False, ["--store", "s.sqlite", "eval", "--json"]))
    assert sorted(built.commands) == ["eval"]  # type: ignore[attr-defined]
    assert sorted(typer.main.get_command(_for_run(False, ["tasks", "validate"])).commands) == ["tasks"]  # type: ignore[attr-defined]
    assert sorted(typer.main.get_command(_for_run(True, ["verify", "r.json"])).commands) == ["verify"]  # type: ignore[attr-defined]
    assert _for_run(False, ["no-such-command"]) is app  # whole: typer's own error and suggestions
    assert _for_run(False, ["--help"]) is app
    whole = typer.main.get_command(app)
    assert "eval" in whole.commands and "campaign" in whole.commands  # type: ignore[attr-defined]


def test_a_run_imports_only_the_command_it_names() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['evalkit', 'keys', '--help']\n"
        "from evalkit_cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('evalkit_cli._')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.strip().splitlines()[-1]
    assert "evalkit_cli._keys" in loaded
    for other in ("_campaign", "_bundle", "_eval", "_route", "_pit"):
        assert f"evalkit_cli.{other}'" not in loaded, loaded


def test_a_named_command_behaves_as_in_the_whole_app(tmp_path) -> None:
    """The console script (one command built) and the whole app print the same help and the same errors."""
    from typer.testing import CliRunner

    from evalkit_cli._app import app

    env = {"COLUMNS": "100", "EVALKIT_HOME": str(tmp_path)}
    for args in (["eval", "--help"], ["tasks", "validate", "--help"], ["eval", "--solver", "nope", "--tasks", "tasks"]):
        code = f"import sys; sys.argv = ['evalkit', *{args!r}]\nfrom evalkit_cli import main\nmain()"
        script = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, env={**__import__("os").environ, **env})
        whole = CliRunner().invoke(app, args, prog_name="evalkit", env=env)
        assert script.returncode == (whole.exit_code if args[-1] == "--help" else 2), (args, script.stderr)
        if args[-1] == "--help":
            assert script.stdout == whole.stdout, args
