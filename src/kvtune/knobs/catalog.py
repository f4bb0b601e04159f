"""The knob catalog: the knobs kvtune knows, their domains, defaults, and where they live.

Names are `<family>.<name>`: `memcached.*` and `redis.*` (application), `kernel.*`,
`vm.*`, `thp.*`, `sched.*` (kernel), `net.*` (network, named as their sysctl), and
`placement.*` (where the server runs). Defaults of application knobs are the server's
built-in defaults; host knobs take the host's value at study start as their baseline.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtune.knobs.appliers.cgroup import CpuQuota, CpusetCpus, ServerCpus
from kvtune.knobs.appliers.hostfile import HostFile, Location, Sysctl, sched_tunable
from kvtune.knobs.appliers.memcached import MemcachedFlag, MemcachedOption
from kvtune.knobs.appliers.redis import RedisDirective
from kvtune.knobs.domain import Domain
from kvtune.knobs.knob import Knob

I = "int"  # noqa: E741
F = "float"
C = "categorical"
B = "bool"


def _mc() -> list[Knob]:
    return [
        Knob("memcached.threads", Domain(I, 1, 16), MemcachedFlag("-t"), 4,
             "worker threads", "threads"),
        Knob("memcached.memory_mb", Domain(I, 16, 16384, log=True), MemcachedFlag("-m"), 64,
             "item memory in megabytes", "MB"),
        Knob("memcached.max_connections", Domain(I, 64, 65536, log=True), MemcachedFlag("-c"),
             1024, "max simultaneous connections"),
        Knob("memcached.growth_factor", Domain(F, 1.01, 2.0, step=0.01), MemcachedFlag("-f"),
             1.25, "slab chunk size growth factor"),
        Knob("memcached.min_item_bytes", Domain(I, 8, 256, step=8), MemcachedFlag("-n"), 48,
             "minimum space for key+value+flags", "bytes"),
        Knob("memcached.backlog", Domain(I, 16, 65536, log=True), MemcachedFlag("-b"), 1024,
             "listen backlog (capped by net.core.somaxconn)"),
        Knob("memcached.reqs_per_event", Domain(I, 1, 200, log=True), MemcachedFlag("-R"), 20,
             "max requests per event before yielding the connection"),
        Knob("memcached.max_item_size", Domain(C, choices=("512k", "1m", "2m", "4m")),
             MemcachedFlag("-I"), "1m", "item size limit"),
        Knob("memcached.hashpower", Domain(I, 12, 28), MemcachedOption("hashpower"), 16,
             "initial hash table size as a power of two"),
        Knob("memcached.slab_reassign", Domain(B), MemcachedOption("slab_reassign"), True,
             "allow slab pages to move between classes"),
        Knob("memcached.slab_automove", Domain(C, choices=(0, 1, 2)),
             MemcachedOption("slab_automove"), 1, "slab rebalancer aggressiveness"),
        Knob("memcached.lru_crawler", Domain(B), MemcachedOption("lru_crawler", "no_lru_crawler"),
             True, "background LRU crawler"),
        Knob("memcached.lru_maintainer", Domain(B),
             MemcachedOption("lru_maintainer", "no_lru_maintainer"), True,
             "background LRU maintainer thread"),
        Knob("memcached.hashexpand", Domain(B), MemcachedOption("hashexpand", "no_hashexpand"),
             True, "grow the hash table in the background"),
    ]


def _redis() -> list[Knob]:
    return [
        Knob("redis.io_threads", Domain(I, 1, 8), RedisDirective("io-threads"), 1,
             "I/O threads (1 = main thread only)"),
        Knob("redis.io_threads_do_reads", Domain(B), RedisDirective("io-threads-do-reads"), False,
             "I/O threads also read and parse"),
        Knob("redis.hz", Domain(I, 1, 500, log=True), RedisDirective("hz", live=True), 10,
             "background task frequency", "Hz"),
        Knob("redis.dynamic_hz", Domain(B), RedisDirective("dynamic-hz", live=True), True,
             "scale hz with the number of clients"),
        Knob("redis.maxmemory_policy",
             Domain(C, choices=("noeviction", "allkeys-lru", "allkeys-lfu", "volatile-lru",
                                "allkeys-random")),
             RedisDirective("maxmemory-policy", live=True), "noeviction", "eviction policy"),
        Knob("redis.maxmemory_samples", Domain(I, 1, 64), RedisDirective(
            "maxmemory-samples", live=True), 5, "keys sampled per eviction"),
        Knob("redis.tcp_backlog", Domain(I, 16, 65536, log=True), RedisDirective("tcp-backlog"),
             511, "listen backlog"),
        Knob("redis.jemalloc_bg_thread", Domain(B), RedisDirective("jemalloc-bg-thread",
                                                                   live=True), True,
             "jemalloc background purging thread"),
        Knob("redis.disable_thp", Domain(B), RedisDirective("disable-thp"), True,
             "turn THP off for the redis process"),
        Knob("redis.lazyfree_lazy_eviction", Domain(B),
             RedisDirective("lazyfree-lazy-eviction", live=True), False, "free evicted keys in "
             "a background thread"),
    ]


def _kernel() -> list[Knob]:
    eevdf = (6, 6)
    return [
        Knob("kernel.sched_autogroup_enabled", Domain(B),
             Sysctl("kernel.sched_autogroup_enabled"), None, "group tasks by session"),
        Knob("kernel.numa_balancing", Domain(C, choices=(0, 1)), Sysctl("kernel.numa_balancing"),
             None, "automatic NUMA balancing"),
        Knob("kernel.timer_migration", Domain(B), Sysctl("kernel.timer_migration"), None,
             "migrate timers to busy CPUs"),
        Knob("kernel.sched_cfs_bandwidth_slice_us", Domain(I, 1000, 50000, log=True),
             Sysctl("kernel.sched_cfs_bandwidth_slice_us"), None,
             "runtime handed from a cgroup quota to a CPU at a time", "us"),
        Knob("sched.migration_cost_ns", Domain(I, 0, 5_000_000, step=50_000),
             sched_tunable("migration_cost_ns", "sched_migration_cost_ns"), None,
             "cache-hot threshold for load balancing (the case study's knob)", "ns"),
        Knob("sched.nr_migrate", Domain(I, 1, 128, log=True),
             sched_tunable("nr_migrate", "sched_nr_migrate"), None, "tasks moved per balance"),
        Knob("sched.latency_ns", Domain(I, 1_000_000, 100_000_000, log=True),
             sched_tunable("latency_ns", "sched_latency_ns", until=eevdf,
                           note="EEVDF (6.6+) has no scheduling period; see sched.base_slice_ns"),
             None, "CFS targeted preemption latency", "ns"),
        Knob("sched.min_granularity_ns", Domain(I, 100_000, 50_000_000, log=True),
             sched_tunable("min_granularity_ns", "sched_min_granularity_ns", until=eevdf,
                           note="replaced by sched.base_slice_ns on EEVDF (6.6+)"),
             None, "CFS minimal preemption granularity", "ns"),
        Knob("sched.wakeup_granularity_ns", Domain(I, 100_000, 50_000_000, log=True),
             sched_tunable("wakeup_granularity_ns", "sched_wakeup_granularity_ns", until=eevdf,
                           note="EEVDF (6.6+) decides wake-up preemption by deadline; "
                                "see the sched features RUN_TO_PARITY and PREEMPT_SHORT"),
             None, "CFS wake-up preemption granularity", "ns"),
        Knob("sched.base_slice_ns", Domain(I, 100_000, 100_000_000, log=True),
             HostFile([Location("/sys/kernel/debug/sched/base_slice_ns", eevdf)]),
             None, "EEVDF base time slice", "ns"),
        Knob("thp.enabled", Domain(C, choices=("always", "madvise", "never")),
             HostFile([Location("/sys/kernel/mm/transparent_hugepage/enabled")], "bracketed"),
             None, "transparent huge pages"),
        Knob("thp.defrag", Domain(C, choices=("always", "defer", "defer+madvise", "madvise",
                                              "never")),
             HostFile([Location("/sys/kernel/mm/transparent_hugepage/defrag")], "bracketed"),
             None, "THP defragmentation on fault"),
        Knob("vm.swappiness", Domain(I, 0, 200), Sysctl("vm.swappiness"), None,
             "swap tendency"),
        Knob("vm.compaction_proactiveness", Domain(I, 0, 100), Sysctl(
            "vm.compaction_proactiveness"), None, "background compaction"),
        Knob("vm.stat_interval", Domain(I, 1, 10), Sysctl("vm.stat_interval"), None,
             "vmstat timer interval", "s"),
    ]


def _net() -> list[Knob]:
    return [
        Knob("net.core.somaxconn", Domain(I, 128, 65535, log=True), Sysctl("net.core.somaxconn"),
             None, "cap on listen backlogs (per netns)"),
        Knob("net.core.netdev_max_backlog", Domain(I, 100, 100000, log=True),
             Sysctl("net.core.netdev_max_backlog"), None, "per-CPU input queue (loopback path)"),
        Knob("net.core.busy_poll", Domain(I, 0, 200), Sysctl("net.core.busy_poll"), None,
             "busy-poll µs for poll/select (no effect on loopback)", "us"),
        Knob("net.core.busy_read", Domain(I, 0, 200), Sysctl("net.core.busy_read"), None,
             "busy-read µs (no effect on loopback)", "us"),
        Knob("net.ipv4.tcp_autocorking", Domain(B), Sysctl("net.ipv4.tcp_autocorking"), None,
             "coalesce small writes"),
        Knob("net.ipv4.tcp_slow_start_after_idle", Domain(B),
             Sysctl("net.ipv4.tcp_slow_start_after_idle"), None, "restart slow start after idle"),
        Knob("net.ipv4.tcp_max_syn_backlog", Domain(I, 128, 65536, log=True),
             Sysctl("net.ipv4.tcp_max_syn_backlog"), None, "half-open connection queue"),
    ]


def _placement() -> list[Knob]:
    return [
        Knob("placement.cpu_quota_pct", Domain(I, 10, 800, step=10, special=(-1,)), CpuQuota(),
             -1, "server CFS quota in % of one CPU (-1 = unlimited)", "%"),
        Knob("placement.cpuset", Domain(C, choices=("0", "1", "0-1")), CpusetCpus(), None,
             "server cpuset"),
        Knob("placement.server_cpus", Domain(C, choices=("0", "1", "0-1")), ServerCpus(), None,
             "CPUs the server is pinned to"),
    ]


def all_knobs() -> list[Knob]:
    return _mc() + _redis() + _kernel() + _net() + _placement()


CATALOG: dict[str, Knob] = {k.name: k for k in all_knobs()}

PRESETS: dict[str, list[str]] = {
    # The seven application flags of the A-Tune memcached study (case study 003).
    "memcached-app": ["memcached.threads", "memcached.memory_mb", "memcached.max_connections",
                      "memcached.growth_factor", "memcached.min_item_bytes",
                      "memcached.backlog", "memcached.reqs_per_event"],
    "memcached-full": ["memcached.threads", "memcached.growth_factor",
                       "memcached.reqs_per_event", "memcached.backlog", "memcached.hashpower",
                       "memcached.lru_crawler", "memcached.lru_maintainer",
                       "kernel.sched_autogroup_enabled", "kernel.numa_balancing",
                       "sched.migration_cost_ns", "sched.base_slice_ns", "thp.enabled",
                       "thp.defrag", "net.core.somaxconn", "net.core.netdev_max_backlog",
                       "net.ipv4.tcp_autocorking"],
    "redis-throughput": ["redis.io_threads", "redis.io_threads_do_reads", "redis.hz",
                         "redis.jemalloc_bg_thread", "redis.disable_thp", "thp.enabled",
                         "kernel.sched_autogroup_enabled", "net.ipv4.tcp_autocorking"],
    "placement": ["placement.cpu_quota_pct", "placement.cpuset", "memcached.threads"],
}


def lookup(name: str) -> Knob | None:
    return CATALOG.get(name)


def for_target(target: str | None) -> Iterable[Knob]:
    for k in CATALOG.values():
        if target is None or k.target in (None, target):
            yield k
