"""`kvtune predict STUDY`: what the library alone suggests for a study's workload, before
anything is measured — the nearest compatible past studies, their confirmed changes, and
the change they saw, with its spread. A prediction, never a result: the study measures it
(its warm start queues the same configurations first)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvtune.library.entry import Entry
from kvtune.library.nearest import Found, context_of, neighbours
from kvtune.library.profiles import agreed
from kvtune.workload.features import of_spec


@dataclass
class Prediction:
    features: dict[str, float]
    source: str
    found: Found
    config: dict[str, Any] = field(default_factory=dict)  # knob → suggested value
    support: dict[str, int] = field(default_factory=dict)  # knob → neighbours changing it
    gains: list[float] = field(default_factory=list)
    holds: int = 0  # neighbours whose defaults held


def predict(spec: Any, fingerprint: dict[str, Any], entries: list[Entry]) -> Prediction:
    """The prediction for `spec` on the host of `fingerprint` from `entries`. Raises
    NoFeatures when the study's workload has none."""
    features, source = of_spec(spec)
    ctx = context_of(spec, features, fingerprint)
    found = neighbours(entries, ctx, exclude=spec.study)
    p = Prediction(features, source, found)
    values: dict[str, list[Any]] = {}
    for e, _ in found.used:
        if e.recommendation is None:
            p.holds += 1
            continue
        if e.recommendation.change is not None:
            p.gains.append(e.recommendation.change)
        for k, v in e.recommendation.changes.items():
            values.setdefault(k, []).append(v)
    n = len(found.used)
    for k, vals in values.items():
        p.support[k] = len(vals)
        if len(vals) * 2 > n:  # a change most neighbours confirmed
            p.config[k] = agreed(vals)
    return p


def this_host_fingerprint(spec: Any) -> dict[str, Any]:
    """The fingerprint a study of `spec` would have on this host (nothing started)."""
    from kvtune.host import fingerprint as fpmod
    from kvtune.targets import host_context

    ctx = host_context([spec.target.kind])
    version = ctx.versions.get(spec.target.kind)
    load = spec.load
    return fpmod.fingerprint(ctx.facts, spec.target.kind, version, spec.target.cpus,
                             load.cpus if load else None,
                             getattr(load, "host", None) if load else None)
