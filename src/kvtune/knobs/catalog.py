"""The knob catalog: the knobs kvtune knows, their domains, units, defaults, where they live
on which version, the rules between them, and the presets.

Names are `<family>.<name>`: `memcached.*` and `redis.*` (application), `kernel.*`,
`sched.*`, `thp.*`, `vm.*` (kernel), `net.*` (network, named as their sysctl), and
`placement.*` (where the server runs). Defaults of application knobs are the server's
built-in defaults; host knobs take the host's value at study start as their baseline.

Tags say what a person should know before tuning a knob: `loopback:no-effect` (does
nothing for traffic on `lo`), `netns:per` / `netns:init` (per network namespace, or only
in the initial one), `idle-only` (acts only on idle connections), `build` (exists only in
some builds of the server).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Final

from kvtune.host.debugfs import debugfs_status, features_status
from kvtune.host.sched import SLICE_MAX_NS, SLICE_MIN_NS
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.appliers.cgroup import (
    CpuPeriod,
    CpuQuota,
    CpusetCpus,
    ServerCpus,
    cpu_list_choices,
    host_cpus,
)
from kvtune.knobs.appliers.hostfile import HostFile, Location, Sysctl, sched_tunable
from kvtune.knobs.appliers.memcached import (
    ITEM_SIZES_KB,
    MemcachedFlag,
    MemcachedOption,
    SlabChunkMax,
)
from kvtune.knobs.appliers.redis import RedisDirective
from kvtune.knobs.appliers.sched import SchedFeature, SchedNice, SchedPolicy, SchedSlice
from kvtune.knobs.domain import Domain
from kvtune.knobs.knob import Knob
from kvtune.knobs.rules import Values, broken

I: Final = "int"  # noqa: E741
F: Final = "float"
C: Final = "categorical"
B: Final = "bool"

EEVDF = (6, 6)
THP = "/sys/kernel/mm/transparent_hugepage"
NO_LO = "loopback:no-effect"
PER_NS = "netns:per"
INIT_NS = "netns:init"


def _mc() -> list[Knob]:
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


def _redis() -> list[Knob]:
    policies = ("noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
                "volatile-lfu", "volatile-random", "volatile-ttl")
    return [
        Knob("redis.io_threads", Domain(I, 1, 8), RedisDirective("io-threads"), 1,
             "I/O threads (1 = main thread only; at most the server's CPUs)", "threads"),
        Knob("redis.io_threads_do_reads", Domain(B), RedisDirective("io-threads-do-reads"),
             False, "I/O threads also read and parse"),
        Knob("redis.hz", Domain(I, 1, 500, log=True), RedisDirective("hz", live=True), 10,
             "serverCron frequency (expiry, timeouts, rehashing)", "Hz"),
        Knob("redis.dynamic_hz", Domain(B), RedisDirective("dynamic-hz", live=True), True,
             "scale hz with the number of clients"),
        Knob("redis.maxmemory_mb", Domain(I, 16, 65536, log=True, special=(0,)),
             RedisDirective("maxmemory", live=True, suffix="mb"), 0,
             "eviction threshold (0 = no limit)", "MB"),
        Knob("redis.maxmemory_policy", Domain(C, choices=policies),
             RedisDirective("maxmemory-policy", live=True), "noeviction", "eviction policy"),
        Knob("redis.maxmemory_samples", Domain(I, 1, 64), RedisDirective(
            "maxmemory-samples", live=True), 5, "keys sampled per eviction"),
        Knob("redis.maxmemory_eviction_tenacity", Domain(I, 0, 100),
             RedisDirective("maxmemory-eviction-tenacity", live=True), 10,
             "how long one command may keep evicting"),
        Knob("redis.active_expire_effort", Domain(I, 1, 10),
             RedisDirective("active-expire-effort", live=True), 1,
             "CPU spent expiring keys vs memory held by expired keys"),
        Knob("redis.activerehashing", Domain(B), RedisDirective("activerehashing", live=True),
             True, "rehash the main dictionary in 1 ms steps from cron"),
        Knob("redis.activedefrag", Domain(B),
             RedisDirective("activedefrag", live=True, probe="yes"), False,
             "active defragmentation (only builds with Redis's bundled jemalloc)", "",
             ("build",)),
        *[Knob(f"redis.lazyfree_lazy_{n.replace('-', '_')}", Domain(B),
               RedisDirective(f"lazyfree-lazy-{n}", live=True), False,
               f"free memory of {what} in a background thread")
          for n, what in (("eviction", "evicted keys"), ("expire", "expired keys"),
                          ("server-del", "implicitly deleted keys"),
                          ("user-del", "DEL (as UNLINK)"), ("user-flush", "FLUSHALL/FLUSHDB"))],
        Knob("redis.tcp_backlog", Domain(I, 16, 65536, log=True), RedisDirective("tcp-backlog"),
             511, "listen backlog, capped by net.core.somaxconn"),
        Knob("redis.save", Domain(C, choices=("", "3600 1 300 100 60 10000", "900 1 300 10")),
             RedisDirective("save", live=True), "",
             "RDB snapshot schedule (\"\" = none; kvtune's target starts with none, the "
             "built-in default is 3600 1 300 100 60 10000)"),
        Knob("redis.appendonly", Domain(B), RedisDirective("appendonly", live=True), False,
             "append-only file persistence"),
        Knob("redis.appendfsync", Domain(C, choices=("everysec", "always", "no")),
             RedisDirective("appendfsync", live=True), "everysec", "AOF fsync policy"),
        Knob("redis.jemalloc_bg_thread", Domain(B),
             RedisDirective("jemalloc-bg-thread", live=True), True,
             "jemalloc background purging thread"),
        Knob("redis.disable_thp", Domain(B), RedisDirective("disable-thp"), True,
             "opt the redis process out of THP (matters when thp.enabled is always)"),
    ]


def _kernel() -> list[Knob]:
    return [
        Knob("kernel.sched_autogroup_enabled", Domain(B),
             Sysctl("kernel.sched_autogroup_enabled"), None,
             "group tasks by session (skews CPU sharing between server and load generator)"),
        Knob("kernel.numa_balancing", Domain(C, choices=(0, 1)), Sysctl("kernel.numa_balancing"),
             None, "automatic NUMA balancing (2, memory tiering, is left out)"),
        Knob("kernel.timer_migration", Domain(B), Sysctl("kernel.timer_migration"), None,
             "migrate timers to busy CPUs"),
        Knob("kernel.sched_cfs_bandwidth_slice_us", Domain(I, 1000, 50000, log=True),
             Sysctl("kernel.sched_cfs_bandwidth_slice_us"), None,
             "runtime handed from a cgroup quota to a CPU at a time", "us"),
        Knob("sched.migration_cost_ns", Domain(I, 0, 5_000_000, step=50_000),
             sched_tunable("migration_cost_ns", "sched_migration_cost_ns"), None,
             "cache-hot threshold for load balancing (case study 000's knob)", "ns"),
        Knob("sched.nr_migrate", Domain(I, 1, 128, log=True),
             sched_tunable("nr_migrate", "sched_nr_migrate"), None, "tasks moved per balance"),
        Knob("sched.tunable_scaling", Domain(C, choices=(0, 1, 2)),
             sched_tunable("tunable_scaling", "sched_tunable_scaling"), None,
             "scale the slice/latency tunables with the CPU count: 0 none, 1 log, 2 linear"),
        Knob("sched.latency_ns", Domain(I, 1_000_000, 100_000_000, log=True),
             sched_tunable("latency_ns", "sched_latency_ns", until=EEVDF,
                           note="EEVDF (6.6+) has no scheduling period; see sched.base_slice_ns"),
             None, "CFS targeted preemption latency", "ns"),
        Knob("sched.min_granularity_ns", Domain(I, 100_000, 50_000_000, log=True),
             sched_tunable("min_granularity_ns", "sched_min_granularity_ns", until=EEVDF,
                           note="renamed sched.base_slice_ns on EEVDF (6.6+)"),
             None, "CFS minimal preemption granularity", "ns"),
        Knob("sched.wakeup_granularity_ns", Domain(I, 100_000, 100_000_000, log=True),
             sched_tunable("wakeup_granularity_ns", "sched_wakeup_granularity_ns", until=EEVDF,
                           note="EEVDF (6.6+) decides wake-up preemption by deadline; "
                                "see the sched features RUN_TO_PARITY and PREEMPT_SHORT"),
             None, "CFS wake-up preemption granularity (>= latency/2 turns preemption off)",
             "ns"),
        Knob("sched.base_slice_ns", Domain(I, 100_000, 100_000_000, log=True),
             HostFile([Location("/sys/kernel/debug/sched/base_slice_ns", EEVDF)],
                      note="CFS kernels (< 6.6) use sched.min_granularity_ns instead"),
             None, "EEVDF base time slice (below the tick it has little effect)", "ns"),
        Knob("thp.enabled", Domain(C, choices=("always", "madvise", "never")),
             HostFile([Location(f"{THP}/enabled")], "bracketed"), None,
             "transparent huge pages"),
        Knob("thp.defrag", Domain(C, choices=("always", "defer", "defer+madvise", "madvise",
                                              "never")),
             HostFile([Location(f"{THP}/defrag")], "bracketed"), None,
             "THP defragmentation on fault (always = compaction stalls in the fault path)"),
        Knob("thp.khugepaged_defrag", Domain(B),
             HostFile([Location(f"{THP}/khugepaged/defrag")]), None,
             "khugepaged may compact memory to collapse huge pages"),
    ]


def _vm() -> list[Knob]:
    return [
        Knob("vm.swappiness", Domain(I, 0, 100), Sysctl("vm.swappiness"), None,
             "swap tendency (the kernel takes up to 200 from 5.8; caches want it low)"),
        Knob("vm.zone_reclaim_mode", Domain(C, choices=(0, 1)), Sysctl("vm.zone_reclaim_mode"),
             None, "reclaim on the local NUMA node before allocating remotely"),
        Knob("vm.watermark_scale_factor", Domain(I, 10, 1000, log=True),
             Sysctl("vm.watermark_scale_factor"), None,
             "kswapd headroom against direct reclaim, in 0.01 % of memory"),
        Knob("vm.watermark_boost_factor", Domain(I, 0, 30000, step=500),
             Sysctl("vm.watermark_boost_factor"), None,
             "temporary watermark boost after fragmentation events"),
        Knob("vm.compaction_proactiveness", Domain(I, 0, 100), Sysctl(
            "vm.compaction_proactiveness"), None, "background compaction (latency spikes)"),
        Knob("vm.stat_interval", Domain(I, 1, 10), Sysctl("vm.stat_interval"), None,
             "vmstat timer interval (a jitter source)", "s"),
        Knob("vm.dirty_ratio", Domain(I, 5, 80), Sysctl("vm.dirty_ratio"), None,
             "dirty page cache share that blocks writers (Redis persistence only)", "%"),
        Knob("vm.dirty_background_ratio", Domain(I, 1, 50), Sysctl("vm.dirty_background_ratio"),
             None, "dirty share that starts background writeback (below vm.dirty_ratio)", "%"),
    ]


def _net() -> list[Knob]:
    def s(name: str, domain: Domain, what: str, tags: tuple[str, ...], unit: str = "") -> Knob:
        return Knob(name, domain, Sysctl(name), None, what, unit, tags)

    return [
        s("net.core.somaxconn", Domain(I, 128, 65535, log=True),
          "cap on every listen backlog (memcached -b, redis tcp-backlog)", (PER_NS,)),
        s("net.core.netdev_max_backlog", Domain(I, 100, 100000, log=True),
          "per-CPU input queue (the loopback path goes through it)", (INIT_NS,)),
        s("net.core.netdev_budget", Domain(I, 50, 2000, log=True),
          "packets per NET_RX softirq run (includes the loopback backlog)", (INIT_NS,)),
        s("net.core.netdev_budget_usecs", Domain(I, 8000, 40000, log=True),
          "time limit of one NET_RX softirq run (the kernel refuses less than 2 jiffies: "
          "8000 us at HZ=250, its default)", (INIT_NS,), "us"),
        s("net.core.dev_weight", Domain(I, 16, 1024, log=True),
          "packets per backlog poll (the loopback quantum)", (INIT_NS,)),
        s("net.core.rmem_max", Domain(I, 212992, 67108864, log=True),
          "cap on SO_RCVBUF", (PER_NS,), "bytes"),
        s("net.core.wmem_max", Domain(I, 212992, 67108864, log=True),
          "cap on SO_SNDBUF", (PER_NS,), "bytes"),
        s("net.core.rmem_default", Domain(I, 16384, 4194304, log=True),
          "default receive buffer of non-TCP sockets (TCP uses tcp_rmem)", (PER_NS,), "bytes"),
        s("net.core.wmem_default", Domain(I, 16384, 4194304, log=True),
          "default send buffer of non-TCP sockets (TCP uses tcp_wmem)", (PER_NS,), "bytes"),
        s("net.core.optmem_max", Domain(I, 10240, 1048576, log=True),
          "ancillary data / zerocopy limit per socket", (PER_NS,), "bytes"),
        s("net.core.busy_poll", Domain(I, 0, 200),
          "busy-poll time for poll/select (needs a NIC NAPI id)", (INIT_NS, NO_LO), "us"),
        s("net.core.busy_read", Domain(I, 0, 200),
          "busy-read time for blocking reads (needs a NIC NAPI id)", (INIT_NS, NO_LO), "us"),
        s("net.ipv4.tcp_autocorking", Domain(B),
          "coalesce small writes while the previous one is queued", (PER_NS,)),
        s("net.ipv4.tcp_slow_start_after_idle", Domain(B),
          "restart slow start after an idle period", (PER_NS,)),
        s("net.ipv4.tcp_max_syn_backlog", Domain(I, 128, 65536, log=True),
          "half-open connection queue", (PER_NS,)),
        s("net.ipv4.tcp_fin_timeout", Domain(I, 5, 120),
          "FIN_WAIT_2 lifetime (connection churn only)", (PER_NS,), "s"),
        s("net.ipv4.tcp_tw_reuse", Domain(C, choices=(0, 1, 2)),
          "reuse TIME_WAIT sockets for new outgoing connections (2 = loopback only)", (PER_NS,)),
        s("net.ipv4.tcp_keepalive_time", Domain(I, 60, 36000, log=True),
          "idle time before keepalive probes", (PER_NS, "idle-only"), "s"),
        s("net.ipv4.tcp_keepalive_intvl", Domain(I, 5, 300, log=True),
          "interval between keepalive probes", (PER_NS, "idle-only"), "s"),
        s("net.ipv4.tcp_keepalive_probes", Domain(I, 1, 127),
          "keepalive probes before dropping (the kernel refuses > 127)", (PER_NS, "idle-only")),
        s("net.ipv4.tcp_thin_linear_timeouts", Domain(B),
          "linear retransmit timeouts for thin streams (no retransmits on lo)", (PER_NS, NO_LO)),
        s("net.unix.max_dgram_qlen", Domain(I, 10, 1048576, log=True),
          "unix datagram queue (no effect on TCP servers)", (PER_NS, NO_LO)),
    ]


# Knobs of the A-Tune study and of blog posts that kvtune leaves out on purpose.
EXCLUDED: dict[str, str] = {
    "net.mtu": "an interface setting, not a sysctl; a wrong MTU cuts the host off the network",
    "net.ipv4.tcp_window_scaling": "turning it off caps every TCP window at 64 KB for new "
                                   "connections host-wide, including the ssh session",
    "net.generic-receive-offload": "an ethtool feature of a NIC, not a sysctl; lo has none "
                                   "worth tuning",
    "net.generic-segmentation-offload": "an ethtool feature of a NIC, not a sysctl",
    "net.tcp-segmentation-offload": "an ethtool feature of a NIC, not a sysctl",
    "net.ipv4.tcp_low_latency": "does nothing since Linux 4.14",
    "net.ipv4.tcp_adv_win_scale": "obsolete since Linux 6.6",
    "kernel.sched_child_runs_first": "removed in 6.12; no effect on a long-running server",
    "vm.overcommit_memory": "host-wide memory accounting for every process (1: the OOM "
                            "killer decides, 2: running services fail their allocations); "
                            "on kvtune's deny-list, and a measured server runs without "
                            "snapshots, the case for 1",
}

# Names used in the case studies and in older tools, mapped to the catalog's knob. Whether
# the knob exists on this host (and why not) is the catalog knob's availability.
ALIASES: dict[str, str] = {
    **{f"{prefix}sched_{n}": f"sched.{n}"
       for prefix in ("kernel.", "")
       for n in ("migration_cost_ns", "wakeup_granularity_ns", "latency_ns",
                 "min_granularity_ns", "nr_migrate", "tunable_scaling", "base_slice_ns")},
    "transparent_hugepage": "thp.enabled",
    "transparent_hugepages": "thp.enabled",
}


def _placement() -> list[Knob]:
    cpus = host_cpus()
    choices = cpu_list_choices(cpus)
    return [
        Knob("placement.cpu_quota_pct",
             Domain(I, 10, 100 * len(cpus), step=10, special=(-1,)), CpuQuota(), -1,
             "server CFS quota in % of one CPU (-1 = unlimited)", "%"),
        Knob("placement.cpu_period_us", Domain(I, 1000, 1_000_000, log=True), CpuPeriod(),
             100_000, "CFS bandwidth period of the server's cgroup", "us"),
        Knob("placement.cpuset", Domain(C, choices=choices), CpusetCpus(), None,
             "server cpuset (cgroup kvtune creates and removes)"),
        Knob("placement.server_cpus", Domain(C, choices=choices), ServerCpus(), None,
             "CPUs the server is pinned to"),
    ]


def _server_sched() -> list[Knob]:
    """Per-process scheduler settings of the server, applied at exec (host/sched.py);
    plus the scheduler's features where they can be written (debugfs mounted, or mountable
    for the study)."""
    knobs = [
        Knob("sched.server_policy", Domain(C, choices=("other", "batch")), SchedPolicy(),
             "other", "the server's policy: batch (SCHED_BATCH) never preempts on wake-up, "
             "the per-process form of a large sched_wakeup_granularity_ns"),
        Knob("sched.server_nice", Domain(I, -20, 19), SchedNice(), 0,
             "the server's nice (its weight against the load generator and the host)"),
        Knob("sched.server_slice_ns", Domain(I, SLICE_MIN_NS, SLICE_MAX_NS, log=True,
                                             special=(0,)),
             SchedSlice(), 0, "the server's EEVDF time slice (sched_setattr sched_runtime, "
             "Linux >= 6.12; 0 = the kernel's default, base_slice_ns scaled by CPU count); "
             "the per-task form of base_slice_ns / sched_min_granularity_ns", "ns"),
    ]
    st = debugfs_status()  # mounted now, or probed in a private mount namespace
    if st.features_writable:  # a study with one of them mounts debugfs (Session.setup_host)
        for f in st.features:
            name = f.removeprefix("NO_")
            knobs.append(Knob(f"sched.feature.{name}", Domain(B), SchedFeature(name), None,
                              f"scheduler feature {name} (debugfs sched/features)"))
    return knobs


def _idle() -> list[Knob]:
    """The idle path (knobs/appliers/idle.py): PM QoS, guest halt-polling, cpuidle states
    and governor. The states and governors offered are the host's own, read from sysfs."""
    from kvtune.knobs.appliers import idle

    states = tuple(idle.state_names()) or ("POLL",)
    govs = idle.governors() or ("menu",)
    return [
        Knob("cpu.idle_max_latency_us", Domain(I, 1, 1000, log=True,
                                               special=(0, idle.NO_REQUEST)),
             idle.PmQosLatency(), None,
             "PM QoS CPU latency request (/dev/cpu_dma_latency, held open; TuneD's "
             f"force_latency): 0 keeps CPUs polling, {idle.NO_REQUEST} is no request",
             "us"),
        Knob("cpu.halt_poll_ns", Domain(I, 10_000, 2_000_000, log=True, special=(0,)),
             idle.haltpoll_param("guest_halt_poll_ns"), None,
             "guest halt-polling: how long a vCPU polls before it halts (haltpoll driver)",
             "ns"),
        Knob("cpu.halt_poll_grow", Domain(I, 1, 10), idle.haltpoll_param("guest_halt_poll_grow"),
             None, "guest halt-polling: the poll time's growth factor on a wake-up in time"),
        Knob("cpu.halt_poll_shrink", Domain(I, 0, 10),
             idle.haltpoll_param("guest_halt_poll_shrink"), None,
             "guest halt-polling: the poll time's shrink divisor (0: reset)"),
        Knob("cpu.halt_poll_allow_shrink", Domain(B),
             idle.haltpoll_param("guest_halt_poll_allow_shrink", "yn"), None,
             "guest halt-polling: the poll time may shrink after a wake-up too late"),
        Knob("cpu.idle_disable", Domain(C, choices=("none", *states[1:])),
             idle.CpuidleDisable(), None,
             "this cpuidle state and every deeper one disabled on the study's CPUs (by the "
             "state's name; none: every state enabled)"),
        Knob("cpu.idle_governor", Domain(C, choices=govs),
             HostFile([Location(f"{idle.CPUIDLE}/current_governor")],
                      note="this kernel does not let the cpuidle governor be switched"),
             None, "the cpuidle governor"),
    ]


