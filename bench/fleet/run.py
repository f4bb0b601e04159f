"""Benchmark: 1, 2 and 4 fleet workers on one synthetic study with a fixed sleep per
repetition (so workers do not compete for the CPUs), sharing a throw-away PostgreSQL.

    flock /tmp/kvtune-test.lock .venv/bin/python bench/fleet/run.py [--seeds 3] \
        [--trials 30] [--sleep 0.3] [--json bench/fleet/result.json]

Reports per worker count: the wall time for the same trial budget (every worker process
from start to end, imports included) and its speed-up over one worker; the number of search
trials (in completion order) until one lies within 2% of the surface's true optimum.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from support.postgres import start_postgres  # noqa: E402
from support.studies import fleet_study as study_file  # noqa: E402

from kvtune.targets.synthetic import optimum, true_value  # noqa: E402

WORKER = REPO / "bench" / "fleet" / "worker.py"


def one(pg: Any, tmp: Path, workers: int, trials: int, sleep: float, seed: int,
        best: float) -> dict[str, Any]:
    name = f"b{workers}s{seed}"
    url = pg.createdb(f"{name}_{os.getpid()}")
    study = study_file(tmp, url, name, trials, seed, early_stop=False)
    t0 = time.monotonic()
    ps = [subprocess.Popen([sys.executable, str(WORKER), str(study), f"w{i}", "--sleep",
                            str(sleep), "--no-confirm"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for i in range(workers)]
    for p in ps:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"worker failed: {out}{err[-2000:]}")
    wall = time.monotonic() - t0
    ts = [t for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
          if t.state.is_finished() and t.user_attrs.get("kind") == "trial"]
    ts.sort(key=lambda t: t.datetime_complete)
    reach = next((i + 1 for i, t in enumerate(ts)
                  if true_value(t.user_attrs.get("config", {})) >= 0.98 * best), None)
    configs = [json.dumps(t.params, sort_keys=True) for t in ts]
    return {"workers": workers, "seed": seed, "wall_s": wall, "trials": len(ts),
            "trials_to_2pct": reach, "duplicates": len(configs) - len(set(configs))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--sleep", type=float, default=0.3)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    best = optimum()
    pg = start_postgres()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as d:
            for seed in range(1, a.seeds + 1):
                for n in (int(x) for x in a.workers.split(",")):
                    r = one(pg, Path(d), n, a.trials, a.sleep, seed, best)
                    print(json.dumps(r), flush=True)
                    rows.append(r)
    finally:
        pg.stop()
    summary = {}
    base = statistics.median(r["wall_s"] for r in rows if r["workers"] == 1)
    for n in sorted({r["workers"] for r in rows}):
        rs = [r for r in rows if r["workers"] == n]
        wall = statistics.median(r["wall_s"] for r in rs)
        reached = [r["trials_to_2pct"] for r in rs if r["trials_to_2pct"] is not None]
        summary[n] = {"median_wall_s": round(wall, 2), "speedup": round(base / wall, 2),
                      "reached_2pct": f"{len(reached)}/{len(rs)}",
                      "median_trials_to_2pct": statistics.median(reached) if reached else None,
                      "duplicates": sum(r["duplicates"] for r in rs)}
    print(json.dumps(summary, indent=1))
    if a.json:
        a.json.write_text(json.dumps({"args": vars(a) | {"json": str(a.json)},
                                      "rows": rows, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
