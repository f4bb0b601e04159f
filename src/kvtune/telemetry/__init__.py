"""Telemetry for one repetition, stored with it: what explains a result.

    probe = Probe(server_pid)     # nothing runs yet
    probe.start()                 # perf stat attached, /proc snapshot taken
    ... the load ...
    tel = probe.stop()            # perf stopped (SIGINT), second snapshot
    tel.metrics                   # flat figures, merged into the repetition's metrics
    tel.raw                       # details, stored in the repetition's raw record
    metrics, raw = server_digest("memcached", target.stats())

Metric name prefixes: `perf_` (perf stat on the server process), `proc_` (the server
process from /proc), `sys_` (the whole host from /proc/stat), `throttle_` (CFS throttling
of the server's cgroup, only when it has a CPU quota), `mc_` (memcached stats), `redis_`
(Redis INFO). Collection never fails a repetition: what cannot be read is left out and
the reason recorded in `raw`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvtune.telemetry import memcached as _memcached
from kvtune.telemetry import redis as _redis
from kvtune.telemetry.perf import PerfStat
from kvtune.telemetry.procfs import ProcProbe

PREFIXES = ("perf_", "proc_", "sys_", "throttle_", "mc_", "redis_", "server_", "cgroup_",
            "steal")


@dataclass
class Telemetry:
    metrics: dict[str, float] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


class Probe:
    """perf stat and /proc figures for one server process over the load window."""

    def __init__(self, pid: int, perf: bool = True) -> None:
        self.pid = pid
        self.perf = PerfStat(pid) if perf else None
        self.proc = ProcProbe(pid)
        self._done: Telemetry | None = None

    def start(self) -> None:
        if self.perf is not None:
            self.perf.start()
        self.proc.start()

    def stop(self) -> Telemetry:
        if self._done is not None:
            return self._done
        self.proc.stop()
        tel = Telemetry()
        if self.perf is not None:
            res = self.perf.stop()
            tel.metrics.update(res.metrics())
            tel.raw["perf"] = res.as_dict()
        tel.metrics.update(self.proc.metrics())
        tel.raw["proc"] = self.proc.raw()
        self._done = tel
        return tel

    def close(self) -> None:
        """Release everything without measuring (the repetition failed)."""
        if self.perf is not None:
            self.perf.close()


def server_digest(kind: str, stats: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """Flat metrics and a raw digest from a target's stats() (memcached or Redis)."""
    if kind == "memcached":
        return _memcached.digest(stats)
    if kind == "redis":
        return _redis.digest(stats)
    return {}, {}


def is_telemetry(metric: str) -> bool:
    """True for the explanatory counters (not the load generator's own measurements)."""
    return metric.startswith(PREFIXES)


__all__ = ["Probe", "Telemetry", "is_telemetry", "server_digest"]