def all_knobs() -> list[Knob]:
    return (_mc() + _redis() + _kernel() + _vm() + _net() + _placement() + _server_sched()
            + _idle())


# The scheduler knobs of the case studies (000, 002, 003), and what does their job on a
# kernel where they are gone (EEVDF, 6.6+) or cannot be written (debugfs under lockdown).
EQUIVALENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "sched.migration_cost_ns": (
        ("placement.server_cpus", "placement.cpuset"),
        "keeps tasks cache-hot against load balancing; without debugfs, pinning the server "
        "(placement.server_cpus or a cpuset) stops the migrations it tunes"),
    "sched.wakeup_granularity_ns": (
        ("sched.server_policy",),
        "a large value stops wake-up preemption (case study 002); sched.server_policy=batch "
        "does that per process on every kernel"),
    "sched.latency_ns": (
        ("sched.server_slice_ns", "sched.server_policy"),
        "the CFS period is gone under EEVDF; the server's own slice (and batch) set how "
        "long it runs before another task may take the CPU"),
    "sched.min_granularity_ns": (
        ("sched.server_slice_ns",),
        "became base_slice_ns under EEVDF; sched.server_slice_ns is its per-task form "
        "(Linux >= 6.12)"),
    "sched.base_slice_ns": (
        ("sched.server_slice_ns",),
        "debugfs; sched.server_slice_ns sets the server's slice without it"),
    "kernel.sched_autogroup_enabled": (
        ("sched.server_nice",),
        "autogroup weighs sessions, not processes; the server's nice sets its weight directly"),
}


