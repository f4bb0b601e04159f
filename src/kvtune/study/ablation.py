"""The ablation of the recommendation: which of its changes made the gain.

After the confirmation recommends a configuration, kvtune measures it again beside the
baseline and beside one variant per changed knob — the recommendation with that one knob
put back to its baseline value — in interleaved rounds (the confirmation's `interleave`).
For each changed knob:

- its share of the gain: (log recommended − log without it) / (log recommended − log
  baseline) over the arms' mean logarithms, with a bootstrap 95% CI (every arm resampled
  on its own); independent multiplicative effects add up to 100%;
- whether it matters: reverting it moves the objective (two-sided Welch t test on the
  logarithms against the recommendation's samples of the same rounds, Holm-adjusted over
  the knobs still open at a look).
  A change "carries" the gain when the test is significant and reverting it loses,
  "hurts" when significant and reverting it gains, and is "noise" otherwise.

How many rounds (a sequential design, so clear effects stay cheap):

1. every arm runs `confirm_rounds` rounds (the first look);
2. the noise of those samples (the logarithms' pooled SD) says how many rounds a revert
   effect of `evaluation.ablation_effect` (5%) needs for 80% power at the final level
   (`kvtune.stats.rounds_needed`, the confirmation's power formula, two-sided t),
   capped at `evaluation.ablation_max_rounds` (30);
3. more rounds, in looks spaced ×1.5 up to that number, measure only the recommendation
   and the changes still ambiguous. A change stops when its test is significant, or when
   its effect's 90% CI lies within ±ablation_effect (it is smaller than what the ablation
   must resolve). The type-I error over all looks stays below alpha: each interim look
   tests at alpha × 0.2 / (looks − 1), the final one at alpha × 0.8 (a union bound, as
   Haybittle–Peto's boundary); stopping for "smaller than the effect" never adds
   false carriers.

What is still ambiguous at the cap is said ("unresolved": its revert effect's CI).

The minimal configuration keeps only the changes that carry the gain (the others go back
to the baseline). It is derived, not measured: when the shares add up to far from 100%
the changes interact and the summary says so.

Cost: at least (changed knobs + 2) × confirm_rounds repetitions (`cost`), at most that
plus (changed knobs + 1) × (ablation_max_rounds − confirm_rounds) (`max_cost`); none with
a single change (the confirmation already measured it against the baseline). Skipped
with `evaluation.ablation: false` or `kvtune tune --no-ablation`.

Stored as `store.put_result(study, "ablation", result)`; the schema is `SCHEMA` below
(docs/report.md repeats it; `kvtune export --minimal` reads `minimal_changes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from kvtune.present import MINUS, NO_SIGNIFICANT_CHANGE, change_fraction, change_record, number
from kvtune.spec import EvaluationSpec
from kvtune.stats import detectable_improvement, holm, rounds_needed
from kvtune.study.confirm import Arm, Measure, interleave

SCHEMA_VERSION = 2

# The share of alpha spent on all interim looks together (the rest on the final look).
INTERIM_SHARE = 0.2
# Looks after the first are spaced by this factor (at least 2 rounds apart).
LOOK_GROWTH = 1.5
# An arm whose revert effect's (1 - 2 * EQUIVALENCE_ALPHA) CI lies within ±effect stops.
EQUIVALENCE_ALPHA = 0.05

SCHEMA = """\
{
  "schema": 2,
  "metric": str, "direction": "maximize"|"minimize", "alpha": float,
  "rounds": int,                     # the most rounds any arm ran
  "first_rounds": int,               # every arm's rounds (confirm_rounds)
  "planned_rounds": int,             # what the first look's noise asked for (capped)
  "max_rounds": int,                 # evaluation.ablation_max_rounds
  "effect": float,                   # evaluation.ablation_effect: the effect to resolve
  "noise_sd": float|null,            # the first look's pooled SD of the logarithms
  "looks": [int],                    # rounds at each look
  "levels": [float],                 # the Holm level of each look (they add up to alpha)
  "recommended": str,                # the confirmation's recommended arm ("trial 7")
  "measurements": int,               # repetitions the ablation ran (its cost)
  "changes": {knob: {"baseline": value, "recommended": value}},
  "gain": change record,             # recommended vs baseline in the first look's rounds
  "baseline_samples": [float], "recommended_samples": [float],
  "knobs": [{                        # one per changed knob, largest share first
     "knob": str, "baseline": value, "recommended": value,
     "samples": [float], "median": float,   # the recommendation with this knob reverted
     "rounds": int,                  # rounds this arm ran
     "share": float, "share_ci": [float, float],  # of the gain (1.0 = all of it)
     "p_value": float, "p_adjusted": float,       # reverted vs recommended, Holm, at
     "level": float,                 # ... the look that decided, tested at this level
     "stopped": "significant"|"within effect"|"last look"|"failed",
     "revert_ci": [float, float],    # 95% CI of what reverting it does (relative)
     "effect": "carries"|"hurts"|"noise",
     "revert": change record}],      # what reverting it does to the metric
  "carries": [knob], "hurts": [knob], "noise": [knob],
  "unresolved": [knob],              # noise at the last look, but not shown < effect
  "shares_sum": float|null,          # far from 1: the changes interact
  "resolution": float|null,          # smallest revert effect detected with 80% power
  "minimal_changes": {knob: value},  # only the changes that carry the gain
  "minimal_config": {knob: value},   # the baseline with those changes applied
  "text": str,                       # the one-line explanation
  "skipped": str|null                # why nothing was measured, if so
}
change record = kvtune.present.change_record(...): {"metric", "change", "ci", "direction",
"verdict", "text"}"""


def changed_knobs(recommended: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    return [k for k, v in recommended.items() if k in baseline and baseline[k] != v]


def _med(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else math.nan


def _logs(xs: list[float]) -> np.ndarray:
    return np.log(np.asarray([v for v in xs if v > 0], dtype=float))


def _p_value(a: list[float], b: list[float]) -> float:
    """Two-sided Welch t test on the logarithms (relative changes; the metric's noise is
    multiplicative). A rank test cannot reach Holm's level with the confirmation's few
    rounds: 4 against 4 gives at best p = 0.029 before adjustment."""
    xa, xb = _logs(a), _logs(b)
    if len(xa) < 2 or len(xb) < 2:
        return 1.0
    if np.ptp(xa) == 0 and np.ptp(xb) == 0:
        return 0.0 if xa[0] != xb[0] else 1.0
    p = float(sps.ttest_ind(xa, xb, equal_var=False).pvalue)
    return 1.0 if math.isnan(p) else p


def _log_ci(a: list[float], b: list[float], level: float) -> tuple[float, float]:
    """Welch CI of mean(log a) − mean(log b) at confidence `level` (NaN when it cannot)."""
    xa, xb = _logs(a), _logs(b)
    if len(xa) < 2 or len(xb) < 2:
        return math.nan, math.nan
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    d = float(xa.mean() - xb.mean())
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d
    dof = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1))
    h = float(sps.t.ppf(0.5 + level / 2, dof)) * se
    return d - h, d + h


def pooled_sd(samples: list[list[float]]) -> float:
    """The pooled SD of the logarithms of several arms' samples (NaN without two)."""
    logs = [x for x in (_logs(xs) for xs in samples) if len(x) >= 2]
    dof = sum(len(x) - 1 for x in logs)
    if not dof:
        return math.nan
    return math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / dof)


