"""valkey-server: Redis's directives as `--name value` arguments (and Valkey 8's own), INFO
over RESP; the Redis target with Valkey's names."""

from __future__ import annotations

from typing import ClassVar

from kvtune.kinds.redis.target import RedisTarget

_INT = r"[0-9]{1,12}"


class ValkeyTarget(RedisTarget):
    kind = "valkey"
    label = "Valkey"
    default_binary = "valkey-server"
    version_banner = r"^Valkey server v=\d+\.\d+"

    # Redis's safe directives, and Valkey 8's that change how it serves (never where it
    # listens or what it reads or writes: server-cpulist and bio-cpulist pin its threads,
    # which placement.server_cpus does for every kind, so they are not passed).
    SAFE_DIRECTIVES: ClassVar[dict[str, str]] = {
        **RedisTarget.SAFE_DIRECTIVES,
        **dict.fromkeys(("events-per-io-thread", "prefetch-batch-max-size",
                         "max-new-connections-per-cycle"), _INT),
    }
    UNSAFE_DIRECTIVES: ClassVar[dict[str, str]] = {
        **RedisTarget.UNSAFE_DIRECTIVES,
        **dict.fromkeys(("primaryauth", "primaryuser"),
                        "makes the server connect to another server"),
        **dict.fromkeys(("server-cpulist", "bio-cpulist", "aof-rewrite-cpulist",
                         "bgsave-cpulist"),
                        "pins the server's threads (kvtune places the server itself: "
                        "placement.server_cpus, target.cpus)"),
        "unixsocketgroup": "changes where the server listens (kvtune binds it to "
                           "target.host and target.port)",
    }
