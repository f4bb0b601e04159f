"""Preflight checks: everything that can be known to be wrong before a study applies
anything — knobs unavailable here, CPU lists this host lacks or that overlap, host knobs
without root. One message per problem."""

from __future__ import annotations

import os
from collections.abc import Iterable

from kvtune.cpulist import parse_cpus
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.knob import Knob
from kvtune.spec import StudySpec
from kvtune.stats import confirmation_problem


def needs_host(knobs: Iterable[Knob]) -> list[Knob]:
    """The knobs that write to the host (and so need root and the journal)."""
    return [k for k in knobs if k.scope in ("host", "cgroup")]


def problems(spec: StudySpec, knobs: Iterable[Knob], ctx: HostContext,
             on_host: bool) -> list[str]:
    """Every problem found, for people; empty when the study can start. `on_host` is
    whether the target runs a process on this host (placement and root matter)."""
    knobs = list(knobs)
    out = []
    ev = spec.evaluation
    cannot_pass = confirmation_problem(ev.confirm_rounds, ev.confirm_top, ev.alpha)
    if cannot_pass:
        out.append(cannot_pass)
    for k in knobs:
        a = k.applier.check(ctx)
        if not a.ok:
            out.append(f"knob {k.name} ({k.applier.where()}): unavailable: {a.reason}")
    if not on_host:
        return out
    ncpu = os.cpu_count() or 1
    # With load.host the load's CPUs are the load host's (checked there, load/remote.py).
    load_cpus = spec.load.cpus if spec.load and not spec.load.host else None
    for label, cpus in (("target.cpus", spec.target.cpus), ("load.cpus", load_cpus)):
        if cpus and max(parse_cpus(cpus)) >= ncpu:
            out.append(f"{label}: CPU list {cpus!r} names a CPU this host lacks "
                       f"(it has {ncpu})")
    if spec.target.cpus and load_cpus and \
            set(parse_cpus(spec.target.cpus)) & set(parse_cpus(load_cpus)):
        out.append("target.cpus and load.cpus overlap: the server and the load "
                   "generator must run on disjoint CPUs")
    if needs_host(knobs) and os.geteuid() != 0:
        out.append("host knobs need root (run kvtune as root or drop them)")
    return out
