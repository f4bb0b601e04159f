"""The whole search loop on the synthetic target: baseline first, failures tolerated,
resumable, confirmation that can say yes and can say no."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import optuna
import pytest
from support.cli import cli

from kvtune.study.loader import load_study as load
from kvtune.study.run import StudyRun
from kvtune.targets.synthetic import true_value

STUDY = """\
study: {name}
target: {{kind: synthetic, noise_cov: {noise}}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: ops_per_sec}}
budget: {{trials: {trials}}}
repetitions: 3
evaluation: {{noise_floor_runs: 4, confirm_top: 2, confirm_rounds: 5, drift_every: 0}}
sampler: {sampler}
seed: {seed}
"""


def write(tmp: Path, name: str = "s", trials: int = 20, noise: float = 0.05,
          sampler: str = "tpe", seed: int = 3) -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(STUDY.format(name=name, trials=trials, noise=noise, sampler=sampler, seed=seed))
    return p


def test_baseline_is_trial_zero_and_the_search_improves(in_tmp: Path) -> None:
    loaded = load(write(in_tmp))
    run = StudyRun(loaded, base_dir=in_tmp)
    result = run.run()
    study = optuna.load_study(study_name="s", storage=run.store.storage)
    t0 = study.trials[0]
    assert t0.user_attrs["kind"] == "baseline"
    assert t0.user_attrs["config"] == {"synthetic.x": 2.0, "synthetic.threads": 4,
                                       "synthetic.mode": "a", "synthetic.flag": False}
    assert len(t0.user_attrs["eval"]["values"]) == 4  # the noise floor runs
    assert len([t for t in study.trials if t.user_attrs.get("kind") == "trial"]) == 20
    assert result is not None
    rec = result.recommended
    assert rec is not None, result.verdict
    # The recommendation is truly better than the defaults on the known surface.
    assert true_value(dict(rec.config)) > 1.15 * true_value(t0.user_attrs["config"])
    assert rec.comparison is not None and (rec.comparison.ci_low or 0) > 0
    # Every repetition is kept raw.
    reps = run.store.repetitions("s")
    assert {r["kind"] for r in reps} >= {"baseline", "trial", "confirm"}


def test_failure_region_fails_trials_but_the_study_goes_on(in_tmp: Path) -> None:
    p = in_tmp / "f.yaml"
    p.write_text(STUDY.format(name="f", trials=12, noise=0.05, sampler="grid", seed=1)
                 .replace("[synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]",
                          "[{name: synthetic.threads, range: [13, 15], default: 13}, "
                          "synthetic.mode]"))
    run = StudyRun(load(p), base_dir=in_tmp)
    run.run(confirm=False)
    study = optuna.load_study(study_name="f", storage=run.store.storage)
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed and all("refuses to start" in t.user_attrs["failed"] for t in failed)
    assert all(t.params.get("synthetic.mode") == "c" and t.params["synthetic.threads"] >= 14
               for t in failed)
    assert any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials[1:])


def test_no_significant_improvement_is_reported_honestly(in_tmp: Path) -> None:
    """When the only knob does nothing, confirmation must not recommend anything."""
    p = in_tmp / "n.yaml"
    p.write_text(STUDY.format(name="n", trials=8, noise=0.10, sampler="random", seed=5)
                 .replace("[synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]",
                          "[synthetic.flag]"))  # flag does nothing while x = 2
    result = StudyRun(load(p), base_dir=in_tmp).run()
    assert result is not None and result.recommended is None
    assert "no" in result.verdict


@pytest.mark.integration  # the study is a process of its own, killed with SIGKILL mid-trial
def test_resume_after_sigkill_keeps_finished_trials(in_tmp: Path) -> None:
    spec = write(in_tmp, name="r", trials=30, noise=0.05)
    code = f"""
import os, signal
from pathlib import Path
from kvtune.study.loader import load_study as load
from kvtune.study.run import StudyRun
import kvtune.measure.evaluator as ev
count = 0
orig = ev.Evaluator.run_one
def run_one(self, *a, **k):
    global count
    count += 1
    if count == 30:
        os.kill(os.getpid(), signal.SIGKILL)
    return orig(self, *a, **k)
