"""A digest of memcached's `stats`, `stats slabs` and `stats items`: the counters that
explain results (evictions, hit ratio, out-of-memory errors, slab moves, connection
yields) as flat metrics, and the per-slab-class table (pages, chunks, items, evictions,
out-of-memory errors) that the slab-rebalancer case study reads.

The server is fresh for every repetition, so its counters cover that repetition alone
(preload, warm-up and measured window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvtune.quantities import is_count
from kvtune.telemetry.sampler import StatsConn, parse_number

# stats counter -> metric name
_COUNTERS = {
    "evictions": "mc_evictions",
    "get_hits": "mc_get_hits",
    "get_misses": "mc_get_misses",
    "get_expired": "mc_get_expired",
    "cmd_get": "mc_cmd_get",
    "cmd_set": "mc_cmd_set",
    "curr_items": "mc_curr_items",
    "bytes": "mc_bytes",
    "limit_maxbytes": "mc_limit_maxbytes",
    "conn_yields": "mc_conn_yields",
    "listen_disabled_num": "mc_listen_disabled_num",
    "rejected_connections": "mc_rejected_connections",
    "total_connections": "mc_total_connections",
    "reclaimed": "mc_reclaimed",
    "expired_unfetched": "mc_expired_unfetched",
    "evicted_unfetched": "mc_evicted_unfetched",
    "slabs_moved": "mc_slabs_moved",
    "slab_reassign_rescues": "mc_slab_reassign_rescues",
    "slab_reassign_evictions_nomem": "mc_slab_reassign_evictions_nomem",
    "lru_maintainer_juggles": "mc_lru_maintainer_juggles",
    "lru_crawler_starts": "mc_lru_crawler_starts",
    "malloc_fails": "mc_malloc_fails",
    "store_too_large": "mc_store_too_large",
    "store_no_memory": "mc_store_no_memory",
    "rusage_user": "mc_rusage_user_s",
    "rusage_system": "mc_rusage_system_s",
    "threads": "mc_threads",
    "hash_power_level": "mc_hash_power_level",
}

# per-class fields kept in the slab table
SLAB_FIELDS = ("chunk_size", "chunks_per_page", "total_pages", "total_chunks", "used_chunks",
               "free_chunks", "mem_requested")
ITEM_FIELDS = ("number", "age", "evicted", "evicted_nonzero", "outofmemory", "reclaimed",
               "expired_unfetched", "evicted_unfetched", "tailrepairs")


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    return None


def slab_table(stats: dict[str, Any]) -> list[dict[str, float]]:
    """One row per slab class that holds pages or items, ordered by class id."""
    rows: dict[int, dict[str, float]] = {}
    for key, v in (stats.get("slabs") or {}).items():
        cls, _, name = str(key).partition(":")
        if is_count(cls) and name in SLAB_FIELDS and _num(v) is not None:
            rows.setdefault(int(cls), {})[name] = float(v)
    for key, v in (stats.get("items") or {}).items():
        parts = str(key).split(":")
        if len(parts) == 3 and parts[0] == "items" and is_count(parts[1]) \
                and parts[2] in ITEM_FIELDS and _num(v) is not None:
            rows.setdefault(int(parts[1]), {})[parts[2]] = float(v)
    return [{"class": float(c), **rows[c]} for c in sorted(rows)]


def digest(stats: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """(flat metrics, raw digest with the slab table) from MemcachedTarget.stats()."""
    s = stats.get("stats") or {}
    m: dict[str, float] = {}
    for key, name in _COUNTERS.items():
        v = _num(s.get(key))
        if v is not None:
            m[name] = v
    hits, misses = m.get("mc_get_hits"), m.get("mc_get_misses")
    if hits is not None and misses is not None and hits + misses > 0:
        m["mc_hit_ratio"] = hits / (hits + misses)
    if m.get("mc_limit_maxbytes"):
        m["mc_fill_ratio"] = m.get("mc_bytes", 0.0) / m["mc_limit_maxbytes"]
    table = slab_table(stats)
    if table:
        m["mc_slab_classes"] = float(sum(1 for r in table if r.get("total_pages", 0) > 0))
        m["mc_total_pages"] = sum(r.get("total_pages", 0.0) for r in table)
        m["mc_outofmemory"] = sum(r.get("outofmemory", 0.0) for r in table)
        m["mc_class_evictions"] = sum(r.get("evicted", 0.0) for r in table)
    slabs = stats.get("slabs") or {}
    for key in ("active_slabs", "total_malloced"):
        v = _num(slabs.get(key))
        if v is not None:
            m["mc_" + key] = v
    return m, {"slab_table": table}


MC_STATS = ("curr_items", "total_items", "bytes", "limit_maxbytes", "evictions",
            "cmd_get", "cmd_set", "get_hits", "get_misses", "slabs_moved",
            "slab_reassign_rescues", "slab_reassign_evictions_nomem", "slab_global_page_pool",
            "total_malloced", "curr_connections", "rusage_user", "rusage_system",
            "expired_unfetched", "evicted_unfetched")
MC_SLAB = ("chunk_size", "total_pages", "used_chunks", "total_chunks", "free_chunks",
           "cmd_set", "get_hits")
MC_ITEMS = ("number", "evicted", "outofmemory", "evicted_nonzero", "expired_unfetched")


def _mc_lines(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in raw.decode(errors="replace").split("\r\n"):
        if line.startswith("STAT "):
            parts = line.split(" ", 2)
            if len(parts) == 3:
                out[parts[1]] = parts[2]
    return out


def memcached_sample(conn: StatsConn) -> dict[str, Any]:
    """`stats`, `stats slabs`, `stats items`, reduced to the kept figures: {"stats": {...},
    "slabs": {class: {...}}} (a class's item figures merged into its slab figures)."""
    conn.s.sendall(b"stats\r\nstats slabs\r\nstats items\r\n")
    general, slabs, items = (_mc_lines(conn.until(b"END\r\n")) for _ in range(3))
    stats = {k: parse_number(general[k]) for k in MC_STATS if k in general}
    classes: dict[str, dict[str, Any]] = {}
    for key, v in slabs.items():
        cls, _, name = key.partition(":")
        if name in MC_SLAB and is_count(cls):
            classes.setdefault(cls, {})[name] = parse_number(v)
    for key, v in items.items():  # items:<class>:<name>
        _, cls, name = ([*key.split(":", 2), "", ""])[:3]
        if name in MC_ITEMS and is_count(cls):
            classes.setdefault(cls, {})[f"items_{name}"] = parse_number(v)
    return {"stats": stats, "slabs": classes}


def _slab_pages(sample: dict[str, Any]) -> dict[str, int]:
    return {c: int(v.get("total_pages", 0)) for c, v in sample.get("slabs", {}).items()
            if v.get("total_pages")}


def phase_row(last: dict[str, Any], prev: dict[str, Any] | None,
              delta: Callable[[str], float | None]) -> dict[str, Any]:
    """A phase's row (telemetry/sampler.py, phase_table) from its last sample: pages per
    slab class (by chunk size) and what changed (evictions, pages moved, hit ratio,
    out-of-memory errors)."""
    row: dict[str, Any] = {}
    pages = _slab_pages(last)
    chunk = {c: int(v.get("chunk_size", 0)) for c, v in last.get("slabs", {}).items()}
    row["pages"] = {f"{c}:{chunk.get(c, 0)}": n for c, n in
                    sorted(pages.items(), key=lambda kv: int(kv[0]))}
    row["evictions"] = delta("evictions")
    row["slabs_moved"] = delta("slabs_moved")
    gets, hits = delta("cmd_get"), delta("get_hits")
    row["hit_ratio"] = hits / gets if gets and hits is not None else None
    oom_now = sum(int(v.get("items_outofmemory", 0)) for v in last["slabs"].values())
    oom_before = sum(int(v.get("items_outofmemory", 0))
                     for v in (prev or {}).get("slabs", {}).values())
    row["out_of_memory"] = oom_now - oom_before
    return row