def looks(first: int, planned: int) -> list[int]:
    """The rounds at each look: `first`, then ×LOOK_GROWTH (at least 2 more) up to
    `planned`."""
    out = [first]
    while out[-1] < planned:
        out.append(min(planned, max(out[-1] + 2, math.ceil(out[-1] * LOOK_GROWTH))))
    return out


def levels(alpha: float, n_looks: int) -> list[float]:
    """Each look's Holm level; they add up to alpha (a union bound over the looks)."""
    if n_looks <= 1:
        return [alpha]
    interim = alpha * INTERIM_SHARE / (n_looks - 1)
    return [interim] * (n_looks - 1) + [alpha * (1 - INTERIM_SHARE)]


def plan(sd: float, effect: float, alpha: float, m: int, first: int, cap: int) -> int:
    """Rounds per arm for 80% power against a revert effect of `effect` at this noise (the
    final look's level, two-sided t on the logarithms, Holm over `m`), between `first`
    and `cap`. Without a cap above `first`, `first`: one fixed look."""
    if cap <= first or math.isnan(sd):
        return first
    final = levels(alpha, 2)[-1]
    need = rounds_needed(sd, math.log1p(effect), final, m, two_sided=True, rank=False)
    return max(first, min(cap, need))


@dataclass
class Decision:
    """How one changed knob's test ended: its p-value and Holm-adjusted p at the look
    that decided, that look's level and why it stopped."""

    p: float
    p_adj: float
    level: float
    stopped: str
    rounds: int


