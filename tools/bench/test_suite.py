"""How long the README's test command (``uv run pytest``) takes, and where the time goes.

Runs the command ``--runs`` times (default 2) and prints each run's wall time and pytest's closing line, the
median, and the suite's composition: the time of every test (setup + call + teardown, as pytest measures it)
summed by marker (``integration``, ``slow``, neither), with the load average before and after, since a shared
machine inflates every figure. Extra arguments go to pytest (``-- -m ""`` for the full leg's selection).

    uv run python tools/bench/test_suite.py            # the README's command, twice
    uv run python tools/bench/test_suite.py --runs 1 -- -m ""

The README promises at most 8 minutes for the README's command on a 2-core machine (issue 30).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_SECONDS = 8 * 60

# A pytest plugin, loaded into the measured run with -p: each test's time by its marker, written as JSON at the end.
PLUGIN = textwrap.dedent(
    """
    import json, os

    _totals = {}

    def pytest_runtest_logreport(report):
        kind = "integration" if "integration" in report.keywords else "slow" if "slow" in report.keywords else "other"
        file = report.nodeid.split("::", 1)[0]
        t = _totals.setdefault(kind, {"seconds": 0.0, "tests": set(), "files": {}})
        t["seconds"] += report.duration
        t["files"][file] = t["files"].get(file, 0.0) + report.duration
        if report.when == "call" or (report.when == "setup" and report.skipped):
            t["tests"].add(report.nodeid)

    def pytest_sessionfinish(session):
        if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's share: the controller sees every report
            return
        out = {k: {"seconds": v["seconds"], "tests": len(v["tests"]), "files": v["files"]} for k, v in _totals.items()}
        with open(os.environ["EVALKIT_BENCH_DURATIONS"], "w") as fh:
            json.dump(out, fh)
    """
)


def one_run(extra: list[str], where: Path, log: Path | None) -> tuple[float, str, dict[str, dict[str, object]], int]:
    (where / "evalkit_bench_durations.py").write_text(PLUGIN)
    out = where / "durations.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")])),
        "EVALKIT_BENCH_DURATIONS": str(out),
    }
    cmd = ["uv", "run", "pytest", "-p", "evalkit_bench_durations", *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    closing = lines[-1] if lines else "(no output)"
    composition = json.loads(out.read_text()) if out.is_file() else {}
    return took, closing, composition, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--log", type=Path, help="write each run's pytest output to LOG.N")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args()
    times: list[float] = []
    failed = False
    for n in range(1, args.runs + 1):
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="evalkit-bench-suite-") as tmp:
            log = args.log.with_name(f"{args.log.name}.{n}") if args.log else None
            took, closing, composition, rc = one_run(args.pytest_args, Path(tmp), log)
        times.append(took)
        failed |= rc != 0
        print(f"run {n}: {took:7.1f} s  exit {rc}  load {load:.1f} -> {os.getloadavg()[0]:.1f}  | {closing}")
        for kind in ("other", "slow", "integration"):
            part = composition.get(kind)
            if part:
                print(f"    {kind:12s} {part['tests']:5d} tests  {part['seconds']:8.1f} s summed")
        if n == args.runs:
            files: dict[str, float] = {}
            for part in composition.values():
                for f, s in part["files"].items():  # type: ignore[union-attr]
                    files[f] = files.get(f, 0.0) + s
            print("    slowest files (summed test time, every marker):")
            for f, s in sorted(files.items(), key=lambda fs: -fs[1])[:15]:
                print(f"      {s:7.1f} s  {f}")
    median = statistics.median(times)
    verdict = "within" if median <= LIMIT_SECONDS else "OVER"
    print(f"median of {len(times)}: {median:.1f} s ({verdict} the {LIMIT_SECONDS // 60}-minute promise); "
          f"{os.cpu_count()} CPUs")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
