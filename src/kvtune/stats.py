"""kvtune's one statistics module: robust centre, bootstrap and order-statistic CIs, the
comparison of a candidate with the baseline (ratio CI and Mann–Whitney U), Welch's test and
interval on logarithms (the ablation's relative changes), multiple-comparison adjustments
(Holm, Benjamini–Hochberg), rank correlation and the F test of the importance analysis, and
the power calculations. No other module imports scipy.stats
(tests/test_architecture.py::test_one_statistics_module)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kvtune import present
from kvtune.metrics import Direction

# scipy.stats is imported inside the functions that need it: importing it costs about
# 0.7 s, paid by every process that imports kvtune.measure.preflight (each fleet worker at
# start-up) even when no test is run.


def centre(values: Sequence[float], statistic: str = "median") -> float:
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return math.nan
    return float(np.median(xs) if statistic == "median" else np.mean(xs))


def bootstrap_ci(values: Sequence[float], statistic: str = "median", level: float = 0.95,
                 resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the median (or mean). With fewer than 2 values the CI is
    (nan, nan): one sample says nothing about its spread."""
    xs = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(xs) < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(xs), size=(resamples, len(xs)))
    samples = xs[idx]
    stat = np.median(samples, axis=1) if statistic == "median" else samples.mean(axis=1)
    lo, hi = np.percentile(stat, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Pooled:
    """Independent estimates pooled: the value, its 95% CI, how many, the between-estimate
    spread τ (log scale) and the heterogeneity test's p (small: they disagree beyond their
    own intervals)."""

    value: float
    ci: tuple[float, float]
    n: int
    tau: float
    heterogeneity_p: float


def pool_intervals(estimates: Sequence[float], cis: Sequence[tuple[float, float]],
                   level: float = 0.95) -> Pooled:
    """Random-effects pooling (DerSimonian–Laird) of positive estimates that each carry
    their own `level` interval (capacity searches, each on a fresh server), on the log
    scale where such intervals are about symmetric: each interval gives its standard error;
    Cochran's Q measures how much more the estimates disagree than their errors say, and
    the between-estimate variance τ² it implies widens the pooled interval. One estimate is
    its own interval. The pooled interval uses the normal quantile, so with few and
    disagreeing estimates it leans narrow (bench/capacity/repeatability.py measures it).
    The quantile and Cochran's p from scipy.special (ndtri, chdtrc: what scipy.stats'
    norm.ppf and chi2.sf compute, without their wrappers, a fifth of the time)."""
    from scipy import special

    z = _norm_ppf((1 + level) / 2)
    y = np.log(np.asarray(estimates, dtype=float))
    lo = np.log(np.asarray([c[0] for c in cis], dtype=float))
    hi = np.log(np.asarray([c[1] for c in cis], dtype=float))
    se = np.maximum((hi - lo) / (2 * z), 1e-6)
    k = len(y)
    if k == 1:
        return Pooled(float(estimates[0]), (float(cis[0][0]), float(cis[0][1])), 1, 0.0,
                      math.nan)
    w = 1 / se**2
    fixed = float(np.sum(w * y) / np.sum(w))
    q = float(np.sum(w * (y - fixed) ** 2))
    denom = float(np.sum(w) - np.sum(w**2) / np.sum(w))
    tau2 = max(0.0, (q - (k - 1)) / denom) if denom > 0 else 0.0
    ws = 1 / (se**2 + tau2)
    mu = float(np.sum(ws * y) / np.sum(ws))
    half = z * math.sqrt(1 / float(np.sum(ws)))
    p = float(special.chdtrc(k - 1, q))  # chi2.sf(q, k - 1)
    return Pooled(math.exp(mu), (math.exp(mu - half), math.exp(mu + half)), k,
                  math.sqrt(tau2), p)


def compare_pooled(candidate: Sequence[float], cand_cis: Sequence[tuple[float, float]],
                   baseline: Sequence[float], base_cis: Sequence[tuple[float, float]],
                   direction: Direction, level: float = 0.95) -> Comparison:
    """A candidate against the baseline when every value carries its own 95% interval (a
    capacity search's knee): each side pooled by `pool_intervals` (random effects, so the
    spread between its values widens it), the log ratio's standard error from the two
    pooled intervals, its `level` CI and a one-sided normal p-value of an improvement."""
    from scipy import stats as sps

    c, b = pool_intervals(candidate, cand_cis), pool_intervals(baseline, base_cis)
    z95 = float(sps.norm.ppf(0.975))

    def se(p: Pooled) -> float:
        return (math.log(p.ci[1]) - math.log(p.ci[0])) / (2 * z95)

    d = Direction(direction).sign * (math.log(c.value) - math.log(b.value))
    s = math.hypot(se(c), se(b))
    z = float(sps.norm.ppf(1 - (1 - level) / 2))
    p = float(sps.norm.sf(d / s)) if s > 0 else (0.0 if d > 0 else 1.0)
    return Comparison(math.expm1(d), math.expm1(d - z * s), math.expm1(d + z * s), p,
                      len(candidate), len(baseline), direction, POOLED_TEST)


def compare_paired(candidate: Sequence[float], cand_cis: Sequence[tuple[float, float]],
                   baseline: Sequence[float], base_cis: Sequence[tuple[float, float]],
                   direction: Direction, level: float = 0.95) -> Comparison:
    """A candidate against the baseline measured in the same rounds, every value with its
    own 95% interval (a capacity search's knee): each round's log ratio, its variance from
    the two intervals, pooled over the rounds with random effects (DerSimonian–Laird's τ²:
    the rounds may disagree more than their intervals say) and the Hartung–Knapp–Sidik–
    Jonkman interval (Student's t with rounds − 1 degrees of freedom on a variance that is
    never below the model's), which keeps its coverage with a few rounds where the normal
    one does not (bench/capacity/paired_coverage.py). One-sided p-value of an improvement
    from the same t."""
    from scipy import stats as sps

    z95 = float(sps.norm.ppf(0.975))
    c, b = np.asarray(candidate, dtype=float), np.asarray(baseline, dtype=float)
    d = Direction(direction).sign * (np.log(c) - np.log(b))
    se2 = np.zeros_like(d)
    for cis in (cand_cis, base_cis):
        lo = np.log(np.asarray([x[0] for x in cis], dtype=float))
        hi = np.log(np.asarray([x[1] for x in cis], dtype=float))
        se2 += np.maximum((hi - lo) / (2 * z95), 1e-6) ** 2
    k = len(d)
    w = 1 / se2
    fixed = float(np.sum(w * d) / np.sum(w))
    q = float(np.sum(w * (d - fixed) ** 2))
    denom = float(np.sum(w) - np.sum(w**2) / np.sum(w))
    tau2 = max(0.0, (q - (k - 1)) / denom) if denom > 0 else 0.0
    ws = 1 / (se2 + tau2)
    mu = float(np.sum(ws * d) / np.sum(ws))
    model_var = 1 / float(np.sum(ws))
    hk = float(np.sum(ws * (d - mu) ** 2)) / (k - 1) * model_var if k > 1 else 0.0
    s = math.sqrt(max(model_var, hk))
    t = float(sps.t.ppf(1 - (1 - level) / 2, max(k - 1, 1)))
    p = float(sps.t.sf(mu / s, max(k - 1, 1))) if s > 0 else (0.0 if mu > 0 else 1.0)
    return Comparison(math.expm1(mu), math.expm1(mu - t * s), math.expm1(mu + t * s), p,
                      k, k, direction, POOLED_TEST, max(k - 1, 1))


# A trial's interval is a 95% CI only from this many values on: the distribution-free
# order-statistic interval of the median reaches 95% coverage at n = 6 ([min, max] covers
# 1 - 2/2^n: 93.8% at n = 5, 96.9% at n = 6), and the percentile bootstrap kvtune used
# covered 75% at n = 3 and 94% at n = 5 (bench/evaluator/ci_coverage.py). Below it the
# interval is the range of the values, and is called "range".
MIN_CI_N = 6
CI_95 = "95% CI"
RANGE = "range"


@functools.lru_cache(maxsize=1024)
def _order_statistic_rank(n: int, level: float) -> int:
    """The largest k with 1 - 2·P(Bin(n, ½) < k) >= `level` (0 when none): the rank of the
    median's order-statistic interval, once per (n, level). The binomial CDF at ½ is an
    exact sum of binomial coefficients (every trial's every metric asks)."""
    k = 0
    below = 0  # P(Bin(n, ½) < j) · 2^n
    for j in range(1, n // 2 + 1):
        below += math.comb(n, j - 1)
        if 1 - 2 * below / 2 ** n >= level:
            k = j
    return k


def order_statistic_ci(values: Sequence[float], level: float = 0.95
                       ) -> tuple[float, float, str]:
    """(low, high, kind) for the median: the distribution-free order-statistic interval
    [x(k), x(n-k+1)] with the largest k whose coverage 1 - 2·P(Bin(n, ½) < k) is at least
    `level` (kind "95% CI"), or the range [min, max] when n is too small for that (kind
    "range"). NaN bounds with fewer than 2 values."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    n = len(xs)
    if n < 2:
        return (math.nan, math.nan, RANGE)
    k = _order_statistic_rank(n, level)
    if k == 0:
        return (xs[0], xs[-1], RANGE)
    return (xs[k - 1], xs[n - k], CI_95 if level == 0.95 else f"{present.share(level)} CI")


def ci_kind(n: int) -> str:
    """What a trial's interval from `n` values is: "95% CI" or "range"."""
    return CI_95 if n >= MIN_CI_N else RANGE


def cov(values: Sequence[float]) -> float:
    xs = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(xs) < 2 or xs.mean() == 0:
        return math.nan
    return float(xs.std(ddof=1) / abs(xs.mean()))


# The statistics a Comparison can come from (its `test`).
MEDIANS_TEST = "ratio of medians, bootstrap interval, Mann–Whitney p"
PAIRED_TEST = "paired by round: geometric mean of the rounds' ratios, t interval and p"
POOLED_TEST = "capacity searches pooled with their intervals"


@dataclass
class Comparison:
    """A candidate against the baseline. `improvement` is signed so that > 0 is better in
    the objective's direction (for minimize: baseline/candidate - 1)."""

    improvement: float
    ci_low: float
    ci_high: float
    p_value: float
    n_candidate: int
    n_baseline: int

    def significant(self, alpha: float, min_improvement: float = 0.0) -> bool:
        return self.p_value < alpha and self.ci_low > min_improvement

    direction: Direction = Direction.MAXIMIZE
    # The statistic behind the figure, its interval and p (said with them on screens).
    test: str = MEDIANS_TEST
    # The degrees of freedom of the interval's Student t (rounds − 1), None when it is not
    # a t interval (a normal or bootstrap one): what more rounds would narrow it to
    # (kvtune.study.headline) depends on it — t at 1 degree of freedom is 6× the normal's.
    df: int | None = None

    def change(self) -> tuple[float, float, float]:
        """The metric's own relative change, candidate / baseline − 1, with its CI: the
        number people quote ("p99 −79%"). For maximize it equals the improvement; for
        minimize an improvement g is a change of 1/(1+g) − 1 (the CI bounds swap)."""
        if self.direction == Direction.MAXIMIZE:
            return self.improvement, self.ci_low, self.ci_high

        def f(g: float) -> float:
            return 1 / (1 + g) - 1 if g > -1 else math.inf

        return f(self.improvement), f(self.ci_high), f(self.ci_low)

    def as_dict(self) -> dict[str, float | int | str | None]:
        ch, ch_lo, ch_hi = self.change()
        return {"improvement": self.improvement, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "change": ch, "change_ci_low": ch_lo, "change_ci_high": ch_hi,
                "p_value": self.p_value, "n_candidate": self.n_candidate,
                "n_baseline": self.n_baseline, "direction": self.direction,
                "test": self.test, "df": self.df}


def compare(candidate: Sequence[float], baseline: Sequence[float], direction: Direction,
            level: float = 0.95, resamples: int = 4000, seed: int = 0,
            two_sided: bool = False) -> Comparison:
    """Improvement of the candidate's median over the baseline's, with a bootstrap CI of the
    ratio (each group resampled on its own) and a Mann–Whitney U p-value (one-sided in the
    objective's direction, or two-sided to ask "did it move at all?")."""
    c = np.array([v for v in candidate if v is not None and not math.isnan(v)], dtype=float)
    b = np.array([v for v in baseline if v is not None and not math.isnan(v)], dtype=float)
    if len(c) == 0 or len(b) == 0:
        return Comparison(math.nan, math.nan, math.nan, 1.0, len(c), len(b), direction)

    better = Direction(direction)

    def gain(cm: np.ndarray | float, bm: np.ndarray | float) -> np.ndarray | float:
        return cm / bm - 1 if better is Direction.MAXIMIZE else bm / cm - 1

    point = float(gain(np.median(c), np.median(b)))
    rng = np.random.default_rng(seed)
    cs = np.median(c[rng.integers(0, len(c), size=(resamples, len(c)))], axis=1)
    bs = np.median(b[rng.integers(0, len(b), size=(resamples, len(b)))], axis=1)
    boot = np.asarray(gain(cs, bs))
    lo, hi = np.percentile(boot, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    alt = "two-sided" if two_sided else "greater" if better is Direction.MAXIMIZE else "less"
    if len(c) >= 2 and len(b) >= 2:
        from scipy import stats as sps

        p = float(sps.mannwhitneyu(c, b, alternative=alt).pvalue)
    else:
        p = 1.0
    return Comparison(point, float(lo), float(hi), p, len(c), len(b), direction)


def compare_rounds(candidate: Mapping[int, float], baseline: Mapping[int, float],
                   direction: Direction, level: float = 0.95, two_sided: bool = False,
                   seed: int = 0) -> Comparison:
    """A candidate against the baseline measured in the same rounds (round → value):
    each round's ratio d_r = log(candidate_r / baseline_r), oriented so that > 0 is better;
    the change is exp(mean d) − 1, the centre (on the log scale) of its Student t interval
    exp(mean d ± t_{n−1} · sd(d) / √n) − 1, and p is the paired t test's (one-sided in the
    objective's direction, or two-sided). Pairing cancels what the host does to a whole
    round (a drift, a noisy minute); the t interval holds its level at 4 rounds where the
    bootstrap of medians covered 92–93%, and for k candidates at 1 − 0.05/k all k hold
    together in ≥ 94% (bench/evaluator/coverage.py, docs/evaluation.md).

    Only rounds both arms measured count. Values that are not positive have no ratio
    (an error count of 0): the comparison is then `compare`'s, unpaired."""
    from scipy import special

    better = Direction(direction)
    rounds = sorted(r for r in set(candidate) & set(baseline)
                    if _positive(candidate[r]) and _positive(baseline[r]))
    if any(not _positive(v) for v in (*candidate.values(), *baseline.values())
           if v is not None and not math.isnan(v)):
        return compare(list(candidate.values()), list(baseline.values()), direction,
                       level=level, seed=seed, two_sided=two_sided)
    n = len(rounds)
    if n < 2:
        return Comparison(math.nan, math.nan, math.nan, 1.0, n, n, direction, PAIRED_TEST)
    d = better.sign * np.log(np.asarray([candidate[r] / baseline[r] for r in rounds]))
    mean = float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n)
    if se == 0:
        # Every round gave the same ratio: no spread to test against.
        p = 1.0 if mean == 0 or (mean < 0 and not two_sided) else 0.0
        return Comparison(math.expm1(mean), math.expm1(mean), math.expm1(mean), p, n, n,
                          direction, PAIRED_TEST)
    # Student's t as scipy.stats.t computes it (its ppf and sf are these two), without
    # the distribution's wrapper (most of the time of a comparison)
    h = float(special.stdtrit(n - 1, 0.5 + level / 2)) * se
    t = mean / se
    p = float(2 * special.stdtr(n - 1, -abs(t)) if two_sided else special.stdtr(n - 1, -t))
    return Comparison(math.expm1(mean), math.expm1(mean - h), math.expm1(mean + h), p, n, n,
                      direction, PAIRED_TEST, n - 1)


def _positive(v: float | None) -> bool:
    return v is not None and not math.isnan(v) and v > 0


def logs(xs: Sequence[float]) -> np.ndarray:
    """The logarithms of the positive values (relative changes are differences of them)."""
    return np.log(np.asarray([v for v in xs if v > 0], dtype=float))


def log_welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch t test on the logarithms (relative changes; a metric's noise is
    multiplicative). A rank test cannot reach Holm's level with a confirmation's few
    rounds: 4 against 4 gives at best p = 0.029 before adjustment."""
    from scipy import special

    xa, xb = logs(a), logs(b)
    if len(xa) < 2 or len(xb) < 2:
        return 1.0
    if np.ptp(xa) == 0 and np.ptp(xb) == 0:
        return 0.0 if xa[0] != xb[0] else 1.0
    d, se, dof = _welch(xa, xb)
    # scipy's ttest_ind(equal_var=False), without its wrapper (a tenth of the time): the
    # two-sided tail of Student's t, as scipy.stats.t.sf computes it
    p = float(2 * special.stdtr(dof, -abs(d / se))) if se > 0 else math.nan
    return 1.0 if math.isnan(p) else p


def _welch(xa: np.ndarray, xb: np.ndarray) -> tuple[float, float, float]:
    """Welch's difference of means, its standard error and its degrees of freedom
    (Welch-Satterthwaite; NaN when the standard error is 0)."""
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    d = float(xa.mean() - xb.mean())
    se = math.sqrt(va + vb)
    if se == 0:
        return d, 0.0, math.nan
    dof = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1))
    return d, se, float(dof)


def log_welch_ci(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float]:
    """Welch CI of mean(log a) − mean(log b) at confidence `level` (NaN when it cannot)."""
    from scipy import special

    xa, xb = logs(a), logs(b)
    if len(xa) < 2 or len(xb) < 2:
        return math.nan, math.nan
    d, se, dof = _welch(xa, xb)
    if se == 0:
        return d, d
    # Student's t quantile as scipy.stats.t.ppf computes it, without its wrapper
    h = float(special.stdtrit(dof, 0.5 + level / 2)) * se
    return d - h, d + h


def log_mean_diff(a: Sequence[float], b: Sequence[float]) -> float:
    """mean(log a) − mean(log b) (NaN when either has no positive value)."""
    xa, xb = logs(a), logs(b)
    if not (len(xa) and len(xb)):
        return math.nan
    return float(xa.mean() - xb.mean())


def pooled_log_sd(samples: Sequence[Sequence[float]]) -> float:
    """The pooled SD of the logarithms of several arms' samples (NaN without two)."""
    arms = [x for x in (logs(xs) for xs in samples) if len(x) >= 2]
    dof = sum(len(x) - 1 for x in arms)
    if not dof:
        return math.nan
    return math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in arms) / dof)


