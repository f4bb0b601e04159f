"""The one table of kvtune's metrics: each name, its unit and its good direction.

Every other module asks here: the study file's schema (which metrics an objective or a
constraint may name), the load drivers (which names a driver reports), the terminal and the
report (units, whether a change is better or worse).

    metrics.direction("p99_us")        # 'minimize'
    metrics.unit("ops_per_sec")        # 'req/s'
    metrics.OBJECTIVES                 # the names a study may optimize or constrain

Figures that are not in the table (telemetry such as `perf_context_switches`, a server's
`mc_evictions`) get a direction and a unit guessed from their names (`guess_direction`,
`unit`); those are shown beside a result, never optimized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: Direction | None  # None: recorded, not judged
    objective: bool  # may a study optimize or constrain it
    text: str


_TABLE: tuple[Metric, ...] = (
    Metric("ops_per_sec", "req/s", "maximize", True, "requests completed per second"),
    Metric("capacity", "req/s", "maximize", True,
           "the highest open-loop request rate whose latency meets the study's SLO (a knee "
           "search per repetition)"),
    Metric("p50_us", "µs", "minimize", True, "median latency from the intended send time"),
    Metric("p90_us", "µs", "minimize", True, "90th percentile latency"),
    Metric("p99_us", "µs", "minimize", True, "99th percentile latency"),
    Metric("p999_us", "µs", "minimize", True, "99.9th percentile latency"),
    Metric("p9999_us", "µs", "minimize", True, "99.99th percentile latency"),
    Metric("max_us", "µs", "minimize", True, "largest latency"),
    Metric("mean_us", "µs", "minimize", True, "mean latency"),
    Metric("service_p99_us", "µs", "minimize", True,
           "99th percentile from the actual send time (no queueing in the client)"),
    Metric("hit_ratio", "ratio", "maximize", True, "share of gets that found their key"),
    Metric("errors", "count", "minimize", True, "failed requests"),
    Metric("server_errors", "count", "minimize", True,
           "requests the server refused (SERVER_ERROR, out of memory)"),
    Metric("client_utilization", "CPUs", None, False, "the load generator's CPU use"),
    Metric("offered_rate", "req/s", None, False, "the rate the load generator was asked for"),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in _TABLE}
#: The latency figures an SLO may bound (`p99_us <= 200`), with kvload's name for each.
SLO_METRICS: dict[str, str] = {"p50_us": "p50", "p90_us": "p90", "p99_us": "p99",
                               "p999_us": "p99.9", "p9999_us": "p99.99",
                               "service_p99_us": "service.p99"}
#: Every name a load driver may report.
NAMES: tuple[str, ...] = tuple(m.name for m in _TABLE)
#: The names a study may optimize or constrain.
OBJECTIVES: tuple[str, ...] = tuple(m.name for m in _TABLE if m.objective)

# Name patterns of the figures outside the table (telemetry, server statistics).
_LOWER = ("_us", "_ms", "_ns", "_s", "latency", "error", "errors", "evictions", "misses",
          "timeouts", "throttled", "steal", "outofmemory", "switches", "faults", "migrations")
_HIGHER = ("ops_per_sec", "ops", "throughput", "hit_ratio", "hits", "ipc", "qps", "rps")
_UNITS = (("_per_sec", "/s"), ("_us", "µs"), ("_ms", "ms"), ("_ns", "ns"), ("_kb", "KiB"),
          ("_bytes", "B"), ("_pct", "%"), ("_frac", "share of CPU time"), ("_ratio", "ratio"),
          ("_util", "CPUs"), ("_utilized", "CPUs"), ("_s", "s"), ("steal", "share of CPU time"),
          ("ipc", "instructions/cycle"))


def direction(name: str) -> Direction:
    """The good direction of an objective metric. Raises KeyError for a name that is not
    one (the schema refuses those before this is asked)."""
    d = BY_NAME[name].direction
    if d is None:
        raise KeyError(f"{name} is recorded, not judged")
    return d


def guess_direction(name: str) -> Direction | None:
    """The good direction of any figure kvtune shows: the table's, else guessed from the
    name (latencies, errors and evictions lower; throughput and hit ratios higher), else
    None (the change is shown unjudged)."""
    known = BY_NAME.get(name)
    if known is not None:
        return known.direction
    m = name.lower()
    if m.endswith(_HIGHER) or "hit_ratio" in m or "ops_per_sec" in m:
        return "maximize"
    if m.endswith(_LOWER) or m.startswith(("p50", "p9", "mean_us", "max_us")):
        return "minimize"
    return None


def unit(name: str) -> str:
    """The unit of a figure ("count" for counts)."""
    known = BY_NAME.get(name)
    if known is not None:
        return known.unit
    m = name.lower()
    for suffix, u in _UNITS:
        if m.endswith(suffix):
            return u
    if m.startswith("redis_used_memory"):
        return "B"
    return "count"


def capacity_unit() -> str:
    return BY_NAME["capacity"].unit


def unknown_objective(name: str) -> str:
    """The message for a name that is not an objective metric."""
    return f"unknown metric {name!r}; known: {', '.join(OBJECTIVES)}"
