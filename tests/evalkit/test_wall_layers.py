"""The wall's layers, one by one: what this machine gives is measured and recorded, and a sandbox without a layer
still grades correctly while saying, never hiding, that it is weaker."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import evalkit.grading._eval
import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit.wall._program import interpreter_reachable
from evalkit.wall._sandbox import Sandbox, SandboxJob
from evalkit_cli import app

BANK = Path(__file__).parent / "fixtures" / "tasks"
PROBE = (
    "import os\n"
    "def f(x):\n"
    "    return [x, os.getpid(), os.getuid(), sorted(os.listdir('/'))]\n"
)
JOB = SandboxJob(PROBE, "f", ({"args": [1], "kwargs": {}}, {"check": "def check(c):\n    assert c(2)[0] == 2\n"}))

needs_full = pytest.mark.needs("bwrap", "seccomp", "root")


@needs_full
def test_the_full_wall_is_in_effect_here():
    with Sandbox(workers=1) as box:
        iso = box.isolation
        run = box.run(JOB)
    assert iso.full
    assert iso.weaker == []
    x, pid, uid, root = run.tests[0].value
    assert (x, pid) == (1, 1)  # pid 1 of a namespace of its own
    assert uid in box.uids
    assert root == ["dev", "etc", "job", "lib", "lib64", "proc", "root", "usr"]  # nothing else of the host
    assert run.tests[1].status == "done"


@pytest.mark.parametrize(
    ("without", "weaker"),
    [
        ({"bwrap"}, ["network", "filesystem"]),
        ({"namespaces"}, ["filesystem", "processes"]),
        ({"seccomp"}, ["seccomp"]),
        ({"bwrap", "namespaces", "seccomp"}, ["network", "filesystem", "processes", "seccomp"]),
    ],
)
def test_a_missing_layer_is_recorded_and_grading_still_holds(without, weaker):
    machine.need(*({"bwrap", "seccomp"} - without))  # only the layers left out may be weaker
    with Sandbox(workers=1, without=frozenset(without)) as box:
        iso = box.isolation
        run = box.run(JOB)
        box.settle()
    assert not iso.full
    fields = iso.to_json()
    # without bubblewrap, a uid of its own only where that uid can read the interpreter (not under /root)
    user_weak = os.geteuid() != 0 or ("bwrap" in without and not interpreter_reachable())
    assert [k for k in ("user", "network", "filesystem", "processes", "seccomp") if "NOT" in str(fields[k])] == [
        *(["user"] if user_weak else []),
        *weaker,
    ]
    assert all("left out by the caller" in str(fields[k]) for k in weaker)
    assert run.tests[0].status == "value"
    assert run.tests[0].value[0] == 1
    assert run.tests[1].status == "done"


STREAMS_AND_ENV = (
    "import os, sys\n"
    "def f(x):\n"
    "    print('out', x)\n"
    "    print('err', x, file=sys.stderr)\n"
    "    streams = [[s.fileno(), s.seekable(), s.line_buffering, s.encoding, s.errors] for s in (sys.stdout, sys.stderr)]\n"
    "    return [dict(os.environ), os.getcwd(), streams]\n"
)


@pytest.mark.parametrize("without", [set(), {"bwrap"}, {"namespaces"}, {"bwrap", "namespaces", "seccomp"}])
def test_every_job_gets_its_own_environment_and_streams_over_its_output_pipe(without):
    """Whatever the layers, a job's environment is PATH, LANG, and HOME and TMPDIR at its own directory, and
    its sys.stdout and sys.stderr are line-buffered UTF-8 streams over its output pipe (not seekable), as if the
    job had opened them itself (the zygote makes both before it clones anyone)."""
    job = SandboxJob(STREAMS_AND_ENV, "f", ({"args": [1], "kwargs": {}}, {"args": [2], "kwargs": {}}))
    with Sandbox(workers=1, without=frozenset(without)) as box:
        runs = [box.run(job) for _ in range(2)]
        box.settle()
    dirs = set()
    for run in runs:
        assert run.output == "out 1\nerr 1\nout 2\nerr 2\n"
        for test in run.tests:
            env, cwd, streams = test.value
            assert env == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": cwd, "TMPDIR": cwd}
            assert streams == [[1, False, True, "utf-8", "replace"], [2, False, True, "utf-8", "replace"]]
            dirs.add(cwd)
    if not without and machine.has("bwrap"):
        assert dirs == {"/job"}
    elif "bwrap" in without:
        assert len(dirs) == 2  # a directory of its own on the host for each job


def test_unknown_layer_is_refused():
    with pytest.raises(ValueError, match="unknown wall layers"):
        Sandbox(without=frozenset({"audit"}))


def test_eval_says_so_in_one_line_when_the_wall_is_weaker(monkeypatch):
    weak = functools.partial(Sandbox, without=frozenset({"seccomp"}))
    monkeypatch.setattr(evalkit.grading._eval, "Sandbox", weak)
    result = CliRunner().invoke(app, ["eval", "--tasks", str(BANK), "--solver", "reference"])
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: weaker sandbox isolation")]
    assert len(warnings) == 1
    assert "seccomp" in warnings[0] or "left out by the caller" in warnings[0]


def test_live_walls_in_one_process_never_share_a_uid_block():
    """Each wall user (sandbox, agent jail) holds its block of uids until it closes: one that lives long keeps its
    own while many others come and go (they used to take blocks round-robin, eight to a process, so a ninth
    sandbox shared the uids of one still running jobs)."""
    from evalkit.wall._policy import release_uid_block, uid_block

    keep = uid_block()
    for _ in range(20):
        other = uid_block()
        assert other != keep
        release_uid_block(other)
    release_uid_block(keep)
    with Sandbox(workers=1) as a, Sandbox(workers=1) as b:
        assert not set(a.uids) & set(b.uids)


@pytest.mark.needs("root", "bwrap")  # separate uids per job (the sandbox says so otherwise)
def test_a_uid_stays_taken_while_its_job_exists():
    """uids go round 1016 a sandbox, skipping any whose job the zygote has not reported gone: a job that outlives a
    thousand others never shares its uid (they used to come back after 1015 later jobs, whatever still ran)."""
    with Sandbox(workers=1) as box:
        held = box.next_uid()
        for _ in range(2100):
            other = box.next_uid()
            assert other != held
            box.free_uid(other)
        box.free_uid(held)
        run = box.run(SandboxJob("import os\ndef f(x):\n    return os.getuid()\n", "f", ({"args": [0], "kwargs": {}},)))
        uid = run.tests[0].value
        assert isinstance(uid, int) and uid in box.uids
        box.settle()  # the job is reaped: the zygote's report gives its uid back
        assert uid not in box._uids_taken


def test_a_zygote_program_is_taken_from_its_cache_only_for_the_same_source(tmp_path, monkeypatch):
    """The compiled program a zygote starts from is kept on disk like bytecode; a file is used only when the whole
    source it holds is the one asked for, so a stale, damaged or colliding file is compiled over, never run."""
    import marshal
    import sys
    import zlib

    from evalkit.wall._program import compiled_program

    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE says: nothing is kept
    source = "X = 1\n"
    assert marshal.loads(compiled_program(source, 0, tmp_path)).co_consts[0] == 1
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    first = compiled_program(source, 0, tmp_path)
    (kept,) = tmp_path.iterdir()
    assert kept.read_bytes().endswith(first)
    assert compiled_program(source, 0, tmp_path) == first
    ns: dict[str, object] = {}
    exec(marshal.loads(first), ns)
    assert ns["X"] == 1

    # a file under the same name whose program says something else: only its source part decides, and a damaged
    # or different source part is recompiled and overwritten
    evil = marshal.dumps(compile("X = 666\n", "<string>", "exec"))
    data = kept.read_bytes()
    head_and_source = data[: len(data) - len(first)]
    kept.write_bytes(head_and_source.replace(b"X = 1", b"X = 2") + evil)
    assert compiled_program(source, 0, tmp_path) == first
    kept.write_bytes(head_and_source[:-3] + evil)
    assert compiled_program(source, 0, tmp_path) == first
    kept.write_bytes(head_and_source.replace(b"evalkit wall program", b"evalkit wall progrem") + evil)
    assert compiled_program(source, 0, tmp_path) == first
    assert kept.read_bytes().endswith(first)

    # another source whose checksum collides lands on the same name and is compiled, not handed this one's program
    other = "Y = 2\n"
    assert zlib.crc32(other.encode()) != zlib.crc32(source.encode())  # (a real collision is rare; forge the name)
    forged = tmp_path / kept.name.replace(f"{zlib.crc32(source.encode()):08x}", f"{zlib.crc32(other.encode()):08x}")
    forged.write_bytes(kept.read_bytes())
    ns = {}
    exec(marshal.loads(compiled_program(other, 0, tmp_path)), ns)
    assert ns.get("Y") == 2 and "X" not in ns


def test_a_zygote_program_compiles_where_its_cache_cannot_be_written(tmp_path, monkeypatch):
    import marshal
    import sys

    from evalkit.wall._program import compiled_program

    monkeypatch.setattr(sys, "dont_write_bytecode", False)

    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    ns: dict[str, object] = {}
    exec(marshal.loads(compiled_program("Z = 3\n", 0, blocked)), ns)
    assert ns["Z"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["file-not-dir"]  # nothing half-written beside it


def test_hang_up_takes_no_more_jobs_and_close_leaves_no_process():
    box = Sandbox(workers=2)
    box.prestart()
    run = box.run(JOB)
    assert run.tests[1].status == "done"
    pids = [w.zygote.pid for w in box._workers]
    box.hang_up()
    with pytest.raises(RuntimeError, match="closed"):
        box.run(JOB)
    box.close()
    box.close()
    for pid in pids:
        assert pid is not None and not Path(f"/proc/{pid}").exists()


def test_prestart_starts_each_worker_s_checker_server():
    with Sandbox(workers=2) as box:
        box.prestart()
        for thread in box._starters:
            thread.join()
        assert all(w._checker is not None for w in box._workers)
        assert box.run(JOB).tests[1].status == "done"