def percentile_interval(draws: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The central `level` interval of bootstrap draws (percentile method)."""
    lo, hi = np.percentile(np.asarray(draws, dtype=float),
                           [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Spearman's rank correlation and its two-sided p-value."""
    from scipy import stats as sps

    res = sps.spearmanr(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float))
    return float(res.statistic), float(res.pvalue)


def f_test_p(extra_ss: float, df_extra: int, rss: float, df_res: int) -> float:
    """The p-value of the partial F test: does a term that explains `extra_ss` on
    `df_extra` degrees of freedom beat the residual `rss` on `df_res`?"""
    from scipy import special

    if df_extra <= 0 or df_res <= 0:
        return 1.0
    if rss <= 1e-300:
        return 0.0 if extra_ss > 0 else 1.0
    f = (extra_ss / df_extra) / (rss / df_res)
    if 0 < f < math.inf:  # scipy.stats.f.sf is fdtrc inside its support (without the wrapper)
        return float(special.fdtrc(df_extra, df_res, f))
    from scipy import stats as sps

    return float(sps.f.sf(f, df_extra, df_res))


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (q-values), scipy's false_discovery_control."""
    if len(p_values) == 0:
        return []
    from scipy import stats as sps

    return [float(q) for q in sps.false_discovery_control(np.asarray(p_values, dtype=float))]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (confirmation compares several candidates)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def robust_cov(values: Sequence[float]) -> float:
    """1.4826 × MAD / median: the CoV a normal sample would have, insensitive to the
    isolated outliers that tail latencies show (and that rank tests ignore)."""
    xs = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(xs) < 3 or np.median(xs) == 0:
        return math.nan
    med = float(np.median(xs))
    return float(1.4826 * np.median(np.abs(xs - med)) / abs(med))


