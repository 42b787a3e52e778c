"""How fast the read-only commands answer on a campaign's store: ``budget show``, ``calls list``, ``campaign
status NAME``, each in a fresh process (start-up and imports included), as a user runs them.

    uv run python tools/bench/readonly.py --home DIR [--name sim-seed] [--repeat 7] [--evalkit PATH]

``--home`` is a store that holds the campaign (``EVALKIT_HOME=DIR uv run evalkit campaign run
campaigns/sim-seed.toml`` makes the seed campaign's). Printed per command: the median wall time and the median
CPU time (user + system of the child), over ``--repeat`` runs. CPU time is the figure to compare on a busy
machine: wall time there mostly measures the queue for a core.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import time


def _one(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--name", default="sim-seed")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--evalkit", default=shutil.which("evalkit") or "evalkit")
    args = parser.parse_args()
    env = {**os.environ, "EVALKIT_HOME": args.home}
    commands = [["budget", "show"], ["calls", "list"], ["campaign", "status", args.name], ["--version"]]
    print(f"{'command':<28} {'wall median':>12} {'cpu median':>11}  (n={args.repeat}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f})")  # fmt: skip
    for command in commands:
        runs = [_one([args.evalkit, *command], env) for _ in range(args.repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{' '.join(command):<28} {wall:>11.3f}s {cpu:>10.3f}s")


if __name__ == "__main__":
    main()