def _shares(rec: list[float], base: list[float], ablated: list[float],
            rng: np.random.Generator, resamples: int) -> tuple[float, float, float]:
    """The share of the gain on the log scale, (log rec − log without) / (log rec − log
    baseline) over the arms' mean logarithms (the scale of the test; independent
    multiplicative effects add up to 100%), with a percentile bootstrap CI (every arm
    resampled on its own)."""
    r, b, a = _logs(rec), _logs(base), _logs(ablated)
    if not (len(r) and len(b) and len(a)):
        return math.nan, math.nan, math.nan
    gain = r.mean() - b.mean()
    share = float((r.mean() - a.mean()) / gain) if gain else math.nan
    rs = r[rng.integers(0, len(r), (resamples, len(r)))].mean(axis=1)
    bs = b[rng.integers(0, len(b), (resamples, len(b)))].mean(axis=1)
    as_ = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
    g = rs - bs
    ok = g != 0
    if not ok.any():
        return share, math.nan, math.nan
    boot = (rs[ok] - as_[ok]) / g[ok]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return share, float(lo), float(hi)


def _paired(rec: Arm, arm: Arm) -> list[float]:
    """The recommendation's samples of the rounds `arm` ran (drift hits both alike)."""
    return rec.samples[:len(arm.samples)] if arm.samples else rec.samples


def look_at(rec: Arm, arms: list[tuple[str, Arm]], level: float, effect: float,
              last: bool) -> dict[str, Decision]:
    """One look over the arms still open: Holm over them at `level`; an arm stops when
    significant, when its effect's CI lies within ±effect, or at the last look."""
    pvals = [_p_value(a.samples, _paired(rec, a)) for _, a in arms]
    out: dict[str, Decision] = {}
    bound = math.log1p(effect)
    for (knob, arm), p, p_adj in zip(arms, pvals, holm(pvals), strict=True):
        n = len(arm.samples)
        if arm.failed is not None:
            out[knob] = Decision(p, p_adj, level, "failed", n)
        elif p_adj < level:
            out[knob] = Decision(p, p_adj, level, "significant", n)
        else:
            lo, hi = _log_ci(arm.samples, _paired(rec, arm), 1 - 2 * EQUIVALENCE_ALPHA)
            if -bound < lo and hi < bound:
                out[knob] = Decision(p, p_adj, level, "within effect", n)
            elif last:
                out[knob] = Decision(p, p_adj, level, "last look", n)
    return out


