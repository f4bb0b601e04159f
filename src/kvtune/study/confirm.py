"""The confirmation: the best distinct feasible candidates of the search and the baseline
re-run interleaved (each round runs every arm once, in a fresh random order, so slow drift
hits all arms alike). Every shown metric of each candidate is compared with the baseline on
these fresh samples only:

- the objective: each round's candidate against the baseline of the same round
  (`stats.compare_rounds`: the geometric mean of the rounds' ratios, its Student t interval
  and the paired t test's one-sided p), Holm-adjusted across the candidates, the interval
  simultaneous over the candidates (each at 1 − 0.05/k, so the recommended one, picked for
  its large measured gain, still covers its true change in 95% of confirmations); the
  candidate must improve it significantly. A capacity, whose rounds each carry their
  search's interval, is pooled with them (`pooled_comparison`);
- every other shown metric: the same paired statistic, two-sided, a 95% CI of its change
  from the same rounds. Its words follow the CI (`present.judge`: "better"/"worse" when
  the CI excludes zero, else no significant change); it counts as a trade-off only when
  the two-sided test agrees at α too. No correction across
  metrics: each secondary change is a separate claim whose wrong-sign rate the CI bounds by
  α/2 (bench/tradeoff measures it), and widening the CIs would hide real trade-offs, the
  costlier error;
- each constraint (absolute, or relative to the baseline such as
  `ops_per_sec >= 0.98 * baseline`): satisfied, significantly violated (its CI entirely on
  the wrong side of the bound) or inconclusive.

The recommendation is the candidate with the largest significant gain in the objective
that violates no constraint significantly; its verdict line names every metric it makes
significantly worse ("p99_us −83% (95% CI …), better, at the cost of ops_per_sec −18%
(95% CI …)") and every constraint it could not settle.

`run_interleaved` is the reusable part: any set of configurations measured in interleaved
rounds, returning each arm's samples of every metric (the ablation uses it)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna

from kvtune import present
from kvtune.metrics import Direction, guess_direction
from kvtune.metrics import unit as metric_unit
from kvtune.present import NO_SIGNIFICANT_CHANGE, describe_change, judge, number
from kvtune.spec import Constraint, EvaluationSpec
from kvtune.stats import (
    Comparison,
    bootstrap_ci,
    centre,
    compare_paired,
    compare_pooled,
    compare_rounds,
    holm,
    pool_intervals,
)
from kvtune.store import config_key
from kvtune.study.record import stored_eval

NO_CANDIDATE = "no feasible candidate better than the baseline was found"
NONE_SIGNIFICANT = "no significant improvement found"

# The metrics every comparison shows beside the objective(s) and the constraints' metrics.
SHOWN = ("ops_per_sec", "p50_us", "p99_us", "p999_us", "hit_ratio", "errors",
         "server_errors")


def clearly_worse(trial: optuna.trial.FrozenTrial, baseline: optuna.trial.FrozenTrial,
                  direction: Direction) -> bool:
    """Whether the search measured `trial` clearly worse than the baseline: its interval
    (the CI of its median, or the range of its repetitions) lies wholly on the worse side
    of the baseline's. Such a trial is no contender for the confirmation's rounds."""
    c, b = stored_eval(trial).get("ci"), stored_eval(baseline).get("ci")
    if not c or not b or any(v is None or (isinstance(v, float) and math.isnan(v))
                             for v in (*c, *b)):
        return False
    # The baseline's worst bound better than the trial's best one: wholly on the worse side.
    d = Direction(direction)
    best_c, worst_b = (c[1], b[0]) if d is Direction.MAXIMIZE else (c[0], b[1])
    return d.better(worst_b, best_c)


def candidates(trials: Sequence[optuna.trial.FrozenTrial], baseline: dict[str, Any],
               direction: Direction, top: int) -> list[dict[str, Any]]:
    """The best `top` distinct feasible search configurations by their search value, none
    of them the baseline's, and none the search already measured clearly worse than the
    baseline (`clearly_worse`): confirmation rounds go to contenders."""
    seen = {config_key(baseline)}
    base_trial = next((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE
                       and t.user_attrs.get("kind") == "baseline"), None)
    ranked = sorted(
        (t for t in trials if t.state == optuna.trial.TrialState.COMPLETE
         and t.user_attrs.get("kind") == "trial"
         and all(v <= 0 for v in t.user_attrs.get("violations", [0.0]))
         and not (base_trial is not None and clearly_worse(t, base_trial, direction))),
        key=lambda t: Direction(direction).ranked(float(t.value or 0)))
    out: list[dict[str, Any]] = []
    for t in ranked:
        cfg = t.user_attrs["config"]
        if config_key(cfg) in seen:
            continue
        seen.add(config_key(cfg))
        out.append({"trial": t.number, "config": cfg, "search_value": t.value})
        if len(out) >= top:
            break
    return out


@dataclass
class Arm:
    name: str
    config: dict[str, Any]
    samples: list[float] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None
    # Rounds the host spoiled for this arm (status "skipped"): said, not measured.
    skipped: list[str] = field(default_factory=list)
    # The round each entry of `metrics` was measured in (arms of one `interleave` share
    # the numbering, so a candidate's value pairs with the baseline's of the same round).
    rounds: list[int] = field(default_factory=list)

    def by_round(self, metric: str) -> dict[int, float]:
        """This arm's value of `metric` in each round it measured (round → value), the
        pairing the comparisons use; arms stored without their rounds are numbered in
        order."""
        rounds = self.rounds if len(self.rounds) == len(self.metrics) \
            else range(len(self.metrics))
        out = {}
        for r, m in zip(rounds, self.metrics, strict=True):
            v = m.get(metric)
            if isinstance(v, int | float) and not isinstance(v, bool) \
                    and not math.isnan(float(v)):
                out[r] = float(v)
        return out

    def samples_by_round(self) -> dict[int, float]:
        """The objective's samples by round (numbered in order for an arm stored without
        its rounds)."""
        if len(self.rounds) == len(self.samples):
            return dict(zip(self.rounds, self.samples, strict=True))
        return dict(enumerate(self.samples))

    def series(self, metric: str) -> list[float]:
        """This arm's samples of `metric`, one per measured round."""
        return [float(m[metric]) for m in self.metrics
                if isinstance(m.get(metric), int | float) and not isinstance(m.get(metric), bool)
                and not math.isnan(float(m[metric]))]

    def all_series(self) -> dict[str, list[float]]:
        keys = sorted({k for m in self.metrics for k, v in m.items()
                       if isinstance(v, int | float) and not isinstance(v, bool)})
        return {k: self.series(k) for k in keys}


