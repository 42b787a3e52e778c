"""Hostile async and threaded agents against the pipe to the harness and the SDK endpoint: forged frames, another
session's tools, huge bodies, calls after a session or a cell ended, threads that outlive them, floods. Each ends
in a recorded failing cell or a refused call; never a valid run with knowledge it should not have, never a
traceback of the harness. Where a run completes, ``verify`` replays it: every answer in the trajectory is what the
harness serves at that bell."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pit_agent_support import RUN_START, cfg, kinds, make_writer, needs_wall, texts

import machine  # pyright: ignore[reportImplicitRelativeImport]
from evalkit.pit import AgentLimits, resolve_agent, run, verify_pit_receipt

pytest.importorskip("openai", reason=machine.importorskip_reason("sdk"))


@pytest.fixture
def write_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    return make_writer(tmp_path, monkeypatch)


def _failed(result: Any, error_type: str, needle: str = "") -> dict[str, Any]:
    body = result.body
    assert body["valid"] is False
    assert body["invalidated_by"] == ["agent_error"], body["invalidated_by"]
    err = body["agent_errors"][0]
    assert err["error_type"] == error_type, err
    assert needle in err["message"], err
    assert "Traceback" not in err["message"]
    return err


def _replays(result: Any, release: Path) -> None:
    checks = verify_pit_receipt(result.receipt_path, trajectory=result.trajectory_path, bundle=release)
    bad = [c for c in checks if c.status == "MISMATCH"]
    assert not bad, bad


# --- forged frames on the pipe --------------------------------------------------------------------------------------

FORGED = {
    "garbage_line": ("os.write(4, b'not json at all\\n')", "AgentProtocolError", "not JSON"),
    "gateway_wire_format": (
        "os.write(4, b'{\"op\": \"complete\", \"model\": \"sim/strong\", \"request\": {}}\\n')",
        "AgentProtocolError",
        "the protocol does not know",
    ),
    "harness_result_frame": ("os.write(4, b'[\"result\", {\"rows\": []}]\\n')", "AgentProtocolError", "'result'"),
    "host_model_frame": (
        "os.write(4, b'[\"host\", \"mockllm/model\", \"inspect-mockllm\", {}]\\n')",
        "AgentProtocolError",
        "'host'",
    ),
    "deeply_nested": ("os.write(4, b'[' * 200000 + b'\\n')", "AgentProtocolError", "not JSON"),
    "reply_with_non_string_text": ("os.write(4, b'[\"reply\", [], 5]\\n')", "AgentProtocolError", "text"),
    "two_threads_write_halves": (
        ("import threading\n"
        "ts = [threading.Thread(target=lambda: [os.write(4, b'[\"tool\", \"pit_li') for _ in range(50)]) for _ in range(4)]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]\nos.write(4, b'\\n')"),
        "AgentProtocolError",
        "",
    ),
}

FORGED_AGENT = """
import asyncio, os

def agent(prompt, tools):
    async def go():
        await asyncio.sleep(0)
{code}
        await asyncio.sleep(0)
        return tools.pit_list(limit=1)
    return asyncio.run(go())
"""


@needs_wall
@pytest.mark.parametrize("name", list(FORGED))
def test_forged_frames_at_the_pipe_fail_the_cell(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    import textwrap

    code, error_type, needle = FORGED[name]
    spec = write_agent(FORGED_AGENT.format(code=textwrap.indent(code, " " * 8)))
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec), limits=AgentLimits(message_bytes=1 << 20))
    _failed(result, error_type, needle)
    assert all(c["trades"] == 0 for c in result.body["cells"])


MALFORMED_MODEL_REQUESTS = """
import json, os

REQUESTS = [
    {"messages": [{"role": "user", "text": "x"}], "max_tokens": 5, "sim_context": [1]},
    {"messages": [{"role": "user", "text": "x"}], "max_tokens": 5, "tools": [5]},
    {"messages": [{"role": "user", "text": "x", "tool_calls": [{"id": 1}]}], "max_tokens": 5},
    {"messages": "x", "max_tokens": 5},
    {"messages": [{"role": "user", "text": "x"}], "max_tokens": 5, "stop": 7},
    {"messages": [{"role": "user", "text": "x"}], "max_tokens": "5"},
]

