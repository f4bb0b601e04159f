"""Proposed changes to the evaluator, each an `Evaluator` policy (a subclass of
`kvtune.measure.evaluator.Policy` overriding one decision), so the benchmark can measure them
against the code as it is without editing src/.

    race-incumbent  intensification re-measures the incumbent too (SMAC's racing): while a
                    challenger looks better and the CIs overlap, both get one more repetition
                    (each up to max_repetitions), so a lucky incumbent regresses to its mean
                    instead of blocking better challengers and inflating the claim.
    ci-logt         the per-trial CI is a t interval on log values (x1.2533 for the median)
                    instead of a percentile bootstrap, which for n = 3 is just [min, max], a
                    ~75% interval for the median, not 95%.
    early-stop-ucb  the early-stop rule uses the 95% upper confidence bound of the noise
                    floor's CoV (chi-square, k-1 degrees of freedom) instead of the point
                    estimate from k = 5 runs, which is below 60% of the truth about one time
                    in seven and then stops good trials on one unlucky sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from kvtune.measure.evaluator import Evaluation, Evaluator, Policy


def logt_ci(values: Sequence[float], statistic: str = "median", level: float = 0.95,
            resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    xs = np.array([v for v in values if v is not None and not math.isnan(v) and v > 0],
                  dtype=float)
    if len(xs) < 2:
        return (math.nan, math.nan)
    logs = np.log(xs)
    centre = float(np.median(logs) if statistic == "median" else logs.mean())
    se = float(logs.std(ddof=1)) / math.sqrt(len(xs))
    if statistic == "median":
        se *= math.sqrt(math.pi / 2)  # asymptotic efficiency of the median under normality
    t = float(sps.t.ppf((1 + level) / 2, len(xs) - 1))
    return float(math.exp(centre - t * se)), float(math.exp(centre + t * se))


class RaceIncumbent(Policy):
    def intensify_step(self, evaluator: Evaluator, e: Evaluation, incumbent: Evaluation,
                       kind: str, trial_number: int | None) -> bool:
        if not evaluator.add(e, kind, trial_number):
            return False
        # Race: the incumbent gets a fresh repetition too (a resumed incumbent has no raw
        # repetitions in memory and is left as it is).
        if incumbent.reps and len(incumbent.reps) < self.ev.max_repetitions:
            evaluator.add(incumbent, "intensify", None)
        return True


class LogTInterval(Policy):
    def interval(self, values: list[float]) -> tuple[float, float]:
        return logt_ci(values, self.ev.statistic, seed=self.seed)


class EarlyStopUCB(Policy):
    def stop_early(self, e: Evaluation, incumbent: Evaluation, noise_cov: float | None) -> bool:
        noise = noise_cov if noise_cov and not math.isnan(noise_cov) else 0.1
        k = max(2, self.ev.noise_floor_runs, self.repetitions)
        noise *= math.sqrt((k - 1) / float(sps.chi2.ppf(0.05, k - 1)))
        return self.relative_gap(e.value, incumbent.value) > max(3 * noise, 0.05)


POLICIES: dict[str, type[Policy]] = {
    "race-incumbent": RaceIncumbent, "ci-logt": LogTInterval, "early-stop-ucb": EarlyStopUCB}
VARIANTS = tuple(POLICIES)


def policy(name: str | None) -> type[Policy]:
    """The evaluator policy of variant `name` (None: kvtune's own)."""
    if name is None:
        return Policy
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}") from None
