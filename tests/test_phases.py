"""The study's phases as objects (`kvtune.study.phases`), each run alone on the synthetic
target from typed inputs, with no `StudyRun` around it: what each returns, what it
stores, and that the phases never reach back into the run that orders them."""

from __future__ import annotations

import ast
import time
from dataclasses import FrozenInstanceError, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from rich.console import Console

from kvtune import documents
from kvtune.errors import UserError
from kvtune.library.warm import WarmStart
from kvtune.measure.evaluator import Evaluator
from kvtune.measure.hostprofile import HostProfile
from kvtune.measure.session import Session
from kvtune.store import Store
from kvtune.study import phases
from kvtune.study.loader import load_study
from kvtune.study.phases import (
    AblationPhase,
    BaselinePhase,
    ConfirmationPhase,
    DriftPhase,
    HostProfilePhase,
    PhaseContext,
    SearchPhase,
    read_back,
)
from kvtune.study.tracked import TrackedStudy
from kvtune.targets.synthetic import SYNTHETIC_KNOBS, true_value

STUDY = """\
study: {name}
target: {{kind: synthetic, noise_cov: 0.02}}
knobs: {knobs}
objective: {objective}
budget: {{trials: {trials}}}
repetitions: 2
evaluation: {{noise_floor_runs: 3, confirm_top: 2, confirm_rounds: 4, drift_every: {drift}}}
sampler: {sampler}
seed: 4
"""
KNOBS = "[synthetic.x, synthetic.threads, synthetic.mode]"
BASELINE = {k.name: k.default for k in SYNTHETIC_KNOBS.values()}


def context(tmp: Path, name: str = "ph", trials: int = 6, drift: int = 0,
            sampler: str = "random", knobs: str = KNOBS,
            objective: str = "{metric: ops_per_sec}",
            fingerprint: str = "fp-1") -> PhaseContext:
    """A phase context built from its parts (a study file, its session, evaluator and
    store, a cold warm start), as a run would give it."""
    p = tmp / f"{name}.yaml"
    p.write_text(STUDY.format(name=name, trials=trials, drift=drift, sampler=sampler,
                              knobs=knobs, objective=objective))
    loaded = load_study(p)
    spec = loaded.spec
    session = Session(spec, loaded.knobs, None)
    space = session.preflight()
    store = Store(f"sqlite:///{tmp / (name + '.db')}")
    store.tag = {"fingerprint": fingerprint}
    obj = spec.objective
    evaluator = Evaluator(session, store, spec.study, obj.metric, obj.resolved_direction,
                          spec.parsed_constraints, spec.evaluation, spec.repetitions, spec.seed)
    console = Console(record=True, width=200)
    warm = WarmStart(SimpleNamespace(spec=spec, console=console), cold=True)  # type: ignore[arg-type]
    return PhaseContext(spec, space, session, evaluator, store, console, warm, fingerprint)


def study_of(c: PhaseContext) -> TrackedStudy:
    """The study as a run opens it: Optuna's, asked and told through `TrackedStudy`, which
    tags each trial with this host's fingerprint."""
    study = optuna.create_study(study_name=c.name, storage=c.store.storage,
                                direction=c.direction.text,
                                sampler=optuna.samplers.RandomSampler(seed=1))
    return TrackedStudy(study, c.store.storage,
                        lambda t: t.set_user_attr("fingerprint", c.fingerprint),
                        lambda _n: None)


def test_the_context_is_frozen_and_says_the_objective() -> None:
    fields = {f: None for f in ("spec", "space", "session", "evaluator", "store", "console",
                                "warm")}
    c = PhaseContext(**fields)  # type: ignore[arg-type]
    with pytest.raises(FrozenInstanceError):
        c.fingerprint = "other"  # type: ignore[misc]
    assert replace(c, fingerprint="x").fingerprint == "x" and c.fingerprint == ""


