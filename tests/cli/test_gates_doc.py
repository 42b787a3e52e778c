"""docs/gates.md runs as written, and docs/ci/evalkit-gate.yml's evalkit steps run against what it made.

Blocks, in order, in an empty directory (with ``tasks`` linked to the repository's task bank):
- ``bash``: each line runs in a shell, ``uv run evalkit`` being this interpreter's ``-m evalkit_cli``; a line
  ending in ``# exit N`` must exit N, every other line 0;
- ``text``: the stdout of the line just before, word for word (whitespace-insensitive); a line ``...`` stands for
  any number of lines, and a line ending in ``...`` for any line that starts with what precedes it;
- ``json file=P`` / ``toml file=P``: written to P.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "gates.md"
CERT_DOC = ROOT / "docs" / "certificates.md"
HOLDOUT_DOC = ROOT / "docs" / "holdouts.md"
WORKFLOW = ROOT / "docs" / "ci" / "evalkit-gate.yml"
BLOCK = re.compile(r"^```(\w+)( file=\S+)?\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXIT = re.compile(r"\s+# exit (\d+)$")
EVALKIT = f"{shlex.quote(sys.executable)} -m evalkit_cli"


def run_line(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    m = EXIT.search(line)
    want = int(m[1]) if m else 0
    command = EXIT.sub("", line).replace("uv run evalkit", EVALKIT)
    res = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert res.returncode == want, (line, res.stdout, res.stderr)
    return res


def run_doc(doc: Path, cwd: Path, env: dict[str, str], *, show: bool = False) -> None:
    last = ""
    for m in BLOCK.finditer(doc.read_text()):
        kind, target, body = m[1], m[2], m[3]
        if target:
            path = cwd / target.removeprefix(" file=")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
        elif kind == "bash":
            for line in body.strip().splitlines():
                last = run_line(line, cwd, env).stdout
                if show:
                    print(f"$ {line}\n{last}")
        elif kind == "text" and not show:
            assert matches(last.splitlines(), body.strip().splitlines()), last


def matches(got: list[str], want: list[str]) -> bool:
    """Do the printed lines match the shown ones, with ``...`` as in the module's docstring?"""
    if not want:
        return not got
    head, rest = want[0].split(), want[1:]
    if head == ["..."]:
        return any(matches(got[i:], rest) for i in range(len(got) + 1))
    if not got:
        return False
    line = got[0].split()
    if head and head[-1].endswith("..."):
        prefix = " ".join([*head[:-1], head[-1].removesuffix("...")]).strip()
        ok = " ".join(line).startswith(prefix)
    else:
        ok = line == head
    return ok and matches(got[1:], rest)


def doc_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALKIT_")}
    env.update({"EVALKIT_HOME": str(tmp / ".evalkit"), "EVALKIT_CACHE_DIR": os.environ.get("EVALKIT_CACHE_DIR", str(tmp / "cache"))})
    return env


def test_workflow_is_a_github_actions_workflow_whose_gate_steps_are_in_the_doc():
    flow = yaml.safe_load(WORKFLOW.read_text())
    steps = flow["jobs"]["gate"]["steps"]
    runs = [" ".join(s["run"].split()) for s in steps if "run" in s]
    gates = [r for r in runs if r.startswith("uv run evalkit gate ")]
    assert len(gates) == 2
    assert all("--baseline gates/" in g for g in gates)
    assert "docs/ci/evalkit-gate.yml" in DOC.read_text()


@pytest.mark.slow
@pytest.mark.integration  # the documented workflow, whole (as tests/e2e/test_docs.py's run of the page)
def test_doc_examples_run_in_order_then_the_workflow_steps(tmp_path):
    doc_dir = tmp_path / "doc"
    doc_dir.mkdir()
    (doc_dir / "tasks").symlink_to(ROOT / "tasks")
    run_doc(DOC, doc_dir, doc_env(tmp_path))
    # The workflow's evalkit steps in a fresh checkout holding only what the doc committed (gates/) and its task
    # bank (the doc's twelve structured families, for time), on a machine with a key of its own: every gate passes.
    checkout = tmp_path / "checkout"
    shutil.copytree(doc_dir / "gates", checkout / "gates")
    shutil.copytree(doc_dir / "bank", checkout / "bank")
    env = doc_env(checkout)
    flow = yaml.safe_load(WORKFLOW.read_text())
    ran = 0
    for step in flow["jobs"]["gate"]["steps"]:
        command = " ".join(str(step.get("run", "")).split())
        if command.startswith("uv run evalkit"):
            run_line(command.replace("--tasks tasks ", "--tasks bank "), checkout, env)
            ran += 1
    assert ran == 5


def test_the_matcher_can_fail():
    assert matches(["a b", "c"], ["a  b", "c"])
    assert matches(["x", "a b", "y", "z"], ["...", "a b", "...", "z"])
    assert matches(["signed ed25519:ab"], ["signed ..."])
    assert not matches(["a b"], ["a c"])
    assert not matches(["a", "b"], ["a"])
    assert not matches(["a", "b"], ["...", "c"])


@pytest.mark.slow
@pytest.mark.integration  # the documented workflow, whole
def test_certificates_doc_runs_in_order(tmp_path):
    run_doc(CERT_DOC, tmp_path, doc_env(tmp_path))
    assert not (tmp_path / "refused.json").exists()
    assert (tmp_path / "cert.json").is_file()


@pytest.mark.slow
@pytest.mark.integration  # the documented workflow, whole
def test_holdouts_doc_runs_in_order(tmp_path):
    run_doc(HOLDOUT_DOC, tmp_path, doc_env(tmp_path))
    p2 = json.loads((tmp_path / "overlap/receipt.json").read_text())["body"]["protocol"]["P2_training_cutoff"]
    assert p2["post_cutoff"] is False


if __name__ == "__main__":  # print what each line prints, to write the doc's text blocks
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "tasks").symlink_to(ROOT / "tasks")
        run_doc(CERT_DOC if "cert" in sys.argv[1:] else DOC, Path(d), doc_env(Path(d)), show=True)
