"""Redis: its target (directives as `--name value`), catalog, INFO client and digest,
export (a redis.conf include), peer load tool (redis-benchmark)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtune.kinds.base import Kind
from kvtune.kinds.redis.telemetry import digest, phase_row, redis_sample

if TYPE_CHECKING:
    from kvtune.export.base import Exporter
    from kvtune.knobs.domain import Domain
    from kvtune.knobs.knob import Knob
    from kvtune.knobs.rule import Rule
    from kvtune.load.base import LoadDriver


def _knobs() -> list[Knob]:
    from kvtune.kinds.redis.catalog import knobs

    return knobs()


def _exporters() -> list[Exporter]:
    from kvtune.kinds.redis.export import RedisExporter

    return [RedisExporter()]


def _load_drivers() -> list[type[LoadDriver]]:
    from kvtune.kinds.redis.load import RedisBenchmarkDriver

    return [RedisBenchmarkDriver]


def _rules() -> list[Rule]:
    from kvtune.kinds.redis.rules import rules

    return rules()


def _presets() -> dict[str, tuple[list[str], dict[str, Domain], bool]]:
    from kvtune.kinds.redis.catalog import PRESETS

    return PRESETS


KIND = Kind(
    name="redis", label="Redis", target="kvtune.kinds.redis.target:RedisTarget",
    knobs=_knobs, metric_prefix="redis_", stats_label="Redis INFO",
    digest=digest, sample=redis_sample, phase_row=phase_row,
    comm=("redis-server",), service_users=("redis",), default_port=6379,
    systemd_unit="redis-server.service",
    exporters=_exporters, rules=_rules, presets=_presets, load_drivers=_load_drivers,
    thread_knob="redis.io_threads",
    inline={"redis_directive": "kvtune.kinds.redis.appliers:RedisDirective"},
    export_family="redis", config_reader="kvtune.kinds.redis.config:READER",
    capture="kvtune.kinds.redis.capture:CAPTURER",
)
