"""Which past studies speak to a new one: compatible ones (same kvtune release, target
kind and version, objective, and a host of the same CPU model and count, with the server
on as many CPUs), ranked by the distance between their workloads
(`kvtune.workload.features.distance`); those within `ALIKE` are its neighbours.

Versions are compared by their first two numbers (kvtune 0.1.x, memcached 1.6.x): a
patch release keeps the defaults and the knobs a result depends on; a minor one may not.
The kernel may differ (it is said, not refused): a kernel's defaults are the baseline a
result is measured against, and the baseline is measured again by every study.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvtune.library.entry import Entry
from kvtune.metrics import Direction
from kvtune.workload.features import ALIKE, distance

NEIGHBOURS = 3  # at most this many past studies are drawn from


@dataclass(frozen=True)
class Context:
    """What a study is, as the library compares it."""

    target: str
    target_version: str | None
    metric: str
    direction: Direction
    slo: str | None
    cpu_model: str
    cpus: int
    server_cpus: int | None
    kvtune_version: str
    features: Mapping[str, float]


def minor(version: str | None) -> str | None:
    """'1.6' of '1.6.18'."""
    if not version:
        return None
    return ".".join(version.split(".")[:2])


def cpu_count(cpus: str | None) -> int | None:
    if not cpus:
        return None
    from kvtune.cpulist import parse_cpus

    try:
        return len(parse_cpus(cpus))
    except ValueError:
        return None


def incompatibility(e: Entry, ctx: Context) -> str | None:
    """Why entry `e` cannot speak to a study of `ctx` (None: it can)."""
    if minor(e.kvtune_version) != minor(ctx.kvtune_version):
        return f"measured by kvtune {e.kvtune_version} (this is {ctx.kvtune_version})"
    if e.target != ctx.target:
        return f"another target ({e.target})"
    if minor(e.target_version) != minor(ctx.target_version):
        return (f"{e.target} {e.target_version or 'of unknown version'} (this study: "
                f"{ctx.target_version or 'unknown'})")
    if e.objective.metric != ctx.metric or e.objective.direction != ctx.direction:
        return f"another objective ({e.objective.metric}, {e.objective.direction})"
    if e.host.cpu_model != ctx.cpu_model:
        return f"another CPU model ({e.host.cpu_model or 'unknown'})"
    if e.host.cpus != ctx.cpus:
        return f"a host of {e.host.cpus} CPUs (this one has {ctx.cpus})"
    theirs = cpu_count(e.host.server_cpus)
    if theirs != ctx.server_cpus:
        return (f"the server on {theirs or 'unpinned'} CPUs (this study: "
                f"{ctx.server_cpus or 'unpinned'})")
    return None


@dataclass
class Found:
    """A study's neighbours (nearest first, each with its distance), the nearest
    compatible entry beyond `ALIKE` when none is within it, and the entries not used
    with why."""

    used: list[tuple[Entry, float]] = field(default_factory=list)
    nearest_beyond: tuple[Entry, float] | None = None
    not_used: list[tuple[Entry, str]] = field(default_factory=list)
    compatible: int = 0

    def reasons(self) -> dict[str, int]:
        """The reasons entries were not used, with how many each."""
        out: dict[str, int] = {}
        for _, why in self.not_used:
            out[why] = out.get(why, 0) + 1
        return out


def neighbours(entries: Iterable[Entry], ctx: Context, k: int = NEIGHBOURS,
               alike: float = ALIKE, exclude: str | None = None) -> Found:
    """The compatible entries within `alike` of `ctx`'s workload, nearest first (at most
    `k`); `exclude`: a study name left out (a study never draws from itself)."""
    found = Found()
    ranked: list[tuple[float, float, Entry]] = []
    for e in entries:
        if exclude is not None and e.study == exclude:
            continue
        why = incompatibility(e, ctx)
        if why:
            found.not_used.append((e, why))
            continue
        found.compatible += 1
        ranked.append((distance(ctx.features, e.workload), -e.created, e))
    ranked.sort(key=lambda r: (r[0], r[1]))
    found.used = [(e, d) for d, _, e in ranked if d <= alike][:k]
    if not found.used and ranked:
        found.nearest_beyond = (ranked[0][2], ranked[0][0])
    return found


def context_of(spec: Any, features: Mapping[str, float], fingerprint: Mapping[str, Any],
               ) -> Context:
    """The context of a study from its spec, its workload's features and its host
    fingerprint (kvtune.host.fingerprint)."""
    from kvtune import __version__

    cap = spec.capacity
    return Context(
        target=spec.target.kind, target_version=fingerprint.get("target_version"),
        metric=spec.objective.metric, direction=spec.objective.resolved_direction,
        slo=str(cap.slo) if cap else None, cpu_model=str(fingerprint.get("cpu_model") or ""),
        cpus=int(fingerprint.get("cpus") or 1),
        server_cpus=cpu_count(fingerprint.get("server_cpus")), kvtune_version=__version__,
        features=dict(features))
