"""The study a kvtune process asks and tells through: Optuna's own `Study`, subclassed
through its public constructor (`optuna.Study(study_name, storage, sampler, pruner)`), as
Optuna's integrations extend it, instead of methods replaced on an instance.

- `ask` tags each trial (worker, host, host fingerprint: `on_ask`) and gives it a first
  heartbeat at once: a trial without one is never found stale (Optuna skips it), so a
  process killed right after asking would hold it RUNNING for ever. Its storage id comes
  from the storage's public lookup (`get_trial_id_from_study_id_trial_number`).
- `tell` uses Optuna's `skip_if_finished`: a trial another worker failed meanwhile as stale
  (its heartbeat stalled) is not told again; `on_lost` says so, and the tell returns the
  trial as it was finished.
  No error is classified by its message text.
- `live` holds the ids of the trials this process is measuring, for its heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState


class TrackedStudy(optuna.Study):
    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage,
                 on_ask: Callable[[optuna.Trial], None],
                 on_lost: Callable[[int], None]) -> None:
        super().__init__(study_name=study.study_name, storage=storage,
                         sampler=study.sampler, pruner=study.pruner)
        self.heartbeats = storage
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.on_ask = on_ask
        self.on_lost = on_lost
        self.live: dict[int, int] = {}  # trial number -> trial id, measured here

    def trial_id(self, number: int) -> int:
        return self.heartbeats.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def ask(self, fixed_distributions: dict[str, Any] | None = None) -> optuna.Trial:
        trial = super().ask(fixed_distributions)
        trial_id = self.trial_id(trial.number)
        beat = getattr(self.heartbeats, "record_heartbeat", None)  # RDBStorage's, public
        if beat is not None:
            beat(trial_id)
        self.live[trial.number] = trial_id
        self.on_ask(trial)
        return trial

    def tell(self, trial: optuna.Trial | int, values: float | Sequence[float] | None = None,
             state: TrialState | None = None,
             skip_if_finished: bool = False) -> optuna.trial.FrozenTrial:
        number = trial if isinstance(trial, int) else trial.number
        wanted = state if state is not None else TrialState.COMPLETE
        try:
            frozen = super().tell(trial, values, state, skip_if_finished=True)
        finally:
            self.live.pop(number, None)
        if frozen.state != wanted and not skip_if_finished:
            # Already finished when told: failed meanwhile as stale (or told elsewhere).
            self.on_lost(number)
        return frozen