def equivalent(name: str, ctx: HostContext) -> str:
    """For a case-study scheduler knob: which working equivalent exists on this host, for
    people ("" when `name` has no entry)."""
    entry = EQUIVALENTS.get(canonical(name))
    if entry is None:
        return ""
    names, why = entry
    ok = [n for n in names if n in CATALOG and CATALOG[n].applier.check(ctx).ok]
    if not ok:
        return f"no working equivalent here ({why})"
    return f"use {' / '.join(ok)}: {why}"


def sched_features_note() -> str:
    """Whether the scheduler's features are offered as knobs here, and why not."""
    ok, reason = features_status()
    if ok:
        return "sched features: offered as sched.feature.<NAME> knobs"
    return f"sched features (RUN_TO_PARITY, PREEMPT_SHORT, ...): not offered: {reason}"


CATALOG: dict[str, Knob] = {k.name: k for k in all_knobs()}


def register(*knobs: Knob) -> None:
    """Add knobs to the catalog: how a knob family outside this module (an applier module
    and its knobs) becomes known to studies, `kvtune knobs`, rules and export. Raises
    ValueError for a name the catalog already has."""
    for k in knobs:
        if k.name in CATALOG or k.name in ALIASES:
            raise ValueError(f"knob {k.name!r} is already in the catalog")
    CATALOG.update({k.name: k for k in knobs})


