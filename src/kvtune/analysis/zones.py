"""Optimizable zones: for each important knob, the values at which the search reached
within x% of the best value found.

A knob value is *reachable* when the best trial at that value is within x% of the study's
best, and *robust* when every trial at that value is. For a numeric knob, zones are the
maximal runs of consecutive tried values that are all reachable (a run is broken by a value
whose best trial fell short; a knob with many distinct values is binned first, as for the
sensitivity curves, and a bin is reachable when one of its values is); for a categorical
knob, the reachable categories. Inside a zone the knob can be set for other reasons
(memory, CPU budget) at little cost, as far as the trials show: the zone's bounds are
the tried values, not a guarantee between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvtune import present
from kvtune.analysis.data import StudyData
from kvtune.analysis.sensitivity import _bins


@dataclass
class Zone:
    knob: str
    numeric: bool
    within: float
    best: float
    intervals: list[tuple[float, float]] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    reachable: int = 0  # distinct tried values whose best trial is within x%
    robust: int = 0  # ... of which every trial was within x%
    tried: int = 0  # distinct values tried

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["intervals"] = [list(i) for i in self.intervals]
        return d

    def describe(self) -> str:
        if self.numeric:
            from kvtune.present import number

            parts = [number(lo) if lo == hi else f"{number(lo)}…{number(hi)}"
                     for lo, hi in self.intervals]
        else:
            parts = list(self.categories)
        where = ", ".join(parts) if parts else "none"
        text = (f"{where} ({self.reachable} of {self.tried} tried values reached within "
                f"{present.share(self.within)} of the best in some trial")
        if self.reachable and self.robust == self.reachable:
            return text + ", every trial at them did)"
        if self.robust:
            return text + f"; at {self.robust} of them every trial did)"
        return text + ")"


def _near(data: StudyData, v: float, best: float, within: float) -> bool:
    if data.maximize:
        return v >= best - abs(best) * within
    return v <= best + abs(best) * within


def zones(data: StudyData, knobs: list[str] | None = None, within: float = 0.05
          ) -> list[Zone]:
    trials = data.search_trials()
    if not trials:
        return []
    vals = [float(t.value) for t in trials if t.value is not None]
    best = max(vals) if data.maximize else min(vals)
    wanted = knobs if knobs is not None else [k.name for k in data.knobs]
    info = {k.name: k for k in data.knobs}
    out = []
    for name in wanted:
        k = info.get(name)
        if k is None:
            continue
        by_value: dict[Any, list[float]] = {}
        for t in trials:
            # The configuration holds every knob's value, special values included.
            config = t.user_attrs.get("config") or t.params
            if name in config and t.value is not None:
                by_value.setdefault(config[name], []).append(float(t.value))
        z = Zone(name, k.numeric, within, best, tried=len(by_value))
        flags = {}
        for x, vs in by_value.items():
            top = max(vs) if data.maximize else min(vs)
            reach = _near(data, top, best, within)
            flags[x] = reach
            z.reachable += reach
            z.robust += reach and all(_near(data, v, best, within) for v in vs)
        if k.numeric:
            # Values in the same bin (a continuous knob rarely repeats a value) count as
            # one: the bin is reachable when any of its values is.
            bins = _bins([float(x) for x in by_value], k.log)
            run: list[float] = []
            for lo, hi in bins:
                inside = [x for x in by_value if lo <= float(x) <= hi]
                if any(flags[x] for x in inside):
                    run += [float(x) for x in inside]
                elif run:
                    z.intervals.append((min(run), max(run)))
                    run = []
            if run:
                z.intervals.append((min(run), max(run)))
        else:
            order = [c for c in k.choices if c in by_value] or sorted(by_value, key=str)
            z.categories = [str(c) for c in order if flags[c]]
        out.append(z)
    return out
