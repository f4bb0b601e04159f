"""The confirmation's claims: every shown metric with its CI from the same interleaved
rounds ("no significant change" when the CI spans zero), constraints relative to the
baseline checked in the search and at confirmation (a significant violation blocks the
recommendation, an unsettled one is said to be inconclusive), and trade-offs named in the
verdict line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from kvtune.report.summary import change_cell, collect, render
from kvtune.spec import EvaluationSpec, parse_constraint
from kvtune.stats import compare_rounds
from kvtune.study import confirm as cf
from kvtune.study.loader import load_study, parse_study
from kvtune.study.run import StudyRun

EV = EvaluationSpec(confirm_rounds=8, confirm_top=1)


def _arm(name: str, rows: dict[str, list[float]]) -> cf.Arm:
    n = len(next(iter(rows.values())))
    return cf.Arm(name, {"k": name}, metrics=[{m: v[i] for m, v in rows.items()}
                                               for i in range(n)])


def _noisy(centre: float, cov: float, n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(centre * rng.lognormal(0, cov, n))


BASE = _arm("baseline", {"p99_us": _noisy(1000, 0.03, 8, 1), "ops_per_sec": _noisy(1e5, 0.03, 8, 2),
                         "p50_us": _noisy(100, 0.03, 8, 3), "errors": [0.0] * 8})


def test_constraints_relative_to_the_baseline_parse_and_resolve() -> None:
    c = parse_constraint("ops_per_sec >= 0.98 * baseline")
    assert c.relative and c.bound == 0.98 and str(c) == "ops_per_sec >= 0.98 * baseline"
    assert c.violation(1.0) == 0.0  # not judged before the baseline is measured
    r = c.resolve({"ops_per_sec": 100_000.0})
    assert r.violation(99_000.0) <= 0 < r.violation(97_000.0)
    p50 = parse_constraint("p50_us <= 1.5*baseline").resolve({"p50_us": 100.0})
    assert p50.violation(140.0) <= 0 < p50.violation(160.0)
    assert not parse_constraint("p99_us <= 500").relative
    with pytest.raises(ValueError, match="not a constraint"):
        parse_constraint("ops_per_sec >= 0.98 * defaults")


def test_a_secondary_metric_whose_ci_spans_zero_is_no_significant_change() -> None:
    cand = _arm("trial 1", {"p99_us": _noisy(500, 0.03, 8, 4),
                            "ops_per_sec": _noisy(1e5, 0.03, 8, 5),  # same throughput
                            "p50_us": _noisy(100, 0.03, 8, 6), "errors": [0.0] * 8})
    res = cf.verdict(BASE, [({"trial": 1}, cand)], "p99_us", "minimize", EV, 0)
    rec = res["recommended"]
    assert rec is not None and rec["name"] == "trial 1"
    ops = rec["changes"]["ops_per_sec"]
    assert ops["ci"][0] < 0 < ops["ci"][1]
    assert not ops["significant"] and ops["verdict"] == "no significant change"
    assert ops["text"].startswith("ops_per_sec ") and "(95% CI " in ops["text"]
    assert ops["text"].endswith(", no significant change")
    assert rec["tradeoffs"] == [] and "at the cost" not in res["verdict"]
    assert rec["changes"]["p99_us"]["significant"] and rec["changes"]["p99_us"]["change"] < -0.4
    assert rec["changes"]["errors"]["verdict"] == "no significant change"


def test_a_significant_tradeoff_is_named_in_the_verdict_line() -> None:
    cand = _arm("trial 1", {"p99_us": _noisy(170, 0.03, 8, 4),
                            "ops_per_sec": _noisy(82_000, 0.03, 8, 5),  # −18%
                            "p50_us": _noisy(264, 0.03, 8, 6), "errors": [0.0] * 8})
    res = cf.verdict(BASE, [({"trial": 1}, cand)], "p99_us", "minimize", EV, 0)
    rec = res["recommended"]
    assert rec is not None and set(rec["tradeoffs"]) == {"ops_per_sec", "p50_us"}
    v = res["verdict"]
    assert v.startswith("trial 1: p99_us \u2212") and "better" in v
    assert ", at the cost of ops_per_sec \u221218." in v and "worse" in v
    lo, hi = rec["changes"]["ops_per_sec"]["ci"]
    assert lo < -0.18 < hi < 0


def test_a_relative_constraint_the_winner_violates_blocks_the_recommendation() -> None:
    cand = _arm("trial 1", {"p99_us": _noisy(170, 0.03, 8, 4),
                            "ops_per_sec": _noisy(82_000, 0.03, 8, 5),
                            "p50_us": _noisy(100, 0.03, 8, 6), "errors": [0.0] * 8})
    c = parse_constraint("ops_per_sec >= 0.98 * baseline")
    res = cf.verdict(BASE, [({"trial": 1}, cand)], "p99_us", "minimize", EV, 0, [c])
    row = res["candidates"][0]
    assert row["objective_significant"] and not row["significant"]
    assert res["recommended"] is None
    assert row["constraints"][0]["status"] == "violated"
    assert "ops_per_sec >= 0.98 * baseline: significantly violated" in res["verdict"]
    # The same constraint, loose enough: the candidate is recommended.
    loose = parse_constraint("ops_per_sec >= 0.5 * baseline")
    ok = cf.verdict(BASE, [({"trial": 1}, cand)], "p99_us", "minimize", EV, 0, [loose])
    assert ok["recommended"] is not None
    assert ok["candidates"][0]["constraints"][0]["status"] == "satisfied"


def test_a_constraint_the_rounds_cannot_settle_is_inconclusive() -> None:
    cand = _arm("trial 1", {"p99_us": _noisy(300, 0.03, 8, 4),
                            "ops_per_sec": _noisy(98_000, 0.08, 8, 5),  # near the bound
                            "p50_us": _noisy(100, 0.03, 8, 6), "errors": [0.0] * 8})
    c = parse_constraint("ops_per_sec >= 0.98 * baseline")
    res = cf.verdict(BASE, [({"trial": 1}, cand)], "p99_us", "minimize", EV, 0, [c])
    assert res["candidates"][0]["constraints"][0]["status"] == "inconclusive"
    assert res["recommended"] is not None  # not significantly violated
    assert "ops_per_sec >= 0.98 * baseline: inconclusive" in res["verdict"]


def test_run_interleaved_returns_every_metric_of_every_arm() -> None:
    def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        return "ok", "", {"a": float(config["k"]), "b": 2.0 * config["k"]}

    arms = cf.run_interleaved({"x": {"k": 1}, "y": {"k": 2}}, 3, measure, seed=0)
    assert arms["x"].series("a") == [1.0] * 3 and arms["y"].all_series()["b"] == [4.0] * 3


STUDY = """\
study: {name}
target: {{kind: synthetic, noise_cov: 0.03, surface: tradeoff}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: p99_us}}
constraints: ["ops_per_sec >= 0.98 * baseline"]
budget: {{trials: 16}}
repetitions: 2
evaluation: {{noise_floor_runs: 4, confirm_top: 2, confirm_rounds: 6, drift_every: 0}}
sampler: random
seed: 3
"""


def test_a_study_checks_the_relative_constraint_in_the_search_and_shows_every_change(
        tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text(STUDY.format(name="t"))
    run = StudyRun(load_study(p), Console(quiet=True), base_dir=tmp_path)
    doc = run.run()
    assert doc is not None
    res = doc.stored()  # as stored: the layout show --json prints
    data = collect(run.store, "t")
    base_ops = data["baseline"]["metrics"]["ops_per_sec"]
    trials = [t for t in data["trials"] if t["kind"] == "trial" and t["state"] == "COMPLETE"]
    # In the search: feasible exactly when the median is at least 98% of the noise floor's.
    assert trials and any(not t["feasible"] for t in trials)
    for t in trials:
        assert t["feasible"] == (t["metrics"]["ops_per_sec"] >= 0.98 * base_ops)
    for c in res["candidates"]:
        assert set(c["changes"]) >= {"p99_us", "ops_per_sec", "p50_us", "hit_ratio"}
        assert c["constraints"][0]["constraint"] == "ops_per_sec >= 0.98 * baseline"
    out = Console(record=True, width=200)
    render(data, out)
    text = out.export_text()
    assert "Confirmation" in text and "interleaved rounds, 95% CI" in text
    row = res["recommended"] or max(res["candidates"],
                                    key=lambda c: c["comparison"]["improvement"])
    for m, ch in row["changes"].items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"\u2502 {m} "))
        assert change_cell(ch) in line
        if not ch["significant"]:
            assert "no significant change" in line and ", better" not in line
    assert any(not ch["significant"] for ch in row["changes"].values())


def test_unknown_surface_is_refused() -> None:
    from kvtune.errors import UserError
    from kvtune.targets.synthetic import SyntheticTarget

    spec, _ = parse_study(STUDY.format(name="u").replace("surface: tradeoff", "surface: nope"))
    with pytest.raises(UserError, match="unknown synthetic surface"):
        SyntheticTarget(spec.target)


PARETO = """\
study: {name}
target: {{kind: synthetic, noise_cov: 0.03, surface: tradeoff}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: [p99_us, ops_per_sec]
budget: {{trials: 20}}
repetitions: 2
evaluation: {{noise_floor_runs: 4, confirm_top: 3, confirm_rounds: 6, drift_every: 0}}
sampler: {sampler}
seed: 4
"""


@pytest.mark.e2e  # a whole study (search, confirmation, report)
# On the synthetic target: nothing measured on this host, no host knob, so beside the unit
# tier (docs/testing.md).
@pytest.mark.parallel
@pytest.mark.parametrize("sampler", ["tpe", "nsga2"])
def test_a_two_objective_study_confirms_and_reports_a_front(tmp_path: Path,
                                                            sampler: str) -> None:
    from kvtune.export import NoRecommendation, recommendation

    p = tmp_path / "p.yaml"
    p.write_text(PARETO.format(name="p", sampler=sampler))
    loaded = load_study(p)
    assert [o.metric for o in loaded.spec.objective.all] == ["p99_us", "ops_per_sec"]
    run = StudyRun(loaded, Console(quiet=True), base_dir=tmp_path)
    doc = run.run()
    assert doc is not None and doc.multi and doc.front
    res = doc.stored()  # as stored: the layout show --json prints
    assert run.study is not None and len(run.study.directions) == 2
    assert res["multi"] and res["recommended"] is None
    assert [o["metric"] for o in res["objectives"]] == ["p99_us", "ops_per_sec"]
    rows = res["candidates"]
    assert 1 <= len(rows) <= 3
    # The candidates are mutually non-dominated in the search.
    for a in rows:
        for b in rows:
            assert a is b or not (a["search_values"][0] <= b["search_values"][0]
                                  and a["search_values"][1] >= b["search_values"][1]
                                  and a["search_values"] != b["search_values"])
    for r in rows:
        assert set(r["objectives"]) == {"p99_us", "ops_per_sec"}
        assert r["significant"] == (bool(r["improved"]) and r["failed"] is None)
        for ch in r["objectives"].values():
            assert ch["ci"] is not None and "p_adjusted" in ch
    front = [r for r in rows if r["significant"]]
    assert front and res["front"] == [r["trial"] for r in front]
    data = collect(run.store, "p")
    out = Console(record=True, width=220)
    render(data, out)
    text = out.export_text()
    assert "Pareto candidates against the baseline" in text and "confirmed front" in text
    pick = front[0]
    rec = recommendation(run.store, "p", trial=pick["trial"])
    assert rec.config == pick["config"] and "picked from the confirmation" in rec.source
    with pytest.raises(NoRecommendation, match="not a confirmed candidate"):
        recommendation(run.store, "p", trial=0)
    # The report draws the front: baseline and candidates with their CIs.
    from kvtune.analysis import load as load_data
    from kvtune.report.html import render as render_html

    page = render_html(load_data(run.store, "p"))
    assert "The confirmed front" in page and "plot-pareto" in page
    assert "Pareto study:" in page and f"trial {pick['trial']}" in page


def test_the_objectives_ci_is_simultaneous_over_the_candidates() -> None:
    """The recommendation is the candidate with the largest measured gain, so each
    candidate's CI of the objective holds at 95% jointly over the candidates (Bonferroni):
    wider than its own marginal CI, the same in the verdict line and the comparison table
    (bench/evaluator/selection_coverage.py measures the coverage)."""
    cands = [({"trial": i}, _arm(f"trial {i}", {"p99_us": _noisy(c, 0.03, 8, 10 + i)}))
             for i, c in enumerate((800.0, 850.0, 990.0))]
    res = cf.verdict(BASE, cands, "p99_us", "minimize", EV, 0)
    for row in res["candidates"]:
        comp = row["comparison"]
        assert comp["ci_level"] == pytest.approx(1 - 0.05 / 3)
        assert comp["ci_simultaneous_over"] == 3
        marginal = compare_rounds(cands[row["trial"]][1].by_round("p99_us"),
                                  BASE.by_round("p99_us"), "minimize")
        assert comp["ci_low"] < marginal.ci_low and comp["ci_high"] > marginal.ci_high
        # The comparison table states the objective with the same interval.
        assert row["changes"]["p99_us"]["ci"] == pytest.approx(
            [comp["change_ci_low"], comp["change_ci_high"]])
    assert res["recommended"]["trial"] == 0
    alone = cf.verdict(BASE, cands[:1], "p99_us", "minimize", EV, 0)
    comp = alone["candidates"][0]["comparison"]
    assert comp["ci_level"] == pytest.approx(0.95)
    single = compare_rounds(cands[0][1].by_round("p99_us"), BASE.by_round("p99_us"), "minimize")
    assert [comp["ci_low"], comp["ci_high"]] == pytest.approx([single.ci_low, single.ci_high])
    # The verdict line states the simultaneous interval.
    ch = res["recommended"]["comparison"]
    assert f"{ch['change_ci_low'] * 100:+.1f}%".replace("-", "\u2212") in res["verdict"]


def test_a_failed_capacity_candidate_is_still_said_at_the_slo() -> None:
    """A candidate whose every search failed (client-bound, no rate met the SLO) has no
    capacity: its line still names the baseline's capacity and the SLO, and why."""
    base = _arm("baseline", {"capacity": _noisy(40_000, 0.05, 8, 4)})
    base.samples = base.series("capacity")
    cand = cf.Arm("trial 4", {"k": "t4"}, failed="capacity search: the load generator "
                  "was the limit, not the server")
    res = cf.verdict(base, [({"trial": 4}, cand)], "capacity", "maximize", EV, 0,
                     slo="p99_us <= 2000")
    text = res["candidates"][0]["text"]
    assert "req/s at p99_us <= 2000: no significant change" in text, text
    # Why there is no interval: the candidate measured no round (the baseline 8).
    assert f"({cf.NOT_COMPARED} 0 of its rounds measured, the baseline's 8)" in text, text
    assert re.search(r"capacity \d{2},\d{3} → - req/s", text) and res["recommended"] is None