def analyse(rec_arm: Arm, base_arm: Arm, arms: list[tuple[str, Arm]],
            recommended: dict[str, Any], baseline: dict[str, Any], metric: str,
            direction: str, alpha: float, seed: int = 0,
            resamples: int = 4000, decisions: dict[str, Decision] | None = None,
            effect: float = 0.05, first_rounds: int | None = None,
            final_level: float | None = None) -> dict[str, Any]:
    """Shares, CIs and effects from measured arms (`arms`: (knob, reverted arm)).
    `decisions`: how each knob's sequential test ended (`ablate`, whose last look tests at
    `final_level`); without them, one look at `alpha` over every arm as measured."""
    sign = 1.0 if direction == "maximize" else -1.0
    rng = np.random.default_rng(seed)
    if decisions is None:
        decisions = look_at(rec_arm, arms, alpha, effect, last=True)
    n0 = first_rounds or len(base_arm.samples)
    base = base_arm.samples
    rows: list[dict[str, Any]] = []
    for knob, arm in arms:
        d = decisions[knob]
        rec = _paired(rec_arm, arm)
        share, lo, hi = _shares(rec, base, arm.samples, rng, resamples)
        # what reverting it does: the ratio of geometric means (the test's scale)
        la, lr = _logs(arm.samples), _logs(rec)
        rev = float(math.expm1(la.mean() - lr.mean())) if len(la) and len(lr) else None
        rlo, rhi = _log_ci(arm.samples, rec, 0.95)
        effect_ = "noise"
        if d.stopped == "significant" and rev is not None and rev != 0:
            # the test decided that it matters; the direction says which way
            effect_ = "carries" if sign * rev < 0 else "hurts"
        rows.append({"knob": knob, "baseline": baseline[knob],
                     "recommended": recommended[knob], "samples": arm.samples,
                     "median": _med(arm.samples), "rounds": d.rounds, "share": share,
                     "share_ci": [lo, hi], "p_value": d.p, "p_adjusted": d.p_adj,
                     "level": d.level, "stopped": d.stopped,
                     "revert_ci": [math.expm1(rlo), math.expm1(rhi)], "effect": effect_,
                     "failed": arm.failed,
                     "revert": change_record(metric, rev, direction,
                                             significant=effect_ != "noise")})
    rows.sort(key=lambda r: -(r["share"] if not math.isnan(r["share"]) else -math.inf))
    gain = change_fraction(_med(base), _med(rec_arm.samples[:n0]))
    carries = [r["knob"] for r in rows if r["effect"] == "carries"]
    minimal = {k: recommended[k] for k in carries}
    shares = [r["share"] for r in rows if not math.isnan(r["share"])]
    noise = [r["knob"] for r in rows if r["effect"] == "noise"]
    out = {
        "schema": SCHEMA_VERSION, "metric": metric, "direction": direction, "alpha": alpha,
        "effect": effect,
        "changes": {r["knob"]: {"baseline": r["baseline"], "recommended": r["recommended"]}
                    for r in rows},
        "gain": change_record(metric, gain, direction),
        "baseline_samples": base, "recommended_samples": rec_arm.samples,
        "knobs": rows, "carries": carries,
        "hurts": [r["knob"] for r in rows if r["effect"] == "hurts"],
        "noise": noise,
        "unresolved": [r["knob"] for r in rows if r["effect"] == "noise"
                       and r["stopped"] == "last look"],
        "shares_sum": float(sum(shares)) if shares else None,
        "minimal_changes": minimal, "minimal_config": {**baseline, **minimal},
        "skipped": None,
    }
    final = alpha if final_level is None else final_level
    reached = max((r["rounds"] for r in rows if r["effect"] == "noise"),
                  default=max((r["rounds"] for r in rows), default=n0))
    out["resolution"] = resolution([base, rec_arm.samples, *(a.samples for _, a in arms)],
                                   len(arms), final, rounds=reached)
    out["text"] = explain(out)
    return out


