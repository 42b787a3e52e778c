"""The model solver of ``evalkit eval`` (and of campaigns and routing): the request one sample sends, and the
temperature-0 response cache in ``$EVALKIT_HOME/response-cache``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

if TYPE_CHECKING:
    from evalkit_core.models import Completion, JsonValue, Request

from evalkit.grading._tasks import StructuredTask, Task, render_prompt
from evalkit.grading._validate import reference_solution
from evalkit_core import atomic_write_bytes, canonical_bytes, digest

__all__ = ["CACHE_DIR_NAME", "model_completions", "model_request"]


def model_request(
    task: Task, sample: int, *, max_tokens: int = 2048, temperature: float | None = 0.0
) -> Request:
    """The request any model solver (eval, campaigns, routing) sends for one sample of ``task``: the rendered
    prompt, public tests only.

    ``sim_context`` carries the reference for simulated models (``sim/*``) only; real providers never send it.
    """
    from evalkit_core.models import (  # the model layer (httpx) loads only when a model is used
        Request,
        SimContext,
    )

    if isinstance(task, StructuredTask):
        sim = SimContext(reference_json=cast("JsonValue", task.reference), sample=sample)
    else:
        sim = SimContext(reference=reference_solution(task), sample=sample)
    return Request.of(render_prompt(task), max_tokens=max_tokens, temperature=temperature, sim_context=sim)


CACHE_DIR_NAME = "response-cache"


def _cache_key(entry: Any, request: Request) -> str:
    """What decides a temperature-0 answer: the model as the provider knows it, and the whole request (the
    sim context included, on which a simulated model's answer depends). Prices are not part of it."""
    from evalkit_core.models import request_to_json

    model = {"id": entry.id, "provider": entry.provider, "api_model": entry.api_model, "base_url": entry.base_url}
    return digest({"model": model, "request": request_to_json(request, include_sim_context=True)})


def _cache_path(key: str) -> Path:
    from evalkit_core.store import evalkit_home

    hexa = key.split(":", 1)[1]
    return evalkit_home() / CACHE_DIR_NAME / hexa[:2] / f"{hexa}.json"


def _cached(key: str) -> Completion | None:
    """A stored answer for ``key``, as a call that cost nothing (``call_id`` ``cached:...``); None if absent or
    unreadable (a damaged entry is asked again, not trusted)."""
    from evalkit_core.models import completion_from_json

    path = _cache_path(key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        done = completion_from_json(cast("dict[str, Any]", data))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return attrs.evolve(done, call_id=f"cached:{done.call_id}", cost=Decimal(0), charged=Decimal(0), attempts=0)


def _remember(key: str, completion: Completion) -> None:
    from evalkit_core.models import completion_to_json

    atomic_write_bytes(_cache_path(key), canonical_bytes(completion_to_json(completion)))


def model_completions(
    tasks: Sequence[Task], model_id: str, k: int, *, concurrency: int = 16, cache: bool = True
) -> list[tuple[Task, int, Completion, bool]]:
    """Ask ``model_id`` (through the model layer: registry, cost, budget, store) for ``k`` samples per task.

    With ``cache``, a temperature-0 request (sample 0) is first looked up in ``$EVALKIT_HOME/response-cache``:
    a hit is returned as a call that cost nothing and is flagged ``True`` (no request is made, nothing is
    charged); a miss is asked and its answer stored. Samples above 0 (temperature 0.8) are always asked."""
    import asyncio

    from evalkit_core.models import ModelClient

    async def go() -> list[tuple[Task, int, Completion, bool]]:
        gate = asyncio.Semaphore(concurrency)
        async with ModelClient() as client:
            entry = client.registry.get(model_id)

            async def one(task: Task, j: int) -> tuple[Task, int, Completion, bool]:
                request = model_request(task, j, temperature=0.0 if j == 0 else 0.8)
                key = _cache_key(entry, request) if cache and request.temperature == 0 else None
                if key is not None and (hit := _cached(key)) is not None:
                    return task, j, hit, True
                async with gate:
                    done = await client.complete(model_id, request)
                if key is not None:
                    _remember(key, done)
                return task, j, done, False

            # a TaskGroup, not gather: the first failure (a budget refusal) cancels the other calls, and they
            # settle their reservations before the client closes the store
            try:
                async with asyncio.TaskGroup() as group:
                    running = [group.create_task(one(t, j)) for t in tasks for j in range(k)]
            except BaseExceptionGroup as failed:
                raise failed.exceptions[0] from None
            return [r.result() for r in running]

    return asyncio.run(go())
