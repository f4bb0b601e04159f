"""The optimizer: Optuna's samplers (multivariate TPE by default; random, grid, CMA-ES and
GP as options), and `ask`, which turns the sampler's proposal into a candidate worth a
measurement.

`ask` never hands the search a configuration that breaks a rule between knobs: such a
proposal is repaired (a rule's repair, when the repaired configuration lies in the study's
domains and breaks no rule) or resampled. Either way the proposal is told to Optuna as an
infeasible PRUNED trial — constraint ``rules`` > 0, no objective value — so that the
sampler learns where the rules forbid (constrained TPE puts infeasible trials with the
"bad" group and ranks them by their violation) while the objective, the analysis and the
trial budget never see it. A proposal that repeats a configuration already measured is
reported as a repeat (`Asked.repeat_of`) so that the search reuses its result instead of
measuring it as a new trial. The search space and its suggestions are
`kvtune.space.Space`'s; trial 0 is always the baseline, enqueued before anything is asked.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import optuna

from kvtune.errors import UserError
from kvtune.space import Config, Space
from kvtune.store import config_key

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp", "tpe-independent")
REJECTED = "rejected"  # the `kind` of a trial that stands for a rule-breaking proposal
REPEAT = "repeat"  # the `kind` of a trial that reuses an earlier trial's result
RULES_CONSTRAINT = "rules"  # the constraint name that marks rule-breaking proposals
MAX_REJECTIONS = 200  # rule-breaking proposals in a row before the search gives up


def startup_trials(budget_trials: int | None) -> int:
    """How many trials the samplers draw at random before they model the results."""
    return max(4, min(10, (budget_trials or 30) // 3))


def make_sampler(kind: str, seed: int, budget_trials: int | None,
                 n_constraints: int, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
    """The sampler of a study. TPE (the default) is multivariate with grouped conditional
    parameters; constraints reach it through `Trial.set_constraint`. A fleet worker passes
    its own `seed` (`kvtune.fleet.worker_seed`) and `constant_liar` (TPE counts the trials
    other workers are measuring as bad guesses, so concurrent workers do not propose the
    same point)."""
    startup = startup_trials(budget_trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if kind in ("random", "grid"):
            return optuna.samplers.RandomSampler(seed=seed)
        if kind == "tpe-independent":
            # Explicitly: since Optuna 5 TPESampler's `multivariate` defaults to True for a
            # single objective, so leaving it out gave the multivariate TPE.
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup,
                                              multivariate=False, constant_liar=constant_liar)
        if kind == "cmaes":
            # Numeric knobs by CMA-ES (pip `cmaes`); categorical ones (and special-value
            # modes) by an independent TPE.
            return optuna.samplers.CmaEsSampler(
                seed=seed, n_startup_trials=startup, warn_independent_sampling=False,
                independent_sampler=optuna.samplers.TPESampler(seed=seed, multivariate=False))
        if kind == "nsga2":
            # For Pareto studies (several objectives); constraints reach it through
            # `Trial.set_constraint`, as TPE's do.
            return optuna.samplers.NSGAIISampler(
                seed=seed, population_size=max(4, min(20, (budget_trials or 40) // 4)))
        if kind == "gp":
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=startup, multivariate=True, group=True,
            constant_liar=constant_liar)


# -- asking for a candidate ------------------------------------------------------------------

# The rules a configuration breaks: (rule name, message) pairs, empty when none.
RuleCheck = Callable[[Config], Sequence[tuple[str, str]]]
# The repairs the broken rules offer for a configuration: knob values to change.
RuleRepair = Callable[[Config], Sequence[dict[str, Any]]]


@dataclass
class Asked:
    """A candidate: the Optuna trial to tell, its configuration, what happened before it
    (rule-breaking proposals told infeasible, a repair) and, when it repeats a configuration
    already measured, that trial."""

    trial: optuna.Trial
    config: Config
    rejected: list[dict[str, Any]] = field(default_factory=list)
    repaired_from: int | None = None
    repeat_of: optuna.trial.FrozenTrial | None = None


def reject(study: optuna.Study, trial: optuna.Trial, config: Config,
           broken: Sequence[tuple[str, str]]) -> None:
    """Tell `trial` as a rule-breaking proposal: PRUNED, infeasible, no value."""
    trial.set_user_attr("kind", REJECTED)
    trial.set_user_attr("config", config)
    trial.set_user_attr("rules", [name for name, _ in broken])
    trial.set_user_attr("failed", "; ".join(msg for _, msg in broken))
    trial.set_constraint(RULES_CONSTRAINT, float(len(broken)))
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)


def repaired(config: Config, space: Space, check: RuleCheck,
             repair: RuleRepair) -> Config | None:
    """The first repair of `config` that stays in the study's domains and breaks no rule."""
    for change in repair(config):
        if not change or any(n not in config for n in change):
            continue
        fixed = {**config, **change}
        if all(space.knob(n).domain.contains(v) for n, v in change.items()) \
                and not check(fixed):
            return fixed
    return None


