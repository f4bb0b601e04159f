"""The study's headline (issue 44): one decision, from the stored confirmation and
ablation, that every screen renders. Each case of the issue that contradicted itself is one
case here."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kvtune.documents import build
from kvtune.errors import UserError
from kvtune.present import change_record
from kvtune.report.summary import next_steps
from kvtune.stats import Comparison
from kvtune.study.headline import DEFAULTS_UNMEASURED, decide

BASE = {"memcached.threads": 4, "memcached.reqs_per_event": 20}
FULL = {"memcached.threads": 1, "memcached.reqs_per_event": 119}


def _comp(improvement: float, lo: float, hi: float, n: int = 4,
          df: int | None = None) -> dict[str, Any]:
    return Comparison(improvement, lo, hi, 0.01, n, n, "minimize", df=df).as_dict()


def _conf(recommended: bool, improvement: float = 0.5, lo: float = 0.2,
          hi: float = 0.9, n: int = 4, df: int | None = None) -> dict[str, Any]:
    cand = {"trial": 3, "name": "trial 3", "config": FULL,
            "comparison": _comp(improvement, lo, hi, n, df), "significant": recommended}
    out: dict[str, Any] = {"metric": "p99_us", "direction": "minimize", "rounds": 4,
                           "baseline": {"config": BASE}, "candidates": [cand],
                           "verdict": "trial 3: p99_us ..."}
    if recommended:
        out["recommended"] = cand
    return out


def _ablation(minimal_better: bool) -> dict[str, Any]:
    lo, hi = ((-0.8, -0.2) if minimal_better else (-0.82, 0.18))
    gain = change_record("p99_us", -0.54, "minimize", ci=(lo, hi))
    extra = change_record("p99_us", -0.02, "minimize", ci=(-0.3, 0.2))
    return {"knobs": [], "choice": {
        "chosen": "minimal", "config": {**BASE, "memcached.threads": 1},
        "changes": {"memcached.threads": 1}, "rounds": 4, "measured": True,
        "left_out": [{"knob": "memcached.reqs_per_event", "baseline": 20,
                      "recommended": 119, "share": 0.1, "effect": "does not carry"}],
        "minimal_gain": gain, "extra": extra,
        "text": "recommends only memcached.threads 4 → 1 (...)"}}


def _decide(conf: Any, abl: Any = None) -> Any:
    """The headline of documents as the store reads them (typed, `kvtune.documents`)."""
    return decide(None if conf is None else build("confirmation", conf),
                  None if abl is None else build("ablation", abl),
                  metric="p99_us", direction="minimize", study="demo", seconds_per_rep=3.0)


def test_a_smaller_change_shown_better_than_the_defaults_is_what_ships() -> None:
    h = _decide(_conf(True), _ablation(minimal_better=True))
    assert h.action == "ship_smaller" and h.chosen == "minimal"
    assert h.changes == {"memcached.threads": 1}
    assert h.text.startswith("Ship only memcached.threads 4 → 1: p99_us −54.0%")
    assert "better against the defaults" in h.text
    assert "memcached.reqs_per_event" in h.text  # the rest, named


def test_a_smaller_change_not_shown_better_alone_is_not_headlined() -> None:
    """The demo's contradiction: "recommends only threads 4 → 1 (… no significant change
    against the defaults)". The headline ships what was shown better, and says why the
    smaller change is not shipped."""
    h = _decide(_conf(True), _ablation(minimal_better=False))
    assert h.action == "ship" and h.chosen == "full"
    assert h.changes == FULL
    assert "no significant change" not in h.text
    assert h.comparison and h.comparison["verdict"] == "better"
    assert "not shown better than the defaults" in h.why
    assert "--minimal" in (h.settle or "")


def test_nothing_better_keeps_the_defaults_and_offers_nothing_to_ship() -> None:
    worse = _conf(False, improvement=-0.39, lo=-0.6, hi=-0.1)
    h = _decide(worse)
    assert h.action == "keep_defaults" and not h.changes
    assert h.text.startswith("Keep the defaults")
    data = {"study": "demo", "trials": [], "confirmation": worse, "headline": h.as_dict(),
            "best": {"number": 3, "value": 139.0}, "baseline": {"value": 100.0},
            "direction": "minimize"}
    assert not any("export" in c for c in next_steps(data, "demo"))


def test_a_lean_that_more_rounds_would_settle_is_not_decided_with_its_cost() -> None:
    # A normal interval: 4 rounds gave log(0.95) … log(1.45), ±0.21 around log(1.2) = 0.18 on
    # the log scale; below 0.18 at 4 × (0.21/0.18)² → 6 rounds, 2 more of 2 arms at 3 s each.
    h = _decide(_conf(False, improvement=0.2, lo=-0.05, hi=0.45))
    assert h.action == "not_decided"
    assert h.settle and h.settle.startswith("about 2 more rounds of 2 arms, 12 s: "), h.settle
    assert "a confirmation of 6 rounds (evaluation.confirm_rounds)" in h.settle
    # The paired t interval of the same width (3 degrees of freedom: t = 3.18): at 5 rounds
    # t is 2.78 and the half-width 2.78 · (0.21 · 2 / 3.18) / √5 = 0.165 < 0.18: 1 more.
    h = _decide(_conf(False, improvement=0.2, lo=-0.05, hi=0.45, df=3))
    assert h.settle and h.settle.startswith("about 1 more round of 2 arms, 6 s: "), h.settle
    assert "a confirmation of 5 rounds (evaluation.confirm_rounds)" in h.settle


def test_two_rounds_wide_interval_is_the_t_at_one_degree_of_freedom_not_the_noise() -> None:
    """A quick study's 2 rounds: +78.2% (95% CI −90.7% … +3,315.7%). The width is mostly
    Student's t at 1 degree of freedom (12.7, against 4.3 at 2): 4 rounds would show that
    gain, not "about 948" — not decided, never "Keep the defaults: … below what this host's
    noise can show"."""
    conf = _conf(False, improvement=0.782, lo=-0.907, hi=33.157, n=2, df=1)
    conf["direction"] = "maximize"
    conf["candidates"][0]["comparison"]["direction"] = "maximize"
    h = decide(build("confirmation", conf), None, metric="capacity", direction="maximize",
               study="demo", seconds_per_rep=4.0)
    assert h.action == "not_decided", h.text
    assert h.settle and h.settle.startswith("about 2 more rounds of 2 arms, 16 s: "), h.settle
    assert "a confirmation of 4 rounds" in h.settle


