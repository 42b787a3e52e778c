"""Campaign benchmarks: harness overhead per rollout, and throughput against a slow loopback provider.

    uv run python tools/bench/campaign.py [--rollouts 640] [--latency 0.2] [--concurrency 64] [--only-stubbed]

1. **Harness overhead per rollout** (target < 5 ms): a sim model over the seed bank at concurrency 1, grading
   replaced by an instant stub; overhead = (wall time - time inside ``ModelClient.complete``) / rollouts. It is
   what the campaign itself adds per rollout: key, request, budget check, storing the completion, scheduling
   the grade, storing the verdict, progress. A second figure includes the report (reading every row back and
   computing the summary).
2. **Throughput**: an OpenAI-compatible loopback server in its own process answers every request after
   ``--latency`` seconds (with the task's reference solution); the campaign runs at ``--concurrency`` with real
   sandboxed grading, and again with grading stubbed (what the model layer and the campaign alone sustain).
   Printed: calls/s from the first request to the last answer stored, graded rollouts/s (sandbox start
   included), and the ceiling concurrency / latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import evalkit_router._campaign as campaign_module
from evalkit import CodeTask, Sandbox, load_tasks, render_prompt
from evalkit_core.models import ModelClient, load_registry
from evalkit_core.store import Store
from evalkit_router import campaign_report, load_campaign, run_campaign_async

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "tasks"


def _campaign_file(
    directory: Path, *, models: list[str], k: int, concurrency: int, registry: str = ""
) -> Path:
    text = [
        'name = "bench"',
        f"models = {json.dumps(models)}",
        f"k = {k}",
        f"concurrency = {concurrency}",
        "cpu_seconds = 1.0",
    ]
    if registry:
        (directory / "registry.toml").write_text(registry)
        text.append('registry = ["registry.toml"]')
    text += ["", "[tasks]", f'dir = "{BANK}"', ""]
    path = directory / "campaign.toml"
    path.write_text("\n".join(text))
    return path


def _instant_grade(*_args: object) -> tuple[dict[str, Any], None]:
    empty = {"passed": 0, "total": 0, "tests": []}
    return {
        "public": empty,
        "hidden": empty,
        "adversarial": empty,
        "adversarial_set": "",
        "infra_error": None,
    }, None


def overhead(k: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        config = load_campaign(_campaign_file(d, models=["sim/strong"], k=k, concurrency=1))
        # the bench swaps the private grader for an instant stub: it times the harness without the sandbox
        real_grade = campaign_module.grade_one
        campaign_module.grade_one = _instant_grade  # type: ignore[assignment]
        try:
            with Store.open(d / "home") as store:

                async def main() -> tuple[float, float, int]:
                    async with ModelClient(registry=load_registry(), store=store) as client:
                        inner = client.complete
                        spent = [0.0]

                        async def timed(model_id: str, request: Any, **kwargs: Any) -> Any:
                            t0 = time.perf_counter()
                            try:
                                return await inner(model_id, request, **kwargs)
                            finally:
                                spent[0] += time.perf_counter() - t0

                        client.complete = timed  # type: ignore[method-assign]
                        with Sandbox(workers=1) as sandbox:
                            t0 = time.perf_counter()
                            outcome = await run_campaign_async(
                                config, store=store, client=client, sandbox=sandbox
                            )
                            wall = time.perf_counter() - t0
                    return wall, spent[0], outcome.called

                wall, model_time, n = asyncio.run(main())
                t0 = time.perf_counter()
                campaign_report(store, "bench")
                report_time = time.perf_counter() - t0
        finally:
            campaign_module.grade_one = real_grade
    per = (wall - model_time) / n * 1000
    print(f"overhead: {n} rollouts (sim/strong, concurrency 1, grading stubbed)")
    print(f"  wall {wall:.3f} s, inside the model layer {model_time:.3f} s")
    print(f"  harness overhead per rollout: {per:.3f} ms (target < 5 ms)")
    print(f"  with the report: {per + report_time / n * 1000:.3f} ms (report {report_time * 1000:.1f} ms)")


# --------------------------------------------------------------------------------------------- throughput


def _serve(port_out: Any, latency: float, answers: dict[str, str]) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            prompt = body["messages"][-1]["content"]
            time.sleep(latency)
            text = answers.get(prompt, "no")
            data = json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": "bench",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": len(prompt) // 4 + 1, "completion_tokens": len(text) // 4 + 1},
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    server = Server(("127.0.0.1", 0), Handler)
    port_out.put(server.server_address[1])
    server.serve_forever()


def throughput(rollouts: int, latency: float, concurrency: int, *, stub_grading: bool = False) -> None:
    tasks = load_tasks(BANK)
    answers = {}
    for t in tasks:
        ref = (
            f"```python\n{t.reference}```"
            if isinstance(t, CodeTask)
            else f"```json\n{json.dumps(t.reference)}\n```"
        )
        answers[render_prompt(t)] = ref
    k = max(1, -(-rollouts // len(tasks)))
    queue: Any = multiprocessing.get_context("fork").Queue()
    proc = multiprocessing.get_context("fork").Process(
        target=_serve, args=(queue, latency, answers), daemon=True
    )
    proc.start()
    port = queue.get(timeout=10)
    registry = (
        '[models."bench/slow"]\nprovider = "openai-compatible"\napi_model = "slow"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\napi_key_env = ""\ncontext_window = 32000\nmax_output = 4096\n'
        'prices = { input = "1", output = "2", cache_read = "0.1", cache_write = "1" }\n'
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            config = load_campaign(
                _campaign_file(d, models=["bench/slow"], k=k, concurrency=concurrency, registry=registry)
            )
            stored_times: list[float] = []
            started_times: list[float] = []
            lock = threading.Lock()
            with Store.open(d / "home") as store:

                async def main() -> tuple[float, int, int]:
                    async with ModelClient(
                        registry=load_registry(config.registry, env={}), store=store
                    ) as client:
                        inner = client.complete

                        async def timed(model_id: str, request: Any, **kwargs: Any) -> Any:
                            with lock:
                                started_times.append(time.perf_counter())
                            out = await inner(model_id, request, **kwargs)
                            with lock:
                                stored_times.append(time.perf_counter())
                            return out

                        client.complete = timed  # type: ignore[method-assign]
                        with Sandbox(workers=os.cpu_count() or 1) as sandbox:
                            t0 = time.perf_counter()
                            outcome = await run_campaign_async(
                                config, store=store, client=client, sandbox=sandbox
                            )
                            return time.perf_counter() - t0, outcome.called, outcome.planned

                t_start = time.perf_counter()
                real_grade = campaign_module.grade_one
                if stub_grading:
                    campaign_module.grade_one = _instant_grade  # type: ignore[assignment]
                try:
                    wall, called, planned = asyncio.run(main())
                finally:
                    campaign_module.grade_one = real_grade
                calls_wall = max(stored_times) - min(started_times) if stored_times else wall
                setup = min(started_times) - t_start if started_times else 0.0
                rep = campaign_report(store, "bench")
    finally:
        proc.terminate()
        proc.join(timeout=5)
    m = rep.summary["per_model"][0]  # type: ignore[index]
    print(
        f"throughput: {planned} rollouts ({len(tasks)} tasks x K={k}), server latency {latency * 1000:.0f} ms, concurrency {concurrency}"
    )
    print(
        f"  model calls: {called} in {calls_wall:.2f} s from the first request to the last answer stored = "
        f"{called / calls_wall:.1f} calls/s (ceiling {concurrency / latency:.0f}/s); setup before the first call "
        f"{setup:.2f} s (sandbox start)"
    )
    print(
        f"  graded rollouts ({'grading stubbed' if stub_grading else f'real sandbox, {os.cpu_count()} cores'}): "
        f"{planned} in {wall:.2f} s = {planned / wall:.1f} rollouts/s"
    )
    if not stub_grading:
        print(f"  hidden pass@1 {m['hidden_pass@1']}, cost ${Decimal(str(m['cost_usd']))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--k", type=int, default=10, help="samples per task for the overhead run (68 tasks)")
    parser.add_argument("--rollouts", type=int, default=640, help="rollouts for the throughput run")
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--only-stubbed", action="store_true", help="only the throughput run with grading stubbed"
    )
    args = parser.parse_args()
    if not args.only_stubbed:
        overhead(args.k)
        throughput(args.rollouts, args.latency, args.concurrency)
    throughput(args.rollouts, args.latency, args.concurrency, stub_grading=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
