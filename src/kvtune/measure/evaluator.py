"""The evaluator: turns noisy repetitions into a value the optimizer can trust.

- r repetitions per configuration, each on a fresh server; the optimizer is told the
  median (or mean) and every metric gets an interval: a 95% CI when there are enough
  values for one (`kvtune.stats.MIN_CI_N`), else the range of the values, labelled
  `ci_kind` "95% CI" or "range" wherever it is shown;
- flagged repetitions (client-bound, saturated, high steal) are re-run, not averaged in
  silently; a configuration that stays saturated is infeasible;
- a challenger that could become the incumbent gets more repetitions before it is
  accepted (intensification, as SMAC does); one clearly worse after its first repetition
  stops early.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from kvtune.measure.session import Config, Repetition, Session
from kvtune.metrics import Direction
from kvtune.spec import METRICS, Constraint, EvaluationSpec
from kvtune.stats import (
    CI_95,
    RANGE,
    Pooled,
    bootstrap_ci,
    centre,
    ci_kind,
    order_statistic_ci,
    pool_intervals,
)
from kvtune.store import Store, config_key


@dataclass
class Evaluation:
    """One configuration's repetitions and what they add up to. `metric` is the objective
    whose values `values` lists."""

    config: Config
    metric: str = "ops_per_sec"
    reps: list[Repetition] = field(default_factory=list)
    failed: str | None = None
    failed_stderr: str = ""
    # Repetitions the host spoiled (a capacity search it disturbed or changed under):
    # their reasons; the evaluation went on without them.
    skipped: list[str] = field(default_factory=list)
    stopped_early: bool = False
    value: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    ci_kind: str = RANGE  # "95% CI" or "range" (too few values for a CI)
    metrics: dict[str, float | None] = field(default_factory=dict)
    metric_cis: dict[str, tuple[float, float]] = field(default_factory=dict)
    violations: list[float] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    @property
    def values(self) -> list[float]:
        return [float(r.metrics[self.metric]) for r in self.reps
                if r.metrics.get(self.metric) is not None]

    @property
    def measured(self) -> int:
        """Repetitions measured (those the host spoiled or that failed left out)."""
        return sum(1 for r in self.reps if r.status != "failed")

    @property
    def feasible(self) -> bool:
        return self.failed is None and all(v <= 0 for v in self.violations)

    def summary(self) -> dict[str, Any]:
        return {
            "value": self.value, "ci": list(self.ci), "ci_kind": self.ci_kind,
            "n": self.measured,
            "metrics": self.metrics, "metric_cis": {k: list(v) for k, v in
                                                    self.metric_cis.items()},
            "violations": self.violations, "flags": self.flags, "failed": self.failed,
            "stderr": self.failed_stderr[-2000:],
            "stopped_early": self.stopped_early, "values": self.values,
            "skipped": self.skipped,
        }


def pooled_capacity(reps: list[Repetition]) -> Pooled | None:
    """The capacity of repetitions that each carry a search's knee and 95% interval
    (kvload/search/2), pooled by `stats.pool_intervals`; None when any lacks an interval."""
    from kvtune.load.kvload import search_ci

    knees, cis = [], []
    for r in reps:
        v = r.metrics.get("capacity")
        lo, hi = r.metrics.get("capacity_ci_low"), r.metrics.get("capacity_ci_high")
        ci = (float(lo), float(hi)) if isinstance(lo, int | float) and isinstance(
            hi, int | float) else search_ci(r.raw.get("load"))
        if not isinstance(v, int | float) or ci is None:
            return None
        knees.append(float(v))
        cis.append(ci)
    return pool_intervals(knees, cis) if knees else None


class Policy:
    """The evaluator's decisions, one public method each: re-running flagged repetitions,
    stopping a clearly worse trial early, intensifying a would-be incumbent, and summarising
    repetitions into a value, CIs and constraint violations. Subclass and override one to
    try another rule (bench/evaluator/variants.py does); pass the subclass to `Evaluator`
    (or `StudyRun`) as `policy`."""

    def __init__(self, ev: EvaluationSpec, metric: str, direction: Direction,
                 constraints: list[Constraint], repetitions: int, seed: int = 0) -> None:
        self.ev = ev
        self.metric = metric
        self.direction = direction
        self.constraints = constraints
        self.repetitions = repetitions
        self.seed = seed

    # -- comparisons -----------------------------------------------------------------------

    def better(self, a: float, b: float) -> bool:
        if math.isnan(b):
            return not math.isnan(a)
        if math.isnan(a):
            return False
        return Direction(self.direction).better(a, b)

    def relative_gap(self, value: float, incumbent: float) -> float:
        """How much worse `value` is than `incumbent`, as a fraction (> 0 is worse)."""
        if incumbent == 0 or math.isnan(value) or math.isnan(incumbent):
            return 0.0
        return Direction(self.direction).sign * (incumbent - value) / abs(incumbent)

    @staticmethod
    def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
        if any(math.isnan(x) for x in (*a, *b)):
            return True
        return a[0] <= b[1] and b[0] <= a[1]

    # -- decisions -------------------------------------------------------------------------

    def rerun(self, rep: Repetition, attempts: int) -> bool:
        """Whether to measure again after `rep` (the `attempts`-th re-run so far)."""
        return rep.status == "flagged" and attempts < self.ev.max_reruns

    def stop_early(self, e: Evaluation, incumbent: Evaluation, noise_cov: float | None) -> bool:
        """After the first repetition: is the trial clearly worse than the incumbent?"""
        noise = noise_cov if noise_cov and not math.isnan(noise_cov) else 0.1
        return self.relative_gap(e.value, incumbent.value) > max(3 * noise, 0.05)

    def keep_intensifying(self, e: Evaluation, incumbent: Evaluation) -> bool:
        """Give `e` one more repetition: it looks better than the incumbent and the CIs
        still overlap."""
        return (e.measured < self.ev.max_repetitions
                and self.better(e.value, incumbent.value)
                and self.overlaps(e.ci, incumbent.ci))

    def intensify_step(self, evaluator: Evaluator, e: Evaluation, incumbent: Evaluation,
                       kind: str, trial_number: int | None) -> bool:
        """One step of intensification; False when `e` failed."""
        return evaluator.add(e, kind, trial_number)

    def interval(self, values: list[float]) -> tuple[float, float]:
        """A trial's interval of the statistic: for the median the order-statistic 95% CI
        (the range [min, max] below `stats.MIN_CI_N` values); for the mean a percentile
        bootstrap."""
        if self.ev.statistic == "median":
            lo, hi, _ = order_statistic_ci(values)
            return lo, hi
        return bootstrap_ci(values, self.ev.statistic, seed=self.seed)

    def interval_kind(self, n: int) -> str:
        """What `interval` of `n` values is: "95% CI" or "range". The mean's bootstrap
        interval is called a CI only from 20 values (it undercovers on small samples)."""
        if self.ev.statistic == "median":
            return ci_kind(n)
        return CI_95 if n >= 20 else RANGE

    def summarise(self, e: Evaluation) -> None:
        """Set `e`'s value, CIs, metrics, flags and violations from its repetitions."""
        ok = [r for r in e.reps if r.status != "failed"]
        # A repetition still flagged after its re-runs is kept out of the value when most
        # repetitions are clean; its flags still count below.
        clean = [r for r in ok if r.status == "ok"]
        measured = clean if clean and len(clean) * 2 >= len(ok) else ok
        stat = self.ev.statistic
        e.metrics = {}
        e.metric_cis = {}
        keys = set(METRICS) | {k for r in measured for k, v in r.metrics.items()
                               if isinstance(v, int | float) and not isinstance(v, bool)}
        for k in sorted(keys):
            vals = [float(r.metrics[k]) for r in measured
                    if isinstance(r.metrics.get(k), int | float)
                    and not isinstance(r.metrics.get(k), bool)]
            if not vals:
                e.metrics[k] = None
                continue
            e.metrics[k] = centre(vals, stat)
            e.metric_cis[k] = self.interval(vals)
        v = e.metrics.get(self.metric)
        e.value = math.nan if v is None else float(v)  # a median of 0 is a value
        e.ci = e.metric_cis.get(self.metric, (math.nan, math.nan))
        e.ci_kind = self.interval_kind(sum(
            1 for r in measured if isinstance(r.metrics.get(self.metric), int | float)))
        pooled = pooled_capacity(measured) if self.metric == "capacity" else None
        if pooled is not None:
            # Each search carries its own 95% interval: they are pooled (random effects),
            # so one search already has a CI and the searches' disagreement widens it.
            e.value = pooled.value
            e.metrics["capacity"] = pooled.value
            e.ci = e.metric_cis["capacity"] = pooled.ci
            e.ci_kind = CI_95
        e.flags = sorted({f for r in ok for f in r.flags})
        violations = []
        for c in self.constraints:
            v = e.metrics.get(c.metric)
            violations.append(1.0 if v is None else c.violation(float(v)))
        # A configuration that stays saturated after its re-runs cannot serve the load.
        saturated = sum(1 for r in ok if "saturated" in r.flags)
        violations.append(1.0 if saturated * 2 > len(ok) else 0.0)
        e.violations = violations


