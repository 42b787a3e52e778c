"""The adversary: proposes inputs a candidate may get wrong, validates them in the sandbox, banks counterexamples.

It proposes; it never decides. A proposal becomes a :class:`Counterexample` only when the task's reference, run
twice in the sandbox (once in proposal order, once in reverse order, under two seeds of ``random``, so neither
hidden state nor randomness passes), succeeds both times with the same JSON-representable result (NaN and infinities refused), and the
candidate's output differs (``json_equal`` with the task's tolerance), or it raises, crashes or times out. A third
reference run confirms every disagreement before it counts. The expected value always comes from the reference.

Proposers:

- ``fuzz``: edge values per argument type and neighbours of the public examples, then inputs drawn by a seeded
  hypothesis run from strategies built from the task's ``arg_types``; the whole batch runs through the
  reference and the candidate in a few sandbox jobs (not one process per input); each kept counterexample is
  then shrunk greedily, one sandbox batch of simpler inputs per round.
- ``model:<id>``: asks a model (through :class:`evalkit_core.models.ModelClient`, so budgeted and recorded) for
  a JSON array of ``{"args", "kwargs", "category", "hint"}``. A simulated model answers from a
  :class:`SimContext` whose reference is the fuzz seed inputs, so the offline path is exercised end to end.

Banked counterexamples live in the store's ``counterexamples`` table, one row per (task, input digest);
:func:`adversarial_tests` returns a task's adversarial test set. Nothing here feeds ``render_prompt``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal, cast, get_args

import attrs

from evalkit.grading._eval import read_replay
from evalkit.grading._extract import ExtractionError, extract_code, extract_json
from evalkit.grading._fuzz import (
    CATEGORIES,
    Category,
    classify,
    input_size,
    random_inputs,
    seed_inputs,
    shrink_args,
)
from evalkit.grading._tasks import JSON, CallTest, CodeTask, Task, conforms, load_tasks, render_prompt
from evalkit.grading._verifiers import json_equal
from evalkit.wall import Sandbox, SandboxJob, SandboxLimits, TestRun
from evalkit_core import CanonicalError, ConfigError, digest, digest_bytes
from evalkit_core.models import BudgetExceeded, ModelClient, Request, SimContext, load_registry
from evalkit_core.store import Store, utc_now

__all__ = [
    "CATEGORIES",
    "INVALID_REASONS",
    "MINING_LIMITS",
    "Category",
    "Counterexample",
    "InvalidReason",
    "MiningResult",
    "Proposal",
    "Rejection",
    "adversarial_tests",
    "bank_counterexamples",
    "banked_counterexamples",
    "candidate_digest",
    "fuzz_proposals",
    "mine",
    "mine_bank",
    "model_proposals",
    "parse_model_proposals",
    "validate_proposals",
]

InvalidReason = Literal[
    "reference_raised",
    "nondeterministic",
    "nan",
    "not_json",
    "wrong_type",
    "duplicate",
    "candidate_agrees",
    "redundant",
    "infra_error",
]
INVALID_REASONS: tuple[InvalidReason, ...] = get_args(InvalidReason)  # one list: the Literal
MINING_LIMITS = SandboxLimits(cpu_seconds=0.5, wall_seconds=2.0)
_ACTUAL_CHARS = 200


# --------------------------------------------------------------------------------------------- values


@attrs.frozen
class Proposal:
    """An input for a call-based code task, with why it might break a candidate. It decides nothing."""

    args: tuple[JSON, ...]
    kwargs: Mapping[str, JSON] = attrs.field(factory=lambda: cast("dict[str, JSON]", {}))
    category: Category = "other"
    hint: str = ""
    proposer: str = "fuzz"

    def input_json(self) -> dict[str, JSON]:
        return {"args": list(self.args), "kwargs": dict(self.kwargs)}

    def to_json(self) -> dict[str, JSON]:
        return {**self.input_json(), "category": self.category, "hint": self.hint, "proposer": self.proposer}


@attrs.frozen
class Rejection:
    """A proposal that banks nothing, and why (one of :data:`INVALID_REASONS`)."""

    proposal: Proposal
    reason: InvalidReason
    detail: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {"proposal": self.proposal.to_json(), "reason": self.reason, "detail": self.detail}


@attrs.frozen
class Counterexample:
    """A validated input the candidate gets wrong; ``expected`` is the reference's result (never NaN)."""

    task_id: str
    task_digest: str
    args: tuple[JSON, ...]
    kwargs: Mapping[str, JSON]
    expected: JSON
    category: Category
    hint: str
    found_by: str
    candidate_digest: str
    actual: str

    @property
    def input_json(self) -> dict[str, JSON]:
        return {"args": list(self.args), "kwargs": dict(self.kwargs)}

    @property
    def input_digest(self) -> str:
        return digest(self.input_json)

    def to_test(self) -> CallTest:
        return CallTest(self.args, dict(self.kwargs), self.expected)

    def to_json(self) -> dict[str, JSON]:
        return {
            "task_id": self.task_id,
            "task_digest": self.task_digest,
            **self.input_json,
            "expected": self.expected,
            "input_digest": self.input_digest,
            "category": self.category,
            "hint": self.hint,
            "found_by": self.found_by,
            "candidate_digest": self.candidate_digest,
            "actual": self.actual,
        }


