#!/usr/bin/env python3
"""Does the confirmation's capacity comparison cover the true change 95% of the time?

A capacity confirmation measures the baseline and a candidate once per round, each a
search with its own 95% interval, and the host moves between rounds (on this VM the knee
changes by ±20% over minutes: docs/kvload.md). Simulated here with known truth:

    log knee(arm, round) = log true(arm) + host(round) + error(arm, round)

host(round) ~ N(0, --host-sd²) shared by both arms of a round; error ~ N(0, s²) with s
drawn per search (its interval says s, but only up to a factor: `--misstated` scales the
true error against the stated one, as the searches' own intervals undercover on a noisy
host: bench/capacity/truth.py); and an extra per-round disagreement of the change itself
(--tau). For each number of rounds, the share of `--trials` confirmations whose 95% CI of
the change holds the truth, for `stats.compare_paired` (each round's ratio, random effects,
Hartung–Knapp t interval: what the confirmation uses) and `stats.compare_pooled` (each arm
pooled on its own, the design before it).

    .venv/bin/python bench/capacity/paired_coverage.py --json bench/capacity/paired_coverage.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
from kvtune.stats import compare_paired, compare_pooled  # noqa: E402


def one(rng: np.random.Generator, k: int, change: float, host_sd: float, tau: float,
        misstated: float) -> tuple[bool, bool, float, float]:
    z = 1.959964
    host = rng.normal(0, host_sd, k)
    stated = rng.uniform(0.02, 0.08, (2, k))  # the searches' own σ of log knee
    err = rng.normal(0, 1, (2, k)) * stated * misstated
    extra = rng.normal(0, tau, k)
    base = np.exp(np.log(30000) + host + err[0])
    cand = np.exp(np.log(30000) + math.log1p(change) + host + err[1] + extra)

    def cis(v: np.ndarray, s: np.ndarray) -> list[tuple[float, float]]:
        return [(float(x * math.exp(-z * e)), float(x * math.exp(z * e))) for x, e in zip(v, s, strict=True)]

    c_ci, b_ci = cis(cand, stated[1]), cis(base, stated[0])
    p = compare_paired(list(cand), c_ci, list(base), b_ci, "maximize")
    u = compare_pooled(list(cand), c_ci, list(base), b_ci, "maximize")
    return (p.ci_low <= change <= p.ci_high, u.ci_low <= change <= u.ci_high,
            p.ci_high - p.ci_low, u.ci_high - u.ci_low)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--change", type=float, default=0.10)
    ap.add_argument("--host-sd", type=float, default=0.15)
    ap.add_argument("--tau", type=float, default=0.03)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    rows = []
    for misstated in (1.0, 2.0):
        for k in (2, 3, 4, 6, 8):
            res = [one(rng, k, args.change, args.host_sd, args.tau, misstated)
                   for _ in range(args.trials)]
            row = {"rounds": k, "misstated": misstated,
                   "paired_coverage": sum(r[0] for r in res) / len(res),
                   "pooled_coverage": sum(r[1] for r in res) / len(res),
                   "paired_median_width": float(np.median([r[2] for r in res])),
                   "pooled_median_width": float(np.median([r[3] for r in res]))}
            rows.append(row)
            print(f"rounds {k}  searches' error {misstated:g}× their interval  "
                  f"paired covers {row['paired_coverage']:.1%} (width "
                  f"{row['paired_median_width']:.0%})  per-arm pooled covers "
                  f"{row['pooled_coverage']:.1%} (width {row['pooled_median_width']:.0%})",
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "what": "coverage of the capacity confirmation's 95% CI of the change",
            "command": "python3 bench/capacity/paired_coverage.py " + " ".join(sys.argv[1:]),
            "change": args.change, "host_sd": args.host_sd, "tau": args.tau,
            "trials": args.trials, "results": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
