"""The study's parts one at a time: the noise floor, drift, the confirmation, the search
loop, and the evaluator's policy (each without a whole study around it)."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest
from rich.console import Console

from kvtune.errors import UserError
from kvtune.measure.evaluator import Evaluation, Evaluator, Policy
from kvtune.measure.session import Repetition
from kvtune.space import Space
from kvtune.spec import EvaluationSpec
from kvtune.study import confirm as cf
from kvtune.study.drift import is_moved, planned_checks
from kvtune.study.loader import parse_study
from kvtune.study.noise import NoiseFloor, check_not_client_bound
from kvtune.study.search import Search
from kvtune.targets.synthetic import SYNTHETIC_KNOBS


def _eval(values: list[float], status: str = "ok", flags: list[str] | None = None,
          metric: str = "ops_per_sec") -> Evaluation:
    e = Evaluation({}, metric)
    e.reps = [Repetition(status, {metric: v}, flags=list(flags or [])) for v in values]
    return e


# -- noise floor ---------------------------------------------------------------------------


def test_noise_floor_states_cov_and_what_the_confirmation_can_show() -> None:
    ev = EvaluationSpec(confirm_rounds=5, confirm_top=3)
    quiet = NoiseFloor.of(_eval([100.0, 101.0, 99.0, 100.5, 99.5]), "ops_per_sec", ev)
    noisy = NoiseFloor.of(_eval([100.0, 130.0, 75.0, 110.0, 90.0]), "ops_per_sec", ev)
    assert quiet.n == 5 and 0 < quiet.cov["ops_per_sec"] < 0.01
    assert noisy.cov["ops_per_sec"] > 0.15
    assert quiet.detectable_improvement < noisy.detectable_improvement
    assert math.isnan(quiet.cov["p99_us"])  # not measured
    assert set(quiet.as_dict()) == {"n", "cov", "robust_cov", "flags",
                                    "detectable_improvement"}


def test_a_mostly_client_bound_baseline_stops_the_study() -> None:
    flagged = _eval([1.0, 1.0], "flagged", ["client_bound"])
    flagged.reps.append(Repetition("ok", {"ops_per_sec": 1.0}))
    with pytest.raises(UserError, match="client_bound"):
        check_not_client_bound(flagged)
    one_of_three = _eval([1.0, 1.0], "ok")
    one_of_three.reps.append(Repetition("flagged", {}, flags=["saturated"]))
    check_not_client_bound(one_of_three)  # a minority is re-run, not fatal


def test_a_baseline_flagged_for_steal_names_the_neighbour_not_the_client() -> None:
    """Issue 44: steal time on the baseline was reported as "this workload measures the
    client … give kvload more client CPUs": the cause named must be the one measured."""
    stolen = _eval([1.0, 1.0], "flagged", ["steal 7.9%"])
    with pytest.raises(UserError) as e:
        check_not_client_bound(stolen)
    said = str(e.value)
    assert "stolen" in said and "steal 7.9%" in said and "another tenant" in said
    assert "client" not in said and "pipelin" not in said and "load.cpus" not in said
    both = _eval([1.0, 1.0], "flagged", ["client_bound", "steal 9.0%"])
    with pytest.raises(UserError, match="load generator was the limit") as e2:
        check_not_client_bound(both)
    assert "stolen" in str(e2.value)


# -- drift ---------------------------------------------------------------------------------


def test_drift_needs_both_the_ci_and_the_rank_test() -> None:
    first = [100.0, 101.0, 99.0, 100.5, 99.5]
    moved, change, (ch, lo, hi) = is_moved([80.0, 81.0, 79.0, 80.5, 79.5], first, "maximize",
                                           0.05, 0)
    assert moved and ch == pytest.approx(-0.2, abs=0.01) and lo < hi < 0
    assert change["n_candidate"] == 5
    same, _, _ = is_moved([100.2, 99.8, 100.9, 99.1, 100.0], first, "maximize", 0.05, 0)
    assert not same
    # At a Bonferroni level below the smallest possible p (2/252), nothing can move.
    strict, _, _ = is_moved([80.0, 81.0, 79.0, 80.5, 79.5], first, "maximize", 0.005, 0)
    assert not strict