def test_the_baseline_phase_measures_trial_zero_and_stores_its_noise_floor(
        tmp_path: Path) -> None:
    c = context(tmp_path)
    study = study_of(c)
    got = BaselinePhase(c).run(study)
    assert got.trial == 0 and study.trials[0].user_attrs["kind"] == "baseline"
    assert all(got.evaluation.config[k] == BASELINE[k] for k in got.evaluation.config)
    assert len(got.evaluation.values) == 3  # the noise floor's runs
    assert got.noise.n == 3 and got.noise.cov["ops_per_sec"] > 0
    stored = c.store.document(c.name, documents.NoiseFloor, "fp-1")
    assert stored is not None and stored.n == got.noise.n
    assert stored.cov["ops_per_sec"] == pytest.approx(got.noise.cov["ops_per_sec"])
    assert c.evaluator.noise_cov == got.noise.cov["ops_per_sec"]  # the search judges by it
    assert "Baseline" in c.console.export_text()


def test_the_search_phase_says_what_it_measured_why_it_stopped_and_its_best(
        tmp_path: Path) -> None:
    c = context(tmp_path, trials=5, drift=2)
    study = study_of(c)
    base = BaselinePhase(c).run(study).evaluation
    drifts: list[int | None] = []
    got = SearchPhase(c, drifts.append).run(study, time.monotonic(), base)
    trials = [t for t in study.trials if t.user_attrs.get("kind") == "trial"]
    assert got.measured == 5 == len(trials) and got.stopped == "trials"
    assert drifts == [2, 4, None]  # after the 2nd and 4th trial (numbers 2, 4), at the end
    best = max([base.value, *(t.value for t in trials
                              if t.value is not None and all(
                                  v <= 0 for v in t.user_attrs["violations"]))])
    assert got.incumbent is not None and got.incumbent.value == best
    assert got.rejected == got.repaired == got.repeats == 0
    assert "search: 5 measured trials" in c.console.export_text()


def test_the_drift_phase_measures_the_baseline_again_and_returns_its_record(
        tmp_path: Path) -> None:
    c = context(tmp_path, name="dr", drift=2)
    study = study_of(c)
    base = BaselinePhase(c).run(study).evaluation
    got = DriftPhase(c).run(base, 3)
    assert isinstance(got, documents.Drift) and got.after_trial == 3
    assert len(got.values) == 5  # at least DRIFT_REPETITIONS
    assert got.change is not None and got.change.n_baseline == len(base.values)
    stored = c.store.documents(c.name, "drift")
    assert len(stored) == 1 and stored[0].values == got.values
    assert "re-measuring the baseline after trial 3" in c.console.export_text()
    end = DriftPhase(c).run(base, None)
    assert end is not None and end.after_trial is None
    assert len(c.store.documents(c.name, "drift")) == 2


def test_a_grid_search_stops_when_its_grid_is_measured(tmp_path: Path) -> None:
    c = context(tmp_path, name="grid", trials=20, sampler="grid", knobs="[synthetic.mode]")
    study = study_of(c)
    base = BaselinePhase(c).run(study).evaluation
    got = SearchPhase(c, lambda _n: None).run(study, time.monotonic(), base)
    assert got.stopped == "grid" and got.measured < 20
    assert "every configuration of the grid is measured" in c.console.export_text()


def test_read_back_finds_this_hosts_baseline_and_incumbent_only(tmp_path: Path) -> None:
    c = context(tmp_path, trials=4)
    study = study_of(c)
    base = BaselinePhase(c).run(study).evaluation
    SearchPhase(c, lambda _n: None).run(study, time.monotonic(), base)
    assert {t.user_attrs["fingerprint"] for t in study.trials} == {"fp-1"}
    got = read_back(c, study)
    assert got.baseline is not None and got.baseline.value == base.value
    feasible = [t.value for t in study.trials if t.value is not None
                and all(v <= 0 for v in t.user_attrs["violations"])]
    assert got.incumbent is not None and got.incumbent.value == max(feasible)
    other = read_back(replace(c, fingerprint="fp-2"), study)
    assert other.baseline is None and other.incumbent is None


def test_the_confirmation_phase_confirms_the_search_it_is_given(tmp_path: Path) -> None:
    c = context(tmp_path, trials=6)
    study = study_of(c)
    base = BaselinePhase(c).run(study).evaluation
    SearchPhase(c, lambda _n: None).run(study, time.monotonic(), base)
    got = ConfirmationPhase(c).run(study)
    assert isinstance(got, documents.Confirmation)
    assert 1 <= len(got.candidates) <= 2 and got.confirmed_by is None
    reps = c.store.repetitions(c.name, "confirm")
    assert len(reps) >= 4 * (len(got.candidates) + 1)  # every arm in every round
    stored = c.store.document(c.name, documents.Confirmation, "fp-1")
    assert stored is not None and stored.verdict == got.verdict
    assert [x.trial for x in stored.candidates] == [x.trial for x in got.candidates]
    assert "confirmation 1:" in c.console.export_text()  # each measurement said


