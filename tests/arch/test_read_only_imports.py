"""The read-only commands (budget show, calls list, campaign status) import what they read with, not the
machinery that runs campaigns: no fuzzer (hypothesis cost about a second of start-up on the seed campaign), no
grading stack, no model client, no asyncio or ssl. Each of those costs start-up time on every call;
tools/bench/readonly.py measures the commands as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "hypothesis",
    "asyncio",
    "ssl",
    "http.client",
    "evalkit.grading._verifiers",
    "evalkit.wall._sandbox",
    "evalkit.grading._adversary",
    "evalkit.grading._proposals",
    "evalkit_router._campaign",
    "evalkit_router._rollouts",
    "evalkit_router._report",
    "evalkit_core.models._client",
    "evalkit_core.models._exchange",
    "evalkit_core.models._ledger",
)

PROBE = """
import json, sys
heavy = json.loads(sys.argv[2])
sys.argv = ["evalkit", *json.loads(sys.argv[1])]
from evalkit_cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["budget", "show"], ["calls", "list"], ["campaign", "status", "no-such-campaign"]],
    ids=" ".join,
)
def test_a_read_only_command_imports_nothing_heavy(argv, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "EVALKIT_HOME": str(tmp_path), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.stdout.strip(), result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded == [], f"{' '.join(argv)} imported {loaded}"
    if argv[0] == "campaign":  # it ran as far as the store: the error names the missing campaign
        assert "no campaign named 'no-such-campaign'" in result.stderr


def test_the_probe_can_see_a_heavy_import(tmp_path):
    # the same probe on a command that runs campaigns' code does report it (the check above can fail)
    env = {"PATH": "/usr/bin:/bin", "EVALKIT_HOME": str(tmp_path), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(["campaign", "report", "no-such-campaign"]), json.dumps(HEAVY)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert "evalkit_router._report" in json.loads(result.stdout.strip().splitlines()[-1])
