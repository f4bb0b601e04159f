"""A valkey.conf include with the configuration that was measured (the Redis exporter with
Valkey's names and built-in defaults)."""

from __future__ import annotations

from kvtune.kinds.redis.export import SERVER_DEFAULTS, RedisExporter


class ValkeyExporter(RedisExporter):
    name = "valkey"
    label = "Valkey"
    server = "valkey-server"
    conf = "valkey.conf"
    etc = "/etc/valkey"
    defaults = SERVER_DEFAULTS  # Valkey 8's built-in save schedule is Redis 7's
    help = "a valkey.conf include (rollback: the previous values or Valkey's defaults)"
