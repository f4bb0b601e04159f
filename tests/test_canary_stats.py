"""The canary's anytime-valid statistics (kvtune/canary/sequence.py and
kvtune/canary/verdict.py) on simulated and recorded series: coverage at every look (of
independent and autocorrelated series), the A/A false-alarm rate of the verdict with the
default guardrails and with zero margins, and the outcomes of a harmful and a helpful
change. Pure Python; bench/canary/aa_rates.py prints the tables of docs/evaluation.md from
the same functions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvtune.canary import sequence as sq
from kvtune.canary import verdict as v
from kvtune.canary.watch import METRICS, difference
from kvtune.errors import UserError

RUNS = 1000
LOOKS = 200


def _slack(alpha: float, runs: int) -> float:
    """Three binomial standard errors of a rate alpha over `runs` runs."""
    return 3 * math.sqrt(alpha * (1 - alpha) / runs)


@pytest.mark.parametrize("law", ["normal", "student-t3", "log-ratio of lognormals"])
@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_interval_covers_the_mean_at_every_look(law: str, alpha: float) -> None:
    """Over 1,000 series of 200 looks, the interval misses the true mean at ANY look from
    the 5th in at most alpha of them (+3 binomial SE)."""
    rng = np.random.default_rng(42)
    truth = 0.3
    if law == "normal":
        x = rng.normal(truth, 1.0, (RUNS, LOOKS))
    elif law == "student-t3":
        x = truth + rng.standard_t(3, (RUNS, LOOKS))
    else:  # paired log-ratios of two skewed per-interval figures with a true ratio e^0.3
        x = np.log(rng.lognormal(truth, 0.4, (RUNS, LOOKS))
                   / rng.lognormal(0.0, 0.4, (RUNS, LOOKS)))
    misses = sq.coverage_misses(x, truth, alpha, t_opt=30).mean()
    print(f"\n{law} alpha={alpha}: missed at some look in {misses:.3%} of {RUNS} runs "
          f"({LOOKS} looks)")
    assert misses <= alpha + _slack(alpha, RUNS)
    if alpha == 0.05:
        assert misses > 0  # not vacuous: the interval is not wider than anything reaches
    _, r = sq.prefixes(x[:100], alpha, t_opt=30)
    assert np.median(r[:, -1]) < 0.6  # and informative: at 200 looks, under 0.6 SD wide


def _ar1(rng: np.random.Generator, phi: float, runs: int = RUNS, looks: int = LOOKS
         ) -> np.ndarray:
    """Stationary AR(1) series of unit innovations (runs x looks)."""
    e = rng.normal(0, 1, (runs, looks))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0] / math.sqrt(1 - phi * phi)
    for i in range(1, looks):
        x[:, i] = phi * x[:, i - 1] + e[:, i]
    return x


@pytest.mark.parametrize(("phi", "alpha", "runs"), [
    (0.3, 0.05, RUNS), (0.3, 0.01, RUNS), (0.6, 0.01, RUNS), (0.8, 0.01, RUNS),
    (0.6, 0.05, 2 * RUNS), (0.8, 0.05, 2 * RUNS), (0.9, 0.05, RUNS),
])
def test_autocorrelated_series_are_covered_at_every_look(phi: float, alpha: float,
                                                         runs: int) -> None:
    """An AR(1) series of differences (intervals short against the traffic's drifts): the
    prewhitened long-run variance keeps the misses at any look within alpha (+3 binomial
    SE: 6.5% over 2,000 runs at alpha 0.05). Newey-West alone (the sequence before) missed
    AR(1) 0.6 in 9.5% and 0.8 in 19.7% of runs at alpha 0.05; the plain variance would miss
    in 24% (AR 0.3) and 64% (AR 0.6)."""
    x = _ar1(np.random.default_rng(11), phi, runs)
    misses = sq.coverage_misses(x, 0.0, alpha, 30).mean()
    print(f"\nAR(1) {phi} alpha={alpha}: missed at some look in {misses:.2%} of {runs} runs")
    assert misses <= alpha + _slack(alpha, runs)


@pytest.mark.parametrize(("phi", "at_least", "at_most"), [(0.6, 55, 140), (0.8, 70, 200)])
def test_the_allowance_for_correlation_costs_looks_and_no_more(phi: float, at_least: int,
                                                                at_most: int) -> None:
    """What holding AR(1) 0.6 and 0.8 costs (docs/evaluation.md): a shift of half a
    long-run SD is told from 0 in about 55 looks on independent series (as before: the test
    above), about 85 at AR(1) 0.6 and 120 at 0.8 (the sequence before told them at about
    40 and 19, too narrow to be trusted there);
    bounded both ways, so that neither the coverage nor the speed is quietly given up. The
    session warns from sequence.STRONG_LAG1 up that a longer --interval decides sooner."""
    x = _ar1(np.random.default_rng(14), phi, 300) * math.sqrt(1 - phi * phi) \
        + 0.5 * math.sqrt((1 + phi) / (1 - phi))
    m, r = sq.prefixes(x, 0.05, 30)
    hit = (m - r > 0)[:, 4:]
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 5, LOOKS + 1)
    print(f"\nAR(1) {phi}, shift of 0.5 long-run SD: 0 excluded at look "
          f"{np.median(first):g} (median of 300)")
    assert at_least < np.median(first) < at_most
    assert sq.STRONG_LAG1 < 0.6


def test_the_long_run_variance_costs_looks_on_independent_series() -> None:
    """What the allowance for correlated looks costs (docs/evaluation.md): a shift of half
    a standard deviation is told from 0 later than the plain sequence would, and still
    told in nearly every run of 200 looks."""
    x = np.random.default_rng(13).normal(0.5, 1, (300, LOOKS))
    m, r = sq.prefixes(x, 0.05, 30)
    hit = (m - r > 0)[:, 4:]
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 5, LOOKS + 1)
    print(f"\nshift of 0.5 SD: excluded 0 at look {np.median(first):g} (median), "
          f"within {LOOKS} looks in {hit.any(axis=1).mean():.1%} of runs")
    assert hit.any(axis=1).mean() >= 0.95
    assert 30 < np.median(first) < 100


def test_a_fixed_n_interval_rechecked_at_every_look_does_not_cover() -> None:
    """The reason for the sequence: a 95% t interval checked at every look misses far more
    often than 5% (the same series as above)."""
    from scipy import stats as sps  # tests may; src/ goes through kvtune.stats

    rng = np.random.default_rng(7)
    x = rng.normal(0, 1, (RUNS, LOOKS))
    t = np.arange(1, LOOKS + 1)
    m = np.cumsum(x, axis=1) / t
    sd = np.sqrt((np.cumsum(x * x, axis=1) - t * m * m) / np.maximum(t - 1, 1))
    half = sps.t.ppf(0.975, np.maximum(t - 1, 1)) * sd / np.sqrt(t)
    naive = (np.abs(m) > half)[:, 4:].any(axis=1).mean()
    assert naive > 0.2
    assert sq.coverage_misses(x, 0.0, 0.05, 30).mean() < 0.05 + _slack(0.05, RUNS)


def test_the_interval_at_every_look_is_the_vectorised_one() -> None:
    """confidence_sequence (what the canary uses) and prefixes (what the coverage tests
    use) are the same interval at every look, the long-run variance included."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.1, 1, (5, 60))
    x[1] = np.cumsum(x[1]) / 5  # strongly autocorrelated
    x[2] = 3.0  # constant: a zero-width interval
    x[3] = rng.normal(1000, 0.01, 60)  # far from 0, little spread: no cancellation
    x[4] = _ar1(rng, 0.6, 1, 60)[0]
    m, r = sq.prefixes(x, 0.05, 30)
    for row in range(5):
        for n in range(2, 61):
            cs = sq.confidence_sequence(x[row, :n], 0.05, 30, min_looks=2)
            assert cs.estimate == pytest.approx(m[row, n - 1])
            assert cs.high - cs.estimate == pytest.approx(r[row, n - 1], rel=1e-6,
                                                          abs=1e-12)
    last = sq.confidence_sequence(x[1], 0.05, 30)
    plain = float(np.std(x[1], ddof=1))
    assert last.lag1 > 0.5 and last.sd > 1.5 * plain  # the long-run SD, wider
    assert sq.confidence_sequence(x[2]).sd == 0
    assert not sq.confidence_sequence(x[0, :4], 0.05, 30).ready  # before min_looks
    assert sq.confidence_sequence([], 0.05).looks == 0


def test_the_long_run_variance_is_prewhitened_newey_west() -> None:
    """Against a direct computation: the lag-1 autocorrelation bias-corrected, 1.5 standard
    errors added, the series filtered by it, the residuals' Bartlett-weighted
    autocovariances summed, recoloured by 1 / (1 - r)^2."""
    x = np.random.default_rng(4).normal(0, 1, 50).cumsum()
    n = len(x)
    c = x - x.mean()
    r1 = float(c[1:] @ c[:-1] / (c @ c))
    rho = r1 + (1 + 3 * r1) / n
    up = min(max(rho + 1.5 * math.sqrt((1 - min(rho, 1) ** 2) / n), 0), 0.9)
    e = c[1:] - up * c[:-1]
    lags = sq.bandwidth(n - 1)
    assert lags == 14
    gam = [float(e[k:] @ e[:n - 1 - k]) for k in range(lags + 1)]
    want = (gam[0] + 2 * sum((1 - k / (lags + 1)) * gam[k] for k in range(1, lags + 1))) \
        / (n - 2) / (1 - up) ** 2
    assert sq.long_run_variance(x) == pytest.approx(want)
    assert up == sq.RHO_MAX == 0.9  # a random walk: the coefficient at its bound
    assert sq.bandwidth(3) == 1 and sq.bandwidth(1) == 0
    # independent series of 200: the filter at about 1.5 / sqrt(n); the estimate near the
    # variance, a little low (the residuals are demeaned: Bartlett's fixed-b shortfall,
    # 1 - b + b^2 / 3 = 0.86 at b = 29 / 199; the t widening and the coverage tests cover it)
    iid = np.random.default_rng(5).normal(0, 1, (400, 200))
    ratio = [sq.long_run_variance(row) / np.var(row, ddof=1) for row in iid]
    assert 0.7 < np.median(ratio) < 1.1


def test_looks_to_exclude_is_where_the_radius_falls_below_the_gap() -> None:
    n = sq.looks_to_exclude(0.2, 1.0, 0.05, 30)
    assert n is not None
    assert sq.radius(n, 1.0, 0.05, 30) < 0.2
    assert sq.radius(n - 1, 1.0, 0.05, 30) >= 0.2
    assert sq.looks_to_exclude(0.0, 1.0, 0.05, 30) is None


# -- the verdict on simulated canary / control series ------------------------------------------

METRIC_NAMES = ["cpu_per_request", "hit_ratio", "errors", "refused", "p99"]


def _ar1_row(rng: np.random.Generator, phi: float, looks: int) -> np.ndarray:
    """_ar1 of one run (the same draws and arithmetic, in plain floats: faster for one)."""
    e = rng.normal(0, 1, (1, looks))[0].tolist()
    x = [e[0] / math.sqrt(1 - phi * phi)]
    for i in range(1, looks):
        x.append(phi * x[-1] + e[i])
    return np.array(x)


def _noise(rng: np.random.Generator, looks: int, sd: float, phi: float) -> np.ndarray:
    """Per-interval noise of SD `sd`, AR(1) with lag-1 autocorrelation `phi` (a drift
    that outlasts an interval)."""
    return sd * _ar1_row(rng, phi, looks) * math.sqrt(1 - phi * phi) if phi else \
        rng.normal(0, sd, looks)


def _series(rng: np.random.Generator, looks: int, cpu: float = 1.0, hits: float = 0.9,
            evict: float = 0.0, phi: float = 0.0) -> dict[str, list[float]]:
    """One server's per-interval figures: CPU per request with 5% noise, hit ratio of ~5,000
    gets, rare errors, no refused connections, a p99 with 10% noise; with `phi`, the CPU,
    p99 and hit-ratio noise is AR(1) from look to look (each server its own)."""
    gets = rng.poisson(5000, looks)
    hit = np.clip(hits - evict + _noise(rng, looks, 0.002, phi), 0, 1)
    return {"cpu_per_request": list(12.0 * cpu * np.exp(_noise(rng, looks, 0.05, phi))),
            "hit_ratio": list(rng.binomial(gets, hit) / gets),
            "errors": list(rng.poisson(0.02, looks) / 5.0),
            "refused": [0.0] * looks,
            "p99": list(180.0 * np.exp(_noise(rng, looks, 0.10, phi)))}


def _diffs(canary: dict[str, list[float]], control: dict[str, list[float]]
           ) -> dict[str, list[float]]:
    return {k: [difference(METRICS[k], a, b) for a, b in zip(canary[k], control[k],
                                                                strict=True)]
            for k in canary}


def _sessions(rng: np.random.Generator, runs: int, looks: int, rules: list[v.Rule],
              phi: float = 0.0, **change: float) -> tuple[np.ndarray, list[v.Verdict]]:
    """`runs` simulated sessions of `looks` looks, each judged at every look up to its first
    decision (promote or roll back): whether each said anything (a rule breached, met or
    worse at any of those looks: verdict.false_alarm), and judge's verdict at its last
    look. The rules' states at every look are the array verdict's
    (verdict.states_at_every_look, the same states as judge's look by look: the test
    below); at each session's last look judge itself is asked, and must agree."""
    drawn = [_diffs(_series(rng, looks, phi=phi, **change), _series(rng, looks, phi=phi))
             for _ in range(runs)]
    d = {k: np.array([x[k] for x in drawn]) for k in drawn[0]}
    states = v.states_at_every_look(d, rules)
    decided = v.outcomes_at_every_look(states, rules) != v.OUTCOMES.index(v.WATCH)
    stop = np.where(decided.any(axis=1), decided.argmax(axis=1), looks - 1)
    said = np.isin(states, [v.BREACHED, v.MET, v.WORSE]).any(axis=0)
    alarm = (said & (np.arange(looks) <= stop[:, None])).any(axis=1)
    last = []
    for i, n in enumerate(stop.tolist()):
        verdict = v.judge({k: x[i, :n + 1] for k, x in d.items()}, rules,
                          final=n == looks - 1, forecast=False)
        assert [s.state for s in verdict.rules] == [v.STATES[c] for c in states[:, i, n]]
        assert (verdict.outcome in (v.PROMOTE, v.ROLL_BACK)) == bool(decided[i, n])
        last.append(verdict)
    return alarm, last


ZERO_MARGINS = ["cpu_per_request not worse than +0%", "hit_ratio not worse than 0",
                "p99 not worse than +0%", "errors not worse than 0.1"]


@pytest.mark.parametrize(("guardrails", "goal"), [
    ([], "cpu_per_request better"),  # the defaults and a goal of zero margin
    (ZERO_MARGINS, None),  # guardrails of zero margin: any worsening at all
])
@pytest.mark.parametrize("phi", [0.0, 0.5])
def test_a_a_false_alarms_at_most_alpha_over_200_simulated_runs(
        guardrails: list[str], goal: str | None, phi: float) -> None:
    """The same configuration on both sides, 200 sessions of 60 looks, each server's
    per-interval noise independent (phi 0) or drifting from look to look (AR(1) 0.5): a
    false "better" (goal met) or "worse" (a guardrail breached, the goal worse) at any look
    in at most 5% of them, zero margins included."""
    rng = np.random.default_rng(2026)
    rules = v.rules_for(guardrails, goal, METRIC_NAMES, latency=True)
    alarm, _ = _sessions(rng, 200, 60, rules, phi=phi)
    rate = alarm.mean()
    print(f"\nA/A (AR {phi}, {goal or 'zero-margin guardrails'}): a false verdict in "
          f"{rate:.1%} of {len(alarm)} simulated sessions")
    assert rate <= 0.05


def test_a_harmful_change_is_rolled_back_and_a_helpful_one_promoted() -> None:
    rng = np.random.default_rng(3)
    rules = v.rules_for([], "cpu_per_request better", METRIC_NAMES, latency=True)
    _, harm = _sessions(rng, 40, 60, rules, evict=0.05)  # hit ratio -5 points
    _, help_ = _sessions(rng, 40, 160, rules, cpu=0.85)  # 15% less CPU per request
    rolled = [r for r in harm if r.outcome == v.ROLL_BACK]
    promoted = [r for r in help_ if r.outcome == v.PROMOTE]
    print(f"\nharmful: rolled back in {len(rolled)}/40, at look "
          f"{np.median([x.looks for x in rolled])} (median); helpful: promoted in "
          f"{len(promoted)}/40, at look "
          f"{np.median([x.looks for x in promoted])}")
    assert len(rolled) >= 38 and all("hit_ratio" in x.deciding for x in rolled)
    assert len(promoted) >= 36


def test_the_verdict_at_every_look_is_judges() -> None:
    """verdict.states_at_every_look and outcomes_at_every_look (what the simulated sessions
    above are judged with) give judge's rule states and outcome at every look: a goal,
    default and zero-margin guardrails, a series that stays 0 (a zero-width interval, held
    at a zero margin) and one that is 0 for its first 20 looks, decisions either way."""
    rng = np.random.default_rng(9)
    change = [{"evict": 0.02}, {"cpu": 0.85}, {}, {"cpu": 1.1}] * 2
    drawn = [_diffs(_series(rng, 30, **c), _series(rng, 30)) for c in change]
    d = {k: np.array([x[k] for x in drawn]) for k in drawn[0]}
    d["errors"][::2, :20] = 0.0
    seen: set[tuple[str, str]] = set()
    for rules in (v.rules_for([], "cpu_per_request better", METRIC_NAMES, latency=True),
                  v.rules_for(ZERO_MARGINS, None, METRIC_NAMES, latency=True),
                  v.rules_for(["refused not worse", "errors not worse"], None, METRIC_NAMES,
                              latency=True)):
        states = v.states_at_every_look(d, rules)
        outcomes = v.outcomes_at_every_look(states, rules)
        for i in range(len(change)):
            for n in range(1, 31):
                verdict = v.judge({k: x[i, :n] for k, x in d.items()}, rules, forecast=False)
                got = [v.STATES[c] for c in states[:, i, n - 1]]
                assert [s.state for s in verdict.rules] == got, (i, n)
                assert verdict.outcome == v.OUTCOMES[outcomes[i, n - 1]], (i, n)
                seen.update((r.rule.text, r.state) for r in verdict.rules)
                seen.add(("", verdict.outcome))
    states_seen = {state for _, state in seen}
    assert states_seen >= {"open", "held", "breached", "met"}, states_seen  # not vacuous
    assert {("", v.PROMOTE), ("", v.ROLL_BACK), ("", v.WATCH),
            ("refused not worse", "held"), ("errors not worse", "held"),
            ("errors not worse", "open")} <= seen


def test_keep_watching_says_how_many_looks_remain() -> None:
    rng = np.random.default_rng(5)
    rules = v.rules_for(["p99 not worse than +5%"], None, METRIC_NAMES, latency=True)
    d = _diffs(_series(rng, 12), _series(rng, 12))
    verdict = v.judge(d, rules)
    assert verdict.outcome == v.WATCH
    assert verdict.looks_to_decide is not None and verdict.looks_to_decide > 0
    early = v.judge({k: x[:2] for k, x in d.items()}, rules)
    assert early.outcome == v.WATCH and early.looks_to_decide == 3  # min_looks 5
    assert v.judge(d, rules, final=True).outcome == v.INCONCLUSIVE


@pytest.mark.parametrize(("text", "where"), [
    ("p99 not worse than 5", "a percentage"),
    ("hit_ratio not worse than 1%", "no %"),
    ("p99 better than", "write METRIC"),
    ("latency worse", "write METRIC"),
    ("bogus better", "unknown metric"),
    ("p99 not worse than +x%", "not a number"),
])
def test_a_rule_badly_written_is_refused_in_one_line(text: str, where: str) -> None:
    with pytest.raises(UserError, match=where):
        v.parse_rule(text, "--guardrail", METRIC_NAMES)


def test_the_goal_and_a_guardrail_are_told_apart() -> None:
    with pytest.raises(UserError, match="the goal is --goal"):
        v.rules_for(["p99 better"], None, METRIC_NAMES, latency=True)
    with pytest.raises(UserError, match="named twice"):
        v.rules_for(["p99 not worse", "p99 not worse than +3%"], None, METRIC_NAMES, True)
    r = v.parse_rule("p99 not worse than +5%", "--guardrail")
    assert r.margin == pytest.approx(math.log(1.05)) and not r.goal
    # without a latency of its own, the defaults leave p99 out
    assert "p99" not in [x.metric.name for x in v.rules_for([], None, METRIC_NAMES[:4],
                                                             latency=False)]


# -- recorded A/A series (bench/canary/record_aa.py, stored in tests/data/canary/) -------------

DATA = Path(__file__).parent / "data" / "canary"


def _recorded(kind: str) -> dict[str, np.ndarray]:
    """The paired differences of each metric of a recorded A/A run (one per 0.5 s)."""
    rows = json.loads((DATA / f"aa_{kind}.json").read_text())["intervals"]
    out = {}
    for m, metric in METRICS.items():
        x = np.array([difference(metric, r["canary"].get(m), r["control"].get(m))
                      for r in rows])
        if not np.isnan(x).all():
            out[m] = x
    return out


def _block_sessions(rng: np.random.Generator, x: np.ndarray, sessions: int, looks: int,
                    block: int = 10) -> np.ndarray:
    """Sessions drawn from a series by the circular block bootstrap (blocks of `block`
    consecutive intervals keep its autocorrelation)."""
    starts = rng.integers(0, len(x), (sessions, -(-looks // block)))
    idx = (starts[:, :, None] + np.arange(block)) % len(x)
    return x[idx.reshape(sessions, -1)[:, :looks]]


def _any_decision(sessions: dict[str, np.ndarray], rules: list[v.Rule], alpha: float = 0.05,
                  t_opt: float = 30, min_looks: int = 5) -> np.ndarray:
    """Per session, whether any rule was decided other than "held" at any look (an A/A
    false alarm): verdict.judge's rule states, vectorised over sessions and looks."""
    each = alpha / len(rules)
    out = np.zeros(next(iter(sessions.values())).shape[0], dtype=bool)
    for r in rules:
        x = sessions[r.metric.name]
        m, rad = sq.prefixes(x, each, t_opt)
        worse = 1.0 if r.metric.direction.sign < 0 else -1.0
        lo, hi = np.minimum(worse * (m - rad), worse * (m + rad)), \
            np.maximum(worse * (m - rad), worse * (m + rad))
        hit = (hi < 0) | (lo > 0) if r.goal else lo > r.margin
        out |= hit[:, min_looks - 1:].any(axis=1)
    return out


def test_the_vectorised_false_alarm_is_the_verdicts() -> None:
    rng = np.random.default_rng(8)
    d = _recorded("valkey")
    names = [n for n in METRIC_NAMES if n in d]
    rules = v.rules_for([], "cpu_per_request better", names, latency=True)
    # centred, then CPU per request shifted by -15% in half the sessions: some decided
    sessions = {m: _block_sessions(rng, x - np.nanmean(x), 30, 40) for m, x in d.items()}
    sessions["cpu_per_request"][::2] -= 0.15
    fast = _any_decision(sessions, rules)
    for i in range(30):
        verdicts = [v.judge({m: s[i, :n] for m, s in sessions.items()}, rules,
                            forecast=False) for n in range(1, 41)]
        assert v.false_alarm(verdicts) == fast[i], i
    assert 0 < fast.sum() < 30  # the check compared both answers


def _recorded_rules(names: list[str]) -> dict[str, list[v.Rule]]:
    """The rule sets the recorded A/A runs are judged with: the defaults, the defaults with
    a goal of zero margin, and every guardrail of zero margin (canary.py's words: any
    worsening at all)."""
    latency = "p99" in names
    zero = [g for g in ZERO_MARGINS if g.split()[0] in names]
    return {"default guardrails": v.rules_for([], None, names, latency),
            "with the goal cpu_per_request better":
                v.rules_for([], "cpu_per_request better", names, latency),
            "zero-margin guardrails": v.rules_for(zero, None, names, latency)}


@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_recorded_a_a_runs(kind: str) -> None:
    """Each recorded A/A run (two servers on one configuration, kvload replaying the same
    traffic to both, 200 looks of 0.5 s on this 2-CPU VM). Drawn into 200 sessions of 60
    looks (circular blocks of 10, each metric centred on its own mean: the same
    configuration, this host's noise and drifts), a false "better" or "worse" in at most 5%
    of them, with the default guardrails, a goal of zero margin, and guardrails of zero
    margin."""
    d = _recorded(kind)
    names = [n for n in METRIC_NAMES if n in d]
    rng = np.random.default_rng(2026)
    centred = {m: x - np.nanmean(x) for m, x in d.items()}
    sessions = {m: _block_sessions(rng, x, 200, 60) for m, x in centred.items()}
    rates = {what: _any_decision(sessions, rules).mean()
             for what, rules in _recorded_rules(names).items()}
    print(f"\n{kind}: A/A false alarms in 200 drawn sessions: "
          + ", ".join(f"{w} {r:.1%}" for w, r in rates.items()))
    assert all(r <= 0.05 for r in rates.values()), rates


RECORDED = [("memcached", "cpu_per_request"), ("memcached", "hit_ratio"),
            ("redis", "cpu_per_request"), ("redis", "hit_ratio"), ("redis", "p99"),
            ("valkey", "cpu_per_request"), ("valkey", "hit_ratio"), ("valkey", "p99")]


@pytest.mark.parametrize(("kind", "metric"), RECORDED)
def test_recorded_series_are_covered_at_every_look(kind: str, metric: str) -> None:
    """Coverage of 0 at every look on 1,000 sessions of 60 looks drawn from each recorded
    A/A series (as above): the 95% interval and the 98.75% one a session of 4 rules uses
    each miss in at most alpha (+3 binomial SE: 92.9% and 97.7% covered). The sequence
    before covered memcached's CPU per request (lag-1 0.74) in 87.5% at 95%.

    The one series that does not hold at 95%, stated in sequence.py and
    docs/evaluation.md: Valkey's CPU per request, a calm level with a few dips of 3-5 SD
    lasting 2-4 s. Its interval misses only on the side away from the dips, in sessions
    that have not yet seen one, which no estimate from the looks so far can allow for;
    asserted as measured (about 87% at 95%, 97% at 98.75%), so that it gets no worse."""
    x = _recorded(kind)[metric]
    x = x - np.nanmean(x)
    sessions = _block_sessions(np.random.default_rng(2026), x, RUNS, 60)
    lag1 = sq.confidence_sequence(x).lag1
    cover = {}
    for alpha in (0.05, 0.0125):
        m, r = sq.prefixes(sessions, alpha, 30)
        miss = np.abs(m) > r
        missed = miss[:, 4:].any(axis=1)
        cover[alpha] = 1 - missed.mean()
        if alpha == 0.05:
            first = miss[:, 4:].argmax(axis=1) + 4
            above = (m[np.arange(RUNS), first] > 0)[missed]
    print(f"\n{kind} {metric} (lag-1 {lag1:.2f}): covered at every look in "
          f"{cover[0.05]:.1%} (95%) / {cover[0.0125]:.1%} (98.75%) of {RUNS} sessions")
    if (kind, metric) == ("valkey", "cpu_per_request"):
        assert cover[0.05] >= 0.84 and cover[0.0125] >= 0.95, cover
        assert above.all()  # every miss away from the dips
        return
    for alpha, c in cover.items():
        assert c >= 1 - alpha - _slack(alpha, RUNS), (alpha, cover)


@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_recorded_a_a_runs_judged_in_order(kind: str) -> None:
    """Each recorded run judged in order, as a session would (200 looks): with the default
    guardrails nothing is decided. A rule of zero margin may decide on the whole run: the
    two servers differ by a little for real (memcached's CPU per request by about 9% on this
    VM, its hit ratio by 0.2 point), which is what an A/A check is for; what is printed here
    is what a session would have said."""
    d = _recorded(kind)
    names = [n for n in METRIC_NAMES if n in d]
    looks = len(d["hit_ratio"])
    said = {}
    for what, rules in _recorded_rules(names).items():
        in_order = [v.judge({m: x[:n] for m, x in d.items()}, rules, forecast=False)
                    for n in range(1, looks + 1)]
        said[what] = next((f"look {x.looks}: {x.deciding}" for x in in_order
                           if v.false_alarm([x])), "nothing decided")
    print(f"\n{kind} in order: " + "; ".join(f"{w}: {s}" for w, s in said.items()))
    assert said["default guardrails"] == "nothing decided"


def test_an_early_interval_tens_of_sds_wide_is_shown_within_bounds() -> None:
    """The first looks of a series that seems correlated can have an interval tens of SDs
    wide (sequence.py): the report's chart keeps the changes, 0, the margin and the last
    interval in view and runs the wider band off its edge (no infinite coordinates), and
    the text says a change beyond 10,000 times the control's as such."""
    import re

    from kvtune.canary import page

    rows = [{"change": -0.6, "low": -17.0, "high": 15.0},
            {"change": -0.59, "low": -3.0, "high": 2.0},
            {"change": -0.6, "low": -0.7, "high": -0.5},
            {"change": -0.6, "low": -0.65, "high": math.inf}]
    svg = page._chart(rows, METRICS["hit_ratio"], 0.01, False)
    ys = [float(b) for b in re.findall(r"[\d.]+,([\d.]+)", svg)]
    assert "inf" not in svg and ys and all(0 <= y <= 180 for y in ys)
    labels = re.findall(r'font-size="10">([^<]+)</text>', svg)
    assert float(labels[0].replace("\u2212", "-")) > -3  # the view is not the first band's
    assert v.change_text(METRICS["p99"], 800.0) == v.change_text(METRICS["p99"], 12.0)
    assert v.change_text(METRICS["p99"], 800.0).startswith("> ")
    assert page._chart([], METRICS["p99"], None, True).startswith("<svg")
