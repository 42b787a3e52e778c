"""Inspect AI is an optional extra (evalkit-harness[inspect]): evalkit imports it only when asked, and says which extra
to install in one line when it is missing. Runs with or without the extra installed (Inspect is hidden here)."""

from __future__ import annotations

import subprocess
import sys

HIDE = "import sys; sys.modules['inspect_ai'] = None\n"  # an import of inspect_ai now fails as if not installed


def interpreter_path(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", HIDE + code], capture_output=True, text=True, check=False, timeout=120)


def test_the_core_never_imports_inspect() -> None:
    out = interpreter_path(
        "import evalkit, pit_harness, evalkit.pit\n"
        "from evalkit.pit import resolve_agent, run, RunConfig, export_samples\n"
        "from pit_harness.adapters.plain import from_callable\n"
        "print('ok')\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_adapter_names_the_extra_in_one_line() -> None:
    out = interpreter_path("import pit_harness.adapters.inspect\n")
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last == (
        "ImportError: pit_harness.adapters.inspect: the Inspect AI integration needs the optional extra "
        "evalkit-harness[inspect] (pip install 'evalkit-harness[inspect]')"
    )
