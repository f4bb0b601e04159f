"""The canary's interval valid at every look, for per-interval series that are correlated
from one look to the next.

Method: the asymptotic confidence sequence of Waudby-Smith, Arbour, Sinha, Kennedy and
Ramdas ("Time-uniform central limit theory and asymptotic confidence sequences", 2021):

    mean_n +/- s_n * sqrt(2 (n rho^2 + 1) / (n^2 rho^2) * log(sqrt(n rho^2 + 1) / alpha))

with s_n the series' *long-run* standard deviation instead of its plain one. The sequence
rests on a strong Gaussian approximation of the partial sums (S_n - n mu close to
sigma W(n)); a weakly dependent (mixing) series has one too, with sigma^2 its long-run
variance (the sum of its autocovariances), so a consistent estimate of that variance keeps
the sequence valid at every look for the actual series of looks, not only for independent
ones. The estimate is Newey and West's (Bartlett kernel) with bandwidth L = floor(2 sqrt(n))
lags (at most n - 2). A short series' estimate falls short twice: it is biased low (the
series is demeaned; divided by the Bartlett estimate's fixed-b mean, 1 - b + b^2/3 with
b = (L + 1) / n, after Kiefer and Vogelsang), and it is noisy (Student's t quantile over
the normal one at n / (L + 1) degrees of freedom, the batches the bandwidth leaves,
at least 1). No interval before `min_looks` looks.

tests/test_canary_stats.py measures its coverage at every look (independent, Student-t,
log-ratio and AR(1) series, and the recorded A/A series of bench/canary/); docs/evaluation.md
has the tables (bench/canary/aa_rates.py). The price of the long-run variance is time: on
independent series a shift of half a standard deviation is told in about 56 looks instead
of about 37 for the plain sequence (at alpha 0.05). Its limit: at alpha 0.05 a series with
a lag-1 autocorrelation of 0.6 or more (intervals much shorter than the traffic's drifts)
is missed more often than alpha (10% at 0.6, 20% at 0.8; at 0.01 within it up to 0.6), and
the session says so above STRONG_LAG1."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kvtune import stats
from kvtune.stats import Sequential

METHOD = ("asymptotic confidence sequence (Waudby-Smith et al. 2021) of the per-interval "
          "paired differences, with their long-run variance (Newey-West, bandwidth "
          "2 sqrt(n) looks) for series correlated from look to look; Bonferroni over the "
          "rules")
BANDWIDTH = 2.0  # L = floor(BANDWIDTH * sqrt(n)) lags
STRONG_LAG1 = 0.5  # above it the sequence covers less than stated (AR(1) 0.6: 10% at 0.05)


def bandwidth(n: int | np.ndarray) -> np.ndarray | int:
    """The Bartlett kernel's lags at n looks: floor(2 sqrt(n)), at most n - 2, at least 0."""
    out = np.clip(np.floor(BANDWIDTH * np.sqrt(n)), 0, np.maximum(np.asarray(n) - 2, 0))
    return int(out) if np.ndim(out) == 0 else out.astype(int)


def _dof(n: int | np.ndarray) -> np.ndarray | float:
    """The estimate's degrees of freedom: n / (L + 1), the batches the bandwidth leaves."""
    out = np.maximum(np.asarray(n, dtype=float) / (np.asarray(bandwidth(n)) + 1), 1.0)
    return float(out) if np.ndim(out) == 0 else out


def _bias(n: int | np.ndarray) -> np.ndarray | float:
    """The Bartlett estimate's mean over the long-run variance for a demeaned series,
    1 - b + b^2 / 3 with b = (L + 1) / n (Kiefer and Vogelsang's fixed-b limit): the
    estimate is divided by it."""
    b = (np.asarray(bandwidth(n)) + 1) / np.maximum(np.asarray(n, dtype=float), 1)
    out = np.maximum(1 - b + b * b / 3, 0.2)
    return float(out) if np.ndim(out) == 0 else out


def _widening(dof: float, alpha: float) -> float:
    """Student's t quantile over the normal one at `dof` degrees of freedom (>= 1): kvtune's
    statistics module's at the whole degrees of freedom either side, its log interpolated
    linearly in 1 / dof (never narrower than the exact quantile, at most 4% wider from 1
    degree of freedom up, alpha 0.001 to 0.05)."""
    lo = int(dof)
    w_lo = stats.t_widening(lo + 1, alpha)  # its argument is looks: dof + 1
    if dof == lo:
        return w_lo
    w_hi = stats.t_widening(lo + 2, alpha)
    f = (1 / lo - 1 / dof) / (1 / lo - 1 / (lo + 1))
    return math.exp(math.log(w_lo) + f * (math.log(w_hi) - math.log(w_lo)))


def _boundary(n: np.ndarray | float, alpha: float, t_opt: float) -> np.ndarray | float:
    rho2 = stats.cs_rho2(alpha, t_opt)
    return np.sqrt(2 * (n * rho2 + 1) / (n * n * rho2) * np.log(np.sqrt(n * rho2 + 1) / alpha))


