"""Rules between knobs, checked before a configuration is measured, so that invalid
combinations are never measured (and never mistaken for a bad configuration).

A rule sees the configuration; a knob the configuration does not set reads as its baseline
value (`kvtune.knobs.baseline`): its server default (application knobs) or the host's value
now (host knobs). Knobs are found through a `lookup` (the catalog's, in
`catalog.check_rules`), so this module knows knob names only.

A rule applies to a configuration only when (1) the configuration sets one of the rule's
`subject` knobs (by default any of its knobs) and (2) every knob it reads that the
configuration does not set is a knob of the study's own target or of the host: a Redis rule
never judges a memcached study by Redis's defaults. The study's target is given, or read
from the target-specific knobs the configuration sets.

A rule may offer `repair`s: alternative changes that make the configuration valid (e.g.
raise memcached.hashpower above the lock table). The search tries them before resampling
(`kvtune.optimizer.ask`)."""

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

    def __init__(self, config: dict[str, Any], ctx: HostContext, lookup: KnobLookup,
                 target: str | None = None) -> None:
        self.config = config
        self.ctx = ctx
        self.lookup = lookup
        self.target = target if target is not None else study_target(config, lookup)

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
    subject: tuple[str, ...] = ()  # the rule applies when the config sets one (default: knobs)
    repairs: tuple[Callable[[Values], dict[str, Any]], ...] = ()

    def applies(self, config: dict[str, Any]) -> bool:
        """Whether `config` sets one of the rule's subject knobs."""
        return any(k in config for k in (self.subject or self.knobs))

    def applies_to(self, values: Values) -> bool:
        """`applies`, and every knob the rule reads outside the configuration belongs to
        the study's target (or to the host) and has a baseline value here."""
        if not self.applies(values.config):
            return False
        for name in self.knobs:
            if name in values.config:
                continue
            knob = values.lookup(name)
            if knob is None or knob.target not in (None, values.target):
                return False
            if values.get(name) is None:
                return False
        return True


def study_target(config: dict[str, Any], lookup: KnobLookup) -> str | None:
    """The target the configuration's target-specific knobs belong to (None: only host
    knobs, or knobs of several targets)."""
    targets = set()
    for name in config:
        knob = lookup(name)
        if knob is not None and knob.target is not None:
            targets.add(knob.target)
    return targets.pop() if len(targets) == 1 else None


def _kb(size: object) -> int:
    return ITEM_SIZES_KB.get(str(size), 1024)


def _int(v: object) -> int:
    return int(v)  # type: ignore[call-overload]


def _outside(v: Values) -> bool:
    pin, cpuset = v.config.get("placement.server_cpus"), v.config.get("placement.cpuset")
    if pin is None or cpuset is None:
        return False
    return not set(parse_cpus(str(pin))) <= set(parse_cpus(str(cpuset)))


def lock_table_power(threads: int) -> int:
    """memcached's item lock table power for `threads` worker threads (thread.c,
    memcached_thread_init); the hash table's power must exceed it."""
    if threads < 3:
        return 10
    if threads < 4:
        return 11
    if threads < 5:
        return 12
    if threads <= 10:
        return 13
    if threads <= 20:
        return 14
    return 15


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
    Rule("memcached-hashpower-lock-table", ("memcached.hashpower", "memcached.threads"),
         lambda v: _int(v.get("memcached.hashpower")) <= lock_table_power(
             _int(v.get("memcached.threads"))),
         "memcached.hashpower must exceed the item lock table's power (12 up to 4 threads, "
         "13 up to 10, 14 up to 20): memcached refuses to start (\"Hash table power size "
         "cannot be equal to or less than item lock table\")",
         repairs=(lambda v: {"memcached.hashpower": lock_table_power(
             _int(v.get("memcached.threads"))) + 1},)),
    # A backlog above somaxconn is silently capped: the rule judges the backlog a study
    # sets (subject), not a somaxconn the study searches below the server's default.
    Rule("memcached-backlog-somaxconn", ("memcached.backlog", "net.core.somaxconn"),
         lambda v: _int(v.get("memcached.backlog")) > _int(v.get("net.core.somaxconn")),
         "memcached.backlog above net.core.somaxconn is silently capped (raise somaxconn "
         "with it)", subject=("memcached.backlog",),
         repairs=(lambda v: {"net.core.somaxconn": _int(v.get("memcached.backlog"))},
                  lambda v: {"memcached.backlog": _int(v.get("net.core.somaxconn"))})),
    Rule("redis-backlog-somaxconn", ("redis.tcp_backlog", "net.core.somaxconn"),
         lambda v: _int(v.get("redis.tcp_backlog")) > _int(v.get("net.core.somaxconn")),
         "redis.tcp_backlog above net.core.somaxconn is silently capped (raise somaxconn "
         "with it)", subject=("redis.tcp_backlog",),
         repairs=(lambda v: {"net.core.somaxconn": _int(v.get("redis.tcp_backlog"))},
                  lambda v: {"redis.tcp_backlog": _int(v.get("net.core.somaxconn"))})),
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
        if rule.name in skip:
            continue
        try:
            if rule.applies_to(values) and rule.broken(values):
                out.append(rule)
        except (TypeError, ValueError):
            continue
    return out


def repairs(values: Values, rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """The changes the broken `rules` offer, each a dict of knob values (for the search to
    keep only those inside the study's domains that break no rule)."""
    out = []
    for rule in rules:
        for fix in rule.repairs:
            try:
                out.append(fix(values))
            except (TypeError, ValueError):
                continue
    return out

