"""`kvtune tune`: one invocation of a study, fresh or resumed — preflight, the baseline and
noise floor, the search with drift checks, the confirmation."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from kvtune.errors import UserError
from kvtune.evaluator import Evaluation, Evaluator, Policy
from kvtune.optimizer import make_sampler
from kvtune.runner import Session
from kvtune.space import Space
from kvtune.study import confirm as confirmation
from kvtune.study._ui import on_host, progress
from kvtune.study.drift import DriftCheck
from kvtune.study.load import Loaded, open_store
from kvtune.study.noise import NoiseFloor, check_not_client_bound
from kvtune.study.record import evaluation_of, tell
from kvtune.study.search import Search


class StudyRun:
    """One `kvtune tune` invocation (a fresh study or a resumed one). `policy` is the
    evaluator's policy class (its decisions; see `kvtune.evaluator.Policy`)."""

    def __init__(self, loaded: Loaded, console: Console | None = None,
                 base_dir: Path | None = None, policy: type[Policy] = Policy) -> None:
        self.spec = loaded.spec
        self.spec_path = loaded.path  # the study file as written goes into the study
        self.knobs = loaded.knobs  # as resolved; `space` holds them after preflight
        self.console = console or Console(stderr=True)
        self.session = Session(self.spec, self.knobs, None)
        # Preflight before the store: a refused study leaves no file behind.
        self.space: Space | None = self.session.preflight()
        self.store = open_store(self.spec, base_dir)
        self.direction = self.spec.objective.resolved_direction
        self.metric = self.spec.objective.metric
        self.evaluator = Evaluator(self.session, self.store, self.spec.study, self.metric,
                                   self.direction, self.spec.parsed_constraints,
                                   self.spec.evaluation, self.spec.repetitions, self.spec.seed,
                                   policy)
        if self.spec.objective.multi:
            # Early stopping and intensification judge a trial by one objective; a Pareto
            # study measures every trial the same number of times instead.
            self.evaluator.ev = self.spec.evaluation.model_copy(
                update={"early_stop": False, "intensify": False})
        self.study: optuna.Study | None = None
        self.incumbent: Evaluation | None = None
        self.baseline_eval: Evaluation | None = None

    def preflight(self) -> Space:
        """Check everything and build the study's space (nothing is applied): done once,
        when the run is built."""
        if self.space is None:
            self.space = self.session.preflight()
        return self.space

    # -- set-up ----------------------------------------------------------------------------

    def _open_study(self, space: Space) -> optuna.Study:
        sampler = make_sampler(self.spec.sampler, self.spec.seed, self.spec.budget.trials,
                               len(self.spec.constraints) + 1)
        objectives = self.spec.objective.all
        if len(objectives) > 1:
            # A Pareto study (issue 16): Optuna's multi-objective search over every
            # objective; the confirmation then checks the front.
            study = optuna.create_study(
                study_name=self.spec.study, storage=self.store.storage,
                directions=[o.resolved_direction for o in objectives], sampler=sampler,
                load_if_exists=True)
            study.set_user_attr("objectives", [o.metric for o in objectives])
        else:
            study = optuna.create_study(study_name=self.spec.study,
                                        storage=self.store.storage,
                                        direction=self.direction, sampler=sampler,
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
            if self.spec_path.is_file():  # the file as written, for the report (issue 13)
                study.set_user_attr("spec_text",
                                    self.spec_path.read_text(errors="replace")[:200_000])
            study.set_user_attr("host", self.session.facts.as_dict())
        elif old != signature:
            raise UserError(
                f"study {self.spec.study!r} already exists in {self.store.url} with other knobs "
                "or another objective; give the study a new name to start afresh")
        study.set_user_attr("baseline", dict(space.baseline))
        study.set_user_attr("space", space.as_json())
        return study

    def _resume(self, study: optuna.Study) -> None:
        """Trials left RUNNING by an interrupted run are failed and queued again; the
        baseline, the incumbent and the noise floor are read back."""
        for t in study.get_trials(deepcopy=False):
            if t.state == optuna.trial.TrialState.RUNNING:
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                self.store.put_result(self.spec.study, "requeued",
                                      {"trial": t.number, "params": t.params})
                study.enqueue_trial(t.params, skip_if_exists=False)
        best: Evaluation | None = None
        for t in study.get_trials(deepcopy=False,
                                  states=(optuna.trial.TrialState.COMPLETE,)):
            e = evaluation_of(t, self.metric)
            if t.user_attrs.get("kind") == "baseline":
                self.baseline_eval = e
            if e.feasible and (best is None or self.evaluator.better(e.value, best.value)):
                best = e
        self.incumbent = best
        if self.baseline_eval is not None:
            self.resolve_constraints(self.baseline_eval)
            nf = self.store.last_result(self.spec.study, "noise_floor")
            if nf:
                self.evaluator.noise_cov = nf.get("cov", {}).get(self.metric)

    # -- the study -------------------------------------------------------------------------

    def run(self, confirm: bool = True, ablation: bool = True) -> dict[str, Any]:
        space = self.preflight()
        self.study = study = self._open_study(space)
        self._resume(study)
        started = time.monotonic()
        with on_host(self.session, self.spec.study):
            if self.baseline_eval is None:
                self.baseline_eval = self.incumbent = self.measure_baseline(study, space)
            search = Search(self.spec, space, self.evaluator, self.session.ctx, self.console,
                            self.drift_check)
            self.incumbent = search.run(study, started, self.incumbent)
            result: dict[str, Any] = {}
            if confirm and self.spec.evaluation.confirm_rounds > 0:
                result = self.confirm(study)
                if ablation and self.spec.evaluation.ablation:
                    from kvtune.study.ablation import after_confirmation

                    after_confirmation(self, result)
        return result

    def measure_baseline(self, study: optuna.Study, space: Space) -> Evaluation:
        """Trial 0: the baseline configuration, measured for the noise floor."""
        ev = self.spec.evaluation
        n = max(ev.noise_floor_runs, self.spec.repetitions)
        study.enqueue_trial(space.fixed_params(space.baseline))
        trial = study.ask()
        config = space.suggest(trial)
        self.console.print(f"[bold]Baseline[/] (trial {trial.number}, the defaults): "
                           f"{n} repetitions to measure the noise floor")
        with progress(self.console) as prog:
            task = prog.add_task("baseline", total=n)
            e = self.evaluator.evaluate(config, "baseline", trial.number, n=n,
                                        on_rep=lambda _e: prog.advance(task))
        tell(study, trial, e, "baseline", self.spec.constraints)
        if e.failed:
            raise UserError(f"the baseline (defaults) failed: {e.failed}\n{e.failed_stderr}")
        self.resolve_constraints(e)
        noise = NoiseFloor.of(e, self.metric, ev)
        self.evaluator.noise_cov = noise.cov.get(self.metric)
        self.store.put_result(self.spec.study, "noise_floor", noise.as_dict())
        noise.report(self.console, self.metric, ev)
        from kvtune.report.noise import record as record_host_noise

        record_host_noise(self.store, self.spec.study, self.console, ev.steal_threshold)
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

    def confirm(self, study: optuna.Study) -> dict[str, Any]:
        """Re-run the top candidates and the baseline interleaved, then recommend the best
        candidate whose improvement is significant — or say that none is."""
        assert self.space is not None
        ev = self.spec.evaluation

        def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
            rep = self.evaluator.run_one(config, "confirm", None)
            return rep.status, rep.reason, rep.metrics

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
                result = confirmation.confirm(
                    study.get_trials(deepcopy=False), self.space.baseline_config(),
                    self.metric, self.direction, ev, self.spec.seed, measure, start,
                    lambda: prog.advance(task), constraints=self.spec.parsed_constraints)
        self.store.put_result(self.spec.study, "confirmation", result)
        return result
