"""Sensitivity curves: the objective against one knob's values, with bootstrap CIs from
the raw repetitions — the case studies' graph.

When the study has a one-knob sweep (`kvtune sweep`) of a knob, its curve comes from the
sweep: the other knobs sat at their defaults, so the curve is that knob's own effect. Else
the curve is marginal over the search: repetitions grouped by the knob's value (binned
when it takes many values), whatever the other knobs were.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvtune.analysis.data import KnobInfo, StudyData
from kvtune.stats import bootstrap_ci

MAX_BINS = 8


@dataclass
class Point:
    label: str
    x: float | str  # the bin's median knob value, or the category
    median: float
    ci_low: float
    ci_high: float
    n_reps: int
    n_configs: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Curve:
    knob: str
    numeric: bool
    log: bool
    source: str  # "sweep" or "search"
    points: list[Point] = field(default_factory=list)
    baseline_value: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {"knob": self.knob, "numeric": self.numeric, "log": self.log,
                "source": self.source, "points": [p.as_dict() for p in self.points],
                "baseline_value": self.baseline_value}


def _fmt(v: float) -> str:
    from kvtune.present import number

    return number(v)


def _bins(values: list[float], log: bool) -> list[tuple[float, float]]:
    """Up to MAX_BINS intervals holding roughly equal numbers of distinct values (equal
    counts, so a log-scale knob is binned sensibly too)."""
    distinct = sorted(set(values))
    if len(distinct) <= MAX_BINS:
        return [(v, v) for v in distinct]
    chunks = np.array_split(np.array(distinct), MAX_BINS)
    return [(float(c[0]), float(c[-1])) for c in chunks if len(c)]


def _points(groups: dict[Any, list[tuple[float, str]]], labels: dict[Any, str],
            xs: dict[Any, float | str], seed: int) -> list[Point]:
    out = []
    for key, rows in groups.items():
        vals = [v for v, _ in rows]
        lo, hi = bootstrap_ci(vals, seed=seed)
        out.append(Point(labels[key], xs[key], float(np.median(vals)), lo, hi, len(vals),
                         len({c for _, c in rows})))
    return out


def curve_from_reps(knob: KnobInfo, reps: list[dict[str, Any]], source: str,
                    baseline_value: Any = None, seed: int = 0) -> Curve:
    """Group repetitions (dicts with params, value, config_key) by the knob's value."""
    c = Curve(knob.name, knob.numeric, knob.log, source, baseline_value=baseline_value)
    rows = [(r["params"].get(knob.name), float(r["value"]), r["config_key"]) for r in reps
            if r.get("value") is not None and knob.name in r["params"]
            and r["status"] != "failed"]
    if not rows:
        return c
    if knob.numeric and all(isinstance(x, int | float) and not isinstance(x, bool)
                            for x, _, _ in rows):
        bins = _bins([float(x) for x, _, _ in rows], knob.log)
        groups: dict[Any, list[tuple[float, str]]] = {}
        members: dict[int, list[float]] = {}
        for x, v, ck in rows:
            i = next(i for i, (lo, hi) in enumerate(bins) if float(x) <= hi or i ==
                     len(bins) - 1)
            groups.setdefault(i, []).append((v, ck))
            members.setdefault(i, []).append(float(x))
        labels = {i: (_fmt(bins[i][0]) if bins[i][0] == bins[i][1]
                      else f"{_fmt(bins[i][0])}–{_fmt(bins[i][1])}") for i in groups}
        xs: dict[Any, float | str] = {i: float(np.median(members[i])) for i in groups}
        c.points = sorted(_points(groups, labels, xs, seed), key=lambda p: float(p.x))
        return c
    groups = {}
    for x, v, ck in rows:
        groups.setdefault(str(x), []).append((v, ck))
    order = [str(ch) for ch in knob.choices] or sorted(groups)
    labels = {k: k for k in groups}
    xs = {k: k for k in groups}
    pts = _points(groups, labels, xs, seed)
    c.points = sorted(pts, key=lambda p: order.index(str(p.x)) if str(p.x) in order else 1e9)
    return c


def sensitivity(data: StudyData, seed: int = 0) -> list[Curve]:
    """One curve per knob: from its sweep when there is one, else from the search."""
    out = []
    search_reps = [r for r in data.ok_reps()
                   if r["kind"] in ("baseline", "trial", "drift", "confirm", "ablation")]
    for k in data.knobs:
        sw = data.sweep_reps.get(k.name)
        if sw:
            sweep_reps = [r for r in sw if r["status"] != "failed" and r["value"] is not None]
            out.append(curve_from_reps(k, sweep_reps, "sweep", data.baseline.get(k.name), seed))
        else:
            out.append(curve_from_reps(k, search_reps, "search", data.baseline.get(k.name),
                                       seed))
    for cv in out:
        cv.points = [p for p in cv.points if not math.isnan(p.median)]
    return out
