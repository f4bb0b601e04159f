"""The evaluator: turns noisy repetitions into a value the optimizer can trust.

- r repetitions per configuration, each on a fresh server; the optimizer is told the
  median (or mean) and every metric gets a bootstrap 95% CI;
- flagged repetitions (client-bound, saturated, high steal) are re-run, not averaged in
  silently; a configuration that stays saturated is infeasible;
- a challenger that could become the incumbent gets more repetitions before it is
  accepted (intensification, as SMAC does); one clearly worse after its first repetition
  stops early.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kvtune.runner import Config, Repetition, Session
from kvtune.spec import METRICS, Constraint, EvaluationSpec
from kvtune.stats import bootstrap_ci, centre
from kvtune.store import Store, config_key


@dataclass
class Evaluation:
    config: Config
    reps: list[Repetition] = field(default_factory=list)
    failed: str | None = None
    failed_stderr: str = ""
    stopped_early: bool = False
    value: float = math.nan
    ci: tuple[float, float] = (math.nan, math.nan)
    metrics: dict[str, float | None] = field(default_factory=dict)
    metric_cis: dict[str, tuple[float, float]] = field(default_factory=dict)
    violations: list[float] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    @property
    def values(self) -> list[float]:
        return [float(r.metrics[self._metric]) for r in self.reps
                if r.metrics.get(self._metric) is not None]

    _metric: str = "ops_per_sec"

    @property
    def feasible(self) -> bool:
        return self.failed is None and all(v <= 0 for v in self.violations)

    def summary(self) -> dict[str, Any]:
        return {
            "value": self.value, "ci": list(self.ci), "n": len(self.reps),
            "metrics": self.metrics, "metric_cis": {k: list(v) for k, v in
                                                    self.metric_cis.items()},
            "violations": self.violations, "flags": self.flags, "failed": self.failed,
            "stderr": self.failed_stderr[-2000:],
            "stopped_early": self.stopped_early, "values": self.values,
        }


class Evaluator:
    def __init__(self, session: Session, store: Store | None, study: str, metric: str,
                 direction: str, constraints: list[Constraint], ev: EvaluationSpec,
                 repetitions: int, seed: int = 0) -> None:
        self.session = session
        self.store = store
        self.study = study
        self.metric = metric
        self.direction = direction
        self.constraints = constraints
        self.ev = ev
        self.repetitions = repetitions
        self.seed = seed
        self.noise_cov: float | None = None

    # -- comparisons -----------------------------------------------------------------------

    def better(self, a: float, b: float) -> bool:
        if math.isnan(b):
            return not math.isnan(a)
        if math.isnan(a):
            return False
        return a > b if self.direction == "maximize" else a < b

    def relative_gap(self, value: float, incumbent: float) -> float:
        """How much worse `value` is than `incumbent`, as a fraction (> 0 is worse)."""
        if incumbent == 0 or math.isnan(value) or math.isnan(incumbent):
            return 0.0
        if self.direction == "maximize":
            return (incumbent - value) / abs(incumbent)
        return (value - incumbent) / abs(incumbent)

    # -- measuring -------------------------------------------------------------------------

    def run_one(self, config: Config, kind: str, trial_number: int | None) -> Repetition:
        """One repetition; flagged ones are re-run up to max_reruns times (each attempt is
        stored), and the last attempt is kept with its flags."""
        rep = self.session.measure(config)
        self._store(rep, config, kind, trial_number)
        attempts = 0
        while rep.status == "flagged" and attempts < self.ev.max_reruns:
            attempts += 1
            rep = self.session.measure(config)
            self._store(rep, config, kind, trial_number)
        return rep

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
        n = n or self.repetitions
        e = Evaluation(config)
        e._metric = self.metric
        for i in range(n):
            if not self._add(e, kind, trial_number):
                return e
            if on_rep:
                on_rep(e)
            if (i == 0 and n > 1 and self.ev.early_stop and incumbent is not None
                    and self._clearly_worse(e, incumbent)):
                e.stopped_early = True
                break
        if (self.ev.intensify and incumbent is not None and not e.stopped_early
                and incumbent is not e):
            while (len(e.reps) < self.ev.max_repetitions and self.better(e.value, incumbent.value)
                   and self._overlaps(e, incumbent)):
                if not self._add(e, kind, trial_number):
                    return e
                if on_rep:
                    on_rep(e)
        return e

    def extend(self, e: Evaluation, more: int, kind: str, trial_number: int | None) -> None:
        for _ in range(more):
            if not self._add(e, kind, trial_number):
                return

    def _add(self, e: Evaluation, kind: str, trial_number: int | None) -> bool:
        rep = self.run_one(e.config, kind, trial_number)
        if rep.status == "failed":
            e.failed = rep.reason
            e.failed_stderr = str(rep.raw.get("stderr", ""))
            e.reps.append(rep)
            return False
        e.reps.append(rep)
        self._summarise(e)
        return True

    def _clearly_worse(self, e: Evaluation, inc: Evaluation) -> bool:
        noise = self.noise_cov if self.noise_cov and not math.isnan(self.noise_cov) else 0.1
        return self.relative_gap(e.value, inc.value) > max(3 * noise, 0.05)

    def _overlaps(self, e: Evaluation, inc: Evaluation) -> bool:
        a, b = e.ci, inc.ci
        if any(math.isnan(x) for x in (*a, *b)):
            return True
        return a[0] <= b[1] and b[0] <= a[1]

    def _summarise(self, e: Evaluation) -> None:
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
            e.metric_cis[k] = bootstrap_ci(vals, stat, seed=self.seed)
        v = e.metrics.get(self.metric)
        e.value = math.nan if v is None else float(v)  # a median of 0 is a value
        e.ci = e.metric_cis.get(self.metric, (math.nan, math.nan))
        e.flags = sorted({f for r in ok for f in r.flags})
        violations = []
        for c in self.constraints:
            v = e.metrics.get(c.metric)
            violations.append(1.0 if v is None else c.violation(float(v)))
        # A configuration that stays saturated after its re-runs cannot serve the load.
        saturated = sum(1 for r in ok if "saturated" in r.flags)
        violations.append(1.0 if saturated * 2 > len(ok) else 0.0)
        e.violations = violations
