"""Helpers for campaign tests: a loopback OpenAI-compatible fake model server, and campaign files.

The server answers ``POST /v1/chat/completions``. The answer is looked up by (api model, prompt) in
``answers`` (the test fills it from the task bank), after ``latency`` seconds; usage is derived from the text
lengths, so costs are deterministic. It counts every request it receives per (api model, prompt) — a campaign's
requests for one task on one model are identical across samples, so that count is the calls for that
(model, task) — and counts the replies it finished writing.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evalkit import CodeTask, Task, load_tasks, render_prompt

ROOT = Path(__file__).resolve().parents[2]
SEED_BANK = ROOT / "tasks"
SUBSET = ("code/median/001", "code/second-largest/001", "structured/access-log/001")


class FakeModelServer:
    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.answers: dict[tuple[str, str], str] = {}
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self.replied: collections.Counter[tuple[str, str]] = collections.Counter()
        self.lock = threading.Lock()
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.replied.clear()

    def total(self) -> int:
        with self.lock:
            return sum(self.calls.values())


def _handler(fake: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            except (ValueError, OSError):  # the client died while sending: no request arrived
                return
            model, prompt = body["model"], body["messages"][-1]["content"]
            with fake.lock:
                fake.calls[(model, prompt)] += 1
            time.sleep(fake.latency)
            text = fake.answers.get((model, prompt), "I cannot help with that.")
            reply = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": f"{model}-reported",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": len(prompt) // 4 + 1, "completion_tokens": len(text) // 4 + 1},
            }
            data = json.dumps(reply).encode()
            try:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                return
            with fake.lock:
                fake.replied[(model, prompt)] += 1

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def start_server(fake: FakeModelServer) -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = _Server(("127.0.0.1", 0), _handler(fake))
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


def subset_tasks() -> list[Task]:
    return [t for t in load_tasks(SEED_BANK) if t.id in SUBSET]


def good_answer(task: Task) -> str:
    if isinstance(task, CodeTask):
        return f"Here it is:\n\n```python\n{task.reference}```\n"
    return f"```json\n{json.dumps(task.reference)}\n```\n"


def teach(fake: FakeModelServer) -> None:
    """``good`` answers every task with its reference; ``spotty`` only the first; both deterministically."""
    for i, task in enumerate(subset_tasks()):
        prompt = render_prompt(task)
        fake.answers[("good", prompt)] = good_answer(task)
        fake.answers[("spotty", prompt)] = good_answer(task) if i == 0 else "```python\nx = 1\n```\n"


def registry_toml(base: str) -> str:
    out = ['[registry]\nprices_as_of = "2025-06-01"\n']
    for name in ("good", "spotty"):
        out.append(
            f'[models."fake/{name}"]\nprovider = "openai-compatible"\napi_model = "{name}"\n'
            f'base_url = "{base}/v1"\napi_key_env = ""\ncontext_window = 32000\nmax_output = 4096\n'
            'prices = { input = "3", output = "15", cache_read = "0.30", cache_write = "3.75" }\n'
        )
    return "\n".join(out)


def write_campaign(
    directory: Path,
    *,
    name: str = "c",
    models: tuple[str, ...] = ("sim/weak", "sim/strong"),
    k: int = 3,
    ids: tuple[str, ...] = SUBSET,
    budget: str | None = None,
    concurrency: int = 4,
    registry: str | None = None,
    extra: str = "",
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        f'name = "{name}"',
        f"models = {json.dumps(list(models))}",
        f"k = {k}",
        "temperature = 0.0",
        f"concurrency = {concurrency}",
        "cpu_seconds = 1.0",
    ]
    if budget is not None:
        lines.append(f'budget_usd = "{budget}"')
    if registry is not None:
        (directory / "registry.toml").write_text(registry)
        lines.append('registry = ["registry.toml"]')
    if extra:
        lines.append(extra)
    lines += ["", "[tasks]", f'dir = "{SEED_BANK}"', f"ids = {json.dumps(list(ids))}", ""]
    path = directory / "campaign.toml"
    path.write_text("\n".join(lines))
    return path
