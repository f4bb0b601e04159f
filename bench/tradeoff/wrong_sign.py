"""How often a reported secondary change has the wrong sign, before and after issue 16.

The synthetic target's "tradeoff" surface gives latency and throughput surfaces of their
own with known medians (`SyntheticTarget.true_medians`). For each draw, a configuration
(uniform over the space, or one of the fixed trade-off configurations) and the defaults
are measured in interleaved confirmation rounds, exactly as `kvtune tune` confirms
(`confirm.run_interleaved`). Every secondary metric (ops_per_sec, p50_us; the objective is
p99_us) is then reported two ways:

- before: the confirmation table's bare `new / baseline − 1` of the medians (a sign is
  always claimed);
- after: `confirm.metric_change` — a change is claimed only when its 95% CI excludes zero
  and the two-sided Mann–Whitney test agrees at α = 0.05, else "no significant change".

A claim has the wrong sign when its sign differs from the sign of the true change of the
medians. Rates are per comparison (each metric of each draw): the CI bounds the
after-rate by α/2 = 2.5% per comparison. Also reported: how often a true change of at
least 5% is claimed (power) and how often a true trade-off (the metric significantly
worse in truth by ≥ 5%) would be named.

    .venv/bin/python bench/tradeoff/wrong_sign.py [--draws 400] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from kvtune.spec import TargetSpec
from kvtune.study.confirm import metric_change, run_interleaved
from kvtune.targets.synthetic import SYNTHETIC_KNOBS, SyntheticTarget

SECONDARY = ("ops_per_sec", "p50_us")
DEFAULTS = {k: kn.default for k, kn in SYNTHETIC_KNOBS.items()}
FIXED = {  # the demo's situation: a p99 win that costs throughput
    "p99 win, ops −7%": {"synthetic.x": 0.0, "synthetic.threads": 1, "synthetic.mode": "c",
                         "synthetic.flag": False},
    "p99 win, ops +8%": {"synthetic.x": 0.0, "synthetic.threads": 1, "synthetic.mode": "b",
                         "synthetic.flag": False},
    "small: threads 3": {**DEFAULTS, "synthetic.threads": 3},
}


def random_config(rng: np.random.Generator) -> dict[str, Any]:
    while True:
        c = {"synthetic.x": float(rng.uniform(0, 10)),
             "synthetic.threads": int(rng.integers(1, 17)),
             "synthetic.mode": str(rng.choice(["a", "b", "c"])),
             "synthetic.flag": bool(rng.integers(0, 2))}
        if not (c["synthetic.threads"] >= 14 and c["synthetic.mode"] == "c"):
            return c


def run(draws: int, cov: float, rounds: int, alpha: float, seed: int) -> dict[str, Any]:
    target = SyntheticTarget(TargetSpec(kind="synthetic", noise_cov=cov, surface="tradeoff"))
    rng = np.random.default_rng(seed)
    truth_base = target.true_medians(DEFAULTS)
    counts: dict[str, dict[str, int]] = {}

    def tally(group: str, key: str) -> None:
        counts.setdefault(group, {}).setdefault(key, 0)
        counts[group][key] += 1

    for i in range(draws):
        for group, cfg in [("uniform", random_config(rng)),
                           *((name, c) for name, c in FIXED.items())]:
            mrng = np.random.default_rng([seed, i, len(group)])

            def measure(config: dict[str, Any], mrng: np.random.Generator = mrng
                        ) -> tuple[str, str, dict[str, Any]]:
                return "ok", "", target.measure(config, mrng)

            arms = run_interleaved({"baseline": DEFAULTS, "cand": cfg}, rounds, measure,
                                   seed=i)
            truth = target.true_medians(cfg)
            for m in SECONDARY:
                true_change = truth[m] / truth_base[m] - 1
                b, c = arms["baseline"].series(m), arms["cand"].series(m)
                bare = float(np.median(c) / np.median(b) - 1)
                ch = metric_change(m, c, b, alpha, seed=i)
                tally(group, "comparisons")
                if true_change == 0:
                    continue
                tally(group, "true_nonzero")
                if np.sign(bare) != np.sign(true_change):
                    tally(group, "before_wrong")
                if ch.significant:
                    tally(group, "after_claims")
                    if ch.change is not None and np.sign(ch.change) != np.sign(true_change):
                        tally(group, "after_wrong")
                if abs(true_change) >= 0.05:
                    tally(group, "true_5pct")
                    if ch.significant:
                        tally(group, "after_claimed_5pct")
    out = {}
    for group, k in counts.items():
        n = k.get("true_nonzero", 0)
        out[group] = {
            "comparisons": n,
            "before_wrong_sign_rate": k.get("before_wrong", 0) / n if n else math.nan,
            "after_wrong_sign_rate": k.get("after_wrong", 0) / n if n else math.nan,
            "after_wrong_among_claims": (k.get("after_wrong", 0) / k["after_claims"]
                                         if k.get("after_claims") else math.nan),
            "after_claim_rate": k.get("after_claims", 0) / n if n else math.nan,
            "power_at_5pct": (k.get("after_claimed_5pct", 0) / k["true_5pct"]
                              if k.get("true_5pct") else math.nan),
            "counts": k,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results.json")))
    a = ap.parse_args()
    started = time.time()
    results = []
    for cov, rounds in [(0.05, 4), (0.05, 5), (0.10, 5), (0.10, 8)]:
        r = run(a.draws, cov, rounds, a.alpha, seed=7)
        results.append({"noise_cov": cov, "rounds": rounds, "alpha": a.alpha, "by_group": r})
        print(f"noise CoV {cov:.0%}, {rounds} rounds, α={a.alpha}:")
        for g, v in r.items():
            print(f"  {g:18s} n={v['comparisons']:5d}  wrong sign: before "
                  f"{v['before_wrong_sign_rate']:6.1%}  after {v['after_wrong_sign_rate']:6.2%}"
                  f"  (claims {v['after_claim_rate']:5.1%}, power at ≥5%: "
                  f"{v['power_at_5pct']:.1%})")
    doc = {"draws": a.draws, "secondary_metrics": SECONDARY, "objective": "p99_us",
           "surface": "tradeoff", "seconds": round(time.time() - started, 1),
           "command": "bench/tradeoff/wrong_sign.py " + " ".join(sys.argv[1:]),
           "results": results}
    Path(a.out).write_text(json.dumps(doc, indent=1, default=float) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
