"""Drift checks: the baseline measured again during and after the search, compared
two-sided with its first measurement. "Moved" needs both the bootstrap CI of the ratio to
exclude 0 and the Mann–Whitney p-value to pass a Bonferroni level over the study's planned
checks, so a drift-free host rarely raises an alarm over a whole study."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from kvtune.evaluator import Evaluation, Evaluator
from kvtune.spec import StudySpec
from kvtune.stats import compare
from kvtune.store import Store

DRIFT_REPETITIONS = 5  # at least; the study's repetitions when more


def planned_checks(spec: StudySpec) -> int:
    """How many drift checks a study plans (for the Bonferroni level)."""
    return 1 + (spec.budget.trials or 30) // max(spec.evaluation.drift_every, 1)


def is_moved(new: list[float], first: list[float], direction: str, alpha: float,
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
        self.console.print("  re-measuring the baseline (drift check)")
        e = self.evaluator.evaluate(baseline, "drift", after_trial,
                                    n=max(self.spec.repetitions, DRIFT_REPETITIONS))
        if e.failed:
            return None
        alpha = self.spec.evaluation.alpha / planned_checks(self.spec)
        moved, change, (ch, lo, hi) = is_moved(
            e.values, first.values, self.evaluator.direction, alpha, self.spec.seed)
        rec = {"after_trial": after_trial, "value": e.value, "ci": list(e.ci),
               "values": e.values, "change": change, "moved": moved, "alpha": alpha}
        self.store.put_result(self.spec.study, "drift", rec)
        if moved:
            self.console.print(f"  [yellow]drift:[/] the baseline's {self.evaluator.metric} "
                               f"moved by {ch:+.1%} (95% CI {lo:+.1%} … {hi:+.1%}); trials "
                               "are compared with the nearest baseline measurement")
        return rec
