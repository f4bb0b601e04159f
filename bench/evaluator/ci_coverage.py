"""Coverage of a trial's interval for the median, by sample size: the percentile bootstrap
kvtune used (`stats.bootstrap_ci`) and the distribution-free order-statistic interval
(`stats.median_ci`). Decides from how many values an interval may be called a 95% CI.

    .venv/bin/python bench/evaluator/ci_coverage.py [--draws 2000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from kvtune.stats import bootstrap_ci, order_statistic_ci

DISTS = {
    # name: (sampler, true median)
    "normal cov10%": (lambda r, n: r.normal(100, 10, n), 100.0),
    "lognormal cov30%": (lambda r, n: 100 * r.lognormal(0, math.sqrt(math.log(1.09)), n), 100.0),
    "t3 (heavy tail)": (lambda r, n: 100 + 10 * r.standard_t(3, n), 100.0),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--out", default=str(Path(__file__).with_name("ci_coverage.json")))
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    rows = []
    for n in range(2, 13):
        for name, (draw, med) in DISTS.items():
            hit_b = hit_o = 0
            for i in range(a.draws):
                xs = list(draw(rng, n))
                lo, hi = bootstrap_ci(xs, seed=i, resamples=500)
                hit_b += lo <= med <= hi
                lo, hi, _ = order_statistic_ci(xs)
                hit_o += lo <= med <= hi
            rows.append({"n": n, "dist": name, "bootstrap": hit_b / a.draws,
                         "order_statistic": hit_o / a.draws})
            print(f"n={n:2d} {name:18s} bootstrap {hit_b / a.draws:6.1%}  "
                  f"order-statistic {hit_o / a.draws:6.1%}", flush=True)
    Path(a.out).write_text(json.dumps({"draws": a.draws, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
