"""`evalkit run --netns`: the agent must get a network namespace of its own (the wall's, measured), and a model
agent still reaches its model through the gateway, which runs outside the jail with the key."""

from __future__ import annotations

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

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs("bwrap"),
]

KEY_ENV = "EVALKIT_E2E_NETNS_API_KEY"
KEY = "sk-e2e-netns-DO-NOT-LEAK"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits = 0

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        assert self.headers.get("Authorization") == f"Bearer {KEY}"
        _Handler.hits += 1
        data = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "model": "netns-model",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "nothing"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[int]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


AGENT = textwrap.dedent(
    """
    import subprocess, sys

    from evalkit.pit import AgentReply, from_model

    MODEL = from_model("netns/one")


    def agent(prompt, tools):
        # A subprocess cannot even start (one process per job), and a socket of its own would end this process.
        try:
            subprocess.run([sys.executable, "-c", "print(1)"], check=False)
            sub = "started"
        except OSError as exc:
            sub = type(exc).__name__
        reply = MODEL(prompt, tools)
        return AgentReply(picks=reply.picks, text=f"subprocess {sub}; model said {reply.text}")
    """
)


def test_netns_and_a_model_agent_work_together(tmp_path: Path, server: int) -> None:
    (tmp_path / "netagent.py").write_text(AGENT)
    registry = tmp_path / "registry.toml"
    registry.write_text(
        '[models."netns/one"]\nprovider = "openai-compatible"\napi_model = "x"\n'
        f'base_url = "http://127.0.0.1:{server}/v1"\napi_key_env = "{KEY_ENV}"\n'
        "context_window = 100000\nmax_output = 4096\n"
        'prices = { input = "1", output = "1", cache_read = "1", cache_write = "1" }\n'
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "EVALKIT_REGISTRY": str(registry),
        KEY_ENV: KEY,
        "EVALKIT_INSIDE_NETNS": "1",
    }  # the old flag claims nothing: the scope is measured
    proc = subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "run", "--netns", "--json", "--agent", "netagent:agent"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    assert body["valid"] is True
    assert (
        body["network"]["scope"]
        == "network namespace without routes (interfaces: lo; measured from the host)"
    )
    traj = (tmp_path / "out" / "pit" / "trajectory.jsonl").read_text()
    decisions = [json.loads(line) for line in traj.splitlines() if '"type":"decision"' in line]
    assert decisions
    assert {d["text"] for d in decisions} == {"subprocess PermissionError; model said nothing"}
    calls = body["protocol"]["P4_costs_and_frictions"]["model_calls"]
    assert calls == _Handler.hits > 0
    assert KEY not in traj and KEY not in proc.stdout


def test_without_netns_the_scope_is_still_measured(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evalkit_cli", "run", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["network"]["scope"].startswith("network namespace without routes")
