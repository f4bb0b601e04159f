"""`kvtune tune`: one invocation of a study, fresh or resumed. The run opens the study and
conducts its phases in order (`kvtune.study.phases`: the host profile of a capacity
study, the baseline and noise floor, the search with drift checks, the confirmation, the
ablation), keeping what they return; its `Strategy` says how this process takes part."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from rich.console import Console

from kvtune.documents import Confirmation
from kvtune.errors import UserError
from kvtune.fleet.claims import Fleet, Heartbeat, fail_stale, worker_id
from kvtune.host import fingerprint as fpmod
from kvtune.host.context import on_host
from kvtune.measure.evaluator import Evaluation, Evaluator, Policy
from kvtune.measure.session import Session
from kvtune.optimizer import make_sampler
from kvtune.space import Space
from kvtune.store import open_store
from kvtune.study.loader import Loaded
from kvtune.study.phases import (
    AblationPhase,
    BaselinePhase,
    BaselineResult,
    ConfirmationPhase,
    DriftPhase,
    HostProfilePhase,
    PhaseContext,
    SearchPhase,
    SearchResult,
    read_back,
)
from kvtune.study.tracked import TrackedStudy
from kvtune.workload.features import summary as workload_summary

if TYPE_CHECKING:
    from kvtune.measure.host_noise import Opened

optuna.logging.set_verbosity(optuna.logging.WARNING)


class StudyRun:
    """One `kvtune tune` invocation (a fresh study or a resumed one). `policy` is the
    evaluator's policy class (its decisions; see `kvtune.measure.evaluator.Policy`).

    The run conducts the phases in one order — preflight, the baseline and noise floor, the
    search, the confirmation, the ablation (each an object of `kvtune.study.phases`, given a
    `PhaseContext` and its typed inputs) — and its `strategy` says how this process
    shares the study at each phase: `Solo` (a plain run, the default) or a fleet worker
    (`kvtune.study.worker.FleetWorker`). A plain run is a fleet of one: it records a
    heartbeat for the trial it measures, so that a resumed run fails only trials whose
    process is dead, and it holds the study's `tune` claim, so that a second plain
    `kvtune tune` of the study (or a fleet worker) is refused while it runs."""

    def __init__(self, loaded: Loaded, console: Console | None = None,
                 base_dir: Path | None = None, policy: type[Policy] = Policy,
                 worker: str | None = None,
                 strategy: Callable[[StudyRun], Strategy] | None = None,
                 cold: bool = False, library: str | None = None) -> None:
        self.loaded = loaded  # the study file as written goes into the study
        self.spec = loaded.spec
        self.console = console or Console(stderr=True)
        self.session = Session(self.spec, loaded.knobs, None)
        # Preflight before the store: a refused study leaves no file behind.
        self.space: Space | None = self.session.preflight()
        self.worker = worker or worker_id()
        self.strategy: Strategy = (strategy or Solo)(self)
        self.store = open_store(self.spec, base_dir, heartbeat=True)
        self.direction = self.spec.objective.resolved_direction
        self.metric = self.spec.objective.metric
        self.evaluator = Evaluator(self.session, self.store, self.spec.study, self.metric,
                                   self.direction, self.spec.parsed_constraints,
                                   self.spec.evaluation, self.spec.repetitions,
                                   self.strategy.seed(), policy)
        if self.spec.objective.multi:
            # Early stopping and intensification judge a trial by one objective; a Pareto
            # study measures every trial the same number of times instead.
            self.evaluator.ev = self.spec.evaluation.model_copy(
                update={"early_stop": False, "intensify": False})
        self.fleet = Fleet(self.store.engine, self.spec.study, self.worker)
        # What the phases returned (and what a resumed study read back).
        self.study: optuna.Study | None = None
        self.incumbent: Evaluation | None = None
        self.baseline_eval: Evaluation | None = None
        # The host's noise facts still being gathered (`BaselineResult.host_noise`): stored
        # when the search ends.
        self.host_noise: Opened | None = None
        self.fingerprint: dict[str, Any] = {}
        self.fp_key = ""
        from kvtune.library.warm import WarmStart

        # What was learned before (kvtune.library): the first trials, the noise floor's
        # prior, the capacity bracket; and this study's entry when it ends.
        self.warm = WarmStart(self, cold=cold, library=library)

    @property
    def exclusive(self) -> bool:
        """A plain run holds the study alone; fleet workers share it."""
        return self.strategy.exclusive

    def preflight(self) -> Space:
        """Check everything and build the study's space (nothing is applied): done once,
        when the run is built."""
        if self.space is None:
            self.space = self.session.preflight()
        return self.space

    def context(self) -> PhaseContext:
        """What the phases are given (`phases.PhaseContext`)."""
        return PhaseContext(self.spec, self.preflight(), self.session, self.evaluator,
                            self.store, self.console, self.warm, self.fp_key)

    # -- set-up ----------------------------------------------------------------------------

    def _open_study(self, space: Space) -> optuna.Study:
        sampler = make_sampler(self.spec.sampler, self.strategy.seed(), self.spec.budget.trials,
                               len(self.spec.constraints) + 1,
                               constant_liar=not self.exclusive)
        objectives = self.spec.objective.all
        if len(objectives) > 1:
            # A Pareto study (issue 16): Optuna's multi-objective search over every
            # objective; the confirmation then checks the front.
            study = optuna.create_study(
                study_name=self.spec.study, storage=self.store.storage,
                directions=[o.resolved_direction.text for o in objectives], sampler=sampler,
                load_if_exists=True)
            study.set_user_attr("objectives", [o.metric for o in objectives])
        else:
            study = optuna.create_study(study_name=self.spec.study,
                                        storage=self.store.storage,
                                        direction=self.direction.text, sampler=sampler,
                                        load_if_exists=True)
        # The knobs as the study file declares them: the host's current values (which the
        # space's domains may hold) do not make a resumed study another study.
        signature = {"knobs": [k.name + " " + k.domain.describe() for k in self.loaded.knobs],
                     "metric": self.metric, "direction": self.direction,
                     "target": self.spec.target.kind}
        if len(objectives) > 1:
            signature["objectives"] = [o.metric for o in objectives]
        old = study.user_attrs.get("signature")
        if old is None:
            study.set_user_attr("signature", signature)
            study.set_user_attr("spec", self.spec.model_dump(mode="json"))
            if self.spec.load is not None and self.spec.load.workload_file:
                study.set_user_attr("workload", {"text": workload_summary(self.spec)})
            if self.loaded.text:  # the file as written, for the report (issue 13)
                study.set_user_attr("spec_text", self.loaded.text[:200_000])
            study.set_user_attr("host", self.session.facts.as_dict())
        elif old != signature:
            raise UserError(
                f"study {self.spec.study!r} already exists in {self.store.url} with other knobs "
                "or another objective; give the study a new name to start afresh")
        study.set_user_attr("baseline", dict(space.baseline))
        study.set_user_attr("space", space.as_json())
        return self.wrap(study)

    def wrap(self, study: optuna.Study) -> TrackedStudy:
        """The study with this process's ask and tell (`study.tracked.TrackedStudy`): every
        trial asked is tagged (worker, host, fingerprint) and kept alive by the heartbeat
        until it is told; a tell on a trial failed meanwhile as stale is reported, not
        raised."""

        def tag(trial: optuna.Trial) -> None:
            trial.set_user_attr("worker", self.worker)
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("fingerprint", self.fp_key)
            self.strategy.on_ask(trial)

        def lost(number: int) -> None:
            self.console.print(f"  [yellow]trial {number} was failed meanwhile (its "
                               "heartbeat stalled); its retry is measured again[/]")

        return TrackedStudy(study, self.store.storage, tag, lost,
                            queue_lock=self.strategy.queue_lock)

    def beat(self) -> None:
        """The heartbeat: every trial this process measures, and its own last_seen."""
        if isinstance(self.study, TrackedStudy):
            for trial_id in list(self.study.live.values()):
                self.store.storage.record_heartbeat(trial_id)
        self.fleet.seen()

    def host_fingerprint(self) -> dict[str, Any]:
        load = self.spec.load
        version = self.session.target.version()
        return fpmod.fingerprint(self.session.facts, self.spec.target.kind, version,
                                 self.spec.target.cpus, load.cpus if load else None,
                                 getattr(load, "host", None) if load else None)

    def resume(self, context: PhaseContext, study: optuna.Study) -> None:
        """A trial left RUNNING is failed only when its process is dead (its heartbeat
        stopped for the grace period, or its process on this host is gone), then queued
        again once with its parameters; a live one is left alone. The baseline, the
        incumbent and the noise floor of this host fingerprint are read back."""
        fail_stale(study, self.fleet, self.store.storage)
        found = read_back(context, study, self.baseline_eval)
        self.incumbent, self.baseline_eval = found.incumbent, found.baseline

    # -- the study -------------------------------------------------------------------------

    def run(self, confirm: bool = True, ablation: bool = True) -> Confirmation | None:
        space = self.preflight()
        self.fingerprint = self.host_fingerprint()
        self.fp_key = fpmod.key(self.fingerprint)
        self.store.tag = {"worker": self.worker, "fingerprint": self.fp_key}
        self.fleet.register(self.fingerprint, self.fp_key)
        try:
            self.strategy.check_hosts()
            self.strategy.admit()
        except BaseException:
            self.fleet.unregister()
            raise
        try:
            with Heartbeat(self.store.storage, None, self.beat):
                result = self._run(space, confirm, ablation)
        except BaseException as e:
            self.fleet.finish("failed", f"{type(e).__name__}: {e}")
            raise
        finally:
            self.strategy.leave()
        self.fleet.finish("finished")
        return result

    def _run(self, space: Space, confirm: bool, ablation: bool) -> Confirmation | None:
        """The phases, in order; the strategy says how this process takes part in each,
        and the run keeps what they return."""
        self.study = study = self._open_study(space)
        context = self.context()
        self.resume(context, study)
        started = time.monotonic()
        self.strategy.announce()
        self.warm.prepare(study)

        def drift(after_trial: int | None) -> object:
            # The baseline as known when the check is due (a fleet worker's may arrive
            # during the search).
            if self.baseline_eval is None:
                return None
            return DriftPhase(context).run(self.baseline_eval, after_trial)

        with on_host(self.session, self.spec.study):
            if self.baseline_eval is None:
                HostProfilePhase(context).run(space.baseline_config())
                self.baseline_eval = self.strategy.baseline(context, study)
                if self.incumbent is None:
                    self.incumbent = self.baseline_eval
            self.warm.open_bracket()
            self.warm.enqueue(study, space)
            try:
                self.incumbent = self.strategy.search(context, study, started,
                                                      drift).incumbent
            except BaseException:
                with contextlib.suppress(Exception):
                    self.record_host_noise()
                raise
            self.record_host_noise()
            if not confirm:
                return None
            result = self.strategy.confirm(context, study)
            # The one place that decides whether the ablation runs: asked for (by the study
            # file and the command line), and this process ran the confirmation.
            if result is not None and ablation and self.spec.evaluation.ablation \
                    and self.strategy.confirmed(result):
                AblationPhase(context).run(result)
        if result is not None and self.strategy.confirmed(result):
            self.warm.add_entry(result)
        return result

    def baseline_measured(self, result: BaselineResult) -> Evaluation:
        """The baseline phase's evaluation; its host noise facts, if still being gathered,
        are stored when the search ends."""
        self.host_noise = result.host_noise
        return result.evaluation

    def record_host_noise(self) -> None:
        opened, self.host_noise = self.host_noise, None
        if opened is not None:
            opened.record()

    def profile_host(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """A capacity study's host profile at `config` (`phases.HostProfilePhase`), as
        stored; `kvtune run` prints it."""
        result = HostProfilePhase(self.context()).run(config)
        return result.as_dict() if result is not None else None


class Strategy:
    """How this process takes part in the study, phase by phase. This base is a plain run
    (`Solo`); `kvtune.study.worker.FleetWorker` shares the study with other workers."""

    #: A plain run holds the study alone; fleet workers share it.
    exclusive = True

    def __init__(self, run: StudyRun) -> None:
        self.run = run

    def seed(self) -> int:
        """The seed of this process's random streams."""
        return self.run.spec.seed

    def queue_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held around each ask (`TrackedStudy`): nothing for a plain run, which holds
        the study alone; fleet workers share their storage's lock."""
        return contextlib.nullcontext()

    def check_hosts(self) -> None:
        """Refuse a process whose host fingerprint differs from those of the study's other
        processes, unless the study says `hosts: heterogeneous`."""
        r = self.run
        if r.spec.hosts == "heterogeneous":
            return
        others = [w for w in r.fleet.workers()
                  if w["worker"] != r.worker and w["fingerprint_key"] != r.fp_key]
        if others:
            w = others[0]
            raise UserError(
                f"worker {r.worker} runs on a host unlike worker {w['worker']} (host "
                f"{w['host']}) of study {r.spec.study!r}: "
                + "; ".join(fpmod.differences(r.fingerprint, w["fingerprint"]))
                + ". Trials from different hosts are never compared: run these hosts in "
                "separate studies, or say `hosts: heterogeneous` in the study file (each host "
                "fingerprint then gets its own baseline and confirmation)")

    def describe(self, names: list[str]) -> str:
        """Workers for people: 'NAME (host H, pid P)'."""
        rows = {w["worker"]: w for w in self.run.fleet.workers()}
        return ", ".join(f"{n} (host {rows[n]['host']}, pid {rows[n]['pid']})" if n in rows
                         else n for n in names)

    def admit(self) -> None:
        """Take part in the study, or refuse (UserError) when another process holds it."""

    def leave(self) -> None:
        """Give back what `admit` took."""

    def announce(self) -> None:
        """Say who this process is, before the phases begin."""

    def on_ask(self, trial: optuna.Trial) -> None:
        """Called for every trial asked (a fleet worker binds it to its budget slot)."""

    def baseline(self, context: PhaseContext, study: optuna.Study) -> Evaluation | None:
        """Trial 0 and the noise floor (None: not known yet; the search begins without)."""
        return self.run.baseline_measured(BaselinePhase(context).run(study))

    def search(self, context: PhaseContext, study: optuna.Study, started: float,
               drift: Callable[[int | None], object]) -> SearchResult:
        """The search until the budget is spent, from the run's incumbent."""
        return SearchPhase(context, drift).run(study, started, self.run.incumbent)

    def confirm(self, context: PhaseContext, study: optuna.Study) -> Confirmation | None:
        """The confirmation's result when this process ran it (None: another did)."""
        return ConfirmationPhase(context).run(study)

    def confirmed(self, result: Confirmation | None) -> bool:
        """Whether this process ran the confirmation that `result` reports."""
        return result is not None


class Solo(Strategy):
    """A plain `kvtune tune`: the study's only process, holding its `tune` claim."""

    def admit(self) -> None:
        """Refuse a second plain `kvtune tune` of this study while one runs, or while fleet
        workers share it: take the study's `tune` claim (a dead holder's is taken over),
        then look for active workers (each holds a `fleet:NAME` claim)."""
        fleet = self.run.fleet
        got = fleet.claim_or_take_over("tune")
        busy = [got.worker] if not got.won else [
            w for w in fleet.holders("fleet:") if fleet.active(w)]
        if not busy:
            return
        if got.won:
            fleet.release("tune")
        raise UserError(
            f"study {self.run.spec.study!r} in {self.run.store.url} is being tuned right now by "
            f"{self.describe(busy)}. Two `kvtune tune` runs of one study at once are refused "
            "(they would measure two baselines and overrun the budget): wait for it to end, "
            "or run every process as a fleet worker, `kvtune tune FILE --worker NAME` "
            "(docs/fleet.md)")

    def leave(self) -> None:
        self.run.fleet.release("tune")