# Asymptotic relative efficiency of Mann–Whitney against the t test for normal data (3/π).
_MWU_ARE = 3 / math.pi


def _z(alpha: float, candidates: int, power: float, two_sided: bool) -> float:
    level = alpha / max(candidates, 1) / (2 if two_sided else 1)
    return float(_norm_ppf(1 - level) + _norm_ppf(power))


def _norm_ppf(q: float) -> float:
    """scipy.stats.norm.ppf(q): ndtri inside (0, 1), without the distribution's wrapper."""
    from scipy import special

    if 0 < q < 1:
        return float(special.ndtri(q))
    from scipy import stats as sps  # (its import is most of a short command's time)

    return float(sps.norm.ppf(q))


def _t_ppf(q: float, df: float) -> float:
    """scipy.stats.t.ppf(q, df): stdtrit inside (0, 1), without the distribution's wrapper."""
    from scipy import special

    if 0 < q < 1 and df > 0:
        return float(special.stdtrit(df, q))
    from scipy import stats as sps

    return float(sps.t.ppf(q, df))


def detectable_improvement(cov_: float, rounds: int, alpha: float, candidates: int,
                           power: float = 0.8, *, two_sided: bool = False,
                           rank: bool = True, paired: bool = False) -> float:
    """The smallest relative improvement a comparison detects with probability `power`
    at Holm's strictest level alpha / candidates, `rounds` samples per arm, noise `cov_`.
    `paired`: the confirmation's paired t on the rounds' log ratios (Student's quantiles
    with rounds − 1 degrees of freedom; each ratio's spread √2 · cov_). Otherwise a normal
    approximation: a one-sided Mann–Whitney test (`rank`), or with `rank=False` a t test
    on the logarithms (the ablation's; `cov_` is then the logarithms' SD); `two_sided`
    for a two-sided test."""
    if rounds < 2 or math.isnan(cov_):
        return math.nan
    if paired:
        level = alpha / max(candidates, 1) / (2 if two_sided else 1)
        q = _t_ppf(1 - level, rounds - 1) + _t_ppf(power, rounds - 1)
        return q * math.sqrt(2 / rounds) * cov_
    z = _z(alpha, candidates, power, two_sided)
    return float(z * math.sqrt(2 / (rounds * (_MWU_ARE if rank else 1.0))) * cov_)


