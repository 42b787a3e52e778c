"""The read-only commands (budget show, calls list, campaign status) must not import the fuzzer's hypothesis:
it cost about a second of start-up on the seed campaign (tools/bench/readonly.py measures the commands)."""

from __future__ import annotations

import subprocess
import sys


def test_the_campaign_layer_imports_without_hypothesis():
    code = (
        "import sys\nimport evalkit_router, evalkit_cli._app\n"
        "from evalkit_router import campaign_status\n"
        "assert 'hypothesis' not in sys.modules, 'hypothesis imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