ev.Evaluator.run_one = run_one
StudyRun(load(Path({str(spec)!r})), base_dir=Path({str(in_tmp)!r})).run()
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=in_tmp, capture_output=True)
    assert p.returncode == -9
    storage = f"sqlite:///{in_tmp}/results/r.db"
    before = optuna.load_study(study_name="r", storage=storage)
    done_before = [t for t in before.trials if t.state.is_finished()]
    assert done_before, "some trials finished before the kill"
    running = [t for t in before.trials if t.state == optuna.trial.TrialState.RUNNING]
    assert len(running) == 1
    run = StudyRun(load(spec), base_dir=in_tmp)
    run.run(confirm=False)
    after = optuna.load_study(study_name="r", storage=storage)
    by_number = {t.number: t for t in after.trials}
    for t in done_before:  # nothing finished was lost or re-run
        assert by_number[t.number].state == t.state
        assert by_number[t.number].value == t.value
    assert sum(1 for t in after.trials if t.user_attrs.get("kind") == "baseline") == 1
    interrupted = by_number[running[0].number]
    assert interrupted.state == optuna.trial.TrialState.FAIL
    # ... and its configuration was queued again and measured.
    again = [t for t in after.trials if t.number > interrupted.number
             and t.params == interrupted.params and t.state.is_finished()]
    assert again


def test_cli_show_json(in_tmp: Path) -> None:
    spec = write(in_tmp, name="c", trials=4)
    r = cli("tune", str(spec), "--no-confirm", cwd=in_tmp)
    assert r.returncode == 0, r.stderr
    r = cli("show", str(spec), "--json", cwd=in_tmp)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["baseline"]["kind"] == "baseline"
    assert len(data["trials"]) == 5
    r = cli("show", "nosuch", cwd=in_tmp)
    assert r.returncode == 2 and "no results for study 'nosuch'" in r.stderr


def test_sweep_measures_each_value_with_repetitions(in_tmp: Path) -> None:
    from rich.console import Console

    from kvtune.study.commands import sweep

    spec = write(in_tmp, name="sw", trials=1, noise=0.02)
    res = sweep(load(spec), "synthetic.x", ["2", "5", "7"], 4, Console(stderr=True),
                base_dir=in_tmp)
    assert [r["value"] for r in res["rows"]] == [2.0, 5.0, 7.0]
    assert all(r["n"] == 4 for r in res["rows"])
    medians = [r["median"] for r in res["rows"]]
    assert medians[0] < medians[1] < medians[2]  # the peak of the surface is at x = 7
    assert all(r["ci"][0] <= r["median"] <= r["ci"][1] for r in res["rows"])
    assert res["baseline_value"] == 2.0


def test_bad_set_value_is_a_user_error(in_tmp: Path) -> None:
    spec = write(in_tmp, name="bs")
    r = cli("run", str(spec), "--set", "synthetic.threads=99", cwd=in_tmp)
    assert r.returncode == 2
    assert "--set synthetic.threads=99: '99' is outside [1, 16]" in r.stderr
    r = cli("sweep", str(spec), "--knob", "synthetic.nope", cwd=in_tmp)
    assert r.returncode == 2 and "unknown knob 'synthetic.nope'" in r.stderr


def test_missing_kvload_is_a_harness_error(in_tmp: Path) -> None:
    p = in_tmp / "m.yaml"
    p.write_text("study: m\ntarget: {kind: memcached}\nload: {rate: 100}\n")
    env = dict(os.environ, KVLOAD=str(in_tmp / "no-such-kvload"))
    r = cli("tune", str(p), cwd=in_tmp, env=env)
    assert r.returncode == 3  # a harness fault
    assert "no-such-kvload is not an executable kvload binary" in r.stderr


NARROWED = STUDY.replace(
    "[synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]",
    "[synthetic.x, {{name: synthetic.threads, range: [8, 12]}}]")


def test_a_baseline_outside_a_narrowed_range_is_one_more_value_of_the_search(
        in_tmp: Path) -> None:
    """threads' default 4 lies outside the study's range [8, 12]: the baseline measures 4,
    the search samples 4 beside the range, and Optuna never sees a value out of range."""
    p = in_tmp / "nr.yaml"
    p.write_text(NARROWED.format(name="nr", trials=16, noise=0.05, sampler="random", seed=2))
    run = StudyRun(load(p), base_dir=in_tmp)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.run(confirm=False)
    assert not [w for w in caught if "out of range" in str(w.message)], \
        [str(w.message) for w in caught]
    study = optuna.load_study(study_name="nr", storage=run.store.storage)
    threads = [t.user_attrs["config"]["synthetic.threads"] for t in study.trials]
    assert threads[0] == 4
    assert 4 in threads[1:], "the baseline's value is searched too"
    assert all(v == 4 or 8 <= v <= 12 for v in threads)
    assert study.user_attrs["space"]["domains"]["synthetic.threads"]["special"] == [4]
    assert study.user_attrs["baseline"]["synthetic.threads"] == 4


