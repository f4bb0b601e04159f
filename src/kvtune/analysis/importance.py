"""Knob importance with Optuna's evaluators: PED-ANOVA by default (fast, no extra
dependency), fANOVA when asked and scikit-learn is installed.

Only completed, feasible baseline and search trials count; sweeps and confirmation runs
are not samples of the search space.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna

from kvtune.analysis.data import StudyData


@dataclass
class Importance:
    method: str
    values: dict[str, float] = field(default_factory=dict)  # knob -> share, sums to 1
    n_trials: int = 0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "values": self.values, "n_trials": self.n_trials,
                "note": self.note}


def _samples(t: optuna.trial.FrozenTrial, names: list[str]) -> bool:
    """Whether trial `t` has a value in range for every knob of `names`: a knob at a special
    value (its `#mode` parameter) is not a point of its range, and studies stored before
    kvtune kept one knob space can hold a baseline value outside its distribution."""
    for n in names:
        d = t.distributions.get(n)
        if d is None or n not in t.params:
            return False
        v = t.params[n]
        if isinstance(d, optuna.distributions.CategoricalDistribution):
            if v not in d.choices:
                return False
        elif isinstance(d, optuna.distributions.IntDistribution | optuna.distributions.
                        FloatDistribution) and not d.low <= v <= d.high:
            return False
    return True


def importance(data: StudyData, method: str = "ped-anova", seed: int = 0) -> Importance:
    trials = data.search_trials()
    out = Importance(method, n_trials=len(trials))
    names = [k.name for k in data.knobs]
    if not names:
        out.note = "the study has no knobs"
        return out
    if len(names) == 1:
        out.values = {names[0]: 1.0}
        out.note = "one knob: it carries all the importance by definition"
        return out
    if len(trials) < 4:
        out.note = f"needs at least 4 completed feasible trials (have {len(trials)})"
        return out
    if len({t.value for t in trials}) < 2:
        out.note = "every trial measured the same value"
        return out
    # A private in-memory copy holds only the trials that sample the search space.
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(
            direction="maximize" if data.maximize else "minimize")
    finally:
        optuna.logging.set_verbosity(verbosity)
    study.add_trials([t for t in trials if _samples(t, names)])
    evaluator: optuna.importance.BaseImportanceEvaluator
    if method == "fanova":
        try:
            import sklearn  # noqa: F401
        except ImportError:
            out.method = "ped-anova"
            out.note = "fANOVA needs scikit-learn (not installed); PED-ANOVA used instead"
            method = "ped-anova"
    if method == "fanova":
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    else:
        # PED-ANOVA compares the top quantile with all trials; with few trials the top 10%
        # holds one or no trial, so the quantile grows to keep at least two.
        n = len(study.trials)
        q = min(0.5, max(0.1, 2.0 / n))
        evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=q)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            vals = optuna.importance.get_param_importances(study, evaluator=evaluator,
                                                           params=names)
    except (ValueError, RuntimeError, ZeroDivisionError) as e:
        out.note = f"importance could not be computed: {e}"
        return out
    total = sum(vals.values())
    if total <= 0:
        out.note = "no knob separates the best trials from the rest"
        out.values = {k: 0.0 for k in vals}
        return out
    out.values = {k: float(v) / total for k, v in sorted(vals.items(), key=lambda kv: -kv[1])}
    return out