@attrs.frozen
class MiningResult:
    """One (task, candidate) mining pass: how many proposals ran, what was found, banked, and rejected why."""

    task_id: str
    candidate: str  # a label: reference, replay line, model id and sample
    candidate_digest: str
    proposer: str
    proposals: int
    counterexamples: tuple[Counterexample, ...]
    banked: int
    rejections: tuple[Rejection, ...]
    note: str = ""

    def invalid_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(INVALID_REASONS, 0)
        for rej in self.rejections:
            counts[rej.reason] += 1
        return {k: v for k, v in counts.items() if v}

    def to_json(self) -> dict[str, JSON]:
        return {
            "task_id": self.task_id,
            "candidate": self.candidate,
            "candidate_digest": self.candidate_digest,
            "proposer": self.proposer,
            "proposals": self.proposals,
            "counterexamples": [c.to_json() for c in self.counterexamples],
            "banked": self.banked,
            "invalid": cast("dict[str, JSON]", self.invalid_counts()),
            "note": self.note,
        }


def candidate_digest(source: str) -> str:
    """The digest of a candidate's source text."""
    return digest_bytes(source.encode("utf-8"))


# --------------------------------------------------------------------------------------------- validation


def _finite_json(value: object, depth: int = 0) -> bool:
    """True when ``value`` is plain JSON with finite floats and string keys."""
    if depth > 100:
        return False
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite_json(v, depth + 1) for v in cast("list[object]", value))
    if isinstance(value, dict):
        items = cast("dict[object, object]", value)
        return all(isinstance(k, str) and _finite_json(v, depth + 1) for k, v in items.items())
    return False


def _input_problem(task: CodeTask, p: Proposal) -> tuple[InvalidReason, str] | None:
    if not _finite_json(list(p.args)) or not _finite_json(dict(p.kwargs)):
        return "not_json", "the input is not plain JSON (NaN, infinity or a non-JSON value)"
    if not p.kwargs:
        if len(p.args) != len(task.arg_types):
            return "wrong_type", f"{len(p.args)} arguments but the task takes {len(task.arg_types)}"
        for i, (a, spec) in enumerate(zip(p.args, task.arg_types, strict=True)):
            if not conforms(a, spec):
                return "wrong_type", f"argument {i} is not a {spec}"
    return None


def _short(value: JSON) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _ACTUAL_CHARS else text[: _ACTUAL_CHARS - 1] + "…"


def _describe(run: TestRun) -> str:
    if run.status == "value":
        return _short(run.value)
    if run.status == "timeout":
        return f"timeout: {run.error or 'time limit exceeded'}"
    detail = f"{run.error_type}: {run.error}".strip(": ") if run.error_type else run.error
    return f"{run.status}: {detail}".rstrip(": ")


def _reference_failure(a: TestRun, b: TestRun) -> tuple[InvalidReason, str] | None:
    """Why two reference runs of one input bank nothing, or None when both gave the same plain value."""
    if a.status == "value" and b.status == "value":
        if not json_equal(a.value, b.value) or not json_equal(b.value, a.value):
            return "nondeterministic", f"the reference answered {_short(a.value)} then {_short(b.value)}"
        if not _finite_json(a.value):
            return "nan", "the reference's result is not finite"
        return None
    for r in (a, b):
        if r.status == "bad_return":
            if "non-finite" in r.error:
                return "nan", r.error
            return "not_json", r.error
    if (a.status == "value") != (b.status == "value") or a.status != b.status:
        return "nondeterministic", f"the reference gave {_describe(a)} then {_describe(b)}"
    return "reference_raised", _describe(a)