# One repetition of a configuration: (status, reason, metrics), as Evaluator.run_one gives;
# status "skipped" for a repetition the host spoiled (the arm is measured again next round).
Measure = Callable[[dict[str, Any]], tuple[str, str, dict[str, Any]]]


def interleave(arms: list[Arm], rounds: int, metric: str | None, measure: Measure, seed: int,
               on_rep: Callable[[], None] | None = None) -> None:
    """`rounds` rounds over `arms`, each in a fresh shuffled order; an arm that fails is
    not measured again. Every metric of every repetition is kept (`Arm.metrics`); `metric`'s
    values also go to `Arm.samples`."""
    rng = random.Random(seed)
    first = 1 + max((r for a in arms for r in a.rounds), default=-1)
    for i in range(rounds):
        order = arms[:]
        rng.shuffle(order)
        for a in order:
            if on_rep:
                on_rep()
            if a.failed is not None:
                continue
            status, reason, metrics = measure(a.config)
            if status == "skipped":
                a.skipped.append(reason)
                continue
            if status == "failed":
                a.failed = reason
                continue
            a.metrics.append(metrics)
            a.rounds.append(first + i)
            v = metrics.get(metric) if metric else None
            if v is not None:
                a.samples.append(float(v))


def run_interleaved(configs: Mapping[str, dict[str, Any]], rounds: int, measure: Measure,
                    seed: int, on_rep: Callable[[], None] | None = None) -> dict[str, Arm]:
    """Measure each named configuration once per round for `rounds` rounds, in a fresh
    random order each round; returns each arm by name, with its samples of every metric
    (`Arm.series(metric)`, `Arm.all_series()`) and its failure, if any."""
    arms = [Arm(name, dict(cfg)) for name, cfg in configs.items()]
    interleave(arms, rounds, None, measure, seed, on_rep)
    return {a.name: a for a in arms}


