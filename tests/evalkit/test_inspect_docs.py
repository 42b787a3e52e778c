"""docs/inspect.md runs as written: every python and bash block in order, in an empty directory beside a copy of
the repository's task bank; a block starting ``# file: NAME`` is written to NAME; a ``text`` block is the output of
the python block before it. ``console`` and ``yaml`` blocks are shown, not run (they need a provider key or a
program that is not installed offline)."""

from __future__ import annotations

import contextlib
import gc
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import machine  # pyright: ignore[reportImplicitRelativeImport]

pytest.importorskip("inspect_ai", reason=machine.importorskip_reason("inspect"))

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "inspect.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)

pytestmark = [
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning"
    ),
]


def _no_network() -> list[str]:
    """A prefix that runs a command in a network namespace of its own (no route out), where the machine allows."""
    unshare = shutil.which("unshare")
    for prefix in ([unshare, "-n", "--"], [unshare, "-rn", "--"]) if unshare else ():
        if subprocess.run([*prefix, "true"], capture_output=True, check=False).returncode == 0:
            return prefix
    return []


@pytest.fixture(autouse=True)
def _inspect_data_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inspect writes trace files under the user data directory: keep them out of the home directory."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


def test_readme_lists_the_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "[Inspect AI](docs/inspect.md)" in readme
    assert "inspect eval evalkit/verifier_tasks" in readme


@pytest.mark.slow
def test_doc_examples_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "tasks", tmp_path / "tasks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EVALKIT_REGISTRY", "")  # restored after the test, whatever the page sets
    namespace: dict[str, object] = {"__name__": "inspect_doc"}
    last = ""
    ran: list[str] = []
    outputs: dict[str, str] = {}
    try:
        for n, (kind, code) in enumerate(BLOCK.findall(DOC.read_text())):
            first, _, rest = code.partition("\n")
            if first.startswith("# file: "):
                (tmp_path / first.removeprefix("# file: ").strip()).write_text(rest)
                ran.append("file")
            elif kind == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(code, f"{DOC.name}[block {n}]", "exec"), namespace)
                last = out.getvalue()
                ran.append("python")
            elif kind == "bash":
                env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # what the page has set so far (the registry)
                for line in code.strip().splitlines():
                    argv = shlex.split(line)
                    line_env = dict(env)
                    while argv and "=" in argv[0] and argv[0].split("=", 1)[0].isidentifier():
                        name, _, value = argv.pop(0).partition("=")  # a shell's `VAR=value command` prefix
                        line_env[name] = value
                    assert argv[:3] in (["uv", "run", "evalkit"], ["uv", "run", "inspect"]), line
                    if argv[2] == "inspect":  # Inspect's own command, offline: no network, no cached tokenizer
                        (tmp_path / "tiktoken-cache").mkdir(exist_ok=True)
                        line_env["TIKTOKEN_CACHE_DIR"] = str(tmp_path / "tiktoken-cache")
                        command = [*_no_network(), str(Path(sys.executable).parent / "inspect"), *argv[3:]]
                    else:
                        command = [sys.executable, "-m", "evalkit_cli", *argv[3:]]
                    res = subprocess.run(command, cwd=tmp_path, env=line_env, capture_output=True, text=True,
                                         timeout=600, check=False)  # fmt: skip
                    if res.returncode != 0:
                        pytest.fail(f"{line}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}", pytrace=False)
                    last = res.stdout
                    outputs[argv[3]] = outputs.get(argv[3], "") + res.stdout
                ran.append("bash")
            elif kind == "text":
                assert last.strip().splitlines() == code.strip().splitlines(), (n, last)
                ran.append("text")
    finally:
        server = namespace.get("server")
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
        gc.collect()
    assert ran.count("text") == 6
    assert ran.count("bash") == 5
    assert list((tmp_path / "tiktoken-cache").iterdir()) == []  # Inspect's mock downloaded no tokenizer
    assert "ok        replay" in outputs["verify"]
    assert "MISMATCH" not in outputs["verify"]
    assert "not checked: agent code (module my_solvers sha256:" in outputs["verify"]
    assert (tmp_path / "cli" / "receipt.json").is_file()
    assert (tmp_path / "pit" / "receipt.json").is_file()
    assert outputs["verify"].count("ok        replay") == 2  # the CLI run's receipt and the mockllm run's
