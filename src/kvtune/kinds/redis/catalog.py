"""Redis's knobs: `redis.*`, its configuration directives."""

from __future__ import annotations

from kvtune.kinds.redis.appliers import RedisDirective
from kvtune.knobs.domain import B, C, Domain, I
from kvtune.knobs.knob import Knob


def knobs() -> list[Knob]:
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


# Preset name → (knob names, domain overrides, keep only what is available on this host).
PRESETS: dict[str, tuple[list[str], dict[str, Domain], bool]] = {
    "redis-throughput": (
        ["redis.io_threads", "redis.io_threads_do_reads", "redis.hz", "redis.dynamic_hz",
         "redis.jemalloc_bg_thread", "redis.disable_thp", "redis.lazyfree_lazy_eviction",
         "redis.activedefrag", "thp.enabled", "thp.defrag", "kernel.sched_autogroup_enabled",
         "sched.migration_cost_ns", "sched.wakeup_granularity_ns", "sched.latency_ns",
         "sched.base_slice_ns", "net.ipv4.tcp_autocorking"],
        {}, True),
}
