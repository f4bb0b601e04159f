"""The canary's anytime-valid statistics (kvtune.stats.confidence_sequence and
kvtune/canary/verdict.py) on simulated series: coverage at every look, the A/A false-alarm
rate of the verdict, and the outcomes of a harmful and a helpful change. Pure Python; the
figures quoted in docs/evaluation.md come from these tests (pytest -s prints them)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvtune import stats
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
    misses = stats.cs_coverage_misses(x, truth, alpha, t_opt=30).mean()
    print(f"\n{law} alpha={alpha}: missed at some look in {misses:.3%} of {RUNS} runs "
          f"({LOOKS} looks)")
    assert misses <= alpha + _slack(alpha, RUNS)
    assert misses > 0  # not vacuous: the interval is not wider than anything could reach


@pytest.mark.parametrize(("phi", "at_most"), [(0.3, 0.15), (0.6, 0.35)])
def test_autocorrelated_intervals_cover_less_and_the_widening_halves_it(
        phi: float, at_most: float) -> None:
    """An AR(1) series of differences (intervals too short for the traffic's drifts): the
    interval misses more often than alpha, the figure docs/evaluation.md states; the bound
    asserted is what the long-run widening achieves (about half the misses without it)."""
    rng = np.random.default_rng(11)
    e = rng.normal(0, 1, (RUNS, LOOKS))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0] / math.sqrt(1 - phi * phi)
    for i in range(1, LOOKS):
        x[:, i] = phi * x[:, i - 1] + e[:, i]
    misses = stats.cs_coverage_misses(x, 0.0, 0.05, 30).mean()
    print(f"\nAR(1) {phi}: missed at some look in {misses:.1%} of {RUNS} runs")
    assert 0.05 < misses <= at_most


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
    assert stats.cs_coverage_misses(x, 0.0, 0.05, 30).mean() < 0.05 + _slack(0.05, RUNS)


def test_the_interval_at_every_look_is_the_vectorised_one() -> None:
    """confidence_sequence (what the canary uses) and cs_prefixes (what the coverage tests
    use) are the same interval at every look, the autocorrelation widening included."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.1, 1, (3, 40))
    x[1] = np.cumsum(x[1]) / 5  # strongly autocorrelated
    m, r = stats.cs_prefixes(x, 0.05, 30)
    for row in range(3):
        for n in range(5, 41):
            cs = stats.confidence_sequence(x[row, :n], 0.05, 30)
            assert cs.estimate == pytest.approx(m[row, n - 1])
            assert cs.high - cs.estimate == pytest.approx(r[row, n - 1])
    last = stats.confidence_sequence(x[1], 0.05, 30)
    plain = stats.cs_radius(40, float(np.std(x[1], ddof=1)) * stats._t_widening(40, 0.05),
                            0.05, 30)
    assert last.lag1 > 0.5 and last.high - last.estimate > 1.5 * plain  # widened
    assert not stats.confidence_sequence(x[0, :4], 0.05, 30).ready  # before min_looks
    assert stats.confidence_sequence([], 0.05).looks == 0


def test_looks_to_exclude_is_where_the_radius_falls_below_the_gap() -> None:
    n = stats.cs_looks_to_exclude(0.2, 1.0, 0.05, 30)
    assert n is not None
    w = stats._t_widening
    assert stats.cs_radius(n, w(n, 0.05), 0.05, 30) < 0.2
    assert stats.cs_radius(n - 1, w(n - 1, 0.05), 0.05, 30) >= 0.2
    assert stats.cs_looks_to_exclude(0.0, 1.0, 0.05, 30) is None


# -- the verdict on simulated canary / control series ------------------------------------------

METRIC_NAMES = ["cpu_per_request", "hit_ratio", "errors", "refused", "p99"]


def _series(rng: np.random.Generator, looks: int, cpu: float = 1.0, hits: float = 0.9,
            evict: float = 0.0) -> dict[str, list[float]]:
    """One server's per-interval figures: CPU per request with 5% noise, hit ratio of ~5,000
    gets, rare errors, no refused connections, a p99 with 10% noise."""
    gets = rng.poisson(5000, looks)
    return {"cpu_per_request": list(12.0 * cpu * rng.lognormal(0, 0.05, looks)),
            "hit_ratio": list(rng.binomial(gets, max(hits - evict, 0.0)) / gets),
            "errors": list(rng.poisson(0.02, looks) / 5.0),
            "refused": [0.0] * looks,
            "p99": list(180.0 * rng.lognormal(0, 0.10, looks))}


def _diffs(canary: dict[str, list[float]], control: dict[str, list[float]]
           ) -> dict[str, list[float]]:
    return {k: [difference(METRICS[k], a, b) for a, b in zip(canary[k], control[k],
                                                                strict=True)]
            for k in canary}


def _run(rng: np.random.Generator, looks: int, rules: list[v.Rule], **change: float
         ) -> list[v.Verdict]:
    """Verdicts at every look of one simulated session, up to the first decision (the
    rules' states only: the forecast of looks to a decision is left out, for speed)."""
    d = _diffs(_series(rng, looks, **change), _series(rng, looks))
    out = []
    for n in range(1, looks + 1):
        verdict = v.judge({k: x[:n] for k, x in d.items()}, rules, final=n == looks,
                          forecast=False)
        out.append(verdict)
        if verdict.outcome in (v.PROMOTE, v.ROLL_BACK):
            break
    return out


def test_a_a_false_alarms_at_most_alpha_over_200_simulated_runs() -> None:
    """The same configuration on both sides, 200 sessions of 60 looks, the default
    guardrails and a goal: a false "better" (goal met) or "worse" (a guardrail breached,
    the goal worse) at any look in at most 5% of them."""
    rng = np.random.default_rng(2026)
    rules = v.rules_for([], "cpu_per_request better", METRIC_NAMES, latency=True)
    runs = [_run(rng, 60, rules) for _ in range(200)]
    rate = sum(v.false_alarm(r) for r in runs) / len(runs)
    print(f"\nA/A: a false verdict in {rate:.1%} of {len(runs)} simulated sessions")
    assert rate <= 0.05


def test_a_harmful_change_is_rolled_back_and_a_helpful_one_promoted() -> None:
    rng = np.random.default_rng(3)
    rules = v.rules_for([], "cpu_per_request better", METRIC_NAMES, latency=True)
    harm = [_run(rng, 60, rules, evict=0.05) for _ in range(40)]  # hit ratio -5 points
    help_ = [_run(rng, 100, rules, cpu=0.85) for _ in range(40)]  # 15% less CPU per request
    rolled = [r[-1] for r in harm if r[-1].outcome == v.ROLL_BACK]
    promoted = [r[-1] for r in help_ if r[-1].outcome == v.PROMOTE]
    print(f"\nharmful: rolled back in {len(rolled)}/40, at look "
          f"{np.median([x.looks for x in rolled])} (median); helpful: promoted in "
          f"{len(promoted)}/40, at look "
          f"{np.median([x.looks for x in promoted])}")
    assert len(rolled) >= 38 and all("hit_ratio" in x.deciding for x in rolled)
    assert len(promoted) >= 36


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
        m, rad = stats.cs_prefixes(x, each, t_opt)
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
    sessions = {m: _block_sessions(rng, x - np.nanmean(x), 30, 40) for m, x in d.items()}
    fast = _any_decision(sessions, rules)
    for i in range(30):
        verdicts = [v.judge({m: s[i, :n] for m, s in sessions.items()}, rules,
                            forecast=False) for n in range(1, 41)]
        assert v.false_alarm(verdicts) == fast[i], i
    assert fast.any()  # the check compared both answers, not two Falses


@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_recorded_a_a_runs(kind: str) -> None:
    """Each recorded A/A run (two servers on one configuration, kvload replaying the same
    traffic to both, 200 looks of 0.5 s on this 2-CPU VM): judged in order, as a session
    would, nothing is decided. Drawn into 200 sessions of 60 looks (circular blocks of 10,
    each metric centred on its own mean: the same configuration, this host's noise and
    drifts): with the default guardrails a false "worse" in at most 5% of them. With a goal
    of zero margin on CPU per request the rate is higher (printed for docs/evaluation.md,
    bounded as measured): that difference drifts over tens of seconds here, more than 0.5 s
    intervals show within a session, and its interval covers less than 95%."""
    d = _recorded(kind)
    names = [n for n in METRIC_NAMES if n in d]
    guards = v.rules_for([], None, names, latency="p99" in names)
    with_goal = v.rules_for([], "cpu_per_request better", names, latency="p99" in names)
    for rules in (guards, with_goal):
        in_order = [v.judge({m: x[:n] for m, x in d.items()}, rules, forecast=False)
                    for n in range(1, len(d["hit_ratio"]) + 1)]
        assert not v.false_alarm(in_order), in_order[-1].deciding
    rng = np.random.default_rng(2026)
    centred = {m: x - np.nanmean(x) for m, x in d.items()}
    sessions = {m: _block_sessions(rng, x, 200, 60) for m, x in centred.items()}
    rate = _any_decision(sessions, guards).mean()
    goal_rate = _any_decision(sessions, with_goal).mean()
    cover = {m: 1 - stats.cs_coverage_misses(sessions[m], 0.0, 0.05, 30).mean()
             for m in names if np.nanstd(centred[m]) > 0}
    print(f"\n{kind}: A/A false alarms, default guardrails {rate:.1%}, with the goal "
          f"cpu_per_request better {goal_rate:.1%} of 200 drawn sessions; coverage "
          + ", ".join(f"{m} {c:.1%}" for m, c in cover.items()))
    assert rate <= 0.05
    assert goal_rate <= 0.40
    assert cover["hit_ratio"] >= 0.80