# -- one metric, one constraint ------------------------------------------------------------


def _by_round(arm: Arm, metric: str, objective: str | None) -> dict[int, float]:
    """`Arm.by_round`, or the objective's samples numbered in order for an arm that holds
    only those."""
    out = arm.by_round(metric)
    if not out and metric == objective and arm.samples:
        return arm.samples_by_round()
    return out


def _series(arm: Arm, metric: str, objective: str | None) -> list[float]:
    if metric == objective and arm.samples:
        return list(arm.samples)
    return arm.series(metric)


@dataclass
class MetricChange:
    """A metric's change from the baseline to a candidate over the same rounds:
    candidate / baseline − 1 with its 95% CI, a two-sided p-value, and whether the change
    is significant (CI excludes 0 and p < α)."""

    metric: str
    direction: Direction | None
    baseline: float | None
    candidate: float | None
    change: float | None
    ci: tuple[float, float] | None
    p_value: float
    significant: bool
    n: tuple[int, int] = (0, 0)

    @property
    def worse(self) -> bool:
        if not self.significant or self.change is None or self.direction is None:
            return False
        return Direction(self.direction).better(0.0, self.change)

    @property
    def better(self) -> bool:
        return self.significant and self.change is not None and self.direction is not None \
            and not self.worse and self.change != 0

    def text(self) -> str:
        """"ops_per_sec −18.0% (95% CI −21.0% … −15.2%), worse": the words follow the CI
        (`present.judge`); never a bare percentage."""
        if self.change is None:
            return f"{self.metric}: {NO_SIGNIFICANT_CHANGE}"
        return describe_change(self.metric, self.change, self.direction, self.ci,
                               self.significant)

    def as_dict(self) -> dict[str, Any]:
        verdict = judge(self.change, self.direction, self.significant, self.ci) or (
            NO_SIGNIFICANT_CHANGE if not self.significant else "changed")
        return {"metric": self.metric, "direction": self.direction,
                "baseline": self.baseline, "candidate": self.candidate,
                "change": self.change, "ci": list(self.ci) if self.ci else None,
                "p_value": self.p_value, "significant": self.significant,
                "verdict": verdict, "n_candidate": self.n[0], "n_baseline": self.n[1],
                "text": self.text()}


def metric_change(metric: str, cand: Mapping[int, float], base: Mapping[int, float],
                  alpha: float, seed: int = 0) -> MetricChange:
    """`metric`'s change between two arms measured in the same interleaved rounds (round →
    value), paired by round (`stats.compare_rounds`). The arms' figures are the geometric
    means of the rounds both measured, so that the change is their ratio exactly; the
    median of each arm's values where a value is not positive (no ratio: unpaired)."""
    c = [v for v in cand.values() if not math.isnan(v)]
    b = [v for v in base.values() if not math.isnan(v)]
    cm, bm = centre(c), centre(b)
    both = [r for r in cand if r in base]
    if len(both) >= 2 and all(cand[r] > 0 and base[r] > 0 for r in both) and \
            all(v > 0 for v in (*c, *b)):
        cm = float(np.exp(np.mean(np.log([cand[r] for r in both]))))
        bm = float(np.exp(np.mean(np.log([base[r] for r in both]))))
    direction = guess_direction(metric)
    n = (len(c), len(b))
    cm_ = None if math.isnan(cm) else cm
    bm_ = None if math.isnan(bm) else bm
    if len(c) < 2 or len(b) < 2:
        return MetricChange(metric, direction, bm_, cm_, None, None, 1.0, False, n)
    if bm == 0:
        # No ratio to a zero baseline (errors: 0 → 0): changed only if the samples differ.
        same = np.allclose(c, 0) and np.allclose(b, 0)
        return MetricChange(metric, direction, bm_, cm_, 0.0 if same else None, None, 1.0,
                            False, n)
    comp = compare_rounds(cand, base, Direction.MAXIMIZE, seed=seed, two_sided=True)
    ci = (comp.ci_low, comp.ci_high)
    sig = (comp.p_value < alpha and not any(math.isnan(v) for v in ci)
           and (ci[0] > 0 or ci[1] < 0))
    return MetricChange(metric, direction, bm_, cm_, comp.improvement, ci, comp.p_value, sig, n)