def test_the_rounds_said_to_settle_a_lean_settle_it_about_half_the_time() -> None:
    """The claim behind "a confirmation of N rounds would show this gain if it is real",
    against simulated confirmations of a known truth: per-round log ratios N(μ, σ²), the
    interval of 2 rounds at its expected width projected; at the rounds said, the paired t
    interval (`stats.compare_rounds`) excludes no change about half the time (its lower end
    sits at no change there), and at one round fewer less often."""
    import numpy as np
    from scipy import special

    from kvtune.stats import compare_rounds
    from kvtune.study.headline import rounds_to_show

    mu, sigma, n = 0.1, 0.1, 2
    h = float(special.stdtrit(n - 1, 0.975)) * sigma / math.sqrt(n)
    m = int(rounds_to_show(math.expm1(mu), math.expm1(mu - h), math.expm1(mu + h), n, n - 1,
                           0.95))
    assert m == 7  # t at 6 degrees of freedom, 2.45 · 0.1 / √7 = 0.093 < 0.1; at 6, 0.105
    rng = np.random.default_rng(7)

    def shown(rounds: int) -> float:
        hits = 0
        for _ in range(2000):
            d = np.exp(rng.normal(mu, sigma, rounds))
            c = compare_rounds(dict(enumerate(d)), dict.fromkeys(range(rounds), 1.0),
                               "maximize", level=0.95, two_sided=True)
            hits += c.ci_low > 0
        return hits / 2000

    at, before = shown(m), shown(m - 1)
    assert 0.4 <= at <= 0.7, at
    assert before < at, (before, at)


def test_a_lean_far_below_the_noise_keeps_the_defaults() -> None:
    h = _decide(_conf(False, improvement=0.01, lo=-0.2, hi=0.25))
    assert h.action == "keep_defaults"
    assert "below what this host's noise can show" in h.text


def test_unconfirmed_and_failed_studies_say_so() -> None:
    assert _decide(None).action == "not_decided"
    assert decide(None, None, metric="m", direction="maximize", study="s",
                  measured=False).text.startswith("Not decided: no trial of the search")
    f = decide(None, None, metric="m", direction="maximize", study="s",
               baseline_failed="server did not start")
    assert f.action == "failed" and "server did not start" in f.text


def test_a_search_best_that_is_worse_is_never_offered_for_export() -> None:
    h = _decide(None)
    worse = {"study": "demo", "trials": [], "confirmation": None, "headline": h.as_dict(),
             "best": {"number": 3, "value": 139.0}, "baseline": {"value": 100.0},
             "direction": "minimize"}
    assert not any("--best-in-search" in c for c in next_steps(worse, "demo"))
    better = {**worse, "best": {"number": 3, "value": 80.0}}
    assert any("--best-in-search" in c for c in next_steps(better, "demo"))


