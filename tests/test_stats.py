"""The statistics the evaluator relies on."""

from __future__ import annotations

import math

import numpy as np

from kvtune.evaluator import Evaluator
from kvtune.runner import Repetition
from kvtune.spec import EvaluationSpec
from kvtune.stats import (
    bootstrap_ci,
    compare,
    detectable_improvement,
    holm,
    robust_cov,
    rounds_needed,
)


def test_compare_detects_a_real_gain_and_not_noise() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(100, 5, 8)
    better = rng.normal(130, 5, 8)
    c = compare(better, base, "maximize")
    assert c.p_value < 0.01 and c.ci_low > 0.15 and abs(c.improvement - 0.3) < 0.1
    same = rng.normal(100, 5, 8)
    assert not compare(same, base, "maximize").significant(0.05)
    # For latency (minimize), lower is the gain.
    assert compare([50.0] * 5, [100.0] * 5, "minimize").improvement == 1.0


def test_holm() -> None:
    assert holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]


def test_bootstrap_ci_needs_two_values() -> None:
    assert all(math.isnan(x) for x in bootstrap_ci([1.0]))
    lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert 1.0 <= lo <= 3.0 <= hi <= 5.0


def test_robust_cov_ignores_an_outlier() -> None:
    xs = [100.0, 102.0, 98.0, 101.0, 99.0, 5000.0]
    assert robust_cov(xs) < 0.05
    assert np.std(xs) / np.mean(xs) > 1


def test_detectable_improvement_and_rounds_agree() -> None:
    d5 = detectable_improvement(0.11, 5, 0.05, 3)
    d20 = detectable_improvement(0.11, 20, 0.05, 3)
    assert 0.15 < d5 < 0.3 and abs(d20 - d5 / 2) < 1e-9
    n = rounds_needed(0.11, d20, 0.05, 3)
    assert n in (20, 21)


def test_a_median_of_zero_is_a_value_not_nan() -> None:
    """Minimizing `errors`: a trial whose median is 0 must be told as 0."""

    class _S:
        def measure(self, config: dict) -> Repetition:
            return Repetition("ok", {"errors": 0})

    ev = Evaluator(_S(), None, "s", "errors", "minimize", [], EvaluationSpec(), 3)  # type: ignore[arg-type]
    e = ev.evaluate({}, n=3)
    assert e.value == 0.0 and e.feasible


def test_flagged_repetitions_stay_out_of_the_value() -> None:
    reps = iter([Repetition("ok", {"p99_us": 100.0}), Repetition("ok", {"p99_us": 110.0}),
                 Repetition("flagged", {"p99_us": 9000.0}, flags=["steal 9%"])])

    class _S:
        def measure(self, config: dict) -> Repetition:
            return next(reps)

    spec = EvaluationSpec(max_reruns=0)
    ev = Evaluator(_S(), None, "s", "p99_us", "minimize", [], spec, 3)  # type: ignore[arg-type]
    e = ev.evaluate({}, n=3)
    assert e.value == 105.0
    assert e.flags == ["steal 9%"]
