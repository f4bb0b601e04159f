"""Reading a valkey.conf: Redis's directives and Valkey 8's own, its includes inside the
configuration's tree or /etc/valkey."""

from __future__ import annotations

from typing import ClassVar

from kvtune.kinds.redis.config import REDIS_DIRECTIVES, REDIS_REPLACED, Reader

# Directives Valkey 8.0 adds to Redis 7's (CONFIG GET * of valkey-server 8.0.1).
VALKEY_DIRECTIVES = REDIS_DIRECTIVES | frozenset((
    "aof-rewrite-cpulist", "availability-zone", "bgsave-cpulist", "bio-cpulist",
    "cluster-announce-client-ipv4", "cluster-announce-client-ipv6", "cluster-blacklist-ttl",
    "cluster-slot-stats-enabled", "dual-channel-replication-enabled",
    "events-per-io-thread", "extended-redis-compatibility", "hide-user-data-from-log",
    "locale-collate", "max-new-connections-per-cycle", "max-new-tls-connections-per-cycle",
    "prefetch-batch-max-size", "primaryauth", "primaryuser", "server-cpulist",
    "set-max-listpack-entries", "set-max-listpack-value", "unixsocketgroup",
))


class ValkeyReader(Reader):
    label = "Valkey"
    conf = "valkey.conf"
    include_roots = ("/etc/valkey", "/etc/valkey-*", "/usr/share/valkey")
    directives = VALKEY_DIRECTIVES
    replaced: ClassVar[dict[str, str]] = {
        **REDIS_REPLACED,
        **dict.fromkeys(("server-cpulist", "bio-cpulist", "aof-rewrite-cpulist",
                         "bgsave-cpulist"), "kvtune places the server itself "
                        "(placement.server_cpus, target.cpus)"),
        "unixsocketgroup": "kvtune serves over TCP",
    }


READER = ValkeyReader()
