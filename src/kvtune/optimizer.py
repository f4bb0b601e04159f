"""The optimizer: Optuna ask/tell with TPE by default, random and grid as options.
Trial 0 is always the defaults (the baseline), enqueued before anything is asked."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import optuna

from kvtune.knobs.knob import Knob
from kvtune.runner import Config


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


def suggest(trial: optuna.Trial, knobs: list[Knob]) -> Config:
    return {k.name: k.domain.suggest(trial, k.name) for k in knobs}


def fixed_params(knobs: list[Knob], config: Config) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for k in knobs:
        params.update(k.domain.fixed_params(k.name, config[k.name]))
    return params


def grid_configs(knobs: list[Knob], base: Config, points: int = 4) -> list[Config]:
    axes = [[(k.name, v) for v in k.domain.grid(points)] for k in knobs]
    out = []
    for combo in itertools.product(*axes):
        c = dict(base)
        c.update(dict(combo))
        out.append(c)
    return out
