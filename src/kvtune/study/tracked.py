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
- `ask_at(params)`: a trial at `params`, through Optuna's queue (`enqueue_trial`, then
  `ask`) under the study's queue lock (`queue_lock`; a fleet's workers share one, its
  storage's lock), which every `ask` takes too: Optuna's queue of waiting trials is the
  study's, and another worker's search asking between the enqueue and the ask took the
  queued trial (the baseline then got a sampled configuration).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.trial import TrialState


class TrackedStudy(optuna.Study):
    def __init__(self, study: optuna.Study, storage: optuna.storages.BaseStorage,
                 on_ask: Callable[[optuna.Trial], None],
                 on_lost: Callable[[int], None],
                 queue_lock: Callable[[], contextlib.AbstractContextManager[None]]
                 = contextlib.nullcontext) -> None:
        super().__init__(study_name=study.study_name, storage=storage,
                         sampler=study.sampler, pruner=study.pruner)
        self.heartbeats = storage
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.on_ask = on_ask
        self.on_lost = on_lost
        self.live: dict[int, int] = {}  # trial number -> trial id, measured here
        self.queue_lock = queue_lock
        self._queue_held = 0  # this process holds the queue lock (asks within ask_at)

    def trial_id(self, number: int) -> int:
        return self.heartbeats.get_trial_id_from_study_id_trial_number(self.study_id, number)

    @contextlib.contextmanager
    def _queue(self) -> Any:
        if self._queue_held:
            yield
            return
        with self.queue_lock():
            self._queue_held += 1
            try:
                yield
            finally:
                self._queue_held -= 1

    def ask_at(self, params: dict[str, Any]) -> optuna.Trial:
        """A trial at `params` (the queue's, taken by this process's ask, no other's)."""
        with self._queue():
            self.enqueue_trial(params, skip_if_exists=False)
            return self.ask()

    def ask(self, fixed_distributions: dict[str, Any] | None = None) -> optuna.Trial:
        with self._queue():
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

