"""Run every benchmark in turn and print their figures: ``python3 dev.py bench``.

Each script measures toolloop against a baseline in the same run and prints the ratios;
extra arguments (e.g. ``--quick``) go to the scripts that take them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "bench_flow.py",
    "bench_json_reader.py",
    "bench_loop.py",
    "bench_planner.py",
    "bench_agent.py",
    "bench_checkpoints.py",
    "bench_rate_limits.py",  # starts a rate-limited server of its own
    "bench_shared_results.py",
    "bench_ray.py",  # starts and stops a local Ray cluster of its own
]
TAKES_QUICK = {
    "bench_loop.py",
    "bench_planner.py",
    "bench_agent.py",
    "bench_checkpoints.py",
    "bench_rate_limits.py",
    "bench_ray.py",
}


def main(argv: list[str]) -> int:
    failed: list[str] = []
    for script in SCRIPTS:
        path = HERE / script
        if not path.exists():
            continue
        args = [a for a in argv if a != "--quick" or script in TAKES_QUICK]
        print(f"\n######## {script} {' '.join(args)}\n", flush=True)
        if subprocess.call([sys.executable, str(path), *args]) != 0:
            failed.append(script)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