def resolution(samples: list[list[float]], m: int, alpha: float, power: float = 0.8,
               rounds: int | None = None) -> float | None:
    """The smallest relative change from reverting one knob that the ablation detects with
    probability `power` (kvtune.stats.detectable_improvement: two-sided t on the
    logarithms at Holm's strictest level alpha / m, the arms' pooled noise), at `rounds`
    rounds per arm (default: the fewest any arm ran)."""
    sd = pooled_sd(samples)
    if math.isnan(sd):
        return None
    n = rounds or min(len(_logs(xs)) for xs in samples if len(_logs(xs)) >= 2)
    d = detectable_improvement(sd, n, alpha, m, power, two_sided=True, rank=False)
    return None if math.isnan(d) else float(math.expm1(d))


def _share(x: float) -> str:
    return f"{x:.0%}".replace("-", MINUS) if not math.isnan(x) else "-"


def _change(row: dict[str, Any]) -> str:
    def v(x: Any) -> str:
        return number(x) if isinstance(x, float) else str(x)

    return f"{row['knob']} {v(row['baseline'])} → {v(row['recommended'])}"


def explain(res: dict[str, Any]) -> str:
    """One line: "memcached.threads 4 → 1 carries the gain (share 98%, 95% CI 91% … 104%);
    reverting the other 3 changes makes no significant change"."""
    if res.get("skipped"):
        return f"ablation skipped: {res['skipped']}"
    rows = {r["knob"]: r for r in res["knobs"]}
    parts = []
    for k in res["carries"]:
        r = rows[k]
        lo, hi = r["share_ci"]
        parts.append(f"{_change(r)} (share {_share(r['share'])}, 95% CI {_share(lo)} … "
                     f"{_share(hi)})")
    n = len(rows)
    if parts:
        verb = "carries" if len(parts) == 1 else "carry"
        text = f"{' and '.join(parts)} {verb} the gain"
    else:
        text = "no single change carries the gain measurably"
    for k in res["hurts"]:
        text += f"; reverting {_change(rows[k])} improves {res['metric']} " \
                f"({rows[k]['revert']['text']})"
    noise = res["noise"]
    if noise:
        if parts and len(noise) == n - len(parts) and not res["hurts"]:
            other = "the other change" if len(noise) == 1 else \
                f"the other {len(noise)} changes"
        else:
            other = ", ".join(noise)
        text += f"; reverting {other}: {NO_SIGNIFICANT_CHANGE}"
        eff = res.get("effect")
        small = [k for k in noise if rows[k].get("stopped") == "within effect"]
        if eff and small and len(small) == len(noise):
            text += f" (each worth less than {eff:.0%} of {res['metric']}, 90% CI)"
    unresolved = res.get("unresolved") or []
    r = res.get("resolution")
    if unresolved:
        cis = []
        for k in unresolved:
            lo, hi = rows[k].get("revert_ci", [math.nan, math.nan])
            ci = "" if math.isnan(lo) else \
                f" (reverting it: {_pct(lo)} … {_pct(hi)})"
            cis.append(f"{k}{ci}")
        at = res.get("rounds") or "these"
        text += (f"; still ambiguous after {at} rounds: {', '.join(cis)}"
                 + (f" — at this noise a change worth less than about {r:.0%} of "
                    f"{res['metric']} cannot be told from noise" if r is not None
                    and not math.isnan(r) else ""))
        cap = res.get("max_rounds")
        if cap and res.get("rounds") == cap:
            text += f" (the cap, evaluation.ablation_max_rounds = {cap})"
    s = res.get("shares_sum")
    if s is not None and n > 1 and parts and not 0.5 <= s <= 1.5:
        text += (f" (the shares add up to {s:.0%}: the changes interact, so the minimal "
                 "configuration is a lead to confirm)")
    return text


def _pct(x: float) -> str:
    return f"{x:+.1%}".replace("-", MINUS)


