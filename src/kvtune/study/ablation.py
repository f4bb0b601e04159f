"""The ablation of the recommendation: which of its changes made the gain.

After the confirmation recommends a configuration, kvtune measures it again beside the
baseline and beside one variant per changed knob — the recommendation with that one knob
put back to its baseline value — in interleaved rounds (the confirmation's `interleave`).
For each changed knob:

- what it is worth: one interval of mean log(recommended / without it) over the rounds
  both ran, paired by round as the confirmation pairs its arms (`stats.compare_rounds`:
  the t interval of the rounds' log ratios), at the look's level over the changes still
  open (Bonferroni); its
  share of the gain (that interval over the recommendation's log gain), what reverting it
  does (the same interval on the metric's scale) and its verdict all come from it: it
  "carries" the gain when the interval is wholly above zero, "hurts" when wholly below,
  "does not carry" when wholly below `evaluation.ablation_share` of the gain, and is
  "ambiguous" when the budget ends first.

How many rounds (a sequential design, so clear effects stay cheap):

1. every arm runs `confirm_rounds` rounds (the first look);
2. the noise of those samples (the logarithms' pooled SD) says how many rounds resolving
   a share of `ablation_share` of the gain needs for 80% power at the final level
   (`kvtune.stats.rounds_needed`), capped at `evaluation.ablation_max_rounds` (30);
3. more rounds, in looks spaced ×1.5 up to that number, measure only the recommendation
   and the changes still open. Each interim look tests at alpha × 0.2 / (looks − 1), the
   final one at alpha × 0.8 (a union bound, as Haybittle–Peto's boundary);
   `evaluation.ablation_time` ends the looks that would take the ablation past it.

Then `choose`: the minimal configuration (the baseline plus the changes that carry) is
measured in new rounds interleaved with the full recommendation and the baseline, and
recommended unless the full one is significantly better; the choice, its reason and the
changes left out are stored in "choice" (export, verify, show and the report follow it).

Cost: at least (changed knobs + 2) × confirm_rounds repetitions (`cost`), at most
`max_cost`; none with a single change (the confirmation already measured it against the
baseline). Skipped with `evaluation.ablation: false` or `kvtune tune --no-ablation`.

Stored as `store.put_result(study, "ablation", result)`; the schema is `SCHEMA` below
(docs/report.md repeats it; `kvtune export --minimal` reads `minimal_changes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvtune import documents, present
from kvtune.documents import AblatedKnob, Ablation, Confirmation
from kvtune.metrics import Direction
from kvtune.present import (
    MISSING,
    SHARE,
    as_number,
    change_fraction,
    change_record,
    column,
    level_text,
    number,
)
from kvtune.spec import EvaluationSpec
from kvtune.stats import (
    compare_rounds,
    detectable_improvement,
    log_mean_diff,
    logs,
    pooled_log_sd,
    rounds_needed,
)
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
    final look's level, two-sided paired t on the rounds' log ratios, Holm over `m`),
    between `first`
    and `cap`. Without a cap above `first`, `first`: one fixed look."""
    if cap <= first or math.isnan(sd):
        return first
    final = levels(alpha, 2)[-1]
    need = rounds_needed(sd, math.log1p(effect), final, m, two_sided=True, paired=True)
    return max(first, min(cap, need))


@dataclass
class Decision:
    """How one changed knob's test ended at the look that decided: what the change is
    worth on the log scale (`worth`: > 0 helps the objective) with its interval at that
    look's level over the open changes (Bonferroni), the gain it is a share of, the
    Welch p-value, and why it stopped."""

    p: float
    p_adj: float
    level: float
    stopped: str  # "carries" | "hurts" | "below share" | "last look" | "failed"
    rounds: int
    worth: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    gain: float = math.nan