def test_planned_checks_follow_the_budget() -> None:
    spec, _ = parse_study("study: d\ntarget: {kind: synthetic}\nbudget: {trials: 30}\n"
                         "evaluation: {drift_every: 10}\n")
    assert planned_checks(spec) == 4


# -- confirmation --------------------------------------------------------------------------


def _trial(number: int, value: float, config: dict[str, Any], kind: str = "trial",
           violations: list[float] | None = None) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(value=value, user_attrs={
        "kind": kind, "config": config, "violations": violations or [0.0]})
    t.number = number
    return t


def test_candidates_are_the_best_distinct_feasible_configurations() -> None:
    base = {"k": 0}
    trials = [_trial(0, 10.0, base, "baseline"), _trial(1, 50.0, {"k": 1}),
              _trial(2, 60.0, {"k": 2}, violations=[1.0]), _trial(3, 40.0, {"k": 1}),
              _trial(4, 30.0, {"k": 3}), _trial(5, 45.0, base), _trial(6, 20.0, {"k": 4})]
    got = cf.candidates(trials, base, "maximize", 2)
    assert [c["trial"] for c in got] == [1, 4]  # 2 infeasible, 3 and 5 repeat a config
    assert [c["trial"] for c in cf.candidates(trials, base, "minimize", 2)] == [6, 4]


def test_interleaved_rounds_measure_every_arm_once_per_round() -> None:
    calls: list[int] = []

    def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        calls.append(config["k"])
        if config["k"] == 2 and calls.count(2) == 2:
            return "failed", "crashed", {}
        return "ok", "", {"ops_per_sec": 100.0 + config["k"]}

    arms = [cf.Arm("baseline", {"k": 0}), cf.Arm("a", {"k": 1}), cf.Arm("b", {"k": 2})]
    cf.interleave(arms, 4, "ops_per_sec", measure, seed=1)
    rounds = [sorted(calls[i:i + 3]) for i in range(0, 6, 3)]
    assert rounds == [[0, 1, 2], [0, 1, 2]]
    assert calls != sorted(calls)  # shuffled
    assert len(arms[0].samples) == 4 and len(arms[1].samples) == 4
    assert arms[2].failed == "crashed" and len(arms[2].samples) == 1  # not measured again


def test_verdict_recommends_only_a_significant_improvement() -> None:
    ev = EvaluationSpec(confirm_rounds=5)
    base = cf.Arm("baseline", {}, [100.0, 101.0, 99.0, 100.5, 99.5])
    better = cf.Arm("trial 1", {"k": 1}, [130.0, 131.0, 129.0, 130.5, 129.5])
    same = cf.Arm("trial 2", {"k": 2}, [100.2, 99.8, 100.9, 99.1, 100.0])
    res = cf.verdict(base, [({"trial": 1}, better), ({"trial": 2}, same)], "ops_per_sec",
                     "maximize", ev, 0)
    assert res["recommended"]["name"] == "trial 1"
    assert [c["significant"] for c in res["candidates"]] == [True, False]
    none = cf.verdict(base, [({"trial": 2}, same)], "ops_per_sec", "maximize", ev, 0)
    assert none["recommended"] is None and none["verdict"] == cf.NONE_SIGNIFICANT


# -- the search loop -----------------------------------------------------------------------


class _Evaluator:
    """Counts evaluations; every configuration is worth its synthetic.x."""

    metric = "ops_per_sec"

    def __init__(self) -> None:
        self.configs: list[dict[str, Any]] = []

    def evaluate(self, config: dict[str, Any], kind: str, number: int | None,
                 incumbent: Evaluation | None = None) -> Evaluation:
        self.configs.append(config)
        e = Evaluation(config, self.metric, value=float(config["synthetic.x"]),
                       violations=[0.0])
        return e

    def better(self, a: float, b: float) -> bool:
        return a > b


def test_search_spends_the_budget_checks_drift_and_keeps_the_incumbent() -> None:
    spec, _ = parse_study("study: s\ntarget: {kind: synthetic}\nbudget: {trials: 5}\n"
                         "evaluation: {drift_every: 2}\nsampler: random\n")
    x = SYNTHETIC_KNOBS["synthetic.x"]
    space = Space((x,), {"synthetic.x": 2.0})
    evaluator = _Evaluator()
    drift: list[int | None] = []
    from kvtune.targets import host_context

    search = Search(spec, space, evaluator, host_context(), Console(quiet=True),  # type: ignore[arg-type]
                    drift.append)
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    start = Evaluation({"synthetic.x": 2.0}, value=2.0, violations=[0.0])
    inc = search.run(study, 0.0, start)
    assert len(evaluator.configs) == 5 and len(study.trials) == 5
    assert drift == [1, 3, None]  # after trials 2 and 4 (numbers 1, 3), and at the end
    assert inc is not None and inc.value == max([2.0, *(c["synthetic.x"]
                                                        for c in evaluator.configs)])
    assert all(t.user_attrs["kind"] == "trial" for t in study.trials)