def measured_trials(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    """The first finished trial of each configuration measured so far (the baseline and
    search trials, complete or failed), by configuration key."""
    out: dict[str, optuna.trial.FrozenTrial] = {}
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("kind") not in ("baseline", "trial") or not t.state.is_finished():
            continue
        if t.state == optuna.trial.TrialState.FAIL and "failed" not in t.user_attrs:
            continue  # interrupted, queued again
        out.setdefault(config_key(t.user_attrs.get("config", {})), t)
    return out


@runtime_checkable
class QueueLocked(Protocol):
    """A study whose queued trial is taken by the ask that follows its enqueue, no other
    worker's (`kvtune.study.tracked.TrackedStudy`: under the study's queue lock)."""

    def ask_at(self, params: dict[str, Any]) -> optuna.Trial: ...


def ask_at(study: optuna.Study, params: dict[str, Any]) -> optuna.Trial:
    """A trial at `params`: through the study's queue lock when it keeps one (a fleet's
    workers share the study's queue of waiting trials), else Optuna's enqueue and ask."""
    if isinstance(study, QueueLocked):
        return study.ask_at(params)
    study.enqueue_trial(params, skip_if_exists=False)
    return study.ask()


def ask(study: optuna.Study, space: Space, check: RuleCheck,
        repair: RuleRepair | None = None, max_rejections: int = MAX_REJECTIONS) -> Asked:
    """The next candidate worth a measurement (or a repeat to reuse). Rule-breaking
    proposals are told infeasible and repaired or resampled; after `max_rejections` in a row
    the search cannot go on (UserError)."""
    rejected: list[dict[str, Any]] = []
    repaired_from: int | None = None
    pending: dict[str, Any] | None = None  # the repaired configuration, asked for next
    while True:
        trial = study.ask() if pending is None else ask_at(study, pending)
        pending = None
        config = space.suggest(trial)
        broken = check(config)
        if not broken:
            repeat = measured_trials(study).get(config_key(config))
            return Asked(trial, config, rejected, repaired_from, repeat)
        reject(study, trial, config, broken)
        rejected.append({"trial": trial.number, "config": config,
                         "rules": [name for name, _ in broken]})
        fixed = repaired(config, space, check, repair) if repair else None
        if fixed is not None:
            pending = space.fixed_params(fixed)  # this worker's next ask, no other's
            repaired_from = trial.number
        if len(rejected) >= max_rejections:
            names = sorted({n for r in rejected for n in r["rules"]})
            raise UserError(
                f"the sampler proposed {len(rejected)} configurations in a row that break "
                f"rules ({', '.join(names)}): the rules leave almost nothing of the knob "
                "space; narrow the ranges (or relax_rules) so that valid configurations "
                "are common")