@attrs.frozen
class _Checked:
    counterexamples: tuple[Counterexample, ...]
    rejections: tuple[Rejection, ...]
    timeouts: int


def validate_proposals(
    task: CodeTask,
    candidate: str,
    proposals: Sequence[Proposal],
    sandbox: Sandbox,
    *,
    known: Iterable[str] = (),
) -> tuple[list[Counterexample], list[Rejection]]:
    """Validate ``proposals`` against ``candidate`` (source code) for ``task``.

    ``known`` holds input digests already banked for the task (those proposals are ``duplicate``). Returns the
    counterexamples (in proposal order) and the rejections.
    """
    checked = _validate(task, candidate, proposals, sandbox, set(known))
    return list(checked.counterexamples), list(checked.rejections)


def _validate(
    task: CodeTask, candidate: str, proposals: Sequence[Proposal], sandbox: Sandbox, seen: set[str]
) -> _Checked:
    rejections: list[Rejection] = []
    pending: list[Proposal] = []
    for p in proposals:
        problem = _input_problem(task, p)
        if problem is None:
            try:
                d = digest(p.input_json())
            except CanonicalError as exc:
                problem = ("not_json", str(exc))
            else:
                if d in seen:
                    problem = (
                        "duplicate",
                        "the same input (by canonical digest) was already proposed or banked",
                    )
                seen.add(d)
        if problem is not None:
            rejections.append(Rejection(p, *problem))
        else:
            pending.append(p)
    if not pending:
        return _Checked((), tuple(rejections), 0)
    inputs = [p.input_json() for p in pending]
    n = len(inputs)
    ref_a, ref_b, cand = sandbox.run_many(
        [
            # the reference answers many inputs in one process (fresh=False: it is trusted, and the reversed
            # second run still shows an order-dependent one); the candidate gets a fresh process per input
            # under two seeds of random, so that a reference that draws from it shows it
            SandboxJob(task.reference, task.entry_point, tuple(inputs), fresh=False, seed=1),
            SandboxJob(task.reference, task.entry_point, tuple(reversed(inputs)), fresh=False, seed=2),
            SandboxJob(candidate, task.entry_point, tuple(inputs)),
        ]
    )
    for run in (ref_a, ref_b, cand):
        if run.infra_error is not None:
            rejections += [Rejection(p, "infra_error", run.infra_error) for p in pending]
            return _Checked((), tuple(rejections), 0)
    if ref_a.load_status != "ok" or ref_b.load_status != "ok":
        detail = f"the reference did not load: {ref_a.load_error or ref_b.load_error}"
        rejections += [Rejection(p, "reference_raised", detail) for p in pending]
        return _Checked((), tuple(rejections), 0)
    digest_of_candidate = candidate_digest(candidate)
    disagreements: list[tuple[int, JSON, str]] = []
    timeouts = 0
    for i, p in enumerate(pending):
        a, b = ref_a.tests[i], ref_b.tests[n - 1 - i]
        failure = _reference_failure(a, b)
        if failure is not None:
            rejections.append(Rejection(p, *failure))
            continue
        expected = a.value
        if cand.load_status != "ok":
            disagreements.append((i, expected, f"load {cand.load_status}: {cand.load_error}"))
            continue
        c = cand.tests[i]
        if c.status == "value" and json_equal(c.value, expected, task.float_tolerance):
            rejections.append(Rejection(p, "candidate_agrees"))
            continue
        timeouts += c.status == "timeout"
        disagreements.append((i, expected, _describe(c)))
    found: list[Counterexample] = []
    if disagreements:  # a third reference run confirms each disagreement before it counts
        confirm = sandbox.run(
            SandboxJob(
                task.reference, task.entry_point, tuple(inputs[i] for i, _, _ in disagreements), fresh=False, seed=3
            )
        )
        for (i, expected, actual), again in zip(disagreements, confirm.tests, strict=True):
            p = pending[i]
            if confirm.infra_error is not None:
                rejections.append(Rejection(p, "infra_error", confirm.infra_error))
            elif again.status != "value" or not json_equal(again.value, expected):
                rejections.append(
                    Rejection(p, "nondeterministic", f"a third reference run gave {_describe(again)}")
                )
            else:
                found.append(
                    Counterexample(
                        task_id=task.id,
                        task_digest=task.digest,
                        args=p.args,
                        kwargs=dict(p.kwargs),
                        expected=expected,
                        category=p.category,
                        hint=p.hint,
                        found_by=p.proposer,
                        candidate_digest=digest_of_candidate,
                        actual=actual,
                    )
                )
    return _Checked(tuple(found), tuple(rejections), timeouts)


