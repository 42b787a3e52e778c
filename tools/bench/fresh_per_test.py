"""What a freshly loaded module per test costs: the seed bank's code references, every call test on a module loaded anew
(``fresh=True``, what verdicts use) against one module answering all of a candidate's call tests (``fresh=False``).

    uv run python tools/bench/fresh_per_test.py [--repeat 3] [--workers 1]

Prints the wall time of each mode, the number of tests, and the difference per test. Every reference must pass
every test in both modes, or the script exits 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from evalkit import CallTest, CheckTest, CodeTask, Sandbox, load_tasks
from evalkit.wall import SandboxJob


def _jobs(tasks: list[CodeTask], *, fresh: bool) -> list[SandboxJob]:
    jobs = []
    for t in tasks:
        tests = []
        for x in (*t.public_tests, *t.hidden_tests):
            if isinstance(x, CheckTest):
                tests.append({"check": x.check, "context": x.context})
            else:
                tests.append({"args": list(x.args), "kwargs": dict(x.kwargs)})
        jobs.append(SandboxJob(t.reference, t.entry_point, tuple(tests), fresh=fresh))
    return jobs


def _expected_ok(tasks: list[CodeTask], runs: list) -> bool:
    for t, run in zip(tasks, runs, strict=True):
        for x, r in zip((*t.public_tests, *t.hidden_tests), run.tests, strict=True):
            if isinstance(x, CallTest) and r.status != "value":
                return False
            if isinstance(x, CheckTest) and r.status != "done":
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    tasks = [t for t in load_tasks(root / "tasks") if isinstance(t, CodeTask)]
    n_tests = sum(len(t.public_tests) + len(t.hidden_tests) for t in tasks)
    print(f"{len(tasks)} code tasks, {n_tests} tests; workers={args.workers}")
    times: dict[bool, list[float]] = {True: [], False: []}
    with Sandbox(workers=args.workers) as box:
        box.run(_jobs(tasks[:1], fresh=True)[0])  # start the zygote outside the timing
        for _ in range(args.repeat):
            for fresh in (True, False):
                t0 = time.perf_counter()
                runs = box.run_many(_jobs(tasks, fresh=fresh))
                times[fresh].append(time.perf_counter() - t0)
                if not _expected_ok(tasks, runs):
                    sys.exit(f"a reference failed with fresh={fresh}")
    f, b = statistics.median(times[True]), statistics.median(times[False])
    print(f"fresh module per test:  median {f * 1000:.0f} ms  runs {[round(x * 1000) for x in times[True]]}")
    print(f"one module per task:    median {b * 1000:.0f} ms  runs {[round(x * 1000) for x in times[False]]}")
    print(f"cost of freshness: {(f - b) / n_tests * 1000:.2f} ms per test")


if __name__ == "__main__":
    main()
