#!/usr/bin/env python3
"""Warm start against a known truth (issue 33), through kvtune's real StudyRun and
library code, on the synthetic target's "workload" surface (its optimum moves with the
workload: kvtune/targets/synthetic_workload.py).

1. A library of `--library-size` (30) studies, each a workload drawn from one of four
   categories (small values read-heavy, large values, multiget-heavy, write-heavy), tuned
   in full (search, confirmation, ablation), each added to a fresh library.
2. `--held-out` (20) other workloads of the same categories, each tuned twice with the
   same trial budget and seed: cold (`--cold`) and warm (from the library). Search only
   (no confirmation: a held-out study does not join the library).
3. One workload far from all of them (deletes, 64 KB values, uniform popularity), warm and
   cold.

Scored on the truth (the surface's noiseless value of each measured configuration): the
trials each study needs to come within 5% of the cold study's final best (its best
configuration's true value), and the final bests. Goals: the median warm study gets there
in at most a quarter of the trial budget; on the far workload warm costs at most one trial
more than cold.

    .venv/bin/python bench/warmstart/synthetic.py --json bench/warmstart/synthetic.json
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))

from rich.console import Console  # noqa: E402

from kvtune.library.store import Library  # noqa: E402
from kvtune.study.loader import load_text  # noqa: E402
from kvtune.study.run import StudyRun  # noqa: E402
from kvtune.targets import synthetic_workload  # noqa: E402
from kvtune.targets.synthetic import SYNTHETIC_KNOBS  # noqa: E402
from kvtune.workload.features import distance, of_spec  # noqa: E402

DEFAULTS = {k: kn.default for k, kn in SYNTHETIC_KNOBS.items()}
CATEGORIES = ("small-read-heavy", "large-values", "multiget-heavy", "write-heavy")


def workload(cat: str, rng: np.random.Generator) -> dict[str, Any]:
    """One workload of category `cat` (kvload settings)."""
    u = rng.uniform
    if cat == "small-read-heavy":
        r = u(0.92, 0.99)
        return {"mix": f"get:{r:.3f},set:{1 - r:.3f}", "value_size": int(u(80, 200)),
                "popularity": f"zipf:{u(0.95, 1.2):.2f}", "mget_size": 10}
    if cat == "large-values":
        r = u(0.7, 0.8)
        return {"mix": f"get:{r:.3f},set:{1 - r:.3f}", "value_size": int(u(5000, 12000)),
                "popularity": f"zipf:{u(0.8, 1.0):.2f}", "mget_size": 10}
    if cat == "multiget-heavy":
        m = u(0.35, 0.45)
        g = u(0.45, 0.55)
        return {"mix": f"get:{g:.3f},mget:{m:.3f},set:{max(0.02, 1 - g - m):.3f}",
                "value_size": int(u(300, 700)), "popularity": f"zipf:{u(0.9, 1.05):.2f}",
                "mget_size": int(u(14, 20))}
    r = u(0.35, 0.45)
    return {"mix": f"get:{r:.3f},set:{1 - r:.3f}", "value_size": int(u(800, 1600)),
            "popularity": f"zipf:{u(0.5, 0.7):.2f}", "mget_size": 10}


FAR = {"mix": "get:0.2,set:0.2,delete:0.6", "value_size": 65536, "popularity": "uniform",
       "mget_size": 10}


def study_text(name: str, w: dict[str, Any], d: Path, trials: int, seed: int,
               noise: float) -> str:
    return f"""study: {name}
target: {{kind: synthetic, surface: workload, noise_cov: {noise}}}
load:
  mode: closed
  workload: {{mix: "{w['mix']}", value_size: {w['value_size']},
              popularity: "{w['popularity']}", mget_size: {w['mget_size']}}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: ops_per_sec}}
budget: {{trials: {trials}}}
repetitions: 2
evaluation: {{drift_every: 0}}
seed: {seed}
storage: sqlite:///{d / (name + '.db')}
"""


def run_study(text: str, name: str, *, library: str, cold: bool, full: bool,
              log: io.StringIO) -> dict[str, Any]:
    """Tune one study; its search trials' configurations and their true values."""
    loaded = load_text(text, name)
    console = Console(file=log, width=200)
    run = StudyRun(loaded, console, cold=cold, library=library)
    t0 = time.monotonic()
    run.run(confirm=full, ablation=full)
    assert run.study is not None
    feats, _ = of_spec(loaded.spec)
    trials = [t for t in run.study.trials if t.user_attrs.get("kind") == "trial"]
    trials.sort(key=lambda t: t.number)
    truth = [synthetic_workload.value(t.user_attrs["config"], feats, DEFAULTS)
             for t in trials]
    warm = run.store.last_result(name, "warm_start") or {}
    return {"truth": [0.0 if math.isnan(v) else v for v in truth],
            "optimum": synthetic_workload.best_value(feats, DEFAULTS),
            "seconds": round(time.monotonic() - t0, 2), "warm": warm.get("mode"),
            "from": [f["distance"] for f in warm.get("from") or []],
            "queued": len(warm.get("queued") or []), "features": feats}