def _paired_worth(rec: Arm, arm: Arm, direction: Direction,
                  level: float) -> tuple[float, float, float, float]:
    """What a change is worth on the log scale, paired by round as the confirmation pairs
    its arms (`stats.compare_rounds`: the recommendation against the arm without the
    change, in each round both ran): sign × mean log(rec / without) with its t interval at
    `level`, and the two-sided paired t p-value."""
    c = compare_rounds(rec.samples_by_round(), arm.samples_by_round(), direction,
                       level=level, two_sided=True)
    if math.isnan(c.improvement):
        return math.nan, math.nan, math.nan, 1.0
    return (math.log1p(c.improvement), math.log1p(c.ci_low), math.log1p(c.ci_high),
            c.p_value)


def _gain_log(rec: list[float], base: list[float], sign: float) -> float:
    return sign * log_mean_diff(rec, base)


def look_at(rec: Arm, arms: list[tuple[str, Arm]], level: float, share: float,
            gain: float, sign: float, last: bool) -> dict[str, Decision]:
    """One look over the arms still open, one interval per change at `level` / (open
    changes) (Bonferroni): the change hurts when its interval is wholly below zero, does
    not carry the gain when it is wholly below `share` of the gain (whatever it is worth,
    not worth shipping), carries it when wholly above zero; otherwise it stays open (and
    at the last look is said ambiguous). Its share, its verdict and its words all come
    from this one interval."""
    m = max(len(arms), 1)
    conf = 1 - level / m
    direction = Direction.MAXIMIZE if sign > 0 else Direction.MINIMIZE
    out: dict[str, Decision] = {}
    for knob, arm in arms:
        n = len(arm.samples)
        worth, lo, hi, p = _paired_worth(rec, arm, direction, conf)
        w = (worth, lo, hi)
        if arm.failed is not None:
            out[knob] = Decision(p, min(1.0, p * m), level, "failed", n, w, gain)
        elif hi < 0:
            out[knob] = Decision(p, min(1.0, p * m), level, "hurts", n, w, gain)
        elif gain > 0 and hi < share * gain:
            # Whatever it is worth, less than `share` of the gain: not worth shipping.
            out[knob] = Decision(p, min(1.0, p * m), level, "below share", n, w, gain)
        elif lo > 0:
            out[knob] = Decision(p, min(1.0, p * m), level, "carries", n, w, gain)
        elif last:
            out[knob] = Decision(p, min(1.0, p * m), level, "last look", n, w, gain)
    return out


# The words for each way a change's test can end.
EFFECTS = {"carries": "carries", "hurts": "hurts", "below share": "does not carry",
           "last look": "ambiguous", "failed": "ambiguous"}