# --------------------------------------------------------------------------------------------- mining


def fuzz_proposals(task: CodeTask, *, budget: int = 200, seed: int = 0) -> list[Proposal]:
    """Up to ``budget`` proposals: edge values and public-example neighbours first, then seeded random inputs."""
    out: list[Proposal] = []
    seen: set[str] = set()

    def add(args: list[JSON], category: Category, hint: str) -> None:
        key = json.dumps(args, sort_keys=True)
        if key not in seen and len(out) < budget:
            seen.add(key)
            out.append(Proposal(tuple(args), {}, category, hint, "fuzz"))

    for args, category, hint in seed_inputs(task):
        add(args, category, hint)
    rest = budget - len(out)
    if rest > 0:
        # hypothesis may repeat an input; draw a few more than needed (``add`` stops at the budget)
        for args in random_inputs(task.arg_types, rest + rest // 4 + 8, seed):
            add(args, classify(args), f"random input (seed {seed})")
    return out


def _shrink(
    task: CodeTask, candidate: str, cx: Counterexample, sandbox: Sandbox, seen: set[str], rounds: int
) -> tuple[Counterexample, int]:
    """Greedy shrinking: each round, one sandbox batch of simpler inputs; keep the smallest that still breaks
    the candidate. Returns the smallest counterexample and the number of rounds that made progress."""
    best, done = cx, 0
    if cx.kwargs:
        return best, 0
    hangs = cx.actual.startswith("timeout")
    for _ in range(2 if hangs else rounds):
        # a candidate that hangs costs the CPU limit per option: try only a few then
        options = [
            Proposal(tuple(a), {}, best.category, best.hint, best.found_by)
            for a in shrink_args(list(best.args), task.arg_types, limit=6 if hangs else 48)
        ]
        checked = _validate(task, candidate, options, sandbox, set(seen))
        hangs = hangs or checked.timeouts > 0
        if not checked.counterexamples:
            break
        best = min(checked.counterexamples, key=lambda c: input_size(c.args, c.kwargs))
        done += 1
    if done:
        before, after = input_size(cx.args)[0], input_size(best.args)[0]
        category = best.category
        if category == "large_input" and classify(best.args) != "large_input":
            category = classify(best.args)
        best = attrs.evolve(best, category=category, hint=f"{cx.hint}; shrunk from {before} to {after} chars")
    return best, done


def mine(
    task: CodeTask,
    candidate: str,
    proposals: Sequence[Proposal],
    sandbox: Sandbox,
    *,
    known: Iterable[str] = (),
    shrink: bool = True,
    max_counterexamples: int | None = 3,
    chunk: int = 64,
    shrink_rounds: int = 12,
) -> tuple[int, list[Counterexample], list[Rejection]]:
    """Validate ``proposals`` in chunks (stopping early once enough is found or the candidate starts timing
    out), keep at most ``max_counterexamples`` (the smallest per category first), shrink them.

    Returns the number of proposals validated, the counterexamples, and the rejections (surplus failing
    proposals are ``redundant``).
    """
    seen = set(known)
    found: list[Counterexample] = []
    rejections: list[Rejection] = []
    ran = 0
    cap = max_counterexamples
    start, size = 0, min(8, chunk)  # small chunks first: a candidate that hangs costs the CPU limit per input
    while start < len(proposals):
        part = proposals[start : start + size]
        checked = _validate(task, candidate, part, sandbox, seen)
        ran += len(part)
        start += len(part)
        size = min(chunk, size * 2)
        found += checked.counterexamples
        rejections += checked.rejections
        if cap is not None and (len(found) >= 8 * cap or (found and checked.timeouts)):
            break
    found.sort(key=lambda c: input_size(c.args, c.kwargs))
    kept: list[Counterexample] = []
    if cap is None:
        kept = list(found)
    else:
        for category in CATEGORIES:
            first = next((c for c in found if c.category == category), None)
            if first is not None and len(kept) < cap:
                kept.append(first)
        for c in found:
            if len(kept) >= cap:
                break
            if c not in kept:
                kept.append(c)
    kept_ids = {id(c) for c in kept}
    for c in found:
        if id(c) not in kept_ids:
            p = Proposal(c.args, c.kwargs, c.category, c.hint, c.found_by)
            rejections.append(Rejection(p, "redundant", "a smaller failing input of its category is kept"))
    if not shrink:
        return ran, kept, rejections
    # shrinking must not land on an input already banked or on another kept counterexample
    out: list[Counterexample] = []
    taken = set(known) | {c.input_digest for c in kept}
    for c in kept:
        small, _ = _shrink(task, candidate, c, sandbox, taken, shrink_rounds)
        if small.input_digest != c.input_digest and small.input_digest in {o.input_digest for o in out}:
            small = c
        taken.add(small.input_digest)
        out.append(small)
    return ran, out, rejections


# --------------------------------------------------------------------------------------------- model proposer

_MODEL_INSTRUCTIONS = """\
You are testing solutions to the programming task below. Propose up to {n} inputs on which a plausible but
wrong solution would fail (off-by-one errors, empty inputs, boundaries, Unicode, very large inputs, type
corners, ordering). Each input must be valid for the signature; the arguments are JSON values in order.

Answer with one JSON array in a ```json fenced block; each item is an object
{{"args": [...], "category": one of {categories}, "hint": "why it may break a solution"}}.
"""


def model_prompt(task: CodeTask, n: int) -> str:
    """What the model proposer sends: the instructions, then the task's prompt as a solver would see it."""
    cats = ", ".join(f'"{c}"' for c in CATEGORIES)
    types = ", ".join(str(t) for t in task.arg_types)
    head = _MODEL_INSTRUCTIONS.format(n=n, categories=cats)
    return f"{head}\nArgument types: [{types}]\n\n---\n{render_prompt(task)}"


def _sim_reference(task: CodeTask, n: int) -> list[JSON]:
    return [
        {"args": args, "category": category, "hint": hint} for args, category, hint in seed_inputs(task)[:n]
    ]


def parse_model_proposals(text: str, proposer: str) -> tuple[list[Proposal], list[Rejection]]:
    """Proposals from a model's answer; malformed items come back as ``not_json`` rejections."""
    try:
        value = extract_json(text)
    except ExtractionError as exc:
        return [], [Rejection(Proposal((), {}, "other", text[:200], proposer), "not_json", str(exc))]
    items = cast("list[JSON]", value) if isinstance(value, list) else [value]
    proposals: list[Proposal] = []
    rejections: list[Rejection] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("args"), list):
            rejections.append(
                Rejection(
                    Proposal((), {}, "other", _short(item), proposer),
                    "not_json",
                    'expected an object with "args" (an array)',
                )
            )
            continue
        kwargs = item.get("kwargs") or {}
        hint = item.get("hint")
        category = item.get("category")
        p = Proposal(
            tuple(cast("list[JSON]", item["args"])),
            cast("dict[str, JSON]", kwargs) if isinstance(kwargs, dict) else {},
            category if category in CATEGORIES else "other",
            hint if isinstance(hint, str) else "",
            proposer,
        )
        if not isinstance(kwargs, dict):
            rejections.append(Rejection(p, "not_json", '"kwargs" must be an object'))
            continue
        proposals.append(p)
    return proposals, rejections


