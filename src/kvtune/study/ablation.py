"""The ablation of the recommendation: which of its changes made the gain.

After the confirmation recommends a configuration, kvtune measures it again beside the
baseline and beside one variant per changed knob — the recommendation with that one knob
put back to its baseline value — in the confirmation's interleaved rounds (the same
`interleave`, the same number of rounds). For each changed knob:

- its share of the gain: (recommended − without it) / (recommended − baseline), in the
  objective's good direction, with a bootstrap 95% CI (every arm resampled on its own);
- whether it matters: reverting it moves the objective (two-sided Welch t test on the
  logarithms against the recommendation, Holm-adjusted over the knobs) and the share's CI
  excludes 0.
  A change "carries" the gain when reverting it loses some, "hurts" when reverting it
  gains, and is "noise" otherwise.

The minimal configuration keeps only the changes that carry the gain (the others go back
to the baseline). It is derived, not measured: when the shares add up to far from 100%
the changes interact and the summary says so.

Cost: (changed knobs + 2) × confirm_rounds repetitions; none with a single change (the
confirmation already measured it against the baseline). Skipped with
`evaluation.ablation: false` or `kvtune tune --no-ablation`.

Stored as `store.put_result(study, "ablation", result)`; the schema is `SCHEMA` below
(docs/report.md repeats it; `kvtune export --minimal` reads `minimal_changes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats as sps

from kvtune.present import MINUS, change_fraction, change_record, number
from kvtune.spec import EvaluationSpec
from kvtune.stats import holm
from kvtune.study.confirm import Arm, Measure, interleave

if TYPE_CHECKING:
    from kvtune.study.run import StudyRun

SCHEMA_VERSION = 1

SCHEMA = """\
{
  "schema": 1,
  "metric": str, "direction": "maximize"|"minimize", "rounds": int, "alpha": float,
  "recommended": str,                # the confirmation's recommended arm ("trial 7")
  "measurements": int,               # repetitions the ablation ran (its cost)
  "changes": {knob: {"baseline": value, "recommended": value}},
  "gain": change record,             # recommended vs baseline in the ablation's rounds
  "knobs": [{                        # one per changed knob, largest share first
     "knob": str, "baseline": value, "recommended": value,
     "samples": [float], "median": float,   # the recommendation with this knob reverted
     "share": float, "share_ci": [float, float],  # of the gain (1.0 = all of it)
     "p_value": float, "p_adjusted": float,       # reverted vs recommended, Holm
     "effect": "carries"|"hurts"|"noise",
     "revert": change record}],      # what reverting it does to the metric
  "carries": [knob], "hurts": [knob], "noise": [knob],
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


def _p_value(a: list[float], b: list[float]) -> float:
    """Two-sided Welch t test on the logarithms (relative changes; the metric's noise is
    multiplicative). A rank test cannot reach Holm's level with the confirmation's few
    rounds: 4 against 4 gives at best p = 0.029 before adjustment."""
    xa = np.log([v for v in a if v > 0])
    xb = np.log([v for v in b if v > 0])
    if len(xa) < 2 or len(xb) < 2:
        return 1.0
    if np.ptp(xa) == 0 and np.ptp(xb) == 0:
        return 0.0 if xa[0] != xb[0] else 1.0
    p = float(sps.ttest_ind(xa, xb, equal_var=False).pvalue)
    return 1.0 if math.isnan(p) else p


def _shares(rec: list[float], base: list[float], ablated: list[float], sign: float,
            rng: np.random.Generator, resamples: int) -> tuple[float, float, float]:
    """The share of the gain with a percentile bootstrap CI."""
    r, b, a = (np.asarray(x, dtype=float) for x in (rec, base, ablated))
    gain = sign * (np.median(r) - np.median(b))
    share = float(sign * (np.median(r) - np.median(a)) / gain) if gain else math.nan
    rs = np.median(r[rng.integers(0, len(r), (resamples, len(r)))], axis=1)
    bs = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    as_ = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    g = sign * (rs - bs)
    ok = g != 0
    if not ok.any():
        return share, math.nan, math.nan
    boot = sign * (rs[ok] - as_[ok]) / g[ok]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return share, float(lo), float(hi)


def analyse(rec_arm: Arm, base_arm: Arm, arms: list[tuple[str, Arm]],
            recommended: dict[str, Any], baseline: dict[str, Any], metric: str,
            direction: str, alpha: float, seed: int = 0,
            resamples: int = 4000) -> dict[str, Any]:
    """Shares, CIs and effects from measured arms (`arms`: (knob, reverted arm))."""
    sign = 1.0 if direction == "maximize" else -1.0
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    pvals: list[float] = []
    for knob, arm in arms:
        p = _p_value(arm.samples, rec_arm.samples)
        pvals.append(p)
        if arm.samples and rec_arm.samples and base_arm.samples:
            share, lo, hi = _shares(rec_arm.samples, base_arm.samples, arm.samples, sign, rng,
                                    resamples)
        else:
            share, lo, hi = math.nan, math.nan, math.nan
        rev = change_fraction(_med(rec_arm.samples), _med(arm.samples))
        rows.append({"knob": knob, "baseline": baseline[knob],
                     "recommended": recommended[knob], "samples": arm.samples,
                     "median": _med(arm.samples), "share": share, "share_ci": [lo, hi],
                     "p_value": p, "failed": arm.failed,
                     "revert": change_record(metric, rev, direction)})
    for row, p_adj in zip(rows, holm(pvals), strict=True):
        row["p_adjusted"] = p_adj
        lo, hi = row["share_ci"]
        effect = "noise"
        if p_adj < alpha and not math.isnan(lo):
            effect = "carries" if lo > 0 else "hurts" if hi < 0 else "noise"
        row["effect"] = effect
        row["revert"] = change_record(metric, row["revert"]["change"], direction,
                                      significant=effect != "noise")
    rows.sort(key=lambda r: -(r["share"] if not math.isnan(r["share"]) else -math.inf))
    gain = change_fraction(_med(base_arm.samples), _med(rec_arm.samples))
    carries = [r["knob"] for r in rows if r["effect"] == "carries"]
    minimal = {k: recommended[k] for k in carries}
    shares = [r["share"] for r in rows if not math.isnan(r["share"])]
    out = {
        "schema": SCHEMA_VERSION, "metric": metric, "direction": direction, "alpha": alpha,
        "changes": {r["knob"]: {"baseline": r["baseline"], "recommended": r["recommended"]}
                    for r in rows},
        "gain": change_record(metric, gain, direction),
        "baseline_samples": base_arm.samples, "recommended_samples": rec_arm.samples,
        "knobs": rows, "carries": carries,
        "hurts": [r["knob"] for r in rows if r["effect"] == "hurts"],
        "noise": [r["knob"] for r in rows if r["effect"] == "noise"],
        "shares_sum": float(sum(shares)) if shares else None,
        "minimal_changes": minimal, "minimal_config": {**baseline, **minimal},
        "skipped": None,
    }
    out["resolution"] = resolution([base_arm.samples, rec_arm.samples,
                                    *(a.samples for _, a in arms)], len(arms), alpha)
    out["text"] = explain(out)
    return out


def resolution(samples: list[list[float]], m: int, alpha: float,
               power: float = 0.8) -> float | None:
    """The smallest relative change from reverting one knob that the ablation detects with
    probability `power`: a two-sided test at Holm's strictest level alpha / m, the arms'
    pooled noise on the log scale, the rounds per arm (normal approximation)."""
    logs = [np.log([v for v in xs if v > 0]) for xs in samples]
    logs = [x for x in logs if len(x) >= 2]
    if not logs:
        return None
    dof = sum(len(x) - 1 for x in logs)
    sd = math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / dof)
    n = min(len(x) for x in logs)
    z = sps.norm.ppf(1 - alpha / (2 * max(m, 1))) + sps.norm.ppf(power)
    return float(math.expm1(z * sd * math.sqrt(2 / n)))


