"""The jail's identity (issue 29, item 3) and how the wall finds bubblewrap (issue 30).

A candidate asks the jail who it is, every way the interpreter offers, as written and past the tripwire: the answer
is the policy's hostname (``evalkit-jail``), never the host's; ``/etc`` holds only the dynamic linker's cache, and
``/sys`` is not there. The PIT jail builds its policy from the same :class:`WallPolicy`, so it gets the same name.

Bubblewrap reachable only through a directory on the caller's ``PATH`` (a symlink in a temp directory) starts
the wall: it is resolved once and started by absolute path.
"""

from __future__ import annotations

import json
import shutil
import socket
import textwrap
from pathlib import Path

import pytest

from evalkit.wall import Sandbox, SandboxJob, SandboxLimits, WallPolicy, Zygote

pytestmark = pytest.mark.needs("root", "bwrap", "seccomp")  # the identity is bubblewrap's UTS namespace

LIMITS = SandboxLimits(cpu_seconds=1.0, wall_seconds=4.0, memory_bytes=512 << 20)
HOST = socket.gethostname()
PAST_TRIPWIRE = textwrap.dedent("""
    import posixpath as _pp
    _fake = compile("def realpath(filename, *, strict=False): return '/job/_'", "<x>", "exec")
    _pp.realpath.__code__ = [c for c in _fake.co_consts if type(c).__name__ == "code"][0]
""")
ASK = textwrap.dedent("""
    import os, platform, socket
    def f(x):
        out = {"uname": list(os.uname()), "gethostname": socket.gethostname(), "node": platform.node()}
        for p in ("/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname", "/etc/hostname", "/etc/hosts",
                  "/etc/machine-id", "/proc/version", "/sys/class/net", "/sys/devices/virtual/dmi/id/product_uuid"):
            try:
                with open(p, "rb") as fh:
                    out[p] = fh.read(4096).decode("utf-8", "replace")
            except OSError as exc:
                out[p] = type(exc).__name__
        for d in ("/etc", "/sys"):
            try:
                out[d] = sorted(os.listdir(d))
            except OSError as exc:
                out[d] = type(exc).__name__
        return out
""")


def ask(box: Sandbox, source: str) -> dict[str, object]:
    run = box.run(SandboxJob(source, "f", ({"args": [1]},)))
    assert run.load_status == "ok", run.load_error
    test = run.tests[0]
    assert test.status == "value", test
    assert isinstance(test.value, dict)
    return test.value


@pytest.fixture(scope="module")
def box() -> Sandbox:
    with Sandbox(LIMITS, workers=1) as sandbox:
        assert sandbox.isolation.full, sandbox.isolation
        yield sandbox  # type: ignore[misc]


@pytest.mark.parametrize("past", [False, True], ids=["as-written", "past-tripwire"])
def test_the_jail_names_itself_not_the_host(box: Sandbox, past: bool) -> None:
    seen = ask(box, (PAST_TRIPWIRE if past else "") + ASK)
    uname = seen["uname"]
    assert isinstance(uname, list)
    assert uname[1] == WallPolicy().hostname == "evalkit-jail"
    assert seen["gethostname"] == seen["node"] == "evalkit-jail"
    for missing in ("/etc/hostname", "/etc/hosts", "/etc/machine-id", "/sys/class/net"):
        assert seen[missing] == "FileNotFoundError", missing
    assert seen["/etc"] == ["ld.so.cache"]
    assert seen["/sys"] == "FileNotFoundError"
    if past:  # the kernel answers: the UTS namespace's own name
        assert seen["/proc/sys/kernel/hostname"] == "evalkit-jail\n"
        assert seen["/proc/sys/kernel/domainname"] == "(none)\n"
    else:  # the tripwire refuses /proc reads
        assert seen["/proc/sys/kernel/hostname"] == "PermissionError"
    if HOST != "evalkit-jail":
        assert HOST not in json.dumps(seen)


MASKED = ("/proc/cmdline", "/proc/version", "/proc/sys/kernel/random/boot_id")


def test_past_the_tripwire_proc_says_nothing_of_the_machine_or_its_boot(box: Sandbox) -> None:
    """The kernel's command line, its build banner and the boot's id are empty in a job (the host's are not)."""
    source = PAST_TRIPWIRE + textwrap.dedent("""
        def f(masked):
            read = {}
            for p in masked:
                with open(p, "rb") as fh:
                    read[p] = fh.read().decode()
            return read
    """)
    run = box.run(SandboxJob(source, "f", ({"args": [list(MASKED)]},)))
    assert run.tests[0].status == "value", run.tests[0]
    assert run.tests[0].value == dict.fromkeys(MASKED, "")
    for path in MASKED:  # not empty on the host: the mask is the jail's doing
        assert Path(path).read_text() != ""


def test_the_pit_jail_gets_the_same_identity() -> None:
    """The PIT jail's policy is a WallPolicy built without a hostname of its own: the default, the sandbox's."""
    from evalkit.pit._jail import AgentJail
    from evalkit.pit._recipe import Recipe

    jail = AgentJail(Recipe(spec={}), network_policy="none")
    try:
        assert jail._policy().hostname == WallPolicy().hostname == "evalkit-jail"
    finally:
        jail.close()


@pytest.mark.parametrize("kind", ["symlink", "wrapper"])
def test_bwrap_reachable_only_through_a_path_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Bubblewrap on the caller's PATH only (a directory in tmp): the wall resolves it there and starts it by that
    absolute path, not by name under the jail's own PATH. The wrapper records that it was the one started."""
    real = shutil.which("bwrap")
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "started"
    if kind == "symlink":
        (bin_dir / "bwrap").symlink_to(real)
    else:
        (bin_dir / "bwrap").write_text(f'#!/bin/sh\necho started >> {mark}\nexec {real} "$@"\n')
        (bin_dir / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert shutil.which("bwrap") == str(bin_dir / "bwrap")
    zygote = Zygote(WallPolicy(), "PAYLOADS = {}\n", label="identity-path")
    assert zygote.uses_bwrap
    zygote.start()
    zygote.stop()
    if kind == "wrapper":
        assert mark.read_text() == "started\n"
    with Sandbox(LIMITS, workers=1, without=frozenset()) as sandbox:
        assert sandbox.isolation.full, sandbox.isolation
        job = SandboxJob("import os\ndef f(x):\n    return [x * 2, os.uname().nodename]\n", "f", ({"args": [21]},))
        assert sandbox.run(job).tests[0].value == [42, "evalkit-jail"]


def test_bwrap_that_cannot_start_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found on PATH, gone (or not executable) when the jail starts: one line naming it, as a WallError."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    zygote = Zygote(WallPolicy(), "PAYLOADS = {}\n", label="identity-test")
    fake.chmod(0o644)
    with pytest.raises(OSError, match=r"^cannot start the wall's jail: .*/bin/bwrap: Permission denied$"):
        zygote.start()
    zygote.stop()
