"""Drift checks: the baseline measured again during and after the search, compared
two-sided with its first measurement. "Moved" needs both the bootstrap CI of the ratio to
exclude 0 and the Mann–Whitney p-value to pass a Bonferroni level over the study's planned
checks, so a drift-free host rarely raises an alarm over a whole study."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console

from kvtune import present
from kvtune.measure.evaluator import Evaluation, Evaluator
from kvtune.metrics import Direction
from kvtune.spec import StudySpec
from kvtune.stats import compare, detectable_improvement, robust_cov
from kvtune.store import Store

DRIFT_REPETITIONS = 5  # at least; the study's repetitions when more


def planned_checks(spec: StudySpec) -> int:
    """How many drift checks a study plans (for the Bonferroni level)."""
    return 1 + (spec.budget.trials or 30) // max(spec.evaluation.drift_every, 1)


def is_moved(new: list[float], first: list[float], direction: Direction, alpha: float,
             seed: int) -> tuple[bool, dict[str, Any], tuple[float, float, float]]:
    """(moved, the comparison as stored, (change, CI low, CI high)) of `new` against the
    first baseline measurement `first`, at level `alpha`."""
    c = compare(new, first, direction, seed=seed, two_sided=True)
    # Small samples make bootstrap CIs too narrow, so a move needs the rank test too.
    moved = not (c.ci_low <= 0 <= c.ci_high) and c.p_value < alpha
    return moved, c.as_dict(), c.change()


class DriftCheck:
    """Re-measures the baseline and records whether it moved (`drift` results)."""

    def __init__(self, spec: StudySpec, evaluator: Evaluator, store: Store,
                 console: Console) -> None:
        self.spec = spec
        self.evaluator = evaluator
        self.store = store
        self.console = console

    def run(self, baseline: dict[str, Any], first: Evaluation,
            after_trial: int | None) -> dict[str, Any] | None:
        """Measure `baseline` again after trial `after_trial` (None: at the end of the
        search) and compare with `first`; None when the measurement failed."""
        when = "at the end of the search" if after_trial is None else \
            f"after trial {after_trial}"
        self.console.print(f"  re-measuring the baseline {when} (drift check)")
        e = self.evaluator.evaluate(baseline, "drift", after_trial,
                                    n=max(self.spec.repetitions, DRIFT_REPETITIONS))
        if e.failed:
            return None
        alpha = self.spec.evaluation.alpha / planned_checks(self.spec)
        moved, change, (ch, lo, hi) = is_moved(
            e.values, first.values, self.evaluator.direction, alpha, self.spec.seed)
        rec = {"after_trial": after_trial, "value": e.value, "ci": list(e.ci),
               "ci_kind": e.ci_kind, "values": e.values, "change": change, "moved": moved,
               "alpha": alpha}
        if moved:
            rec.update(drift_consequences(first.values, e.values, ch, self.spec))
        self.store.put_result(self.spec.study, "drift", rec)
        if moved:
            when = "at the end of the search" if after_trial is None else \
                f"after trial {after_trial}"
            # The three figures formatted together, as `kvtune show` says them.
            point, span = present.with_interval(ch, lo, hi)
            self.console.print(
                f"  [yellow]drift:[/] {when} the baseline's {self.evaluator.metric} moved by "
                f"{point} (95% CI {span}). Search values "
                f"measured at "
                "different times are not comparable: each trial is compared with the "
                "baseline measurement nearest to it (kvtune show), and only the "
                "confirmation's interleaved rounds decide.")
            self.console.print(
                f"  the noise floor's estimate no longer holds: with the baseline's spread "
                f"across the study (robust CoV {present.share(rec['drift_cov'], 1)}) "
                f"the confirmation ({self.spec.evaluation.confirm_rounds} rounds) shows about "
                f"{present.share(rec['detectable_improvement'])} or more (80% power) — "
                "if the drift "
                "continues during the confirmation; interleaving cancels a slow drift, not "
                "a burst")
        return rec


def drift_consequences(first: list[float], new: list[float], change: float,
                       spec: StudySpec) -> dict[str, Any]:
    """What a detected drift does to the study's promises: the baseline's spread over
    both measurements (robust CoV, at least |change| / 2) and the improvement the
    confirmation can then show (80% power)."""
    ev = spec.evaluation
    pooled = robust_cov([*first, *new])
    c = max(pooled if not math.isnan(pooled) else 0.0, abs(change) / 2)
    return {"drift_cov": c,
            "detectable_improvement": detectable_improvement(c, ev.confirm_rounds, ev.alpha,
                                                             ev.confirm_top, two_sided=True,
                                                             paired=True),
            "comparisons": "each trial against the nearest baseline measurement; search "
                           "values across the drift are not comparable"}