def analyse(rec_arm: Arm, base_arm: Arm, arms: list[tuple[str, Arm]],
            recommended: dict[str, Any], baseline: dict[str, Any], metric: str,
            direction: Direction, alpha: float, seed: int = 0,
            decisions: dict[str, Decision] | None = None, share: float = 0.10,
            first_rounds: int | None = None) -> dict[str, Any]:
    """Shares, intervals and verdicts from measured arms (`arms`: (knob, reverted arm)).
    `decisions`: how each knob's sequential test ended (`ablate`); without them, one last
    look at `alpha` over every arm as measured."""
    sign = Direction(direction).sign
    if decisions is None:
        g = _gain_log(rec_arm.samples, base_arm.samples, sign)
        decisions = look_at(rec_arm, arms, alpha, share, g, sign, last=True)
    n0 = first_rounds or len(base_arm.samples)
    base = base_arm.samples
    rows: list[dict[str, Any]] = []
    for knob, arm in arms:
        d = decisions[knob]
        worth, lo, hi = d.worth
        g = d.gain
        ok = g > 0 and not math.isnan(g)
        effect = EFFECTS[d.stopped]
        significant = effect in ("carries", "hurts")
        # what reverting it does to the metric: the ratio of geometric means, and its
        # interval: the same interval as the verdict's, on the metric's scale
        rev = None if math.isnan(worth) else float(math.expm1(-sign * worth))
        rev_ci = sorted(math.expm1(-sign * x) for x in (lo, hi)) if not math.isnan(lo) \
            else [math.nan, math.nan]
        rows.append({"knob": knob, "baseline": baseline[knob],
                     "recommended": recommended[knob], "samples": list(arm.samples),
                     "median": _med(arm.samples), "rounds": d.rounds,
                     "share": worth / g if ok else math.nan,
                     "share_ci": [lo / g, hi / g] if ok else [math.nan, math.nan],
                     "p_value": d.p, "p_adjusted": d.p_adj, "level": d.level,
                     "confidence": 1 - d.level / max(len(arms), 1),
                     "stopped": d.stopped, "revert_ci": rev_ci, "effect": effect,
                     "failed": arm.failed,
                     "revert": change_record(metric, rev, direction, ci=tuple(rev_ci),
                                             significant=significant)})
    rows.sort(key=lambda r: -(r["share"] if not math.isnan(r["share"]) else -math.inf))
    # The recommendation against the defaults over the first rounds, paired by round as
    # every other change here: its figure with its interval, so that its word ("better")
    # follows an interval, never the sign of one ratio of medians.
    rec_rounds = dict(list(rec_arm.samples_by_round().items())[:n0])
    base_rounds = dict(list(base_arm.samples_by_round().items())[:n0])
    whole = compare_rounds(rec_rounds, base_rounds, direction, level=0.95, two_sided=True)
    if math.isnan(whole.improvement):
        gain, gain_ci = change_fraction(_med(base), _med(rec_arm.samples[:n0])), None
    else:
        ch, ch_lo, ch_hi = whole.change()
        gain, gain_ci = ch, (ch_lo, ch_hi)
    carries = [r["knob"] for r in rows if r["effect"] == "carries"]
    minimal = {k: recommended[k] for k in carries}
    shares = [r["share"] for r in rows if not math.isnan(r["share"])]
    small = [r["knob"] for r in rows if r["effect"] == "does not carry"]
    unresolved = [r["knob"] for r in rows if r["effect"] == "ambiguous"]
    out = {
        "schema": SCHEMA_VERSION, "metric": metric, "direction": direction, "alpha": alpha,
        "share_threshold": share,
        "changes": {r["knob"]: {"baseline": r["baseline"], "recommended": r["recommended"]}
                    for r in rows},
        "gain": change_record(metric, gain, direction, ci=gain_ci,
                              significant=None if gain_ci is not None else False),
        "baseline_samples": list(base), "recommended_samples": list(rec_arm.samples),
        "knobs": rows, "carries": carries,
        "hurts": [r["knob"] for r in rows if r["effect"] == "hurts"],
        "small": small, "unresolved": unresolved,
        "noise": small + unresolved,  # neither carries nor hurts
        "shares_sum": float(sum(shares)) if shares else None,
        "minimal_changes": minimal, "minimal_config": {**baseline, **minimal},
        "skipped": None,
    }
    reached = max((r["rounds"] for r in rows if r["effect"] == "ambiguous"),
                  default=max((r["rounds"] for r in rows), default=n0))
    out["resolution"] = resolution([base, rec_arm.samples, *(a.samples for _, a in arms)],
                                   len(arms), alpha, rounds=reached)
    out["text"] = explain(out)
    return out


def resolution(samples: list[list[float]], m: int, alpha: float, power: float = 0.8,
               rounds: int | None = None) -> float | None:
    """The smallest relative change from reverting one knob that the ablation detects with
    probability `power` (kvtune.stats.detectable_improvement: two-sided t on the
    logarithms at Holm's strictest level alpha / m, the arms' pooled noise), at `rounds`
    rounds per arm (default: the fewest any arm ran)."""
    sd = pooled_log_sd(samples)
    if math.isnan(sd):
        return None
    n = rounds or min(len(logs(xs)) for xs in samples if len(logs(xs)) >= 2)
    d = detectable_improvement(sd, n, alpha, m, power, two_sided=True, paired=True)
    return None if math.isnan(d) else float(math.expm1(d))