def test_a_host_value_outside_the_overridden_choices_joins_them() -> None:
    """A categorical host knob whose current value the study's choices leave out: the space
    adds it, and trial 0 gets exactly that value from Optuna."""
    from kvtune.host.facts import this_host
    from kvtune.knobs.appliers.base import Applier, Availability, HostContext
    from kvtune.knobs.domain import Domain, Value
    from kvtune.knobs.knob import Knob
    from kvtune.space import build_space

    class HostNow(Applier):
        scope = "host"

        def where(self) -> str:
            return "a test file"

        def check(self, ctx: HostContext) -> Availability:
            return Availability(True)

        def current(self, ctx: HostContext) -> Value | None:
            return "madvise"

        def apply(self, value: Value, env: object) -> None:
            raise AssertionError("preflight applies nothing")

    knob = Knob("test.thp", Domain("categorical", choices=("always", "never")), HostNow())
    space = build_space([knob], HostContext(this_host()), None)
    assert space.baseline == {"test.thp": "madvise"}
    assert space.knob("test.thp").domain.choices == ("always", "never", "madvise")
    study = optuna.create_study()
    study.enqueue_trial(space.fixed_params(space.baseline))
    assert space.suggest(study.ask()) == {"test.thp": "madvise"}


# -- issue 12: every trial a real candidate; statistics that can say yes ------------------


