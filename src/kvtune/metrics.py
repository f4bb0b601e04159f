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

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

_T = TypeVar("_T")


class Direction(enum.StrEnum):
    """Which way a figure is better: the one owner of "better" (as Optuna's
    `StudyDirection` is for a study). A `str`, so stored and printed as "maximize" or
    "minimize"; `Direction(text)` reads one back (ValueError for any other text)."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"

    @property
    def text(self) -> Literal["maximize", "minimize"]:
        """The word itself, for an API that takes the literal (Optuna's `create_study`)."""
        return "maximize" if self is Direction.MAXIMIZE else "minimize"

    @property
    def sign(self) -> float:
        """+1 when higher is better, −1 when lower is: a log ratio times the sign is a
        gain."""
        return 1.0 if self is Direction.MAXIMIZE else -1.0

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b`."""
        return a > b if self is Direction.MAXIMIZE else a < b

    def best(self, items: Iterable[_T], key: Callable[[_T], float]) -> _T:
        """The best of `items` by `key` (ValueError when there are none)."""
        return (max if self is Direction.MAXIMIZE else min)(items, key=key)

    def gain(self, new: float, base: float) -> float:
        """The improvement of `new` over `base` as a fraction, > 0 when better: new/base − 1
        when higher is better, base/new − 1 when lower is."""
        return new / base - 1 if self is Direction.MAXIMIZE else base / new - 1

    def ranked(self, value: float) -> float:
        """A sort key that puts the best first (ascending)."""
        return -value if self is Direction.MAXIMIZE else value


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: Direction | None  # None: recorded, not judged
    objective: bool  # may a study optimize or constrain it
    text: str


_TABLE: tuple[Metric, ...] = (
    Metric("ops_per_sec", "req/s", Direction.MAXIMIZE, True, "requests completed per second"),
    Metric("capacity", "req/s", Direction.MAXIMIZE, True,
           "the highest open-loop request rate whose latency meets the study's SLO (a knee "
           "search per repetition)"),
    Metric("p50_us", "µs", Direction.MINIMIZE, True, "median latency from the intended send time"),
    Metric("p90_us", "µs", Direction.MINIMIZE, True, "90th percentile latency"),
    Metric("p99_us", "µs", Direction.MINIMIZE, True, "99th percentile latency"),
    Metric("p999_us", "µs", Direction.MINIMIZE, True, "99.9th percentile latency"),
    Metric("p9999_us", "µs", Direction.MINIMIZE, True, "99.99th percentile latency"),
    Metric("max_us", "µs", Direction.MINIMIZE, True, "largest latency"),
    Metric("mean_us", "µs", Direction.MINIMIZE, True, "mean latency"),
    Metric("service_p99_us", "µs", Direction.MINIMIZE, True,
           "99th percentile from the actual send time (no queueing in the client)"),
    Metric("hit_ratio", "ratio", Direction.MAXIMIZE, True, "share of gets that found their key"),
    Metric("memory", "B", Direction.MINIMIZE, True,
           "the server's memory setting (memory for items, as its stats give it), bytes: "
           "a budget to keep (`memory <= 256M`) or a size to make small"),
    Metric("errors", "count", Direction.MINIMIZE, True, "failed requests"),
    Metric("server_errors", "count", Direction.MINIMIZE, True,
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
        return Direction.MAXIMIZE
    if m.endswith(_LOWER) or m.startswith(("p50", "p9", "mean_us", "max_us")):
        return Direction.MINIMIZE
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
    if "_used_memory" in m:  # INFO's used_memory* (bytes)
        return "B"
    return "count"


def capacity_unit() -> str:
    return BY_NAME["capacity"].unit


def unknown_objective(name: str) -> str:
    """The message for a name that is not an objective metric."""
    return f"unknown metric {name!r}; known: {', '.join(OBJECTIVES)}"