def single(confirmation: dict[str, Any], recommended: dict[str, Any],
           baseline: dict[str, Any], knob: str, metric: str, direction: str,
           alpha: float) -> dict[str, Any]:
    """One changed knob: the confirmation already compared it with the baseline."""
    rec = confirmation["recommended"]
    comp = rec["comparison"]
    base = confirmation["baseline"]["samples"]
    row = {"knob": knob, "baseline": baseline[knob], "recommended": recommended[knob],
           "samples": base, "median": _med(base), "rounds": len(base), "share": 1.0,
           "share_ci": [1.0, 1.0], "p_value": comp["p_value"],
           "p_adjusted": rec.get("p_adjusted", comp["p_value"]), "level": alpha,
           "stopped": "significant", "revert_ci": [math.nan, math.nan], "effect": "carries",
           "revert": change_record(metric, change_fraction(_med(rec["samples"]), _med(
               base)), direction, significant=True),
           "failed": None}
    out = {"schema": SCHEMA_VERSION, "metric": metric, "direction": direction,
           "alpha": alpha, "measurements": 0, "rounds": 0,
           "recommended": rec["name"],
           "changes": {knob: {"baseline": baseline[knob], "recommended": recommended[knob]}},
           "gain": change_record(metric, comp.get("change"), direction,
                                 ci=(comp.get("change_ci_low"), comp.get("change_ci_high")),
                                 significant=True),
           "baseline_samples": base,
           "recommended_samples": rec["samples"], "knobs": [row], "carries": [knob],
           "hurts": [], "noise": [], "unresolved": [], "shares_sum": 1.0,
           "minimal_changes": {knob: recommended[knob]},
           "minimal_config": {**baseline, knob: recommended[knob]}, "skipped": None,
           "note": "one change: the confirmation measured it against the baseline"}
    out["text"] = explain(out)
    return out


def skipped(reason: str, metric: str, direction: str) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "metric": metric, "direction": direction,
            "measurements": 0, "knobs": [], "carries": [], "hurts": [], "noise": [],
            "unresolved": [], "changes": {}, "minimal_changes": {}, "minimal_config": {},
            "shares_sum": None, "skipped": reason, "text": f"ablation skipped: {reason}"}


def first_rounds(ev: EvaluationSpec) -> int:
    """Every arm's rounds at the first look: the confirmation's (at least 2)."""
    return max(ev.confirm_rounds, 2)


def _n_changed(confirmation: dict[str, Any], baseline: dict[str, Any]) -> int:
    rec = confirmation.get("recommended")
    return len(changed_knobs(rec["config"], baseline)) if rec else 0


def cost(confirmation: dict[str, Any], baseline: dict[str, Any], rounds: int) -> int:
    """Repetitions of the ablation's first look (all of it when no arm stays ambiguous)."""
    n = _n_changed(confirmation, baseline)
    return 0 if n <= 1 else (n + 2) * rounds


def max_cost(confirmation: dict[str, Any], baseline: dict[str, Any],
             ev: EvaluationSpec) -> int:
    """Repetitions of the ablation when every change stays ambiguous up to the cap."""
    return max_cost_of(_n_changed(confirmation, baseline), ev)


def max_cost_of(n: int, ev: EvaluationSpec) -> int:
    """The ablation's most repetitions for a recommendation that changes `n` knobs."""
    first = first_rounds(ev)
    extra = max(0, ev.ablation_max_rounds - first)
    return 0 if n <= 1 else (n + 2) * first + (n + 1) * extra


