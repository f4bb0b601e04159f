"""The canary's sequence before its long-run variance was prewhitened (kvtune/canary/
sequence.py until issue 42's last change), kept for bench/canary/aa_rates.py's "before"
columns: the same asymptotic confidence sequence, its long-run variance Newey and West's
alone (Bartlett kernel, floor(2 sqrt(n)) lags, divided by its fixed-b mean for a demeaned
series, 1 - b + b^2/3 with b = (L + 1) / n), widened by Student's t at n / (L + 1) degrees
of freedom."""

from __future__ import annotations

import numpy as np

from kvtune.canary import sequence as sq


def _dof(n: np.ndarray) -> np.ndarray:
    return np.maximum(n / (np.asarray(sq.bandwidth(n)) + 1), 1.0)


def _bias(n: np.ndarray) -> np.ndarray:
    b = (np.asarray(sq.bandwidth(n)) + 1) / np.maximum(n, 1)
    return np.maximum(1 - b + b * b / 3, 0.2)


def prefixes(series: np.ndarray, alpha: float, t_opt: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """The estimate and half-width at every look of every row of `series` (runs x looks)."""
    x = np.asarray(series, dtype=float)
    looks = x.shape[1]
    n = np.arange(1, looks + 1)
    t = n.astype(float)
    sx = np.cumsum(x, axis=1)
    m = sx / t
    lags = np.asarray(sq.bandwidth(n))
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
        v += 2 * np.where(k <= lags, 1 - k / (lags + 1), 0.0) * gamma
    v = np.maximum(v, 0) / _bias(n) * t / np.maximum(t - 1, 1)
    widen = np.array([sq._widening(float(d), alpha) for d in _dof(n)])
    return m, np.sqrt(v) * widen * np.asarray(sq._boundary(t, alpha, t_opt))
