"""Does the recommendation's "95% CI" cover its true change 95% of the time?

The confirmation compares `confirm_top` candidates with the baseline and recommends the
significant one whose measured gain is largest. That choice favours a candidate that noise
lifted, so the chosen candidate's own (marginal) 95% CI covers its true gain less often
than 95% when candidates are close. kvtune now gives every candidate a CI simultaneous
over the candidates (Bonferroni, each at 1 − 0.05/k), which must clear min_improvement for
a recommendation. This runs kvtune's own `confirm.verdict` on simulated confirmation
rounds, both ways on the same draws in one run (the marginal way, as before the change, by
setting the level back to 0.95), and reports, per scenario: how often a recommendation is made (power),
how often the recommended candidate's CI holds its true gain (coverage, among
recommendations, with a Wilson 95% interval), and the mean bias of its stated gain.

Noise: log-normal, CoV 11% per repetition (the synthetic target's default); candidates'
true gains per scenario; `confirm_rounds` samples per arm.

    .venv/bin/python bench/evaluator/selection_coverage.py [--draws 1000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from pin import interpreter, portable

from kvtune.spec import EvaluationSpec
from kvtune.study import confirm

SCENARIOS = {
    # name: true gains of the candidates (ratio − 1 of their median to the baseline's)
    "three alike +10%": (0.10, 0.10, 0.10),
    "three alike +20%": (0.20, 0.20, 0.20),
    "spread 0/+10/+20%": (0.0, 0.10, 0.20),
    "one +15%, two +12%": (0.15, 0.12, 0.12),
}
COV = 0.11


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    z = 1.96
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (c - h, c + h)


def one(rng: np.random.Generator, gains: tuple[float, ...], rounds: int, seed: int,
        simultaneous: bool) -> tuple[int, float, float, float] | None:
    """(index, stated change, CI low, CI high) of the recommended candidate, or None."""
    sigma = math.sqrt(math.log(1 + COV**2))

    def draw(scale: float) -> list[float]:
        return list(scale * rng.lognormal(0, sigma, rounds))

    base = confirm.Arm("baseline", {}, samples=draw(1.0),
                       metrics=[])
    cands = []
    for i, g in enumerate(gains):
        arm = confirm.Arm(f"trial {i}", {"i": i}, samples=draw(1 + g))
        arm.metrics = [{"ops_per_sec": v} for v in arm.samples]
        cands.append(({"trial": i, "config": {"i": i}}, arm))
    base.metrics = [{"ops_per_sec": v} for v in base.samples]
    saved = confirm.simultaneous_level
    if not simultaneous:
        confirm.simultaneous_level = lambda k, level=0.95: level  # type: ignore[assignment]
    try:
        out = confirm.verdict(base, cands, "ops_per_sec", "maximize",
                              EvaluationSpec(confirm_rounds=rounds), seed)
    finally:
        confirm.simultaneous_level = saved  # type: ignore[assignment]
    best = out["recommended"]
    if not best:
        return None
    comp = best["comparison"]
    return best["trial"], comp["change"], comp["change_ci_low"], comp["change_ci_high"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--rounds", default="5,10")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    t0 = time.time()
    rows = []
    for si, (name, gains) in enumerate(SCENARIOS.items()):
        for rounds in (int(r) for r in a.rounds.split(",")):
            row: dict = {"scenario": name, "gains": gains, "rounds": rounds}
            for simultaneous in (False, True):
                # The same draws both ways: the same generator seed per scenario.
                rng = np.random.default_rng(1000 * si + rounds)
                made = covered = 0
                bias = 0.0
                for d in range(a.draws):
                    r = one(rng, gains, rounds, d, simultaneous)
                    if r is None:
                        continue
                    i, change, lo, hi = r
                    made += 1
                    covered += lo <= gains[i] <= hi
                    bias += change - gains[i]
                key = "simultaneous" if simultaneous else "marginal"
                row[key] = {"recommended": made / a.draws, "coverage": covered / made
                            if made else None, "coverage_ci": wilson(covered, made),
                            "bias": bias / made if made else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json:
        a.json.write_text(json.dumps({
            "what": "coverage of the recommended candidate's 95% CI after selection, "
                    "kvtune.study.confirm.verdict, marginal vs simultaneous intervals",
            "command": " ".join(["python3", portable(__file__), *sys.argv[1:]]),
            "python": interpreter(), "draws": a.draws, "cov": COV, "rows": rows,
            "wall_s": time.time() - t0}, indent=1) + "\n")


if __name__ == "__main__":
    main()