def rounds_needed(cov_: float, improvement: float, alpha: float, candidates: int,
                  power: float = 0.8, *, two_sided: bool = False, rank: bool = True,
                  paired: bool = False, limit: int = 1000) -> int:
    """Confirmation rounds per arm needed to detect `improvement` (see
    detectable_improvement; the same `two_sided`, `rank` and `paired`)."""
    if improvement <= 0 or math.isnan(cov_):
        return 0
    if paired:
        return next((n for n in range(2, limit + 1)
                     if detectable_improvement(cov_, n, alpha, candidates, power,
                                               two_sided=two_sided, paired=True)
                     <= improvement), limit)
    z = _z(alpha, candidates, power, two_sided)
    return max(2, math.ceil(2 * (z * cov_ / improvement) ** 2
                            / (_MWU_ARE if rank else 1.0)))


# -- what the confirmation can show at all -----------------------------------------------------


def confirmation_problem(rounds: int, candidates: int, alpha: float) -> str | None:
    """Why a confirmation over `rounds` rounds can never find anything significant, or None
    when it can. Its paired t (`compare_rounds`) needs two rounds for a spread; from two on
    any p can be reached (how likely is the noise floor's `detectable_improvement`)."""
    if rounds <= 0 or rounds >= 2:
        return None
    return (f"evaluation.confirm_rounds: {rounds} round can never show a significant "
            "improvement: each candidate is compared with the baseline round by round, and "
            "a spread needs at least 2 rounds. Use confirm_rounds >= 4 (or 0: no "
            "confirmation)")


