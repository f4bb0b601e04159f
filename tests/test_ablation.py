"""The ablation of a recommendation on the synthetic surface, whose truth is known: the
gain goes to the knobs that carry it, a change without effect is shown not to carry it,
each change's share, verdict and words come from one interval, and the minimal
configuration (only what carries) is measured and recommended unless the full one is
significantly better."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kvtune.documents import Confirmation, build
from kvtune.spec import EvaluationSpec
from kvtune.study import ablation
from kvtune.targets.synthetic import SYNTHETIC_KNOBS, true_value

BASELINE = {k.name: k.default for k in SYNTHETIC_KNOBS.values()}


def _measure(cov: float = 0.02, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    count = {"n": 0}

    def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        count["n"] += 1
        v = true_value(config) * float(rng.lognormal(0, cov))
        return "ok", "", {"ops_per_sec": v}

    measure.count = count  # type: ignore[attr-defined]
    return measure


def _confirmation(config: dict[str, Any]) -> Confirmation:
    return build("confirmation", {
        "recommended": {"name": "trial 3", "config": config, "samples": [1.0, 1.0],
                        "comparison": {"p_value": 0.001, "change": 0.3,
                                       "change_ci_low": 0.2, "change_ci_high": 0.4},
                        "p_adjusted": 0.003},
        "baseline": {"samples": [1.0, 1.0]}})


def test_ablation_names_the_knob_that_carries_the_gain() -> None:
    # x 2 -> 7 carries +30%; threads 4 -> 5 is worth 0.2%, the mode 'a' -> 'a' is no change
    rec = {**BASELINE, "synthetic.x": 7.0, "synthetic.threads": 5}
    ev = EvaluationSpec(confirm_rounds=7)
    m = _measure()
    res = ablation.ablate(_confirmation(rec), BASELINE, "ops_per_sec", "maximize", ev, 0, m)
    assert res["carries"] == ["synthetic.x"], res["text"]
    assert res["small"] == ["synthetic.threads"] and res["noise"] == ["synthetic.threads"]
    assert res["minimal_changes"] == {"synthetic.x": 7.0}
    assert res["minimal_config"] == {**BASELINE, "synthetic.x": 7.0}
    x = res["knobs"][0]
    assert x["knob"] == "synthetic.x" and x["share_ci"][0] < 1.0 < x["share_ci"][1] + 0.05
    # the ablation's rounds, then the minimal configuration, the full one and the
    # baseline interleaved for 7 more rounds
    assert res["measurements"] == m.count["n"] >= (2 + 2) * 7 + 3 * 7
    assert res["gain"]["verdict"] == "better" and res["gain"]["change"] > 0.2
    assert "synthetic.x 2 → 7 (share" in res["text"]
    assert "the other change does not carry it (each below 10% of the gain)" in res["text"]
    choice = res["choice"]
    assert choice["chosen"] == "minimal", choice["text"]
    assert choice["config"] == {**BASELINE, "synthetic.x": 7.0}
    assert choice["changes"] == {"synthetic.x": 7.0}
    assert [x["knob"] for x in choice["left_out"]] == ["synthetic.threads"]
    assert choice["text"].startswith("recommends only synthetic.x 2.0 → 7.0")
    assert "left out: synthetic.threads (share" in choice["text"]
    assert choice["minimal_gain"]["verdict"] == "better"


def test_ablation_two_carriers_and_minimize() -> None:
    # p99 falls when ops rise: minimize a latency made from the same surface
    rec = {**BASELINE, "synthetic.x": 7.0, "synthetic.mode": "b", "synthetic.threads": 5}
    rng = np.random.default_rng(1)

    def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        return "ok", "", {"p99_us": 5e6 / true_value(config) * float(rng.lognormal(0, 0.01))}

    res = ablation.ablate(_confirmation(rec), BASELINE, "p99_us", "minimize",
                          EvaluationSpec(confirm_rounds=8), 0, measure)
    assert set(res["carries"]) == {"synthetic.x", "synthetic.mode"}, res["text"]
    assert res["knobs"][0]["knob"] == "synthetic.x"  # the larger share first
    assert res["knobs"][0]["revert"]["verdict"] == "worse"
    assert res["gain"]["change"] < 0 and res["gain"]["verdict"] == "better"
    # The whole recommendation's gain is said with its interval (paired by round), which
    # its word follows: never "better" from the sign of one ratio of medians.
    lo, hi = res["gain"]["ci"]
    assert lo <= res["gain"]["change"] <= hi < 0, res["gain"]
    assert "95% CI" in res["gain"]["text"], res["gain"]
    assert 0.8 < res["shares_sum"] < 1.2


def test_single_change_and_nothing_recommended_cost_nothing() -> None:
    m = _measure()
    rec = {**BASELINE, "synthetic.x": 7.0}
    res = ablation.ablate(_confirmation(rec), BASELINE, "ops_per_sec", "maximize",
                          EvaluationSpec(), 0, m)
    assert m.count["n"] == 0 and res["carries"] == ["synthetic.x"]
    assert res["minimal_changes"] == {"synthetic.x": 7.0}
    none = ablation.ablate(Confirmation(), BASELINE, "ops_per_sec", "maximize",
                           EvaluationSpec(), 0, m)
    assert none["skipped"] and m.count["n"] == 0
    assert ablation.cost(_confirmation({**rec, "synthetic.mode": "b"}), BASELINE, 5) == 20


def test_share_is_nan_safe_when_no_gain() -> None:
    rec = {**BASELINE, "synthetic.threads": 5, "synthetic.flag": True}  # flag needs x > 5
    res = ablation.ablate(_confirmation(rec), BASELINE, "ops_per_sec", "maximize",
                          EvaluationSpec(confirm_rounds=5), 0, _measure(seed=3))
    assert res["carries"] == [] and set(res["noise"]) == {"synthetic.threads",
                                                          "synthetic.flag"}
    assert res["minimal_changes"] == {}
    assert "no single change carries the gain" in res["text"]
    assert all(isinstance(r["share"], float) or math.isnan(r["share"]) for r in res["knobs"])


def test_the_study_runs_the_ablation_after_its_confirmation(tmp_path: Any) -> None:
    """A real synthetic study: `StudyRun.run` confirms, then runs the ablation through the
    evaluator (repetitions of kind "ablation"), stores it under "ablation" and prints it;
    `ablation=False` (kvtune tune --no-ablation) skips it."""
    from rich.console import Console

    from kvtune.store import Store
    from kvtune.study.loader import load_study
    from kvtune.study.run import StudyRun

    text = ("study: {name}\ntarget: {{kind: synthetic, noise_cov: 0.02}}\n"
            "knobs: [synthetic.x, synthetic.threads, synthetic.mode]\n"
            "objective: {{metric: ops_per_sec}}\nbudget: {{trials: 14}}\nrepetitions: 2\n"
            "evaluation: {{noise_floor_runs: 3, confirm_top: 1, confirm_rounds: 6, "
            "drift_every: 0}}\nsampler: random\nseed: 4\n")
    p = tmp_path / "ab.yaml"
    p.write_text(text.format(name="ab"))
    console = Console(record=True, width=200)
    run = StudyRun(load_study(p), console, base_dir=tmp_path)
    conf = run.run()
    assert conf is not None and conf.recommended is not None, conf
    store = Store(run.store.url)
    res = store.last_result("ab", "ablation")
    assert res is not None and not res["skipped"], res
    rec = dict(conf.recommended.config)
    changed = ablation.changed_knobs(rec, BASELINE)
    assert set(res["changes"]) == set(changed)
    assert len(store.repetitions("ab", "ablation")) == res["measurements"]
    # x 2 -> near 7 is most of the gain; it must be named whenever it changed
    if "synthetic.x" in changed and abs(rec["synthetic.x"] - 7) < 2:
        assert "synthetic.x" in res["carries"], res["text"]
    assert "Ablation" in console.export_text()
    assert store.last_result("ab", "host_noise")["checks"]  # beside the noise floor

    q = tmp_path / "noab.yaml"
    q.write_text(text.format(name="noab"))
    run = StudyRun(load_study(q), Console(quiet=True), base_dir=tmp_path)
    run.run(ablation=False)
    assert Store(run.store.url).last_result("noab", "ablation") is None
    assert Store(run.store.url).repetitions("noab", "ablation") == []


def test_rounds_grow_with_noise_and_the_gain_stays_with_its_carriers() -> None:
    """The ablation chooses its rounds from the measured noise: at CoV 1% the
    confirmation's 5 rounds resolve everything; at CoV 5% the 8% carrier (flag, with
    x > 5) needs more rounds, which only the ambiguous changes get. Both name x and flag
    and never threads (worth 0.2%); with a cap below what the noise asks for it says what
    it could not resolve."""
    rec = {**BASELINE, "synthetic.x": 7.0, "synthetic.flag": True, "synthetic.threads": 5}
    conf = _confirmation(rec)
    ev = EvaluationSpec(confirm_rounds=5)
    quiet, noisy = _measure(cov=0.01, seed=0), _measure(cov=0.05, seed=0)
    lo = ablation.ablate(conf, BASELINE, "ops_per_sec", "maximize", ev, 0, quiet)
    hi = ablation.ablate(conf, BASELINE, "ops_per_sec", "maximize", ev, 0, noisy)
    for res in (lo, hi):
        assert set(res["carries"]) == {"synthetic.x", "synthetic.flag"}, res["text"]
        assert "synthetic.threads" in res["noise"]
    assert lo["planned_rounds"] == lo["rounds"] == 5
    # every change but threads carries: the minimal configuration is measured too
    assert lo["measurements"] == quiet.count["n"] == (3 + 2) * 5 + 3 * 5
    assert hi["planned_rounds"] > 10 and hi["rounds"] > 5
    assert hi["measurements"] == noisy.count["n"] > lo["measurements"]
    rows = {r["knob"]: r for r in hi["knobs"]}
    assert rows["synthetic.x"]["rounds"] == 5  # a 30% effect is clear at the first look
    assert rows["synthetic.flag"]["rounds"] > 5
    # only the ambiguous arms and the recommendation ran the extra rounds
    assert hi["measurements"] - 3 * 5 < (3 + 2) * hi["rounds"]
    assert len(hi["baseline_samples"]) == 5
    assert sum(hi["levels"]) <= ev.alpha + 1e-12
    # capped below what the noise asks for: the ablation says what it could not resolve
    capped = ablation.ablate(conf, BASELINE, "ops_per_sec", "maximize",
                             EvaluationSpec(confirm_rounds=5, ablation_max_rounds=6), 0,
                             _measure(cov=0.08, seed=5))
    assert capped["rounds"] <= 6
    assert "synthetic.threads" not in capped["carries"]
    assert capped["unresolved"], capped["text"]  # CoV 8%: threads' 0.2% needs far more
    assert "still ambiguous after 6 rounds" in capped["text"]
    assert "evaluation.ablation_max_rounds = 6" in capped["text"]
    # every arm 5 rounds, the open ones and the recommendation up to 30, then the choice
    assert ablation.max_cost(conf, BASELINE, EvaluationSpec()) == 5 * 5 + 4 * 25 + 3 * 5


@pytest.mark.parametrize("seed", range(12))
def test_a_changes_share_verdict_and_words_come_from_one_interval(seed: int) -> None:
    """The class of 'share −45% (95% CI −98% … −3%), reverting it: no significant change':
    whatever the noise, a change said to carry has its whole share interval above 0, one
    said to hurt below 0, one said not to carry below the share threshold; an interval
    wholly on one side is never called ambiguous; the revert's words match."""
    rec = {**BASELINE, "synthetic.x": 7.0, "synthetic.flag": True, "synthetic.threads": 5,
           "synthetic.mode": "c"}
    res = ablation.ablate(_confirmation(rec), BASELINE, "ops_per_sec", "maximize",
                          EvaluationSpec(confirm_rounds=4, ablation_max_rounds=8), seed,
                          _measure(cov=0.06, seed=seed))
    for r in res["knobs"]:
        lo, hi = r["share_ci"]
        if r["effect"] == "carries":
            assert lo > 0 and r["revert"]["verdict"] == "worse", r
        elif r["effect"] == "hurts":
            assert hi < 0 and r["revert"]["verdict"] == "better", r
        elif r["effect"] == "does not carry":
            assert hi < res["share_threshold"], r
            assert r["revert"]["verdict"] == "no significant change", r
        else:
            assert r["effect"] == "ambiguous" and lo <= 0 <= hi, r
        assert "no significant change" not in r["revert"]["text"] or not (lo > 0 or hi < 0)


