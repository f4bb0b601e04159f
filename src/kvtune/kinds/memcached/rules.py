"""memcached's rules: what memcached refuses to start with or silently caps."""

from __future__ import annotations

from kvtune.kinds.memcached.appliers import ITEM_SIZES_KB
from kvtune.knobs.rule import Rule
from kvtune.knobs.rule import as_int as _int


def _kb(size: object) -> int:
    return ITEM_SIZES_KB.get(str(size), 1024)


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


def rules() -> list[Rule]:
    return [
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
    ]