def test_a_rule_breaking_candidate_is_never_measured(in_tmp: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule on the synthetic surface (x above 8 with mode c is forbidden): proposals that
    break it are told infeasible and never measured, and the budget counts only measured
    trials."""
    from kvtune.knobs import rules
    from kvtune.optimizer import REJECTED

    rule = rules.Rule("synthetic-x-mode", ("synthetic.x", "synthetic.mode"),
                      lambda v: float(v.get("synthetic.x")) > 5
                      and v.get("synthetic.mode") == "c", "x above 5 needs mode a or b")
    monkeypatch.setattr(rules, "RULES", [*rules.RULES, rule])
    p = write(in_tmp, name="rb", trials=15, sampler="random", seed=4)
    run = StudyRun(load(p), base_dir=in_tmp)
    run.run(confirm=False)
    study = optuna.load_study(study_name="rb", storage=run.store.storage)
    rejected = [t for t in study.trials if t.user_attrs.get("kind") == REJECTED]
    assert rejected, "random search proposes x > 5 with mode c about one time in five"
    assert all(t.user_attrs["rules"] == ["synthetic-x-mode"] for t in rejected)
    measured = [r["params"] for r in run.store.repetitions("rb")]
    assert measured and not any(c["synthetic.x"] > 5 and c["synthetic.mode"] == "c"
                                for c in measured)
    assert sum(1 for t in study.trials if t.user_attrs.get("kind") == "trial") == 15


def test_a_repeated_configuration_is_not_a_new_trial(in_tmp: Path) -> None:
    """[synthetic.flag] has two configurations; the baseline measures one. The search
    measures the other once and reuses results after that, without spending the budget,
    and stops when the sampler only repeats itself."""
    p = in_tmp / "rp.yaml"
    p.write_text(STUDY.format(name="rp", trials=6, noise=0.05, sampler="random", seed=5)
                 .replace("[synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]",
                          "[synthetic.flag]"))
    run = StudyRun(load(p), base_dir=in_tmp)
    run.run(confirm=False)
    study = optuna.load_study(study_name="rp", storage=run.store.storage)
    trials = study.trials  # one copy (each study.trials deep-copies every trial)
    kinds = [t.user_attrs.get("kind") for t in trials]
    assert kinds.count("trial") == 1 and kinds.count("repeat") >= 2
    reps = run.store.repetitions("rp")
    assert {r["kind"] for r in reps} == {"baseline", "trial"}
    assert len([r for r in reps if r["kind"] == "trial"]) <= 6  # one trial's repetitions
    for t in trials:
        if t.user_attrs.get("kind") == "repeat":
            src = trials[t.user_attrs["repeat_of"]]
            assert src.user_attrs["config"] == t.user_attrs["config"] and src.value == t.value


def test_a_confirmation_that_can_never_pass_is_refused(in_tmp: Path) -> None:
    """One confirmation round has no spread for the paired t: the study is refused
    before anything is measured."""
    from kvtune.errors import UserError

    p = in_tmp / "cp.yaml"
    p.write_text(STUDY.format(name="cp", trials=4, noise=0.05, sampler="random", seed=1)
                 .replace("confirm_top: 2, confirm_rounds: 5", "confirm_top: 4, confirm_rounds: 1"))
    with pytest.raises(UserError) as err:
        StudyRun(load(p), base_dir=in_tmp).run()
    text = str(err.value) + " ".join(getattr(err.value, "problems", []) or [])
    assert "a spread needs at least 2 rounds" in text and "confirm_rounds >= 4" in text
    assert not (in_tmp / "results" / "cp.db").exists() or not StudyRun(
        load(p), base_dir=in_tmp).store.repetitions("cp")
    r = cli("tune", str(p), cwd=in_tmp)
    assert r.returncode == 2 and "can never show a significant improvement" in r.stderr


@pytest.mark.integration  # starts memcached with flags it refuses
def test_a_server_that_fails_at_start_shows_its_own_message() -> None:
    """memcached -t 12 -o hashpower=14 exits at start; the failure says why."""
    from kvtune.errors import TrialFailed
    from kvtune.knobs.appliers.base import Launch
    from kvtune.spec import TargetSpec
    from kvtune.targets import make_target

    target = make_target(TargetSpec(kind="memcached"))
    launch = Launch(flags=["-t", "12"], options={"hashpower": "14"})
    with pytest.raises(TrialFailed) as err:
        server = target.start(launch)  # type: ignore[attr-defined]
        target.stop(server)  # type: ignore[attr-defined]
    assert "exited with code 1 at start: Hash table power size (14) cannot be equal to " \
           "or less than item lock table (14)" in err.value.reason


def test_the_independent_tpe_variant_samples_each_knob_on_its_own() -> None:
    """`tpe-independent` is the independent TPE, `tpe` the multivariate one. Since Optuna 5
    a TPESampler without `multivariate=` is multivariate for one objective, so the variant
    built without it was the default again (the sampler benchmark gave identical rows)."""
    from kvtune.optimizer import make_sampler

    def relative_space(kind: str) -> tuple[dict[str, object], list[float]]:
        sampler = make_sampler(kind, 3, 30, 1)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.optimize(lambda t: -(t.suggest_float("x", 0, 10) - 7) ** 2
                       - (t.suggest_int("t", 1, 16) - 2 * 7 - 4) ** 2, n_trials=14)
        trial = study.ask()
        space = sampler.infer_relative_search_space(study, study._storage.get_trial(
            trial._trial_id))
        return space, [t.params["x"] for t in study.trials[10:14]]

    joint, joint_x = relative_space("tpe")
    alone, alone_x = relative_space("tpe-independent")
    assert set(joint) == {"x", "t"}  # both knobs sampled from one joint model
    assert alone == {}  # each knob by its own model (sample_independent)
    assert joint_x != alone_x  # after the start-up trials the proposals differ


def test_every_measured_trial_carries_the_same_constraints(in_tmp: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The baseline, search trials and repeats are told with the same constraint names
    (GPSampler refuses a study whose trials have different numbers of constraints: the
    baseline used to lack `rules`); a rule-breaking proposal is infeasible by `rules`."""
    from kvtune.knobs import rules
    from kvtune.optimizer import REJECTED, RULES_CONSTRAINT

    rule = rules.Rule("synthetic-x-mode", ("synthetic.x", "synthetic.mode"),
                      lambda v: float(v.get("synthetic.x")) > 5
                      and v.get("synthetic.mode") == "c", "x above 5 needs mode a or b")
    monkeypatch.setattr(rules, "RULES", [*rules.RULES, rule])
    p = write(in_tmp, name="cs", trials=8, sampler="random", seed=4)
    run = StudyRun(load(p), base_dir=in_tmp)
    run.run(confirm=False)
    study = optuna.load_study(study_name="cs", storage=run.store.storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert {t.user_attrs.get("kind") for t in complete} >= {"baseline", "trial"}
    keys = {tuple(sorted(t.constraints)) for t in complete}
    assert len(keys) == 1 and RULES_CONSTRAINT in keys.pop()
    assert all(t.constraints[RULES_CONSTRAINT] == 0 for t in complete)
    assert all(t.constraints[RULES_CONSTRAINT] > 0 for t in study.trials
               if t.user_attrs.get("kind") == REJECTED)


def test_a_grid_stops_when_every_point_is_measured(in_tmp: Path) -> None:
    """A grid smaller than the trial budget is measured once per point, then the search
    stops: no run of reused repeats until the repeat limit."""
    p = in_tmp / "g.yaml"
    p.write_text(STUDY.format(name="g", trials=40, noise=0.05, sampler="grid", seed=1)
                 .replace("[synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]",
                          "[synthetic.mode, synthetic.flag]"))
    run = StudyRun(load(p), base_dir=in_tmp)
    run.run(confirm=False)
    study = optuna.load_study(study_name="g", storage=run.store.storage)
    configs = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in study.trials]
    assert run.space is not None
    grid = run.space.grid()
    assert len(set(configs)) == len(configs), "a grid point was proposed twice"
    assert len(configs) == len(grid)  # the baseline is one of the grid's points
    assert len(configs) < 10
