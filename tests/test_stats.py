"""The statistics the evaluator relies on."""

from __future__ import annotations

import math

import numpy as np

from kvtune.measure.evaluator import Evaluator
from kvtune.measure.session import Repetition
from kvtune.spec import EvaluationSpec
from kvtune.stats import (
    benjamini_hochberg,
    bootstrap_ci,
    compare,
    detectable_improvement,
    holm,
    log_welch_ci,
    log_welch_p,
    pooled_log_sd,
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


def test_benjamini_hochberg() -> None:
    # By hand: sorted 0.01, 0.03, 0.04, 0.2 -> 0.04, 0.06, 0.0533, 0.2, then the running
    # minimum from the top.
    q = benjamini_hochberg([0.01, 0.04, 0.03, 0.2])
    assert np.allclose(q, [0.04, 0.16 / 3, 0.16 / 3, 0.2])
    assert benjamini_hochberg([]) == []


def test_the_welch_interval_on_logs_covers_at_its_level() -> None:
    """95% Welch intervals of a log-ratio at 4 against 4 rounds (the ablation's first look)
    cover the true ratio in 95% of draws (+- 1.5 points over 4000 draws), and the test's
    p-value is below 0.05 about as often when nothing changed."""
    rng = np.random.default_rng(7)
    n, covered, rejected, true = 4000, 0, 0, math.log(1.2)
    for _ in range(n):
        a = np.exp(rng.normal(true, 0.1, 4)) * 100
        b = np.exp(rng.normal(0.0, 0.05, 4)) * 100
        lo, hi = log_welch_ci(list(a), list(b), 0.95)
        covered += lo <= true <= hi
        c = np.exp(rng.normal(0.0, 0.1, 4)) * 100
        rejected += log_welch_p(list(c), list(b)) < 0.05
    assert abs(covered / n - 0.95) < 0.015, covered / n
    assert rejected / n < 0.065, rejected / n
    assert abs(pooled_log_sd([[1.0, math.e], [1.0, math.e]]) - math.sqrt(0.5)) < 1e-12


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


def test_an_interval_is_called_a_95_ci_only_when_it_is_one() -> None:
    """The order-statistic interval of the median covers >= 95% from 6 values on; below
    that kvtune shows the range and calls it "range" (n = 3: the range covers 75%)."""
    from kvtune.measure.evaluator import Evaluation, Policy
    from kvtune.measure.session import Repetition
    from kvtune.spec import EvaluationSpec
    from kvtune.stats import MIN_CI_N, ci_kind, order_statistic_ci

    assert MIN_CI_N == 6 and ci_kind(5) == "range" and ci_kind(6) == "95% CI"
    assert order_statistic_ci([3.0, 1.0, 2.0]) == (1.0, 3.0, "range")
    lo, hi, kind = order_statistic_ci([float(i) for i in range(12)])
    assert kind == "95% CI" and (lo, hi) == (2.0, 9.0)  # k = 3 at n = 12: 96.1%
    p = Policy(EvaluationSpec(), "ops_per_sec", "maximize", [], 3)
    for n, want in ((3, "range"), (6, "95% CI")):
        e = Evaluation({}, "ops_per_sec")
        e.reps = [Repetition("ok", {"ops_per_sec": 100.0 + i}) for i in range(n)]
        p.summarise(e)
        assert e.ci_kind == want and e.summary()["ci_kind"] == want


def test_a_confirmation_needs_two_rounds_for_its_paired_t() -> None:
    """The paired t reaches any p from two rounds on (the rank test it replaced could not
    go below 1/70 at 4 rounds): only a single round can never show anything."""
    from kvtune.stats import confirmation_problem, detectable_improvement, rounds_needed

    assert confirmation_problem(4, 4, 0.05) is None
    assert confirmation_problem(2, 3, 0.05) is None
    assert "confirm_rounds >= 4" in (confirmation_problem(1, 3, 0.05) or "")
    assert confirmation_problem(0, 4, 0.05) is None  # no confirmation, nothing to refuse
    # Fewer rounds, more candidates, more noise: a larger gain needed; rounds_needed is
    # the first round count whose detectable gain reaches the asked one.
    d = [detectable_improvement(0.05, n, 0.05, 1, two_sided=True, paired=True)
         for n in (3, 4, 8)]
    assert d[0] > d[1] > d[2] > 0
    assert detectable_improvement(0.05, 4, 0.05, 3, two_sided=True, paired=True) > d[1]
    n = rounds_needed(0.05, 0.05, 0.05, 1, two_sided=True, paired=True)
    assert detectable_improvement(0.05, n, 0.05, 1, two_sided=True, paired=True) <= 0.05 < \
        detectable_improvement(0.05, n - 1, 0.05, 1, two_sided=True, paired=True)


def test_the_paired_comparison_is_the_centre_of_its_interval_and_cancels_drift() -> None:
    """`compare_rounds`: the change is the geometric mean of the rounds' ratios, the centre
    of its interval on the log scale; a trend shared by both arms of a round cancels; only
    rounds both arms measured pair; a value with no ratio falls back to the unpaired
    comparison."""
    import math

    from kvtune.stats import MEDIANS_TEST, PAIRED_TEST, compare_rounds

    base = {r: 100.0 * 1.1 ** r for r in range(5)}  # the host drifts 10% a round
    noise = [1.01, 0.99, 1.02, 0.98, 1.0]
    cand = {r: base[r] * 1.2 * noise[r] for r in range(5)}
    c = compare_rounds(cand, base, "maximize")
    assert c.test == PAIRED_TEST and c.n_candidate == 5
    assert math.isclose(c.improvement, 1.2 * math.prod(noise) ** (1 / 5) - 1)
    lo, hi = math.log1p(c.ci_low), math.log1p(c.ci_high)
    assert math.isclose(math.log1p(c.improvement), (lo + hi) / 2)
    assert 0.15 < c.ci_low < 0.2 < c.ci_high < 0.25 and c.p_value < 1e-4
    # Minimize: the same ratios are a loss; the change in the metric's own terms is +20%.
    m = compare_rounds(cand, base, "minimize")
    assert m.improvement < 0 and math.isclose(m.change()[0], c.improvement)
    assert compare_rounds(cand, base, "minimize").p_value > 0.99
    # Unpaired, the drift is noise: the old statistic's interval spans no change.
    from kvtune.stats import compare

    assert compare(list(cand.values()), list(base.values()), "maximize").ci_low < 0
    # Rounds one arm lost do not pair; fewer than two pairs: no comparison.
    assert compare_rounds({0: 1.0, 3: 2.0}, {0: 1.0, 1: 1.0}, "maximize").n_candidate == 1
    assert math.isnan(compare_rounds({0: 1.0}, {0: 1.0}, "maximize").improvement)
    # An error count of 0 has no ratio: the unpaired comparison, said as such.
    z = compare_rounds({0: 0.0, 1: 2.0, 2: 1.0}, {0: 1.0, 1: 1.0, 2: 3.0}, "minimize")
    assert z.test == MEDIANS_TEST


def test_the_paired_interval_holds_its_level_at_four_rounds() -> None:
    """Coverage of `compare_rounds` at 4 rounds, lognormal noise, k = 3 at 1 − 0.05/3:
    each interval covers ≥ 94% and all three together ≥ 94% (1,000 draws; the bench
    bench/evaluator/coverage.py measures every noise model at 2,000)."""
    import math

    import numpy as np

    from kvtune.stats import compare_rounds

    rng = np.random.default_rng(7)
    level = 1 - 0.05 / 3
    each = together = 0
    draws = 1000
    for _ in range(draws):
        base = np.exp(rng.normal(0, 0.05, 4)) * 100
        covered = []
        for _k in range(3):
            cand = np.exp(rng.normal(0, 0.05, 4)) * 110
            c = compare_rounds(dict(enumerate(cand)), dict(enumerate(base)), "maximize",
                               level=level)
            covered.append(c.ci_low <= 0.1 <= c.ci_high)
            assert math.isclose(math.log1p(c.improvement),
                                (math.log1p(c.ci_low) + math.log1p(c.ci_high)) / 2)
        each += sum(covered)
        together += all(covered)
    assert each / (3 * draws) >= 0.975 and together / draws >= 0.94, (each, together)


def test_pooled_intervals_cover_at_their_level_and_widen_when_estimates_disagree() -> None:
    """Capacity searches each carry a 95% interval: pooled (random effects), the interval
    holds the true value about 95% of the time when the searches vary only as their own
    intervals say, and widens (heterogeneity p small) when they disagree beyond them."""
    import math

    import numpy as np

    from kvtune.stats import compare_pooled, pool_intervals

    rng = np.random.default_rng(5)
    truth, se, held = 30_000.0, 0.05, 0
    for _ in range(2000):
        ests = truth * np.exp(rng.normal(0, se, 3))
        cis = [(e * math.exp(-1.96 * se), e * math.exp(1.96 * se)) for e in ests]
        p = pool_intervals(list(ests), cis)
        held += p.ci[0] <= truth <= p.ci[1]
    assert 0.93 < held / 2000 < 0.97, held / 2000
    # Two searches 40% apart, each ±3%: said to disagree, and the interval spans both.
    p = pool_intervals([25_000.0, 35_000.0], [(24_250.0, 25_750.0), (33_950.0, 36_050.0)])
    assert p.heterogeneity_p < 0.01 and p.ci[0] < 25_000 and p.ci[1] > 35_000
    # One search is its own interval.
    assert pool_intervals([30_000.0], [(29_000.0, 31_000.0)]).ci == (29_000.0, 31_000.0)
    # A candidate 10% above the baseline, four searches each at ±3%: significant.
    c = compare_pooled([33_000.0] * 4, [(32_000.0, 34_000.0)] * 4,
                       [30_000.0] * 4, [(29_100.0, 30_900.0)] * 4, "maximize")
    assert c.p_value < 0.01 and 0.08 < c.improvement < 0.12 and c.ci_low > 0.05


def test_a_paired_capacity_comparison_cancels_the_hosts_round_to_round_swing() -> None:
    """Each round's candidate against the same round's baseline: a host that moves both by
    ±30% between rounds leaves the change's interval narrow and holding the truth, where
    pooling each arm on its own cannot tell the change from the swing."""
    import math

    from kvtune.stats import compare_paired, compare_pooled

    host = [1.0, 0.7, 1.3, 0.85]
    base = [30000 * h for h in host]
    cand = [33000 * h * f for h, f in zip(host, (1.01, 0.99, 1.0, 1.005), strict=True)]
    ci = [(v * 0.95, v * 1.05) for v in base], [(v * 0.95, v * 1.05) for v in cand]
    p = compare_paired(cand, ci[1], base, ci[0], "maximize")
    u = compare_pooled(cand, ci[1], base, ci[0], "maximize")
    assert p.ci_low <= 0.10 <= p.ci_high and p.ci_low > 0, p
    assert p.p_value < 0.05 and not u.ci_low > 0, (p, u)
    assert p.ci_high - p.ci_low < (u.ci_high - u.ci_low) / 2
    # minimize: the same knees read as latencies, the improvement's sign follows
    q = compare_paired(base, ci[0], cand, ci[1], "minimize")
    assert math.isclose(q.improvement, p.improvement, rel_tol=1e-9)


def test_the_confirmation_pairs_capacity_by_round_and_skips_spoiled_rounds() -> None:
    from kvtune.study.confirm import Arm, interleave, pooled_comparison

    values = {"b": iter([30000, 21000, 39000, 25500]), "c": iter([33000, 23100, None, 28050])}

    def measure(cfg: dict) -> tuple[str, str, dict]:
        v = next(values[cfg["k"]])
        if v is None:
            return "skipped", "host_disturbed", {}
        return "ok", "", {"capacity": v, "capacity_ci_low": v * 0.96,
                          "capacity_ci_high": v * 1.04}

    base, cand = Arm("baseline", {"k": "b"}), Arm("c", {"k": "c"})
    interleave([base, cand], 4, "capacity", measure, seed=1)
    assert base.rounds == [0, 1, 2, 3] and cand.rounds == [0, 1, 3]
    comp = pooled_comparison(cand, base, "capacity", "maximize", 0.95)
    assert comp is not None and comp.n_candidate == 3  # round 2 has no pair
    assert comp.ci_low <= 0.10 <= comp.ci_high and comp.ci_low > 0, comp