# -- presets -------------------------------------------------------------------------------

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
_PRESET_DEFS: dict[str, tuple[list[str], dict[str, Domain], bool]] = {
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
    "redis-throughput": (
        ["redis.io_threads", "redis.io_threads_do_reads", "redis.hz", "redis.dynamic_hz",
         "redis.jemalloc_bg_thread", "redis.disable_thp", "redis.lazyfree_lazy_eviction",
         "redis.activedefrag", "thp.enabled", "thp.defrag", "kernel.sched_autogroup_enabled",
         "sched.migration_cost_ns", "sched.wakeup_granularity_ns", "sched.latency_ns",
         "sched.base_slice_ns", "net.ipv4.tcp_autocorking"],
        {}, True),
    "placement": (
        ["placement.cpu_quota_pct", "placement.cpu_period_us", "placement.cpuset",
         "placement.server_cpus", "memcached.threads", "redis.io_threads"],
        {}, True),
}

PRESET_NAMES: tuple[str, ...] = tuple(_PRESET_DEFS)


def apply_preset(preset: str, knob: Knob) -> Knob:
    """`knob` with the range `preset` gives it (A-Tune's for memcached-app), else as it is.
    The one place a preset's ranges are applied."""
    domain = _PRESET_DEFS[preset][1].get(knob.name)
    return knob if domain is None else replace(knob, domain=domain)


