"""Valkey 8: the Redis fork that reads redis.conf's directives and speaks RESP. Its target,
catalog, stats, export, config reader and verify build on the Redis kind's, with Valkey's
own names, defaults and 8.0's I/O threading."""

from __future__ import annotations

from kvtune.kind_registry import load as _load  # (the package has a submodule `load`)
from kvtune.kinds.base import Kind
from kvtune.kinds.redis.telemetry import digest_for, phase_row, redis_sample

KIND = Kind(
    name="valkey", label="Valkey", target="kvtune.kinds.valkey.target:ValkeyTarget",
    knobs=lambda: _load("kvtune.kinds.valkey.catalog:knobs")(),
    metric_prefix="valkey_", stats_label="Valkey INFO",
    # Valkey keeps redis_version at 7.2.4 for clients and says its own in valkey_version.
    digest=digest_for("valkey_", "valkey_version"), sample=redis_sample,
    phase_row=phase_row,
    comm=("valkey-server",), service_users=("valkey",), default_port=6379,
    systemd_unit="valkey-server.service",
    exporters=lambda: [_load("kvtune.kinds.valkey.export:ValkeyExporter")()],
    rules=lambda: _load("kvtune.kinds.redis.rules:rules")("valkey"),
    presets=lambda: _load("kvtune.kinds.valkey.catalog:PRESETS"),
    thread_knob="valkey.io_threads", export_family="valkey",
    config_reader="kvtune.kinds.valkey.config:READER",
    inline={"valkey_directive": "kvtune.kinds.valkey.appliers:ValkeyDirective"},
    capture="kvtune.kinds.valkey.capture:CAPTURER",
    canary="kvtune.kinds.redis.canary:READER",
    init="kvtune.kinds.valkey.init:INIT",
    mrc="kvtune.kinds.valkey.mrc:MODEL",
)
