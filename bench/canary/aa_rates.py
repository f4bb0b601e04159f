#!/usr/bin/env python3
"""The canary statistics' tables of docs/evaluation.md: the coverage at every look of the
interval kvtune canary uses (kvtune/canary/sequence.py) on simulated series, and the A/A
false-alarm rate of its verdict (kvtune/canary/verdict.py: every rule at alpha / rules) on
simulated sessions and on sessions drawn from the recorded A/A series of
tests/data/canary/ (bench/canary/record_aa.py). About a minute of one CPU.

    .venv/bin/python bench/canary/aa_rates.py

tests/test_canary_stats.py asserts the same figures' bounds (with its own seeds)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from kvtune import present, stats
from kvtune.canary import sequence as sq
from kvtune.canary import verdict as v
from kvtune.canary.watch import METRICS, difference

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "canary"
RUNS, LOOKS, SESSIONS, SESSION_LOOKS = 1000, 200, 200, 60
NAMES = ["cpu_per_request", "hit_ratio", "errors", "refused", "p99"]
ZERO = ["cpu_per_request not worse than +0%", "hit_ratio not worse than 0",
        "p99 not worse than +0%", "errors not worse than 0.1"]


def ar1(rng: np.random.Generator, phi: float, runs: int, looks: int) -> np.ndarray:
    e = rng.normal(0, 1, (runs, looks))
    if not phi:
        return e
    x = np.empty_like(e)
    x[:, 0] = e[:, 0] / math.sqrt(1 - phi * phi)
    for i in range(1, looks):
        x[:, i] = phi * x[:, i - 1] + e[:, i]
    return x * math.sqrt(1 - phi * phi)  # unit marginal SD


def any_decision(sessions: dict[str, np.ndarray], rules: list[v.Rule], alpha: float = 0.05,
                 t_opt: float = 30, min_looks: int = 5) -> np.ndarray:
    """Per session, whether any rule was decided other than "held" at any look (verdict.judge
    vectorised over sessions and looks; tests/test_canary_stats.py checks the two agree)."""
    each = alpha / len(rules)
    out = np.zeros(next(iter(sessions.values())).shape[0], dtype=bool)
    for r in rules:
        m, rad = sq.prefixes(sessions[r.metric.name], each, t_opt)
        worse = 1.0 if r.metric.direction.sign < 0 else -1.0
        lo = np.minimum(worse * (m - rad), worse * (m + rad))
        hi = np.maximum(worse * (m - rad), worse * (m + rad))
        hit = (hi < 0) | (lo > 0) if r.goal else lo > r.margin
        out |= hit[:, min_looks - 1:].any(axis=1)
    return out


def simulated_sessions(rng: np.random.Generator, phi: float) -> dict[str, np.ndarray]:
    """Paired differences of two servers on one configuration: CPU per request with 5% noise
    and p99 with 10% on each side (AR(1) phi from look to look, each its own), hit ratio of
    ~5,000 gets at 0.9 (+ AR noise of 0.002), rare errors, no refused connections."""
    n, k = SESSIONS, SESSION_LOOKS

    def side() -> dict[str, np.ndarray]:
        gets = rng.poisson(5000, (n, k))
        hit = np.clip(0.9 + 0.002 * ar1(rng, phi, n, k), 0, 1)
        return {"cpu_per_request": 12 * np.exp(0.05 * ar1(rng, phi, n, k)),
                "hit_ratio": rng.binomial(gets, hit) / gets,
                "errors": rng.poisson(0.02, (n, k)) / 5.0, "refused": np.zeros((n, k)),
                "p99": 180 * np.exp(0.10 * ar1(rng, phi, n, k))}

    a, b = side(), side()
    return {m: np.log(a[m] / b[m]) if METRICS[m].scale == "log" else a[m] - b[m]
            for m in NAMES}


def recorded(kind: str) -> dict[str, np.ndarray]:
    rows = json.loads((DATA / f"aa_{kind}.json").read_text())["intervals"]
    out = {}
    for m in NAMES:
        x = np.array([difference(METRICS[m], r["canary"].get(m), r["control"].get(m))
                      for r in rows])
        if not np.isnan(x).all():
            out[m] = x - np.nanmean(x)  # the same configuration: centred on its own mean
    return out


def block_sessions(rng: np.random.Generator, x: np.ndarray, block: int = 10) -> np.ndarray:
    starts = rng.integers(0, len(x), (SESSIONS, -(-SESSION_LOOKS // block)))
    idx = (starts[:, :, None] + np.arange(block)) % len(x)
    return x[idx.reshape(SESSIONS, -1)[:, :SESSION_LOOKS]]


def rule_sets(names: list[str]) -> dict[str, list[v.Rule]]:
    latency = "p99" in names
    return {"default guardrails": v.rules_for([], None, names, latency),
            "defaults + goal cpu_per_request better (margin 0)":
                v.rules_for([], "cpu_per_request better", names, latency),
            "zero-margin guardrails": v.rules_for([g for g in ZERO if g.split()[0] in names],
                                                  None, names, latency)}


def pct(x: float) -> str:
    return present.pct(x, 1).lstrip("+")


def main() -> None:
    rng = np.random.default_rng(2026)
    print(f"Coverage at every look: share of {RUNS} series of {LOOKS} looks whose interval "
          "missed the true mean at any look from the 5th")
    print("| series | alpha | kvtune canary (long-run variance) | the plain sequence "
          "(AR(1) factor, before) |")
    print("|---|---|---|---|")
    laws = {"normal": lambda: rng.normal(0, 1, (RUNS, LOOKS)),
            "Student t3": lambda: rng.standard_t(3, (RUNS, LOOKS)),
            "AR(1) 0.3": lambda: ar1(rng, 0.3, RUNS, LOOKS),
            "AR(1) 0.6": lambda: ar1(rng, 0.6, RUNS, LOOKS),
            "AR(1) 0.8": lambda: ar1(rng, 0.8, RUNS, LOOKS)}
    for law, draw in laws.items():
        x = draw()
        for alpha in (0.05, 0.01):
            new = sq.coverage_misses(x, 0.0, alpha, 30).mean()
            old = stats.cs_coverage_misses(x, 0.0, alpha, 30).mean()
            print(f"| {law} | {alpha} | {pct(new)} | {pct(old)} |")
    x = rng.normal(0.5, 1, (300, LOOKS))
    m, r = sq.prefixes(x, 0.05, 30)
    hit = (m - r > 0)[:, 4:]
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 5, LOOKS + 1)
    m0, r0 = stats.cs_prefixes(x, 0.05, 30)
    hit0 = (m0 - r0 > 0)[:, 4:]
    first0 = np.where(hit0.any(axis=1), hit0.argmax(axis=1) + 5, LOOKS + 1)
    print(f"\nA shift of 0.5 SD (independent looks, alpha 0.05): 0 excluded at look "
          f"{present.number(float(np.median(first)))} (median of 300), the plain sequence "
          f"at look {present.number(float(np.median(first0)))}")

    print(f"\nA/A false alarms: share of {SESSIONS} sessions of {SESSION_LOOKS} looks with a "
          "rule decided other than held at any look (alpha 0.05 over the rules)")
    print("| series | rules | false alarms |")
    print("|---|---|---|")
    for phi in (0.0, 0.5):
        sessions = simulated_sessions(rng, phi)
        for what, rules in rule_sets(NAMES).items():
            rate = any_decision(sessions, rules).mean()
            print(f"| simulated, AR(1) {phi} per server | {what} | {pct(rate)} |")
    cover_rows = []
    for kind in ("memcached", "redis", "valkey"):
        d = recorded(kind)
        names = [n for n in NAMES if n in d]
        sessions = {m: block_sessions(rng, x) for m, x in d.items()}
        for what, rules in rule_sets(names).items():
            rate = any_decision(sessions, rules).mean()
            print(f"| recorded {kind} (0.5 s looks, blocks of 10) | {what} | {pct(rate)} |")
        for m in names:
            if np.nanstd(d[m]) == 0:
                continue
            x = d[m]
            c = x - x.mean()
            lag1 = float(c[1:] @ c[:-1] / (c @ c))
            cov = [1 - sq.coverage_misses(sessions[m], 0.0, a, 30).mean()
                   for a in (0.05, 0.0125)]
            cover_rows.append(f"| {kind} | {m} | {present.number(round(lag1, 2))} | "
                              f"{pct(cov[0])} | {pct(cov[1])} |")
    print(f"\nCoverage on the recorded series ({SESSIONS} drawn sessions of {SESSION_LOOKS} "
          "looks): the 95% interval, and the 98.75% one a session of 4 rules uses")
    print("| server | metric | lag-1 autocorrelation | 95% covers 0 | 98.75% covers 0 |")
    print("|---|---|---|---|---|")
    print("\n".join(cover_rows))


if __name__ == "__main__":
    main()
