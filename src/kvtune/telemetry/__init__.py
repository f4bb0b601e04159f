"""Telemetry for one repetition, stored with it: what explains a result.

    probe = Probe(server_pid, cgroup)  # every registered collector; nothing runs yet
    probe.start()                      # perf stat attached, /proc and cgroup snapshots
    ... the load ...
    tel = probe.stop()                 # perf stopped (SIGINT), second snapshots
    tel.metrics                        # flat figures, merged into the repetition's metrics
    tel.raw                            # details by collector, stored in raw["telemetry"]
    metrics, raw = server_digest("memcached", target.stats())

The collectors (base.py) and their metric name prefixes: `perf` (`perf_`, perf stat on the
server process), `proc` (`proc_`, the server process from /proc), `sys` (`sys_` and
`steal`, the whole host from /proc/stat), `idle` (`idle_`, where the CPUs idled: polling
or halted, from the cpuidle counters), `throttle` (`throttle_`, CFS throttling of the
server's cgroup). Server digests: `mc_` (memcached stats), `redis_` (Redis INFO).
Collection never fails a repetition: what cannot be read is left out and the reason
recorded in `raw`.

This module is the one place collectors and server digests are registered.
"""

from __future__ import annotations

from typing import Any

from kvtune import kind_registry as kinds
from kvtune.telemetry.base import (
    Collector,
    Probe,
    ProbeContext,
    Telemetry,
    collector_prefixes,
    collectors,
    register,
)
from kvtune.telemetry.cgroup import ThrottleCollector
from kvtune.telemetry.perf import PerfCollector
from kvtune.telemetry.procfs import CpuidleCollector, ProcessCollector, SystemCollector

for _cls in (PerfCollector, ProcessCollector, SystemCollector, ThrottleCollector,
             CpuidleCollector):
    register(_cls)

def server_digest(kind: str, stats: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """Flat metrics and a raw digest from a target's stats(), by its kind's digest (none for
    a target that is no server kind)."""
    k = kinds.find(kind)
    return k.digest(stats) if k is not None else ({}, {})


def is_telemetry(metric: str) -> bool:
    """True for the explanatory counters (not the load generator's own measurements)."""
    prefixes = collector_prefixes() + tuple(k.metric_prefix for k in kinds.every())
    return metric.startswith(prefixes)


__all__ = ["Collector", "Probe", "ProbeContext", "Telemetry", "collectors", "is_telemetry",
           "register", "server_digest"]