def first_within(truth: list[float], target: float) -> int | None:
    """1-based number of the first trial whose true value is within 5% of `target`."""
    for i, v in enumerate(truth, 1):
        if v >= 0.95 * target:
            return i
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--library-size", type=int, default=30)
    ap.add_argument("--held-out", type=int, default=20)
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ["KVTUNE_LIBRARY"] = "off"  # only the --library given here is used
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    log = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        lib_url = f"sqlite:///{d / 'library.db'}"
        lib_works = [(CATEGORIES[i % 4], workload(CATEGORIES[i % 4], rng))
                     for i in range(args.library_size)]
        for i, (cat, w) in enumerate(lib_works):
            name = f"lib-{i:02d}"
            r = run_study(study_text(name, w, d, args.trials, 100 + i, args.noise), name,
                          library=lib_url, cold=True, full=True, log=log)
            print(f"library {name} ({cat}): {r['seconds']} s", flush=True)
        entries = Library(lib_url).read().entries
        print(f"library: {len(entries)} entries, "
              f"{sum(e.recommendation is not None for e in entries)} with a recommendation")
        rows = []
        held = [(CATEGORIES[i % 4], workload(CATEGORIES[i % 4], rng))
                for i in range(args.held_out)]
        for i, (cat, w) in enumerate([*held, ("far", FAR)]):
            name = f"held-{i:02d}" if cat != "far" else "far"
            seed = 500 + i
            cold = run_study(study_text(name + "-cold", w, d, args.trials, seed, args.noise),
                             name + "-cold", library=lib_url, cold=True, full=False, log=log)
            warm = run_study(study_text(name + "-warm", w, d, args.trials, seed, args.noise),
                             name + "-warm", library=lib_url, cold=False, full=False,
                             log=log)
            best = max(cold["truth"])
            nearest = min(distance(warm["features"], e.workload) for e in entries)
            row = {"name": name, "category": cat, "cold_best": best,
                   "warm_best": max(warm["truth"]), "optimum": cold["optimum"],
                   "cold_trials_to_5pct": first_within(cold["truth"], best),
                   "warm_trials_to_5pct": first_within(warm["truth"], best),
                   "warm_mode": warm["warm"], "from_distances": warm["from"],
                   "queued": warm["queued"], "nearest_in_library": round(nearest, 3),
                   "cold_truth": cold["truth"], "warm_truth": warm["truth"]}
            rows.append(row)
            print(f"{name} ({cat}): nearest {nearest:.2f}, warm={warm['warm']} "
                  f"queued {warm['queued']}; to 5% of cold's best: cold "
                  f"{row['cold_trials_to_5pct']} warm {row['warm_trials_to_5pct']}; best "
                  f"cold {best / cold['optimum']:.3f} warm "
                  f"{row['warm_best'] / cold['optimum']:.3f} of the optimum", flush=True)
    held_rows = [r for r in rows if r["category"] != "far"]
    far = next(r for r in rows if r["category"] == "far")
    warm_k = [r["warm_trials_to_5pct"] or args.trials + 1 for r in held_rows]
    cold_k = [r["cold_trials_to_5pct"] or args.trials + 1 for r in held_rows]
    summary = {
        "trials_budget": args.trials,
        "median_warm_trials_to_5pct": statistics.median(warm_k),
        "median_cold_trials_to_5pct": statistics.median(cold_k),
        "median_ratio_warm_over_cold": statistics.median(w / c for w, c in
                                                          zip(warm_k, cold_k, strict=True)),
        "warm_started": sum(r["warm_mode"] == "warm" for r in held_rows),
        "median_cold_best_of_optimum": statistics.median(r["cold_best"] / r["optimum"]
                                                         for r in held_rows),
        "median_warm_best_of_optimum": statistics.median(r["warm_best"] / r["optimum"]
                                                         for r in held_rows),
        "goal_quarter_of_budget": statistics.median(warm_k) <= args.trials / 4,
        "far": {"warm_mode": far["warm_mode"], "cold": far["cold_trials_to_5pct"],
                "warm": far["warm_trials_to_5pct"],
                "extra_trials": (far["warm_trials_to_5pct"] or args.trials + 1)
                - (far["cold_trials_to_5pct"] or args.trials + 1)},
    }
    summary["goal_far_at_most_one_more"] = summary["far"]["extra_trials"] <= 1
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"summary": summary, "seconds": round(time.time() - t0), "args": vars(args),
             "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
