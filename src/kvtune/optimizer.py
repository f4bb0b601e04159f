"""The optimizer: Optuna's samplers, TPE by default, random and grid as options. The
search space and its suggestions are `kvtune.space.Space`'s; trial 0 is always the
baseline, enqueued before anything is asked."""

from __future__ import annotations

import warnings

import optuna


def make_sampler(kind: str, seed: int, budget_trials: int | None,
                 n_constraints: int) -> optuna.samplers.BaseSampler:
    if kind == "random" or kind == "grid":
        return optuna.samplers.RandomSampler(seed=seed)
    startup = max(4, min(10, (budget_trials or 30) // 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Constraints reach TPE through Trial.set_constraint (the evaluator's violations).
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=startup, multivariate=True, group=True)
