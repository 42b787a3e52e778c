"""How fast the read-only commands answer on a campaign's store: ``budget show``, ``calls list``, ``campaign
status NAME`` (and ``--version``, the floor: start-up and the CLI's own imports), each in a fresh process, as a
user runs them: the installed ``evalkit`` script, ``python -m evalkit_cli`` and ``uv run evalkit``.

    uv run python tools/bench/readonly.py --home DIR [--name sim-seed] [--repeat 7] [--launcher all|script|module|uv]

``--home`` is a store that holds the campaign: the seed campaign (docs/campaigns.md) is made by
``EVALKIT_HOME=DIR uv run evalkit campaign run campaigns/sim-seed.toml`` (70 tasks x 3 simulated models x K = 5,
1,050 rollouts). Printed per launcher and command: the median wall time and the median CPU time (user + system
of the child and its children, so ``uv run``'s own work counts), over ``--repeat`` runs after one unmeasured
warm-up run. CPU time is the figure to compare on a busy machine: wall time there mostly measures the queue
for a core. The load average is printed with the figures.

Python writes its bytecode cache on a user's first run; an environment with ``PYTHONDONTWRITEBYTECODE=1`` (some
CI and container images set it) compiles every module on every start, which is several times slower. The
children run with it unset unless ``--no-bytecode-cache`` is given, and the header says which (the flag only
stops new cache files: modules already cached are still read from the cache).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _one(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def launchers(which: str) -> dict[str, list[str]]:
    exe = Path(sys.executable)
    script = shutil.which("evalkit", path=str(exe.parent)) or shutil.which("evalkit") or "evalkit"
    uv = shutil.which("uv") or "uv"
    found = {
        "script": [script],
        "module": [str(exe), "-m", "evalkit_cli"],
        "uv": [uv, "run", "--project", str(ROOT), "evalkit"],
    }
    return found if which == "all" else {which: found[which]}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", required=True)
    parser.add_argument("--name", default="sim-seed")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--launcher", choices=["all", "script", "module", "uv"], default="all")
    parser.add_argument("--no-bytecode-cache", action="store_true", help="Run the children with PYTHONDONTWRITEBYTECODE=1.")
    args = parser.parse_args()
    env = {**os.environ, "EVALKIT_HOME": args.home}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    commands = [["budget", "show"], ["calls", "list"], ["campaign", "status", args.name], ["--version"]]
    print(f"n={args.repeat} per command, {os.cpu_count()} cpus, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"bytecode cache {'off' if args.no_bytecode_cache else 'on'}")  # fmt: skip
    print(f"{'launcher':<8} {'command':<26} {'wall median':>12} {'cpu median':>11}")
    for name, prefix in launchers(args.launcher).items():
        for command in commands:
            _one([*prefix, *command], env)  # warm-up: the bytecode cache, the page cache
            runs = [_one([*prefix, *command], env) for _ in range(args.repeat)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            print(f"{name:<8} {' '.join(command):<26} {wall:>11.3f}s {cpu:>10.3f}s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
