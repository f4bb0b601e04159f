"""Categories of workloads and the configuration that held across each one's studies.

`categories` groups the library's entries by target kind (and minor version) and
objective, then by workload: average-linkage clustering on the workload distance
(`kvtune.workload.features.distance`), cut at `ALIKE`, so that the studies of one category
are alike on average. A category is named from its centre (`features.label`).

A category's **profile** (`profile`): for each knob some study of the category changed,
in how many of its studies the change was confirmed (the recommendation changed it), the
value they agreed on (the most frequent; for numbers recommended with no majority value,
the median), and the gains of those studies (the objective's confirmed change, their
spread). A change confirmed in more than half of the category's studies **holds**; one
confirmed in some but not most **did not generalise**. Studies whose defaults held count
against every change.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvtune import present
from kvtune.library.entry import Entry
from kvtune.library.nearest import minor
from kvtune.metrics import Direction
from kvtune.workload.features import ALIKE, FEATURES, distance, label


@dataclass
class KnobProfile:
    knob: str
    value: Any
    confirmed_in: int  # studies whose recommendation changed the knob
    studies: int  # studies of the category
    values: list[Any]
    gains: list[float]  # the objective's change of the studies that changed it

    @property
    def holds(self) -> bool:
        return self.confirmed_in * 2 > self.studies


@dataclass
class Category:
    id: str
    target: str
    target_version: str | None
    metric: str
    direction: Direction
    members: list[Entry]
    centre: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return label(self.centre)

    def knobs(self) -> list[KnobProfile]:
        """Every knob a study of the category changed, the ones that hold first."""
        n = len(self.members)
        changed: dict[str, list[tuple[Any, float | None]]] = {}
        for e in self.members:
            if e.recommendation is None:
                continue
            for k, v in e.recommendation.changes.items():
                changed.setdefault(k, []).append((v, e.recommendation.change))
        out = []
        for k, rows in changed.items():
            values = [v for v, _ in rows]
            out.append(KnobProfile(k, agreed(values), len(rows), n, values,
                                   [g for _, g in rows if g is not None]))
        out.sort(key=lambda p: (not p.holds, -p.confirmed_in, p.knob))
        return out

    def gains(self) -> list[float]:
        """The objective's confirmed change of each study with a recommendation."""
        return [e.recommendation.change for e in self.members
                if e.recommendation is not None and e.recommendation.change is not None]

    def held(self) -> dict[str, Any]:
        """The profile's configuration: the changes that hold."""
        return {p.knob: p.value for p in self.knobs() if p.holds}

    def baseline(self) -> dict[str, Any]:
        """The defaults the category's studies measured against (the latest's)."""
        return dict(max(self.members, key=lambda e: e.created).baseline)


def agreed(values: list[Any]) -> Any:
    """The value studies agreed on: the most frequent one when it is a majority (or not a
    number), else the median of the numbers (an int when they all are)."""
    top, count = Counter(map(_key, values)).most_common(1)[0]
    pick = next(v for v in values if _key(v) == top)
    nums = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if count * 2 > len(values) or len(nums) != len(values):
        return pick
    med = statistics.median(nums)
    return round(med) if all(isinstance(v, int) for v in nums) else med


def _key(v: Any) -> str:
    return f"{type(v).__name__}:{v!r}"


def categories(entries: list[Entry], alike: float = ALIKE) -> list[Category]:
    """The categories of `entries` (see the module docstring), largest first, named
    c1, c2, ..."""
    groups: dict[tuple[str, str | None, str, str], list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.target, minor(e.target_version), e.objective.metric,
                           e.objective.direction), []).append(e)
    cats: list[Category] = []
    for (target, version, metric, direction), members in sorted(
            groups.items(), key=lambda g: (g[0][0], g[0][1] or "", g[0][2])):
        for cluster in _clusters(members, alike):
            cats.append(Category("", target, version, metric, Direction(direction), cluster,
                                 centre(cluster)))
    cats.sort(key=lambda c: (-len(c.members), c.target, c.metric, c.name))
    for i, c in enumerate(cats, 1):
        c.id = f"c{i}"
    return cats


def _clusters(members: list[Entry], alike: float) -> list[list[Entry]]:
    if len(members) == 1:
        return [members]
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    n = len(members)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            d[i, j] = d[j, i] = distance(members[i].workload, members[j].workload)
    z = linkage(squareform(d, checks=False), method="average")
    labels = fcluster(z, t=alike, criterion="distance")
    out: dict[int, list[Entry]] = {}
    for lab, e in zip(labels, members, strict=True):
        out.setdefault(int(lab), []).append(e)
    return list(out.values())


def centre(members: list[Entry]) -> dict[str, float]:
    """The mean of each feature the members have."""
    out = {}
    for f in FEATURES:
        vals = [e.workload[f] for e in members if f in e.workload]
        if vals:
            out[f] = sum(vals) / len(vals)
    return out


def find(cats: list[Category], name: str) -> Category | None:
    """A category by id (c2) or by the start of its name."""
    for c in cats:
        if c.id == name.strip().lower():
            return c
    hits = [c for c in cats if c.name.startswith(name.strip().lower())]
    return hits[0] if len(hits) == 1 else None


def spread(gains: list[float]) -> str:
    """'+12% (+8% … +15%, 3 studies)'."""
    if not gains:
        return "no confirmed gain"
    med = statistics.median(gains)
    if len(gains) == 1:
        return f"{present.pct(med)} (1 study)"
    return (f"{present.pct(med)} ({present.pct(min(gains))} … {present.pct(max(gains))}, "
            f"{len(gains)} studies)")
