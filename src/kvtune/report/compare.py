"""What a study's report compares: the baseline beside the recommendation (or the best
candidate) with their configurations, metric medians and confirmed changes; the slab
classes and the per-verb latencies of those two configurations. Data only: the HTML page
(`report/html.py`) and `kvtune show` (`report/summary.py`) present it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kvtune.analysis import StudyData
from kvtune.store import config_key
from kvtune.study.record import stored_eval


def change_of(comp: dict[str, Any], key: str) -> float:
    """The metric's relative change from a stored comparison (older records: improvement).
    Storage is input: a bound it could not hold (NaN and ±inf are stored as null: a
    candidate whose every round failed has no interval) or a value that is not a number
    reads as NaN, "not measured", never as an error."""
    if key in comp:
        v = comp.get(key)
    else:
        v = comp.get(key.replace("change_", "").replace("change", "improvement"))
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def figures_of(base_metrics: dict[str, Any], new_metrics: dict[str, Any],
               changes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two arms' figures as every screen shows them: where the confirmation compared a
    metric, the figures its change is the ratio of (`MetricChange.baseline/candidate`: the
    geometric means of the rounds both measured); elsewhere each arm's median."""
    b, n = dict(base_metrics or {}), dict(new_metrics or {})
    for m, ch in (changes or {}).items():
        if not isinstance(ch, dict):
            continue
        cb, cn = ch.get("baseline"), ch.get("candidate")
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (cb, cn)):
            b[m], n[m] = cb, cn
    return b, n


CONFIRMED_SOURCE = ("interleaved confirmation rounds (each compared metric: the geometric "
                    "means of the rounds both arms measured, the figures its change is the "
                    "ratio of; other figures: medians)")


def comparison(data: StudyData) -> dict[str, Any]:
    """The baseline beside the recommendation (or the best candidate): configs, metric
    medians, the objective's improvement with its CI, and where the numbers come from."""
    conf = data.confirmation
    base_trial = next((t for t in data.trials if t.user_attrs.get("kind") == "baseline"
                       and t.value is not None), None)
    out: dict[str, Any] = {"status": "none", "base_config": dict(data.baseline),
                           "base_metrics": {}, "new_config": {}, "new_metrics": {},
                           "label": "", "comparison": None, "source": ""}
    if base_trial is not None:
        out["base_config"] = base_trial.user_attrs.get("config", out["base_config"])
        out["base_metrics"] = stored_eval(base_trial).get("metrics", {})
    rec = conf.recommended if conf else None
    shown = rec or (conf.leading() if conf else None)
    if conf is not None and shown is not None:
        changes = {m: ch.stored() for m, ch in shown.changes.items()}
        b, n = figures_of(conf.baseline.metrics if conf.baseline else {}, shown.metrics,
                          changes)
        label = (f"recommended ({shown.name or 'best'})" if rec else
                 f"best candidate ({shown.name or '?'}, not significant)")
        out.update(status="recommended" if rec else "not significant",
                   new_config=dict(shown.config), new_metrics=n, base_metrics=b,
                   label=label,
                   comparison=shown.comparison.stored() if shown.comparison else None,
                   changes=changes, p=shown.p_adjusted,
                   source=f"{conf.rounds} {CONFIRMED_SOURCE}")
        return out
    best = None
    for t in data.search_trials():
        if t.user_attrs.get("kind") == "trial" and (best is None or data.better(
                float(t.value or 0), float(best.value or 0))):
            best = t
    if best is not None:
        out.update(status="unconfirmed", new_config=best.user_attrs.get("config", {}),
                   new_metrics=stored_eval(best).get("metrics", {}),
                   label=f"best in search (trial {best.number}, unconfirmed)",
                   source="search trials (medians of their repetitions)")
    return out


def slab_tables(data: StudyData, cmp: dict[str, Any],
                slab_table: Callable[[dict[str, Any]], list[dict[str, float]]]
                ) -> dict[str, list[dict[str, float]]]:
    """Median per slab class over the repetitions of the baseline and of the compared
    configuration (confirmation repetitions preferred); `slab_table` reads a repetition's
    stored stats when its telemetry kept no table (the kind's)."""
    out: dict[str, list[dict[str, float]]] = {}
    for name, cfg in (("baseline", cmp["base_config"]), (cmp["label"] or "best",
                                                         cmp["new_config"])):
        if not cfg:
            continue
        key = config_key(cfg)
        reps = [r for r in data.ok_reps() if r["config_key"] == key]
        conf = [r for r in reps if r["kind"] == "confirm"]
        tables = []
        for r in conf or reps:
            tel = (r["raw"].get("telemetry") or {}).get("server") or {}
            t = tel.get("slab_table")
            if t is None and isinstance(r["raw"].get("server_stats"), dict):
                t = slab_table(r["raw"]["server_stats"])
            if t:
                tables.append(t)
        if not tables:
            continue
        by: dict[int, dict[str, list[float]]] = {}
        for t in tables:
            for row in t:
                d = by.setdefault(int(row["class"]), {})
                for k, v in row.items():
                    d.setdefault(k, []).append(float(v))
        out[name] = [{k: _median(v) for k, v in by[c].items()} for c in sorted(by)]
    return out


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def load_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """A repetition's load-driver output: under "load" (with its "tool"), or under "kvload"
    in stores written before load drivers."""
    found = raw.get("load") or raw.get("kvload") or {}
    return found if isinstance(found, dict) else {}


VERB_KEYS = ("p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us", "mean_us")


def latency_by_verb(data: StudyData, cmp: dict[str, Any]
                    ) -> dict[str, dict[str, dict[str, float]]]:
    """{configuration: {verb: {percentile: median over repetitions}}} for the baseline and
    the compared configuration, from the load driver's per-verb latencies (kvload's
    latency.per_verb, corrected for coordinated omission; "all" is its total). Confirmation
    repetitions are preferred. Empty when the driver records no latencies."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, cfg in (("baseline", cmp["base_config"]), (cmp["label"] or "best",
                                                         cmp["new_config"])):
        if not cfg:
            continue
        key = config_key(cfg)
        reps = [r for r in data.ok_reps() if r["config_key"] == key]
        reps = [r for r in reps if r["kind"] == "confirm"] or reps
        acc: dict[str, dict[str, list[float]]] = {}
        for r in reps:
            lat = load_raw(r["raw"]).get("latency") or {}
            verbs = {"all": lat.get("total") or {}, **(lat.get("per_verb") or {})}
            for verb, d in verbs.items():
                corr = (d or {}).get("corrected") or {}
                for k in VERB_KEYS:
                    v = corr.get(k)
                    if isinstance(v, int | float):
                        acc.setdefault(verb, {}).setdefault(k, []).append(float(v))
        if acc:
            out[name] = {verb: {k: _median(v) for k, v in d.items()} for verb, d in acc.items()}
            out[name]["_n"] = {"repetitions": float(len(reps))}
    return out