def agent(prompt, tools):
    answers = []
    for req in REQUESTS:
        # the raw frame, as a forger writes it, and the harness's raw answer
        answers.append(tools._ask(["complete", "sim/strong", req])[:2])
    return json.dumps(answers)
"""


@needs_wall
def test_malformed_model_requests_are_refused_never_a_harness_traceback(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(MALFORMED_MODEL_REQUESTS)
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    import json

    (text,) = texts(result)
    answers = json.loads(text)
    assert answers == [["raised", "GatewayError"]] * 6, answers
    assert kinds(result, "model_call") == []
    assert result.body["valid"] is True


INHERITED = """
import os, socket, stat

def agent(prompt, tools):
    sockets = []
    for fd in range(0, 1024):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                sockets.append(fd)
        except OSError:
            pass
    reached = []
    for name in ("\\0evalkit", "\\0evalkit-gateway", "\\0/tmp/.X11-unix/X0", "/tmp/evalkit-gateway.sock"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(name)
            reached.append(name)
        except OSError:
            pass
        finally:
            s.close()
    pids = sorted(p for p in os.listdir("/proc") if p.isdigit())
    return f"sockets={sockets} | reached={reached} | pids={pids}"
"""


@needs_wall
def test_no_socket_of_the_gateway_is_inherited_or_reachable(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(INHERITED)
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    (text,) = texts(result)
    assert text == "sockets=[] | reached=[] | pids=['1']", text
    assert result.body["valid"] is True


# --- another session, a later call, a thread that outlives them --------------------------------------------------

STALE = """
import threading, time
import openai

SEEN = []
LOAD = []
try:  # at import: no session is open yet
    openai.OpenAI().chat.completions.create(model="sim/strong", messages=[{"role": "user", "content": "x"}])
except openai.APIStatusError as exc:
    LOAD.append(f"{exc.status_code}")

def _late(old):
    while old._open:
        time.sleep(0.001)
    for call in (lambda: old.pit_list(limit=200), lambda: old.pit_read("anything"), lambda: old.call("pit_coverage", {})):
        try:
            call()
            SEEN.append("answered")
        except BaseException as exc:
            SEEN.append(type(exc).__name__)

def agent(prompt, tools):
    if not SEEN and not getattr(agent, "started", False):
        agent.started = True
        threading.Thread(target=_late, args=(tools,), daemon=True).start()
        return []
    deadline = time.monotonic() + 10
    while len(SEEN) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    return f"load={LOAD} | late={SEEN}"
"""


@needs_wall
def test_a_sessions_tools_refuse_calls_after_it_ended_and_no_session_before_the_first(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(STALE)
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec))
    texts_ = texts(result)
    assert texts_[-1] == "load=['400'] | late=['RuntimeError', 'RuntimeError', 'RuntimeError']", texts_
    assert kinds(result, "tool_call") == []  # nothing of the stale calls reached the harness
    assert result.body["valid"] is True
    _replays(result, synth_release_dir)


SPAMMER = """
import json, os, threading, time

def _spam():
    while True:  # raw requests with no one to read their answers, in every session, for ever
        os.write(4, (json.dumps(["tool", "pit_list", {"limit": 200}]) + "\\n").encode())
        time.sleep(0.002)

def agent(prompt, tools):
    if not getattr(agent, "started", False):
        agent.started = True
        threading.Thread(target=_spam, daemon=True).start()
    time.sleep(0.05)
    return tools.pit_list(limit=5)["session_date"]
"""


@needs_wall
def test_a_thread_spamming_raw_requests_across_sessions_gains_nothing(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(SPAMMER)
    cells = cfg(synth_release_dir, agent=spec, arms=("main", "shifted"), clocks=("pit", "leaky"))
    result = run(resolve_agent(spec), cells, limits=AgentLimits(session_seconds=20))
    body = result.body
    assert body["valid"] is False or all(c["lookahead_trades"] == 0 for c in body["cells"] if c["clock"] == "pit")
    for cell in body["cells"]:
        if cell["clock"] == "pit":
            assert cell["lookahead_trades"] == 0
    # whatever the harness answered, it answered for the session it was in: the replay agrees with every line
    _replays(result, synth_release_dir)


OUTLIVER = """
import os, threading, time

def _keep_writing():
    n = 0
    while True:
        with open(os.path.join(os.environ["TMPDIR"], "marker"), "w") as f:
            f.write(str(n))
        n += 1
        time.sleep(0.001)

def agent(prompt, tools):
    here = os.path.exists(os.path.join(os.environ["TMPDIR"], "marker"))
    started = getattr(agent, "started", False)
    if not started:
        agent.started = True
        threading.Thread(target=_keep_writing, daemon=True).start()
        time.sleep(0.05)
    others = sorted(t for t in os.listdir("/proc/self/task"))
    return f"marker_before={here} | started_before={started} | tasks={len(others)} | pid={os.getpid()}"
"""


@needs_wall
def test_a_thread_outliving_its_cell_dies_with_it(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(OUTLIVER)
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, arms=("main", "redacted", "shifted")))
    assert result.body["valid"] is True
    decisions = kinds(result, "decision")
    cells = {(d["arm"], d["clock"]) for d in decisions}
    first = [next(d for d in decisions if (d["arm"], d["clock"]) == c) for c in sorted(cells)]
    assert len(first) == 3
    for d in first:  # every cell starts afresh: no marker, no thread of the cell before
        assert d["text"] == "marker_before=False | started_before=False | tasks=2 | pid=1", d["text"]
    later = [d for d in decisions if d not in first]
    assert later and all(d["text"].startswith("marker_before=True | started_before=True | tasks=2") for d in later)
    # and on the host, nothing of any job's uid is left once the run returned
    base = 200_000 + ((os.getpid() % 100_000) * 8) * 1024
    left = []
    for entry in (e.name for e in Path("/proc").iterdir()):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            uid = int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1])
            if base <= uid < base + 8 * 1024:
                left.append((entry, uid))
    assert left == []


@needs_wall
def test_a_thread_holding_the_pipe_for_ever_times_the_session_out(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(
        """
        import threading, time

        def _hold(lock):
            with lock:
                time.sleep(3600)

        def agent(prompt, tools):
            threading.Thread(target=_hold, args=(tools._ask.__globals__["_AGENT_PIPE"],), daemon=True).start()
            time.sleep(0.1)
            return tools.pit_list(limit=1)
        """
    )
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec), limits=AgentLimits(session_seconds=2))
    _failed(result, "AgentTimeout", "killed")


# --- huge bodies --------------------------------------------------------------------------------------------------


@needs_wall
def test_huge_bodies_are_refused_at_the_endpoint_or_end_the_cell_at_the_pipe(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(
        """
        import openai

        def agent(prompt, tools):
            out = []
            for size in (17 << 20, 40 << 20):
                try:
                    openai.OpenAI(max_retries=0).chat.completions.create(
                        model="sim/strong", messages=[{"role": "user", "content": "x" * size}])
                except openai.APIStatusError as exc:
                    out.append(str(exc.status_code))
            return " ".join(out)
        """
    )
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, end=RUN_START))
    assert texts(result) == ["413 413"]
    assert kinds(result, "model_request") == []
    spec = write_agent(
        """
        def agent(prompt, tools):
            return tools.pit_search(query="x" * (2 << 20))
        """
    )
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec), limits=AgentLimits(message_bytes=1 << 20))
    _failed(result, "AgentProtocolError", "longer than")
    spec = write_agent(
        """
        import asyncio, openai

        def agent(prompt, tools):
            async def go():
                client = openai.AsyncOpenAI(max_retries=0)
                return await client.chat.completions.create(
                    model="sim/strong", messages=[{"role": "user", "content": "y" * (3 << 20)}],
                    extra_body={"sim_context": {"reference": "z"}})
            return asyncio.run(go()).choices[0].message.content
        """
    )
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec), limits=AgentLimits(message_bytes=1 << 20))
    _failed(result, "AgentProtocolError", "longer than")  # under the endpoint's cap, over the pipe's


# --- floods -------------------------------------------------------------------------------------------------------

FLOODS = {
    "threads_on_the_endpoint": """
import threading, openai

def agent(prompt, tools):
    client = openai.OpenAI(max_retries=0)
    def go():
        while True:
            client.chat.completions.create(model="sim/strong", messages=[{"role": "user", "content": "x"}],
                                           extra_body={"sim_context": {"reference": "z"}})
    ts = [threading.Thread(target=go) for _ in range(16)]
    [t.start() for t in ts]
    [t.join() for t in ts]
""",
    "gather_on_the_endpoint": """
import asyncio, openai

def agent(prompt, tools):
    async def go():
        client = openai.AsyncOpenAI(max_retries=0)
        async def one():
            return await client.chat.completions.create(model="sim/strong", messages=[{"role": "user", "content": "x"}],
                                                        extra_body={"sim_context": {"reference": "z"}})
        await asyncio.gather(*[one() for _ in range(500)])
    asyncio.run(go())
""",
    "pool_on_the_tools": """
from concurrent.futures import ThreadPoolExecutor

def agent(prompt, tools):
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda _: tools.pit_coverage(), range(10_000)))
""",
    "refused_calls_count_too": """