# -- the evaluator's policy ----------------------------------------------------------------


class _Session:
    def __init__(self, values: list[float]) -> None:
        self.values = iter(values)

    def measure(self, config: dict[str, Any]) -> Repetition:
        return Repetition("ok", {"ops_per_sec": next(self.values)})


def test_policy_decides_early_stop_and_intensification() -> None:
    ev = EvaluationSpec(max_repetitions=6)
    p = Policy(ev, "ops_per_sec", "maximize", [], 3)
    inc = Evaluation({}, value=100.0, ci=(95.0, 105.0))
    assert p.stop_early(Evaluation({}, value=60.0), inc, noise_cov=0.05)
    assert not p.stop_early(Evaluation({}, value=90.0), inc, noise_cov=0.05)
    assert not p.stop_early(Evaluation({}, value=90.0), inc, noise_cov=0.5)  # too noisy
    close = Evaluation({}, value=102.0, ci=(97.0, 107.0))
    assert p.keep_intensifying(close, inc)
    assert not p.keep_intensifying(Evaluation({}, value=120.0, ci=(118.0, 122.0)), inc)
    assert p.rerun(Repetition("flagged"), 1) and not p.rerun(Repetition("flagged"), 2)


def test_a_policy_subclass_changes_the_evaluator_without_patching() -> None:
    class WideCI(Policy):
        def interval(self, values: list[float]) -> tuple[float, float]:
            return (0.0, 1e9)

    ev = Evaluator(_Session([100.0, 101.0, 99.0]), None, "s", "ops_per_sec",  # type: ignore[arg-type]
                   "maximize", [], EvaluationSpec(), 3, policy=WideCI)
    e = ev.evaluate({}, n=3)
    assert e.value == 100.0 and e.ci == (0.0, 1e9)
    plain = Evaluator(_Session([100.0, 101.0, 99.0]), None, "s", "ops_per_sec",  # type: ignore[arg-type]
                      "maximize", [], EvaluationSpec(), 3)
    assert plain.evaluate({}, n=3).ci != (0.0, 1e9)


# -- rules between knobs, and what the search asks for ------------------------------------


def test_a_redis_rule_does_not_touch_a_memcached_study() -> None:
    """memcached-full searches net.core.somaxconn; Redis's default tcp-backlog (511) must
    not reject a somaxconn below it in a memcached study."""
    from kvtune.knobs.catalog import check_rules
    from kvtune.targets import host_context

    ctx = host_context()
    config = {"memcached.threads": 4, "net.core.somaxconn": 128}
    assert check_rules(config, ctx) is None
    # The memcached rule judges the backlog the study sets, not memcached's default.
    assert check_rules({**config, "memcached.backlog": 1024}, ctx) is not None
    assert check_rules({**config, "memcached.backlog": 128}, ctx) is None
    # ... and the Redis rule still applies to a Redis study.
    assert "redis-backlog-somaxconn" in (check_rules(
        {"redis.tcp_backlog": 1024, "net.core.somaxconn": 128}, ctx) or "")


def test_memcached_hashpower_must_exceed_the_lock_table() -> None:
    """memcached 1.6 exits at start ("Hash table power size (14) cannot be equal to or less
    than item lock table (14)") with -t 12 -o hashpower=14: the rule catches it, and its
    repair raises hashpower just enough."""
    from kvtune.kinds.memcached.rules import lock_table_power
    from kvtune.knobs.catalog import lookup
    from kvtune.knobs.rules import Values, broken, repairs
    from kvtune.targets import host_context

    assert [lock_table_power(t) for t in (1, 3, 4, 5, 10, 11, 16)] == [10, 11, 12, 13, 13,
                                                                       14, 14]
    v = Values({"memcached.threads": 12, "memcached.hashpower": 14}, host_context(), lookup)
    rules = broken(v)
    assert [r.name for r in rules] == ["memcached-hashpower-lock-table"]
    assert repairs(v, rules) == [{"memcached.hashpower": 15}]
    ok = Values({"memcached.threads": 12, "memcached.hashpower": 15}, host_context(), lookup)
    assert broken(ok) == []


