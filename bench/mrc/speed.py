"""How fast the memory models simulate: this checkout beside an older one, side by side.

    git archive ffe6276 src | (mkdir -p /tmp/old && tar -x -C /tmp/old)
    nice .venv/bin/python bench/mrc/speed.py --old /tmp/old/src --rounds 3

Each round runs, alternately for the old source tree and this one (PYTHONPATH), in a
child process, and reads the child's CPU time (user + system: the host's other work
slows the wall clock more than the CPU time):

- `simulate` alone: memcached's at 10 sizes (1 to 64 MiB) on a seeded stream like case
  study 003's (12,800 keys, Zipf 0.9, half sets, 150,000 requests, a 0.75 SHARDS
  miniature), and Redis's at 10 sizes on one like case study 002's;
- `kvtune report` of case studies 003 (memcached) and 002 (Redis), from copies of the
  examples and databases in a scratch directory.

It prints each figure per round and the ratio of the sums (old / new). The figures of
2026-11-27 are in docs/evaluation.md ("Miss-ratio curves": simulation speed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SIMULATE = r"""
import sys, time
import numpy as np
from kvtune.mrc import requests as rq
from kvtune.kinds.memcached import mrc as memcached
from kvtune.kinds.redis import mrc as redis
what = sys.argv[1]
if what == "memcached":
    req = rq.from_model({"keys": 12_800, "popularity": "zipf:0.9", "mix": "get:1,set:1",
                         "key_size": 20, "value_size": "list:100:1,200:1"},
                        requests=190_000, seed=1)
    sub = req.take(rq.salted_hash(req.key, 0) < np.uint64(int(0.75 * 2.0 ** 64)))
    t0 = time.process_time()
    for mib in (1, 2, 4, 6, 9, 13, 20, 31, 48, 64):
        memcached.simulate(sub, mib << 20, measure_from=len(sub) // 2, scale=0.75)
else:
    req = rq.from_model({"keys": 5_000, "popularity": "zipf:0.9", "mix": "get:9,set:1",
                         "key_size": 24, "value_size": "100-100K"}, requests=100_000, seed=1)
    t0 = time.process_time()
    for m in np.geomspace(2.4e6, 3.2e8, 10).astype(int).tolist():
        redis.simulate(req, m, measure_from=len(req) // 2)
print(time.process_time() - t0)
"""

REPORTS = {"report 003 (memcached)": ("003-atune-memcached.yaml", "atune-memcached-003.db"),
           "report 002 (Redis)": ("002-redis-preemption-thp.yaml",
                                  "cs002-redis-preemption-thp.db")}


def child_cpu(argv: list[str], src: str, cwd: str) -> float:
    """CPU seconds (user + system) of a child run with `src` first on its path."""
    env = dict(os.environ, PYTHONPATH=src)
    before = os.times()
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=True)
    after = os.times()
    if argv[1] == "-c":
        return float(out.stdout.split()[-1])
    return (after.children_user - before.children_user) + (
        after.children_system - before.children_system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the older checkout's src directory")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    new = str(ROOT / "src")
    work = tempfile.mkdtemp(prefix="kvtune-mrc-speed-")
    shutil.copytree(ROOT / "examples" / "case-studies", Path(work) / "examples" / "case-studies")
    (Path(work) / "results").mkdir()
    for _, db in REPORTS.values():
        shutil.copy(ROOT / "results" / db, Path(work) / "results" / db)
    py = sys.executable
    jobs = {"simulate alone (memcached, 10 sizes)": [py, "-c", SIMULATE, "memcached"],
            "simulate alone (Redis, 10 sizes)": [py, "-c", SIMULATE, "redis"]}
    for name, (yaml, _) in REPORTS.items():
        jobs[name] = [py, "-m", "kvtune", "report", f"examples/case-studies/{yaml}",
                      "-o", str(Path(work) / "out.html")]
    sums = {name: [0.0, 0.0] for name in jobs}
    try:
        for r in range(a.rounds):
            for name, argv in jobs.items():
                old_s = child_cpu(argv, a.old, work)
                new_s = child_cpu(argv, new, work)
                sums[name][0] += old_s
                sums[name][1] += new_s
                print(f"round {r + 1}  {name:40s} old {old_s:6.2f} s  new {new_s:6.2f} s",
                      flush=True)
        for name, (o, n) in sums.items():
            print(f"{name:40s} old {o / a.rounds:6.2f} s  new {n / a.rounds:6.2f} s  "
                  f"x{o / n:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
