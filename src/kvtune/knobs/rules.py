"""Rules between knobs, checked before a trial runs so that invalid combinations are never
measured (and never mistaken for a bad configuration)."""

from __future__ import annotations

import os
from typing import Any

from kvtune.knobs.appliers.base import HostContext


def _cpus_in(text: Any) -> int:
    from kvtune.spec import parse_cpus

    try:
        return len(parse_cpus(str(text)))
    except ValueError:
        return os.cpu_count() or 1


def check_rules(config: dict[str, Any], ctx: HostContext) -> str | None:
    """The first rule the configuration breaks, as a sentence, or None."""
    # memcached -L (large pages) refuses to start when THP is never.
    if config.get("memcached.large_pages") and (
            config.get("thp.enabled", ctx.facts.thp) == "never"):
        return "memcached.large_pages needs thp.enabled other than never"
    # slab_chunk_max must stay at most half the item size limit.
    if "memcached.slab_chunk_max" in config and "memcached.max_item_size" in config:
        sizes = {"512k": 512, "1m": 1024, "2m": 2048, "4m": 4096}
        item_kb = sizes.get(str(config["memcached.max_item_size"]), 1024)
        if int(config["memcached.slab_chunk_max"]) > item_kb // 2:
            return "memcached.slab_chunk_max must be at most half of memcached.max_item_size"
    # Redis I/O threads beyond the server's CPUs only contend.
    if "redis.io_threads" in config:
        cpus = config.get("placement.server_cpus") or config.get("placement.cpuset")
        if cpus is not None and int(config["redis.io_threads"]) > _cpus_in(cpus) + 1:
            return "redis.io_threads exceeds the server's CPUs"
    # CFS: wake-up preemption stays on only while wakeup_granularity < latency / 2.
    if "sched.wakeup_granularity_ns" in config and "sched.latency_ns" in config and (
            int(config["sched.wakeup_granularity_ns"]) >= int(config["sched.latency_ns"])):
        return "sched.wakeup_granularity_ns must be below sched.latency_ns"
    return None
