"""The search: ask Optuna for a candidate (`kvtune.optimizer.ask`: rule-breaking proposals
are repaired or resampled and told infeasible, never measured), evaluate it — or reuse the
result of a configuration measured before — tell, keep the incumbent, and re-measure the
baseline every `drift_every` trials, until the trial or time budget is spent. Only measured
search trials count against the trial budget."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal

import optuna
from rich.console import Console

from kvtune import optimizer
from kvtune.knobs import rules
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.catalog import lookup
from kvtune.measure.evaluator import Evaluation, Evaluator
from kvtune.present import fmt
from kvtune.space import Config, Space
from kvtune.spec import StudySpec
from kvtune.store import config_key
from kvtune.study.progress import progress
from kvtune.study.record import evaluation_of, tell

MAX_REPEATS = 30  # repeated configurations in a row before the search stops (converged)

Stopped = Literal["trials", "time", "grid", "converged"]


def search_trials_done(study: optuna.Study) -> int:
    """Measured trials of the search: not the baseline, not rule-breaking proposals, not
    repeats of a configuration measured before."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if t.state.is_finished() and t.user_attrs.get("kind") == "trial")


def search_counts(study: optuna.Study) -> dict[str, int]:
    """How many proposals the rules turned away (repaired or resampled, never measured),
    how many of them were repaired, and how many repeats reused an earlier result."""
    trials = study.get_trials(deepcopy=False)
    return {"rejected": sum(1 for t in trials if t.user_attrs.get("kind") == optimizer.REJECTED),
            "repaired": sum(1 for t in trials if "repaired_from" in t.user_attrs),
            "repeats": sum(1 for t in trials if t.user_attrs.get("kind") == optimizer.REPEAT)}


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
        # Why the last `run` stopped: its trial or time budget spent, every configuration
        # of a grid measured, or the sampler repeating itself (converged).
        self.stopped: Stopped = "trials"

    def spent(self, study: optuna.Study, started: float) -> Stopped | None:
        """The budget that is spent ("trials" or "time"), or None."""
        b = self.spec.budget
        if b.trials is not None and search_trials_done(study) >= b.trials:
            return "trials"
        if b.time is not None and time.monotonic() - started >= b.time:
            return "time"
        return None

    def budget_spent(self, study: optuna.Study, started: float) -> bool:
        return self.spent(study, started) is not None

    def grid_done(self, study: optuna.Study) -> bool:
        """Whether every configuration of the grid sampler's grid has been measured (or
        failed): nothing is left for the search to learn."""
        if self.spec.sampler != "grid":
            return False
        done = {config_key(t.user_attrs.get("config", {}))
                for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
        return all(config_key(c) in done for c in self.space.grid())

    def enqueue_grid(self, study: optuna.Study) -> None:
        """The grid sampler's configurations not measured yet, queued in order."""
        done = {config_key(t.user_attrs.get("config", {}))
                for t in study.get_trials(deepcopy=False)}
        for c in self.space.grid():
            if config_key(c) not in done:
                study.enqueue_trial(self.space.fixed_params(c), skip_if_exists=True)

    def _values(self, config: Config) -> rules.Values:
        return rules.Values(config, self.ctx, lookup, self.spec.target.kind)

    def broken(self, config: Config) -> list[tuple[str, str]]:
        """The rules `config` breaks (those of the study's target and host only)."""
        return [(r.name, r.message) for r in rules.broken(self._values(config),
                                                          self.spec.relax_rules)]

    def repairs(self, config: Config) -> list[dict[str, object]]:
        values = self._values(config)
        return rules.repairs(values, rules.broken(values, self.spec.relax_rules))

    def trial(self, study: optuna.Study, incumbent: Evaluation | None
              ) -> tuple[int, Evaluation, int | None]:
        """Ask, evaluate (or reuse) and tell one trial: (number, evaluation, the trial whose
        result was reused or None)."""
        # Rules between knobs are checked before a trial runs, never discovered.
        asked = optimizer.ask(study, self.space, self.broken, self.repairs)
        trial, config = asked.trial, asked.config
        for r in asked.rejected:
            self.console.print(f"  proposal {r['trial']} breaks {', '.join(r['rules'])}: "
                               "not measured, the sampler is told; "
                               + ("repaired" if asked.repaired_from == r["trial"]
                                  else "resampled"))
        if asked.repaired_from is not None:
            trial.set_user_attr("repaired_from", asked.repaired_from)
        if asked.repeat_of is not None:
            src = asked.repeat_of
            e = evaluation_of(src, self.evaluator.metric)
            if src.state == optuna.trial.TrialState.FAIL:
                e.failed = f"same configuration as trial {src.number}, which failed: " \
                           f"{src.user_attrs.get('failed')}"
            trial.set_user_attr("repeat_of", src.number)
            tell(study, trial, e, optimizer.REPEAT, self.spec.constraints)
            return trial.number, e, src.number
        e = self.evaluator.evaluate(config, "trial", trial.number, incumbent=incumbent)
        tell(study, trial, e, "trial", self.spec.constraints)
        return trial.number, e, None

    def run(self, study: optuna.Study, started: float,
            incumbent: Evaluation | None) -> Evaluation | None:
        """Search until the budget is spent; returns the incumbent."""
        if self.spec.sampler == "grid":
            self.enqueue_grid(study)
        every = self.spec.evaluation.drift_every
        since_drift = 0
        repeats = 0
        with progress(self.console) as prog:
            task = prog.add_task("trials", total=self.spec.budget.trials or None,
                                 completed=search_trials_done(study))
            while (spent := self.spent(study, started)) is None:
                if self.grid_done(study):
                    self.console.print("  every configuration of the grid is measured: the "
                                       "search stops here")
                    spent = "grid"
                    break
                number, e, reused = self.trial(study, incumbent)
                if reused is not None:
                    repeats += 1
                    self.console.print(f"  trial {number}: same configuration as trial "
                                       f"{reused}; its result is reused (not measured, "
                                       "not counted)")
                    if repeats >= MAX_REPEATS:
                        self.console.print(
                            f"  the sampler proposed {repeats} measured configurations in a "
                            "row: the search has converged (or the space is exhausted); "
                            "it stops here")
                        spent = "converged"
                        break
                    continue
                repeats = 0
                prog.advance(task)
                self.print_trial(number, e)
                if e.feasible and incumbent is not None and self.evaluator.better(
                        e.value, incumbent.value):
                    incumbent = e
                since_drift += 1
                if every and since_drift >= every and not self.budget_spent(study, started):
                    self.drift(number)
                    since_drift = 0
        assert spent is not None
        self.stopped = spent
        if every:
            self.drift(None)
        counts = search_counts(study)
        self.console.print(
            f"  search: {search_trials_done(study)} measured trials; "
            f"{counts['rejected']} rule-breaking proposals never measured "
            f"({counts['repaired']} repaired, the rest resampled); "
            f"{counts['repeats']} repeated configurations reused")
        return incumbent

    def print_trial(self, number: int, e: Evaluation) -> None:
        if e.failed:
            from kvtune.safety.text import for_markup

            self.console.print(f"  trial {number}: [red]failed[/] {for_markup(e.failed)}")
            return
        lo, hi = e.ci
        ci = f" ({e.ci_kind} {fmt(lo)} … {fmt(hi)})" if not math.isnan(lo) else ""
        note = " (stopped early)" if e.stopped_early else ""
        note += "" if e.feasible else " [yellow]infeasible[/]"
        note += f" flags: {', '.join(e.flags)}" if e.flags else ""
        if e.skipped:
            note += f" ({len(e.skipped)} spoiled by the host, not counted)"
        params = ", ".join(f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in e.config.items())
        self.console.print(f"  trial {number}: {self.evaluator.metric} {fmt(e.value)}{ci} "
                           f"n={e.measured}{note}  {params}")