def metric_changes(base: Arm, arm: Arm, metrics: Sequence[str], alpha: float, seed: int = 0,
                   objective: str | None = None) -> dict[str, MetricChange]:
    return {m: metric_change(m, _by_round(arm, m, objective), _by_round(base, m, objective),
                             alpha, seed)
            for m in metrics}


@dataclass
class ConstraintCheck:
    """A constraint checked on the confirmation's samples: "satisfied", "violated" (the
    CI entirely on the wrong side of the bound) or "inconclusive"."""

    constraint: str
    status: str
    value: float | None
    ci: tuple[float, float] | None
    bound: float | None
    relative: bool

    def text(self) -> str:
        if self.ci is None or self.value is None:
            return f"{self.constraint}: inconclusive (too few samples)"
        if self.relative:
            point, ci = present.with_interval(self.value, self.ci[0], self.ci[1],
                                              present.PLAIN, decimals=3)
            what = f"ratio to the baseline {point} (95% CI {ci})"
        else:
            what = (f"median {present.number(self.value)} (95% CI "
                    f"{present.number(self.ci[0])} … {present.number(self.ci[1])})")
        word = {"satisfied": "satisfied", "violated": "significantly violated",
                "inconclusive": "inconclusive: the CI straddles the bound"}[self.status]
        return f"{self.constraint}: {word}, {what}"

    def as_dict(self) -> dict[str, Any]:
        return {"constraint": self.constraint, "status": self.status, "value": self.value,
                "ci": list(self.ci) if self.ci else None, "bound": self.bound,
                "relative": self.relative, "text": self.text()}


def check_constraint(c: Constraint, base: Arm, arm: Arm, seed: int = 0,
                     objective: str | None = None) -> ConstraintCheck:
    """`c` on the candidate's confirmation samples; a relative constraint compares the
    candidate with the baseline of the same rounds (its ratio's CI against the factor)."""
    cand = _series(arm, c.metric, objective)
    if c.relative:
        b = _series(base, c.metric, objective)
        if len(cand) < 2 or len(b) < 2 or centre(b) == 0:
            return ConstraintCheck(str(c), "inconclusive", None, None, c.bound, True)
        comp = compare_rounds(_by_round(arm, c.metric, objective),
                              _by_round(base, c.metric, objective), Direction.MAXIMIZE,
                              seed=seed)
        value, lo, hi = 1 + comp.improvement, 1 + comp.ci_low, 1 + comp.ci_high
    else:
        if len(cand) < 2:
            return ConstraintCheck(str(c), "inconclusive", None, None, c.bound, False)
        value = centre(cand)
        lo, hi = bootstrap_ci(cand, seed=seed)
    upper = c.op in ("<=", "<")
    if (hi <= c.bound) if upper else (lo >= c.bound):
        status = "satisfied"
    elif (lo > c.bound) if upper else (hi < c.bound):
        status = "violated"
    else:
        status = "inconclusive"
    return ConstraintCheck(str(c), status, value, (lo, hi), c.bound, c.relative)


# -- the verdict ---------------------------------------------------------------------------


def shown_metrics(objective: str, constraints: Sequence[Constraint] = ()) -> list[str]:
    out = [objective]
    for m in [*(c.metric for c in constraints), *SHOWN]:
        if m not in out:
            out.append(m)
    return out


def simultaneous_level(candidates: int, level: float = 0.95) -> float:
    """The level of each of `candidates` intervals that together hold `level` (Bonferroni)."""
    return 1 - (1 - level) / max(candidates, 1)


