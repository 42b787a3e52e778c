"""The docs run as written: every block of README.md and of every docs/*.md page (picked up by glob, so a new page
is tested without being listed here).

Each page runs in order in a fresh temporary copy of the repository's tracked files (what a fresh clone holds),
with its own `.evalkit/` home there:

- ``bash``/``sh``/``shell`` blocks run under ``bash -euo pipefail``. ``uv run`` is the real uv, told not to
  sync (``UV_NO_SYNC``) and pointed at the environment running the tests, so a ``uv run`` outside the checkout
  fails as it would for a reader. ``uv run pytest`` only collects (the suite does not run itself from here). A
  command shown failing on purpose ends in ``# exit N`` and must exit with exactly N.
- ``python`` blocks are executed in one namespace per page, in that directory.
- ``json`` and ``toml`` blocks must parse; a block whose info string says ``file=PATH`` (or whose first line
  is ``# file: PATH``) is written to PATH in the copy when the page reaches it, as a reader would save it. ``text``/``output``/untagged blocks are shown, not run; but every
  ``evalkit ...`` synopsis line in them must name a real command and only options its ``--help`` lists, and a
  ``uv ...`` command there must be in a ``bash`` block instead.
- A block whose info string says ``needs=COMPONENT`` (a key of ``tests/machine.py``, e.g. ``needs=sdk`` for the
  provider SDKs of the optional extra ``evalkit-harness[sdk]``) runs only where the machine has it; elsewhere it is
  counted as not run with the reason that names what to install (a failure where ``EVALKIT_REQUIRE`` names it).
- A block that cannot run here says so in the markdown, visibly, on the line just before it:
  ``_Not run by the docs test: REASON._`` The test counts those and prints them.

Every relative link must point at a file inside the repository.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import attrs
import pytest

import machine  # pyright: ignore[reportImplicitRelativeImport]

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"^_Not run by the docs test: (?P<reason>.+)\._$")
FENCE = re.compile(r"^```(?P<info>[^`]*)$")
EXPECTED_EXIT = re.compile(r"^(?P<cmd>[^#\n]+?)\s+#\s*exit (?P<n>\d+)\b[^\n]*$", re.MULTILINE)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
SHELL, PYTHON, DATA = {"bash", "sh", "shell"}, {"python", "py"}, {"json", "toml"}
SHOWN = {"text", "output", "", "console", "yaml"}  # console: a prompt session shown; yaml: another tool's file
BIN = Path(sys.executable).parent
# What a page's blocks must have left behind (files in the working directory, text its python blocks printed).
AFTER: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pit-harness.md": (("samples.jsonl", "loop/receipt.json", "plain/receipt.json"), ("blocked:",)),
    "README.md": (("out/pit/receipt.json", "out/receipt.json", "receipt.json", "grpo.jsonl"), ()),
    "inspect.md": ((), ("success 70 {'public': 0.0, 'hidden': 0.0}",)),
}
# Blocks that say they run offline run with the network cut (see _network_cut): Inspect's task over the bank.
OFFLINE = re.compile(r"^\s*(uv run )?inspect eval\b", re.MULTILINE)


@attrs.frozen
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip_reason: str | None
    file: str | None = None  # ```json file=PATH: the block is that file's content, written where it says
    needs: tuple[str, ...] = ()  # ```bash needs=sdk: runs only where the machine has the component

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        info = m["info"].strip().split()
        start, lang = i, (info[0].lower() if info else "")
        file = next((w.removeprefix("file=") for w in info[1:] if w.startswith("file=")), None)
        needs = tuple(c for w in info[1:] if w.startswith("needs=") for c in w.removeprefix("needs=").split(","))
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        body = lines[start + 1 : j]
        if file is None and body and body[0].startswith("# file: "):  # the other spelling: a first-line comment
            file, body = body[0].removeprefix("# file: ").strip(), body[1:]
        prev = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        skip = SKIP.match(prev)
        out.append(Block(page.name, start + 1, lang, "\n".join(body) + "\n",
                         skip["reason"] if skip else None, file, needs))
        i = j + 1
    return out


def _page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _commands(code: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = code.replace("\\\n", " ")
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]


# --- checks that need nothing run --------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_blocks_are_runnable_or_marked(page: Path) -> None:
    problems: list[str] = []
    for b in blocks(page):
        if b.lang not in SHELL | PYTHON | DATA | SHOWN:
            problems.append(f"{b.where}: block language {b.lang!r}; use one of {sorted(SHELL | PYTHON | DATA | SHOWN)}")
        if b.lang in SHOWN:
            problems += [f"{b.where}: {cmd!r} is a command: put it in a bash block"
                         for cmd in _commands(b.code) if cmd.startswith(("uv ", "$ "))]
        if b.lang == "json" and b.skip_reason is None:
            try:
                json.loads(b.code)
            except ValueError as exc:
                problems.append(f"{b.where}: json block does not parse: {exc}")
        if b.lang == "toml" and b.skip_reason is None:
            try:
                tomllib.loads(b.code)
            except tomllib.TOMLDecodeError as exc:
                problems.append(f"{b.where}: toml block does not parse: {exc}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_links_stay_inside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    bad: list[str] = []
    for m in LINK.finditer(text):
        target = m["target"].split("#")[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue  # an anchor on the same page, or a URL
        resolved = (page.parent / target).resolve()
        if not resolved.is_relative_to(ROOT):
            bad.append(f"{target}: outside the repository")
        elif not resolved.exists():
            bad.append(f"{target}: no such file")
    assert not bad, f"{_page_id(page)}: " + "; ".join(bad)
    for pattern in (r"/work/", r"\.\./shared", r"/root/", r"/home/[a-z]"):
        assert re.search(pattern, text) is None, f"{_page_id(page)} names {pattern!r}, a place outside the repository"


def _help(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalkit_cli", *argv, "--help"], capture_output=True, text=True,
                          check=False, timeout=120, env={**os.environ, "COLUMNS": "240", "NO_COLOR": "1"})


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_synopses_name_real_commands_and_options(page: Path) -> None:
    """`evalkit ...` lines shown (not run) name a command that exists, with options it has."""
    problems: list[str] = []
    for b in blocks(page):
        if b.lang not in SHOWN or b.skip_reason is not None:
            continue
        for cmd in _commands(b.code):
            if not cmd.startswith("evalkit "):
                continue
            words = cmd.split("#")[0].split()[1:]
            path = []
            for w in words:
                if not re.fullmatch(r"[a-z][a-z-]*", w):
                    break
                path.append(w)
            while path and _help(path).returncode != 0:  # a trailing word was an argument (a NAME in lowercase)
                path.pop()
            if not path:
                problems.append(f"{b.where}: {cmd!r} names no evalkit command")
                continue
            shown = _help(path).stdout
            for opt in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", cmd))):
                if opt not in shown:
                    problems.append(f"{b.where}: `evalkit {' '.join(path)}` has no option {opt}")
    assert not problems, "\n".join(problems)


def test_every_page_is_found() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "pit-harness.md", "architecture.md"} <= names, names
    assert len(PAGES) == 1 + len(list((ROOT / "docs").glob("*.md")))


def test_pit_harness_page_covers_adapters_receipt_verify_jail_and_threat_model() -> None:
    page = ROOT / "docs" / "pit-harness.md"
    text = page.read_text()
    for needle in ("from_callable", "from_tool_loop", "## The receipt", "## Verify", "## Where the agent runs",
                   "## The network recorder", "## Threat model", "--netns", "subprocess", "by value"):
        assert needle in text
    kinds = [b.lang for b in blocks(page)]
    assert kinds.count("python") >= 4
    assert kinds.count("bash") >= 3


# --- running them ------------------------------------------------------------------------------------------------


def _fresh_checkout(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if src.is_symlink():  # tasks/ and campaigns/ point into the package that ships them, as in a clone
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(src.readlink())
        elif src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def _shell_env(repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"EVALKIT_HOME", "VIRTUAL_ENV", "EVALKIT_RELEASES"}}
    env |= {
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "UV_NO_SYNC": "1",
        "UV_OFFLINE": "1",
        "UV_PROJECT_ENVIRONMENT": sys.prefix,
        "NO_COLOR": "1",
        "HOME": str(repo.parent / "home"),  # nothing the docs run writes into the real home directory
    }
    return env


INSTALLS = re.compile(r"^\s*(uv (sync|pip|tool|add|remove|lock)|pip3? install|python3? -m pip)\b", re.MULTILINE)


def _network_cut(scratch: Path) -> tuple[list[str], dict[str, str]]:
    """How to run a block with no network: a network namespace of its own (no interface but a loopback that is
    down) where the machine allows one, else every proxy variable pointed at a closed loopback port (honoured by
    requests, httpx and urllib). Either way tiktoken gets an empty cache directory of its own, so an encoding some
    earlier run downloaded into the machine's temporary directory cannot hide a download."""
    env = {"TIKTOKEN_CACHE_DIR": str(scratch / "tiktoken-cache")}
    (scratch / "tiktoken-cache").mkdir(exist_ok=True)
    unshare = shutil.which("unshare")
    if unshare is not None:
        for prefix in ([unshare, "-n", "--"], [unshare, "-rn", "--"]):  # as root; else with a user namespace
            if subprocess.run([*prefix, "true"], capture_output=True, check=False).returncode == 0:
                return prefix, env
    closed = "http://127.0.0.1:9"  # the discard port, closed on loopback
    proxies = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"), closed)
    return [], env | proxies | {"NO_PROXY": "", "no_proxy": ""}


