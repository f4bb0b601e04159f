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
ones.

The long-run variance is estimated AR(1)-prewhitened (Andrews and Monahan, 1992): the
series is filtered by an autoregressive coefficient r, e_t = c_t - r c_(t-1) (c the series
less its mean), the residuals' long-run variance v is Newey and West's (Bartlett kernel,
bandwidth L = floor(2 sqrt(n - 1)) lags), and the series' is v / (1 - r)^2. Whatever r,
this is consistent (the recolouring is exact in the limit); what r buys is in short
series: the filter takes out the persistence that a Bartlett kernel of a few lags cuts
short (Newey-West alone, the sequence before, missed AR(1) 0.6 in 9.5% and 0.8 in 20% of
series at alpha 0.05). A short series' r is what is left to get right:

- its bias: the lag-1 autocorrelation r1 of a series whose mean is estimated falls short
  of the coefficient by about (1 + 3 rho) / n (Kendall; Marriott and Pope, 1954), added
  back: rho~ = r1 + (1 + 3 r1) / n;
- its uncertainty, in the level: the filter uses an upper value,
  r = rho~ + Z sqrt((1 - rho~^2) / n), Z = RHO_Z = 1.5 standard errors (Bartlett's
  variance of the estimate), within [0, RHO_MAX = 0.9]. A filter above the true
  coefficient leaves residuals correlated negatively, which the Bartlett estimate
  overstates; one below leaves a positive, slowly decaying correlation, which it cuts
  short: erring high errs on the safe side. A negative coefficient is taken as 0, so no
  interval is narrower than for independent looks. The bound 0.9 (Andrews and Monahan
  use 0.97) changed no measured coverage: above it the early intervals were wider than
  anything reached (tens of SDs);
- its uncertainty, in the spread: the half-width is widened by Student's t quantile over
  the normal one at the estimate's degrees of freedom, Satterthwaite's combination of the
  residuals' (n - 1) / (L + 1) and the coefficient's n (1 - r) / (2 (1 + r)) (the delta
  method: the log of 1 / (1 - r)^2 has a variance of 4 (1 + r) / ((1 - r) n)), at least 1.