def ablate(confirmation: dict[str, Any], baseline: dict[str, Any], metric: str,
           direction: str, ev: EvaluationSpec, seed: int, measure: Measure,
           on_start: Callable[[int], None] | None = None,
           on_rep: Callable[[], None] | None = None,
           on_look: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """The whole ablation of a confirmation's recommendation; the result as stored.
    `on_look(rounds, arms)` is called before each look after the first that measures more
    (the rounds it adds, the arms still ambiguous)."""
    rec = confirmation.get("recommended")
    if not rec:
        return skipped("the confirmation recommended nothing", metric, direction)
    recommended = rec["config"]
    changed = changed_knobs(recommended, baseline)
    if not changed:
        return skipped("the recommendation changes no knob", metric, direction)
    if len(changed) == 1:
        return single(confirmation, recommended, baseline, changed[0], metric, direction,
                      ev.alpha)
    rec_arm = Arm(rec["name"], recommended)
    base_arm = Arm("baseline", baseline)
    arms = [(k, Arm(f"without {k}", {**recommended, k: baseline[k]})) for k in changed]
    if on_start:
        on_start(len(changed))
    first = first_rounds(ev)
    count = {"n": 0}

    def counted(cfg: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        count["n"] += 1
        return measure(cfg)

    interleave([base_arm, rec_arm, *(a for _, a in arms)], first, metric, counted,
               seed + 1, on_rep)
    if rec_arm.failed or base_arm.failed:
        return skipped(f"the {'recommendation' if rec_arm.failed else 'baseline'} failed: "
                       f"{rec_arm.failed or base_arm.failed}", metric, direction)
    sd = pooled_sd([base_arm.samples, rec_arm.samples, *(a.samples for _, a in arms)])
    planned = plan(sd, ev.ablation_effect, ev.alpha, len(arms), first,
                   ev.ablation_max_rounds)
    schedule = looks(first, planned)
    lv = levels(ev.alpha, len(schedule))
    decisions: dict[str, Decision] = {}
    for i, n in enumerate(schedule):
        open_ = [(k, a) for k, a in arms if k not in decisions]
        if i:
            if on_look:
                on_look(n - schedule[i - 1], len(open_))
            interleave([rec_arm, *(a for _, a in open_)], n - schedule[i - 1], metric,
                       counted, seed + 1 + i, on_rep)
            if rec_arm.failed:
                return skipped(f"the recommendation failed: {rec_arm.failed}", metric,
                               direction)
        decisions.update(look_at(rec_arm, open_, lv[i], ev.ablation_effect,
                                   last=i == len(schedule) - 1))
        if len(decisions) == len(arms):
            break
    out = analyse(rec_arm, base_arm, arms, recommended, baseline, metric, direction,
                  ev.alpha, seed, decisions=decisions, effect=ev.ablation_effect,
                  first_rounds=first, final_level=lv[-1])
    out.update({"recommended": rec["name"], "rounds": len(rec_arm.samples),
                "first_rounds": first, "planned_rounds": planned,
                "max_rounds": ev.ablation_max_rounds,
                "noise_sd": None if math.isnan(sd) else sd,
                "looks": [n for n in schedule if n <= len(rec_arm.samples)],
                "levels": lv, "measurements": count["n"]})
    out["text"] = explain(out)
    return out


def _rounds_text(res: dict[str, Any]) -> str:
    first, most = res.get("first_rounds"), res.get("rounds", 0)
    if first and most > first:
        return f"{first}–{most} interleaved rounds, more only for changes still ambiguous;"
    return f"{most} interleaved rounds"


def lines(res: dict[str, Any] | None) -> list[str]:
    """The ablation for the terminal: its verdict, then one line per changed knob."""
    if not res:
        return []
    rounds = _rounds_text(res)
    sep = " " if rounds.endswith(";") else ", "
    out = [f"Ablation ({rounds}{sep}"
           f"{res.get('measurements', 0)} extra repetitions): {res['text']}"]
    for r in res["knobs"]:
        lo, hi = r["share_ci"]
        ci = "" if math.isnan(lo) else f" (95% CI {_share(lo)} … {_share(hi)})"
        rounds = f" [{r['rounds']} rounds]" if res.get("first_rounds") and r.get(
            "rounds", 0) > res["first_rounds"] else ""
        out.append(f"  {_change(r)}: share of the gain {_share(r['share'])}{ci}; reverting it: "
                   f"{r['revert']['text']}; {r['effect']}{rounds}")
    return out