async def model_proposals(
    task: CodeTask, client: ModelClient, model_id: str, *, budget: int = 20, sample: int = 0
) -> tuple[list[Proposal], list[Rejection]]:
    """Ask ``model_id`` for up to ``budget`` proposals (one call; raises ``BudgetExceeded`` when refused)."""
    entry = client.registry.get(model_id)
    sim = SimContext(reference_json=_sim_reference(task, budget), sample=sample) if entry.simulated else None
    request = Request.of(model_prompt(task, budget), max_tokens=4096, temperature=0.7, sim_context=sim)
    completion = await client.complete(model_id, request)
    proposals, rejections = parse_model_proposals(completion.text, f"model:{model_id}")
    return proposals[:budget], rejections


# --------------------------------------------------------------------------------------------- the bank


def bank_counterexamples(store: Store, counterexamples: Iterable[Counterexample]) -> int:
    """Bank counterexamples (one row per task and input digest); returns how many were new."""
    new = 0
    with store.transaction() as db:
        for c in counterexamples:
            expected = json.dumps(c.expected, ensure_ascii=False, allow_nan=False)
            cur = db.execute(
                "INSERT INTO counterexamples (counterexample_id, task_id, task_digest, input, "
                "input_digest, expected, category, hint, found_by, candidate_digest, actual, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    digest({"task_id": c.task_id, "input_digest": c.input_digest}),
                    c.task_id,
                    c.task_digest,
                    json.dumps(c.input_json, ensure_ascii=False, allow_nan=False),
                    c.input_digest,
                    expected,
                    c.category,
                    c.hint,
                    c.found_by,
                    c.candidate_digest,
                    c.actual,
                    utc_now(),
                ),
            )
            new += cur.rowcount
    return new


