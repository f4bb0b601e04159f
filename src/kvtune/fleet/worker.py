"""`kvtune tune --worker NAME`: one worker of a fleet; several workers (or one per host)
share one study in one storage.

What differs from a plain `StudyRun` (which already records heartbeats and tags its trials;
see `kvtune.fleet` for the mechanisms):
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
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from kvtune.errors import UserError
from kvtune.fleet.claims import fail_stale, masked, worker_seed
from kvtune.host.context import on_host
from kvtune.measure.evaluator import Evaluation, Policy
from kvtune.optimizer import startup_trials
from kvtune.space import Space
from kvtune.study.loader import Loaded
from kvtune.study.record import evaluation_of
from kvtune.study.run import StudyRun
from kvtune.study.search import Search

WAIT_POLL = 0.1  # seconds between looks at the storage while waiting for another worker


class BudgetSpent(Exception):
    """Every budget slot is taken (by this worker or others)."""


class FleetSearch(Search):
    """The search loop with a budget slot per trial and a heartbeat while it is measured."""

    run_ref: FleetRun

    def time_spent(self, started: float) -> bool:
        b = self.spec.budget
        return b.time is not None and time.monotonic() - started >= b.time

    def budget_spent(self, study: optuna.Study, started: float) -> bool:
        b = self.spec.budget
        if self.time_spent(started):
            return True
        return b.trials is not None and len(self.run_ref.fleet.slots_taken()) >= b.trials

    def trial(self, study: optuna.Study, incumbent: Evaluation | None) -> Any:
        """Search.trial in a budget slot: the slot is bound to the trial asked (the study's
        ask and tell are the worker's, see StudyRun.wrap), freed when the result of an
        earlier trial is reused (a repeat is not counted)."""
        r = self.run_ref
        fail_stale(study, r.fleet)
        r.await_baseline(study, self.space)
        # The worker's incumbent (the baseline may have arrived after the search began).
        incumbent = r.incumbent
        if self.spec.budget.trials is not None:
            r.current_slot = r.fleet.take_slot(self.spec.budget.trials)
            if r.current_slot is None:
                raise BudgetSpent
        slot = r.current_slot
        try:
            out = super().trial(study, incumbent)
        except BaseException:
            if slot is not None and r.slot_unbound(slot):
                r.fleet.free_slot(slot)
            raise
        finally:
            r.current_slot = None
        if slot is not None and isinstance(out, tuple) and len(out) > 2 and out[2] is not None:
            r.fleet.free_slot(slot)
        e = out[1]
        if out[2] is None and e.feasible and r.incumbent is not None and \
                self.evaluator.better(e.value, r.incumbent.value):
            r.incumbent = e
        return out


class FleetRun(StudyRun):
    """One worker of a study shared by several (also correct when it is the only one)."""

    exclusive = False

    def __init__(self, loaded: Loaded, console: Console | None = None,
                 base_dir: Path | None = None, policy: type[Policy] = Policy,
                 worker: str | None = None) -> None:
        super().__init__(loaded, console, base_dir, policy, worker)
        self.current_slot: int | None = None
        self.bound_slots: set[int] = set()

    def stream_seed(self) -> int:
        return worker_seed(self.spec.seed, self.worker)

    def admit(self) -> None:
        """Announce this worker (its `fleet:NAME` claim) and refuse it while a plain
        `kvtune tune` holds the study."""
        key = f"fleet:{self.worker}"
        self.fleet.claim(key)
        got = self.fleet.holder("tune")
        if got is not None and self.fleet.active(got.worker):
            self.fleet.release(key)
            raise UserError(
                f"study {self.spec.study!r} in {self.store.url} is being tuned right now by a "
                f"plain `kvtune tune` ({self.describe([got.worker])}), so this worker is "
                "refused: a fleet worker joins only a study whose every process is a worker "
                "(--worker NAME); wait for the plain run to end")

    def leave(self) -> None:
        self.fleet.release(f"fleet:{self.worker}")

    def on_ask(self, trial: optuna.Trial) -> None:
        if self.current_slot is not None:
            self.fleet.slot_trial(self.current_slot, trial.number)
            self.bound_slots.add(self.current_slot)

    def slot_unbound(self, slot: int) -> bool:
        return slot not in self.bound_slots

    # -- the study -------------------------------------------------------------------------

    def _run(self, space: Space, confirm: bool, ablation: bool) -> dict[str, Any]:
        self.study = study = self._open_study(space)
        self._resume(study)
        started = time.monotonic()
        self.console.print(f"worker [bold]{self.worker}[/] on study {self.spec.study!r} in "
                           f"{masked(self.store.url)}")
        with on_host(self.session, self.spec.study):
            if self.baseline_eval is None:
                self.baseline_eval = self.obtain_baseline(study, space, early=True)
                if self.incumbent is None:
                    self.incumbent = self.baseline_eval
            search = FleetSearch(self.spec, space, self.evaluator, self.session.ctx,
                                 self.console, self.drift_check)
            search.run_ref = self
            while True:
                with contextlib.suppress(BudgetSpent):
                    search.run(study, started, self.incumbent)
                if search.time_spent(started):
                    break
                # Every slot is taken: wait for the trials still measured; a dead worker's
                # trial is failed meanwhile, frees its slot, and its retry is measured here.
                self.wait_for_running(study)
                if not search.budget_spent(study, started):
                    continue
                break
            self.await_baseline(study, space, now=True)
            if not confirm or self.spec.evaluation.confirm_rounds <= 0:
                return {}
            result = self.confirm_once(study)
            if ablation and self.spec.evaluation.ablation and \
                    result.get("confirmed_by") == self.worker:
                from kvtune.study.ablation import after_confirmation

                after_confirmation(self, result)
            return result

    def may_search_without_baseline(self, study: optuna.Study) -> bool:
        """While another worker measures the baseline, this one measures search trials
        that need none: the sampler's random start-up trials, in a study whose constraints
        are not relative to the baseline (its trials are then measured without early
        stopping or intensification, which compare with the incumbent)."""
        if any(c.relative for c in self.spec.parsed_constraints) or self.spec.sampler == "grid":
            return False
        asked = sum(1 for t in study.get_trials(deepcopy=False)
                    if t.user_attrs.get("kind") != "baseline" and t.number != 0
                    and (t.state.is_finished() or t.state == optuna.trial.TrialState.RUNNING))
        return asked < startup_trials(self.spec.budget.trials)

    def await_baseline(self, study: optuna.Study, space: Space, now: bool = False) -> None:
        """Before a search trial (and, with `now`, before the confirmation): when the
        baseline is not known yet, take it if it is done, else wait for it (or measure it,
        when its worker died) unless this trial may be measured without it."""
        if self.baseline_eval is not None:
            return
        e = self._finished_baseline(study)
        if e is None and (now or not self.may_search_without_baseline(study)):
            e = self.obtain_baseline(study, space)
        if e is not None:
            self.baseline_eval = e
            self.resolve_constraints(e)
            if self.incumbent is None or not self.evaluator.better(self.incumbent.value,
                                                                   e.value):
                self.incumbent = e

    def obtain_baseline(self, study: optuna.Study, space: Space,
                        early: bool = False) -> Evaluation | None:
        """This fingerprint's baseline: measured by the worker that claims it, waited for by
        the others (taken over when its worker dies). With `early`, a worker that did not
        claim it returns None at once when it may search meanwhile
        (`may_search_without_baseline`)."""
        key = f"baseline:{self.fp_key}"
        while True:
            got = self.fleet.claim_or_take_over(key)
            if got.won:
                return self.measure_baseline(study, space)
            if early and self.may_search_without_baseline(study):
                self.console.print(f"  the baseline is measured by worker {got.worker}; "
                                   "start-up trials meanwhile")
                return None
            self.console.print(f"  the baseline is measured by worker {got.worker}; waiting")
            while True:
                e = self._finished_baseline(study)
                if e is not None:
                    return e
                holder = self.fleet.holder(key)
                if holder is None or self.fleet.dead(holder.worker):
                    break  # its worker died: claim it again
                time.sleep(WAIT_POLL)

    def _finished_baseline(self, study: optuna.Study) -> Evaluation | None:
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.user_attrs.get("kind") == "baseline" and \
                    t.user_attrs.get("fingerprint") == self.fp_key:
                nf = self.store.last_result(self.spec.study, "noise_floor", self.fp_key)
                if nf:
                    self.evaluator.noise_cov = nf.get("cov", {}).get(self.metric)
                return evaluation_of(t, self.metric)
        return None

    def wait_for_running(self, study: optuna.Study) -> None:
        """Until no search trial runs (stale ones are failed and retried by whoever is left;
        a retried trial waiting with no worker to run it is not waited for)."""
        while True:
            fail_stale(study, self.fleet)
            running = [t for t in study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))]
            if not running:
                return
            time.sleep(WAIT_POLL)

    def confirm_once(self, study: optuna.Study) -> dict[str, Any]:
        """Exactly one worker confirms (the one that claims it through the storage); the
        others end saying who confirms."""
        key = f"confirm:{self.fp_key}"
        got = self.fleet.claim_or_take_over(key)
        if not got.won:
            done = self.store.last_result(self.spec.study, "confirmation", self.fp_key)
            self.console.print(f"the confirmation is run by worker {got.worker}"
                               + (" (done: `kvtune show` prints it)" if done else
                                  "; this worker ends (`kvtune show` prints it when done)"))
            return {"confirmed_by": got.worker, "confirmation": done}
        self.wait_for_running(study)
        self._resume(study)  # the incumbent and candidates as every worker left them
        result = self.confirm(study)
        result["confirmed_by"] = self.worker
        result["fingerprint"] = self.fp_key
        # StudyRun.confirm stored the result; store it again with who confirmed it.
        self.store.put_result(self.spec.study, "confirmation", result)
        return result