def pooled_comparison(arm: Arm, base: Arm, metric: str, direction: Direction,
                      level: float) -> Comparison | None:
    """A capacity's comparison from each round's search with its own 95% interval
    (`stats.compare_pooled`): the searches' intervals say how precise each knee is, which
    the rounds' spread alone cannot with a few rounds. None for another metric, or when a
    round's search has no interval (the paired comparison of the rounds then decides)."""
    if metric != "capacity":
        return None

    def with_ci(a: Arm) -> dict[int, tuple[float, tuple[float, float]]] | None:
        out = {}
        rounds = a.rounds if len(a.rounds) == len(a.metrics) else range(len(a.metrics))
        for r, m in zip(rounds, a.metrics, strict=True):
            v, lo, hi = (m.get(k) for k in ("capacity", "capacity_ci_low", "capacity_ci_high"))
            if not all(isinstance(x, int | float) and x > 0 for x in (v, lo, hi)):
                return None
            out[r] = (float(v), (float(lo), float(hi)))  # type: ignore[arg-type]
        return out or None

    c, b = with_ci(arm), with_ci(base)
    if c is None or b is None:
        return None
    both = sorted(set(c) & set(b))
    if len(both) >= 2:
        # Each round's candidate against the baseline of the same round: the host's state,
        # which moves over minutes here, cancels within a round.
        return compare_paired([c[r][0] for r in both], [c[r][1] for r in both],
                              [b[r][0] for r in both], [b[r][1] for r in both],
                              direction, level)
    cv, bv = list(c.values()), list(b.values())
    return compare_pooled([v for v, _ in cv], [ci for _, ci in cv],
                          [v for v, _ in bv], [ci for _, ci in bv], direction, level)


def pooled_value(arm: Arm) -> float | None:
    """An arm's capacity pooled over its rounds' searches (random effects), the figure the
    pooled comparison's change is the ratio of; None without every round's interval."""
    vals, cis = [], []
    for m in arm.metrics:
        v, lo, hi = (m.get(k) for k in ("capacity", "capacity_ci_low", "capacity_ci_high"))
        if not all(isinstance(x, int | float) and x > 0 for x in (v, lo, hi)):
            return None
        vals.append(float(v))  # type: ignore[arg-type]
        cis.append((float(lo), float(hi)))  # type: ignore[arg-type]
    return pool_intervals(vals, cis).value if vals else None


def verdict(base: Arm, cands: list[tuple[dict[str, Any], Arm]], metric: str, direction: Direction,
            ev: EvaluationSpec, seed: int,
            constraints: Sequence[Constraint] = (), slo: str | None = None) -> dict[str, Any]:
    """Each candidate against the baseline — the objective (ratio CI, one-sided
    paired t on the rounds' log ratios, Holm across candidates), every shown metric
    (two-sided, 95% CI) and every
    constraint — and the recommendation: the significant candidate with the largest
    improvement that violates no constraint significantly, or None."""
    # The recommendation is the candidate whose measured gain is largest: a choice that
    # favours the candidates noise lifted, so a marginal 95% CI of the chosen one covers
    # its true change less often than 95% (89% measured). Each candidate's CI is
    # therefore simultaneous over the candidates (Bonferroni: level 1 − 0.05/k), so that
    # all k cover together, and whichever is chosen; the CI, which the verdict's words
    # follow, must clear min_improvement (bench/evaluator/selection_coverage.py,
    # docs/evaluation.md).
    level = simultaneous_level(len(cands))
    comps = [pooled_comparison(arm, base, metric, direction, level)
             or compare_rounds(_by_round(arm, metric, metric), _by_round(base, metric, metric),
                               direction, level=level, seed=seed) for _, arm in cands]
    adjusted = holm([c.p_value for c in comps])
    shown = shown_metrics(metric, constraints)
    base_value = median_metrics(base.metrics).get(metric)
    rows = []
    best: dict[str, Any] | None = None
    for (c, arm), comp, p_adj in zip(cands, comps, adjusted, strict=True):
        gain = arm.failed is None and p_adj < ev.alpha and comp.ci_low > ev.min_improvement
        changes = metric_changes(base, arm, shown, ev.alpha, seed, objective=metric)
        obj = changes.get(metric)
        if obj is not None and obj.ci is not None and not math.isnan(comp.ci_low):
            # The objective's change is said with the same simultaneous CI everywhere.
            ch, lo, hi = comp.change()
            obj.ci = (lo, hi)
            pooled = (pooled_value(base), pooled_value(arm)) if metric == "capacity" \
                else (None, None)
            if pooled[0] is not None and pooled[1] is not None:
                # A capacity's figures are the ones its change is the ratio of: the
                # baseline's pooled capacity, and the candidate's as the baseline's times the
                # change. The candidate's searches pooled on their own can disagree with a
                # change paired by round, even in sign (55,438 → 54,774 beside +0.2%).
                obj.baseline, obj.candidate, obj.change = pooled[0], pooled[0] * (1 + ch), ch
            obj.significant = obj.significant and not lo <= 0 <= hi
        checks = [check_constraint(k, base, arm, seed, objective=metric) for k in constraints]
        blocked = [k for k in checks if k.status == "violated"]
        ok = gain and not blocked
        row = {**c, "name": arm.name, "samples": arm.samples,
               "comparison": {**comp.as_dict(), "ci_level": level,
                              "ci_simultaneous_over": len(cands)},
               "p_adjusted": p_adj, "objective_significant": gain, "significant": ok,
               "failed": arm.failed, "metrics": median_metrics(arm.metrics),
               "changes": {m: ch.as_dict() for m, ch in changes.items()},
               "constraints": [k.as_dict() for k in checks],
               "tradeoffs": [m for m, ch in changes.items() if m != metric and ch.worse]}
        row["text"] = candidate_text(row, metric, changes,
                                     (slo, base_value) if slo is not None else None)
        rows.append(row)
        if ok and (best is None or comp.improvement > best["comparison"]["improvement"]):
            best = row
    if best:
        text = best["text"]
    else:
        text = NONE_SIGNIFICANT
        blocked_rows = [r for r in rows if r["objective_significant"] and not r["significant"]]
        if blocked_rows:
            text += "; " + "; ".join(
                f"{r['name']} improves {metric} but "
                + ", ".join(k["text"] for k in r["constraints"] if k["status"] == "violated")
                for r in blocked_rows)
    return {"metric": metric, "direction": direction, "alpha": ev.alpha,
            "rounds": ev.confirm_rounds, "shown": shown,
            "constraints": [str(k) for k in constraints],
            "baseline": {"config": base.config, "samples": base.samples,
                         "metrics": median_metrics(base.metrics)},
            "candidates": rows, "recommended": best, "verdict": text}