def test_the_choice_keeps_the_full_recommendation_when_it_is_significantly_better() -> None:
    """`choose` measures the minimal configuration against the full one: when the left-out
    change adds a clear 10%, the full one is kept and the line says why; when it adds
    nothing, only the carriers are recommended."""
    base = {"a": 0, "b": 0}
    full = {"a": 1, "b": 1}
    res = {"changes": {"a": {"baseline": 0, "recommended": 1},
                       "b": {"baseline": 0, "recommended": 1}},
           "carries": ["a"],
           "knobs": [{"knob": "a", "share": 0.8, "share_ci": [0.6, 1.0], "effect": "carries"},
                     {"knob": "b", "share": 0.2, "share_ci": [-0.1, 0.5],
                      "effect": "ambiguous"}]}
    for adds, chosen in ((0.10, "full"), (0.0, "minimal")):
        noise = np.random.default_rng(3)

        def measure(cfg: dict[str, Any], adds: float = adds,
                    rng: np.random.Generator = noise) -> tuple[str, str, dict[str, Any]]:
            v = 100.0 * (1.3 if cfg["a"] else 1.0) * (1 + adds if cfg["b"] else 1.0)
            return "ok", "", {"ops_per_sec": v * float(rng.lognormal(0, 0.01))}

        out = ablation.choose(res, ablation.Arm("trial 1", full), ablation.Arm("baseline", base),
                              full, base, "ops_per_sec", "maximize",
                              EvaluationSpec(confirm_rounds=5), 0, measure)
        assert out["chosen"] == chosen, out["text"]
        if chosen == "full":
            assert out["config"] == full and out["extra"]["verdict"] == "better"
            assert out["text"].startswith("the full recommendation is kept")
        else:
            assert out["config"] == {"a": 1, "b": 0} and out["left_out"][0]["knob"] == "b"


def test_a_stored_ablation_without_a_share_is_shown_not_a_traceback() -> None:
    """A share that was NaN in memory is null once stored (JSON has no NaN): `kvtune show`
    and the report print "-" for it (CI failed on a traceback here)."""
    from kvtune.documents import AblatedKnob, Ablation
    from kvtune.study.ablation import lines, share_text

    stored = {"knob": "memcached.threads", "baseline": 4, "recommended": 1, "share": None,
              "share_ci": [None, None], "revert": {"text": "no significant change"},
              "effect": "ambiguous"}
    row = AblatedKnob.model_validate(stored)
    res = Ablation.model_validate({"text": "no change carries the gain alone", "rounds": 4,
                                   "measurements": 8, "knobs": [stored]})
    assert share_text(row) == "-"
    assert "share of the gain -;" in lines(res)[1]
    row = AblatedKnob.model_validate({**stored, "share_ci": [0.2, None]})
    assert share_text(row).startswith("- (")
