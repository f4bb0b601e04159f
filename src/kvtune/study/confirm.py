"""The confirmation: the best distinct feasible candidates of the search and the baseline
re-run interleaved (each round runs every arm once, in a fresh random order, so slow drift
hits all arms alike); each candidate is compared with the baseline on these fresh samples
only, Holm-adjusted, and the significant one with the largest improvement is recommended —
or none is."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from kvtune.spec import EvaluationSpec
from kvtune.stats import centre, compare, holm
from kvtune.store import config_key

NO_CANDIDATE = "no feasible candidate better than the baseline was found"
NONE_SIGNIFICANT = "no significant improvement found"


def candidates(trials: Sequence[optuna.trial.FrozenTrial], baseline: dict[str, Any],
               direction: str, top: int) -> list[dict[str, Any]]:
    """The best `top` distinct feasible search configurations by their search value, none
    of them the baseline's."""
    seen = {config_key(baseline)}
    ranked = sorted(
        (t for t in trials if t.state == optuna.trial.TrialState.COMPLETE
         and t.user_attrs.get("kind") == "trial"
         and all(v <= 0 for v in t.user_attrs.get("violations", [0.0]))),
        key=lambda t: float(t.value or 0) if direction == "minimize" else -float(t.value or 0))
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


# One repetition of a configuration: (status, reason, metrics), as Evaluator.run_one gives.
Measure = Callable[[dict[str, Any]], tuple[str, str, dict[str, Any]]]


def interleave(arms: list[Arm], rounds: int, metric: str, measure: Measure, seed: int,
               on_rep: Callable[[], None] | None = None) -> None:
    """`rounds` rounds over `arms`, each in a fresh shuffled order; an arm that fails is
    not measured again."""
    rng = random.Random(seed)
    for _ in range(rounds):
        order = arms[:]
        rng.shuffle(order)
        for a in order:
            if on_rep:
                on_rep()
            if a.failed is not None:
                continue
            status, reason, metrics = measure(a.config)
            if status == "failed":
                a.failed = reason
                continue
            v = metrics.get(metric)
            if v is not None:
                a.samples.append(float(v))
                a.metrics.append(metrics)


def verdict(base: Arm, cands: list[tuple[dict[str, Any], Arm]], metric: str, direction: str,
            ev: EvaluationSpec, seed: int) -> dict[str, Any]:
    """Each candidate against the baseline (ratio CI, one-sided Mann–Whitney, Holm) and the
    recommendation: the significant candidate with the largest improvement, or None."""
    comps = [compare(arm.samples, base.samples, direction, seed=seed) for _, arm in cands]
    adjusted = holm([c.p_value for c in comps])
    rows = []
    best: dict[str, Any] | None = None
    for (c, arm), comp, p_adj in zip(cands, comps, adjusted, strict=True):
        ok = arm.failed is None and p_adj < ev.alpha and comp.ci_low > ev.min_improvement
        row = {**c, "name": arm.name, "samples": arm.samples, "comparison": comp.as_dict(),
               "p_adjusted": p_adj, "significant": ok, "failed": arm.failed,
               "metrics": median_metrics(arm.metrics)}
        rows.append(row)
        if ok and (best is None or comp.improvement > best["comparison"]["improvement"]):
            best = row
    text = NONE_SIGNIFICANT
    if best:
        b = best["comparison"]
        text = (f"{best['name']} changes {metric} by {b['change']:+.1%} (95% CI "
                f"{b['change_ci_low']:+.1%} … {b['change_ci_high']:+.1%}), a significant "
                f"improvement (Holm-adjusted p={best['p_adjusted']:.3g})")
    return {"metric": metric, "direction": direction, "alpha": ev.alpha,
            "rounds": ev.confirm_rounds,
            "baseline": {"config": base.config, "samples": base.samples,
                         "metrics": median_metrics(base.metrics)},
            "candidates": rows, "recommended": best, "verdict": text}


def median_metrics(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = {k for r in rows for k, v in r.items() if isinstance(v, int | float)
            and not isinstance(v, bool)}
    return {k: centre([float(r[k]) for r in rows if isinstance(r.get(k), int | float)])
            for k in sorted(keys)}


def confirm(trials: Sequence[optuna.trial.FrozenTrial], baseline: dict[str, Any],
            metric: str, direction: str, ev: EvaluationSpec, seed: int, measure: Measure,
            on_start: Callable[[int], None] | None = None,
            on_rep: Callable[[], None] | None = None) -> dict[str, Any]:
    """The whole confirmation of a finished search (`trials`); the result as stored."""
    cands = candidates(trials, baseline, direction, ev.confirm_top)
    if not cands:
        return {"recommended": None, "candidates": [], "verdict": NO_CANDIDATE}
    base = Arm("baseline", baseline)
    arms = [(c, Arm(f"trial {c['trial']}", c["config"])) for c in cands]
    if on_start:
        on_start(len(cands))
    interleave([base, *(a for _, a in arms)], ev.confirm_rounds, metric, measure, seed,
               on_rep)
    return verdict(base, arms, metric, direction, ev, seed)
