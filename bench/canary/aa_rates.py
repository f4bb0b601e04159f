#!/usr/bin/env python3
"""The canary statistics' tables of docs/evaluation.md: the coverage at every look of the
interval kvtune canary uses (kvtune/canary/sequence.py) on simulated series, the looks it
takes to tell a shift from 0, and the A/A false-alarm rate of its verdict
(kvtune/canary/verdict.py: every rule at alpha / rules) on simulated sessions and on
sessions drawn from the recorded A/A series of tests/data/canary/ (bench/canary/
record_aa.py); each beside the sequence before (bench/canary/newey_west.py: Newey-West
without prewhitening) in the same run, on the same series. About a minute of one CPU.

    nice -n 19 .venv/bin/python bench/canary/aa_rates.py

tests/test_canary_stats.py asserts the same figures' bounds (with its own seeds)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import newey_west as nw
import numpy as np

from kvtune import present, stats
from kvtune.canary import sequence as sq
from kvtune.canary import verdict as v
from kvtune.canary.watch import METRICS, difference

Prefixes = Callable[[np.ndarray, float, float], tuple[np.ndarray, np.ndarray]]

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
                 t_opt: float = 30, min_looks: int = 5, prefixes: Prefixes = sq.prefixes
                 ) -> np.ndarray:
    """Per session, whether any rule was decided other than "held" at any look (verdict.judge
    vectorised over sessions and looks; tests/test_canary_stats.py checks the two agree)."""
    each = alpha / len(rules)
    out = np.zeros(next(iter(sessions.values())).shape[0], dtype=bool)
    for r in rules:
        m, rad = prefixes(sessions[r.metric.name], each, t_opt)
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


def misses(prefixes: Prefixes, x: np.ndarray, alpha: float, min_looks: int = 5) -> float:
    """The share of rows of x whose interval missed 0 at any look from `min_looks` on."""
    m, r = prefixes(x, alpha, 30)
    return float((np.abs(m) > r)[:, min_looks - 1:].any(axis=1).mean())


def first_look(prefixes: Prefixes, x: np.ndarray, looks: int) -> float:
    """The median look at which the interval first excludes 0 from below (looks + 1 when
    it does not within the series)."""
    m, r = prefixes(x, 0.05, 30)
    hit = (m - r > 0)[:, 4:]
    return float(np.median(np.where(hit.any(axis=1), hit.argmax(axis=1) + 5, looks + 1)))


def known_sd(x: np.ndarray, alpha: float, t_opt: float, sd: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """The sequence were the long-run SD known (no estimate, no widening): the floor."""
    t = np.arange(1, x.shape[1] + 1, dtype=float)
    m = np.cumsum(x, axis=1) / t
    return m, np.broadcast_to(sd * np.asarray(sq._boundary(t, alpha, t_opt)), m.shape)


# A canary's hit-ratio difference in one real-server session (tests/test_canary.py, Valkey,
# --rollback-on-breach, 0.5 s looks after one warm-up look): the evicting canary's hit ratio
# moving for the first 9 looks, then steady about -0.61
DRIFT = [-0.609, -0.6064, -0.5672, -0.564, -0.5573, -0.5262, -0.4941, -0.4512, -0.3649,
         -0.5972, -0.634, -0.6165, -0.6009, -0.6622, -0.6193, -0.6222, -0.6114, -0.6089,
         -0.623, -0.634, -0.6218, -0.6159, -0.6106, -0.6067, -0.6003, -0.6066, -0.6394,
         -0.6089, -0.6258, -0.5758, -0.6103, -0.6188, -0.5985, -0.627, -0.6137, -0.6257,
         -0.6208, -0.6203]


def looks(n: float, limit: int) -> str:
    return f"> {limit}" if n > limit else present.number(n)


def main() -> None:
    rng = np.random.default_rng(2026)
    print(f"Coverage at every look: share of {RUNS} series of {LOOKS} looks whose interval "
          "missed the true mean at any look from the 5th")
    print("| series | alpha | kvtune canary (prewhitened) | before (Newey–West) | "
          "before that (AR(1) factor) |")
    print("|---|---|---|---|---|")
    laws = {"normal": lambda: rng.normal(0, 1, (RUNS, LOOKS)),
            "Student t, 3 d.f.": lambda: rng.standard_t(3, (RUNS, LOOKS)),
            "AR(1) 0.3": lambda: ar1(rng, 0.3, RUNS, LOOKS),
            "AR(1) 0.6": lambda: ar1(rng, 0.6, RUNS, LOOKS),
            "AR(1) 0.8": lambda: ar1(rng, 0.8, RUNS, LOOKS),
            "AR(1) 0.9": lambda: ar1(rng, 0.9, RUNS, LOOKS)}
    for law, draw in laws.items():
        x = draw()
        for alpha in (0.05, 0.01):
            row = [misses(f, x, alpha) for f in (sq.prefixes, nw.prefixes)]
            old = stats.cs_coverage_misses(x, 0.0, alpha, 30).mean()
            print(f"| {law} | {alpha} | {pct(row[0])} | {pct(row[1])} | {pct(old)} |")

    print(f"\nLooks to decide: the median look (of 300 series of {LOOKS}) at which the "
          "interval (alpha 0.05) first excludes 0, for a shift of 0.5 or 2 long-run SDs")
    print("| series | shift | kvtune canary (prewhitened) | before (Newey–West) | "
          "long-run SD known (the floor) |")
    print("|---|---|---|---|---|")
    for phi in (0.0, 0.3, 0.6, 0.8):
        lr = math.sqrt((1 + phi) / (1 - phi))
        for shift in (0.5, 2.0):
            x = ar1(rng, phi, 300, LOOKS) + shift * lr
            cells = [looks(first_look(f, x, LOOKS), LOOKS) for f in
                     (sq.prefixes, nw.prefixes,
                      lambda y, a, t, lr=lr: known_sd(y, a, t, lr))]
            law = "independent" if not phi else f"AR(1) {phi}"
            print(f"| {law} | {present.number(shift)} SD | " + " | ".join(cells) + " |")

    runs = 200
    tail = -0.615 + 0.015 * rng.standard_normal((runs, 162))
    x = np.concatenate([np.broadcast_to(DRIFT, (runs, len(DRIFT))), tail], axis=1)
    told = []
    for f in (sq.prefixes, nw.prefixes):
        m, r = f(x, 0.025, 20)  # 2 rules at alpha 0.05, t_opt 20 as that session had
        hit = (m + r < -0.01)[:, 4:]  # "hit_ratio not worse than 0.01" breached
        told.append(np.where(hit.any(axis=1), hit.argmax(axis=1) + 5, x.shape[1] + 1))
    print(f"\nA drift at the start (the real session's {len(DRIFT)} looks, then steady "
          f"looks of SD 0.015 about -0.615, {runs} continuations): the guardrail "
          f"hit_ratio not worse than 0.01 breached at look "
          f"{present.number(float(np.median(told[0])))} (range "
          f"{present.number(float(told[0].min()))}-{present.number(float(told[0].max()))}), "
          f"before at look {present.number(float(np.median(told[1])))}")

    print(f"\nA/A false alarms: share of {SESSIONS} sessions of {SESSION_LOOKS} looks with a "
          "rule decided other than held at any look (alpha 0.05 over the rules)")
    print("| series | rules | kvtune canary | before (Newey–West) |")
    print("|---|---|---|---|")
    for phi in (0.0, 0.5):
        sessions = simulated_sessions(rng, phi)
        for what, rules in rule_sets(NAMES).items():
            rate = [any_decision(sessions, rules, prefixes=f).mean()
                    for f in (sq.prefixes, nw.prefixes)]
            law = "independent looks" if not phi else f"AR(1) {phi} per server"
            print(f"| simulated, {law} | {what} | {pct(rate[0])} | {pct(rate[1])} |")
    recorded_sets = {}
    for kind in ("memcached", "redis", "valkey"):
        d = recorded(kind)
        names = [n for n in NAMES if n in d]
        sessions = {m: block_sessions(rng, x) for m, x in d.items()}
        recorded_sets[kind] = d
        for what, rules in rule_sets(names).items():
            rate = [any_decision(sessions, rules, prefixes=f).mean()
                    for f in (sq.prefixes, nw.prefixes)]
            print(f"| recorded {kind} | {what} | {pct(rate[0])} | {pct(rate[1])} |")

    draws = 1000
    print(f"\nCoverage on the recorded series ({draws} drawn sessions of {SESSION_LOOKS} "
          "looks, circular blocks of 10): the 95% interval, and the 98.75% one a session of "
          "4 rules uses; now and before (Newey–West)")
    print("| server | metric | lag-1 autocorrelation | 95% covers 0 | before | "
          "98.75% covers 0 | before |")
    print("|---|---|---|---|---|---|---|")
    for kind, d in recorded_sets.items():
        for m in (n for n in NAMES if n in d):
            if np.nanstd(d[m]) == 0:
                continue
            x = d[m]
            c = x - x.mean()
            lag1 = float(c[1:] @ c[:-1] / (c @ c))
            starts = rng.integers(0, len(x), (draws, -(-SESSION_LOOKS // 10)))
            idx = (starts[:, :, None] + np.arange(10)) % len(x)
            s = x[idx.reshape(draws, -1)[:, :SESSION_LOOKS]]
            cells = [pct(1 - misses(f, s, a)) for a in (0.05, 0.0125)
                     for f in (sq.prefixes, nw.prefixes)]
            print(f"| {kind} | {m} | {present.number(round(lag1, 2))} | "
                  + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
