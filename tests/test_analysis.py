"""Analysis: importance finds the knob that matters, sensitivity curves carry bootstrap CIs
from the raw repetitions (from a sweep when there is one), correlations rank the counters
that move with the objective, and zones mark where the best is reachable."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from rich.console import Console
from support import session

from kvtune.analysis import analyse, correlations, importance, load, sensitivity, zones
from kvtune.analysis.data import KnobInfo, StudyData
from kvtune.analysis.sensitivity import curve_from_reps
from kvtune.report.summary import collect, render
from kvtune.store import Store
from kvtune.study.commands import sweep
from kvtune.study.loader import load_study
from kvtune.study.run import StudyRun

STUDY = """\
study: {name}
target: {{kind: synthetic, noise_cov: 0.03}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: ops_per_sec}}
budget: {{trials: {trials}}}
repetitions: 2
evaluation: {{noise_floor_runs: 4, confirm_top: 1, confirm_rounds: 4, drift_every: 0}}
sampler: random
seed: 11
"""


def _study_a(d: Path) -> StudyRun:
    p = d / "a.yaml"
    p.write_text(STUDY.format(name="a", trials=40))
    run = StudyRun(load_study(p), Console(quiet=True), base_dir=d)
    run.run()
    return run


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[StudyData, Path]:
    """Study "a" (40 trials), which the tests only read. pytest-xdist's default scheduling
    (--dist load, `make test-unit`) gives this module's tests to both workers, and each
    built the study (about 4 s of CPU): the workers of one session share it
    (support.session.once: the first to ask builds it, the other reads the same database)."""
    d = session.once(session.root(tmp_path_factory), "analysis-study",
                     lambda d: (d / "url").write_text(_study_a(d).store.url))
    return load(Store((d / "url").read_text(), create=False), "a"), d / "a.yaml"


def test_importance_finds_the_knob_with_the_peak(synthetic: tuple[StudyData, Path]) -> None:
    data, _ = synthetic
    imp = importance(data)
    assert imp.method == "main-effects" and imp.n_trials >= 35
    assert math.isclose(sum(imp.values.values()), 1.0)
    # x carries a 30% peak; threads, mode and flag are far smaller effects.
    assert next(iter(imp.values)) == "synthetic.x", imp.values
    assert imp.values["synthetic.x"] > 0.4
    # ranked, with an interval per knob holding its point value
    assert imp.ranked and imp.ranking[0] == "synthetic.x", imp.verdict()
    for k, v in imp.values.items():
        lo, hi = imp.intervals[k]
        assert (lo <= v + 1e-9 and v - 1e-9 <= hi) or v < 0.02, (k, v, lo, hi)
    assert imp.intervals["synthetic.x"][0] > 0.3
    assert all("#" not in k for k in imp.values)
    # Optuna's PED-ANOVA is still there, unranked (no significance test). Its point values
    # and note do not depend on the bootstrap; 20 resamples (not the default 200, each a
    # study of its own: 4.7 s here) still give it intervals (>= 10 draws).
    ped = importance(data, method="ped-anova", resamples=20)
    assert ped.values and not ped.ranked and "no significance test" in ped.note
    assert set(ped.intervals) == set(ped.values)


def test_sensitivity_curves_have_cis_from_repetitions(synthetic: tuple[StudyData, Path]
                                                      ) -> None:
    data, _ = synthetic
    curves = {c.knob: c for c in sensitivity(data)}
    x = curves["synthetic.x"]
    assert x.numeric and x.source == "search" and 2 <= len(x.points) <= 8
    assert sum(p.n_reps for p in x.points) == len([r for r in data.ok_reps()
                                                   if r["kind"] != "sweep"])
    for p in x.points:
        if p.n_reps >= 2:
            assert p.ci_low <= p.median <= p.ci_high
    # The bin holding 7 beats the bin holding the default 2.
    near7 = next(p for p in x.points if p.label.split("–")[0] and float(
        p.label.split("–")[0]) <= 7 <= float(p.label.split("–")[-1]))
    first = x.points[0]
    assert near7.median > first.median * 1.1
    mode = curves["synthetic.mode"]
    assert [p.label for p in mode.points] == ["a", "b", "c"]
    assert max(mode.points, key=lambda p: p.median).label == "b"
    assert mode.baseline_value == "a"


def test_correlations_rank_what_moves_with_the_objective(
        synthetic: tuple[StudyData, Path]) -> None:
    data, _ = synthetic
    cs = {c.metric: c for c in correlations(data)}
    assert data.metric not in cs
    assert cs["p99_us"].rho < -0.95  # the synthetic surface's latency mirrors throughput
    assert not cs["p99_us"].telemetry
    assert "hit_ratio" not in cs  # constant: no correlation to speak of


def test_telemetry_correlation_on_hand_made_repetitions() -> None:
    data = _data([])
    reps = []
    for i in range(12):
        value = 1000.0 + 100 * i
        reps.append(_rep(value, {"ops_per_sec": value, "perf_context_switches": 5e4 - 3e3 * i
                                 + (i % 3) * 10, "mc_evictions": 7.0, "proc_cpu_util":
                                 0.5 + 0.01 * ((i * 7) % 5),
                                 "proc_voluntary_switches": 10.0 * i}))
    out = correlations(data, reps)
    names = [c.metric for c in out]
    assert names[0] in ("perf_context_switches", "proc_voluntary_switches")
    cs = {c.metric: c for c in out}
    assert cs["perf_context_switches"].rho == pytest.approx(-1.0)
    assert cs["perf_context_switches"].telemetry and cs["perf_context_switches"].n == 12
    assert "mc_evictions" not in cs  # constant
    assert abs(cs["proc_cpu_util"].rho) < 0.6
    assert cs["proc_voluntary_switches"].rho == pytest.approx(1.0)


def test_zones_on_known_trials() -> None:
    trials = []
    for i, (x, mode) in enumerate([(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "a"), (6, "b"),
                                   (7, "a"), (8, "b"), (9, "a"), (10, "b")]):
        value = 100.0 - 3 * abs(x - 6.5)  # best 98.5 at 6 and 7
        if mode == "b":
            value -= 1
        trials.append(_trial(i, {"k.x": x, "k.mode": mode}, value))
    data = _data(trials)
    zs = {z.knob: z for z in zones(data, within=0.05)}
    x = zs["k.x"]
    # within 5% of 98.5 means >= 93.575: x in 5..8 (value 95.5 at 5 and 8; 8 is "b": 94.5)
    assert x.intervals == [(5.0, 8.0)]
    assert x.reachable == 4 and x.tried == 10
    assert zs["k.mode"].categories == ["a", "b"]
    narrow = {z.knob: z for z in zones(data, within=0.015)}  # >= 97.02: 6 (b) and 7 (a)
    assert narrow["k.x"].intervals == [(6.0, 7.0)]
    assert "6…7" in narrow["k.x"].describe()
    tight = {z.knob: z for z in zones(data, within=0.005)}
    assert tight["k.x"].intervals == [(7.0, 7.0)]
    assert tight["k.mode"].categories == ["a"]


def test_importance_needs_trials_and_one_knob_is_everything() -> None:
    few = _data([_trial(i, {"k.x": i, "k.mode": "a"}, float(i)) for i in range(3)])
    imp = importance(few)
    assert imp.values == {} and "at least 4" in imp.note
    one = _data([_trial(i, {"k.x": i}, float(i)) for i in range(6)],
                knobs=[KnobInfo("k.x", "int")])
    assert importance(one).values == {"k.x": 1.0}


def test_too_few_trials_to_rank_say_so() -> None:
    """6 trials of two knobs leave 6 - 1 - 2 - 1 = 2 residual degrees of freedom: the
    point shares are shown, the ranking is refused."""
    ts = [_trial(i, {"k.x": i, "k.mode": "ab"[i % 2]}, float(100 + i * i)) for i in range(6)]
    imp = importance(_data(ts))
    assert imp.values and not imp.ranked and imp.ranking == []
    assert "degrees of freedom" in imp.note
    assert imp.verdict().startswith("not enough trials to rank")


def test_a_knob_without_effect_is_not_ranked() -> None:
    """k.x moves the objective strongly; k.mode does nothing (the values alternate)."""
    import numpy as np

    rng = np.random.default_rng(0)
    ts = [_trial(i, {"k.x": i % 11, "k.mode": "ab"[(i // 3) % 2]},
                 float(1000 + 50 * (i % 11) + rng.normal(0, 5))) for i in range(30)]
    imp = importance(_data(ts))
    assert imp.ranked and imp.ranking == ["k.x"], imp.verdict()
    assert imp.q_values["k.mode"] > 0.05
    assert "no measurable effect: k.mode" in imp.verdict()


def test_correlations_are_corrected_for_multiple_testing() -> None:
    """40 counters of pure noise beside one that follows the objective: raw p-values put
    some noise below 0.05, the BH q-values keep only the real one as a lead."""
    import numpy as np

    rng = np.random.default_rng(3)
    reps = []
    for i in range(20):
        y = 100.0 + i
        m = {f"perf_noise_{j}": float(rng.normal()) for j in range(40)}
        m["proc_cpu_s"] = y * 0.01 + float(rng.normal(0, 0.01))
        reps.append(_rep(y, m))
    cs = correlations(_data([]), reps)
    leads = [c.metric for c in cs if c.lead()]
    assert leads == ["proc_cpu_s"], leads
    assert all(c.q_value >= c.p_value for c in cs)
    d = next(c for c in cs if c.metric == "proc_cpu_s").as_dict()
    assert d["unit"] == "s" and d["lead"] is True


def test_sweep_gives_the_curve_with_others_at_defaults(tmp_path: Path) -> None:
    p = tmp_path / "w.yaml"
    p.write_text(STUDY.format(name="w", trials=4))
    loaded = load_study(p)
    run = StudyRun(loaded, Console(quiet=True), base_dir=tmp_path)
    run.run(confirm=False)
    sweep(loaded, "synthetic.x", ["1", "4", "7", "9"], 3, Console(quiet=True), tmp_path)
    data = load(run.store, "w")
    assert "synthetic.x" in data.sweeps
    curve = next(c for c in sensitivity(data) if c.knob == "synthetic.x")
    assert curve.source == "sweep"
    assert [p.x for p in curve.points] == [1.0, 4.0, 7.0, 9.0]
    assert all(p.n_reps == 3 for p in curve.points)
    assert max(curve.points, key=lambda p: p.median).x == 7.0


def test_show_prints_importance_zones_and_telemetry(synthetic: tuple[StudyData, Path]) -> None:
    data, _ = synthetic
    from kvtune.store import Store

    info = collect(Store(data.storage), "a")
    an = info["analysis"]
    assert next(iter(an["importance"]["values"])) == "synthetic.x"
    assert "synthetic.x" in an["zones_text"]
    console = Console(record=True, width=200)
    render(info, console)
    text = console.export_text()
    assert "What mattered" in text and "synthetic.x" in text


def test_analyse_as_dict_is_json(synthetic: tuple[StudyData, Path]) -> None:
    import json

    data, _ = synthetic
    d = analyse(data, within=0.1).as_dict()
    json.dumps(d)
    assert d["within"] == 0.1 and d["zones"]


def test_curve_for_a_log_knob_bins_by_rank() -> None:
    reps = [_rep(float(v), {}, params={"k.size": v}) for v in
            (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)]
    c = curve_from_reps(KnobInfo("k.size", "int", log=True), reps, "search")
    assert len(c.points) == 8 and c.log
    assert c.points[0].x < 4 and c.points[-1].x > 1000


# -- helpers -------------------------------------------------------------------------------


def _trial(number: int, params: dict[str, Any], value: float) -> optuna.trial.FrozenTrial:
    dists: dict[str, optuna.distributions.BaseDistribution] = {}
    for k, v in params.items():
        dists[k] = (optuna.distributions.CategoricalDistribution(["a", "b"]) if isinstance(
            v, str) else optuna.distributions.IntDistribution(0, 10))
    t = optuna.trial.create_trial(params=params, distributions=dists, value=value,
                                  user_attrs={"kind": "trial", "config": params})
    t.number = number
    return t


def _data(trials: list[optuna.trial.FrozenTrial],
          knobs: list[KnobInfo] | None = None) -> StudyData:
    study = optuna.create_study(direction="maximize")
    return StudyData("t", "ops_per_sec", "maximize", study, trials, [],
                     knobs if knobs is not None else
                     [KnobInfo("k.x", "int"), KnobInfo("k.mode", "categorical",
                                                       choices=("a", "b"))])


def _rep(value: float, metrics: dict[str, Any], params: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    return {"kind": "trial", "status": "ok", "value": value, "metrics": metrics,
            "params": params or {}, "config_key": str(params), "raw": {}}


def test_analysis_of_a_study_whose_baseline_lies_outside_a_range(
        tmp_path: Path) -> None:
    """A range that leaves the default out makes the default a special value: the analysis
    reads the study's stored domains and works (it used to fail on trial 0's value)."""
    p = tmp_path / "o.yaml"
    p.write_text(STUDY.replace(
        "[synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]",
        "[synthetic.x, {{name: synthetic.threads, range: [8, 12]}}, synthetic.mode]")
        .format(name="o", trials=12))
    run = StudyRun(load_study(p), Console(quiet=True), base_dir=tmp_path)
    run.run(confirm=False)
    data = load(run.store, "o")
    threads = next(k for k in data.knobs if k.name == "synthetic.threads")
    assert threads.kind == "int" and threads.special == (4,)
    a = analyse(data)
    assert a.importance.values, a.importance.note
    assert {c.knob for c in a.curves} == {"synthetic.x", "synthetic.threads", "synthetic.mode"}
    curve = next(c for c in a.curves if c.knob == "synthetic.threads")
    assert curve.baseline_value == 4 and any(p.x == 4 for p in curve.points)


def test_one_sign_convention() -> None:
    """The metric's own change, a real minus, the direction in words — for a latency that
    falls, a throughput that rises, and a change within noise; no exponent notation."""
    from kvtune.present import change_fraction, change_record, describe_change, number

    assert describe_change("p99_us", change_fraction(10_000, 1_740), "minimize") == \
        "p99_us \u221282.6%, better"
    assert describe_change("ops_per_sec", 0.04, "maximize", ci=(-0.01, 0.09),
                           significant=False) == \
        "ops_per_sec +4.0% (95% CI \u22121.0% … +9.0%), no significant change"
    assert describe_change("p99_us", 0.2, "minimize").endswith("worse")
    rec = change_record("p99_us", -0.5, "minimize", ci=(-0.6, -0.4), significant=True)
    assert rec["change"] == -0.5 and rec["verdict"] == "better" and rec["ci"] == [-0.6, -0.4]
    for v, text in ((0.000123, "0.000123"), (123456.0, "123,456"), (0.5, "0.5"),
                    (3.14159, "3.142"), (42, "42")):
        assert number(v) == text
    assert "e" not in number(1e-7) and "e" not in number(999_999.0)


def test_the_importance_says_how_many_trials_it_left_out_and_why() -> None:
    """Issue 44: "main-effects, 4 trials" for a 57-trial study dropped 53 without a word."""
    from kvtune.analysis.importance import Importance

    imp = Importance("main-effects", n_trials=4, n_searched=57)
    assert imp.trials_text().startswith("4 of 57 trials; 53 left out: a knob at a special")
    assert imp.as_dict()["trials_text"] == imp.trials_text()
    assert Importance("main-effects", n_trials=1, n_searched=1).trials_text() == "1 trial"
