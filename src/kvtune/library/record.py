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


def entry_of(run: Run, result: dict[str, Any],
             warm: list[dict[str, Any]] | None = None) -> Entry:
    """The entry of `run`'s finished study whose confirmation is `result`. Raises
    ValueError (a message for people) when the study cannot be an entry."""
    from kvtune import __version__

    spec = run.spec
    if spec.objective.multi or result.get("multi"):
        raise ValueError("a Pareto study has no single recommendation to keep")
    features, source = of_spec(spec)
    assert run.space is not None
    baseline = _scalars(dict(run.space.baseline))
    rec_row = result.get("recommended")
    rec = None
    if rec_row:
        config = _scalars(dict(rec_row.get("config") or {}))
        comp = rec_row.get("comparison") or {}
        lo, hi = _num(comp.get("change_ci_low")), _num(comp.get("change_ci_high"))
        ci = (lo, hi) if lo is not None and hi is not None else None
        rec = Recommendation(
            changes={k: v for k, v in config.items() if baseline.get(k) != v},
            change=_num(comp.get("change")),
            ci=ci, text=str(rec_row.get("text") or "")[:2000])
    store, name = run.store, spec.study
    abl = store.last_result(name, "ablation", run.fp_key) or {}
    carriers: list[str] = []
    minimal: dict[str, Any] = {}
    if rec is not None and not abl.get("skipped"):
        carriers = [str(k) for k in abl.get("carries") or []]
        minimal = _scalars(dict(abl.get("minimal_changes") or {}))
    nf = store.last_result(name, "noise_floor", run.fp_key) or {}
    noise = None
    c = _num((nf.get("robust_cov") or {}).get(run.metric))
    if c is None:
        c = _num((nf.get("cov") or {}).get(run.metric))
    own = run.warm.record.get("noise_measured")  # the baseline's own, not the pooled one
    if isinstance(own, dict) and _num(own.get("cov")) is not None:
        c, nf = _num(own["cov"]), {"n": own.get("n")}
    if c is not None and c >= 0 and int(nf.get("n") or 0) >= 2:
        noise = Noise(cov=min(10.0, c), n=int(nf["n"]))
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
        verdict=str(result.get("verdict") or "")[:2000], carriers=carriers,
        minimal=minimal, noise=noise,
        capacity=_capacity(run, result) if cap else None,
        search=_search(run), warm_start=[WarmFrom(id=w["id"], distance=w["distance"])
                                         for w in (warm or [])][:16])


def _num(v: Any) -> float | None:
    """`v` as a finite float, else None."""
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _capacity(run: Run, result: dict[str, Any]) -> Capacity | None:
    from kvtune.load.kvload import search_ci, search_steps

    cap = run.spec.capacity
    assert cap is not None
    knee = _num(((result.get("baseline") or {}).get("metrics") or {}).get("capacity"))
    if knee is None and run.baseline_eval is not None:  # no candidate was confirmed
        knee = _num(run.baseline_eval.metrics.get("capacity"))
    if knee is None or knee <= 0:
        return None
    rec = _num(((result.get("recommended") or {}).get("metrics") or {}).get("capacity"))
    curve: list[CurvePoint] = []
    ci = None
    for rep in reversed(run.store.repetitions(run.spec.study, kind="baseline")):
        doc = (rep.get("raw") or {}).get("load")
        steps = search_steps(doc)
        if steps:
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
