"""The study's phases as objects: each takes typed inputs and returns a typed result, and
stores the document it returns (through `store`, the one JSON boundary) before it returns
or refuses — a refused baseline keeps its noise floor, a refused host profile its profile.

- `HostProfilePhase` (a capacity study, before its baseline): the host's floor, the
  server's peak and the client's cost -> `ProfileResult` (stored as "host_profile");
- `BaselinePhase`: trial 0 at the defaults, the noise floor -> `BaselineResult`
  (stored as "noise_floor");
- `SearchPhase`: the search loop (`kvtune.study.search.Search`, or a fleet worker's) ->
  `SearchResult` (its trials are Optuna's, told through the study);
- `DriftPhase`: the baseline measured again during and after the search -> its record;
- `ConfirmationPhase`: the top candidates and the baseline in interleaved rounds ->
  `documents.Confirmation` (stored as "confirmation");
- `AblationPhase`: the recommendation with each change reverted ->
  `documents.Ablation` (stored as "ablation");
- `read_back`: what a resumed study's stored trials say (this host's baseline and
  incumbent) -> `Resumed`.

Every phase gets what it needs from one `PhaseContext` (the study file, the space, the
session, the evaluator, the store, the console, the warm start, this host's fingerprint)
and never reads the run that conducts it (`kvtune.study.run.StudyRun`, which only orders
them and keeps what they return). Optuna is driven through its public API: ask and tell
on the study the run opened (`kvtune.study.tracked.TrackedStudy`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import optuna
from rich.console import Console
from rich.markup import escape

from kvtune import documents, present
from kvtune.documents import Ablation, Confirmation
from kvtune.errors import UserError
from kvtune.measure.evaluator import Evaluation, Evaluator
from kvtune.measure.session import Repetition, Session
from kvtune.metrics import Direction
from kvtune.optimizer import ask_at
from kvtune.present import fmt
from kvtune.space import Config, Space
from kvtune.spec import StudySpec
from kvtune.store import Store
from kvtune.study import ablation
from kvtune.study import confirm as confirmation
from kvtune.study.confirm import Measure
from kvtune.study.drift import DriftCheck
from kvtune.study.noise import NoiseFloor, check_not_client_bound
from kvtune.study.progress import progress
from kvtune.study.record import evaluation_of, tell
from kvtune.study.search import Search, search_counts, search_trials_done

if TYPE_CHECKING:
    from kvtune.library.warm import WarmStart
    from kvtune.measure.host_noise import Opened
    from kvtune.measure.hostprofile import HostProfile, Judgement


@dataclass(frozen=True)
class PhaseContext:
    """What every phase needs, built once by the run after the study is opened.
    `fingerprint` is this host's fingerprint key ("" before the run knows it: `kvtune
    run`'s host profile)."""

    spec: StudySpec
    space: Space
    session: Session
    evaluator: Evaluator
    store: Store
    console: Console
    warm: WarmStart
    fingerprint: str = ""

    @property
    def metric(self) -> str:
        return self.spec.objective.metric

    @property
    def direction(self) -> Direction:
        return self.spec.objective.resolved_direction

    @property
    def name(self) -> str:
        """The study's name (its results are stored under it)."""
        return self.spec.study


def resolve_constraints(context: PhaseContext, baseline: Evaluation) -> None:
    """Constraints relative to the baseline (`ops_per_sec >= 0.98 * baseline`) are checked
    in the search against the noise floor's medians."""
    context.evaluator.policy.constraints = [
        c.resolve(baseline.metrics) for c in context.spec.parsed_constraints]


# -- a capacity study's host profile ---------------------------------------------------------


@dataclass(frozen=True)
class ProfileResult:
    """The host profile at the defaults (`kvtune.measure.hostprofile`) and the judgement of
    the study's SLO against it (`refuse`/`warn`)."""

    profile: HostProfile
    judgement: Judgement

    def as_dict(self) -> dict[str, Any]:
        """As stored ("host_profile") and as `kvtune run` prints it."""
        return {**self.profile.as_dict(), "refused": self.judgement.refuse,
                "warning": self.judgement.warn}


class HostProfilePhase:
    """Before a capacity study's first search: the host profile at a configuration (its
    floor, the server's peak, the client's cost), printed and stored. An SLO the host
    cannot show is refused (UserError, exit 2) after it is stored; one within twice the
    floor is warned about. Nothing (None) for a study that is not a capacity study, or
    whose server is not on this host."""

    def __init__(self, context: PhaseContext) -> None:
        self.context = context

    def run(self, config: Config) -> ProfileResult | None:
        from kvtune.errors import TrialFailed
        from kvtune.measure.hostprofile import judge

        c = self.context
        if c.spec.capacity is None or not c.session.on_host:
            return None
        c.console.print("[bold]Host profile[/] (the defaults, a fresh server): the "
                        "server's peak, the latency floor and kvload's cost")
        try:
            prof = c.session.profile(config)
        except TrialFailed as e:
            raise UserError(f"the host profile failed on the defaults: {e.reason}") from None
        if prof is None:
            return None
        for line in prof.lines():
            c.console.print(f"  {line}", markup=False, highlight=False)
        result = ProfileResult(prof, judge(prof))
        c.store.put_result(c.name, "host_profile", result.as_dict())
        verdict = result.judgement
        if verdict.refuse:
            raise UserError(verdict.refuse)
        if verdict.warn:
            c.console.print(f"  [yellow]warning:[/] {escape(verdict.warn)}")
        return result


# -- the baseline and noise floor ------------------------------------------------------------


@dataclass(frozen=True)
class BaselineResult:
    """Trial `trial` at the defaults, its evaluation, and the noise floor it gave (pooled
    with the library's prior when one was kept)."""

    trial: int
    evaluation: Evaluation
    noise: NoiseFloor
    # The host's noise facts still being gathered (a target simulated in kvtune's own
    # process): the run stores them (`record()`) when its search ends. None: stored.
    host_noise: Opened | None = None


def in_process(session: Session) -> bool:
    """Whether the study's target is simulated in kvtune's own process: nothing is started
    (no server, no load generator; a capacity objective's knee searches are kvload's, a
    process), so nothing but kvtune runs for it while it measures."""
    from kvtune.targets.base import SimulatedTarget

    return isinstance(session.target, SimulatedTarget) and session.spec.capacity is None


class BaselinePhase:
    """Trial 0: the baseline configuration, measured for the noise floor. Afterwards the
    evaluator judges by its noise and its relative constraints are resolved. A failed
    baseline, or one the load generator (or a neighbour's steal) limited, is refused.
    The host's noise facts (`kvtune.measure.host_noise`) are stored after the noise floor,
    over 0.5 s; for a target simulated in kvtune's process their window opens with the
    baseline and stays open (`BaselineResult.host_noise`) until the run's search ends."""

    def __init__(self, context: PhaseContext) -> None:
        self.context = context

    def run(self, study: optuna.Study) -> BaselineResult:
        from kvtune.measure import host_noise

        c = self.context
        space, ev, metric = c.space, c.spec.evaluation, c.metric
        opened = host_noise.Opened(c.store, c.name, ev.steal_threshold) \
            if in_process(c.session) else None
        full = max(ev.noise_floor_runs, c.spec.repetitions)
        c.warm.open_bracket()
        n = c.warm.baseline_runs(full)  # fewer with the library's noise prior
        trial = ask_at(study, space.fixed_params(space.baseline))  # no other worker's
        config = space.suggest(trial)
        c.console.print(f"[bold]Baseline[/] (trial {trial.number}, the defaults): "
                        f"{n} repetitions to measure the noise floor")
        with progress(c.console) as prog:
            task = prog.add_task("baseline", total=n)
            e = c.evaluator.evaluate(config, "baseline", trial.number, n=n,
                                     on_rep=lambda _e: prog.advance(task))
            c.warm.complete_baseline(
                e, full, lambda: c.evaluator.add(e, "baseline", trial.number, planned=full))
        tell(study, trial, e, "baseline", c.spec.constraints)
        if e.failed:
            raise UserError(f"the baseline (defaults) failed: {e.failed}\n{e.failed_stderr}")
        resolve_constraints(c, e)
        # With the library's prior (kvtune.library.warm), the objective's CoV is pooled.
        noise = c.warm.pool(NoiseFloor.of(e, metric, ev), metric, ev)
        c.evaluator.noise_cov = noise.cov.get(metric)
        c.store.put_result(c.name, "noise_floor", noise.as_dict())
        noise.report(c.console, metric, ev)
        if opened is None:
            host_noise.record(c.store, c.name, None, ev.steal_threshold)
        try:
            check_not_client_bound(e)
        except UserError:
            if opened is not None:
                opened.record()  # a refused baseline keeps its facts too
            raise
        return BaselineResult(trial.number, e, noise, opened)


@dataclass(frozen=True)
class Resumed:
    """What a study's stored trials say for this host fingerprint: its baseline (None: not
    measured yet) and the best feasible evaluation so far."""

    baseline: Evaluation | None
    incumbent: Evaluation | None


def checked_trials(c: PhaseContext, study: optuna.Study,
                   states: tuple[optuna.trial.TrialState, ...] | None = None
                   ) -> list[optuna.trial.FrozenTrial]:
    """The study's trials read back from storage (input: a resumed study's, a fleet's
    peers'), each one's attributes checked as the screens check them
    (`kvtune.store.check_trial_attrs`) before a phase compares or measures them again."""
    from kvtune.store import check_trial_attrs

    trials = study.get_trials(deepcopy=False, states=states)
    for t in trials:
        check_trial_attrs(t.user_attrs, f"study {c.name!r} in {c.store.url}, trial {t.number}")
    return trials


def read_back(context: PhaseContext, study: optuna.Study,
              known: Evaluation | None = None) -> Resumed:
    """The baseline and the incumbent of this host fingerprint's finished trials (another
    host's are never compared with this one's; `known`: the baseline this process knows
    already, if the trials hold none); with a baseline, the evaluator's relative
    constraints and noise (the stored noise floor) as they were."""
    c = context
    baseline = known
    best: Evaluation | None = None
    for t in checked_trials(c, study, (optuna.trial.TrialState.COMPLETE,)):
        if t.user_attrs.get("fingerprint", c.fingerprint) != c.fingerprint:
            continue  # another host's: never compared with this host's
        e = evaluation_of(t, c.metric)
        if t.user_attrs.get("kind") == "baseline":
            baseline = e
        if e.feasible and (best is None or c.evaluator.better(e.value, best.value)):
            best = e
    if baseline is not None:
        resolve_constraints(c, baseline)
        nf = c.store.document(c.name, documents.NoiseFloor, c.fingerprint)
        if nf is not None:
            c.evaluator.noise_cov = nf.cov.get(c.metric)
    return Resumed(baseline, best)


# -- the search ------------------------------------------------------------------------------

Stopped = Literal["trials", "time", "grid", "converged"]


@dataclass(frozen=True)
class SearchResult:
    """The search as it ended: its measured trials (this study's, all processes'), why it
    stopped, the incumbent (best feasible evaluation) and the proposals never measured."""

    measured: int
    stopped: Stopped
    incumbent: Evaluation | None
    rejected: int = 0
    repaired: int = 0
    repeats: int = 0


class DriftPhase:
    """The baseline measured again after a search trial (None: at the end of the search)
    and compared with its first measurement; stored as "drift". None when the measurement
    failed."""

    def __init__(self, context: PhaseContext) -> None:
        self.context = context

    def run(self, baseline: Evaluation, after_trial: int | None) -> documents.Drift | None:
        c = self.context
        rec = DriftCheck(c.spec, c.evaluator, c.store, c.console).run(
            c.space.baseline_config(), baseline, after_trial)
        return None if rec is None else documents.build("drift", rec)


class SearchPhase:
    """The search until the budget is spent (`Search`: ask, evaluate or reuse, tell, keep
    the incumbent, drift checks through `drift`). `loop` is the search loop's class (a
    fleet worker's takes a budget slot per trial)."""

    def __init__(self, context: PhaseContext, drift: Callable[[int | None], object],
                 loop: type[Search] = Search) -> None:
        self.context = context
        c = context
        self.loop = loop(c.spec, c.space, c.evaluator, c.session.ctx, c.console, drift)

    def run(self, study: optuna.Study, started: float,
            incumbent: Evaluation | None) -> SearchResult:
        return self.result(study, self.loop.run(study, started, incumbent))

    def result(self, study: optuna.Study, incumbent: Evaluation | None) -> SearchResult:
        counts = search_counts(study)
        return SearchResult(search_trials_done(study), self.loop.stopped, incumbent,
                            counts["rejected"], counts["repaired"], counts["repeats"])


# -- the confirmation and the ablation -------------------------------------------------------


def say_measured(context: PhaseContext, phase: str, n: int, config: Config,
                 rep: Repetition) -> None:
    """One line per measurement of a long phase (the progress a log keeps): which
    configuration, its objective, or why it did not count."""
    from kvtune.safety.text import for_markup

    c = context
    baseline = c.space.baseline
    changed = [f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in config.items()
               if baseline.get(k) != v]
    who = " ".join(changed) if changed else "baseline"
    if rep.status == "failed":
        what = ("spoiled by the host, not counted" if rep.raw.get("transient")
                else "failed")
        c.console.print(f"  {phase} {n}: {for_markup(who)}: {what}: "
                        f"{for_markup(rep.reason)}", highlight=False)
        return
    v = rep.metrics.get(c.metric)
    lo, hi = (rep.metrics.get(f"{c.metric}_ci_low"),
              rep.metrics.get(f"{c.metric}_ci_high"))
    ci = (f" (95% CI {fmt(lo)} … {fmt(hi)})"
          if isinstance(lo, int | float) and isinstance(hi, int | float) else "")
    c.console.print(f"  {phase} {n}: {for_markup(who)}: {c.metric} {fmt(v)}{ci}",
                    highlight=False)


def status(rep: Repetition) -> str:
    """A repetition's status for the interleaved phases: "skipped" when the host spoiled it
    (the arm is measured again next round), else its own."""
    return "skipped" if rep.status == "failed" and rep.raw.get("transient") else rep.status


def measuring(context: PhaseContext, kind: str, phase: str) -> Measure:
    """The `measure` function an interleaved phase is given: one repetition through the
    evaluator (stored as `kind`), said as the `phase`'s n-th measurement."""
    seen = 0

    def measure(config: Config) -> tuple[str, str, dict[str, Any]]:
        nonlocal seen
        rep = context.evaluator.run_one(config, kind, None)
        seen += 1
        say_measured(context, phase, seen, config, rep)
        return status(rep), rep.reason, rep.metrics

    return measure


class ConfirmationPhase:
    """Re-run the top candidates and the baseline interleaved, then recommend the best
    candidate whose improvement is significant — or say that none is (a Pareto study: its
    confirmed front). `confirmed_by`: the fleet worker that claimed the confirmation (it
    is stored with its name and this host's fingerprint)."""

    def __init__(self, context: PhaseContext) -> None:
        self.context = context

    def _check(self, config: dict[str, Any], where: str) -> None:
        """A candidate read back from the results database fits the study's space (it
        came from storage, which anyone with the file or the database could have written)."""
        self.context.space.check(config, f"study {self.context.name!r} in "
                                         f"{self.context.store.url}, {where}")

    def run(self, study: optuna.Study, confirmed_by: str | None = None) -> Confirmation:
        c = self.context
        spec, ev = c.spec, c.spec.evaluation
        baseline = c.space.baseline_config()
        measure = measuring(c, "confirm", "confirmation")
        with progress(c.console) as prog:
            task = prog.add_task("confirm", total=None)

            def start(n: int) -> None:
                c.console.print(f"[bold]Confirmation[/]: baseline and {n} candidate(s), "
                                f"{ev.confirm_rounds} interleaved rounds")
                prog.update(task, total=ev.confirm_rounds * (n + 1))

            if spec.objective.multi:
                checked_trials(c, study)  # what the front is chosen from: checked first
                result = confirmation.confirm_front(
                    study, baseline,
                    [(o.metric, o.resolved_direction) for o in spec.objective.all], ev,
                    spec.seed, measure, start, lambda: prog.advance(task),
                    constraints=spec.parsed_constraints, check=self._check)
            else:
                # This host fingerprint's trials only (a heterogeneous study's other hosts
                # have their own baseline and confirmation).
                own = [t for t in checked_trials(c, study)
                       if t.user_attrs.get("fingerprint", c.fingerprint) == c.fingerprint]
                result = confirmation.confirm(
                    own, baseline, c.metric, c.direction, ev, spec.seed, measure, start,
                    lambda: prog.advance(task), constraints=spec.parsed_constraints,
                    slo=str(cap.slo) if (cap := spec.capacity) else None, check=self._check)
        doc: Confirmation = documents.build("confirmation", result)  # typed once, as stored
        if confirmed_by is not None:
            doc = doc.model_copy(update={"confirmed_by": confirmed_by,
                                         "fingerprint": c.fingerprint})
        c.store.put_result(c.name, "confirmation", doc)
        return doc


class AblationPhase:
    """The recommendation with each changed knob reverted, measured interleaved through
    the evaluator (`kvtune.study.ablation.ablate`, a pure function), stored as "ablation";
    its lines are the summary's (`kvtune show`), said once."""

    def __init__(self, context: PhaseContext, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.context = context
        self.clock = clock

    def run(self, confirmed: Confirmation) -> Ablation:
        c = self.context
        ev = c.spec.evaluation
        baseline = c.space.baseline_config()
        measure = measuring(c, "ablation", "ablation")
        first = ablation.first_rounds(ev)
        with progress(c.console) as prog:
            task = prog.add_task("ablation", total=None)
            total = 0

            def start(n: int) -> None:
                nonlocal total
                total = least = (n + 2) * first
                most = ablation.max_cost(confirmed, baseline, ev)
                per = c.evaluator.seconds_per_repetition()
                took = (f", about {present.duration(least * per)} to "
                        f"{present.duration(most * per)} at {present.duration(per)} a "
                        "repetition") if per else ""
                limit = (f"; no look after the first that would take it past "
                         f"{present.duration(ev.ablation_time)} in all "
                         "(evaluation.ablation_time)"
                         if ev.ablation_time is not None else "")
                c.console.print(
                    f"[bold]Ablation[/]: the recommendation with each of its {n} changes "
                    f"reverted, {first} interleaved rounds; more only for changes neither "
                    f"shown to carry the gain nor below {present.share(ev.ablation_share)} of it, "
                    f"up to "
                    f"{ev.ablation_max_rounds} rounds; then the changes that carry alone "
                    f"against the full recommendation, {first} rounds. Budget: {least} to "
                    f"{most} repetitions{took}{limit}")
                prog.update(task, total=least)

            def look(rounds: int, arms: int) -> None:
                nonlocal total
                total += rounds * (arms + 1)
                c.console.print(f"  ablation: {arms} change(s) still open, {rounds} "
                                "more rounds of them and the recommendation")
                prog.update(task, total=total)

            result = ablation.ablate(confirmed, baseline, c.metric, c.direction, ev,
                                     c.spec.seed, measure, start,
                                     lambda: prog.advance(task), look, self.clock)
        doc: Ablation = documents.build("ablation", result)  # typed once, as stored
        c.store.put_result(c.name, "ablation", doc)
        return doc
