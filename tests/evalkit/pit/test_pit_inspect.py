"""Inspect AI solvers as PIT agents (``pit_harness.adapters.inspect``), offline.

The solver is a module of its own (the harness never imports it: it runs inside the agent's wall, a fresh process
per cell). Its model is ``evalkit/<registry id>``: every call goes over the agent's pipe to the harness and from
there through the model gateway (outside the wall, holding the key) to a scripted OpenAI-compatible server on
loopback, whose replies are Inspect ``ModelOutput`` objects written by the test (custom mock outputs).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import machine  # pyright: ignore[reportImplicitRelativeImport]

pytest.importorskip("inspect_ai", reason=machine.importorskip_reason("inspect"))

from inspect_ai.model import ModelOutput

from evalkit.pit import CellView, RunConfig, Toolbox, resolve_agent, run, tool_specs
from evalkit_core import Release, nyse, parse_clock
from pit_harness.adapters.inspect import from_inspect_solver, pit_tools

RUN_START = "2023-03-01"

KEY_ENV = "EVALKIT_TEST_INSPECT_API_KEY"
KEY = "sk-inspect-test-DO-NOT-LEAK-17"
REPORTED = "inspect-mock-2026-12-01"
RUN_END_SHORT = "2023-03-03"

needs_bwrap = pytest.mark.needs("bwrap")


def _openai(output: ModelOutput) -> dict[str, Any]:
    """An Inspect ModelOutput as the OpenAI chat completion the scripted server sends."""
    msg = output.message
    message: dict[str, Any] = {"role": "assistant", "content": msg.text or None}
    if msg.tool_calls:
        message["tool_calls"] = [
            {"id": tc.id, "type": "function", "function": {"name": tc.function, "arguments": json.dumps(tc.arguments)}}
            for tc in msg.tool_calls
        ]
    return {
        "id": "x",
        "object": "chat.completion",
        "model": REPORTED,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if msg.tool_calls else "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5},
    }


def _script(body: dict[str, Any]) -> ModelOutput:
    """The mock outputs: list two filings, then submit the first; answer the probe's question with a refusal."""
    last = body["messages"][-1]
    if last["role"] == "user" and "real filing date" in str(last.get("content")):
        return ModelOutput.from_content(REPORTED, "I cannot tell.")
    if last["role"] == "user":
        return ModelOutput.for_tool_call(REPORTED, "pit_list", {"limit": 2}, tool_call_id="c1")
    rows = json.loads(last["content"]).get("rows", [])
    return ModelOutput.for_tool_call(REPORTED, "submit", {"row_keys": [r["row_key"] for r in rows[:1]]}, tool_call_id="c2")


