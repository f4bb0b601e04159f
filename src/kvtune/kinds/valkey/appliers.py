"""Valkey's configuration directives: Redis's applier with Valkey's names (its version,
binary and export format)."""

from __future__ import annotations

from kvtune.kinds.redis.appliers import RedisDirective


class ValkeyDirective(RedisDirective):
    target = "valkey"
    server = "valkey-server"
    family = "valkey"
