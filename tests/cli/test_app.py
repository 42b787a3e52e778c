"""The root command: groups listed, --version, and `evalkit --help` kept fast by keeping heavy imports lazy."""

from __future__ import annotations

import subprocess
import sys

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