def banked_counterexamples(store: Store, task_id: str | None = None) -> list[Counterexample]:
    """Banked counterexamples (of one task, or all), in the order they were banked."""
    sql = (
        "SELECT task_id, task_digest, input, expected, category, hint, found_by, candidate_digest, actual "
        "FROM counterexamples"
    )
    params: tuple[str, ...] = ()
    if task_id is not None:
        sql += " WHERE task_id = ?"
        params = (task_id,)
    with store.snapshot() as db:
        rows = db.execute(sql + " ORDER BY created_at, counterexample_id", params).fetchall()
    out: list[Counterexample] = []
    for tid, tdig, inp, exp, cat, hint, found_by, cdig, actual in rows:
        data = cast("dict[str, JSON]", json.loads(inp))
        out.append(
            Counterexample(
                task_id=tid,
                task_digest=tdig,
                args=tuple(cast("list[JSON]", data.get("args") or [])),
                kwargs=cast("dict[str, JSON]", data.get("kwargs") or {}),
                expected=cast("JSON", json.loads(exp)),
                category=cat if cat in CATEGORIES else "other",
                hint=hint,
                found_by=found_by,
                candidate_digest=cdig,
                actual=actual,
            )
        )
    return out


def adversarial_tests(store: Store, task_id: str, *, task_digest: str | None = None) -> list[CallTest]:
    """The task's adversarial test set (never shown in prompts). With ``task_digest``, only the tests mined
    against that version of the task (an edited reference may have changed the expected values)."""
    return [
        c.to_test()
        for c in banked_counterexamples(store, task_id)
        if task_digest is None or c.task_digest == task_digest
    ]


def _banked_digests(store: Store, task_id: str) -> set[str]:
    with store.snapshot() as db:
        rows = db.execute("SELECT input_digest FROM counterexamples WHERE task_id = ?", (task_id,)).fetchall()
    return {str(r[0]) for r in rows}


# --------------------------------------------------------------------------------------------- the driver


async def _candidates(
    tasks: Sequence[CodeTask], solver: str, client: ModelClient | None
) -> list[tuple[CodeTask, str, str | None, str]]:
    """``(task, label, source or None, note)`` per candidate; ``None`` when no code could be extracted."""
    out: list[tuple[CodeTask, str, str | None, str]] = []
    if solver == "reference":
        return [(t, "reference", t.reference, "") for t in tasks]
    if solver.startswith("replay:"):
        by_id: dict[str, Task] = {t.id: t for t in tasks}
        counts: dict[str, int] = {}
        for task_id, completion in read_replay(Path(solver.removeprefix("replay:")), by_id):
            task = cast("CodeTask", by_id[task_id])
            j = counts.get(task_id, 0)
            counts[task_id] = j + 1
            try:
                out.append((task, f"replay/{j}", extract_code(completion, task.entry_point), ""))
            except ExtractionError as exc:
                out.append((task, f"replay/{j}", None, str(exc)))
        return out
    if solver.startswith("model:"):
        assert client is not None
        model_id = solver.removeprefix("model:")
        for t in tasks:
            request = Request.of(
                render_prompt(t), max_tokens=2048, sim_context=SimContext(reference=t.reference)
            )
            completion = await client.complete(model_id, request)
            try:
                out.append((t, f"{model_id}/0", extract_code(completion.text, t.entry_point), ""))
            except ExtractionError as exc:
                out.append((t, f"{model_id}/0", None, str(exc)))
        return out
    raise ConfigError(f"--solver must be 'reference', 'replay:FILE.jsonl' or 'model:<id>', got {solver!r}")


