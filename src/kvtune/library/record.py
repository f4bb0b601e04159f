"""A finished study's library entry: its workload's features, target, host, objective,
confirmed recommendation (or "defaults hold"), the ablation's carriers, its noise floor,
for capacity its knees and one search's curve, and what it drew from."""

from __future__ import annotations

import math
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

import optuna

from kvtune.documents import Ablation, Confirmation, NoiseFloor, StoredComparison
from kvtune.library.entry import (
    Capacity,
    CurvePoint,
    Entry,
    Host,
    Noise,
    Objective,
    Recommendation,
    Search,
    WarmFrom,
)
from kvtune.workload.features import describe, of_spec

if TYPE_CHECKING:
    from kvtune.library.run_view import Run


def _scalars(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if isinstance(v, bool | int | float | str)
            and not (isinstance(v, float) and not math.isfinite(v))}


def entry_of(run: Run, result: Confirmation,
             warm: list[dict[str, Any]] | None = None) -> Entry:
    """The entry of `run`'s finished study whose confirmation is `result`. Raises
    ValueError (a message for people) when the study cannot be an entry."""
    from kvtune import __version__

    spec = run.spec
    if spec.objective.multi or result.multi:
        raise ValueError("a Pareto study has no single recommendation to keep")
    features, source = of_spec(spec)
    assert run.space is not None
    baseline = _scalars(dict(run.space.baseline))
    rec_row = result.recommended
    rec = None
    if rec_row is not None:
        config = _scalars(dict(rec_row.config))
        comp = rec_row.comparison or StoredComparison()
        lo, hi = _num(comp.change_ci_low), _num(comp.change_ci_high)
        ci = (lo, hi) if lo is not None and hi is not None else None
        rec = Recommendation(
            changes={k: v for k, v in config.items() if baseline.get(k) != v},
            change=_num(comp.change), ci=ci, text=rec_row.text[:2000])
    store, name = run.store, spec.study
    abl = store.document(name, Ablation, run.fp_key)
    carriers: list[str] = []
    minimal: dict[str, Any] = {}
    if rec is not None and abl is not None and not abl.skipped:
        carriers = list(abl.carries)
        minimal = _scalars(dict(abl.minimal_changes))
    nf = store.document(name, NoiseFloor, run.fp_key)
    noise = None
    c = _num(nf.robust_cov.get(run.metric)) if nf else None
    if c is None and nf is not None:
        c = _num(nf.cov.get(run.metric))
    n = nf.n if nf is not None else 0
    own = run.warm.record.get("noise_measured")  # the baseline's own, not the pooled one
    if isinstance(own, dict) and _num(own.get("cov")) is not None:
        c, n = _num(own["cov"]), int(_num(own.get("n")) or 0)
    if c is not None and c >= 0 and n >= 2:
        noise = Noise(cov=min(10.0, c), n=n)
    fp = run.fingerprint
    host = Host(cpu_model=str(fp.get("cpu_model") or ""), cpus=int(fp.get("cpus") or 1),
                kernel=str(fp.get("kernel") or ""), server_cpus=fp.get("server_cpus"),
                load_cpus=fp.get("load_cpus"), fingerprint=run.fp_key,
                name=socket.gethostname()[:128])
    cap = spec.capacity
    return Entry(
        id=uuid.uuid4().hex, created=time.time(), kvtune_version=__version__, study=name,
        target=spec.target.kind, target_version=fp.get("target_version"), host=host,
        objective=Objective(metric=run.metric, direction=run.direction.text,
                            slo=str(cap.slo) if cap else None),
        workload=features, workload_source=f"{source}: {describe(features)}"[:2000],
        knobs=list(run.space.names), baseline=baseline, recommendation=rec,
        verdict=result.verdict[:2000], carriers=carriers,
        minimal=minimal, noise=noise,
        capacity=_capacity(run, result) if cap else None,
        search=_search(run), warm_start=[WarmFrom(id=w["id"], distance=w["distance"])
                                         for w in (warm or [])][:16])


def _num(v: Any) -> float | None:
    """`v` as a finite float, else None."""
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _capacity(run: Run, result: Confirmation) -> Capacity | None:
    from kvtune.load.kvload import search_ci, search_steps

    cap = run.spec.capacity
    assert cap is not None
    knee = _num(result.baseline.metrics.get("capacity")) if result.baseline else None
    if knee is None and run.baseline_eval is not None:  # no candidate was confirmed
        knee = _num(run.baseline_eval.metrics.get("capacity"))
    if knee is None or knee <= 0:
        return None
    rec = _num(result.recommended.metrics.get("capacity")) if result.recommended else None
    ci = None
    # The figures the confirmation's change is the ratio of (kvtune.study.confirm: the
    # baseline's pooled capacity, the candidate's as that times the change), not the
    # rounds' medians, with the interval of that pooled figure (its confirmation
    # searches'), not one search's.
    shown = result.recommended or result.leading()
    change = shown.changes.get("capacity") if shown is not None else None
    pooled = _num(change.baseline) if change is not None else None
    if change is not None and pooled is not None and pooled > 0:
        knee = pooled
        if result.recommended is not None:
            rec = _num(change.candidate)
        ci = _pooled_ci(run, result)
    curve: list[CurvePoint] = []
    for rep in reversed(run.store.repetitions(run.spec.study, kind="baseline")):
        doc = (rep.get("raw") or {}).get("load")
        steps = search_steps(doc)
        if steps:
            if change is None:  # no confirmation of it: the last search's own interval
                ci = search_ci(doc)
            for s in sorted(steps, key=lambda s: s.get("rate") or 0)[:200]:
                rate, lat = _num(s.get("rate")), _num(s.get("latency_us"))
                if rate is not None and rate >= 0:
                    curve.append(CurvePoint(rate=rate,
                                            latency_us=lat if lat is not None and lat >= 0
                                            else None,
                                            outcome=str(s.get("outcome") or "")[:32]))
            break
    return Capacity(slo=str(cap.slo), knee=knee, ci=ci,
                    recommended_knee=rec if rec is not None and rec > 0 else None,
                    curve=curve)


def _pooled_ci(run: Run, result: Confirmation) -> tuple[float, float] | None:
    """The 95% interval of the baseline's capacity pooled over its confirmation searches
    (kvtune.stats.pool_intervals, as the confirmation pooled it); None without them."""
    from kvtune.load.kvload import search_ci
    from kvtune.stats import pool_intervals
    from kvtune.store import config_key

    if result.baseline is None:
        return None
    key = config_key(dict(result.baseline.config))
    knees, cis = [], []
    for rep in run.store.repetitions(run.spec.study, kind="confirm"):
        if rep.get("config_key") != key or rep.get("status") == "failed":
            continue
        v = _num((rep.get("metrics") or {}).get("capacity"))
        ci = search_ci((rep.get("raw") or {}).get("load"))
        if v is not None and v > 0 and ci is not None and ci[0] > 0 and ci[1] > 0:
            knees.append(v)
            cis.append(ci)
    if not knees:
        return None
    lo, hi = pool_intervals(knees, cis).ci
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def _search(run: Run) -> Search:
    study = run.study
    if study is None:
        return Search()
    trials = [t for t in study.get_trials(deepcopy=False,
                                          states=(optuna.trial.TrialState.COMPLETE,))
              if t.user_attrs.get("kind") == "trial" and t.values]
    best = None
    for t in trials:
        if best is None or run.evaluator.better(t.values[0], best.values[0]):
            best = t
    return Search(trials=len(trials), best_trial=best.number if best else None)
