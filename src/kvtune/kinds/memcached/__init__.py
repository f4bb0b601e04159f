"""memcached: its target (flags and `-o` options), catalog, stats client and digest, export
(Debian's memcached.conf), peer load tool (memaslap)."""

from __future__ import annotations

from kvtune.kind_registry import load as _load  # (the package has a submodule `load`)
from kvtune.kinds.base import Kind
from kvtune.kinds.memcached.telemetry import digest, memcached_sample, phase_row, slab_table

KIND = Kind(
    name="memcached", label="memcached",
    target="kvtune.kinds.memcached.target:MemcachedTarget",
    knobs=lambda: _load("kvtune.kinds.memcached.catalog:knobs")(),
    metric_prefix="mc_", stats_label="memcached stats",
    digest=digest, sample=memcached_sample,
    comm=("memcached",), service_users=("memcache", "memcached"), default_port=11211,
    systemd_unit="memcached.service",
    exporters=lambda: [_load("kvtune.kinds.memcached.export:MemcachedExporter")()],
    rules=lambda: _load("kvtune.kinds.memcached.rules:rules")(),
    presets=lambda: _load("kvtune.kinds.memcached.catalog:PRESETS"),
    load_drivers=lambda: [_load("kvtune.kinds.memcached.load:MemaslapDriver")],
    thread_knob="memcached.threads",
    inline={"memcached_flag": "kvtune.kinds.memcached.appliers:MemcachedFlag",
            "memcached_option": "kvtune.kinds.memcached.appliers:MemcachedOption"},
    slab_table=slab_table, phase_row=phase_row, export_family="memcached",
    argv_checks=lambda rec, argv: _load("kvtune.kinds.memcached.verify:argv_checks")(
        rec, argv),
    argv_families=("memcached-flag", "memcached-option"),
    argv_user=lambda argv: _load("kvtune.kinds.memcached.verify:argv_user")(argv),
    config_reader="kvtune.kinds.memcached.config:READER",
    capture="kvtune.kinds.memcached.capture:CAPTURER",
    canary="kvtune.kinds.memcached.canary:READER",
    init="kvtune.kinds.memcached.init:INIT",
    mrc="kvtune.kinds.memcached.mrc:MODEL",
)
