"""Rules between knobs, checked before a configuration is measured, so that invalid
combinations are never measured (and never mistaken for a bad configuration).

A rule sees the configuration; a knob the configuration does not set reads as its baseline
value (`kvtune.knobs.baseline`): its server default (application knobs) or the host's value
now (host knobs). Knobs are found through a `lookup` (the catalog's, in
`catalog.check_rules`), so this module knows knob names only."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kvtune.cpulist import parse_cpus
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.appliers.memcached import ITEM_SIZES_KB
from kvtune.knobs.baseline import baseline_value
from kvtune.knobs.knob import Knob

KnobLookup = Callable[[str], Knob | None]


class Values:
    """A configuration completed with baseline values, for rules to read."""

    def __init__(self, config: dict[str, Any], ctx: HostContext, lookup: KnobLookup) -> None:
        self.config = config
        self.ctx = ctx
        self.lookup = lookup

    def get(self, name: str) -> Any:
        if name in self.config:
            return self.config[name]
        knob = self.lookup(name)
        return None if knob is None else baseline_value(knob, self.ctx, None)

    def server_cpus(self) -> int:
        """How many CPUs the server may run on: its pinning, else its cpuset, else the host."""
        for name in ("placement.server_cpus", "placement.cpuset"):
            text = self.config.get(name)
            if text is not None:
                try:
                    return len(parse_cpus(str(text)))
                except ValueError:
                    pass
        return self.ctx.facts.cpus


@dataclass(frozen=True)
class Rule:
    """`broken(values)` says whether a configuration breaks the rule; `message` says so to a
    person. A rule applies when the configuration sets at least one of its `knobs`.
    `relaxable` rules guard a behaviour a study may want to give up on purpose (turning
    off CFS wake-up preemption, as case study 002 did); a study's `relax_rules` skips them."""

    name: str
    knobs: tuple[str, ...]
    broken: Callable[[Values], bool]
    message: str
    relaxable: bool = False

    def applies(self, config: dict[str, Any]) -> bool:
        return any(k in config for k in self.knobs)


def _kb(size: object) -> int:
    return ITEM_SIZES_KB.get(str(size), 1024)


def _int(v: object) -> int:
    return int(v)  # type: ignore[call-overload]


def _outside(v: Values) -> bool:
    pin, cpuset = v.config.get("placement.server_cpus"), v.config.get("placement.cpuset")
    if pin is None or cpuset is None:
        return False
    return not set(parse_cpus(str(pin))) <= set(parse_cpus(str(cpuset)))


RULES: list[Rule] = [
    Rule("memcached-large-pages-thp", ("memcached.large_pages", "thp.enabled"),
         lambda v: bool(v.get("memcached.large_pages")) and v.get("thp.enabled") == "never",
         "memcached.large_pages (-L) needs thp.enabled other than never: memcached refuses "
         "to start"),
    Rule("memcached-slab-chunk-max", ("memcached.slab_chunk_max", "memcached.max_item_size"),
         lambda v: _int(v.get("memcached.slab_chunk_max")) > _kb(
             v.get("memcached.max_item_size")) // 2,
         "memcached.slab_chunk_max must be at most half of memcached.max_item_size"),
    Rule("memcached-item-size-memory", ("memcached.max_item_size", "memcached.memory_mb"),
         lambda v: _kb(v.get("memcached.max_item_size")) > _int(
             v.get("memcached.memory_mb")) * 1024 // 2,
         "memcached.max_item_size must be at most half of memcached.memory_mb (memcached "
         "refuses to start)"),
    Rule("memcached-lru-segments", ("memcached.hot_lru_pct", "memcached.warm_lru_pct"),
         lambda v: _int(v.get("memcached.hot_lru_pct")) + _int(
             v.get("memcached.warm_lru_pct")) > 80,
         "memcached.hot_lru_pct + memcached.warm_lru_pct must be at most 80"),
    Rule("memcached-temporary-ttl", ("memcached.temporary_ttl", "memcached.lru_maintainer"),
         lambda v: _int(v.get("memcached.temporary_ttl")) > 0 and not v.get(
             "memcached.lru_maintainer"),
         "memcached.temporary_ttl needs memcached.lru_maintainer"),
    Rule("memcached-automove-reassign", ("memcached.slab_automove", "memcached.slab_reassign"),
         lambda v: _int(v.get("memcached.slab_automove")) > 0 and not v.get(
             "memcached.slab_reassign"),
         "memcached.slab_automove needs memcached.slab_reassign"),
    Rule("memcached-backlog-somaxconn", ("memcached.backlog", "net.core.somaxconn"),
         lambda v: _int(v.get("memcached.backlog")) > _int(v.get("net.core.somaxconn")),
         "memcached.backlog above net.core.somaxconn is silently capped (raise somaxconn "
         "with it)"),
    Rule("redis-backlog-somaxconn", ("redis.tcp_backlog", "net.core.somaxconn"),
         lambda v: _int(v.get("redis.tcp_backlog")) > _int(v.get("net.core.somaxconn")),
         "redis.tcp_backlog above net.core.somaxconn is silently capped (raise somaxconn "
         "with it)"),
    Rule("redis-io-threads-cpus", ("redis.io_threads", "placement.server_cpus",
                                   "placement.cpuset"),
         lambda v: _int(v.get("redis.io_threads")) > v.server_cpus(),
         "redis.io_threads exceeds the server's CPUs"),
    Rule("cfs-wakeup-preemption", ("sched.wakeup_granularity_ns", "sched.latency_ns"),
         lambda v: 2 * _int(v.get("sched.wakeup_granularity_ns")) >= _int(
             v.get("sched.latency_ns")),
         "sched.wakeup_granularity_ns must stay below sched.latency_ns / 2, or CFS stops "
         "preempting on wake-up (relax this rule to search that on purpose)", relaxable=True),
    Rule("cfs-min-granularity", ("sched.min_granularity_ns", "sched.latency_ns"),
         lambda v: _int(v.get("sched.min_granularity_ns")) > _int(v.get("sched.latency_ns")),
         "sched.min_granularity_ns must not exceed sched.latency_ns"),
    Rule("vm-dirty-ratios", ("vm.dirty_background_ratio", "vm.dirty_ratio"),
         lambda v: _int(v.get("vm.dirty_background_ratio")) >= _int(v.get("vm.dirty_ratio")),
         "vm.dirty_background_ratio must be below vm.dirty_ratio"),
    Rule("placement-quota-cpuset", ("placement.cpu_quota_pct", "placement.cpuset",
                                    "placement.server_cpus"),
         lambda v: _int(v.get("placement.cpu_quota_pct")) > 100 * v.server_cpus(),
         "placement.cpu_quota_pct is more than the server's CPUs can use"),
    Rule("placement-pin-inside-cpuset", ("placement.server_cpus", "placement.cpuset"),
         lambda v: _outside(v),
         "placement.server_cpus must lie inside placement.cpuset"),
]


RULE_NAMES: frozenset[str] = frozenset(r.name for r in RULES)


def broken(values: Values, relax: Iterable[str] = ()) -> list[Rule]:
    """Every rule the configuration in `values` breaks, in declaration order, except the
    rules named in `relax`. A rule whose knobs are unreadable here is skipped (preflight
    reports those knobs)."""
    skip = set(relax)
    out = []
    for rule in RULES:
        if rule.name in skip or not rule.applies(values.config):
            continue
        try:
            if rule.broken(values):
                out.append(rule)
        except (TypeError, ValueError):
            continue
    return out

