"""A study's stored results as one document (`kvtune show --json`, the report, the exports):
its trials with their changes against the nearest baseline, the noise floor, drift,
confirmation, workers and hosts of a fleet, and sweeps. The report adds its analysis
(report/summary.py)."""

from __future__ import annotations

import itertools
from typing import Any

import optuna

from kvtune.documents import Ablation, Confirmation, Drift, NoiseFloor
from kvtune.errors import UserError
from kvtune.metrics import Direction
from kvtune.store import Store, check_trial_attrs, config_key
from kvtune.study.headline import Headline
from kvtune.study.record import stored_eval


def collect(store: Store, name: str) -> dict[str, Any]:
    sweeps = _sweeps(store, name)
    try:
        study = store.load_study(name)
    except KeyError:
        if sweeps:  # a study that only ran `kvtune sweep`
            return {"study": name, "storage": store.url, "sweeps": sweeps}
        known = ", ".join(store.study_names()) or "none"
        raise UserError(f"no study named {name!r} in {store.url} (studies there: {known})") \
            from None
    trials = []
    for t in study.get_trials(deepcopy=False):
        # Storage is input: every trial's attributes are checked before a screen reads them.
        check_trial_attrs(t.user_attrs, f"study {name!r} in {store.url}, trial {t.number}")
        ev = stored_eval(t)
        trials.append({
            "number": t.number, "state": t.state.name, "kind": t.user_attrs.get("kind"),
            "value": t.values[0] if t.values else None, "values": t.values,
            "ci": ev.get("ci"), "ci_kind": ev.get("ci_kind"), "n": ev.get("n"),
            "config": t.user_attrs.get("config", {}), "metrics": ev.get("metrics", {}),
            "feasible": all(v <= 0 for v in t.user_attrs.get("violations", [0.0])),
            "flags": ev.get("flags", []), "failed": t.user_attrs.get("failed"),
            "worker": t.user_attrs.get("worker"),
            "fingerprint": t.user_attrs.get("fingerprint"),
        })
    base = next((t for t in trials if t["kind"] == "baseline" and t["state"] == "COMPLETE"),
                None)
    direction = Direction(study.directions[0].name.lower())  # the first objective's
    # The best of the search: the baseline is what it is compared with, never its own
    # "best", nor is a search trial that asked for the baseline's configuration again (a
    # `repeat` of trial 0: a sampler may propose the defaults, which reuse its result).
    base_key = config_key(base["config"]) if base else None
    done = [t for t in trials if t["state"] == "COMPLETE" and t["feasible"]
            and t["kind"] != "baseline" and config_key(t["config"]) != base_key]
    best = None
    if done:
        best = Direction(direction).best(done, key=lambda t: t["value"])
    drift = [d for d in store.documents(name, "drift") if isinstance(d, Drift)]
    bases: dict[Any, dict[str, Any]] = {}
    for tr in trials:
        if tr["kind"] == "baseline" and tr["state"] == "COMPLETE":
            bases.setdefault(tr["fingerprint"], tr)
    if len(bases) <= 1:
        _vs_nearest_baseline(trials, base, drift, direction)
    else:  # a heterogeneous fleet: each trial against its own host fingerprint's baseline
        for fp, b in bases.items():
            _vs_nearest_baseline([tr for tr in trials if tr["fingerprint"] == fp], b,
                                 [d for d in drift if d.fingerprint in (None, fp)],
                                 direction)
    from kvtune.present import change_fraction, search_change_record
    from kvtune.study.stored import stored_spec

    attrs = study.user_attrs  # read (and checked) once: each read is a query and a deep copy
    spec = stored_spec(attrs, name, store.url).data  # checked as a study file

    for tr in trials:  # the metric's own change against its baseline, as shown (present.py)
        if tr.get("baseline_ref") is not None:
            # A figure, no claim: the search measured no interval of the change.
            tr["change"] = search_change_record(
                spec.get("objective", {}).get("metric") or "value",
                change_fraction(tr["baseline_ref"], tr["value"]), direction)
    confirmation = store.document(name, Confirmation)
    ablation = store.document(name, Ablation)
    metric = spec.get("objective", {}).get("metric")
    headline = study_headline(trials, confirmation, ablation, metric=str(metric or "value"),
                              direction=direction, study=name, engine=store.engine)
    return {
        "study": name, "storage": store.url, "direction": direction,
        "headline": headline.as_dict(),
        "metric": metric, "host": attrs.get("host"),
        "objectives": attrs.get("objectives"),
        "trials": trials, "baseline": base, "best": best,
        "noise_floor": store.document(name, NoiseFloor),
        "drift": drift,
        "confirmation": confirmation,
        "ablation": ablation,
        "workers": (workers := _workers(store, name, study)),
        "hosts": _hosts(store, name, trials, workers, direction),
        "sweeps": sweeps,
        "spec": spec,
    }


