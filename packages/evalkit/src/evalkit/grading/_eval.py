"""Task-bank validation, ``evalkit eval`` (grade a solver over a bank), its results file and receipt."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import attrs

if TYPE_CHECKING:
    from evalkit_core.models import Completion, JsonValue, Request

from evalkit.grading._ray import GradingPool, RayCluster, check_executor
from evalkit.grading._tasks import (
    JSON,
    CallTest,
    CheckTest,
    CodeTask,
    StructuredTask,
    Task,
    TaskError,
    bank_digest,
    conforms,
    load_task,
    load_tasks,
    render_prompt,
    task_dirs,
    validate_task_json,
)
from evalkit.grading._verifiers import Verdict, VerifierSettings, grade_many, safe_text, schema_errors
from evalkit.wall import Isolation, Sandbox, SandboxLimits
from evalkit_core import (
    ConfigError,
    ReceiptError,
    atomic_write_bytes,
    canonical_bytes,
    check_output_path,
    check_receipt,
    check_signature,
    digest,
    ensure_signing_key,
    file_digest,
    make_receipt,
    read_receipt,
    trusted_key_ids,
    write_receipt,
)

__all__ = [
    "EvalReport",
    "Problem",
    "Rollout",
    "reference_solution",
    "run_eval",
    "summarize",
    "validate_bank",
    "verify_eval_receipt",
]

RECEIPT_KIND = "evalkit.eval"
RECEIPT_FORMAT = 1


@attrs.frozen
class Problem:
    """One reason a task bank does not validate: which task, which test (or ``-``), and what is wrong."""

    task_id: str
    test: str
    message: str

    def __str__(self) -> str:
        return f"{self.task_id} {self.test}: {self.message}"


def reference_solution(task: Task) -> str:
    """What the reference solver answers: the reference source, or the reference object as JSON text."""
    if isinstance(task, CodeTask):
        return task.reference
    return json.dumps(task.reference, ensure_ascii=False)


def _test_key(test: CallTest | CheckTest) -> bytes:
    if isinstance(test, CheckTest):
        return canonical_bytes({"check": test.check})
    return canonical_bytes({"args": list(test.args), "kwargs": dict(test.kwargs)})


def _static_problems(task: Task) -> list[Problem]:
    out: list[Problem] = []
    if isinstance(task, CodeTask):
        public = {_test_key(t): i for i, t in enumerate(task.public_tests)}
        for j, t in enumerate(task.hidden_tests):
            if _test_key(t) in public:
                out.append(
                    Problem(
                        task.id,
                        f"hidden/{j}",
                        f"same input as public/{public[_test_key(t)]} (public and hidden overlap)",
                    )
                )
        for group, tests in (("public", task.public_tests), ("hidden", task.hidden_tests)):
            for i, t in enumerate(tests):
                if not isinstance(t, CallTest) or t.kwargs:
                    continue
                if len(t.args) != len(task.arg_types):
                    out.append(
                        Problem(
                            task.id,
                            f"{group}/{i}",
                            f"{len(t.args)} args but arg_types lists {len(task.arg_types)}",
                        )
                    )
                    continue
                for k, (arg, spec) in enumerate(zip(t.args, task.arg_types, strict=True)):
                    if not conforms(arg, spec):
                        out.append(Problem(task.id, f"{group}/{i}", f"argument {k} is not a {spec}"))
                if not conforms(t.expected, task.return_type):
                    out.append(
                        Problem(task.id, f"{group}/{i}", f"expected value is not a {task.return_type}")
                    )
        return out
    public_a = {canonical_bytes(a.to_json()): i for i, a in enumerate(task.public_assertions)}
    for j, a in enumerate(task.hidden_assertions):
        key = canonical_bytes(a.to_json())
        if key in public_a:
            out.append(
                Problem(
                    task.id,
                    f"hidden/{j}",
                    f"same assertion as public/{public_a[key]} (public and hidden overlap)",
                )
            )
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(dict(task.schema))
    except jsonschema.SchemaError as exc:
        out.append(
            Problem(task.id, "-", f"task.json /schema is not a valid Draft 2020-12 schema: {exc.message}")
        )
        return out
    out += [
        Problem(task.id, "reference", f"does not match the task's schema: {e}")
        for e in schema_errors(task.reference, task.schema)
    ]
    return out


def validate_bank(
    bank: str | Path, sandbox: Sandbox, settings: VerifierSettings | None = None
) -> tuple[int, list[Problem]]:
    """Check every task under ``bank``: the schema, the format, overlap, argument types, and the reference
    through the real verifier against every test. Returns the number of tasks seen and the problems found."""
    root = Path(bank)
    if not root.is_dir():
        raise TaskError(f"{root}: task directory not found")
    dirs = list(task_dirs(root))
    if not dirs:
        raise TaskError(f"{root}: no tasks found (expected <family>/<slug>/<NNN>/task.json)")
    problems: list[Problem] = []
    tasks: list[Task] = []
    for d in dirs:
        rel = d.relative_to(root).as_posix()
        try:
            data = json.loads((d / "task.json").read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append(Problem(rel, "-", f"task.json is not valid JSON ({exc})"))
            continue
        schema_problems = validate_task_json(data)
        if schema_problems:
            problems += [
                Problem(rel, "-", f"task.json breaks the task schema at {p}") for p in schema_problems
            ]
            continue
        try:
            task = load_task(d, root)
        except TaskError as exc:
            problems.append(Problem(rel, "-", str(exc)))
            continue
        problems += _static_problems(task)
        tasks.append(task)
    verdicts = grade_many([(t, reference_solution(t)) for t in tasks], sandbox, settings, extract=False)
    for v in verdicts:
        if v.infra_error is not None:
            problems.append(
                Problem(
                    v.task_id, "-", f"could not be checked (sandbox infrastructure error: {v.infra_error})"
                )
            )
            continue
        for t in (*v.public, *v.hidden):
            if not t.passed:
                problems.append(
                    Problem(
                        v.task_id, t.name, f"reference fails its own test: {t.reason} {t.detail}".rstrip()
                    )
                )
    return len(dirs), problems


# --------------------------------------------------------------------------------------------- eval


@attrs.frozen
class Rollout:
    """One graded sample: the task, its sample index (file order for replay), and the verdict. ``completion`` is
    the model's answer for a ``model:`` solver (the evidence the gate's reward-hacking checks read); the
    reference and replay solvers keep theirs in the bank and the replay file, so it is None for them."""

    task_id: str
    sample: int
    verdict: Verdict
    completion: str | None = None

    def to_json(self) -> dict[str, JSON]:
        body = self.verdict.to_json()
        if self.completion is None:
            return {"sample": self.sample, **body}
        return {"sample": self.sample, **body, "completion": safe_text(self.completion)}  # lone surrogates escaped


@attrs.frozen
class EvalReport:
    tasks: int
    bank_digest: str
    rollouts: tuple[Rollout, ...]
    summary: dict[str, JSON]
    settings: VerifierSettings
    isolation: Isolation
    results_path: Path | None
    receipt_path: Path | None
    solver: Mapping[str, JSON] = attrs.field(factory=dict[str, JSON])  # as in the receipt: calls, cached, cost


def read_replay(path: Path, tasks: Mapping[str, Task]) -> list[tuple[str, str]]:
    """(task_id, completion) pairs from a replay JSONL file, in file order; ConfigError names file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{path}: replay file not found") from None
    out: list[tuple[str, str]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{n}: expected an object with task_id and completion")
        rowd = cast("dict[str, JSON]", row)
        task_id, completion = rowd.get("task_id"), rowd.get("completion")
        if not isinstance(task_id, str) or not isinstance(completion, str):
            raise ConfigError(f"{path}:{n}: fields 'task_id' and 'completion' must be strings")
        if task_id not in tasks:
            raise ConfigError(f"{path}:{n}: task_id {task_id!r} is not in the task bank")
        out.append((task_id, completion))
    return out


def summarize(rows: Sequence[dict[str, JSON]], n_tasks: int) -> dict[str, JSON]:
    """Pass rates from result rows (as written to ``results.jsonl``); infrastructure errors are not scored."""
    scored = [r for r in rows if r.get("infra_error") is None]

    def rate(part: str) -> float | None:
        # share of rollouts passing every test of that part, over rollouts that have such tests
        blocks = [cast("dict[str, int]", r[part]) for r in scored]
        blocks = [b for b in blocks if b["total"]]
        if not blocks:
            return None
        return round(sum(b["passed"] == b["total"] for b in blocks) / len(blocks), 6)

    def test_rate(part: str) -> float | None:
        total = sum(cast("dict[str, int]", r[part])["total"] for r in scored)
        passed = sum(cast("dict[str, int]", r[part])["passed"] for r in scored)
        return round(passed / total, 6) if total else None

    pub, hid = rate("public"), rate("hidden")
    answered = {cast("str", r["task_id"]) for r in rows}
    return {
        "tasks": n_tasks,
        "tasks_answered": len(answered),
        "rollouts": len(rows),
        "scored": len(scored),
        "infra_errors": len(rows) - len(scored),
        "public_pass_rate": pub,
        "hidden_pass_rate": hid,
        "gap": None if pub is None or hid is None else round(pub - hid, 6),
        "public_test_pass_rate": test_rate("public"),
        "hidden_test_pass_rate": test_rate("hidden"),
    }


def summary_intervals(rows: Sequence[dict[str, JSON]]) -> dict[str, JSON]:
    """Wilson 95% intervals for the summary's pass rates, per rollout and per test (same counts as
    :func:`summarize`). Not part of the
    summary a receipt binds: receipts made before intervals existed still verify."""
    from evalkit.grading._stats import INTERVAL_METHOD, wilson_interval

    scored = [r for r in rows if r.get("infra_error") is None]
    out: dict[str, JSON] = {"method": INTERVAL_METHOD}
    for part in ("public", "hidden"):
        blocks = [b for b in (cast("dict[str, int]", r[part]) for r in scored) if b["total"]]
        ci = wilson_interval(sum(b["passed"] == b["total"] for b in blocks), len(blocks))
        out[f"{part}_pass_rate"] = None if ci is None else [ci[0], ci[1]]
        # the share of tests passed: tests of one rollout are not independent, so this interval is narrower
        # than the truth (the per-rollout rate above is the one to compare)
        total = sum(b["total"] for b in blocks)
        ci = wilson_interval(sum(b["passed"] for b in blocks), total)
        out[f"{part}_test_pass_rate"] = None if ci is None else [ci[0], ci[1]]
    return out


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


def run_eval(
    tasks_dir: str | Path,
    solver: str,
    *,
    k: int | None = None,
    out: str | Path | None = None,
    receipt: str | Path | None = None,
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    cache: bool = True,
    executor: str = "local",
    address: str | None = None,
) -> EvalReport:
    """Grade ``solver`` (``reference`` or ``replay:FILE.jsonl``) over the bank; write results and a receipt.

    ``k`` is the number of samples per task (the reference solver answers ``k`` times, default 1; replay keeps
    at most the first ``k`` lines of each task, default all). ``executor="ray"`` grades on a pool of
    sandbox-worker actors on the Ray cluster at ``address`` (default: a single-machine one started here with
    ``workers`` CPUs); the verdicts are the same.
    """
    check_executor(executor, address)
    if k is not None and k < 1:
        raise ConfigError(f"--k must be at least 1, got {k}")
    if receipt is not None and out is None:
        raise ConfigError("--receipt needs --out: the receipt binds the results file")
    if solver != "reference" and not solver.startswith(("replay:", "model:")):
        raise ConfigError(f"--solver must be 'reference', 'replay:FILE.jsonl' or 'model:<id>', got {solver!r}")
    if solver.startswith("model:"):  # an unknown model is refused before the store or any file is made
        from evalkit_core.models import load_registry

        load_registry().get(solver.removeprefix("model:"))
    if out is not None:
        check_output_path(out, "--out")
    if receipt is not None:
        check_output_path(receipt, "--receipt")
        if out is not None and Path(out).resolve() == Path(receipt).resolve():
            raise ConfigError(f"--out and --receipt are one path ({out}); they must differ")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if executor == "ray":
        with RayCluster(address, num_cpus=workers) as cluster, GradingPool(limits, workers=workers) as pool:
            del cluster
            return _run_eval(
                Path(tasks_dir), solver, pool, k=k, out=out, receipt=receipt, progress=progress, cache=cache
            )
    with Sandbox(limits, workers=workers) as sandbox:
        sandbox.prestart()  # the templates start while the bank loads and the solutions are gathered
        return _run_eval(
            Path(tasks_dir), solver, sandbox, k=k, out=out, receipt=receipt, progress=progress, cache=cache
        )


def _run_eval(
    bank: Path,
    solver: str,
    sandbox: Sandbox | GradingPool,
    *,
    k: int | None,
    out: str | Path | None,
    receipt: str | Path | None,
    progress: Callable[[int, int], None] | None,
    cache: bool = True,
) -> EvalReport:
    tasks = load_tasks(bank)
    by_id = {t.id: t for t in tasks}
    solver_json: dict[str, JSON]
    replay_path: Path | None = None
    items: list[tuple[Task, str]] = []
    samples: list[int] = []
    extract = True
    if solver == "reference":
        extract = False
        solver_json = {"name": "reference"}
        for t in tasks:
            for j in range(k or 1):
                items.append((t, reference_solution(t)))
                samples.append(j)
    elif solver.startswith("replay:"):
        replay_path = Path(solver.removeprefix("replay:"))
        solver_json = {"name": "replay", "file_digest": None}
        counts: dict[str, int] = {}
        for task_id, completion in read_replay(replay_path, by_id):
            j = counts.get(task_id, 0)
            counts[task_id] = j + 1
            if k is not None and j >= k:
                continue
            items.append((by_id[task_id], completion))
            samples.append(j)
        solver_json["file_digest"] = file_digest(replay_path)
    else:  # model:<id> (run_eval refused anything else)
        model_id = solver.removeprefix("model:")
        answers = model_completions(tasks, model_id, k or 1, cache=cache)
        calls = [c for _, _, c, _ in answers]
        reported: list[JSON] = [*sorted({c.reported_model for c in calls})]
        solver_json = {
            "name": "model",
            "model_id": model_id,
            "reported_models": reported,
            "simulated": any(c.simulated for c in calls),
            "calls": sum(1 for *_, hit in answers if not hit),
            "cached": sum(1 for *_, hit in answers if hit),
            "cost_usd": str(sum((c.cost for c in calls), Decimal(0))),
            "registry_digest": calls[0].registry_digest if calls else None,
        }
        for t, j, c, _ in answers:
            items.append((t, c.text))
            samples.append(j)
    order = sorted(range(len(items)), key=lambda i: (items[i][0].id, samples[i]))
    items = [items[i] for i in order]
    samples = [samples[i] for i in order]
    settings = VerifierSettings(sandbox.limits)
    isolation = sandbox.isolation
    if isinstance(sandbox, GradingPool):
        verdicts = sandbox.grade_many(items, settings, extract=extract, progress=progress)
    else:
        verdicts = grade_many(items, sandbox, settings, extract=extract, progress=progress)
        sandbox.hang_up()  # every job is done: the jails end while the results are written
    keep = solver_json["name"] == "model"  # a model's answers are recorded nowhere else
    rollouts = tuple(
        Rollout(t.id, s, v, text if keep else None) for (t, text), s, v in zip(items, samples, verdicts, strict=True)
    )
    rows = [r.to_json() for r in rollouts]
    summary = summarize(rows, len(tasks))
    digest_of_bank = bank_digest(tasks)
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        atomic_write_bytes(out_path, b"".join(canonical_bytes(r) + b"\n" for r in rows))
    receipt_path = Path(receipt) if receipt is not None else None
    if receipt_path is not None and out_path is not None:
        binding: dict[str, JSON] = {"tasks": digest_of_bank, "results": file_digest(out_path)}
        # paths relative to the receipt's directory, so that the receipt verifies from any working directory
        base = receipt_path.resolve().parent
        files: dict[str, JSON] = {"tasks": _relative(bank, base), "results": _relative(out_path, base)}
        if replay_path is not None:
            binding["solver_file"] = solver_json["file_digest"]
            files["solver_file"] = _relative(replay_path, base)
        body: dict[str, JSON] = {
            "kind": RECEIPT_KIND,
            "format": RECEIPT_FORMAT,
            "solver": solver_json,
            "k": k,
            "tasks": {"count": len(tasks), "digest": digest_of_bank},
            "settings": settings.to_json(),
            "settings_digest": settings.digest,
            "isolation": isolation.to_json(),
            "summary": summary,
            "binding": binding,
            "files": files,
            "files_relative_to": "receipt",
        }
        write_receipt(receipt_path, make_receipt(body, key=ensure_signing_key()[0]))
    return EvalReport(
        len(tasks), digest_of_bank, rollouts, summary, settings, isolation, out_path, receipt_path, solver_json
    )


def _relative(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path.resolve(), base)).as_posix()


