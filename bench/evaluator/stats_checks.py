"""Monte-Carlo checks of kvtune.stats at the sample sizes the evaluator uses (log-normal noise,
CoV 11% as on the synthetic target's defaults):

- coverage of the per-trial "95%" bootstrap CI of the median at n = 3, 5, 6 (and of a log-t CI);
- the confirmation's false-positive rate and CI coverage (5 vs 5), the smallest p-values of
  Mann-Whitney (5 vs 5) and of a paired Wilcoxon (5 pairs);
- the drift check as kvtune.study.drift runs it (5 vs 5, two-sided, both the CI and the
  Mann-Whitney test at alpha / planned checks = 0.05 / 4 for 30 trials): false alarms
  without drift, per check and over a study's 4 checks, and power against -15% and -25%;
- the confirmation's power for true gains of 5/10/20% with 5/10/20 rounds (Holm, 3 candidates).

    .venv/bin/python bench/evaluator/stats_checks.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pin import pin_source

print("kvtune measured:", pin_source(sys.argv))

from variants import logt_ci  # noqa: E402

from kvtune.stats import bootstrap_ci, compare  # noqa: E402
from kvtune.study.confirm import simultaneous_level  # noqa: E402
from kvtune.study.drift import DRIFT_REPETITIONS, is_moved  # noqa: E402

rng = np.random.default_rng(1)
SIGMA = math.sqrt(math.log(1 + 0.11**2))


def draw(n: int, scale: float = 1.0) -> list[float]:
    return list(scale * rng.lognormal(0, SIGMA, n))


N = 1000
for n in (3, 5, 6):
    hb = hl = 0
    wb = wl = 0.0
    for _ in range(N):
        xs = draw(n)  # true median 1
        lo, hi = bootstrap_ci(xs, seed=0)
        hb += lo <= 1 <= hi
        wb += hi - lo
        lo, hi = logt_ci(xs)
        hl += lo <= 1 <= hi
        wl += hi - lo
    print(f"n={n}: bootstrap '95%' CI of the median covers {hb / N:.1%} (width {wb / N:.1%});"
          f" log-t covers {hl / N:.1%} (width {wl / N:.1%})")
fp = cov0 = cov10 = 0
for _ in range(N):
    c = compare(draw(5), draw(5), "maximize")
    fp += c.p_value < 0.05
    cov0 += c.ci_low <= 0 <= c.ci_high
    c = compare(draw(5, 1.1), draw(5), "maximize")
    cov10 += c.ci_low <= 0.1 <= c.ci_high
print(f"confirmation 5 vs 5, no gain: p < 0.05 in {fp / N:.1%}, CI covers 0 in {cov0 / N:.1%};"
      f" true +10%: CI covers it in {cov10 / N:.1%}")
print("smallest one-sided p: Mann-Whitney 5 vs 5 =",
      round(sps.mannwhitneyu([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], alternative="greater").pvalue,
            4), "; Wilcoxon signed-rank, 5 pairs =",
      round(sps.wilcoxon([1, 2, 3, 4, 5], alternative="greater").pvalue, 4))
CHECKS = 4  # planned drift checks of a 30-trial study with drift_every 10 (planned_checks)
for shift, label in ((1.0, "no drift: false alarms"), (0.85, "a -15% drift: detected"),
                     (0.75, "a -25% drift: detected")):
    k = 0
    for i in range(N):
        k += is_moved(draw(DRIFT_REPETITIONS, shift), draw(5), "maximize", 0.05 / CHECKS, i)[0]
    print(f"drift check ({DRIFT_REPETITIONS} vs 5, alpha 0.05/{CHECKS}), {label} in "
          f"{k / N:.1%} of checks")
studies = 0
for i in range(N):  # every check against the same first baseline measurement, as in a study
    first = draw(5)
    studies += any(is_moved(draw(DRIFT_REPETITIONS), first, "maximize", 0.05 / CHECKS, i)[0]
                   for _ in range(CHECKS))
print(f"drift checks, no drift: a false alarm in {studies / N:.1%} of studies ({CHECKS} checks)")
M = 300
for gain in (0.05, 0.10, 0.20):
    row = []
    for rounds in (5, 10, 20):
        ok = 0
        for _ in range(M):
            # The decision as confirm.verdict takes it: Holm's p, and the CI simultaneous
            # over the 3 candidates above zero.
            c = compare(draw(rounds, 1 + gain), draw(rounds), "maximize", resamples=1000,
                        level=simultaneous_level(3))
            ok += min(1.0, 3 * c.p_value) < 0.05 and c.ci_low > 0
        row.append(f"{rounds} rounds {ok / M:.0%}")
    print(f"confirmation power, true gain +{gain:.0%} (Holm, 3 candidates): " + ", ".join(row))