def mine_bank(
    tasks_dir: str | Path,
    solver: str,
    *,
    proposer: str = "fuzz",
    budget: int = 200,
    seed: int = 0,
    store: Store | None = None,
    task_ids: Sequence[str] = (),
    max_counterexamples: int | None = 3,
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[MiningResult], str | None]:
    """Mine every call-based code task of the bank against each candidate of ``solver`` and bank the finds.

    Returns the results and, when the model layer's budget cap refused a call, its message (mining stops
    there; what was banked stays banked).
    """
    if budget < 1:
        raise ConfigError(f"--budget must be at least 1, got {budget}")
    if proposer != "fuzz" and not proposer.startswith("model:"):
        raise ConfigError(f"--proposer must be 'fuzz' or 'model:<id>', got {proposer!r}")
    tasks = [
        t for t in load_tasks(tasks_dir) if isinstance(t, CodeTask) and not t.id.startswith("structured/")
    ]
    tasks = [t for t in tasks if all(isinstance(x, CallTest) for x in (*t.public_tests, *t.hidden_tests))]
    if task_ids:
        wanted = set(task_ids)
        unknown = wanted - {t.id for t in tasks}
        if unknown:
            raise ConfigError(f"--task: {sorted(unknown)} not among the call-based code tasks of {tasks_dir}")
        tasks = [t for t in tasks if t.id in wanted]
    # bad input before any work: a solver that cannot be, or a replay file that does not read, is refused before
    # the store (a fresh $EVALKIT_HOME's database) is made
    if solver != "reference" and not solver.startswith(("replay:", "model:")):
        raise ConfigError(f"--solver must be 'reference', 'replay:FILE.jsonl' or 'model:<id>', got {solver!r}")
    if solver.startswith("replay:"):
        read_replay(Path(solver.removeprefix("replay:")), {t.id: t for t in tasks})
    for spec in (solver, proposer):
        if spec.startswith("model:"):
            load_registry().get(spec.removeprefix("model:"))  # an unknown model: one line naming the known ones
    own_store = store is None
    db = store if store is not None else Store.open()
    try:
        return asyncio.run(
            _mine_bank(
                tasks, solver, proposer, budget, seed, db, max_counterexamples, limits, workers, progress
            )
        )
    finally:
        if own_store:
            db.close()


async def _mine_bank(
    tasks: Sequence[CodeTask],
    solver: str,
    proposer: str,
    budget: int,
    seed: int,
    store: Store,
    max_counterexamples: int | None,
    limits: SandboxLimits | None,
    workers: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[MiningResult], str | None]:
    needs_model = solver.startswith("model:") or proposer.startswith("model:")
    client = ModelClient(store=store) if needs_model else None
    results: list[MiningResult] = []
    try:
        try:
            candidates = await _candidates(tasks, solver, client)
        except BudgetExceeded as exc:
            return results, str(exc)
        with Sandbox(limits or MINING_LIMITS, workers=workers) as sandbox:
            for k, (task, label, source, note) in enumerate(candidates):
                if progress:
                    progress(k, len(candidates))
                if source is None:
                    results.append(
                        MiningResult(task.id, label, "", proposer, 0, (), 0, (), f"no code: {note}")
                    )
                    continue
                known = _banked_digests(store, task.id)
                rejections: list[Rejection] = []
                if proposer == "fuzz":
                    proposals = fuzz_proposals(task, budget=budget, seed=seed)
                else:
                    assert client is not None
                    try:
                        proposals, rejections = await model_proposals(
                            task, client, proposer.removeprefix("model:"), budget=budget, sample=seed
                        )
                    except BudgetExceeded as exc:
                        return results, str(exc)
                ran, found, more = mine(
                    task,
                    source,
                    proposals,
                    sandbox,
                    known=known,
                    shrink=proposer == "fuzz",
                    max_counterexamples=max_counterexamples,
                )
                banked = bank_counterexamples(store, found)
                results.append(
                    MiningResult(
                        task.id,
                        label,
                        candidate_digest(source),
                        proposer,
                        ran + len(rejections),
                        tuple(found),
                        banked,
                        tuple(rejections + more),
                    )
                )
            if progress:
                progress(len(candidates), len(candidates))
    finally:
        if client is not None:
            await client.aclose()
    return results, None
