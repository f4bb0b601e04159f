"""Redis: its target (directives as `--name value`), catalog, INFO client and digest,
export (a redis.conf include), peer load tool (redis-benchmark)."""

from __future__ import annotations

from kvtune.kind_registry import load as _load  # (the package has a submodule `load`)
from kvtune.kinds.base import Kind
from kvtune.kinds.redis.telemetry import digest, phase_row, redis_sample

KIND = Kind(
    name="redis", label="Redis", target="kvtune.kinds.redis.target:RedisTarget",
    knobs=lambda: _load("kvtune.kinds.redis.catalog:knobs")(),
    metric_prefix="redis_", stats_label="Redis INFO",
    digest=digest, sample=redis_sample, phase_row=phase_row,
    comm=("redis-server",), service_users=("redis",), default_port=6379,
    systemd_unit="redis-server.service",
    exporters=lambda: [_load("kvtune.kinds.redis.export:RedisExporter")()],
    rules=lambda: _load("kvtune.kinds.redis.rules:rules")(),
    presets=lambda: _load("kvtune.kinds.redis.catalog:PRESETS"),
    load_drivers=lambda: [_load("kvtune.kinds.redis.load:RedisBenchmarkDriver")],
    thread_knob="redis.io_threads",
    inline={"redis_directive": "kvtune.kinds.redis.appliers:RedisDirective"},
    export_family="redis", config_reader="kvtune.kinds.redis.config:READER",
    capture="kvtune.kinds.redis.capture:CAPTURER",
    canary="kvtune.kinds.redis.canary:READER",
    init="kvtune.kinds.redis.init:INIT",
    mrc="kvtune.kinds.redis.mrc:MODEL",
)