def preset_names(name: str, ctx: HostContext, available_only: bool = True) -> list[str]:
    """The knobs of preset `name`; for the host-dependent presets only those available on
    the host of `ctx` (unless `available_only` is false)."""
    names, _, host_dependent = _PRESET_DEFS[name]
    if not host_dependent or not available_only:
        return list(names)
    return [n for n in names if CATALOG[n].applier.check(ctx).ok]


def preset_knobs(name: str, ctx: HostContext) -> list[Knob]:
    """The knobs of a preset with the preset's ranges."""
    return [apply_preset(name, CATALOG[n]) for n in preset_names(name, ctx)]


# -- lookup --------------------------------------------------------------------------------


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def lookup(name: str) -> Knob | None:
    return CATALOG.get(canonical(name))


def check_rules(config: dict[str, Any], ctx: HostContext,
                relax: Iterable[str] = ()) -> str | None:
    """The first rule between catalog knobs that `config` breaks, as a sentence, or None.
    A knob the configuration leaves out reads as its baseline value."""
    found = broken(Values(config, ctx, lookup), relax)
    return f"{found[0].message} (rule {found[0].name})" if found else None


def broken_rules(config: dict[str, Any], ctx: HostContext) -> list[str]:
    """The names of every rule `config` breaks."""
    return [r.name for r in broken(Values(config, ctx, lookup))]


def for_target(target: str | None) -> Iterable[Knob]:
    for k in CATALOG.values():
        if target is None or k.target in (None, target):
            yield k