def test_a_fleet_confirmation_is_stored_once_with_who_confirmed_it(tmp_path: Path) -> None:
    c = context(tmp_path, trials=4)
    study = study_of(c)
    base = BaselinePhase(c).run(study).evaluation
    SearchPhase(c, lambda _n: None).run(study, time.monotonic(), base)
    got = ConfirmationPhase(c).run(study, confirmed_by="w1")
    assert got.confirmed_by == "w1" and got.fingerprint == "fp-1"
    rows = c.store.results(c.name, "confirmation")
    assert len(rows) == 1 and rows[0]["confirmed_by"] == "w1"


def test_the_ablation_phase_takes_a_typed_confirmation(tmp_path: Path) -> None:
    """Given a confirmation (typed) whose recommendation changes x (most of the gain) and
    threads (0.2%), the ablation measures through the evaluator and says x carries it."""
    c = context(tmp_path, name="ab")
    rec = {**BASELINE, "synthetic.x": 7.0, "synthetic.threads": 5}
    rec = {k: v for k, v in rec.items() if k in c.space.baseline}
    assert true_value(rec) > 1.2 * true_value(dict(c.space.baseline))
    conf = documents.build("confirmation", {
        "recommended": {"name": "trial 3", "config": rec, "samples": [1.0, 1.0],
                        "comparison": {"p_value": 0.001, "change": 0.3,
                                       "change_ci_low": 0.2, "change_ci_high": 0.4},
                        "p_adjusted": 0.003},
        "baseline": {"samples": [1.0, 1.0]}})
    got = AblationPhase(c).run(conf)
    assert isinstance(got, documents.Ablation) and not got.skipped
    assert set(got.changes) == {"synthetic.x", "synthetic.threads"}
    assert "synthetic.x" in got.carries
    assert len(c.store.repetitions(c.name, "ablation")) == got.measurements
    stored = c.store.document(c.name, documents.Ablation, "fp-1")
    assert stored is not None and stored.carries == got.carries
    assert "Ablation" in c.console.export_text()


def test_the_ablation_phase_skips_a_confirmation_that_recommends_nothing(
        tmp_path: Path) -> None:
    c = context(tmp_path, name="none")
    got = AblationPhase(c).run(documents.Confirmation())
    assert got.skipped and c.store.repetitions(c.name, "ablation") == []


def _profile_doc(floor: float, bound: float) -> dict[str, Any]:
    def step(rate: float, lat: float) -> dict[str, Any]:
        return {"rate": rate, "latency_us": lat, "ci": [lat * 0.8, lat * 1.2],
                "windows": 12, "good_windows": 12}

    return {"slo": {"label": "p99", "bound_us": bound}, "burst_rate": 40000.0,
            "floor": step(1000, floor), "mid": step(20000, floor),
            "client": {"cost_us_per_request": 20.0, "cpus": 1, "limit_rate": 90000.0}}


class _ProfilingSession:
    """A session on this host that profiles as told (the phase's input)."""

    on_host = True

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.profiled: list[dict[str, Any]] = []

    def profile(self, config: dict[str, Any]) -> HostProfile:
        self.profiled.append(config)
        return HostProfile(self.doc, {"driver": "acpi_idle"})


def test_the_host_profile_phase_is_nothing_for_a_latency_study(tmp_path: Path) -> None:
    c = context(tmp_path, name="lat")
    assert HostProfilePhase(c).run(dict(c.space.baseline)) is None
    assert c.store.last_result(c.name, "host_profile") is None