# -- anytime-valid intervals (kvtune canary) --------------------------------------------------
#
# A canary is looked at after every interval; a fixed-n interval re-checked at every look
# claims a difference far more often than its level says. A confidence sequence holds at
# every look at once: P(the true mean is outside the interval at ANY look) <= alpha. kvtune
# uses the asymptotic confidence sequence of Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas
# ("Time-uniform central limit theory and asymptotic confidence sequences", arXiv:2103.06476,
# Theorem 2.2, two-sided normal mixture), on the per-interval paired differences canary -
# control, with two small-sample guards measured by tests/test_canary_stats.py: no interval
# before `min_looks` looks, and the sample SD widened by Student's t quantile over the normal
# one at the look's degrees of freedom (without it, coverage at 5 looks fell to ~92%).
# Its validity assumes independent intervals. Against a positively autocorrelated series
# the SD is widened by the AR(1) long-run factor sqrt((1 + r) / (1 - r)), r the lag-1
# autocorrelation with its small-sample bias added back (r + (1 + 3r) / n, within [0, 0.95]):
# that halves the misses of an AR(1) series at 0.3 to 0.75 but does not remove them (a
# short series cannot tell its autocorrelation); docs/evaluation.md has the figures.


@dataclass(frozen=True)
class Sequential:
    """A confidence sequence's interval at one look: the mean of the `looks` values, the
    interval [low, high] that holds at every look with probability >= 1 - alpha
    (-inf, +inf before `min_looks`), their SD and lag-1 autocorrelation."""

    looks: int
    estimate: float
    low: float
    high: float
    sd: float
    lag1: float
    alpha: float

    @property
    def ready(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def cs_rho2(alpha: float, t_opt: float) -> float:
    """The mixture's ρ², chosen so that the sequence is tightest near `t_opt` looks."""
    la = math.log(1 / alpha)
    return (2 * la + math.log(1 + 2 * la)) / max(t_opt, 1.0)


def cs_radius(looks: int, sd: float, alpha: float, t_opt: float) -> float:
    """The half-width of the asymptotic confidence sequence at `looks` looks for values of
    standard deviation `sd` (already widened for its estimation, `t_widening`)."""
    t = float(looks)
    rho2 = cs_rho2(alpha, t_opt)
    return sd * math.sqrt(2 * (t * rho2 + 1) / (t * t * rho2)
                          * math.log(math.sqrt(t * rho2 + 1) / alpha))


@functools.lru_cache(maxsize=4096)
def t_widening(looks: int, alpha: float) -> float:
    """Student's t quantile over the normal one at `looks` - 1 degrees of freedom (cached:
    the verdict asks for the same looks at every rule and every look)."""
    from scipy import stats as sps

    df = max(looks - 1, 1)
    return float(sps.t.ppf(1 - alpha / 2, df) / sps.norm.ppf(1 - alpha / 2))


def _long_run(lag1: float | np.ndarray, n: float | np.ndarray) -> float | np.ndarray:
    """The AR(1) long-run SD factor sqrt((1 + r) / (1 - r)) for a lag-1 autocorrelation
    estimated from n values (bias added back; 1 for a NaN or negative one)."""
    r = np.clip(np.nan_to_num(lag1 + (1 + 3 * lag1) / n, nan=0.0), 0.0, 0.95)
    out = np.sqrt((1 + r) / (1 - r))
    return float(out) if np.ndim(out) == 0 else out


def cs_coverage_misses(series: np.ndarray, truth: float, alpha: float, t_opt: float,
                       min_looks: int = 5) -> np.ndarray:
    """For each row of `series` (runs x looks), whether its confidence sequence missed
    `truth` at any look from `min_looks` on, for coverage measurements (tests, bench)."""
    m, r = cs_prefixes(series, alpha, t_opt)
    bad = np.abs(m - truth) > r
    return np.asarray(bad[:, min_looks - 1:].any(axis=1))


def cs_prefixes(series: np.ndarray, alpha: float, t_opt: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """The estimate and half-width of the AR(1)-widened sequence (the canary's before its
    long-run variance; bench/canary/aa_rates.py's "before" column) at every look of every row of
    `series` (runs x looks), vectorised."""
    from scipy import stats as sps

    x = np.asarray(series, dtype=float)
    t = np.arange(1, x.shape[1] + 1, dtype=float)
    sx = np.cumsum(x, axis=1)
    m = sx / t
    ss = np.maximum(np.cumsum(x * x, axis=1) - t * m * m, 0)
    sd = np.sqrt(ss / np.maximum(t - 1, 1))
    # each prefix's lag-1 autocorrelation: sum (x_i - m)(x_i+1 - m) / sum (x_i - m)^2
    xy = np.concatenate([np.zeros((x.shape[0], 1)), np.cumsum(x[:, 1:] * x[:, :-1], axis=1)],
                        axis=1)
    sx_prev = np.concatenate([np.zeros((x.shape[0], 1)), sx[:, :-1]], axis=1)
    cross = xy - m * (sx_prev + sx - x[:, :1]) + (t - 1) * m * m
    with np.errstate(invalid="ignore", divide="ignore"):
        lag1 = np.where((ss > 0) & (t > 2), cross / np.where(ss > 0, ss, 1), np.nan)
    sd = sd * _long_run(lag1, t)
    df = np.maximum(t - 1, 1)
    widen = sps.t.ppf(1 - alpha / 2, df) / sps.norm.ppf(1 - alpha / 2)
    rho2 = cs_rho2(alpha, t_opt)
    r = sd * widen * np.sqrt(2 * (t * rho2 + 1) / (t * t * rho2)
                             * np.log(np.sqrt(t * rho2 + 1) / alpha))
    return m, r


def cs_looks_to_exclude(gap: float, sd: float, alpha: float, t_opt: float,
                        limit: int = 1_000_000) -> int | None:
    """The number of looks at which the sequence's half-width falls below `gap` (the
    distance of the estimate from the value to exclude), were the estimate and SD to stay
    as they are; None when not within `limit` looks (or the gap is 0)."""
    if not gap or not math.isfinite(gap) or not math.isfinite(sd):
        return None
    gap = abs(gap)
    if sd == 0:
        return 2
    lo, hi = 2, 2
    while cs_radius(hi, sd * t_widening(hi, alpha), alpha, t_opt) >= gap:
        if hi >= limit:
            return None
        lo, hi = hi, min(hi * 2, limit)
    while lo < hi:
        mid = (lo + hi) // 2
        if cs_radius(mid, sd * t_widening(mid, alpha), alpha, t_opt) < gap:
            hi = mid
        else:
            lo = mid + 1
    return hi
