"""Simulated models (``provider = "sim"``): offline stand-ins with a declared success rate and price.

The seam. Core must not import the ``evalkit`` package (tasks live there), so a sim model cannot look a task
up.
Instead the caller puts what it needs on the request: ``Request.sim_context`` carries the task's reference
solution (``reference`` text, or ``reference_json`` for structured tasks), optional hand-written wrong answers
(``mutants``) and a ``sample`` index. Only this module reads it; the Anthropic and OpenAI wire formats never
put it
in a request body. An evalkit-layer solver builds the context from its task and calls
``ModelClient.complete(model_id, request)`` exactly as it would for a real model.

The answer is chosen deterministically from the digest of the request (sim_context included, model id not):
a draw ``u`` in [0, 1) from that digest; the model answers with the reference when ``u < success_rate``, else
with
a plausible mutant picked by a second draw. The draw is shared across sim models, so a stronger sim solves
every
request a weaker one solves, as if ``u`` were the difficulty of that (task, sample). Generic mutators:
off-by-one
on an integer literal, a flipped comparison operator, a dropped ``if`` branch that guards an edge case (one
that
returns, raises, breaks or continues); for JSON: a dropped key, a perturbed value, a dropped list item. Token
counts
come from the text (about four characters a token); usage and cost then take the same cost, budget and store
path
as a real call.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

from evalkit_core._canonical import digest
from evalkit_core.models._errors import ModelError
from evalkit_core.models._providers import Reply
from evalkit_core.models._registry import ModelEntry
from evalkit_core.models._types import JsonValue, Request, Usage, request_to_json

__all__ = [
    "CHARS_PER_TOKEN",
    "MUTATORS",
    "drop_edge_case_branch",
    "flip_comparison",
    "json_mutants",
    "off_by_one",
    "simulate",
    "text_mutants",
]

CHARS_PER_TOKEN = 4

_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")
_CMP = re.compile(r"(?<![<>=!\-])(<=|>=|==|!=|<|>)(?![<>=])")
_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_IF = re.compile(r"^([ \t]*)if\b.*:[ \t]*(#.*)?$")
_IF_ONE_LINE = re.compile(r"^[ \t]*if\b[^\n]*:[ \t]*(return|raise|continue|break)\b.*$")
_EXIT = re.compile(r"^\s*(return|raise|continue|break)\b", re.MULTILINE)


def off_by_one(text: str) -> list[str]:
    """Every integer literal moved by one, up and down (never below zero)."""
    out: list[str] = []
    for m in _INT.finditer(text):
        n = int(m.group())
        for k in (n + 1, n - 1):
            if k >= 0:
                out.append(text[: m.start()] + str(k) + text[m.end() :])
    return out


def flip_comparison(text: str) -> list[str]:
    """Every comparison operator flipped at its boundary (``<`` to ``<=``, ``==`` to ``!=``, ...)."""
    return [text[: m.start()] + _FLIP[m.group()] + text[m.end() :] for m in _CMP.finditer(text)]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def drop_edge_case_branch(text: str) -> list[str]:
    """Each short ``if`` block (at most four lines, no ``elif``/``else``) that exits early, removed whole."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    for i, line in enumerate(lines):
        if _IF_ONE_LINE.match(line.rstrip("\n")):
            out.append("".join(lines[:i] + lines[i + 1 :]))
            continue
        m = _IF.match(line.rstrip("\n"))
        if not m:
            continue
        base = len(m.group(1))
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            j += 1
        body = "".join(lines[i + 1 : j])
        follows = lines[j].lstrip() if j < len(lines) else ""
        if 0 < j - i - 1 <= 4 and _EXIT.search(body) and not follows.startswith(("elif", "else")):
            out.append("".join(lines[:i] + lines[j:]))
    return out


