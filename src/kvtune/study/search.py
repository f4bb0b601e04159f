"""The search: ask Optuna for a configuration, check the rules between knobs, evaluate,
tell, keep the incumbent, and re-measure the baseline every `drift_every` trials — until
the trial or time budget is spent."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import optuna
from rich.console import Console

from kvtune.evaluator import Evaluation, Evaluator
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.catalog import check_rules
from kvtune.space import Space
from kvtune.spec import StudySpec
from kvtune.store import config_key
from kvtune.study._ui import fmt, progress
from kvtune.study.record import tell


def search_trials_done(study: optuna.Study) -> int:
    """Finished trials of the search (the baseline not counted)."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state.is_finished() and t.user_attrs.get("kind") != "baseline")


class Search:
    """The study loop over `space`. `incumbent` is the best feasible evaluation so far (the
    baseline's at the start); `drift` is called with the number of the last trial (None at
    the end) when a drift check is due."""

    def __init__(self, spec: StudySpec, space: Space, evaluator: Evaluator, ctx: HostContext,
                 console: Console, drift: Callable[[int | None], object]) -> None:
        self.spec = spec
        self.space = space
        self.evaluator = evaluator
        self.ctx = ctx
        self.console = console
        self.drift = drift

    def budget_spent(self, study: optuna.Study, started: float) -> bool:
        b = self.spec.budget
        if b.trials is not None and search_trials_done(study) >= b.trials:
            return True
        return b.time is not None and time.monotonic() - started >= b.time

    def enqueue_grid(self, study: optuna.Study) -> None:
        """The grid sampler's configurations not measured yet, queued in order."""
        done = {config_key(t.user_attrs.get("config", {})) for t in study.trials}
        for c in self.space.grid():
            if config_key(c) not in done:
                study.enqueue_trial(self.space.fixed_params(c), skip_if_exists=True)

    def trial(self, study: optuna.Study, incumbent: Evaluation | None) -> tuple[int, Evaluation]:
        """Ask, evaluate and tell one trial."""
        trial = study.ask()
        config = self.space.suggest(trial)
        # Rules between knobs are checked before a trial runs, never discovered.
        violation = check_rules(config, self.ctx, relax=self.spec.relax_rules)
        if violation:
            e = Evaluation(config, self.evaluator.metric, failed=violation)
        else:
            e = self.evaluator.evaluate(config, "trial", trial.number, incumbent=incumbent)
        tell(study, trial, e, "trial", self.spec.constraints)
        return trial.number, e

    def run(self, study: optuna.Study, started: float,
            incumbent: Evaluation | None) -> Evaluation | None:
        """Search until the budget is spent; returns the incumbent."""
        if self.spec.sampler == "grid":
            self.enqueue_grid(study)
        every = self.spec.evaluation.drift_every
        since_drift = 0
        with progress(self.console) as prog:
            task = prog.add_task("trials", total=self.spec.budget.trials or None,
                                 completed=search_trials_done(study))
            while not self.budget_spent(study, started):
                number, e = self.trial(study, incumbent)
                prog.advance(task)
                self.print_trial(number, e)
                if e.feasible and incumbent is not None and self.evaluator.better(
                        e.value, incumbent.value):
                    incumbent = e
                since_drift += 1
                if every and since_drift >= every and not self.budget_spent(study, started):
                    self.drift(number)
                    since_drift = 0
        if every:
            self.drift(None)
        return incumbent

    def print_trial(self, number: int, e: Evaluation) -> None:
        if e.failed:
            self.console.print(f"  trial {number}: [red]failed[/] {e.failed}")
            return
        lo, hi = e.ci
        ci = f" [{fmt(lo)}, {fmt(hi)}]" if not math.isnan(lo) else ""
        note = " (stopped early)" if e.stopped_early else ""
        note += "" if e.feasible else " [yellow]infeasible[/]"
        note += f" flags: {', '.join(e.flags)}" if e.flags else ""
        params = ", ".join(f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in e.config.items())
        self.console.print(f"  trial {number}: {self.evaluator.metric} {fmt(e.value)}{ci} "
                           f"n={len(e.reps)}{note}  {params}")