# A candidate with fewer than two measured rounds (or a baseline with fewer): no interval.
NOT_COMPARED = "not compared, a comparison needs 2 rounds of each:"


def candidate_text(row: dict[str, Any], metric: str, changes: Mapping[str, MetricChange],
                   at_slo: tuple[str, float | None] | None = None) -> str:
    """The verdict line of one candidate: the objective's change with its CI, every metric
    it makes significantly worse ("at the cost of …"), and constraints not settled.
    `at_slo` (the SLO, the baseline's median, used where the comparison pooled none): a
    capacity is said with both figures, those its change is the ratio of,
    "capacity 162,000 → 201,000 req/s at p99_us <= 200, +24.1% (95% CI …), better"."""
    comp = row["comparison"]
    obj = changes[metric]
    ci = (comp["change_ci_low"], comp["change_ci_high"])
    label = metric
    if at_slo is not None:
        # The figures the change is the ratio of (a capacity's pooled ones, kept in
        # `changes`), so that "a → b" and the change it is said with agree; the medians
        # only where the comparison has none.
        slo, before = at_slo
        after = (row.get("metrics") or {}).get(metric)
        if obj.baseline is not None and obj.candidate is not None and obj.change is not None:
            before, after = obj.baseline, obj.candidate
        label = (f"{metric} {number(before)} → {number(after)} {metric_unit(metric)} at "
                 f"{slo},")
    head = describe_change(label, comp["change"], guess_direction(metric), ci,
                           bool(row["objective_significant"]))
    if obj.change is None:
        # Still said at the SLO with the baseline's capacity when the candidate has none
        # (every one of its searches failed: client-bound, no rate met the SLO).
        head = f"{label.rstrip(',')}: {NO_SIGNIFICANT_CHANGE}"
        if min(obj.n) < 2:
            # Rounds the host spoiled, or searches that failed: too few to compare, said.
            head += (f" ({NOT_COMPARED} {obj.n[0]} of its rounds measured, "
                     f"the baseline's {obj.n[1]})")
    text = f"{row['name']}: {head}"
    if row["objective_significant"]:
        text += f" (Holm-adjusted p={present.p_value(row.get('p_adjusted'))})"
    costs = [changes[m].text() for m in row["tradeoffs"]]
    if costs:
        text += ", at the cost of " + ", ".join(costs)
    unsettled = [k["text"] for k in row["constraints"] if k["status"] != "satisfied"]
    if unsettled:
        text += "; " + "; ".join(unsettled)
    return text


