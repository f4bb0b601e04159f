"""`kvtune tune` as one worker of a fleet: several workers (`--worker`, or one per host)
share one study in one storage.

What differs from a lone `StudyRun` (see `kvtune.fleet` for the mechanisms):
- the storage is created under a lock and heartbeats tell live trials from dead ones: a
  resumed or joining worker never fails a RUNNING trial; a killed worker's trial is retried;
- each worker samples from its own stream with TPE's constant_liar;
- one baseline per host fingerprint, measured by the worker that claims it (others wait);
- the trial budget counts across workers exactly (one claim per budget slot);
- exactly one confirmation, by the worker that claims it; the others end saying who;
- workers on hosts with another fingerprint are refused (heterogeneous studies: not yet).
"""

from __future__ import annotations

import contextlib
import socket
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from rich.console import Console

from kvtune.errors import UserError
from kvtune.evaluator import Evaluation, Evaluator, Policy
from kvtune.fleet import (
    Fleet,
    Heartbeat,
    fail_stale,
    masked,
    open_storage,
    worker_id,
    worker_seed,
    workers_of,
)
from kvtune.host import fingerprint as fpmod
from kvtune.runner import Session
from kvtune.space import Space
from kvtune.store import Store
from kvtune.study._ui import on_host
from kvtune.study.load import Loaded
from kvtune.study.record import evaluation_of
from kvtune.study.run import StudyRun
from kvtune.study.search import Search

# study.ask() outside Study.optimize warns that heartbeats are meant for optimize: kvtune
# records them itself (fleet.Heartbeat).
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")

WAIT_POLL = 0.5  # seconds between looks at the storage while waiting for another worker


class BudgetSpent(Exception):
    """Every budget slot is taken (by this worker or others)."""


class FleetStore(Store):
    """The store with its storage created safely under concurrency, heartbeats on, and each
    repetition tagged with the worker and its host fingerprint."""

    def __init__(self, url: str) -> None:  # the base's fields, the storage created safely
        from kvtune import store as store_mod

        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.storage = open_storage(url, heartbeat=True, extra_tables=store_mod._META)
        self.engine = sa.create_engine(url)
        self.tag: dict[str, Any] = {}

    def add_repetition(self, study: str, kind: str, trial_number: int | None,
                       config_key: str, status: str, value: float | None,
                       params: dict[str, Any], metrics: dict[str, Any],
                       raw: dict[str, Any]) -> None:
        super().add_repetition(study, kind, trial_number, config_key, status, value, params,
                               metrics, {**raw, "fleet": self.tag} if self.tag else raw)


