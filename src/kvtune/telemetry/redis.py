"""A digest of Redis INFO: throughput, keyspace hits and misses, memory and fragmentation,
evictions, connections and the server's own CPU time, as flat metrics.

The server is fresh for every repetition, so cumulative counters cover that repetition
alone (preload, warm-up and measured window).
"""

from __future__ import annotations

from typing import Any

_FIELDS = {
    "instantaneous_ops_per_sec": "redis_instantaneous_ops_per_sec",
    "total_commands_processed": "redis_total_commands",
    "keyspace_hits": "redis_keyspace_hits",
    "keyspace_misses": "redis_keyspace_misses",
    "used_memory": "redis_used_memory",
    "used_memory_rss": "redis_used_memory_rss",
    "used_memory_peak": "redis_used_memory_peak",
    "mem_fragmentation_ratio": "redis_mem_fragmentation_ratio",
    "allocator_frag_ratio": "redis_allocator_frag_ratio",
    "evicted_keys": "redis_evicted_keys",
    "expired_keys": "redis_expired_keys",
    "connected_clients": "redis_connected_clients",
    "total_connections_received": "redis_total_connections",
    "rejected_connections": "redis_rejected_connections",
    "total_net_input_bytes": "redis_net_input_bytes",
    "total_net_output_bytes": "redis_net_output_bytes",
    "used_cpu_sys": "redis_used_cpu_sys_s",
    "used_cpu_user": "redis_used_cpu_user_s",
    "io_threads_active": "redis_io_threads_active",
    "total_error_replies": "redis_error_replies",
    "active_defrag_hits": "redis_active_defrag_hits",
    "lazyfree_pending_objects": "redis_lazyfree_pending_objects",
}


def _keyspace(info: dict[str, Any]) -> float | None:
    total = None
    for k, v in info.items():
        if k.startswith("db") and k[2:].isdigit() and isinstance(v, str):
            for part in v.split(","):
                name, _, n = part.partition("=")
                if name == "keys" and n.isdigit():
                    total = (total or 0.0) + float(n)
    return total


def digest(stats: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """(flat metrics, raw digest) from RedisTarget.stats() ({"info": {...}})."""
    info = stats.get("info") or {}
    m: dict[str, float] = {}
    for key, name in _FIELDS.items():
        v = info.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            m[name] = float(v)
    hits, misses = m.get("redis_keyspace_hits"), m.get("redis_keyspace_misses")
    if hits is not None and misses is not None and hits + misses > 0:
        m["redis_hit_ratio"] = hits / (hits + misses)
    keys = _keyspace(info)
    if keys is not None:
        m["redis_keys"] = keys
    return m, {"version": info.get("redis_version"), "mem_allocator": info.get("mem_allocator")}
