"""A one-knob sweep as a result of its own (case study 000's chart): the metric against the
knob's value, every repetition a point, an interval per value; the best value and its change
from the default with a CI from the repetitions; and the plateau, the values around the best
whose difference from it stays within noise.

    view = analyse(store.last_result(study, "sweep:sched.server_slice_ns"))
    view.points[i].values      # every repetition's metric at that value
    view.best.value, view.change   # change = stats.compare(best, default).as_dict()
    view.plateau               # the values indistinguishable from the best (contiguous)

Intervals per value are the distribution-free interval of the median
(`stats.order_statistic_ci`: a 95% CI from 6 repetitions on, the range below). The change
from the default is `stats.compare` (bootstrap CI of the ratio of medians, Mann–Whitney p).
A value joins the plateau when a two-sided test cannot tell it from the best (p >= alpha)
or the bootstrap CI of the difference includes no change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvtune import present, stats
from kvtune.metrics import Direction
from kvtune.present import number

ALPHA = 0.05


@dataclass
class SweepPoint:
    value: Any
    values: list[float]  # every repetition's metric (failed repetitions left out)
    median: float
    ci: tuple[float, float]
    ci_kind: str  # "95% CI" or "range"
    failed: int = 0
    is_default: bool = False

    @property
    def n(self) -> int:
        return len(self.values)


@dataclass
class SweepView:
    knob: str
    metric: str
    direction: Direction
    default: Any
    points: list[SweepPoint]
    numeric: bool
    best: SweepPoint | None = None
    default_point: SweepPoint | None = None
    change: dict[str, Any] | None = None  # best vs default (stats.Comparison.as_dict)
    plateau: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob, "metric": self.metric, "direction": self.direction,
            "default": self.default, "numeric": self.numeric,
            "points": [{"value": p.value, "values": p.values, "median": p.median,
                        "ci": list(p.ci), "ci_kind": p.ci_kind, "n": p.n,
                        "failed": p.failed, "default": p.is_default} for p in self.points],
            "best": None if self.best is None else self.best.value,
            "change": self.change, "plateau": self.plateau, "notes": self.notes,
        }


def view_from_dict(d: dict[str, Any]) -> SweepView:
    """A view back from `SweepView.as_dict()` (what `kvtune show --json` carries)."""
    pts = [SweepPoint(p["value"], list(p["values"]), p["median"], tuple(p["ci"]),
                      p["ci_kind"], p.get("failed", 0), p.get("default", False))
           for p in d.get("points", [])]
    best = next((p for p in pts if d.get("best") is not None and _same(p.value, d["best"])),
                None)
    return SweepView(d["knob"], d["metric"], d["direction"], d.get("default"), pts,
                     d.get("numeric", False), best,
                     next((p for p in pts if p.is_default), None), d.get("change"),
                     list(d.get("plateau") or []), list(d.get("notes") or []))


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _same(a: Any, b: Any) -> bool:
    if _finite(a) and _finite(b):
        return float(a) == float(b)
    return str(a) == str(b)


def analyse(result: dict[str, Any], alpha: float = ALPHA) -> SweepView:
    """The view of one stored sweep result (`kvtune sweep`'s `sweep:<knob>` record)."""
    rows = list(result.get("rows") or [])
    default = result.get("baseline_value")
    numeric = bool(rows) and all(_finite(r.get("value")) for r in rows)
    if numeric:
        rows.sort(key=lambda r: float(r["value"]))
    points = []
    for r in rows:
        vals = [float(v) for v in (r.get("values") or []) if _finite(v)]
        lo, hi, kind = stats.order_statistic_ci(vals)
        points.append(SweepPoint(r.get("value"), vals, stats.centre(vals), (lo, hi), kind,
                                 int(r.get("failed") or 0), _same(r.get("value"), default)))
    view = SweepView(str(result.get("knob")), str(result.get("metric")),
                     _direction(result.get("direction")), default, points, numeric)
    measured = [p for p in points if p.values]
    if not measured:
        view.notes.append("no value measured anything (every repetition failed)")
        return view
    if view.knob == "load.rate":
        # The latency–throughput curve: the offered rate is the question, not a setting.
        view.notes.append(f"the latency–throughput curve: {view.metric} at each offered rate "
                          "(the configuration at its baseline, fresh servers); a rate is not "
                          "a setting, so no best value is named (for the highest rate within "
                          "an SLO: objective capacity)")
        return view
    # A tie with the default goes to the default (all-zero medians pick no "best" change).
    if Direction(view.direction) is Direction.MAXIMIZE:
        view.best = max(measured, key=lambda p: (p.median, p.is_default))
    else:
        view.best = min(measured, key=lambda p: (p.median, not p.is_default))
    view.default_point = next((p for p in points if p.is_default and p.values), None)
    if view.default_point is None:
        view.notes.append(f"the default ({default}) was not among the swept values: no change "
                          "from the default can be given")
    elif view.default_point is not view.best:
        with np.errstate(divide="ignore", invalid="ignore"):  # all-zero medians
            view.change = stats.compare(view.best.values, view.default_point.values,
                                        view.direction).as_dict()
    else:
        view.notes.append("the default is the best value swept")
    view.plateau = _plateau(view, alpha)
    return view


def _direction(text: Any) -> Direction:
    """A stored sweep's direction (maximize when it says none it knows)."""
    try:
        return Direction(text)
    except ValueError:
        return Direction.MAXIMIZE


def within_noise(a: SweepPoint, b: SweepPoint, direction: Direction, alpha: float = ALPHA) -> bool:
    """True when the repetitions cannot tell `a` from `b`."""
    if a is b:
        return True
    if len(a.values) < 2 or len(b.values) < 2:
        return False
    with np.errstate(divide="ignore", invalid="ignore"):
        c = stats.compare(a.values, b.values, direction, two_sided=True)
    return c.p_value >= alpha or (c.ci_low <= 0 <= c.ci_high)


def _plateau(view: SweepView, alpha: float) -> list[Any]:
    """The contiguous values around the best (in the knob's order) within noise of it."""
    best = view.best
    if best is None:
        return []
    pts = view.points
    i = pts.index(best)
    lo = hi = i
    while lo - 1 >= 0 and pts[lo - 1].values and within_noise(pts[lo - 1], best, view.direction,
                                                                alpha):
        lo -= 1
    while hi + 1 < len(pts) and pts[hi + 1].values and within_noise(pts[hi + 1], best,
                                                                     view.direction, alpha):
        hi += 1
    return [p.value for p in pts[lo:hi + 1]]


def summary_lines(view: SweepView) -> list[str]:
    """The sweep's findings as sentences, for `kvtune show` and the report."""
    from kvtune.present import describe_change

    out: list[str] = []
    if view.best is None:
        return out + view.notes
    b = view.best
    spread = f"{b.ci_kind} {number(b.ci[0])} … {number(b.ci[1])}, " if b.n >= 2 else ""
    out.append(f"best {view.knob} = {b.value}: {view.metric} median {number(b.median)} "
               f"({spread}n={b.n})")
    if view.change is not None and view.default_point is not None:
        ch = view.change
        d = view.default_point
        sig = bool(ch["p_value"] < ALPHA and ch["ci_low"] > 0)
        txt = describe_change(view.metric, ch["change"], view.direction,
                              (ch["change_ci_low"], ch["change_ci_high"]), sig)
        out.append(f"vs the default {view.knob} = {d.value} (median {number(d.median)}, n={d.n}): "
                   f"{txt} (p={present.p_value(ch.get('p_value'))})")
    if len(view.plateau) > 1:
        out.append(f"plateau: {view.knob} in {view.plateau[0]} … {view.plateau[-1]} "
                   f"({len(view.plateau)} values) stay within noise of the best")
    elif view.plateau and any(0 < p.n < 2 for p in view.points):
        out.append("no plateau can be judged: a value with one repetition cannot be told "
                   "from noise (sweep with --repetitions 2 or more)")
    elif view.plateau:
        out.append("no plateau: every other value differs from the best beyond noise")
    return out + view.notes


def sweep_views(store: Any, name: str) -> list[SweepView]:
    """Every sweep stored for study `name` (one per knob, the last run of each)."""
    import sqlalchemy as sa

    from kvtune.store import RESULTS

    q = sa.select(RESULTS.c.key).where(RESULTS.c.study == name).distinct()
    with store.engine.connect() as c:
        keys = sorted(r[0] for r in c.execute(q) if str(r[0]).startswith("sweep:"))
    views = []
    for key in keys:
        res = store.last_result(name, key)
        if res:
            views.append(analyse(res))
    return views