class _Server(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bodies: list[dict[str, Any]] = []
    auth: list[str] = []

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        _Server.bodies.append(body)
        _Server.auth.append(self.headers.get("Authorization", ""))
        data = json.dumps(_openai(_script(body))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def mock_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    registry = tmp_path / "registry.toml"
    registry.write_text(
        '[models."mock/inspect"]\nprovider = "openai-compatible"\napi_model = "mock"\n'
        f'base_url = "http://127.0.0.1:{server.server_address[1]}/v1"\napi_key_env = "{KEY_ENV}"\n'
        "context_window = 100000\nmax_output = 4096\n"
        'prices = { input = "1", output = "2", cache_read = "1", cache_write = "1" }\n'
    )
    monkeypatch.setenv("EVALKIT_REGISTRY", str(registry))
    monkeypatch.setenv(KEY_ENV, KEY)
    _Server.bodies, _Server.auth = [], []
    try:
        yield "mock/inspect"
    finally:
        server.shutdown()
        server.server_close()


SOLVERS = """
from inspect_ai.solver import Generate, TaskState, chain, generate, solver, system_message
from inspect_ai.tool import ToolDef


@solver
def trader(note: str = "Use the tools, then call submit."):
    return chain(system_message(note), generate())


@solver
def counting():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        names = sorted(ToolDef(t).name for t in state.tools)  # what the harness gave it
        state = await generate(state)
        state.output.completion = ",".join(names)  # the reply's text: the tools it was given
        return state

    return solve


def script(input, tools, tool_choice, config):
    # mockllm/model's custom outputs as a callable (run by the gateway, on the host side)
    import json

    from inspect_ai.model import ModelOutput

    last = input[-1]
    if last.role == "user" and "real filing date" in last.text:
        return ModelOutput.from_content("mock-script-1", "I cannot tell.")
    if last.role == "user":
        return ModelOutput.for_tool_call("mock-script-1", "pit_list", {"limit": 2}, tool_call_id="c1")
    rows = json.loads(last.text).get("rows", [])
    return ModelOutput.for_tool_call("mock-script-1", "submit", {"row_keys": [r["row_key"] for r in rows[:1]]}, tool_call_id="c2")


@solver
def around_the_gateway():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        import urllib.request

        urllib.request.urlopen("http://127.0.0.1:9/v1/chat/completions", timeout=2)  # a provider, not the gateway
        return state

    return solve
"""


@pytest.fixture
def solver_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    where = tmp_path / "solversrc"
    where.mkdir()
    name = f"inspect_solvers_{os.getpid()}"
    (where / f"{name}.py").write_text(textwrap.dedent(SOLVERS))
    monkeypatch.syspath_prepend(str(where))
    return name


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cfg(release_dir: Path, agent: str, **kw: Any) -> RunConfig:
    base: dict[str, Any] = {
        "bundle_path": str(release_dir),
        "forms": ("8-K",),
        "start": RUN_START,
        "end": RUN_END_SHORT,
        "arms": ("main", "shifted"),
        "clocks": ("pit",),
        "probe_items": 1,
        "mask_decoys": False,  # the window's sessions only (these tests count calls per session)
        "agent": agent,
        "trajectory_path": "trajectory.jsonl",
        "receipt_path": "receipt.json",
    }
    return RunConfig(**{**base, **kw})


def test_pit_tools_have_the_harness_names_arguments_and_answers(synth_release: Release) -> None:
    import asyncio

    from inspect_ai.tool import ToolDef

    calendar = nyse()
    view = CellView("main", parse_clock("pit"), synth_release.arm("main"), synth_release.arm("main"), calendar)
    s_idx = calendar.index_of(calendar.between(RUN_START, RUN_START)[0].date)
    log: list[tuple[str, dict[str, Any]]] = []
    toolbox = Toolbox(view, s_idx, lambda tool, args, result: log.append((tool, args)))
    twin = Toolbox(view, s_idx, lambda *_: None)
    tools = pit_tools(toolbox)
    specs = {s["function"]["name"]: s["function"] for s in tool_specs()}
    assert [ToolDef(t).name for t in tools] == list(specs)
    for t in tools:
        d = ToolDef(t)
        params = specs[d.name]["parameters"]
        assert d.description == specs[d.name]["description"]
        assert set(d.parameters.properties) == set(params["properties"])
        assert d.parameters.required == params.get("required", [])
    by_name = {ToolDef(t).name: t for t in tools}
    got = json.loads(asyncio.run(by_name["pit_list"](limit=200)))  # 200 rows: far past Inspect's 16 KB default cut
    assert got == twin.pit_list(limit=200)
    assert len(got["rows"]) == 200
    key = got["rows"][0]["row_key"]
    assert json.loads(asyncio.run(by_name["pit_read"](row_key=key))) == twin.pit_read(key)
    assert json.loads(asyncio.run(by_name["pit_search"](query="8-K", limit=3))) == twin.pit_search("8-K", 3)
    assert json.loads(asyncio.run(by_name["pit_coverage"]())) == twin.pit_coverage()
    # each call is the toolbox's own, so it is on the toolbox's record (what the runner writes to the trajectory)
    assert log == [
        ("pit_list", {"limit": 200, "offset": 0, "form": None}),
        ("pit_read", {"row_key": key}),
        ("pit_search", {"query": "8-K", "limit": 3}),
        ("pit_coverage", {}),
    ]


@needs_bwrap
def test_an_inspect_solver_runs_through_pit_inside_the_wall_via_the_gateway(
    mock_model: str, solver_module: str, synth_release_dir: Path, in_tmp: Path
) -> None:
    agent = from_inspect_solver(f"{solver_module}:trader", model=mock_model)
    result = run(agent, _cfg(synth_release_dir, agent.name))
    body = result.body
    assert body["valid"] is True, body["agent_errors"]
    assert body["agent"]["wall"]["full"] is True
    events = _events(result.trajectory_path)
    decisions = [e for e in events if e["type"] == "decision"]
    tool_calls = [e for e in events if e["type"] == "tool_call"]
    model_calls = [e for e in events if e["type"] == "model_call"]
    sessions = len(decisions)
    assert sessions == 2 * 3  # two arms x three sessions (2023-03-01..03)
    # per session: the solver listed two filings (a harness tool call) and submitted the first of them
    assert [e["tool"] for e in tool_calls] == ["pit_list"] * sessions
    assert all(e["args"]["limit"] == 2 for e in tool_calls)
    for d, t in zip(decisions, tool_calls, strict=True):
        first = t["result"]["rows"][:1]
        assert d["picks"] == [r["row_key"] for r in first]
    # every model call went through the gateway to the provider and is on the record (two a session + the probe)
    assert len(_Server.bodies) == len(model_calls) == 2 * sessions + 1
    assert body["protocol"]["P4_costs_and_frictions"]["model_calls"] == len(model_calls)
    assert REPORTED in json.dumps(body["protocol"]["P1_model_version"])
    assert all(a == f"Bearer {KEY}" for a in _Server.auth)
    # the solver's system message and the harness's tools reached the model
    first = _Server.bodies[0]
    assert first["messages"][0] == {"role": "system", "content": "Use the tools, then call submit."}
    assert sorted(t["function"]["name"] for t in first["tools"]) == sorted(
        ["pit_list", "pit_search", "pit_read", "pit_coverage", "submit"]
    )
    assert body["probe"]["verdict"] == "mask_holds"
    # the receipt binds the solver's module source, the model and Inspect's version
    code = body["agent"]["code"]
    assert code["kind"] == "module"
    assert code["module"] == solver_module
    assert code["sha256"].startswith("sha256:")
    assert code["model_id"] == mock_model
    assert code["framework"] == {"name": "inspect-ai", "version": importlib.metadata.version("inspect-ai")}
    for path in (result.trajectory_path, result.receipt_path):
        assert KEY not in path.read_text()


@needs_bwrap
def test_the_cli_spelling_inspect_module_solver_at_model(
    mock_model: str, solver_module: str, synth_release_dir: Path, in_tmp: Path
) -> None:
    spec = f"inspect:{solver_module}:counting@{mock_model}"
    result = run(resolve_agent(spec), _cfg(synth_release_dir, spec, arms=("main",), probe_items=0))
    assert result.body["valid"] is True, result.body["agent_errors"]
    decisions = [e for e in _events(result.trajectory_path) if e["type"] == "decision"]
    assert len(decisions) == 3
    assert all(len(d["picks"]) == 1 for d in decisions)
    assert {d["text"] for d in decisions} == {"pit_coverage,pit_list,pit_read,pit_search,submit"}


def test_a_solver_that_cannot_cross_the_wall_is_refused_with_how() -> None:
    from evalkit.pit import AgentSpecError

    async def local(state: Any, generate: Any) -> Any:
        return state

    with pytest.raises(AgentSpecError, match="importable by name"):
        from_inspect_solver(local, model="mock/inspect")
    # an object importable by name is named by it (and rebuilt from that name inside the jail)
    from inspect_ai.solver import generate

    from evalkit.pit._agents import import_target

    named = from_inspect_solver(generate, model="mock/inspect")
    spec = named.name.removeprefix("inspect:").removesuffix("@mock/inspect")
    assert named.name == f"inspect:{spec}@mock/inspect"
    assert import_target(spec) is generate
    with pytest.raises(Exception, match=r"inspect:MODULE:SOLVER@MODEL"):
        resolve_agent("inspect:nomodel")


def test_inspect_agent_specs_name_the_extra_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.pit import AgentSpecError, _agents

    monkeypatch.setattr(_agents, "inspect_available", lambda: False)
    with pytest.raises(AgentSpecError, match=r"evalkit-harness\[inspect\]"):
        resolve_agent("inspect:somewhere:solver@mock/inspect")



@needs_bwrap
def test_evalkit_run_with_an_inspect_agent_then_verify(
    mock_model: str, solver_module: str, synth_release_dir: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "run.json"
    cfg.write_text(
        json.dumps(
            {
                "bundle_path": str(synth_release_dir),
                "forms": ["8-K"],
                "start": RUN_START,
                "end": RUN_START,
                "arms": ["main"],
                "clocks": ["pit", "dump"],
                "probe_items": 0,
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "solversrc")}
    spec = f"inspect:{solver_module}:trader@{mock_model}"

    def evalkit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "evalkit_cli", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300, check=False,
        )

    res = evalkit(
        "run", "--config", str(cfg), "--agent", spec, "--receipt", "out/receipt.json", "--trajectory", "out/traj.jsonl"
    )
    assert res.returncode == 0, res.stderr
    body = json.loads((tmp_path / "out/receipt.json").read_text())["body"]
    assert body["agent"]["spec"] == spec
    assert body["valid"] is True
    assert len(_Server.bodies) == 2 * 2  # two cells of one session: list, then submit
    ver = evalkit(
        "verify", "out/receipt.json", "--trajectory", "out/traj.jsonl", "--bundle", str(synth_release_dir)
    )
    assert ver.returncode == 0, ver.stdout + ver.stderr
    assert "ok        replay" in ver.stdout
    assert f"not checked: agent code (module {solver_module} sha256:" in ver.stdout
    bad = evalkit("run", "--config", str(cfg), "--agent", "inspect:nowhere_at_all:solver@mock/inspect")
    assert bad.returncode == 2
    line = bad.stderr.strip()
    assert "\n" not in line
    assert line.startswith("error: --agent:")
    assert line.endswith("'inspect:nowhere_at_all:solver@mock/inspect': cannot import module 'nowhere_at_all' (not found on the Python path)")


@needs_bwrap
def test_a_solver_that_goes_around_the_gateway_is_stopped_and_recorded(
    mock_model: str, solver_module: str, synth_release_dir: Path, in_tmp: Path
) -> None:
    agent = from_inspect_solver(f"{solver_module}:around_the_gateway", model=mock_model)
    result = run(agent, _cfg(synth_release_dir, agent.name, arms=("main",), end=RUN_START, probe_items=0))
    body = result.body
    assert body["valid"] is False
    assert body["network"]["egress_attempts"] >= 1, (body["network"], body["agent_errors"])
    line = next(i for i, text in enumerate(textwrap.dedent(SOLVERS).splitlines(), 1) if "urlopen(" in text)
    assert body["network"]["attempts"][0]["call_site"].endswith(f"{solver_module}.py:{line}")  # the urlopen line
    assert _Server.bodies == []  # nothing reached a provider


# --- Inspect's mockllm/model, served by the gateway on the host side ---------------------------------------------


def _verify_cli(result: Any, release_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "verify", str(result.receipt_path), "--trajectory",
         str(result.trajectory_path), "--bundle", str(release_dir)],
        capture_output=True, text=True, timeout=300, check=False,
    )


@needs_bwrap
def test_mockllm_custom_outputs_run_through_pit_via_the_gateway_and_verify(
    solver_module: str, synth_release_dir: Path, in_tmp: Path
) -> None:
    from inspect_ai.model import ModelUsage

    usage = ModelUsage(input_tokens=40, output_tokens=7, total_tokens=47)
    outputs: list[ModelOutput] = []
    for n in range(3):  # three sessions: look at the coverage, then answer with an empty list of picks
        outputs.append(ModelOutput.for_tool_call("mock-list-1", "pit_coverage", {}, tool_call_id=f"cov{n}"))
        outputs.append(ModelOutput.from_content("mock-list-1", "[]").model_copy(update={"usage": usage}))
    agent = from_inspect_solver(
        f"{solver_module}:trader", model="mockllm/model", model_args={"custom_outputs": outputs}
    )
    result = run(agent, _cfg(synth_release_dir, agent.name, arms=("main",), probe_items=0))
    body = result.body
    assert body["valid"] is True, body["agent_errors"]
    events = _events(result.trajectory_path)
    requests = [e for e in events if e["type"] == "model_request"]
    calls = [e for e in events if e["type"] == "model_call"]
    # each of the six outputs was one model call the harness recorded, in order, answered by the gateway
    assert len(requests) == len(calls) == 6
    assert [c["tool_calls"][0]["name"] if c["tool_calls"] else c["text"] for c in calls] == ["pit_coverage", "[]"] * 3
    assert {c["model_id"] for c in calls} == {"mockllm/model"}
    assert {c["reported_model"] for c in calls} == {"mock-list-1"}
    assert all(c["simulated"] is True and c["cost_usd"] == "0" for c in calls)
    assert [c["usage"]["output_tokens"] for c in calls][1::2] == [7, 7, 7]  # the outputs' own usage, as given
    assert len({c["registry_digest"] for c in calls}) == 1  # the digest of the custom outputs that served them
    assert [e["tool"] for e in events if e["type"] == "tool_call"] == ["pit_coverage"] * 3
    assert [e["picks"] for e in events if e["type"] == "decision"] == [[]] * 3
    assert body["protocol"]["P4_costs_and_frictions"]["model_calls"] == 6
    assert body["protocol"]["P1_model_version"]["reported"] == ["mock-list-1"]
    assert body["agent"]["code"]["model_id"] == "mockllm/model"
    ver = _verify_cli(result, synth_release_dir)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    assert "ok        replay" in ver.stdout


@needs_bwrap
def test_mockllm_with_a_callable_script_sees_the_tool_results_and_the_probe(
    solver_module: str, synth_release_dir: Path, in_tmp: Path
) -> None:
    import importlib

    script = importlib.import_module(solver_module).script
    agent = from_inspect_solver(f"{solver_module}:trader", model="mockllm/model", model_args={"custom_outputs": script})
    result = run(agent, _cfg(synth_release_dir, agent.name))
    body = result.body
    assert body["valid"] is True, body["agent_errors"]
    events = _events(result.trajectory_path)
    decisions = [e for e in events if e["type"] == "decision"]
    tool_calls = [e for e in events if e["type"] == "tool_call"]
    calls = [e for e in events if e["type"] == "model_call"]
    assert len(decisions) == 2 * 3
    for d, t in zip(decisions, tool_calls, strict=True):  # the script read each listing and submitted its first row
        assert d["picks"] == [r["row_key"] for r in t["result"]["rows"][:1]]
    assert len(calls) == 2 * len(decisions) + 1  # list and submit per session, and the probe's question
    assert calls[-1]["text"] == "I cannot tell."
    assert body["probe"]["verdict"] == "mask_holds"
    assert all(c["usage"]["input_tokens"] > 0 for c in calls)  # counted by the gateway (the outputs carry none)
    assert {c["reported_model"] for c in calls} == {"mock-script-1"}
    ver = _verify_cli(result, synth_release_dir)
    assert ver.returncode == 0, ver.stdout + ver.stderr


@needs_bwrap
def test_mockllm_outputs_that_run_out_fail_the_call_on_the_record(
    solver_module: str, synth_release_dir: Path, in_tmp: Path
) -> None:
    one = [ModelOutput.from_content("mock-list-1", "[]")]
    agent = from_inspect_solver(f"{solver_module}:trader", model="mockllm/model", model_args={"custom_outputs": one})
    result = run(agent, _cfg(synth_release_dir, agent.name, arms=("main",), probe_items=0))
    events = _events(result.trajectory_path)
    assert sum(e["type"] == "model_call" for e in events) == 1
    assert "custom_outputs ran out of values" in json.dumps(result.body["agent_errors"])


def test_mockllm_model_args_that_cannot_reach_the_gateway_are_refused() -> None:
    from evalkit.pit import AgentSpecError

    def local(*_: Any) -> ModelOutput:
        return ModelOutput.from_content("m", "x")

    with pytest.raises(AgentSpecError, match="imports a callable by name"):
        from_inspect_solver("m:s", model="mockllm/model", model_args={"custom_outputs": local})
    with pytest.raises(AgentSpecError, match="generator cannot be sent"):
        from_inspect_solver("m:s", model="mockllm/model", model_args={"custom_outputs": iter([])})
    with pytest.raises(AgentSpecError, match=r"custom_outputs\[1\] is str"):
        from_inspect_solver(
            "m:s", model="mockllm/model", model_args={"custom_outputs": [ModelOutput.from_content("m", "x"), "y"]}
        )
    with pytest.raises(AgentSpecError, match="unknown model_args temperature"):
        from_inspect_solver("m:s", model="mockllm/model", model_args={"temperature": 0})
    with pytest.raises(AgentSpecError, match="registry model"):
        from_inspect_solver("m:s", model="mock/inspect", model_args={"custom_outputs": []})
    with pytest.raises(AgentSpecError, match="cannot find module"):
        from_inspect_solver("m:s", model="mockllm/model", model_args={"custom_outputs": "nowhere_at_all_x:f"})


@needs_bwrap
def test_the_cli_spelling_at_mockllm_serves_inspects_default_output(
    solver_module: str, synth_release_dir: Path, in_tmp: Path
) -> None:
    spec = f"inspect:{solver_module}:trader@mockllm/model"
    result = run(resolve_agent(spec), _cfg(synth_release_dir, spec, arms=("main",), end=RUN_START, probe_items=0))
    assert result.body["valid"] is True, result.body["agent_errors"]
    events = _events(result.trajectory_path)
    calls = [e for e in events if e["type"] == "model_call"]
    assert [(c["model_id"], c["reported_model"], c["text"]) for c in calls] == [
        ("mockllm/model", "mockllm", "Default output from mockllm/model")
    ]
    assert [e["text"] for e in events if e["type"] == "decision"] == ["Default output from mockllm/model"]


def _boom(*_: Any) -> ModelOutput:
    raise RuntimeError("the script broke")


def test_the_gateway_answers_a_failing_mock_script_with_an_error_and_keeps_serving() -> None:
    import asyncio

    from evalkit.pit._gateway import _answer  # pyright: ignore[reportPrivateUsage]
    from evalkit_core.models import Message, Request, request_to_json

    request = json.dumps({"op": "complete", "model": "mockllm/model",
                          "request": request_to_json(Request(messages=(Message("user", "hi"),), max_tokens=10))})
    hosted: dict[str, Any] = {}

    async def go(line: str) -> dict[str, Any]:
        return await _answer(None, hosted, line.encode())

    host = {"op": "host", "model": "mockllm/model", "kind": "inspect-mockllm",
            "args": {"outputs_from": f"{__name__}:_boom", "paths": []}}
    assert asyncio.run(go(json.dumps(host))) == {"ok": True}
    assert asyncio.run(go(request)) == {
        "ok": False, "error_type": "ModelError", "error": "mockllm/model: RuntimeError: the script broke"
    }
    missing = {**host, "args": {"outputs_from": "no_such_module_here:f", "paths": []}}
    answer = asyncio.run(go(json.dumps(missing)))
    assert (answer["ok"], answer["error_type"]) == (False, "ModuleNotFoundError")
    listed = {**host, "args": {"outputs": [ModelOutput.from_content("m-1", "hello").model_dump(mode="json")]}}
    assert asyncio.run(go(json.dumps(listed))) == {"ok": True}
    first = asyncio.run(go(request))
    assert (first["ok"], first["completion"]["text"], first["completion"]["reported_model"]) == (True, "hello", "m-1")
    assert first["completion"]["simulated"] is True and first["completion"]["cost"] == "0"
    ran_out = asyncio.run(go(request))
    assert ran_out["ok"] is False and "custom_outputs ran out of values" in ran_out["error"]