import openai

def agent(prompt, tools):
    client = openai.OpenAI(max_retries=0)
    while True:
        try:
            client.chat.completions.create(model="no/such-model", messages=[{"role": "user", "content": "x"}])
        except openai.APIStatusError:
            pass
""",
}


@needs_wall
@pytest.mark.parametrize("name", list(FLOODS))
def test_a_flood_ends_the_cell_at_the_session_cap(
    name: str, synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    spec = write_agent(FLOODS[name])
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec), limits=AgentLimits(session_requests=40))
    _failed(result, "AgentLimit", "more than 40 requests")
    assert len(kinds(result, "model_call")) <= 40


# --- the abstract socket namespace is no channel between cells ----------------------------------------------------

ABSTRACT_CHANNEL = """
import array, os, socket

NAMES = ["\\0evalkit-leak-stream", "\\0evalkit-leak-dgram", "\\0evalkit-leak-plain"]

def _look():
    table = open("/proc/net/unix").read()
    seen = [n[1:] for n in NAMES if n[1:] in table]
    taken = []
    for name in NAMES:  # bind is an oracle too: EADDRINUSE says the name exists
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            s.bind(name)
        except OSError:
            taken.append(name[1:])
        finally:
            s.close()
    return seen, taken

def _plant():
    # names kept alive past the process: sockets whose only references are in flight (SCM_RIGHTS) in their own
    # queues, and a plain listening socket
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(NAMES[0]); lst.listen(4)
    a, b = socket.socketpair()
    socket.send_fds(b, [b"x"], [a.fileno(), b.fileno(), lst.fileno()])
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    d.bind(NAMES[1])
    d.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [d.fileno()]))], 0, NAMES[1])
    plain = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    plain.bind(NAMES[2]); plain.listen(1)
    globals()["KEEP"] = plain
    for s in (lst, a, b, d):
        s.close()

def agent(prompt, tools):
    if globals().get("PLANTED"):
        return "later"
    seen, taken = _look()
    _plant()
    globals()["PLANTED"] = True
    return f"seen={seen} | taken={taken}"
"""


@needs_wall
def test_abstract_unix_names_are_no_channel_between_cells(
    synth_release_dir: Path, write_agent: Callable[..., str], in_tmp: Path
) -> None:
    """Abstract names live in a network namespace and can outlive their process (in flight in their own queues):
    with one namespace for every process of a run, a later cell found an earlier cell's names (bind said
    EADDRINUSE). Each agent process now has a network namespace of its own."""
    spec = write_agent(ABSTRACT_CHANNEL)
    arms, clocks = ("main", "redacted", "shifted"), ("leaky", "dump", "pit")
    result = run(resolve_agent(spec), cfg(synth_release_dir, agent=spec, arms=arms, clocks=clocks, probe_items=1))
    body = result.body
    assert body["valid"] is True, body["agent_errors"]
    firsts = [t for t in texts(result) if t != "later"]
    assert len(firsts) == 9
    assert set(firsts) == {"seen=[] | taken=[]"}, firsts
