"""memcached's knobs: `memcached.*`, its flags and `-o` options, with their versions."""

from __future__ import annotations

from kvtune.kinds.memcached.appliers import (
    ITEM_SIZES_KB,
    MemcachedFlag,
    MemcachedOption,
    SlabChunkMax,
)
from kvtune.knobs.domain import B, C, Domain, F, I
from kvtune.knobs.knob import Knob


def knobs() -> list[Knob]:
    return [
        Knob("memcached.threads", Domain(I, 1, 16), MemcachedFlag("-t"), 4,
             "worker threads (each with its own event loop)", "threads"),
        Knob("memcached.memory_mb", Domain(I, 16, 16384, log=True), MemcachedFlag("-m"), 64,
             "item memory (allocated lazily in 1 MB pages, all at start with -L)", "MB"),
        Knob("memcached.max_connections", Domain(I, 64, 65536, log=True), MemcachedFlag("-c"),
             1024, "max simultaneous connections (needs RLIMIT_NOFILE above it)"),
        Knob("memcached.growth_factor", Domain(F, 1.01, 3.0, step=0.005),
             MemcachedFlag("-f"), 1.25, "slab chunk size growth factor (> 1)"),
        Knob("memcached.min_item_bytes", Domain(I, 8, 1024, step=2), MemcachedFlag("-n"), 48,
             "minimum space for key + value + flags", "bytes"),
        Knob("memcached.backlog", Domain(I, 16, 65536, log=True), MemcachedFlag("-b"), 1024,
             "listen backlog, silently capped by net.core.somaxconn"),
        Knob("memcached.reqs_per_event", Domain(I, 1, 1000, log=True), MemcachedFlag("-R"), 20,
             "requests served per connection per event before yielding (conn_yields)"),
        Knob("memcached.protocol", Domain(C, choices=("auto", "ascii")), MemcachedFlag("-B"),
             "auto", "protocol negotiation (binary is deprecated, and kvload speaks text/meta)"),
        Knob("memcached.max_item_size", Domain(C, choices=tuple(ITEM_SIZES_KB)),
             MemcachedFlag("-I"), "1m", "item size limit (at most half of -m)"),
        Knob("memcached.large_pages", Domain(B), MemcachedFlag("-L"), False,
             "-L: preallocate all item memory in huge pages; refused while THP is never "
             "(rule memcached-large-pages-thp)"),
        Knob("memcached.disable_cas", Domain(B), MemcachedFlag("-C"), False,
             "-C: no CAS (8 bytes less per item; gets/cas stop working)"),
        Knob("memcached.hashpower", Domain(I, 12, 26), MemcachedOption("hashpower"), 16,
             "initial hash table size as a power of two (16 = 65536 buckets)"),
        Knob("memcached.no_hashexpand", Domain(B), MemcachedOption("no_hashexpand"), False,
             "never grow the hash table (1.6 has no `hashexpand` option to turn it on)"),
        Knob("memcached.hash_algorithm", Domain(C, choices=("murmur3", "jenkins", "xxh3")),
             MemcachedOption("hash_algorithm"), "murmur3", "key hash function"),
        Knob("memcached.maxconns_fast", Domain(B),
             MemcachedOption("maxconns_fast", "no_maxconns_fast"), True,
             "reject at the connection limit at once instead of pausing the listener"),
        Knob("memcached.slab_reassign", Domain(B),
             MemcachedOption("slab_reassign", "no_slab_reassign"), True,
             "allow 1 MB slab pages to move between classes"),
        Knob("memcached.slab_automove", Domain(C, choices=(0, 1, 2)),
             MemcachedOption("slab_automove"), 1,
             "slab rebalancer: 0 off, 1 through a global page pool, 2 on every eviction"),
        Knob("memcached.slab_automove_ratio", Domain(F, 0.05, 1.0, step=0.05),
             MemcachedOption("slab_automove_ratio"), 0.8,
             "young/old age ratio that makes the automover move a page"),
        Knob("memcached.slab_automove_window", Domain(I, 3, 1800, log=True),
             MemcachedOption("slab_automove_window"), 30,
             "automover decision window (default 30 up to 1.6.33, 10 from 1.6.34)", "s"),
        Knob("memcached.slab_chunk_max", Domain(C, choices=(16, 32, 64, 128, 256, 512)),
             SlabChunkMax(), 512, "largest slab chunk; bigger items are chained "
             "(written in bytes before 1.6.24, in KB from 1.6.24)", "KB"),
        Knob("memcached.lru_crawler", Domain(B), MemcachedOption("lru_crawler", "no_lru_crawler"),
             True, "background crawler that reclaims expired items"),
        Knob("memcached.lru_crawler_sleep", Domain(I, 0, 1_000_000, step=50),
             MemcachedOption("lru_crawler_sleep"), 100, "crawler pause between items", "us"),
        Knob("memcached.lru_maintainer", Domain(B),
             MemcachedOption("lru_maintainer", "no_lru_maintainer"), True,
             "segmented LRU (HOT/WARM/COLD) and its background thread"),
        Knob("memcached.hot_lru_pct", Domain(I, 1, 79), MemcachedOption("hot_lru_pct"), 20,
             "share of a slab class kept HOT (hot + warm <= 80)", "%"),
        Knob("memcached.warm_lru_pct", Domain(I, 1, 79), MemcachedOption("warm_lru_pct"), 40,
             "share of a slab class kept WARM (hot + warm <= 80)", "%"),
        Knob("memcached.temporary_ttl", Domain(I, 1, 3600, log=True, special=(0,)),
             MemcachedOption("temporary_ttl", omit=0), 0,
             "items with a TTL below this go to the never-evicted TEMP LRU (0 = no TEMP LRU; "
             "needs the LRU maintainer)", "s"),
        Knob("memcached.idle_timeout", Domain(I, 10, 86400, log=True, special=(0,)),
             MemcachedOption("idle_timeout"), 0, "close connections idle this long (0 = never)",
             "s", ("idle-only",)),
        Knob("memcached.modern", Domain(B), MemcachedOption("modern", "no_modern"), True,
             "`modern` is a no-op in 1.6; false gives `no_modern` (1.4 defaults: flat LRU, no "
             "crawler, no slab reassign, jenkins hash)"),
        Knob("memcached.worker_logbuf_size", Domain(I, 16, 1024, log=True),
             MemcachedOption("worker_logbuf_size", min_version=(1, 6, 40)), 64,
             "per-worker log buffer; never emitted before 1.6.40, where it also set "
             "slab_sizes to its value", "KB"),
    ]