def study_headline(trials: list[dict[str, Any]], confirmation: Confirmation | None,
                   ablation: Ablation | None, *, metric: str, direction: Direction,
                   study: str, engine: Any = None) -> Headline:
    """The study's headline (kvtune.study.headline.decide) from its trials (dicts with
    kind, state, value, failed), its stored confirmation and ablation: the one call every
    screen's headline comes from (`kvtune tune`/`show` through `collect`, the report).
    `engine`: the results database's, for how long a repetition takes (None: not said)."""
    from kvtune.study.headline import decide

    base = next((t for t in trials if t["kind"] == "baseline" and t["state"] == "COMPLETE"),
                None)
    failed_base = next((t for t in trials if t["kind"] == "baseline"
                        and t["state"] != "COMPLETE" and t["failed"]), None)
    return decide(confirmation, ablation, metric=metric, direction=direction, study=study,
                  baseline_failed=None if base is not None or failed_base is None
                  else str(failed_base["failed"]),
                  measured=any(t["kind"] == "trial" and t["value"] is not None
                               for t in trials),
                  seconds_per_rep=_seconds_per_rep(engine, study) if engine is not None
                  else None)


def _seconds_per_rep(engine: Any, name: str) -> float | None:
    """How long one repetition of the study took, start to start (the median gap between
    stored repetitions, gaps of more than ten minutes left out: a pause, not a
    repetition); None without two."""
    import sqlalchemy as sa

    from kvtune.store import REPETITIONS

    q = (sa.select(REPETITIONS.c.created).where(REPETITIONS.c.study == name)
         .order_by(REPETITIONS.c.id))
    with engine.connect() as c:
        ts = [r[0] for r in c.execute(q) if isinstance(r[0], int | float)]
    gaps = sorted(b - a for a, b in itertools.pairwise(ts) if 0 < b - a < 600)
    return gaps[len(gaps) // 2] if gaps else None


def _workers(store: Store, name: str, study: optuna.Study) -> list[dict[str, Any]]:
    """The fleet's workers (kvtune.fleet), each with its host and its trials' numbers."""
    from kvtune.fleet.claims import workers_of

    ws = workers_of(store.engine, name)
    for w in ws:
        w["trials"] = [t.number for t in study.get_trials(deepcopy=False)
                       if t.user_attrs.get("worker") == w["worker"]]
    return ws


def _hosts(store: Store, name: str, trials: list[dict[str, Any]],
           workers: list[dict[str, Any]], direction: Direction) -> list[dict[str, Any]]:
    """Per host fingerprint of the study's workers: the fingerprint, its workers, its own
    baseline, best search trial, noise floor and confirmation (a heterogeneous fleet has
    several; trials are only compared with their own fingerprint's baseline)."""
    out = []
    for fp in dict.fromkeys(w["fingerprint_key"] for w in workers):
        own = [t for t in trials if t["fingerprint"] == fp]
        base = next((t for t in own if t["kind"] == "baseline" and t["state"] == "COMPLETE"),
                    None)
        done = [t for t in own if t["state"] == "COMPLETE" and t["feasible"]
                and t["kind"] == "trial"]
        best = Direction(direction).best(done, key=lambda t: t["value"]) if done else None
        out.append({
            "fingerprint": fp,
            "host": next(w["fingerprint"] for w in workers if w["fingerprint_key"] == fp),
            "workers": [w["worker"] for w in workers if w["fingerprint_key"] == fp],
            "trials": len([t for t in own if t["kind"] == "trial"]),
            "baseline": base, "best": best,
            "noise_floor": store.document(name, NoiseFloor, fp),
            "confirmation": store.document(name, Confirmation, fp),
        })
    return out


def _sweeps(store: Store, name: str) -> list[dict[str, Any]]:
    """The study's one-knob sweeps, analysed (report/sweep.py, analysis/sweep.py)."""
    from kvtune.analysis.sweep import sweep_views

    return [v.as_dict() for v in sweep_views(store, name)]


def _vs_nearest_baseline(trials: list[dict[str, Any]], base: dict[str, Any] | None,
                         drift: list[Drift], direction: Direction) -> None:
    """Each trial's change against the baseline measured nearest to it in time (the first
    baseline, or a drift re-measurement), so that a drifting host does not pass for a
    better or worse configuration. Positive is better."""
    if base is None or base["value"] is None:
        return
    # Re-reference only to baseline measurements that showed the host moved.
    points = [(0, float(base["value"]))] + [
        (d.after_trial if d.after_trial is not None else 10**9, d.value)
        for d in drift if d.value is not None and d.moved]
    for t in trials:
        if t["value"] is None or t["kind"] != "trial":
            continue
        _, ref = min(points, key=lambda p: abs(p[0] - t["number"]))
        if not ref:
            continue
        t["vs_baseline"] = Direction(direction).gain(t["value"], ref)
        t["baseline_ref"] = ref
