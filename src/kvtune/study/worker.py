"""`kvtune tune --worker NAME`: one worker of a fleet; several workers (or one per host)
share one study in one storage.

`FleetWorker` is the strategy the study run (`kvtune.study.run.StudyRun`) follows for a
worker; what differs from a plain run (which already records heartbeats and tags its
trials; see `kvtune.fleet.claims` for the mechanisms):
- each worker samples from its own stream with TPE's constant_liar;
- one baseline per host fingerprint, measured by the worker that claims it; the others
  measure search trials meanwhile (the sampler's random start-up trials need no baseline)
  and wait only when the start-up trials are spent;
- the trial budget counts across workers exactly (one claim per budget slot);
- exactly one confirmation per host fingerprint, by the worker that claims it; the others
  end saying who;
- workers on hosts with another fingerprint are refused, unless the study says
  `hosts: heterogeneous` (then each fingerprint has its own baseline and confirmation).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import optuna

from kvtune.documents import Confirmation, NoiseFloor
from kvtune.errors import UserError
from kvtune.fleet.claims import creation_lock, fail_stale, masked, worker_seed
from kvtune.measure.evaluator import Evaluation
from kvtune.optimizer import startup_trials
from kvtune.study.phases import (
    BaselinePhase,
    ConfirmationPhase,
    PhaseContext,
    SearchPhase,
    SearchResult,
    Stopped,
    resolve_constraints,
)
from kvtune.study.record import evaluation_of
from kvtune.study.run import Strategy, StudyRun
from kvtune.study.search import Search

WAIT_POLL = 0.1  # seconds between looks at the storage while waiting for another worker


class BudgetSpent(Exception):
    """Every budget slot is taken (by this worker or others)."""


class FleetSearch(Search):
    """The search loop with a budget slot per trial and a heartbeat while it is measured."""

    worker: FleetWorker
    context: PhaseContext

    def time_spent(self, started: float) -> bool:
        b = self.spec.budget
        return b.time is not None and time.monotonic() - started >= b.time

    def spent(self, study: optuna.Study, started: float) -> Stopped | None:
        b = self.spec.budget
        if self.time_spent(started):
            return "time"
        if b.trials is not None and len(self.worker.run.fleet.slots_taken()) >= b.trials:
            return "trials"
        return None

    def trial(self, study: optuna.Study, incumbent: Evaluation | None) -> Any:
        """Search.trial in a budget slot: the slot is bound to the trial asked (the study's
        ask and tell are the worker's, see StudyRun.wrap), freed when the result of an
        earlier trial is reused (a repeat is not counted)."""
        w, r = self.worker, self.worker.run
        fail_stale(study, r.fleet, r.store.storage)
        w.await_baseline(self.context, study)
        # The worker's incumbent (the baseline may have arrived after the search began).
        incumbent = r.incumbent
        if self.spec.budget.trials is not None:
            w.current_slot = r.fleet.take_slot(self.spec.budget.trials)
            if w.current_slot is None:
                raise BudgetSpent
        slot = w.current_slot
        try:
            out = super().trial(study, incumbent)
        except BaseException:
            if slot is not None and w.slot_unbound(slot):
                r.fleet.free_slot(slot)
            raise
        finally:
            w.current_slot = None
        if slot is not None and isinstance(out, tuple) and len(out) > 2 and out[2] is not None:
            r.fleet.free_slot(slot)
        e = out[1]
        if out[2] is None and e.feasible and r.incumbent is not None and \
                self.evaluator.better(e.value, r.incumbent.value):
            r.incumbent = e
        return out


class FleetWorker(Strategy):
    """One worker of a study shared by several (also correct when it is the only one):
    `StudyRun(loaded, worker=NAME, strategy=FleetWorker)`."""

    exclusive = False

    def __init__(self, run: StudyRun) -> None:
        super().__init__(run)
        self.current_slot: int | None = None
        self.bound_slots: set[int] = set()
        # The worker that runs (or ran) this host's confirmation, once claimed.
        self.confirmed_by: str | None = None

    def seed(self) -> int:
        return worker_seed(self.run.spec.seed, self.run.worker)

    def queue_lock(self) -> contextlib.AbstractContextManager[None]:
        """The storage's lock (PostgreSQL's advisory lock, or a flock beside the SQLite
        file), so that a trial this worker queues is the one its next ask takes: the
        baseline at the defaults, not a trial another worker's search asked for meanwhile."""
        return creation_lock(self.run.store.engine.url.render_as_string(hide_password=False))

    def admit(self) -> None:
        """Announce this worker (its `fleet:NAME` claim) and refuse it while a plain
        `kvtune tune` holds the study."""
        r = self.run
        key = f"fleet:{r.worker}"
        r.fleet.claim(key)
        got = r.fleet.holder("tune")
        if got is not None and r.fleet.active(got.worker):
            r.fleet.release(key)
            raise UserError(
                f"study {r.spec.study!r} in {r.store.url} is being tuned right now by a "
                f"plain `kvtune tune` ({self.describe([got.worker])}), so this worker is "
                "refused: a fleet worker joins only a study whose every process is a worker "
                "(--worker NAME); wait for the plain run to end")

    def leave(self) -> None:
        self.run.fleet.release(f"fleet:{self.run.worker}")

    def announce(self) -> None:
        r = self.run
        r.console.print(f"worker [bold]{r.worker}[/] on study {r.spec.study!r} in "
                        f"{masked(r.store.url)}")

    def on_ask(self, trial: optuna.Trial) -> None:
        if self.current_slot is not None:
            self.run.fleet.slot_trial(self.current_slot, trial.number)
            self.bound_slots.add(self.current_slot)

    def slot_unbound(self, slot: int) -> bool:
        return slot not in self.bound_slots

    # -- the phases ------------------------------------------------------------------------

    def baseline(self, context: PhaseContext, study: optuna.Study) -> Evaluation | None:
        return self.obtain_baseline(context, study, early=True)

    def search(self, context: PhaseContext, study: optuna.Study, started: float,
               drift: Callable[[int | None], object]) -> SearchResult:
        """The search loop with a budget slot per trial (`FleetSearch`), again while other
        workers' trials run (a dead worker's retry is measured here), until the budget is
        spent; then this host's baseline, waited for when it is not known yet."""
        r = self.run
        phase = SearchPhase(context, drift, FleetSearch)
        search = phase.loop
        assert isinstance(search, FleetSearch)
        search.worker = self
        search.context = context
        while True:
            try:
                search.run(study, started, r.incumbent)
            except BudgetSpent:
                search.stopped = "trials"  # every budget slot is taken
            if search.time_spent(started):
                break
            # Every slot is taken: wait for the trials still measured; a dead worker's
            # trial is failed meanwhile, frees its slot, and its retry is measured here.
            self.wait_for_running(study)
            if not search.budget_spent(study, started):
                continue
            break
        self.await_baseline(context, study, now=True)
        return phase.result(study, r.incumbent)

    def confirm(self, context: PhaseContext, study: optuna.Study) -> Confirmation | None:
        """Exactly one worker confirms (the one that claims it through the storage); the
        others end saying who confirms."""
        r = self.run
        key = f"confirm:{r.fp_key}"
        got = r.fleet.claim_or_take_over(key)
        self.confirmed_by = got.worker if not got.won else r.worker
        if not got.won:
            done = r.store.document(r.spec.study, Confirmation, r.fp_key)
            r.console.print(f"the confirmation is run by worker {got.worker}"
                            + (" (done: `kvtune show` prints it)" if done is not None else
                               "; this worker ends (`kvtune show` prints it when done)"))
            return None
        self.wait_for_running(study)
        r.resume(context, study)  # the incumbent and candidates as every worker left them
        return ConfirmationPhase(context).run(study, confirmed_by=r.worker)

    def confirmed(self, result: Confirmation | None) -> bool:
        return result is not None and result.confirmed_by == self.run.worker

    # -- waiting for the others ------------------------------------------------------------

    def may_search_without_baseline(self, study: optuna.Study) -> bool:
        """While another worker measures the baseline, this one measures search trials
        that need none: the sampler's random start-up trials, in a study whose constraints
        are not relative to the baseline (its trials are then measured without early
        stopping or intensification, which compare with the incumbent)."""
        spec = self.run.spec
        if any(c.relative for c in spec.parsed_constraints) or spec.sampler == "grid":
            return False
        asked = sum(1 for t in study.get_trials(deepcopy=False)
                    if t.user_attrs.get("kind") != "baseline" and t.number != 0
                    and (t.state.is_finished() or t.state == optuna.trial.TrialState.RUNNING))
        return asked < startup_trials(spec.budget.trials)

    def await_baseline(self, context: PhaseContext, study: optuna.Study,
                       now: bool = False) -> None:
        """Before a search trial (and, with `now`, before the confirmation): when the
        baseline is not known yet, take it if it is done, else wait for it (or measure it,
        when its worker died) unless this trial may be measured without it."""
        r = self.run
        if r.baseline_eval is not None:
            return
        e = self._finished_baseline(context, study)
        if e is None and (now or not self.may_search_without_baseline(study)):
            e = self.obtain_baseline(context, study)
        if e is not None:  # its noise and relative constraints already set
            r.baseline_eval = e
            if r.incumbent is None or not context.evaluator.better(r.incumbent.value,
                                                                   e.value):
                r.incumbent = e

    def obtain_baseline(self, context: PhaseContext, study: optuna.Study,
                        early: bool = False) -> Evaluation | None:
        """This fingerprint's baseline: measured by the worker that claims it, waited for by
        the others (taken over when its worker dies). With `early`, a worker that did not
        claim it returns None at once when it may search meanwhile
        (`may_search_without_baseline`)."""
        r = self.run
        key = f"baseline:{r.fp_key}"
        while True:
            got = r.fleet.claim_or_take_over(key)
            if got.won:
                return r.baseline_measured(BaselinePhase(context).run(study))
            if early and self.may_search_without_baseline(study):
                r.console.print(f"  the baseline is measured by worker {got.worker}; "
                                "start-up trials meanwhile")
                return None
            r.console.print(f"  the baseline is measured by worker {got.worker}; waiting")
            while True:
                e = self._finished_baseline(context, study)
                if e is not None:
                    return e
                holder = r.fleet.holder(key)
                if holder is None or r.fleet.dead(holder.worker):
                    break  # its worker died: claim it again
                time.sleep(WAIT_POLL)

    @staticmethod
    def _finished_baseline(context: PhaseContext, study: optuna.Study) -> Evaluation | None:
        """This fingerprint's baseline as another worker measured it, and what it sets in
        the evaluator, as for the worker that measured it: the noise floor's noise and the
        constraints relative to the baseline (unresolved, they were never judged)."""
        c = context
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.user_attrs.get("kind") == "baseline" and \
                    t.user_attrs.get("fingerprint") == c.fingerprint:
                nf = c.store.document(c.name, NoiseFloor, c.fingerprint)
                if nf is not None:
                    c.evaluator.noise_cov = nf.cov.get(c.metric)
                e = evaluation_of(t, c.metric)
                resolve_constraints(c, e)
                return e
        return None

    def wait_for_running(self, study: optuna.Study) -> None:
        """Until no search trial runs (stale ones are failed and retried by whoever is left;
        a retried trial waiting with no worker to run it is not waited for)."""
        while True:
            fail_stale(study, self.run.fleet, self.run.store.storage)
            running = [t for t in study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))]
            if not running:
                return
            time.sleep(WAIT_POLL)