def _run_shell(b: Block, repo: Path, env: dict[str, str]) -> None:
    # uv is pointed at the environment running the tests: an install from a page would change it. A page's
    # install commands need a marker (they need the index anyway).
    installs = INSTALLS.search(b.code)
    assert installs is None, f"{b.where}: {installs[0].strip()!r} installs packages; mark the block as not run"
    script = b.code.replace("\\\n", " ")
    # A command the page shows failing on purpose ends in `# exit N`: it must exit with exactly N.
    script = EXPECTED_EXIT.sub(
        lambda m: (f'if {m["cmd"]}; then echo "docs: expected exit {m["n"]}, got 0" >&2; exit 97; '
                   f'else rc=$?; [ "$rc" -eq {m["n"]} ] || {{ echo "docs: expected exit {m["n"]}, got $rc" >&2; exit 98; }}; fi'),
        script,
    )
    # The suite does not run itself from inside itself: `uv run pytest` collects only.
    script = re.sub(r"^(\s*uv run pytest)\b(.*)$", r"\1 --collect-only -q -p no:cacheprovider", script,
                    flags=re.MULTILINE)
    prefix: list[str] = []
    if OFFLINE.search(script):
        prefix, cut = _network_cut(repo.parent)
        env = env | cut
    proc = subprocess.run([*prefix, "bash", "-euo", "pipefail", "-c", script], cwd=repo, env=env, capture_output=True,
                          text=True, check=False, timeout=1800)
    assert proc.returncode == 0, f"{b.where}: exit {proc.returncode}\n{script}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


