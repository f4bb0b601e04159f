"""Valkey 8: the Redis fork that reads redis.conf's directives and speaks RESP. Its target,
catalog, stats, export, config reader and verify build on the Redis kind's, with Valkey's
own names, defaults and 8.0's I/O threading."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtune.kinds.base import Kind
from kvtune.kinds.redis.telemetry import digest_for, phase_row, redis_sample

if TYPE_CHECKING:
    from kvtune.export.base import Exporter
    from kvtune.knobs.domain import Domain
    from kvtune.knobs.knob import Knob
    from kvtune.knobs.rule import Rule


def _knobs() -> list[Knob]:
    from kvtune.kinds.valkey.catalog import knobs

    return knobs()


def _exporters() -> list[Exporter]:
    from kvtune.kinds.valkey.export import ValkeyExporter

    return [ValkeyExporter()]


def _rules() -> list[Rule]:
    from kvtune.kinds.redis.rules import rules

    return rules("valkey")


def _presets() -> dict[str, tuple[list[str], dict[str, Domain], bool]]:
    from kvtune.kinds.valkey.catalog import PRESETS

    return PRESETS


KIND = Kind(
    name="valkey", label="Valkey", target="kvtune.kinds.valkey.target:ValkeyTarget",
    knobs=_knobs, metric_prefix="valkey_", stats_label="Valkey INFO",
    # Valkey keeps redis_version at 7.2.4 for clients and says its own in valkey_version.
    digest=digest_for("valkey_", "valkey_version"), sample=redis_sample,
    phase_row=phase_row,
    comm=("valkey-server",), service_users=("valkey",), default_port=6379,
    systemd_unit="valkey-server.service", exporters=_exporters, rules=_rules, presets=_presets,
    thread_knob="valkey.io_threads", export_family="valkey",
    config_reader="kvtune.kinds.valkey.config:READER",
    inline={"valkey_directive": "kvtune.kinds.valkey.appliers:ValkeyDirective"},
    capture="kvtune.kinds.valkey.capture:CAPTURER",
)