def radius(looks: int, sd: float, alpha: float, t_opt: float) -> float:
    """The half-width at `looks` looks for a series of long-run standard deviation `sd`."""
    return float(sd * _widening(float(_dof(looks)), alpha) * _boundary(float(looks), alpha,
                                                                        t_opt))


def long_run_variance(x: np.ndarray) -> float:
    """Newey-West's estimate of the long-run variance of series x (Bartlett kernel,
    bandwidth(len(x)) lags), divided by its mean shortfall for a demeaned series (_bias)
    and scaled by n / (n - 1) like the sample variance."""
    n = len(x)
    c = x - x.mean()
    lags = int(bandwidth(n))
    v = float(c @ c) / n
    for k in range(1, lags + 1):
        v += 2 * (1 - k / (lags + 1)) * float(c[k:] @ c[:-k]) / n
    return max(v, 0.0) / float(_bias(n)) * n / max(n - 1, 1)


def confidence_sequence(values: Sequence[float], alpha: float = 0.05, t_opt: float = 30,
                        min_looks: int = 5) -> Sequential:
    """The two-sided sequence of the mean of `values` (one per look, in order; NaNs left
    out) at the last look: `sd` is the long-run SD, `lag1` the lag-1 autocorrelation."""
    xs = np.asarray(values, dtype=float)
    xs = xs[~np.isnan(xs)]
    n = len(xs)
    est = float(xs.sum()) / n if n else math.nan
    c = xs - est
    ss = float(c @ c)
    lag1 = float(c[1:] @ c[:-1]) / ss if n > 2 and ss > 0 else math.nan
    sd = math.sqrt(long_run_variance(xs)) if n > 1 else math.nan
    if n < max(min_looks, 2):
        return Sequential(n, est, -math.inf, math.inf, sd, lag1, alpha)
    r = radius(n, sd, alpha, t_opt)
    return Sequential(n, est, est - r, est + r, sd, lag1, alpha)


def prefixes(series: np.ndarray, alpha: float, t_opt: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """The estimate and half-width of `confidence_sequence` at every look of every row of
    `series` (runs x looks, no NaNs), vectorised: the same figures, look by look."""
    x = np.asarray(series, dtype=float)
    looks = x.shape[1]
    t = np.arange(1, looks + 1, dtype=float)
    sx = np.cumsum(x, axis=1)
    m = sx / t
    lags = np.asarray(bandwidth(np.arange(1, looks + 1)))
    v = np.maximum(np.cumsum(x * x, axis=1) - t * m * m, 0) / t
    for k in range(1, int(lags.max(initial=0)) + 1):
        prod = np.zeros_like(x)
        prod[:, k:] = x[:, k:] * x[:, :-k]
        cross = np.cumsum(prod, axis=1)  # sum over i = k+1..n of x_i x_(i-k)
        head = np.zeros_like(x)  # sum over i = k+1..n of x_i
        head[:, k:] = sx[:, k:] - sx[:, [k - 1]]
        tail = np.zeros_like(x)  # sum over i = 1..n-k of x_i
        tail[:, k:] = sx[:, :-k]
        gamma = (cross - m * (head + tail) + np.maximum(t - k, 0) * m * m) / t
        w = np.where(k <= lags, 1 - k / (lags + 1), 0.0)
        v += 2 * w * gamma
    v = np.maximum(v, 0) / np.asarray(_bias(np.arange(1, looks + 1))) * t / np.maximum(t - 1, 1)
    dof = np.asarray(_dof(np.arange(1, looks + 1)))
    widen = np.array([_widening(float(d), alpha) for d in dof])
    return m, np.sqrt(v) * widen * np.asarray(_boundary(t, alpha, t_opt))


def coverage_misses(series: np.ndarray, truth: float, alpha: float, t_opt: float,
                    min_looks: int = 5) -> np.ndarray:
    """For each row of `series` (runs x looks), whether its sequence missed `truth` at any
    look from `min_looks` on."""
    m, r = prefixes(series, alpha, t_opt)
    return np.asarray((np.abs(m - truth) > r)[:, min_looks - 1:].any(axis=1))


def looks_to_exclude(gap: float, sd: float, alpha: float, t_opt: float,
                     limit: int = 1_000_000) -> int | None:
    """The looks at which the half-width falls below `gap` (the estimate's distance from
    the value to exclude), were the estimate and the long-run SD to stay as they are; None
    when not within `limit` looks (or the gap is 0)."""
    if not gap or not math.isfinite(gap) or not math.isfinite(sd):
        return None
    gap = abs(gap)
    if sd == 0:
        return 2
    lo, hi = 2, 2
    while radius(hi, sd, alpha, t_opt) >= gap:
        if hi >= limit:
            return None
        lo, hi = hi, min(hi * 2, limit)
    while lo < hi:  # bisection: the widening steps with the bandwidth, so this is close
        mid = (lo + hi) // 2
        if radius(mid, sd, alpha, t_opt) < gap:
            hi = mid
        else:
            lo = mid + 1
    return hi