def make_worker_sampler(kind: str, seed: int,
                        budget_trials: int | None) -> optuna.samplers.BaseSampler:
    """The study's sampler on this worker's own random stream; TPE with constant_liar so that
    concurrent workers do not propose the same point (as kvtune.optimizer's TPE otherwise)."""
    if kind in ("random", "grid"):
        return optuna.samplers.RandomSampler(seed=seed)
    startup = max(4, min(10, (budget_trials or 30) // 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup,
                                          multivariate=True, group=True, constant_liar=True)


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
        ask and tell are the worker's, see FleetRun.wrap), freed when the result of an
        earlier trial is reused (a repeat is not counted)."""
        r = self.run_ref
        fail_stale(study)
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
        return out


class FleetRun(StudyRun):
    """One worker of a study shared by several (also correct when it is the only one)."""

    def __init__(self, loaded: Loaded, console: Console | None = None,
                 base_dir: Path | None = None, policy: type[Policy] = Policy,
                 worker: str | None = None) -> None:
        # StudyRun.__init__, with the fleet's store (created safely, heartbeats on).
        self.spec = loaded.spec
        self.spec_path = loaded.path
        self.knobs = loaded.knobs
        self.console = console or Console(stderr=True)
        self.session = Session(self.spec, self.knobs, None)
        self.worker = worker or worker_id()
        self.fleet_store = FleetStore(self.spec.storage_url(base_dir or Path.cwd()))
        self.store = self.fleet_store
        self.direction = self.spec.objective.resolved_direction
        self.metric = self.spec.objective.metric
        self.evaluator = Evaluator(self.session, self.store, self.spec.study, self.metric,
                                   self.direction, self.spec.parsed_constraints,
                                   self.spec.evaluation, self.spec.repetitions,
                                   worker_seed(self.spec.seed, self.worker), policy)
        self.space: Space | None = None
        self.study: optuna.Study | None = None
        self.incumbent: Evaluation | None = None
        self.baseline_eval: Evaluation | None = None
        self.fleet = Fleet(self.store.engine, self.spec.study, self.worker)
        self.fingerprint: dict[str, Any] = {}
        self.fp_key = ""
        self.live: dict[int, int] = {}  # trial number -> trial id, measured by this worker
        self.current_slot: int | None = None
        self.bound_slots: set[int] = set()

    # -- set-up ----------------------------------------------------------------------------

    def host_fingerprint(self) -> dict[str, Any]:
        load = self.spec.load
        version = self.session.target.version()
        return fpmod.fingerprint(self.session.facts, self.spec.target.kind, version,
                                 self.spec.target.cpus, load.cpus if load else None,
                                 getattr(load, "host", None) if load else None)

    def check_hosts(self) -> None:
        """Refuse a worker whose host fingerprint differs from the study's other workers'."""
        others = [w for w in workers_of(self.store.engine, self.spec.study)
                  if w["worker"] != self.worker and w["fingerprint_key"] != self.fp_key]
        if others:
            w = others[0]
            raise UserError(
                f"worker {self.worker} runs on a host unlike worker {w['worker']} (host "
                f"{w['host']}) of study {self.spec.study!r}: "
                + "; ".join(fpmod.differences(self.fingerprint, w["fingerprint"]))
                + ". Trials from different hosts are never compared; run these hosts in "
                "separate studies (a `hosts: heterogeneous` study, with one baseline and one "
                "confirmation per host, is not implemented yet)")

    def _open_study(self, space: Space) -> optuna.Study:
        super()._open_study(space)
        # The same study with this worker's sampler: its own stream, constant_liar.
        sampler = make_worker_sampler(self.spec.sampler,
                                      worker_seed(self.spec.seed, self.worker),
                                      self.spec.budget.trials)
        return self.wrap(optuna.load_study(study_name=self.spec.study,
                                           storage=self.store.storage, sampler=sampler))

    def wrap(self, study: optuna.Study) -> optuna.Study:
        """The study with this worker's ask and tell: every trial asked is tagged (worker,
        host, fingerprint), bound to the current budget slot and kept alive by the worker's
        heartbeat until it is told; a tell on a trial failed meanwhile as stale is reported,
        not raised."""
        ask, tell_ = study.ask, study.tell

        def fleet_ask(*a: Any, **kw: Any) -> optuna.Trial:
            trial = ask(*a, **kw)
            # A first heartbeat now: a trial without one is never found stale (Optuna skips
            # it), so a worker killed right after asking would hold it RUNNING for ever.
            self.store.storage.record_heartbeat(trial._trial_id)
            self.live[trial.number] = trial._trial_id
            self.tag_trial(trial)
            if self.current_slot is not None:
                self.fleet.slot_trial(self.current_slot, trial.number)
                self.bound_slots.add(self.current_slot)
            return trial

        def fleet_tell(trial: Any, *a: Any, **kw: Any) -> Any:
            number = trial if isinstance(trial, int) else trial.number
            try:
                return tell_(trial, *a, **kw)
            except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError,
                    ValueError) as err:
                text = str(err).lower()
                if "finished" not in text and "cannot tell" not in text:
                    raise
                self.console.print(f"  [yellow]trial {number} was failed meanwhile (its "
                                   "heartbeat stalled); its retry is measured again[/]")
                return None
            finally:
                self.live.pop(number, None)

        study.ask = fleet_ask  # type: ignore[method-assign]
        study.tell = fleet_tell  # type: ignore[method-assign]
        return study

    def slot_unbound(self, slot: int) -> bool:
        return slot not in self.bound_slots

    def beat(self) -> None:
        """The worker's heartbeat: every trial it measures, and its own last_seen."""
        for trial_id in list(self.live.values()):
            self.store.storage.record_heartbeat(trial_id)
        self.fleet.seen()

    def tag_trial(self, trial: optuna.Trial) -> None:
        trial.set_user_attr("worker", self.worker)
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("fingerprint", self.fp_key)

    def _resume(self, study: optuna.Study) -> None:
        """Never fail a RUNNING trial: only stale ones (no heartbeat for the grace period)
        are failed and retried. The baseline and incumbent are this fingerprint's."""
        fail_stale(study)
        best: Evaluation | None = None
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if t.user_attrs.get("fingerprint", self.fp_key) != self.fp_key:
                continue
            e = evaluation_of(t, self.metric)
            if t.user_attrs.get("kind") == "baseline":
                self.baseline_eval = e
            if e.feasible and (best is None or self.evaluator.better(e.value, best.value)):
                best = e
        self.incumbent = best
        if self.baseline_eval is not None:
            nf = self.store.last_result(self.spec.study, "noise_floor")
            if nf:
                self.evaluator.noise_cov = nf.get("cov", {}).get(self.metric)

    # -- the study -------------------------------------------------------------------------

    def run(self, confirm: bool = True, ablation: bool = True) -> dict[str, Any]:
        space = self.preflight()
        self.fingerprint = self.host_fingerprint()
        self.fp_key = fpmod.key(self.fingerprint)
        self.fleet_store.tag = {"worker": self.worker, "fingerprint": self.fp_key}
        self.check_hosts()
        self.fleet.register(self.fingerprint, self.fp_key)
        try:
            with Heartbeat(self.store.storage, None, self.beat):
                result = self._run(space, confirm, ablation)
        except BaseException as e:
            self.fleet.finish("failed", f"{type(e).__name__}: {e}")
            raise
        self.fleet.finish("finished")
        return result

    def _run(self, space: Space, confirm: bool, ablation: bool) -> dict[str, Any]:
        self.study = study = self._open_study(space)
        self._resume(study)
        started = time.monotonic()
        self.console.print(f"worker [bold]{self.worker}[/] on study {self.spec.study!r} in "
                           f"{masked(self.store.url)}")
        with on_host(self.session, self.spec.study):
            if self.baseline_eval is None:
                self.baseline_eval = self.obtain_baseline(study, space)
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
            if not confirm or self.spec.evaluation.confirm_rounds <= 0:
                return {}
            result = self.confirm_once(study)
            if ablation and self.spec.evaluation.ablation and \
                    result.get("confirmed_by") == self.worker:
                from kvtune.study.ablation import after_confirmation

                after_confirmation(self, result)
            return result

    def obtain_baseline(self, study: optuna.Study, space: Space) -> Evaluation:
        """This fingerprint's baseline: measured by the worker that claims it, waited for by
        the others (taken over when its worker dies)."""
        key = f"baseline:{self.fp_key}"
        while True:
            got = self.fleet.claim_or_take_over(key)
            if got.won:
                return self.measure_baseline(study, space)
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
                nf = self.store.last_result(self.spec.study, "noise_floor")
                if nf:
                    self.evaluator.noise_cov = nf.get("cov", {}).get(self.metric)
                return evaluation_of(t, self.metric)
        return None

    def wait_for_running(self, study: optuna.Study) -> None:
        """Until no search trial runs (stale ones are failed and retried by whoever is left;
        a retried trial waiting with no worker to run it is not waited for)."""
        while True:
            fail_stale(study)
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
            done = self.store.last_result(self.spec.study, "confirmation")
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