def _change(row: AblatedKnob) -> str:
    """"memcached.threads 4 → 1": the change a row reverts."""
    def v(x: Any) -> str:
        return number(x) if isinstance(x, float) else str(x)

    return f"{row.knob} {v(row.baseline)} → {v(row.recommended)}"


def _typed(res: Ablation | Mapping[str, Any]) -> Ablation:
    """The ablation as its document: `analyse` and `ablate` word their result before it is
    stored, from the mapping they build (typed here as the store types it)."""
    if isinstance(res, Ablation):
        return res
    return documents.build(Ablation.KEY, dict(res), "the ablation being worded")


def shares(res: Ablation) -> dict[str, tuple[str, str]]:
    """Each reverted change's share of the gain and the interval it was decided by, all
    the ablation's shares formatted together (one number of decimals, `present.SHARE`):
    {knob: ("88%", "35% … 140%")}; the interval "" when it was not measured."""
    rows = res.knobs
    ends = [_ends(r) for r in rows]
    col = column([*(r.share for r in rows), *(e[0] for e in ends), *(e[1] for e in ends)],
                 SHARE)
    n = len(rows)
    out = {}
    for i, r in enumerate(rows):
        lo = as_number(ends[i][0])
        span = "" if lo is None or not math.isfinite(lo) else \
            f"{col.cells[n + i]} … {col.cells[2 * n + i]}"
        out[r.knob] = (col.cells[i], span)
    return out


def _confidence(row: AblatedKnob) -> float:
    """The level of a change's share interval (95% for one stored before it was kept)."""
    return row.confidence if row.confidence is not None else 0.95


def _ends(row: AblatedKnob) -> tuple[Any, Any]:
    ci = row.share_ci or [None, None]
    return (ci[0], ci[1]) if len(ci) == 2 else (None, None)


def explain(res: Ablation | Mapping[str, Any]) -> str:
    """One line: "memcached.threads 4 → 1 carries the gain (share 98%, 95% CI 91% …
    104%); the other 3 changes do not carry it (each below 10% of the gain)". A change's
    words and its interval are the same test's."""
    doc = _typed(res)
    if doc.skipped:
        return f"ablation skipped: {doc.skipped}"
    rows = {r.knob: r for r in doc.knobs}
    found = shares(doc)

    def share(k: str) -> str:
        point, span = found[k]
        level = level_text(_confidence(rows[k]))
        return f"share {point}" + (f", {level} CI {span}" if span else "")

    parts = [f"{_change(rows[k])} ({share(k)})" for k in doc.carries]
    n = len(rows)
    if parts:
        verb = "carries" if len(parts) == 1 else "carry"
        text = f"{' and '.join(parts)} {verb} the gain"
    else:
        text = "no single change carries the gain measurably"
    for k in doc.hurts:
        revert = rows[k].revert
        text += (f"; {_change(rows[k])} hurts it ({share(k)}: reverting it "
                 f"{revert.text if revert else MISSING})")
    small = doc.small
    thr = doc.share_threshold if doc.share_threshold is not None else 0.10
    if small:
        if parts and len(small) == n - len(parts) and not doc.hurts:
            other = "the other change does" if len(small) == 1 else \
                f"the other {len(small)} changes do"
        else:
            other = ", ".join(small) + (" does" if len(small) == 1 else " do")
        text += f"; {other} not carry it (each below {present.share(thr)} of the gain)"
    r = doc.resolution
    if doc.unresolved:
        cis = [f"{k} ({share(k)})" for k in doc.unresolved]
        at = doc.rounds or "these"
        text += (f"; still ambiguous after {at} rounds: {', '.join(cis)}"
                 + (f" — at this noise a change worth less than about {present.share(r)} of "
                    f"{doc.metric} cannot be told from noise" if r is not None
                    and not math.isnan(r) else ""))
        cap = doc.max_rounds
        if cap and doc.rounds == cap:
            text += f" (the cap, evaluation.ablation_max_rounds = {cap})"
        if doc.out_of_time:
            text += " (the time limit, evaluation.ablation_time)"
    s = doc.shares_sum
    if s is not None and n > 1 and parts and not 0.5 <= s <= 1.5:
        text += (f" (the shares add up to {present.share(s)}: the changes interact, so the "
                 "minimal configuration is confirmed against the full one)")
    return text