# The seven application flags of the A-Tune memcached study (case study 003), with its ranges.
ATUNE_MEMCACHED: dict[str, Domain] = {
    "memcached.memory_mb": Domain(I, 1024, 10240, step=1024),
    "memcached.max_connections": Domain(I, 896, 1536, step=64),
    "memcached.growth_factor": Domain(F, 1.125, 3.0, step=0.125),
    "memcached.min_item_bytes": Domain(I, 12, 512, step=2),
    "memcached.backlog": Domain(I, 256, 2048, step=64),
    "memcached.threads": Domain(I, 4, 16, step=4),
    "memcached.reqs_per_event": Domain(I, 10, 100),
}

# Preset name → (knob names, domain overrides, keep only what is available on this host).
PRESETS: dict[str, tuple[list[str], dict[str, Domain], bool]] = {
    "memcached-app": (list(ATUNE_MEMCACHED), ATUNE_MEMCACHED, False),
    "memcached-full": (
        [*ATUNE_MEMCACHED, "memcached.hashpower", "memcached.slab_automove",
         "memcached.lru_crawler", "memcached.lru_maintainer",
         "kernel.sched_autogroup_enabled", "kernel.numa_balancing", "sched.migration_cost_ns",
         "sched.latency_ns", "sched.min_granularity_ns", "sched.wakeup_granularity_ns",
         "sched.base_slice_ns", "thp.enabled", "thp.defrag",
         "net.core.somaxconn", "net.core.netdev_max_backlog", "net.core.netdev_budget",
         "net.core.dev_weight", "net.core.rmem_max", "net.core.wmem_max",
         "net.core.rmem_default", "net.core.wmem_default", "net.core.optmem_max",
         "net.ipv4.tcp_autocorking", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_tw_reuse",
         "net.ipv4.tcp_max_syn_backlog"],
        ATUNE_MEMCACHED, True),
}
