"""What `kvtune init` needs of Valkey: Redis's part with Valkey's file and names."""

from __future__ import annotations

from kvtune.kinds.redis.init import Init


class ValkeyInit(Init):
    config_paths = ("/etc/valkey/valkey.conf",)
    prefix = "valkey"
    scheme = "valkey"


INIT = ValkeyInit()
