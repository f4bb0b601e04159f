"""A measured configuration told to Optuna, and read back from a finished trial."""

from __future__ import annotations

import math
from typing import Any

import optuna

from kvtune.measure.evaluator import Evaluation
from kvtune.optimizer import RULES_CONSTRAINT
from kvtune.study.progress import jsonable


def tell(study: optuna.Study, trial: optuna.Trial, e: Evaluation, kind: str,
         constraints: list[str]) -> None:
    """Record `e` on `trial` (its kind, configuration, summary and the violation of each of
    `constraints` plus "not saturated") and finish the trial: FAIL when `e` failed."""
    trial.set_user_attr("kind", kind)
    trial.set_user_attr("config", e.config)
    trial.set_user_attr("eval", jsonable(e.summary()))
    violations = e.violations or [0.0] * (len(constraints) + 1)
    trial.set_user_attr("violations", violations)
    # Every measured trial (the baseline too) carries the same constraints: GPSampler
    # refuses trials whose numbers of constraints differ. Rules are checked before a
    # measurement (kvtune.optimizer.ask), so a measured trial broke none.
    trial.set_constraint(RULES_CONSTRAINT, 0.0)
    for name, v in zip([*constraints, "not saturated"], violations, strict=False):
        trial.set_constraint(name, v)
    if e.failed:
        trial.set_user_attr("failed", e.failed)
        trial.set_user_attr("stderr", e.failed_stderr[-2000:])
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return
    if len(study.directions) > 1:  # a Pareto study: every objective's median
        names = study.user_attrs.get("objectives") or [e.metric]
        vals = [e.metrics.get(n) for n in names]
        if any(v is None for v in vals):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        study.tell(trial, [float(v) for v in vals if v is not None])
        return
    study.tell(trial, e.value)


def stored_eval(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """What `tell` stored of a trial's evaluation (its summary: value, CI, metrics, flags),
    {} for a trial without one. The one reader of the trial's `eval` attribute."""
    from kvtune.errors import UserError
    from kvtune.store import check_document

    ev = t.user_attrs.get("eval", {}) or {}
    where = f"trial {t.number}'s stored evaluation"
    if not isinstance(ev, dict):
        raise UserError(f"{where} is not a mapping (the results database was changed?); "
                        "nothing was written")
    check_document(ev, where)
    return ev


def evaluation_of(t: optuna.trial.FrozenTrial, metric: str) -> Evaluation:
    """The evaluation of a finished trial as `tell` stored it (no raw repetitions)."""
    s = stored_eval(t)
    e = Evaluation(t.user_attrs.get("config", {}), metric)
    e.value = float(t.values[0]) if t.values else math.nan  # the first objective
    ci = s.get("ci") or [None, None]
    e.ci = (ci[0] if ci[0] is not None else math.nan, ci[1] if ci[1] is not None else math.nan)
    e.metrics = s.get("metrics", {})
    e.violations = t.user_attrs.get("violations", [0.0])
    return e
