"""bench/evaluator/coverage.py's core (issue 44, item 6) on tiny configurations: its
vectorised `stats.compare` is kvtune's own, and its paired interval has the coverage theory
gives it."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "bench" / "evaluator"


def _bench():  # type: ignore[no-untyped-def]
    # Loaded by path under its own name: "coverage" is also coverage.py's package name.
    name = "kvtune_bench_coverage"
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / "coverage.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_vectorised_compare_is_kvtunes() -> None:
    """The vectorised statistics give kvtune.stats.compare's point, interval and p (and
    Holm's adjustment), log_welch_ci's and log_welch_p's, and scipy's paired t, on a few
    seeds of each configuration the bench runs."""
    cov = _bench()
    for noise in (cov.NOISES[0], cov.NOISES[3], cov.NOISES[4]):
        for rounds, k in ((4, 3), (5, 1)):
            _, (base, cands, level, seeds) = cov.cell(noise, rounds, k, 0.10, 6, seed=7,
                                                      stats=())
            worst = cov.check(base, cands, level, seeds, 6)
            assert worst.pop("comparisons") == 6 * k
            assert max(worst.values()) < 1e-12, worst


def test_paired_interval_holds_its_level() -> None:
    """Under normal log-noise the paired t interval's coverage is exactly its level, drift
    shared by the round or not (the pairing removes it): within binomial error of 95% for
    one candidate, and of 1 − 0.05/3 for each of three (Bonferroni)."""
    cov = _bench()
    n = 4000
    for noise in (cov.NOISES[1], cov.NOISES[5]):   # lognormal 15%, drift 20% + lognormal 15%
        for k in (1, 3):
            r, _ = cov.cell(noise, 4, k, 0.10, n, seed=11, stats=("paired",))
            level = 1 - 0.05 / k
            se = math.sqrt(level * (1 - level) / (n * k))
            assert abs(r["paired"]["coverage"] - level) < 4 * se, (noise.name, k, r["paired"])
            assert r["paired"]["simultaneous"] >= 0.95 - 4 * math.sqrt(0.95 * 0.05 / n)


def test_shared_drift_widens_the_unpaired_intervals_only() -> None:
    """A trend shared by a round's arms is noise to the unpaired comparisons (they cover
    more and say "better" less) and nothing to the paired one: on the same draws, the
    paired interval says "better" at +10% far more often than the current one under drift."""
    cov = _bench()
    r, _ = cov.cell(cov.NOISES[4], 5, 1, 0.10, 200, seed=3)
    assert r["paired"]["recommended"] > r["current"]["recommended"] + 0.2, r
    assert r["current"]["coverage"] > 0.97


def test_holm_and_mann_whitney_table() -> None:
    cov = _bench()
    from kvtune.stats import holm

    rng = np.random.default_rng(0)
    p = rng.choice([0.014, 0.03, 0.2, 0.5], size=(50, 3))
    assert np.allclose(cov.holm_v(p), [holm(list(row)) for row in p])
    table = cov.mwu_table(4)
    assert math.isclose(table[2 * 16], 1 / 70)   # all four above all four
    assert math.isclose(table[0], 1.0)
