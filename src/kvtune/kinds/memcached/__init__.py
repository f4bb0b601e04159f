"""memcached: its target (flags and `-o` options), catalog, stats client and digest, export
(Debian's memcached.conf), peer load tool (memaslap)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtune.kinds.base import Kind
from kvtune.kinds.memcached.telemetry import digest, memcached_sample, phase_row, slab_table

if TYPE_CHECKING:
    from kvtune.export.base import Exporter, Recommendation
    from kvtune.knobs.domain import Domain
    from kvtune.knobs.knob import Knob
    from kvtune.knobs.rule import Rule
    from kvtune.load.base import LoadDriver
    from kvtune.verify import Check


def _knobs() -> list[Knob]:
    from kvtune.kinds.memcached.catalog import knobs

    return knobs()


def _exporters() -> list[Exporter]:
    from kvtune.kinds.memcached.export import MemcachedExporter

    return [MemcachedExporter()]


def _load_drivers() -> list[type[LoadDriver]]:
    from kvtune.kinds.memcached.load import MemaslapDriver

    return [MemaslapDriver]


def _argv_checks(rec: Recommendation, argv: list[str]) -> list[Check]:
    from kvtune.kinds.memcached.verify import argv_checks

    return argv_checks(rec, argv)


def _argv_user(argv: list[str]) -> str | None:
    from kvtune.kinds.memcached.verify import argv_user

    return argv_user(argv)


def _rules() -> list[Rule]:
    from kvtune.kinds.memcached.rules import rules

    return rules()


def _presets() -> dict[str, tuple[list[str], dict[str, Domain], bool]]:
    from kvtune.kinds.memcached.catalog import PRESETS

    return PRESETS


KIND = Kind(
    name="memcached", label="memcached",
    target="kvtune.kinds.memcached.target:MemcachedTarget",
    knobs=_knobs, metric_prefix="mc_", stats_label="memcached stats",
    digest=digest, sample=memcached_sample,
    comm=("memcached",), service_users=("memcache", "memcached"), default_port=11211,
    systemd_unit="memcached.service",
    exporters=_exporters, rules=_rules, presets=_presets, load_drivers=_load_drivers,
    thread_knob="memcached.threads",
    inline={"memcached_flag": "kvtune.kinds.memcached.appliers:MemcachedFlag",
            "memcached_option": "kvtune.kinds.memcached.appliers:MemcachedOption"},
    slab_table=slab_table, phase_row=phase_row, export_family="memcached",
    argv_checks=_argv_checks, argv_families=("memcached-flag", "memcached-option"),
    argv_user=_argv_user, config_reader="kvtune.kinds.memcached.config:READER",
    capture="kvtune.kinds.memcached.capture:CAPTURER",
)