def _level(c: float) -> str:
    """A confidence level as people write it: 95%, 97.5%, 99.5%, 99.95%."""
    return level_text(c)


def _pct(x: float) -> str:
    return present.pct(x)


def single(confirmation: Confirmation, recommended: dict[str, Any],
           baseline: dict[str, Any], knob: str, metric: str, direction: Direction,
           alpha: float) -> dict[str, Any]:
    """One changed knob: the confirmation already compared it with the baseline."""
    rec = confirmation.recommended
    assert rec is not None and rec.comparison is not None  # a recommendation has both
    comp = rec.comparison
    base = [float(x) for x in (confirmation.baseline.samples if confirmation.baseline
                               else []) if x is not None]
    rec_samples = [float(x) for x in rec.samples if x is not None]
    row = {"knob": knob, "baseline": baseline[knob], "recommended": recommended[knob],
           "samples": base, "median": _med(base), "rounds": len(base), "share": 1.0,
           "share_ci": [1.0, 1.0], "p_value": comp.p_value,
           "p_adjusted": rec.p_adjusted if rec.p_adjusted is not None else comp.p_value,
           "level": alpha,
           "stopped": "significant", "revert_ci": [math.nan, math.nan], "effect": "carries",
           "revert": change_record(metric, change_fraction(_med(rec_samples), _med(
               base)), direction, significant=True),
           "failed": None}
    out = {"schema": SCHEMA_VERSION, "metric": metric, "direction": direction,
           "alpha": alpha, "measurements": 0, "rounds": 0,
           "recommended": rec.label,
           "changes": {knob: {"baseline": baseline[knob], "recommended": recommended[knob]}},
           "gain": change_record(metric, comp.change, direction,
                                 ci=(comp.change_ci_low, comp.change_ci_high),
                                 significant=True),
           "baseline_samples": base,
           "recommended_samples": rec_samples, "knobs": [row], "carries": [knob],
           "hurts": [], "noise": [], "small": [], "unresolved": [], "shares_sum": 1.0,
           "minimal_changes": {knob: recommended[knob]},
           "minimal_config": {**baseline, knob: recommended[knob]}, "skipped": None,
           "note": "one change: the confirmation measured it against the baseline"}
    out["text"] = explain(out)
    out["choice"] = {"chosen": "full", "config": recommended,
                     "changes": {knob: recommended[knob]}, "left_out": [], "measured": False,
                     "text": "one change: it is the whole recommendation"}
    return out


def skipped(reason: str, metric: str, direction: Direction) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "metric": metric, "direction": direction,
            "measurements": 0, "knobs": [], "carries": [], "hurts": [], "noise": [],
            "small": [], "unresolved": [], "changes": {}, "minimal_changes": {},
            "minimal_config": {},
            "shares_sum": None, "skipped": reason, "text": f"ablation skipped: {reason}"}


def first_rounds(ev: EvaluationSpec) -> int:
    """Every arm's rounds at the first look: the confirmation's (at least 2)."""
    return max(ev.confirm_rounds, 2)


def _n_changed(confirmation: Confirmation, baseline: dict[str, Any]) -> int:
    rec = confirmation.recommended
    return len(changed_knobs(dict(rec.config), baseline)) if rec else 0


