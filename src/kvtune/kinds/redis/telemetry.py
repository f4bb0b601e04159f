"""A digest of Redis INFO: throughput, keyspace hits and misses, memory and fragmentation,
evictions, connections and the server's own CPU time, as flat metrics.

The server is fresh for every repetition, so cumulative counters cover that repetition
alone (preload, warm-up and measured window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvtune.kinds.base import Digest
from kvtune.quantities import is_count
from kvtune.telemetry.sampler import StatsConn, parse_number

# INFO field -> metric name (after the kind's prefix)
_FIELDS = {
    "instantaneous_ops_per_sec": "instantaneous_ops_per_sec",
    "total_commands_processed": "total_commands",
    "keyspace_hits": "keyspace_hits",
    "keyspace_misses": "keyspace_misses",
    "used_memory": "used_memory",
    "used_memory_rss": "used_memory_rss",
    "used_memory_peak": "used_memory_peak",
    "mem_fragmentation_ratio": "mem_fragmentation_ratio",
    "allocator_frag_ratio": "allocator_frag_ratio",
    "evicted_keys": "evicted_keys",
    "expired_keys": "expired_keys",
    "connected_clients": "connected_clients",
    "total_connections_received": "total_connections",
    "rejected_connections": "rejected_connections",
    "total_net_input_bytes": "net_input_bytes",
    "total_net_output_bytes": "net_output_bytes",
    "used_cpu_sys": "used_cpu_sys_s",
    "used_cpu_user": "used_cpu_user_s",
    "io_threads_active": "io_threads_active",
    "total_error_replies": "error_replies",
    "active_defrag_hits": "active_defrag_hits",
    "lazyfree_pending_objects": "lazyfree_pending_objects",
}


def _keyspace(info: dict[str, Any]) -> float | None:
    total = None
    for k, v in info.items():
        if k.startswith("db") and is_count(k[2:]) and isinstance(v, str):
            for part in v.split(","):
                name, _, n = part.partition("=")
                if name == "keys" and is_count(n):
                    total = (total or 0.0) + float(n)
    return total


def digest_for(prefix: str, version_field: str) -> Digest:
    """The digest of an INFO-speaking server: its metrics named `prefix` + the field's name,
    its version from INFO's `version_field` (Valkey keeps `redis_version` at 7.2.4 for
    clients and says its own in `valkey_version`)."""

    def digest(stats: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
        """(flat metrics, raw digest) from the target's stats() ({"info": {...}})."""
        info = stats.get("info") or {}
        m: dict[str, float] = {}
        for key, name in _FIELDS.items():
            v = info.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                m[prefix + name] = float(v)
        hits, misses = m.get(prefix + "keyspace_hits"), m.get(prefix + "keyspace_misses")
        if hits is not None and misses is not None and hits + misses > 0:
            m[prefix + "hit_ratio"] = hits / (hits + misses)
        keys = _keyspace(info)
        if keys is not None:
            m[prefix + "keys"] = keys
        return m, {"version": info.get(version_field),
                   "mem_allocator": info.get("mem_allocator")}

    return digest


digest = digest_for("redis_", "redis_version")


def redis_sample(conn: StatsConn) -> dict[str, Any]:
    """`INFO` (default sections): every numeric field."""
    conn.s.sendall(b"*1\r\n$4\r\nINFO\r\n")
    header = conn.until(b"\r\n")
    if not header.startswith(b"$"):
        raise ValueError(f"unexpected INFO reply {header[:60]!r}")
    body = conn.exact(int(header[1:-2]) + 2)[:-2].decode(errors="replace")
    stats: dict[str, Any] = {}
    for line in body.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            n = parse_number(v.strip())
            if not isinstance(n, str):
                stats[k] = n
    return {"stats": stats}


def phase_row(last: dict[str, Any], prev: dict[str, Any] | None,
              delta: Callable[[str], float | None]) -> dict[str, Any]:
    """A phase's row (telemetry/sampler.py, phase_table) from its last INFO sample:
    evictions, hits, misses, commands and memory."""
    row: dict[str, Any] = {}
    st = last.get("stats", {})
    for key in ("evicted_keys", "keyspace_hits", "keyspace_misses",
                "total_commands_processed"):
        row[key] = delta(key)
    row["used_memory"] = st.get("used_memory")
    return row