MUTATORS: Mapping[str, Callable[[str], list[str]]] = {
    "off_by_one": off_by_one,
    "flip_comparison": flip_comparison,
    "drop_edge_case_branch": drop_edge_case_branch,
}


def text_mutants(reference: str) -> list[tuple[str, str]]:
    """(mutator name, mutant) pairs, each different from ``reference``, deduplicated, in a stable order."""
    seen = {reference}
    out: list[tuple[str, str]] = []
    for name, mutate in MUTATORS.items():
        for m in mutate(reference):
            if m not in seen:
                seen.add(m)
                out.append((name, m))
    return out


def _perturb(v: Any) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return v + 1.0
    if isinstance(v, str):
        return v + "x" if v else "x"
    return 0 if v is None else None


def json_mutants(value: JsonValue) -> list[tuple[str, JsonValue]]:
    """Mutants of a JSON value: each object key dropped, each scalar perturbed, each list's last item
    dropped."""
    out: list[tuple[str, JsonValue]] = []

    def walk(v: Any, rebuild: Callable[[Any], Any]) -> None:
        if isinstance(v, Mapping):
            d = cast("Mapping[str, Any]", v)
            for k in d:
                out.append(("drop_key", rebuild({kk: vv for kk, vv in d.items() if kk != k})))
            for k in d:
                walk(d[k], lambda new, k=k, d=d: rebuild({**d, k: new}))
        elif isinstance(v, list):
            items = cast("list[Any]", v)
            if items:
                out.append(("drop_item", rebuild(items[:-1])))
            for i, item in enumerate(items):
                walk(item, lambda new, i=i, items=items: rebuild([*items[:i], new, *items[i + 1 :]]))
        else:
            out.append(("perturb_value", rebuild(_perturb(v))))

    walk(value, lambda new: new)
    return out


def _draw(seed: str, label: str) -> float:
    h = hashlib.sha256(f"{seed}|{label}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def _tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _prompt_text(request: Request) -> str:
    body = request_to_json(request, include_sim_context=False)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def simulate(entry: ModelEntry, request: Request) -> Reply:
    assert entry.sim is not None
    sc = request.sim_context
    if sc is None or (sc.reference is None and sc.reference_json is None):
        raise ModelError(
            entry.id,
            "is a SIMULATED model and answers only requests that carry sim_context with a reference solution "
            "(reference or reference_json); it cannot answer free-form prompts",
            attempts=0,
        )
    seed = digest(request_to_json(request))
    pool: list[tuple[str, str]] = [("given", m) for m in sc.mutants]
    if sc.reference is not None:
        reference = sc.reference
        pool += text_mutants(reference)
    else:
        reference = json.dumps(sc.reference_json, ensure_ascii=False)
        pool += [(name, json.dumps(v, ensure_ascii=False)) for name, v in json_mutants(sc.reference_json)]
    pool = [(n, m) for n, m in pool if m != reference]
    if _draw(seed, "success") < entry.sim.success_rate:
        variant, text = "reference", reference
    elif pool:
        name, text = pool[int(_draw(seed, "mutant") * len(pool))]
        variant = f"mutant:{name}"
    else:  # nothing to mutate: answer with the reference cut short
        lines = reference.rstrip("\n").splitlines(keepends=True)
        variant, text = "mutant:truncated", "".join(lines[:-1])
    stop = "end_turn"
    if _tokens(text) > request.max_tokens:
        text, stop = text[: request.max_tokens * CHARS_PER_TOKEN], "max_tokens"
    usage = Usage(input_tokens=max(1, _tokens(_prompt_text(request))), output_tokens=max(1, _tokens(text)))
    raw: dict[str, Any] = {
        "simulated": True,
        "model": entry.id,
        "variant": variant,
        "text": text,
        "stop_reason": stop,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }
    return Reply(
        text=text,
        tool_calls=(),
        stop_reason=stop,
        usage=usage,
        reported_model=f"{entry.id} (simulated)",
        raw=raw,
    )