def _recorded(files: Mapping[str, str], name: str, base: Path | None) -> Path:
    """A path the receipt recorded: relative to the receipt's directory (``files_relative_to``), else as written
    (receipts made before, relative to the directory they were made in)."""
    recorded = Path(files.get(name, ""))
    return base / recorded if base is not None and not recorded.is_absolute() else recorded


def _summary_check(body: dict[str, JSON], results: Path) -> tuple[str, bool, str]:
    """Is the receipt's summary what the results file says? A damaged file is a mismatch, not a crash."""
    try:
        rows = [
            cast("dict[str, JSON]", json.loads(line))
            for line in results.read_text(encoding="utf-8").splitlines()
            if line
        ]
        tasks_block = cast("dict[str, int]", body.get("tasks") or {})
        again = summarize(rows, tasks_block.get("count", 0))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return ("summary", False, f"{results} is not a results file this receipt could have made ({exc!r})")
    ok = canonical_bytes(again) == canonical_bytes(body.get("summary"))
    return ("summary", ok, "" if ok else "the summary in the receipt is not what the results file says")


def verify_eval_receipt(
    receipt_path: str | Path,
    results_path: str | Path | None = None,
    tasks_dir: str | Path | None = None,
    *,
    key: str | None = None,
) -> list[tuple[str, bool, str]]:
    """Re-check an eval receipt offline: its signature, its body hash, the results file, the task bank, the replay
    file, and that the summary in the body is what the results file says. One ``(name, ok, detail)`` per check.

    ``results_path`` and ``tasks_dir`` default to the paths recorded in the body's ``files``. The signer must be
    the local key in ``$EVALKIT_HOME``, or the one ``key`` names (a PEM public key file or an ed25519 key id).
    """
    receipt = read_receipt(receipt_path)
    body = cast("dict[str, JSON]", receipt["body"])
    if body.get("kind") != RECEIPT_KIND:
        raise ReceiptError(f"{receipt_path}: not an evalkit eval receipt (kind {body.get('kind')!r})")
    binding = cast("dict[str, str]", body.get("binding") or {})
    files = cast("dict[str, str]", body.get("files") or {})
    base = Path(receipt_path).resolve().parent if body.get("files_relative_to") == "receipt" else None
    checks: list[tuple[str, bool, str]] = []
    sig = check_signature(receipt, trusted_key_ids(key))
    checks.append(("signature", sig.ok, str(sig.key_id) if sig.ok else sig.detail))
    ok = check_receipt(receipt)
    checks.append(("body", ok, "" if ok else "body_sha256 does not match the canonical body"))
    results = Path(results_path) if results_path is not None else _recorded(files, "results", base)
    try:
        actual = file_digest(results)
    except OSError as exc:
        checks.append(("results", False, f"cannot read {results}: {exc.strerror}"))
    else:
        ok = actual == binding.get("results")
        checks.append(
            ("results", ok, "" if ok else f"{results} has {actual}, receipt expects {binding.get('results')}")
        )
        checks.append(_summary_check(body, results))
    bank = Path(tasks_dir) if tasks_dir is not None else _recorded(files, "tasks", base)
    try:
        actual = bank_digest(load_tasks(bank))
        ok = actual == binding.get("tasks")
        checks.append(
            (
                "tasks",
                ok,
                "" if ok else f"task bank {bank} has {actual}, receipt expects {binding.get('tasks')}",
            )
        )
    except TaskError as exc:
        checks.append(("tasks", False, str(exc)))
    if "solver_file" in binding:
        path = _recorded(files, "solver_file", base)
        try:
            actual = file_digest(path)
            ok = actual == binding["solver_file"]
            checks.append(
                (
                    "solver_file",
                    ok,
                    "" if ok else f"{path} has {actual}, receipt expects {binding['solver_file']}",
                )
            )
        except OSError as exc:
            checks.append(("solver_file", False, f"cannot read {path}: {exc.strerror}"))
    return checks