`sd` is the long-run SD, sqrt(v) / (1 - r). On independent series of 200 looks its square
runs about 15-20% low (the residuals are demeaned: Bartlett's fixed-b shortfall), which the
widening and the boundary's own slack cover (3% missed at alpha 0.05). No interval before
`min_looks` looks.

tests/test_canary_stats.py measures the coverage at every look (independent, Student-t,
log-ratio and AR(1) series 0.3 to 0.9, and the recorded A/A series of bench/canary/);
docs/evaluation.md has the tables (bench/canary/aa_rates.py, beside the sequence before).
Z = 1.5 is calibrated, not derived: of 1, 1.25 and 1.5 it is the one that kept AR(1) 0.8
and 0.9 and the recorded memcached series within alpha with a margin; the level and the
spread terms are both needed (either alone missed AR(1) 0.8 in 10-18% of series).

The price is time, wherever the looks seem correlated, and most at the first looks, while
the coefficient is least known (bench/canary/aa_rates.py, median look to exclude 0 at
alpha 0.05): a shift of half a long-run SD is told at look 57 on independent series (54.5
before), 69 at AR(1) 0.3 (52), 86 at 0.6 (39.5) and 112 at 0.8 (19: the sequence before
was faster there than the sequence with the long-run SD known, 34.5, being too narrow); a
shift of 2 SDs at look 19 on independent series (12 before). A series that drifts at the
start (a canary's hit ratio moving for its first 9 looks of 0.5 s, then steady) keeps a
lag-1 of 0.6 for long after and is told at about look 47 instead of 5.

The limits: the model is AR(1); a series whose correlations decay slower than
geometrically is left to the residuals' Newey-West, and a coefficient above 0.9 is taken
as 0.9 (AR(1) 0.9 is missed in about 5.7% of series at alpha 0.05). No estimate made from
the looks so far can cover a mean moved by rare one-sided excursions the session has not
yet seen: the recorded Valkey CPU-per-request difference (a calm level with a few dips of
3-5 SD lasting 2-4 s) is covered in about 87% of drawn sessions at 95%, every miss on the
side away from the dips in sessions that had not seen one, and 97% at 98.75%. The session
warns above STRONG_LAG1 that a longer --interval decides sooner."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from kvtune import stats
from kvtune.stats import Sequential

METHOD = ("asymptotic confidence sequence (Waudby-Smith et al. 2021) of the per-interval "
          "paired differences, with their long-run variance (AR(1)-prewhitened Newey-West, "
          "bandwidth 2 sqrt(n) looks, the coefficient bias-corrected and taken 1.5 standard "
          "errors high) for series correlated from look to look; Bonferroni over the rules")
BANDWIDTH = 2.0  # L = floor(BANDWIDTH * sqrt(n)) lags
RHO_Z = 1.5  # the AR(1) coefficient used: standard errors above its bias-corrected estimate
RHO_MAX = 0.9  # and at most this (see above)
# above it, looks are correlated enough for the interval to cost many more looks than
# independent ones would (AR(1) 0.6: about 1.5 times those of independent looks of the same
# long-run spread, 0.8 twice); a longer --interval decides sooner
STRONG_LAG1 = 0.5


def bandwidth(n: int | np.ndarray) -> np.ndarray | int:
    """The Bartlett kernel's lags for n values: floor(2 sqrt(n)), at most n - 2, at least 0."""
    if isinstance(n, (int, np.integer)):  # one look (the verdict's): plain ints, no arrays
        return min(max(math.floor(BANDWIDTH * math.sqrt(n)), 0), max(int(n) - 2, 0))
    out = np.clip(np.floor(BANDWIDTH * np.sqrt(n)), 0, np.maximum(np.asarray(n) - 2, 0))
    return int(out) if np.ndim(out) == 0 else out.astype(int)


def rho_corrected(lag1: float | np.ndarray, n: float | np.ndarray) -> np.ndarray | float:
    """The lag-1 autocorrelation r1 of n looks with its bias added back, r1 + (1 + 3 r1) / n
    (0 for a NaN one, as for a constant series)."""
    r = np.nan_to_num(np.asarray(lag1, dtype=float), nan=0.0)
    out = r + (1 + 3 * r) / np.maximum(np.asarray(n, dtype=float), 1)
    return float(out) if np.ndim(out) == 0 else out


def rho_upper(rho: float | np.ndarray, n: float | np.ndarray) -> np.ndarray | float:
    """The coefficient the filter uses: `rho` (bias-corrected) plus RHO_Z standard errors
    sqrt((1 - rho^2) / n), within [0, RHO_MAX]."""
    r = np.asarray(rho, dtype=float)
    se = np.sqrt(np.maximum(1 - np.clip(r, -1, 1) ** 2, 0) / np.maximum(np.asarray(n, float),
                                                                         1))
    out = np.clip(r + RHO_Z * se, 0.0, RHO_MAX)
    return float(out) if np.ndim(out) == 0 else out


# the same three for one look, in plain floats (the verdict asks at every look of every rule)
def _corrected_scalar(lag1: float, n: int) -> float:
    r = 0.0 if math.isnan(lag1) else lag1
    return r + (1 + 3 * r) / max(n, 1)


def _upper_scalar(rho: float, n: int) -> float:
    se = math.sqrt(max(1 - min(max(rho, -1.0), 1.0) ** 2, 0.0) / max(n, 1))
    return min(max(rho + RHO_Z * se, 0.0), RHO_MAX)


def _dof_scalar(n: int, upper: float) -> float:
    ne = max(n - 1, 1)
    nu_e = ne / (int(bandwidth(ne)) + 1)
    nu_r = max(n * (1 - upper) / (2 * (1 + upper)), 1e-9)
    return max(1 / (1 / nu_e + 1 / nu_r), 1.0)


def _dof(n: int | np.ndarray, upper: float | np.ndarray) -> np.ndarray | float:
    """The estimate's degrees of freedom (Satterthwaite): 1 / (1 / nu_e + 1 / nu_r) with the
    residuals' nu_e = (n - 1) / (L + 1) (the batches the bandwidth leaves) and the
    coefficient's nu_r = n (1 - r) / (2 (1 + r)); at least 1."""
    nn = np.asarray(n, dtype=float)
    ne = np.maximum(nn - 1, 1)
    nu_e = ne / (np.asarray(bandwidth(ne.astype(int))) + 1)
    u = np.asarray(upper, dtype=float)
    nu_r = nn * (1 - u) / (2 * (1 + u))
    out = np.maximum(1 / (1 / nu_e + 1 / np.maximum(nu_r, 1e-9)), 1.0)
    return float(out) if np.ndim(out) == 0 else out


def _widenings(dof: np.ndarray, alpha: float) -> np.ndarray:
    """Student's t quantile over the normal one at `dof` degrees of freedom (>= 1, any
    shape): kvtune's statistics module's at the whole degrees of freedom either side, its
    log interpolated linearly in 1 / dof (never narrower than the exact quantile, at most
    4% wider from 1 degree of freedom up, alpha 0.001 to 0.05)."""
    d = np.maximum(np.asarray(dof, dtype=float), 1.0)
    lo = np.floor(d).astype(int)
    top = int(lo.max(initial=1)) + 1
    # stats.t_widening's argument is looks: dof + 1
    table = np.log([stats.t_widening(k + 1, alpha) if k else 1.0 for k in range(top + 1)])
    f = (1 / lo - 1 / d) / (1 / lo - 1 / (lo + 1))
    return np.asarray(np.exp(table[lo] + f * (table[np.minimum(lo + 1, top)] - table[lo])))


def _widening(dof: float, alpha: float) -> float:
    """_widenings at one value, in plain floats."""
    d = max(dof, 1.0)
    lo = int(d)
    w_lo = stats.t_widening(lo + 1, alpha)
    if d == lo:
        return w_lo
    w_hi = stats.t_widening(lo + 2, alpha)
    f = (1 / lo - 1 / d) / (1 / lo - 1 / (lo + 1))
    return math.exp(math.log(w_lo) + f * (math.log(w_hi) - math.log(w_lo)))


def _boundary(n: np.ndarray | float, alpha: float, t_opt: float) -> np.ndarray | float:
    rho2 = stats.cs_rho2(alpha, t_opt)
    return np.sqrt(2 * (n * rho2 + 1) / (n * n * rho2) * np.log(np.sqrt(n * rho2 + 1) / alpha))


def _boundary_scalar(n: int, alpha: float, t_opt: float) -> float:
    """_boundary at one look, in plain floats."""
    rho2 = stats.cs_rho2(alpha, t_opt)
    return math.sqrt(2 * (n * rho2 + 1) / (n * n * rho2) * math.log(math.sqrt(n * rho2 + 1)
                                                                    / alpha))


def radius(looks: int, sd: float, alpha: float, t_opt: float, rho: float = 0.0) -> float:
    """The half-width at `looks` looks for a series of long-run SD `sd` whose
    bias-corrected lag-1 coefficient is `rho` (rho_corrected): its degrees of freedom
    depend on both."""
    dof = _dof_scalar(looks, _upper_scalar(rho, looks))
    return float(sd * _widening(dof, alpha) * _boundary_scalar(looks, alpha, t_opt))


def long_run_variance(x: np.ndarray) -> float:
    """The long-run variance of series x, AR(1)-prewhitened: the residuals' Newey-West
    variance, filtered at the upper coefficient (rho_upper of the bias-corrected lag-1
    autocorrelation), over (1 - that coefficient)^2."""
    xs = np.asarray(x, dtype=float)
    if len(xs) < 2:
        return math.nan
    return _sequences_of(xs[None, :], 0.05, 30, len(xs) + 1)[0].sd ** 2  # no interval


def confidence_sequence(values: Sequence[float], alpha: float = 0.05, t_opt: float = 30,
                        min_looks: int = 5) -> Sequential:
    """The two-sided sequence of the mean of `values` (one per look, in order; NaNs left
    out) at the last look: `sd` is the long-run SD (at the point estimate of the lag-1
    coefficient), `lag1` the plain lag-1 autocorrelation."""
    return confidence_sequences([values], alpha, t_opt, min_looks)[0]


def confidence_sequences(series: Sequence[Sequence[float]], alpha: float = 0.05,
                         t_opt: float = 30, min_looks: int = 5) -> list[Sequential]:
    """confidence_sequence of each of `series` (the verdict's rules at one look), the
    series of as many values computed together: one pass of array operations for all the
    rules instead of one a rule (the same figures to rounding)."""
    lengths = {len(values) for values in series}
    if len(lengths) == 1 and lengths != {0}:  # the usual look: one block, NaNs checked once
        block = np.array(series, dtype=float)
        if not np.isnan(block).any():
            return _sequences_of(block, alpha, t_opt, min_looks)
    clean = []
    for values in series:
        xs = np.asarray(values, dtype=float)
        clean.append(xs[~np.isnan(xs)])
    out: list[Sequential | None] = [None] * len(clean)
    by_length: dict[int, list[int]] = {}
    for i, xs in enumerate(clean):
        by_length.setdefault(len(xs), []).append(i)
    for n, rows in by_length.items():
        block = np.stack([clean[i] for i in rows]) if n else np.zeros((len(rows), 0))
        for i, seq in zip(rows, _sequences_of(block, alpha, t_opt, min_looks), strict=True):
            out[i] = seq
    return [s for s in out if s is not None]


@functools.lru_cache(maxsize=256)
def _lagged(m: int, lags: int) -> tuple[np.ndarray, np.ndarray]:
    """For m values and lags 1..lags: the index of value t + k in the values padded with
    one 0 (m: beyond the end), m x lags, and the Bartlett weights 1 - k / (lags + 1)."""
    idx = np.minimum(np.arange(m)[:, None] + np.arange(1, lags + 1), m)
    return idx, 1 - np.arange(1, lags + 1) / (lags + 1)


def _sequences_of(x: np.ndarray, alpha: float, t_opt: float, min_looks: int
                  ) -> list[Sequential]:
    """confidence_sequence of each row of `x` (rows x n values, no NaNs): the array work
    done once for all the rows, the rest in plain floats."""
    rows, n = x.shape
    if n == 0:
        return [Sequential(0, math.nan, -math.inf, math.inf, math.nan, math.nan, alpha)
                for _ in range(rows)]
    est = x.sum(axis=1) / n
    c = x - est[:, None]
    ests = est.tolist()
    if n < 2:
        return [Sequential(n, e, -math.inf, math.inf, math.nan, math.nan, alpha)
                for e in ests]
    lag1s = [math.nan] * rows
    if n > 2:
        ss = np.einsum("ij,ij->i", c, c).tolist()
        a1 = np.einsum("ij,ij->i", c[:, 1:], c[:, :-1]).tolist()
        lag1s = [a / q if q > 0 else math.nan for a, q in zip(a1, ss, strict=True)]
    ups = [_upper_scalar(_corrected_scalar(r1, n), n) for r1 in lag1s]
    up = np.array(ups)
    e = c[:, 1:] - up[:, None] * c[:, :-1]  # the residuals of the AR(1) filter
    m = n - 1
    lags = int(bandwidth(m))
    v = np.einsum("ij,ij->i", e, e)
    if lags > 0:  # every lag's sum of every row in one product: e_t e_(t+k), k = 1..lags
        idx, w = _lagged(m, lags)
        ahead = np.concatenate([e, np.zeros((rows, 1))], axis=1)[:, idx]
        v = v + 2 * (np.einsum("rt,rtk->rk", e, ahead) @ w)
    sds = (np.sqrt(np.maximum(v, 0.0) / max(m - 1, 1)) / (1 - up)).tolist()
    if n < min_looks:
        return [Sequential(n, e_, -math.inf, math.inf, sd, r1, alpha)
                for e_, sd, r1 in zip(ests, sds, lag1s, strict=True)]
    bound = _boundary_scalar(n, alpha, t_opt)
    out = []
    for e_, sd, r1, u in zip(ests, sds, lag1s, ups, strict=True):
        r = sd * _widening(_dof_scalar(n, u), alpha) * bound
        out.append(Sequential(n, e_, e_ - r, e_ + r, sd, r1, alpha))
    return out


def _sums(x: np.ndarray, s: np.ndarray, k: int, m: np.ndarray, first: int = 0
          ) -> tuple[np.ndarray, np.ndarray]:
    """sum over t = k+1..N of (x_t - m)(x_(t-k) - m), N the look and N - 1 (rows x looks;
    m the prefix means at the look), from cumulative sums (s: of x, with a 0 first); only
    the looks from the (first + 1)th on (the columns from `first`), 0 where N is below k."""
    rows, looks = x.shape
    prod = np.zeros((rows, looks + 1))
    if k < looks:
        prod[:, k + 1:] = np.cumsum(x[:, k:] * x[:, :looks - k], axis=1)
    now, before = np.zeros((rows, looks - first)), np.zeros((rows, looks - first))
    lo = max(first + 1, k)  # the first look N with a sum up to N
    if lo <= looks:
        mm = m[:, lo - 1:]
        head = s[:, lo:] - s[:, [k]]  # sum over t = k+1..N of x_t
        tail = s[:, lo - k:looks + 1 - k]  # sum over t = 1..N-k of x_t
        now[:, lo - 1 - first:] = prod[:, lo:] - mm * (head + tail) \
            + np.arange(lo - k, looks + 1 - k) * mm * mm
    lo = max(first + 1, k + 1)  # and up to N - 1
    if lo <= looks:
        mm = m[:, lo - 1:]
        head = s[:, lo - 1:looks] - s[:, [k]]
        tail = s[:, lo - 1 - k:looks - k]
        before[:, lo - 1 - first:] = prod[:, lo - 1:looks] - mm * (head + tail) \
            + np.arange(lo - 1 - k, looks - k) * mm * mm
    return now, before


# prefixes works through the rows in blocks of about this many values: its dozens of
# temporary arrays then stay in a CPU's cache (twice as fast on 2,000 x 200 as in one block)
BLOCK_VALUES = 32_768


def prefixes(series: np.ndarray, alpha: float, t_opt: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """The estimate and half-width of `confidence_sequence` at every look of every row of
    `series` (runs x looks, no NaNs), vectorised: the same figures, look by look. Each row
    is computed on its own (in blocks of rows, BLOCK_VALUES); lag k's sums only at the looks
    whose bandwidth reaches k (floor(2 sqrt(N - 1)) >= k: from look k^2 / 4 + 1 on)."""
    raw = np.asarray(series, dtype=float)
    if raw.ndim != 2:
        raise ValueError(f"prefixes: runs x looks, not an array of shape {raw.shape}")
    rows, looks = raw.shape
    step = max(BLOCK_VALUES // max(looks, 1), 1)
    if rows <= step:
        return _prefixes(raw, alpha, t_opt)
    m, r = np.empty_like(raw), np.empty_like(raw)
    for i in range(0, rows, step):
        m[i:i + step], r[i:i + step] = _prefixes(raw[i:i + step], alpha, t_opt)
    return m, r


def _prefixes(raw: np.ndarray, alpha: float, t_opt: float) -> tuple[np.ndarray, np.ndarray]:
    """prefixes of one block of rows."""
    shift = raw.mean(axis=1, keepdims=True)  # the figures below do not depend on it
    x = raw - shift
    rows, looks = x.shape
    t = np.arange(1, looks + 1)
    tf = t.astype(float)
    s = np.zeros((rows, looks + 1))
    s[:, 1:] = np.cumsum(x, axis=1)
    m = s[:, 1:] / tf
    q, q_prev = _sums(x, s, 0, m)  # sums of squares about the prefix mean
    a1, a1_prev = _sums(x, s, 1, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        lag1 = np.where((q > 0) & (t > 2), a1 / np.where(q > 0, q, 1), np.nan)
    rho = np.asarray(rho_corrected(lag1, tf))
    up = np.asarray(rho_upper(rho, tf))

    # residual e_t = c_t - r c_(t-1), t = 2..N (c_j = x_j - m at look N); its lag-k sums
    # E_k from the c's sums A_k over 1..N (at N) and 1..N-1 (at N-1), both about the prefix
    # mean at N
    c1 = x[:, [0]] - m
    cn = x - m  # c_N
    e0 = (q - c1 * c1) - 2 * up * a1 + up * up * (q - cn * cn)
    v = e0.copy()
    ne = np.maximum(t - 1, 1)
    lags = np.asarray(bandwidth(ne))
    # A_k over 1..N and 1..N-1, each with the column it starts at
    now = {0: (0, q), 1: (0, a1)}
    before = {0: (0, q_prev), 1: (0, a1_prev)}

    def at(sums: dict[int, tuple[int, np.ndarray]], k: int, col: int) -> np.ndarray:
        first, a = sums[k]
        return a[:, col - first:]

    for k in range(1, int(lags.max(initial=0)) + 1):
        col = int(np.searchsorted(lags, k))  # the first look (0-based) whose lags reach k
        now_k1, before_k1 = _sums(x, s, k + 1, m, col)
        now[k + 1], before[k + 1] = (col, now_k1), (col, before_k1)
        mk, u, c1k = m[:, col:], up[:, col:], c1[:, col:]  # looks N >= k + 3 from here on
        ek = (at(now, k, col) - (x[:, [k]] - mk) * c1k) \
            - u * (at(before, k - 1, col) - (x[:, [k - 1]] - mk) * c1k) \
            - u * now_k1 + u * u * at(before, k, col)
        lk = lags[col:]
        v[:, col:] += 2 * (1 - k / (lk + 1)) * ek
        del now[k - 1], before[k - 1]
    v = np.maximum(v, 0) / np.maximum(ne - 1, 1)
    dof = np.asarray(_dof(t, up))
    sd = np.sqrt(v) / (1 - up)
    r = sd * _widenings(dof, alpha) * np.asarray(_boundary(tf, alpha, t_opt))
    return m + shift, r


def coverage_misses(series: np.ndarray, truth: float, alpha: float, t_opt: float,
                    min_looks: int = 5) -> np.ndarray:
    """For each row of `series` (runs x looks), whether its sequence missed `truth` at any
    look from `min_looks` on."""
    m, r = prefixes(series, alpha, t_opt)
    return np.asarray((np.abs(m - truth) > r)[:, min_looks - 1:].any(axis=1))


def looks_to_exclude(gap: float, sd: float, alpha: float, t_opt: float,
                     limit: int = 1_000_000, rho: float = 0.0) -> int | None:
    """The looks at which the half-width falls below `gap` (the estimate's distance from
    the value to exclude), were the estimate, the long-run SD and the bias-corrected lag-1
    coefficient `rho` to stay as they are (the coefficient's allowance for its uncertainty
    shrinks with the looks); None when not within `limit` looks (or the gap is 0)."""
    if not gap or not math.isfinite(gap) or not math.isfinite(sd):
        return None
    gap = abs(gap)
    if sd == 0:
        return 2
    lo, hi = 2, 2
    while radius(hi, sd, alpha, t_opt, rho) >= gap:
        if hi >= limit:
            return None
        lo, hi = hi, min(hi * 2, limit)
    while lo < hi:  # bisection: the widening steps with the bandwidth, so this is close
        mid = (lo + hi) // 2
        if radius(mid, sd, alpha, t_opt, rho) < gap:
            hi = mid
        else:
            lo = mid + 1
    return hi