def _x_rule(config: dict[str, Any]) -> list[tuple[str, str]]:
    return [("x-above-8", "x must stay at most 8")] if config["synthetic.x"] > 8 else []


def test_a_rule_breaking_candidate_is_told_infeasible_and_never_returned() -> None:
    from kvtune.optimizer import REJECTED, RULES_CONSTRAINT, ask

    space = Space((SYNTHETIC_KNOBS["synthetic.x"],), {"synthetic.x": 2.0})
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=1))
    asked = []
    for _ in range(20):
        a = ask(study, space, _x_rule)
        assert a.config["synthetic.x"] <= 8
        asked.append(a)
        study.tell(a.trial, a.config["synthetic.x"])
    rejected = [t for t in study.trials if t.user_attrs.get("kind") == REJECTED]
    assert rejected and sum(len(a.rejected) for a in asked) == len(rejected)
    for t in rejected:  # infeasible, no objective value, the rule named
        assert t.state == optuna.trial.TrialState.PRUNED and t.value is None
        assert t.constraints[RULES_CONSTRAINT] > 0 and t.user_attrs["rules"] == ["x-above-8"]
        assert t.user_attrs["config"]["synthetic.x"] > 8


def test_tpe_learns_the_region_the_rules_forbid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The best value lies on the rule's edge (x = 8). Told as infeasible, TPE keeps
    proposing valid configurations; told nothing (a FAIL, which TPE ignores), it proposes
    the forbidden region again and again until `ask` gives up."""
    import kvtune.optimizer as opt

    space = Space((SYNTHETIC_KNOBS["synthetic.x"], SYNTHETIC_KNOBS["synthetic.threads"]),
                  {"synthetic.x": 2.0, "synthetic.threads": 4})

    def search() -> int:
        study = optuna.create_study(direction="maximize",
                                    sampler=opt.make_sampler("tpe", 0, 60, 1))
        rejections = 0
        for _ in range(60):
            a = opt.ask(study, space, _x_rule, max_rejections=50)
            rejections += len(a.rejected)
            study.tell(a.trial, a.config["synthetic.x"]
                       - abs(int(a.config["synthetic.threads"]) - 6))
        return rejections

    assert search() < 60

    def untold(study: optuna.Study, trial: optuna.Trial, config: dict[str, Any],
               broken: object) -> None:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)

    monkeypatch.setattr(opt, "reject", untold)
    with pytest.raises(UserError, match="in a row that break rules"):
        search()


def test_a_repair_is_measured_instead_of_the_broken_proposal() -> None:
    from kvtune.optimizer import ask

    space = Space((SYNTHETIC_KNOBS["synthetic.x"],), {"synthetic.x": 2.0})
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=1))
    seen = []
    for _ in range(20):
        a = ask(study, space, _x_rule, lambda c: [{"synthetic.x": 8.0}])
        if a.rejected:
            assert a.repaired_from == a.rejected[-1]["trial"]
            assert a.config == {"synthetic.x": 8.0}
        seen.append(a.repaired_from)
        study.tell(a.trial, a.config["synthetic.x"])
    assert any(r is not None for r in seen)


def test_a_repeated_configuration_is_reported_as_a_repeat() -> None:
    from kvtune.optimizer import ask

    space = Space((SYNTHETIC_KNOBS["synthetic.flag"],), {"synthetic.flag": False})
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    repeats = 0
    for _ in range(6):
        a = ask(study, space, lambda c: [])
        if a.repeat_of is not None:
            repeats += 1
            assert a.repeat_of.user_attrs["config"] == a.config
            study.tell(a.trial, state=optuna.trial.TrialState.PRUNED)
            continue
        a.trial.set_user_attr("kind", "trial")
        a.trial.set_user_attr("config", a.config)
        study.tell(a.trial, 1.0)
    assert repeats >= 4  # two configurations only


def test_a_detected_drift_withdraws_the_noise_floors_promise() -> None:
    """The baseline moved by -24% (other work on the host): the drift record says search
    values across it are not comparable and recomputes what the confirmation can show."""
    import io

    from kvtune.study.drift import DriftCheck

    spec, _ = parse_study("study: d\ntarget: {kind: synthetic}\nbudget: {trials: 20}\n"
                         "evaluation: {drift_every: 10, confirm_rounds: 5, confirm_top: 3}\n")
    first = _eval([100.0, 101.0, 99.0, 100.5, 99.5])

    class Ev:
        metric, direction = "ops_per_sec", "maximize"

        def evaluate(self, config: dict[str, Any], kind: str, n_: int | None,
                     n: int = 5) -> Evaluation:
            e = _eval([76.0, 75.0, 77.0, 76.5, 75.5])
            Policy(EvaluationSpec(), "ops_per_sec", "maximize", [], 5).summarise(e)
            return e

    class St:
        def __init__(self) -> None:
            self.put: list[Any] = []

        def put_result(self, study: str, key: str, data: Any) -> None:
            self.put.append((key, data))

    out = io.StringIO()
    store = St()
    rec = DriftCheck(spec, Ev(), store, Console(file=out, width=300)).run(  # type: ignore[arg-type]
        {}, first, 9)
    assert rec is not None and rec["moved"]
    assert rec["drift_cov"] >= 0.12 and rec["detectable_improvement"] > 0.2
    text = out.getvalue()
    assert "not comparable" in text and "nearest" in text
    assert "no longer holds" in text and "after trial 9" in text
    assert store.put and store.put[0][0] == "drift"
    # Said as `kvtune show` says the stored record: the three figures formatted together.
    from kvtune.present import with_interval

    ch = rec["change"]
    point, span = with_interval(ch["change"], ch["change_ci_low"], ch["change_ci_high"])
    assert f"moved by {point} (95% CI {span})" in text, text


class _SpoilingSession:
    """Repetitions in order: a float is a measured value, None one the host spoiled."""

    def __init__(self, values: list[float | None]) -> None:
        self.values = iter(values)
        self.calls = 0

    def measure(self, config: dict[str, Any]) -> Repetition:
        self.calls += 1
        v = next(self.values)
        if v is None:
            return Repetition("failed", raw={"transient": True}, reason="host_disturbed")
        return Repetition("ok", {"ops_per_sec": v})


@pytest.mark.parametrize(("n", "values", "measured", "calls", "failed"), [
    (2, [None, 10.0, 11.0], 2, 3, False),               # one spoiled: measured again
    (2, [10.0, None, None, None, 12.0], 1, 4, False),   # at most n more attempts: fewer
    (3, [None, None, None, 9.0], 0, 3, True),           # the first n all spoiled: failed
    (3, [None, 10.0, None, None, None, 9.0], 2, 6, False),
    (3, [10.0, 11.0, 12.0, 13.0], 3, 3, False),         # a quiet host: n, no more
])
def test_a_repetition_the_host_spoiled_is_measured_again_within_a_limit(
        n: int, values: list[float | None], measured: int, calls: int, failed: bool) -> None:
    session = _SpoilingSession(values)
    ev = EvaluationSpec(early_stop=False, intensify=False)
    e = Evaluator(session, None, "s", "ops_per_sec", "maximize", [], ev, n)  # type: ignore[arg-type]
    result = e.evaluate({})
    assert result.measured == measured and session.calls == calls
    assert (result.failed is not None) == failed
    assert result.summary()["n"] == measured
    assert len(result.skipped) == calls - measured


def test_the_search_best_is_never_the_baseline_asked_again(tmp_path: Any) -> None:
    """A sampler may propose the defaults again (a `repeat` of trial 0, reusing its
    result): that is the baseline, not the search's best, whatever its value."""
    from kvtune.store import Store
    from kvtune.study.result import collect

    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    study = optuna.create_study(study_name="s", storage=store.storage, direction="minimize")
    for kind, threads, value in (("baseline", 4, 700.0), ("repeat", 4, 650.0),
                                 ("trial", 1, 760.0), ("trial", 3, 800.0)):
        t = study.ask()
        t.set_user_attr("kind", kind)
        t.set_user_attr("config", {"memcached.threads": threads})
        study.tell(t, value)
    data = collect(store, "s")
    assert data["best"]["config"] == {"memcached.threads": 1}
    assert data["best"]["kind"] == "trial"