def _share(x: float) -> str:
    return f"{x:.0%}".replace("-", MINUS) if not math.isnan(x) else "-"


def _change(row: dict[str, Any]) -> str:
    def v(x: Any) -> str:
        return number(x) if isinstance(x, float) else str(x)

    return f"{row['knob']} {v(row['baseline'])} → {v(row['recommended'])}"


def explain(res: dict[str, Any]) -> str:
    """One line: "memcached.threads 4 → 1 carries the gain (share 98%, 95% CI 91% … 104%);
    the other 3 changes are within noise"."""
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
            other = "the other change is" if len(noise) == 1 else \
                f"the other {len(noise)} changes are"
        else:
            other = ", ".join(noise) + (" is" if len(noise) == 1 else " are")
        text += f"; {other} within noise"
    r = res.get("resolution")
    if noise and r is not None and not math.isnan(r):
        text += (f"; at this noise and {res.get('rounds') or 'these'} rounds a change worth "
                 f"less than about {r:.0%} of {res['metric']} cannot be told from noise")
    s = res.get("shares_sum")
    if s is not None and n > 1 and parts and not 0.5 <= s <= 1.5:
        text += (f" (the shares add up to {s:.0%}: the changes interact, so the minimal "
                 "configuration is a lead to confirm)")
    return text