def median_metrics(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = {k for r in rows for k, v in r.items() if isinstance(v, int | float)
            and not isinstance(v, bool)}
    return {k: centre([float(r[k]) for r in rows if isinstance(r.get(k), int | float)])
            for k in sorted(keys)}


def confirm(trials: Sequence[optuna.trial.FrozenTrial], baseline: dict[str, Any],
            metric: str, direction: Direction, ev: EvaluationSpec, seed: int, measure: Measure,
            on_start: Callable[[int], None] | None = None,
            on_rep: Callable[[], None] | None = None,
            constraints: Sequence[Constraint] = (), slo: str | None = None,
            check: Callable[[dict[str, Any], str], None] | None = None) -> dict[str, Any]:
    """The whole confirmation of a finished search (`trials`); the result as stored.
    `slo`: the SLO a capacity objective keeps, said in each candidate's line. `check`:
    called with each candidate's configuration (read back from storage: input) and where
    it came from before anything is measured; it raises to refuse one."""
    cands = candidates(trials, baseline, direction, ev.confirm_top)
    if not cands:
        return {"recommended": None, "candidates": [], "verdict": NO_CANDIDATE}
    for c in cands:
        if check is not None:
            check(c["config"], f"stored trial {c['trial']}")
    base = Arm("baseline", baseline)
    arms = [(c, Arm(f"trial {c['trial']}", c["config"])) for c in cands]
    if on_start:
        on_start(len(cands))
    interleave([base, *(a for _, a in arms)], ev.confirm_rounds, metric, measure, seed,
               on_rep)
    return verdict(base, arms, metric, direction, ev, seed, constraints, slo)


# -- several objectives: the confirmed Pareto front ------------------------------------------


def _dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """`a` at least as good as `b` in every objective and better in one."""
    better = False
    for x, y, d in zip(a, b, directions, strict=True):
        if Direction(d).better(y, x):
            return False
        if x != y:
            better = True
    return better


def pareto_candidates(trials: Sequence[optuna.trial.FrozenTrial], baseline: dict[str, Any],
                      directions: Sequence[str], top: int) -> list[dict[str, Any]]:
    """The feasible search trials no other feasible trial dominates (by their search
    medians), one per configuration, the baseline's excluded; when more than `top`,
    `top` of them spread evenly along the first objective."""
    feasible = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE
                and t.user_attrs.get("kind") == "trial" and t.values
                and len(t.values) == len(directions)
                and all(v <= 0 for v in t.user_attrs.get("violations", [0.0]))]
    front = [t for t in feasible
             if not any(_dominates(o.values, t.values, directions) for o in feasible)]
    seen = {config_key(baseline)}
    out: list[dict[str, Any]] = []
    for t in sorted(front, key=lambda t: Direction(directions[0]).ranked(t.values[0])):
        cfg = t.user_attrs["config"]
        if config_key(cfg) in seen:
            continue
        seen.add(config_key(cfg))
        out.append({"trial": t.number, "config": cfg, "search_values": list(t.values)})
    if top and len(out) > top:
        idx = sorted({round(i * (len(out) - 1) / max(top - 1, 1)) for i in range(top)})
        out = [out[i] for i in idx]
    return out