def cost(confirmation: Confirmation, baseline: dict[str, Any], rounds: int) -> int:
    """Repetitions of the ablation's first look (all of it when no arm stays ambiguous)."""
    n = _n_changed(confirmation, baseline)
    return 0 if n <= 1 else (n + 2) * rounds


def max_cost(confirmation: Confirmation, baseline: dict[str, Any],
             ev: EvaluationSpec) -> int:
    """Repetitions of the ablation when every change stays ambiguous up to the cap."""
    return max_cost_of(_n_changed(confirmation, baseline), ev)


def max_cost_of(n: int, ev: EvaluationSpec) -> int:
    """The ablation's most repetitions for a recommendation that changes `n` knobs: every
    arm's first rounds, the open arms and the recommendation up to the cap, and the
    minimal configuration's rounds beside the full one and the baseline."""
    first = first_rounds(ev)
    extra = max(0, ev.ablation_max_rounds - first)
    return 0 if n <= 1 else (n + 2) * first + (n + 1) * extra + 3 * first


def ablate(confirmation: Confirmation, baseline: dict[str, Any], metric: str,
           direction: Direction, ev: EvaluationSpec, seed: int, measure: Measure,
           on_start: Callable[[int], None] | None = None,
           on_rep: Callable[[], None] | None = None,
           on_look: Callable[[int, int], None] | None = None,
           clock: Callable[[], float] | None = None) -> dict[str, Any]:
    """The whole ablation of a confirmation's recommendation, then the choice between
    the minimal configuration and the full one (`choose`); the result as stored.
    `on_look(rounds, arms)` is called before each look after the first that measures more
    (the rounds it adds, the arms still open). `clock` (seconds) enforces
    `evaluation.ablation_time`."""
    rec = confirmation.recommended
    if rec is None:
        return skipped("the confirmation recommended nothing", metric, direction)
    recommended = dict(rec.config)
    changed = changed_knobs(recommended, baseline)
    if not changed:
        return skipped("the recommendation changes no knob", metric, direction)
    if len(changed) == 1:
        return single(confirmation, recommended, baseline, changed[0], metric, direction,
                      ev.alpha)
    sign = Direction(direction).sign
    rec_arm = Arm(rec.label, recommended)
    base_arm = Arm("baseline", baseline)
    arms = [(k, Arm(f"without {k}", {**recommended, k: baseline[k]})) for k in changed]
    if on_start:
        on_start(len(changed))
    first = first_rounds(ev)
    count = {"n": 0}
    started = clock() if clock else 0.0

    def counted(cfg: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        count["n"] += 1
        return measure(cfg)

    interleave([base_arm, rec_arm, *(a for _, a in arms)], first, metric, counted,
               seed + 1, on_rep)
    if rec_arm.failed or base_arm.failed:
        return skipped(f"the {'recommendation' if rec_arm.failed else 'baseline'} failed: "
                       f"{rec_arm.failed or base_arm.failed}", metric, direction)
    sd = pooled_log_sd([base_arm.samples, rec_arm.samples, *(a.samples for _, a in arms)])
    gain = _gain_log(rec_arm.samples, base_arm.samples, sign)
    planned = plan(sd, ev.ablation_share * gain if gain > 0 else math.log1p(
        ev.ablation_effect), ev.alpha, len(arms), first, ev.ablation_max_rounds)
    schedule = looks(first, planned)
    lv = levels(ev.alpha, len(schedule))
    decisions: dict[str, Decision] = {}
    out_of_time = False
    for i, n in enumerate(schedule):
        open_ = [(k, a) for k, a in arms if k not in decisions]
        if i:
            per_rep = ((clock() - started) / count["n"]) if clock and count["n"] else 0.0
            more = (n - schedule[i - 1]) * (len(open_) + 1)
            if (clock and ev.ablation_time is not None
                    and clock() - started + more * per_rep > ev.ablation_time):
                out_of_time = True
                decisions.update(look_at(rec_arm, open_, lv[-1], ev.ablation_share,
                                         _gain_log(rec_arm.samples, base_arm.samples, sign),
                                         sign, last=True))
                break
            if on_look:
                on_look(n - schedule[i - 1], len(open_))
            interleave([rec_arm, *(a for _, a in open_)], n - schedule[i - 1], metric,
                       counted, seed + 1 + i, on_rep)
            if rec_arm.failed:
                return skipped(f"the recommendation failed: {rec_arm.failed}", metric,
                               direction)
        g = _gain_log(rec_arm.samples, base_arm.samples, sign)
        decisions.update(look_at(rec_arm, open_, lv[i], ev.ablation_share, g, sign,
                                 last=i == len(schedule) - 1))
        if len(decisions) == len(arms):
            break
    out = analyse(rec_arm, base_arm, arms, recommended, baseline, metric, direction,
                  ev.alpha, seed, decisions=decisions, share=ev.ablation_share,
                  first_rounds=first)
    out.update({"recommended": rec.label, "rounds": len(rec_arm.samples),
                "first_rounds": first, "planned_rounds": planned,
                "max_rounds": ev.ablation_max_rounds,
                "noise_sd": None if math.isnan(sd) else sd,
                "looks": [n for n in schedule if n <= len(rec_arm.samples)],
                "levels": lv, "out_of_time": out_of_time})
    out["text"] = explain(out)
    out["choice"] = choose(out, rec_arm, base_arm, recommended, baseline, metric,
                           direction, ev, seed, counted, on_rep)
    out["measurements"] = count["n"]
    return out


def choose(res: dict[str, Any], rec_arm: Arm, base_arm: Arm, recommended: dict[str, Any],
           baseline: dict[str, Any], metric: str, direction: Direction, ev: EvaluationSpec,
           seed: int, measure: Measure,
           on_rep: Callable[[], None] | None = None) -> dict[str, Any]:
    """The recommendation kvtune makes after the ablation: the minimal configuration
    (the baseline plus only the changes that carry the gain), measured in
    `first_rounds(ev)` new rounds interleaved with the full recommendation and the
    baseline, unless the full one is significantly better than it (Welch on the logs, at
    the study's alpha): fewer changes are less to review, ship and verify. Without a
    carrier, or when every change carries, nothing is measured: the full recommendation
    is kept and the line says why."""
    sign = Direction(direction).sign
    changes = res["changes"]
    carries = res["carries"]
    rows = {r["knob"]: r for r in res["knobs"]}

    def left(knobs: list[str]) -> list[dict[str, Any]]:
        return [{"knob": k, "baseline": changes[k]["baseline"],
                 "recommended": changes[k]["recommended"], "share": rows[k]["share"],
                 "share_ci": rows[k]["share_ci"], "effect": rows[k]["effect"]}
                for k in knobs]

    full = {"chosen": "full", "config": recommended,
            "changes": {k: v["recommended"] for k, v in changes.items()}, "left_out": [],
            "measured": False}
    if not carries:
        return {**full, "text": "the full recommendation is kept: no change carries the "
                                "gain alone (they act together, or each is too small to show)"}
    rest = [k for k in changes if k not in carries]
    if not rest:
        return {**full, "text": "every change carries the gain: the recommendation is "
                                "already minimal"}
    minimal = {**baseline, **{k: changes[k]["recommended"] for k in carries}}
    min_arm = Arm("minimal", minimal)
    nb, nr = len(base_arm.samples), len(rec_arm.samples)
    rounds = first_rounds(ev)
    interleave([base_arm, rec_arm, min_arm], rounds, metric, measure, seed + 101, on_rep)
    if min_arm.failed:
        return {**full, "measured": True,
                "text": f"the full recommendation is kept: the minimal configuration "
                        f"failed ({min_arm.failed})"}
    base_s, rec_s = base_arm.samples[nb:], rec_arm.samples[nr:]
    mins = min_arm.samples
    # The full recommendation against the minimal one: what the left-out changes add
    # (paired in the new rounds, the only ones the minimal arm ran).
    worth, lo, hi, _ = _paired_worth(rec_arm, min_arm, direction, 1 - ev.alpha)
    extra = change_record(metric, math.expm1(sign * worth) if not math.isnan(worth) else None,
                          direction, ci=_change_ci(sign, lo, hi), significant=lo > 0)
    g, glo, ghi, _ = _paired_worth(min_arm, base_arm, direction, 1 - ev.alpha)
    gain = change_record(metric, math.expm1(sign * g) if not math.isnan(g) else None,
                         direction, ci=_change_ci(sign, glo, ghi), significant=glo > 0)
    names = ", ".join(f"{k} {changes[k]['baseline']} → {changes[k]['recommended']}"
                      for k in carries)
    out_names = ", ".join(f"{x['knob']} (share {present.share(x['share'])})" for x in left(rest))
    common = {"rounds": rounds, "measured": True, "extra": extra, "minimal_gain": gain,
              "minimal_samples": mins, "full_samples": rec_s, "baseline_samples": base_s}
    if lo > 0:
        return {**full, **common,
                "text": f"the full recommendation is kept: it is better than only {names} "
                        f"({extra['text']}), so the other changes add to the gain"}
    return {"chosen": "minimal", "config": minimal,
            "changes": {k: changes[k]["recommended"] for k in carries},
            "left_out": left(rest), **common,
            "text": f"recommends only {names} (the changes that carry the gain: "
                    f"{gain['text']} against the defaults); the full recommendation is not "
                    f"significantly better ({extra['text']}); left out: {out_names}"}


def _change_ci(sign: float, lo: float, hi: float) -> tuple[float | None, float | None]:
    """The metric's change interval, low end first, from an interval of the log
    improvement (`sign` −1 for a minimized metric swaps the ends)."""
    if math.isnan(lo) or math.isnan(hi):
        return (None, None)
    a, b = math.expm1(sign * lo), math.expm1(sign * hi)
    return (min(a, b), max(a, b))


def _rounds_text(res: Ablation) -> str:
    first, most = res.first_rounds, res.rounds or 0
    if first and most > first:
        return f"{first}–{most} interleaved rounds, more only for changes still ambiguous;"
    return f"{most} interleaved rounds"


def lines(res: Ablation | None) -> list[str]:
    """The ablation for the terminal: its verdict, one line per changed knob (its share
    with the interval it was decided by, what reverting it does, its verdict)."""
    if res is None:
        return []
    rounds = _rounds_text(res)
    sep = " " if rounds.endswith(";") else ", "
    out = [f"Ablation ({rounds}{sep}{res.measurements} extra repetitions): {explain(res)}"]
    texts = share_texts(res)
    for r in res.knobs:
        more = f" [{r.rounds} rounds]" if res.first_rounds and (r.rounds or 0) > \
            res.first_rounds else ""
        out.append(f"  {_change(r)}: share of the gain {texts[r.knob]}; reverting it: "
                   f"{r.revert.text if r.revert else MISSING}; {r.effect}{more}")
    return out  # the choice it led to closes the summary (report/summary.py)


def share_texts(res: Ablation) -> dict[str, str]:
    """Each change's share of the gain with the interval it was decided by, at that
    interval's own level, the ablation's shares formatted together: {knob: "88% (99.95% CI
    35% … 140%)"} (the terminal and the report)."""
    out = {}
    found = shares(res)
    for r in res.knobs:
        point, span = found[r.knob]
        level = level_text(_confidence(r))
        out[r.knob] = point + (f" ({level} CI {span})" if span else "")
    return out


def share_text(row: AblatedKnob) -> str:
    """One change's share of the gain with its interval (`share_texts` for a column)."""
    return share_texts(Ablation(knobs=[row]))[row.knob]
