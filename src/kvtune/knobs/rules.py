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

from collections.abc import Iterable
from typing import Any

from kvtune import kind_registry as kinds
from kvtune.cpulist import parse_cpus
from kvtune.knobs.rule import KnobLookup, Rule, Values, study_target
from kvtune.knobs.rule import as_int as _int

__all__ = ["RULES", "RULE_NAMES", "KnobLookup", "Rule", "Values", "broken", "repairs",
           "study_target"]

def _outside(v: Values) -> bool:
    pin, cpuset = v.config.get("placement.server_cpus"), v.config.get("placement.cpuset")
    if pin is None or cpuset is None:
        return False
    return not set(parse_cpus(str(pin))) <= set(parse_cpus(str(cpuset)))


_HOST_RULES: list[Rule] = [
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


# Each server kind's rules (kinds/<kind>/rules.py), then the host's.
RULES: list[Rule] = [*(r for kind in kinds.every() for r in kind.rules()), *_HOST_RULES]

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