def front_verdict(base: Arm, cands: list[tuple[dict[str, Any], Arm]],
                  objectives: Sequence[tuple[str, str]], ev: EvaluationSpec, seed: int,
                  constraints: Sequence[Constraint] = ()) -> dict[str, Any]:
    """Each Pareto candidate against the baseline on every objective (one-sided
    paired t in the objective's direction, Holm over all candidates × objectives; the
    change with its 95% CI) and every other shown metric and constraint. A candidate is on
    the confirmed front when it improves at least one objective significantly and violates
    no constraint significantly; the user picks one (`kvtune export --trial N`)."""
    names = [m for m, _ in objectives]
    tests = [(i, j, compare_rounds(arm.by_round(m), base.by_round(m), Direction(d),
                                   seed=seed))
             for i, (_, arm) in enumerate(cands) for j, (m, d) in enumerate(objectives)]
    adjusted = holm([c.p_value for _, _, c in tests])
    gains: dict[tuple[int, int], tuple[bool, float]] = {}
    for (i, j, comp), p_adj in zip(tests, adjusted, strict=True):
        gains[(i, j)] = (p_adj < ev.alpha and comp.ci_low > ev.min_improvement, p_adj)
    shown = shown_metrics(names[0], constraints)
    shown = [*names, *(m for m in shown if m not in names)]
    rows = []
    for i, (c, arm) in enumerate(cands):
        changes = metric_changes(base, arm, shown, ev.alpha, seed)
        for j, m in enumerate(names):
            ch = changes[m]
            if ch.better and not gains[(i, j)][0]:
                ch.significant = False  # an improvement must pass Holm's adjustment
        checks = [check_constraint(k, base, arm, seed) for k in constraints]
        improved = [m for j, m in enumerate(names) if gains[(i, j)][0]]
        on_front = arm.failed is None and bool(improved) and not any(
            k.status == "violated" for k in checks)
        row = {**c, "name": arm.name, "failed": arm.failed,
               "metrics": median_metrics(arm.metrics),
               "objectives": {m: {**changes[m].as_dict(), "p_adjusted": gains[(i, j)][1]}
                              for j, m in enumerate(names)},
               "improved": improved, "significant": on_front,
               "changes": {m: ch.as_dict() for m, ch in changes.items()},
               "constraints": [k.as_dict() for k in checks],
               "tradeoffs": [m for m, ch in changes.items() if ch.worse]}
        parts = [changes[m].text() for m in names]
        costs = [changes[m].text() for m in row["tradeoffs"] if m not in names]
        text = f"{arm.name}: " + "; ".join(parts)
        if costs:
            text += ", at the cost of " + ", ".join(costs)
        unsettled = [k["text"] for k in row["constraints"] if k["status"] != "satisfied"]
        if unsettled:
            text += "; " + "; ".join(unsettled)
        row["text"] = text
        rows.append(row)
    front = [r for r in rows if r["significant"]]
    if front:
        verdict_text = (f"{len(front)} configuration(s) on the confirmed front ("
                        + ", ".join(r["name"] for r in front) + "): each improves "
                        "at least one objective significantly; pick one and export it with "
                        "`kvtune export --trial N`")
    else:
        verdict_text = NONE_SIGNIFICANT
    return {"multi": True, "objectives": [{"metric": m, "direction": d}
                                          for m, d in objectives],
            "metric": names[0], "direction": objectives[0][1], "alpha": ev.alpha,
            "rounds": ev.confirm_rounds, "shown": shown,
            "constraints": [str(k) for k in constraints],
            "baseline": {"config": base.config, "samples": base.samples,
                         "metrics": median_metrics(base.metrics)},
            "candidates": rows, "front": [r["trial"] for r in front], "recommended": None,
            "verdict": verdict_text}


def confirm_front(study: optuna.Study, baseline: dict[str, Any],
                  objectives: Sequence[tuple[str, str]], ev: EvaluationSpec, seed: int,
                  measure: Measure, on_start: Callable[[int], None] | None = None,
                  on_rep: Callable[[], None] | None = None,
                  constraints: Sequence[Constraint] = (),
                  check: Callable[[dict[str, Any], str], None] | None = None
                  ) -> dict[str, Any]:
    """The confirmation of a Pareto study: its front's candidates (at most
    `confirm_top`, spread along the front) and the baseline in interleaved rounds.
    `check`: as `confirm`'s."""
    cands = pareto_candidates(study.get_trials(deepcopy=False), baseline,
                              [d for _, d in objectives], ev.confirm_top)
    if not cands:
        return {"multi": True, "recommended": None, "candidates": [], "front": [],
                "objectives": [{"metric": m, "direction": d} for m, d in objectives],
                "verdict": NO_CANDIDATE}
    for c in cands:
        if check is not None:
            check(c["config"], f"stored trial {c['trial']}")
    base = Arm("baseline", baseline)
    arms = [(c, Arm(f"trial {c['trial']}", c["config"])) for c in cands]
    if on_start:
        on_start(len(cands))
    interleave([base, *(a for _, a in arms)], ev.confirm_rounds, objectives[0][0], measure,
               seed, on_rep)
    return front_verdict(base, arms, objectives, ev, seed, constraints)