def single(confirmation: dict[str, Any], recommended: dict[str, Any],
           baseline: dict[str, Any], knob: str, metric: str, direction: str,
           alpha: float) -> dict[str, Any]:
    """One changed knob: the confirmation already compared it with the baseline."""
    rec = confirmation["recommended"]
    comp = rec["comparison"]
    row = {"knob": knob, "baseline": baseline[knob], "recommended": recommended[knob],
           "samples": confirmation["baseline"]["samples"],
           "median": _med(confirmation["baseline"]["samples"]), "share": 1.0,
           "share_ci": [1.0, 1.0], "p_value": comp["p_value"],
           "p_adjusted": rec.get("p_adjusted", comp["p_value"]), "effect": "carries",
           "revert": change_record(metric, change_fraction(_med(rec["samples"]), _med(
               confirmation["baseline"]["samples"])), direction, significant=True),
           "failed": None}
    out = {"schema": SCHEMA_VERSION, "metric": metric, "direction": direction,
           "alpha": alpha, "measurements": 0, "rounds": 0,
           "recommended": rec["name"],
           "changes": {knob: {"baseline": baseline[knob], "recommended": recommended[knob]}},
           "gain": change_record(metric, comp.get("change"), direction,
                                 ci=(comp.get("change_ci_low"), comp.get("change_ci_high")),
                                 significant=True),
           "baseline_samples": confirmation["baseline"]["samples"],
           "recommended_samples": rec["samples"], "knobs": [row], "carries": [knob],
           "hurts": [], "noise": [], "shares_sum": 1.0,
           "minimal_changes": {knob: recommended[knob]},
           "minimal_config": {**baseline, knob: recommended[knob]}, "skipped": None,
           "note": "one change: the confirmation measured it against the baseline"}
    out["text"] = explain(out)
    return out


def skipped(reason: str, metric: str, direction: str) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "metric": metric, "direction": direction,
            "measurements": 0, "knobs": [], "carries": [], "hurts": [], "noise": [],
            "changes": {}, "minimal_changes": {}, "minimal_config": {}, "shares_sum": None,
            "skipped": reason, "text": f"ablation skipped: {reason}"}


def cost(confirmation: dict[str, Any], baseline: dict[str, Any], rounds: int) -> int:
    """Repetitions the ablation of this confirmation will run."""
    rec = confirmation.get("recommended")
    if not rec:
        return 0
    n = len(changed_knobs(rec["config"], baseline))
    return 0 if n <= 1 else (n + 2) * rounds


def ablate(confirmation: dict[str, Any], baseline: dict[str, Any], metric: str,
           direction: str, ev: EvaluationSpec, seed: int, measure: Measure,
           on_start: Callable[[int], None] | None = None,
           on_rep: Callable[[], None] | None = None) -> dict[str, Any]:
    """The whole ablation of a confirmation's recommendation; the result as stored."""
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
    interleave([base_arm, rec_arm, *(a for _, a in arms)], ev.confirm_rounds, metric,
               measure, seed + 1, on_rep)
    if rec_arm.failed or base_arm.failed:
        return skipped(f"the {'recommendation' if rec_arm.failed else 'baseline'} failed: "
                       f"{rec_arm.failed or base_arm.failed}", metric, direction)
    out = analyse(rec_arm, base_arm, arms, recommended, baseline, metric, direction, ev.alpha,
                  seed)
    out.update({"recommended": rec["name"], "rounds": ev.confirm_rounds,
                "measurements": (len(changed) + 2) * ev.confirm_rounds})
    out["text"] = explain(out)
    return out


def lines(res: dict[str, Any] | None) -> list[str]:
    """The ablation for the terminal: its verdict, then one line per changed knob."""
    if not res:
        return []
    out = [f"Ablation ({res.get('rounds', 0)} interleaved rounds, "
           f"{res.get('measurements', 0)} extra repetitions): {res['text']}"]
    for r in res["knobs"]:
        lo, hi = r["share_ci"]
        ci = "" if math.isnan(lo) else f" (95% CI {_share(lo)} … {_share(hi)})"
        out.append(f"  {_change(r)}: share of the gain {_share(r['share'])}{ci}; reverting it: "
                   f"{r['revert']['text']}; {r['effect']}")
    return out


def after_confirmation(run: StudyRun, confirmation: dict[str, Any]) -> dict[str, Any] | None:
    """The hook `StudyRun.run` calls after the confirmation, inside the host context: the
    ablation measured with the confirmation's repetitions, stored as "ablation", printed.
    None when the study asks for no ablation."""
    from kvtune.study._ui import progress

    ev = run.spec.evaluation
    if not getattr(ev, "ablation", True) or not getattr(run, "ablation", True):
        return None
    assert run.space is not None
    baseline = run.space.baseline_config()

    def measure(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        rep = run.evaluator.run_one(config, "ablation", None)
        return rep.status, rep.reason, rep.metrics

    with progress(run.console) as prog:
        task = prog.add_task("ablation", total=None)

        def start(n: int) -> None:
            extra = (n + 2) * ev.confirm_rounds
            run.console.print(f"[bold]Ablation[/]: the recommendation with each of its {n} "
                              f"changes reverted, {ev.confirm_rounds} interleaved rounds "
                              f"({extra} more repetitions)")
            prog.update(task, total=extra)

        result = ablate(confirmation, baseline, run.metric, run.direction, ev, run.spec.seed,
                        measure, start, lambda: prog.advance(task))
    run.store.put_result(run.spec.study, "ablation", result)
    for line in lines(result):
        run.console.print(line, markup=False, highlight=False)
    return result
