"""Benchmark: does kvtune's knob importance tell the truth at the trial counts studies have?

The synthetic surface (kvtune.targets.synthetic.true_value) plus one knob with no effect
(`synthetic.dummy`, a float the surface ignores). The truth is each knob's first-order
main effect from the noise-free surface (functional ANOVA on a full grid: the variance of
E[f | knob] over the knob's domain, others uniform). Each study is a TPE search (kvtune's
sampler settings) of N trials, each trial the median of 3 noisy repetitions (the target's
lognormal noise, CoV 5%), with the study's baseline as trial 0; kvtune's importance
(kvtune.analysis.importance) then ranks the knobs, or says it cannot.

    .venv/bin/python bench/explain/importance.py [--seeds 10] [--trials 10 20 40] [--json F]

Reported per trial count: how often kvtune ranked at all, top-1 correct rate when it
ranked, Spearman rank correlation of its point importances with the truth, the
importance given to the no-effect knob, how often the no-effect knob was ranked above
a real one, and the pairs of ranked knobs whose order contradicts the truth: in the plain
order of the ranking (what kvtune printed before it had tiers) and across its tiers (what
it now states as supported; knobs within a tier are printed as not separable).

    .venv/bin/python bench/explain/importance_bench.py --seeds 8 --trials 30 --cov 0.10
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from typing import Any

import numpy as np
import optuna
from scipy import stats as sps

from kvtune.analysis.data import KnobInfo, StudyData
from kvtune.analysis.importance import importance
from kvtune.optimizer import make_sampler
from kvtune.targets.synthetic import SYNTHETIC_KNOBS, true_value

DUMMY = "synthetic.dummy"
KNOBS = ["synthetic.x", "synthetic.threads", "synthetic.mode", "synthetic.flag", DUMMY]
BASELINE = {**{k.name: k.default for k in SYNTHETIC_KNOBS.values()
               if k.name != "synthetic.inert"}, DUMMY: 5.0}
COV = 0.05  # the repetitions' noise (--cov)


def grid() -> dict[str, list[Any]]:
    return {"synthetic.x": list(np.linspace(0, 10, 41)),
            "synthetic.threads": list(range(1, 17)),
            "synthetic.mode": ["a", "b", "c"], "synthetic.flag": [False, True],
            DUMMY: [0.0, 10.0]}


def truth() -> dict[str, float]:
    """First-order main effects (variance of the conditional mean), normalised to 1. The
    failure region (threads >= 14 with mode c) is left out of the means."""
    g = grid()
    names = list(g)
    shape = [len(g[n]) for n in names]
    f = np.full(shape, np.nan)
    for idx in itertools.product(*(range(s) for s in shape)):
        f[idx] = true_value({n: g[n][i] for n, i in zip(names, idx, strict=True)})
    var = {}
    for ax, n in enumerate(names):
        other = tuple(a for a in range(len(names)) if a != ax)
        cond = np.nanmean(f, axis=other)
        var[n] = float(np.var(cond))
    total = sum(var.values())
    return {n: v / total for n, v in var.items()}


def distributions() -> dict[str, optuna.distributions.BaseDistribution]:
    D = optuna.distributions
    return {"synthetic.x": D.FloatDistribution(0, 10), "synthetic.threads": D.IntDistribution(1, 16),
            "synthetic.mode": D.CategoricalDistribution(["a", "b", "c"]),
            "synthetic.flag": D.CategoricalDistribution([False, True]),
            DUMMY: D.FloatDistribution(0, 10)}


def run_study(n_trials: int, seed: int) -> StudyData:
    rng = np.random.default_rng(1000 + seed)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize",
                                sampler=make_sampler("tpe", seed, n_trials, 1))
    dists = distributions()
    study.enqueue_trial(BASELINE)
    for i in range(n_trials):
        t = study.ask(dists)
        v = true_value(t.params)
        kind = "baseline" if i == 0 else "trial"
        if math.isnan(v):
            study.tell(t, state=optuna.trial.TrialState.FAIL)
            continue
        reps = v * rng.lognormal(-COV**2 / 2, COV, 3)
        t.set_user_attr("kind", kind)
        t.set_user_attr("config", t.params)
        study.tell(t, float(np.median(reps)))
    knobs = [KnobInfo("synthetic.x", "float"), KnobInfo("synthetic.threads", "int"),
             KnobInfo("synthetic.mode", "categorical", choices=("a", "b", "c")),
             KnobInfo("synthetic.flag", "categorical", choices=(False, True)),
             KnobInfo(DUMMY, "float")]
    return StudyData("bench", "ops_per_sec", "maximize", study,
                     study.get_trials(deepcopy=False), [], knobs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, nargs="+", default=[10, 20, 40])
    ap.add_argument("--method", default="main-effects",
                    help="main-effects (kvtune's default) or ped-anova (the former one)")
    ap.add_argument("--cov", type=float, default=COV)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    globals()["COV"] = args.cov
    tru = truth()
    real = [k for k in KNOBS if k != DUMMY]
    top = max(tru, key=lambda k: tru[k])
    print("truth (main effects):", {k: round(v, 3) for k, v in tru.items()})
    out: dict[str, Any] = {"truth": tru, "method": args.method, "cov": args.cov, "rows": []}
    for n in args.trials:
        ranked = correct = dummy_above = point_correct = 0
        rhos, dummy_imp, dummy_ranked_above = [], [], 0
        wrong_plain = wrong_tiers = studies_wrong_plain = studies_wrong_tiers = 0
        for s in range(args.seeds):
            imp = importance(run_study(n, s), method=args.method, seed=s)
            if not imp.values:
                continue
            vals = [imp.values.get(k, 0.0) for k in KNOBS]
            rhos.append(float(sps.spearmanr(vals, [tru[k] for k in KNOBS]).statistic))
            dummy_imp.append(imp.values.get(DUMMY, 0.0))
            point_correct += next(iter(imp.values)) == top
            if any(imp.values.get(DUMMY, 0) > imp.values.get(k, 0) for k in real):
                dummy_above += 1
            if imp.ranked:
                ranked += 1
                correct += imp.ranking[0] == top
                order = imp.ranking
                if DUMMY in order and any(order.index(DUMMY) < order.index(k)
                                          for k in real if k in order):
                    dummy_ranked_above += 1
                plain = sum(1 for i, a in enumerate(order) for b in order[i + 1:]
                            if tru[a] < tru[b])
                tiers = imp.tiers or [[k] for k in order]
                stated = sum(1 for i, ta in enumerate(tiers) for tb in tiers[i + 1:]
                             for a in ta for b in tb if tru[a] < tru[b])
                wrong_plain += plain
                wrong_tiers += stated
                studies_wrong_plain += plain > 0
                studies_wrong_tiers += stated > 0
        row = {"trials": n, "seeds": args.seeds, "ranked": ranked,
               "top1_correct_when_ranked": correct / ranked if ranked else None,
               "top1_correct_of_point_values": point_correct / args.seeds,
               "spearman_median": float(np.median(rhos)) if rhos else None,
               "dummy_importance_median": float(np.median(dummy_imp)) if dummy_imp else None,
               "dummy_importance_max": float(np.max(dummy_imp)) if dummy_imp else None,
               "dummy_point_above_a_real_knob": dummy_above,
               "dummy_ranked_above_a_real_knob": dummy_ranked_above,
               "wrong_pairs_plain_order": wrong_plain,
               "wrong_pairs_across_tiers": wrong_tiers,
               "studies_with_a_wrong_plain_order": studies_wrong_plain,
               "studies_with_a_wrong_supported_order": studies_wrong_tiers}
        out["rows"].append(row)
        print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