# Pages known to fail as a reader runs them, each with what fails: strict, so a fix turns the xfail into a failure
# that asks for the entry to go.
KNOWN_FAILING: dict[str, str] = {}


# Pages whose commands need an optional extra: they skip, naming it, where it is not installed (tests/machine.py).
PAGE_NEEDS: dict[str, tuple[str, ...]] = {"inspect.md": ("inspect",)}
# Pages whose blocks run whole workflows (a campaign of 70 tasks x 3 models x K=5 in the README's and the campaigns
# page's, gates over them, certificates, holdouts): minutes, so they are integration tests (CI's full leg runs them;
# the README's `uv run pytest` runs every other page, and tests/e2e/test_pit_cli.py its quick start's `evalkit run`).
PAGE_INTEGRATION = frozenset({"README.md", "campaigns.md", "certificates.md", "gates.md", "holdouts.md"})


def _runnable_pages() -> list[object]:
    pages: list[object] = []
    for p in PAGES:
        marks = [pytest.mark.needs(*PAGE_NEEDS[p.name])] if p.name in PAGE_NEEDS else []
        if p.name in PAGE_INTEGRATION:
            marks.append(pytest.mark.integration)
        if p.name in KNOWN_FAILING:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=KNOWN_FAILING[p.name]))
        pages.append(pytest.param(p, marks=marks))
    return pages


