"""Proposed changes to the evaluator, applied by monkeypatching so the benchmark can measure
them against the code as it is (src/ is not edited here). Each is a context manager.

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

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

import kvtune.evaluator as kev
from kvtune.evaluator import Evaluation, Evaluator

VARIANTS = ("race-incumbent", "ci-logt", "early-stop-ucb")


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


def _evaluate_racing(self: Evaluator, config: Any, kind: str = "trial",
                     trial_number: int | None = None, n: int | None = None,
                     incumbent: Evaluation | None = None, on_rep: Any = None) -> Evaluation:
    n = n or self.repetitions
    e = Evaluation(config)
    e._metric = self.metric
    for i in range(n):
        if not self._add(e, kind, trial_number):
            return e
        if on_rep:
            on_rep(e)
        if (i == 0 and n > 1 and self.ev.early_stop and incumbent is not None
                and self._clearly_worse(e, incumbent)):
            e.stopped_early = True
            break
    if (self.ev.intensify and incumbent is not None and not e.stopped_early
            and incumbent is not e):
        while (len(e.reps) < self.ev.max_repetitions and self.better(e.value, incumbent.value)
               and self._overlaps(e, incumbent)):
            if not self._add(e, kind, trial_number):
                return e
            # Race: the incumbent gets a fresh repetition too (a resumed incumbent has no
            # raw repetitions in memory and is left as it is).
            if incumbent.reps and len(incumbent.reps) < self.ev.max_repetitions:
                self._add(incumbent, "intensify", None)
            if on_rep:
                on_rep(e)
    return e


def _clearly_worse_ucb(self: Evaluator, e: Evaluation, inc: Evaluation) -> bool:
    noise = self.noise_cov if self.noise_cov and not math.isnan(self.noise_cov) else 0.1
    k = max(2, self.ev.noise_floor_runs, self.repetitions)
    noise *= math.sqrt((k - 1) / float(sps.chi2.ppf(0.05, k - 1)))
    return self.relative_gap(e.value, inc.value) > max(3 * noise, 0.05)


@contextlib.contextmanager
def variant(name: str | None) -> Iterator[None]:
    if name is None:
        yield
        return
    if name == "race-incumbent":
        old = Evaluator.evaluate
        Evaluator.evaluate = _evaluate_racing  # type: ignore[method-assign]
        try:
            yield
        finally:
            Evaluator.evaluate = old  # type: ignore[method-assign]
    elif name == "ci-logt":
        old_ci = kev.bootstrap_ci
        kev.bootstrap_ci = logt_ci
        try:
            yield
        finally:
            kev.bootstrap_ci = old_ci
    elif name == "early-stop-ucb":
        old_cw = Evaluator._clearly_worse
        Evaluator._clearly_worse = _clearly_worse_ucb  # type: ignore[method-assign]
        try:
            yield
        finally:
            Evaluator._clearly_worse = old_cw  # type: ignore[method-assign]
    else:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