def test_the_host_profile_phase_returns_its_judgement_and_stores_a_refusal_first(
        tmp_path: Path) -> None:
    c = context(tmp_path, name="cap", objective='{metric: capacity, slo: "p99_us <= 500"}')
    assert c.spec.capacity is not None
    fine = _ProfilingSession(_profile_doc(100, 500))
    got = HostProfilePhase(replace(c, session=fine)).run(BASELINE)  # type: ignore[arg-type]
    assert got is not None and got.judgement.refuse is None
    assert got.as_dict()["kvload"] == fine.doc and fine.profiled == [BASELINE]
    stored = c.store.last_result(c.name, "host_profile")
    assert stored["refused"] is None and stored["kvload"]["burst_rate"] == 40000.0
    low = _ProfilingSession(_profile_doc(900, 500))
    with pytest.raises(UserError, match="cannot show"):
        HostProfilePhase(replace(c, session=low)).run(BASELINE)  # type: ignore[arg-type]
    refused = c.store.last_result(c.name, "host_profile")
    assert refused["refused"] and "cannot show" in refused["refused"]


def test_the_phases_never_read_the_run() -> None:
    """The phases module imports no run and names no `StudyRun`: what a phase needs comes
    in its context and its arguments."""
    src = Path(phases.__file__).read_text()
    tree = ast.parse(src)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "kvtune.study.run" not in imported and "kvtune.study.worker" not in imported
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "StudyRun" not in names


def test_a_fleet_worker_judges_relative_constraints_by_the_baseline_it_waited_for(
        tmp_path: Path) -> None:
    """Worker w0 claims and measures this host's baseline; w1, whose trials need it (a
    constraint relative to the baseline), waits and takes it: w1's evaluator must then
    judge the constraint against that baseline, as w0's does (an unresolved relative
    constraint is never judged: every trial would be told feasible)."""
    from kvtune.fleet.claims import Fleet
    from kvtune.study.run import StudyRun
    from kvtune.study.worker import FleetWorker

    p = tmp_path / "rel.yaml"
    p.write_text(STUDY.format(name="rel", trials=4, drift=0, sampler="random", knobs=KNOBS,
                              objective="{metric: p99_us}")
                 + "constraints: ['ops_per_sec >= 0.98 * baseline']\n")
    run = StudyRun(load_study(p), Console(quiet=True), base_dir=tmp_path, worker="w1",
                   strategy=FleetWorker)
    run.fingerprint, run.fp_key = {"cpus": 1}, "fp-rel"
    c = run.context()
    assert [k.baseline for k in c.evaluator.policy.constraints] == [None]
    other = Fleet(run.store.engine, "rel", "w0")  # alive, beating, holding the claim
    other.register({"cpus": 1}, "fp-rel")
    assert other.claim("baseline:fp-rel").won
    study = study_of(c)
    measured = BaselinePhase(c).run(study).evaluation  # what w0 measured and stored
    c.evaluator.policy.constraints = list(c.spec.parsed_constraints)  # w1's, untouched
    c.evaluator.noise_cov = None
    got = run.strategy.baseline(c, study)
    assert got is not None and got.value == measured.value
    assert c.evaluator.noise_cov is not None  # the stored noise floor
    bound = [k.baseline for k in c.evaluator.policy.constraints]
    assert bound == [pytest.approx(measured.metrics["ops_per_sec"])]


@pytest.mark.parametrize("attrs,words", [
    ({"violations": "x"}, "stored violations"),
    ({"fingerprint": ["fp-1"]}, "stored fingerprint"),
])
def test_a_resumed_or_confirmed_studys_trials_are_checked_before_they_are_compared(
        tmp_path: Path, attrs: dict[str, Any], words: str) -> None:
    """A resumed study reads its finished trials back, the confirmation picks from them:
    a trial attribute of the wrong type is refused naming the trial (it was a TypeError in
    `read_back` and in the confirmation's candidates)."""
    c = context(tmp_path)
    study = optuna.create_study(study_name=c.name, storage=c.store.storage,
                                direction=c.direction.text)
    study.add_trial(optuna.trial.create_trial(
        value=1.0, user_attrs={"kind": "trial", "config": dict(c.space.baseline),
                               "violations": [0.0], "fingerprint": "fp-1", **attrs}))
    with pytest.raises(UserError, match=rf"study 'ph' in .*, trial 0: the {words}"):
        phases.read_back(c, study)
    with pytest.raises(UserError, match=rf"trial 0: the {words}"):
        phases.ConfirmationPhase(c).run(study)