@pytest.fixture(autouse=True)
def _inspect_sandboxes_closed():
    """A page that runs an Inspect eval in this process leaves the scorer's sandbox open until exit: close it after
    the page, as a notebook would, so that no jailed process of a page outlives it into later tests."""
    yield
    module = sys.modules.get("evalkit.inspect_tasks")
    if module is not None:
        module.close_sandboxes()


@pytest.mark.slow
@pytest.mark.parametrize("page", _runnable_pages(), ids=_page_id)
# Inspect AI (docs/inspect.md) warns about its own dependencies' deprecations when it runs.
@pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Exception ignored in. <function MemoryObject:pytest.PytestUnraisableExceptionWarning")
def test_page_runs_as_written(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    page_blocks = blocks(page)
    repo = _fresh_checkout(tmp_path / "repo")
    (tmp_path / "home").mkdir()
    env = _shell_env(repo)
    monkeypatch.chdir(repo)
    monkeypatch.syspath_prepend(str(repo))  # modules a page writes (`file=`) import as a reader's would
    monkeypatch.setenv("EVALKIT_REGISTRY", os.environ.get("EVALKIT_REGISTRY", ""))  # restored after the page
    for key in ("EVALKIT_HOME", "EVALKIT_RELEASES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", env["HOME"])
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    ran, not_run = 0, []
    for b in page_blocks:
        if b.skip_reason is not None:
            not_run.append(f"{b.where} ({b.lang}): {b.skip_reason}")
            continue
        why = machine.unmet(*b.needs)
        if why is not None:
            not_run.append(f"{b.where} ({b.lang}): {why}")
            continue
        if b.file is not None:
            target = (repo / b.file).resolve()
            assert target.is_relative_to(repo), f"{b.where}: file={b.file} is outside the working directory"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.code, encoding="utf-8")
            ran += 1
        elif b.lang in SHELL:
            _run_shell(b, repo, env)
            ran += 1
        elif b.lang in PYTHON:
            exec(compile(b.code, b.where, "exec"), namespace)
            ran += 1
    printed = capsys.readouterr().out
    files, texts = AFTER.get(page.name, ((), ()))
    for rel in files:
        assert (repo / rel).is_file(), f"{_page_id(page)}: the blocks did not write {rel}"
    for text in texts:
        assert text in printed, f"{_page_id(page)}: the python blocks never printed {text!r}"
    print(f"{_page_id(page)}: {ran} blocks run, {len(not_run)} marked not run")
    for line in not_run:
        print(f"  not run: {line}")
    runnable = [b for b in page_blocks if b.lang in SHELL | PYTHON]
    assert ran + len(not_run) >= len(runnable)


def test_skip_markers_are_counted() -> None:
    """Every marker sits right before a block, and gives a reason."""
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        marked = {b.line for b in blocks(page) if b.skip_reason is not None}
        for n, ln in enumerate(lines, 1):
            if ln.strip().startswith("_Not run by the docs test"):
                nxt = next((k for k in range(n + 1, len(lines) + 1) if lines[k - 1].strip()), None)
                assert nxt in marked, f"{page.name}:{n}: the marker is not right before a block (or has no reason)"


def test_shlex_survives_every_shell_block() -> None:
    """Quoting in shell blocks is balanced (a reader pasting them gets what the page shows)."""
    for page in PAGES:
        for b in blocks(page):
            if b.lang in SHELL:
                for cmd in _commands(b.code):
                    shlex.split(cmd, comments=True)


def test_readme_runconfig_example_is_the_example_file_and_valid() -> None:
    from evalkit.pit import RunConfig

    example = json.loads((ROOT / "examples" / "run.json").read_text())
    shown = [json.loads(b.code) for b in blocks(ROOT / "README.md") if b.lang == "json" and "bundle_path" in b.code]
    assert shown == [example]
    RunConfig.from_json(example, source="examples/run.json").validate()