class Evaluator:
    """Measures configurations through a `Session`, stores every repetition, and applies
    its `Policy`."""

    def __init__(self, session: Session, store: Store | None, study: str, metric: str,
                 direction: Direction, constraints: list[Constraint], ev: EvaluationSpec,
                 repetitions: int, seed: int = 0, policy: type[Policy] = Policy) -> None:
        self.session = session
        self.store = store
        self.study = study
        self.metric = metric
        self.direction = direction
        self.ev = ev
        self.repetitions = repetitions
        self.policy = policy(ev, metric, direction, constraints, repetitions, seed)
        self.noise_cov: float | None = None  # the objective's CoV in the noise floor
        # Wall seconds of every repetition measured (for estimates of what is left).
        self.rep_seconds: list[float] = []

    def better(self, a: float, b: float) -> bool:
        return self.policy.better(a, b)

    # -- measuring -------------------------------------------------------------------------

    def run_one(self, config: Config, kind: str, trial_number: int | None) -> Repetition:
        """One repetition; flagged ones are re-run as the policy says (each attempt is
        stored), and the last attempt is kept with its flags."""
        rep = self._timed(config)
        self._store(rep, config, kind, trial_number)
        attempts = 0
        while self.policy.rerun(rep, attempts):
            attempts += 1
            rep = self._timed(config)
            self._store(rep, config, kind, trial_number)
        return rep

    def _timed(self, config: Config) -> Repetition:
        t0 = time.monotonic()
        rep = self.session.measure(config)
        self.rep_seconds.append(time.monotonic() - t0)
        return rep

    def seconds_per_repetition(self) -> float | None:
        """The median wall time of a repetition so far (None before the first)."""
        if not self.rep_seconds:
            return None
        xs = sorted(self.rep_seconds)
        return xs[len(xs) // 2]

    def _store(self, rep: Repetition, config: Config, kind: str,
               trial_number: int | None) -> None:
        if self.store is None:
            return
        value = rep.metrics.get(self.metric) if rep.status != "failed" else None
        raw = dict(rep.raw)
        raw["flags"] = rep.flags
        raw["reason"] = rep.reason
        self.store.add_repetition(self.study, kind, trial_number, config_key(config),
                                  rep.status, value, config, rep.metrics, raw)

    def evaluate(self, config: Config, kind: str = "trial", trial_number: int | None = None,
                 n: int | None = None, incumbent: Evaluation | None = None,
                 on_rep: Any = None) -> Evaluation:
        """`n` repetitions (the study's by default) of `config`, stopped early or
        intensified against `incumbent` as the policy says."""
        n = n or self.repetitions
        e = Evaluation(config, self.metric)
        # A repetition the host spoiled is measured again, once per planned repetition at
        # most: n values when the host allows, fewer (said in `e.skipped`) when it keeps
        # disturbing, and a failure when it spoiled every one of the first n.
        attempts = 0
        while e.measured < n and attempts < 2 * n:
            attempts += 1
            if not self.add(e, kind, trial_number, planned=n):
                return e
            if on_rep:
                on_rep(e)
            if e.measured == 0:
                continue  # every repetition so far was spoiled by the host
            if e.reps[-1].status == "failed":
                continue
            if (e.measured == 1 and n > 1 and self.ev.early_stop and incumbent is not None
                    and self.policy.stop_early(e, incumbent, self.noise_cov)):
                e.stopped_early = True
                break
        if (self.ev.intensify and incumbent is not None and not e.stopped_early
                and incumbent is not e):
            while self.policy.keep_intensifying(e, incumbent):
                if not self.policy.intensify_step(self, e, incumbent, kind, trial_number):
                    return e
                if on_rep:
                    on_rep(e)
        return e

    def add(self, e: Evaluation, kind: str, trial_number: int | None,
            planned: int | None = None) -> bool:
        """One more repetition of `e` (summarised); False when it failed. A repetition the
        host spoiled (`transient`: a capacity search the host disturbed or changed under)
        is said in `e.skipped` and the evaluation goes on; when none of the `planned`
        repetitions (the study's by default) is left, the configuration failed with every
        reason."""
        rep = self.run_one(e.config, kind, trial_number)
        e.reps.append(rep)
        if rep.status == "failed" and rep.raw.get("transient"):
            e.skipped.append(rep.reason)
            if any(r.status != "failed" for r in e.reps):
                return True
            if len(e.reps) < (planned or self.repetitions):
                return True
            e.failed = (f"all {len(e.reps)} repetitions were spoiled by the host: "
                        + "; ".join(dict.fromkeys(e.skipped)))
            e.failed_stderr = str(rep.raw.get("stderr", ""))
            return False
        if rep.status == "failed":
            e.failed = rep.reason
            e.failed_stderr = str(rep.raw.get("stderr", ""))
            return False
        self.policy.summarise(e)
        return True
