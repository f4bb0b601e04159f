"""`kvtune tune`: one invocation of a study, fresh or resumed — preflight, the baseline and
noise floor, the search with drift checks, the confirmation."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console
from rich.markup import escape

from kvtune import documents, present
from kvtune.documents import Ablation, Confirmation
from kvtune.errors import UserError
from kvtune.fleet.claims import Fleet, Heartbeat, fail_stale, worker_id
from kvtune.host import fingerprint as fpmod
from kvtune.host.context import on_host
from kvtune.measure.evaluator import Evaluation, Evaluator, Policy
from kvtune.measure.session import Repetition, Session
from kvtune.optimizer import make_sampler
from kvtune.present import fmt
from kvtune.space import Space
from kvtune.store import open_store
from kvtune.study import ablation
from kvtune.study import confirm as confirmation
from kvtune.study.drift import DriftCheck
from kvtune.study.loader import Loaded
from kvtune.study.noise import NoiseFloor, check_not_client_bound
from kvtune.study.progress import progress
from kvtune.study.record import evaluation_of, tell
from kvtune.study.search import Search
from kvtune.workload.features import summary as workload_summary

optuna.logging.set_verbosity(optuna.logging.WARNING)

class StudyRun:
    """One `kvtune tune` invocation (a fresh study or a resumed one). `policy` is the
    evaluator's policy class (its decisions; see `kvtune.measure.evaluator.Policy`).

    The run conducts the phases in one order — preflight, the baseline and noise floor, the
    search, the confirmation, the ablation — and its `strategy` says how this process
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
        self.spec = loaded.spec
        self.spec_path = loaded.path
        self.spec_text = loaded.text  # the study file as written goes into the study
        self.knobs = loaded.knobs  # as resolved; `space` holds them after preflight
        self.console = console or Console(stderr=True)
        self.session = Session(self.spec, self.knobs, None)
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
                                   self.stream_seed(), policy)
        if self.spec.objective.multi:
            # Early stopping and intensification judge a trial by one objective; a Pareto
            # study measures every trial the same number of times instead.
            self.evaluator.ev = self.spec.evaluation.model_copy(
                update={"early_stop": False, "intensify": False})
        self.study: optuna.Study | None = None
        self.incumbent: Evaluation | None = None
        self.baseline_eval: Evaluation | None = None
        self.fleet = Fleet(self.store.engine, self.spec.study, self.worker)
        self.fingerprint: dict[str, Any] = {}
        self.fp_key = ""
        self.live: dict[int, int] = {}  # trial number -> trial id, measured by this process
        from kvtune.library.warm import WarmStart

        # What was learned before (kvtune.library): the first trials, the noise floor's
        # prior, the capacity bracket; and this study's entry when it ends.
        self.warm = WarmStart(self, cold=cold, library=library)

    def stream_seed(self) -> int:
        """The seed of this run's random streams (a fleet worker's is its own)."""
        return self.strategy.seed()

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

    # -- set-up ----------------------------------------------------------------------------

    def _open_study(self, space: Space) -> optuna.Study:
        sampler = make_sampler(self.spec.sampler, self.stream_seed(), self.spec.budget.trials,
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
        signature = {"knobs": [k.name + " " + k.domain.describe() for k in self.knobs],
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
            if self.spec_text:  # the file as written, for the report (issue 13)
                study.set_user_attr("spec_text", self.spec_text[:200_000])
            study.set_user_attr("host", self.session.facts.as_dict())
        elif old != signature:
            raise UserError(
                f"study {self.spec.study!r} already exists in {self.store.url} with other knobs "
                "or another objective; give the study a new name to start afresh")
        study.set_user_attr("baseline", dict(space.baseline))
        study.set_user_attr("space", space.as_json())
        return self.wrap(study)

    def wrap(self, study: optuna.Study) -> optuna.Study:
        """The study with this process's ask and tell (`study.tracked.TrackedStudy`): every
        trial asked is tagged (worker, host, fingerprint) and kept alive by the heartbeat
        until it is told; a tell on a trial failed meanwhile as stale is reported, not
        raised."""
        from kvtune.study.tracked import TrackedStudy

        def tag(trial: optuna.Trial) -> None:
            trial.set_user_attr("worker", self.worker)
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("fingerprint", self.fp_key)
            self.strategy.on_ask(trial)

        def lost(number: int) -> None:
            self.console.print(f"  [yellow]trial {number} was failed meanwhile (its "
                               "heartbeat stalled); its retry is measured again[/]")

        tracked = TrackedStudy(study, self.store.storage, tag, lost)
        self.live = tracked.live
        return tracked

    def beat(self) -> None:
        """The heartbeat: every trial this process measures, and its own last_seen."""
        for trial_id in list(self.live.values()):
            self.store.storage.record_heartbeat(trial_id)
        self.fleet.seen()

    def host_fingerprint(self) -> dict[str, Any]:
        load = self.spec.load
        version = self.session.target.version()
        return fpmod.fingerprint(self.session.facts, self.spec.target.kind, version,
                                 self.spec.target.cpus, load.cpus if load else None,
                                 getattr(load, "host", None) if load else None)

    def check_hosts(self) -> None:
        """Refuse a process whose host fingerprint differs from those of the study's other
        processes, unless the study says `hosts: heterogeneous`."""
        if self.spec.hosts == "heterogeneous":
            return
        others = [w for w in self.fleet.workers()
                  if w["worker"] != self.worker and w["fingerprint_key"] != self.fp_key]
        if others:
            w = others[0]
            raise UserError(
                f"worker {self.worker} runs on a host unlike worker {w['worker']} (host "
                f"{w['host']}) of study {self.spec.study!r}: "
                + "; ".join(fpmod.differences(self.fingerprint, w["fingerprint"]))
                + ". Trials from different hosts are never compared: run these hosts in "
                "separate studies, or say `hosts: heterogeneous` in the study file (each host "
                "fingerprint then gets its own baseline and confirmation)")

    def describe(self, names: list[str]) -> str:
        """Workers for people: 'NAME (host H, pid P)'."""
        rows = {w["worker"]: w for w in self.fleet.workers()}
        return ", ".join(f"{n} (host {rows[n]['host']}, pid {rows[n]['pid']})" if n in rows
                         else n for n in names)

    def _resume(self, study: optuna.Study) -> None:
        """A trial left RUNNING is failed only when its process is dead (its heartbeat
        stopped for the grace period, or its process on this host is gone), then queued
        again once with its parameters; a live one is left alone. The baseline, the
        incumbent and the noise floor of this host fingerprint are read back."""
        fail_stale(study, self.fleet, self.store.storage)
        best: Evaluation | None = None
        for t in study.get_trials(deepcopy=False,
                                  states=(optuna.trial.TrialState.COMPLETE,)):
            if t.user_attrs.get("fingerprint", self.fp_key) != self.fp_key:
                continue  # another host's: never compared with this host's
            e = evaluation_of(t, self.metric)
            if t.user_attrs.get("kind") == "baseline":
                self.baseline_eval = e
            if e.feasible and (best is None or self.evaluator.better(e.value, best.value)):
                best = e
        self.incumbent = best
        if self.baseline_eval is not None:
            self.resolve_constraints(self.baseline_eval)
            nf = self.store.document(self.spec.study, documents.NoiseFloor, self.fp_key)
            if nf is not None:
                self.evaluator.noise_cov = nf.cov.get(self.metric)

    # -- the study -------------------------------------------------------------------------

    def run(self, confirm: bool = True, ablation: bool = True) -> Confirmation | None:
        space = self.preflight()
        self.fingerprint = self.host_fingerprint()
        self.fp_key = fpmod.key(self.fingerprint)
        self.store.tag = {"worker": self.worker, "fingerprint": self.fp_key}
        self.fleet.register(self.fingerprint, self.fp_key)
        try:
            self.check_hosts()
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
        """The phases, in order; the strategy says how this process takes part in each."""
        self.study = study = self._open_study(space)
        self._resume(study)
        started = time.monotonic()
        self.strategy.announce()
        self.warm.prepare(study)
        with on_host(self.session, self.spec.study):
            if self.baseline_eval is None:
                self.profile_host(space.baseline_config())
                self.baseline_eval = self.strategy.baseline(study, space)
                if self.incumbent is None:
                    self.incumbent = self.baseline_eval
            self.warm.open_bracket()
            self.warm.enqueue(study, space)
            self.strategy.search(study, space, started)
            if not confirm:
                return None
            result = self.strategy.confirm(study)
            # The one place that decides whether the ablation runs: asked for (by the study
            # file and the command line), and this process ran the confirmation.
            if result is not None and ablation and self.spec.evaluation.ablation \
                    and self.strategy.confirmed(result):
                self.ablate(result)
        if result is not None and self.strategy.confirmed(result):
            self.warm.add_entry(result)
        return result

    def profile_host(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """Before a capacity study's first search: the host profile at `config` (its floor,
        the server's peak, the client's cost; kvtune.measure.hostprofile), printed and kept
        as the study's "host_profile" result. An SLO the host cannot show is refused
        (UserError, exit 2); one within twice the floor is warned about."""
        from kvtune.errors import TrialFailed
        from kvtune.measure.hostprofile import judge

        if self.spec.capacity is None or not self.session.on_host:
            return None
        self.console.print("[bold]Host profile[/] (the defaults, a fresh server): the "
                           "server's peak, the latency floor and kvload's cost")
        try:
            prof = self.session.profile(config)
        except TrialFailed as e:
            raise UserError(f"the host profile failed on the defaults: {e.reason}") from None
        if prof is None:
            return None
        for line in prof.lines():
            self.console.print(f"  {line}", markup=False, highlight=False)
        verdict = judge(prof)
        result = {**prof.as_dict(), "refused": verdict.refuse, "warning": verdict.warn}
        self.store.put_result(self.spec.study, "host_profile", result)
        if verdict.refuse:
            raise UserError(verdict.refuse)
        if verdict.warn:
            self.console.print(f"  [yellow]warning:[/] {escape(verdict.warn)}")
        return result

    def measure_baseline(self, study: optuna.Study, space: Space) -> Evaluation:
        """Trial 0: the baseline configuration, measured for the noise floor."""
        ev = self.spec.evaluation
        full = max(ev.noise_floor_runs, self.spec.repetitions)
        self.warm.open_bracket()
        n = self.warm.baseline_runs(full)  # fewer with the library's noise prior
        study.enqueue_trial(space.fixed_params(space.baseline))
        trial = study.ask()
        config = space.suggest(trial)
        self.console.print(f"[bold]Baseline[/] (trial {trial.number}, the defaults): "
                           f"{n} repetitions to measure the noise floor")
        with progress(self.console) as prog:
            task = prog.add_task("baseline", total=n)
            e = self.evaluator.evaluate(config, "baseline", trial.number, n=n,
                                        on_rep=lambda _e: prog.advance(task))
            self.warm.complete_baseline(
                e, full, lambda: self.evaluator.add(e, "baseline", trial.number, planned=full))
        tell(study, trial, e, "baseline", self.spec.constraints)
        if e.failed:
            raise UserError(f"the baseline (defaults) failed: {e.failed}\n{e.failed_stderr}")
        self.resolve_constraints(e)
        # With the library's prior (kvtune.library.warm), the objective's CoV is pooled.
        noise = self.warm.pool(NoiseFloor.of(e, self.metric, ev), self.metric, ev)
        self.evaluator.noise_cov = noise.cov.get(self.metric)
        self.store.put_result(self.spec.study, "noise_floor", noise.as_dict())
        noise.report(self.console, self.metric, ev)
        from kvtune.measure.host_noise import record as record_host_noise

        record_host_noise(self.store, self.spec.study, None, ev.steal_threshold)
        check_not_client_bound(e)
        return e

    def resolve_constraints(self, baseline: Evaluation) -> None:
        """Constraints relative to the baseline (`ops_per_sec >= 0.98 * baseline`) are
        checked in the search against the noise floor's medians."""
        self.evaluator.policy.constraints = [
            c.resolve(baseline.metrics) for c in self.spec.parsed_constraints]

    def drift_check(self, after_trial: int | None) -> dict[str, Any] | None:
        if self.baseline_eval is None or self.space is None:
            return None
        return DriftCheck(self.spec, self.evaluator, self.store, self.console).run(
            self.space.baseline_config(), self.baseline_eval, after_trial)

    def say_measured(self, phase: str, n: int, config: dict[str, Any],
                     baseline: dict[str, Any], rep: Repetition) -> None:
        """One line per measurement of a long phase (the progress a log keeps): which
        configuration, its objective, or why it did not count."""
        from kvtune.safety.text import for_markup

        changed = [f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in config.items()
                   if baseline.get(k) != v]
        who = " ".join(changed) if changed else "baseline"
        if rep.status == "failed":
            what = ("spoiled by the host, not counted" if rep.raw.get("transient")
                    else "failed")
            self.console.print(f"  {phase} {n}: {for_markup(who)}: {what}: "
                               f"{for_markup(rep.reason)}", highlight=False)
            return
        v = rep.metrics.get(self.metric)
        lo, hi = (rep.metrics.get(f"{self.metric}_ci_low"),
                  rep.metrics.get(f"{self.metric}_ci_high"))
        ci = (f" (95% CI {fmt(lo)} … {fmt(hi)})"
              if isinstance(lo, int | float) and isinstance(hi, int | float) else "")
        self.console.print(f"  {phase} {n}: {for_markup(who)}: {self.metric} {fmt(v)}{ci}",
                           highlight=False)

    def confirm(self, study: optuna.Study) -> Confirmation:
        """Re-run the top candidates and the baseline interleaved, then recommend the best
        candidate whose improvement is significant — or say that none is."""
        assert self.space is not None
        ev = self.spec.evaluation

        seen = {"n": 0}
        baseline = self.space.baseline_config()

        def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
            rep = self.evaluator.run_one(config, "confirm", None)
            seen["n"] += 1
            self.say_measured("confirmation", seen["n"], config, baseline, rep)
            return _status(rep), rep.reason, rep.metrics

        with progress(self.console) as prog:
            task = prog.add_task("confirm", total=None)

            def start(n: int) -> None:
                self.console.print(f"[bold]Confirmation[/]: baseline and {n} candidate(s), "
                                   f"{ev.confirm_rounds} interleaved rounds")
                prog.update(task, total=ev.confirm_rounds * (n + 1))

            if self.spec.objective.multi:
                result = confirmation.confirm_front(
                    study, self.space.baseline_config(),
                    [(o.metric, o.resolved_direction) for o in self.spec.objective.all], ev,
                    self.spec.seed, measure, start, lambda: prog.advance(task),
                    constraints=self.spec.parsed_constraints)
            else:
                # This host fingerprint's trials only (a heterogeneous study's other hosts
                # have their own baseline and confirmation).
                own = [t for t in study.get_trials(deepcopy=False)
                       if t.user_attrs.get("fingerprint", self.fp_key) == self.fp_key]
                result = confirmation.confirm(
                    own, self.space.baseline_config(),
                    self.metric, self.direction, ev, self.spec.seed, measure, start,
                    lambda: prog.advance(task), constraints=self.spec.parsed_constraints,
                    slo=str(cap.slo) if (cap := self.spec.capacity) else None)
        doc = documents.build("confirmation", result)  # typed once, as stored
        self.store.put_result(self.spec.study, "confirmation", doc)
        return doc

    def ablate(self, confirmation: Confirmation) -> Ablation:
        """The recommendation with each changed knob reverted, measured interleaved through
        the evaluator (`kvtune.study.ablation.ablate`, a pure function), stored as
        "ablation" and printed. Called by `_run` after the confirmation, on the host."""
        assert self.space is not None
        ev = self.spec.evaluation
        baseline = self.space.baseline_config()

        seen = {"n": 0}

        def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
            rep = self.evaluator.run_one(config, "ablation", None)
            seen["n"] += 1
            self.say_measured("ablation", seen["n"], config, baseline, rep)
            return _status(rep), rep.reason, rep.metrics

        first = ablation.first_rounds(ev)
        with progress(self.console) as prog:
            task = prog.add_task("ablation", total=None)
            total = {"n": 0}

            def start(n: int) -> None:
                total["n"] = least = (n + 2) * first
                most = ablation.max_cost(confirmation, baseline, ev)
                per = self.evaluator.seconds_per_repetition()
                took = (f", about {present.duration(least * per)} to "
                        f"{present.duration(most * per)} at {present.duration(per)} a "
                        "repetition") if per else ""
                limit = (f"; no look after the first that would take it past "
                         f"{present.duration(ev.ablation_time)} in all "
                         "(evaluation.ablation_time)"
                         if ev.ablation_time is not None else "")
                self.console.print(
                    f"[bold]Ablation[/]: the recommendation with each of its {n} changes "
                    f"reverted, {first} interleaved rounds; more only for changes neither "
                    f"shown to carry the gain nor below {present.share(ev.ablation_share)} of it, "
                    f"up to "
                    f"{ev.ablation_max_rounds} rounds; then the changes that carry alone "
                    f"against the full recommendation, {first} rounds. Budget: {least} to "
                    f"{most} repetitions{took}{limit}")
                prog.update(task, total=least)

            def look(rounds: int, arms: int) -> None:
                total["n"] += rounds * (arms + 1)
                self.console.print(f"  ablation: {arms} change(s) still open, {rounds} "
                                   "more rounds of them and the recommendation")
                prog.update(task, total=total["n"])

            result = ablation.ablate(confirmation, baseline, self.metric, self.direction, ev,
                                     self.spec.seed, measure, start,
                                     lambda: prog.advance(task), look, time.monotonic)
        doc = documents.build("ablation", result)  # typed once, as stored
        self.store.put_result(self.spec.study, "ablation", doc)
        return doc  # its lines are the summary's (`kvtune show`), said once


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

    def admit(self) -> None:
        """Take part in the study, or refuse (UserError) when another process holds it."""

    def leave(self) -> None:
        """Give back what `admit` took."""

    def announce(self) -> None:
        """Say who this process is, before the phases begin."""

    def on_ask(self, trial: optuna.Trial) -> None:
        """Called for every trial asked (a fleet worker binds it to its budget slot)."""

    def baseline(self, study: optuna.Study, space: Space) -> Evaluation | None:
        """Trial 0 and the noise floor (None: not known yet; the search begins without)."""
        return self.run.measure_baseline(study, space)

    def search(self, study: optuna.Study, space: Space, started: float) -> None:
        """The search until the budget is spent; sets `run.incumbent`."""
        r = self.run
        search = Search(r.spec, space, r.evaluator, r.session.ctx, r.console, r.drift_check)
        r.incumbent = search.run(study, started, r.incumbent)

    def confirm(self, study: optuna.Study) -> Confirmation | None:
        """The confirmation's result when this process ran it (None: another did)."""
        return self.run.confirm(study)

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
            f"{self.run.describe(busy)}. Two `kvtune tune` runs of one study at once are refused "
            "(they would measure two baselines and overrun the budget): wait for it to end, "
            "or run every process as a fleet worker, `kvtune tune FILE --worker NAME` "
            "(docs/fleet.md)")

    def leave(self) -> None:
        self.run.fleet.release("tune")


def _status(rep: Repetition) -> str:
    """A repetition's status for the interleaved phases: "skipped" when the host spoiled it
    (the arm is measured again next round), else its own."""
    return "skipped" if rep.status == "failed" and rep.raw.get("transient") else rep.status
