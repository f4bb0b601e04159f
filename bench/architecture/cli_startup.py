"""The cost of `kvtune --help` and of checking a study file, two checkouts side by side.

    python bench/architecture/cli_startup.py OLD_SRC NEW_SRC [--rounds 15] [--out FILE]

Each round runs, alternately for OLD and NEW, `python -m kvtune --help` and `kvtune check
examples/synthetic.yaml` in a fresh process (PYTHONPATH=SRC), and records the wall time.
It reports the medians and the NEW/OLD ratio of each (the machine is noisy: only the
ratio of interleaved runs is compared).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def timed(src: str, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvtune", *args], env=env, cwd=REPO,
                   capture_output=True, check=False)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out")
    a = ap.parse_args()
    cases = {"help": ["--help"], "check": ["check", "examples/synthetic.yaml"]}
    times: dict[str, dict[str, list[float]]] = {c: {"old": [], "new": []} for c in cases}
    for _ in range(a.rounds):
        for case, args in cases.items():
            for which in ("old", "new"):
                times[case][which].append(timed(getattr(a, which), args))
    out = {}
    for case in cases:
        o, n = (statistics.median(times[case][w]) for w in ("old", "new"))
        out[case] = {"old_s": round(o, 3), "new_s": round(n, 3), "ratio": round(n / o, 3),
                     "rounds": a.rounds}
        print(f"{case:6} old {o:.3f} s  new {n:.3f} s  new/old {n / o:.2f}")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