def test_stored_documents_of_the_wrong_shape_decide_nothing() -> None:
    """Storage is input: a damaged document is refused where it is read, naming the
    field, before any headline is decided from it."""
    cases = [({"recommended": "x"}, "recommended"),
             ({"candidates": [None, 3, {"comparison": "x"}]}, "candidates.0"),
             ({"multi": True, "front": [None]}, "front.0")]
    for conf, field in cases:
        with pytest.raises(UserError, match=f"stored field {field}"):
            _decide(conf)
    with pytest.raises(UserError, match="stored field choice"):
        _decide(_conf(True), {"choice": "x"})


def test_a_boolean_knob_reads_as_the_study_file_writes_it() -> None:
    """A changed boolean is said as a study file spells it (true → false), not Python's
    True → False, in the headline and every table that formats a knob value."""
    from kvtune import present
    from kvtune.study.headline import _names

    assert present.fmt(True) == "true" and present.fmt(False) == "false"
    assert _names({"redis.lazyfree": False}, {"redis.lazyfree": True}) == \
        "redis.lazyfree true → false"


def test_a_confirmation_that_never_measured_the_defaults_decides_nothing() -> None:
    """CI's README walk: the host spoiled both of the defaults' confirmation rounds, the
    candidate counted one. The headline said "Keep the defaults … every confirmed candidate
    measured the same or worse" although nothing was compared with them."""
    conf = _conf(False)
    conf["baseline"] = {"config": BASE, "samples": [], "metrics": {}}
    cand = conf["candidates"][0]
    cand["comparison"] = Comparison(math.nan, math.nan, math.nan, 1.0, 1, 0,
                                    "minimize").as_dict()
    h = _decide(conf)
    assert h.action == "not_decided" and h.text == DEFAULTS_UNMEASURED, h
    assert "Keep the defaults" not in h.text and h.settle
    # One round of the defaults counted: compared as before, not this headline.
    conf["baseline"]["samples"] = [100.0]
    cand["comparison"] = _comp(-0.1, -0.3, 0.1, n=1)
    assert _decide(conf).text != DEFAULTS_UNMEASURED


def _confirmed(cand: list[float], alpha: float = 0.05, min_improvement: float = 0.0,
               constraints: tuple[str, ...] = (), p99: float = 500.0) -> Any:
    """A confirmation as `kvtune tune` stores it: 5 rounds of the baseline (ops/s ~100,
    p99 500 µs) and of one candidate, through `confirm.verdict`."""
    from kvtune.metrics import Direction
    from kvtune.spec import EvaluationSpec, parse_constraint
    from kvtune.study.confirm import Arm, verdict

    def arm(name: str, vals: list[float], p: float) -> Arm:
        a = Arm(name, {"k": name})
        for r, v in enumerate(vals):
            a.metrics.append({"ops_per_sec": v, "p99_us": p + r})
            a.rounds.append(r)
            a.samples.append(v)
        return a

    ev = EvaluationSpec(confirm_rounds=5, alpha=alpha, min_improvement=min_improvement)
    out = verdict(arm("baseline", [100, 101, 99, 100, 100], 500.0),
                  [({"trial": 1, "config": {"k": "c"}, "search_value": 1.0},
                    arm("cand", cand, p99))],
                  "ops_per_sec", Direction.MAXIMIZE, ev, 0,
                  [parse_constraint(c) for c in constraints])
    return decide(build("confirmation", out), None, metric="ops_per_sec",
                  direction="maximize", study="s", seconds_per_rep=3.0)


def test_a_candidate_shown_better_but_blocked_is_never_more_rounds() -> None:
    """Its interval excludes no change: "more rounds would settle it" and "its interval
    still spans no change" would both be false. The headline names what blocked it."""
    h = _confirmed([120, 121, 119, 120.5, 120], constraints=("p99_us <= 1.1 * baseline",),
                   p99=900.0)
    assert h.action == "keep_defaults", h.text
    assert "but p99_us <= 1.1 * baseline: significantly violated" in h.text, h.text
    assert "more rounds" not in h.text and "spans no change" not in h.why
    h = _confirmed([104, 104.5, 103, 104.2, 103.8], min_improvement=0.05)
    assert h.action == "keep_defaults", h.text
    assert "evaluation.min_improvement" in h.text and not h.settle, h.text


def test_a_candidate_whose_interval_clears_but_not_the_studys_alpha_is_not_decided() -> None:
    # The rounds' log ratios give t = 3.28 at 4 degrees of freedom: the 95% interval
    # excludes no change (t > 2.78), the one-sided p is above 0.01 (t < 3.75).
    h = _confirmed([103, 101.5, 102, 100.5, 102.5], alpha=0.01)
    assert h.action == "not_decided", h.text
    assert "is not below the study's alpha (0.01)" in h.text
    assert "spans no change" not in h.why
