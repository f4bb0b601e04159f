"""What one server kind tells the generic layers about itself: a `Kind`, built in its folder
(`kinds/<kind>/__init__.py`) and found through the registry (`kvtune.kinds`).

The generic layers (targets, knobs, telemetry, export, verify, report, load) ask a kind for
its parts and name none: a new kind is its folder plus one registry line.

The parts of the layers that ask the registry (an exporter, a load driver, a verify check,
the sampler's connection) are typed where they are asked for, not here: this module names
no layer above the registry, even for its annotations (farm-studio draws no circle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtune.knobs.domain import Domain
    from kvtune.knobs.knob import Knob
    from kvtune.knobs.rule import Rule

# A digest of the target's stats(): flat metrics (prefixed) and a raw digest for the record.
Digest = Callable[[dict[str, Any]], tuple[dict[str, float], dict[str, Any]]]


@dataclass(frozen=True)
class Kind:
    """One server kind. `target` is "module:Class" (imported on first use); the callables
    are called when a layer asks, so naming a kind imports none of its parts."""

    name: str                      # the study's target.kind
    label: str                     # for people: "memcached", "Redis", "Valkey"
    target: str                    # "module:Class" of its Target
    # knobs: the catalog entries `<family>.<name>` of this kind (application knobs)
    knobs: Callable[[], list[Knob]]
    metric_prefix: str             # its telemetry metrics' prefix ("mc_", "redis_")
    stats_label: str               # the report's name for those ("memcached stats")
    digest: Digest                 # stats() -> (metrics, raw digest)
    sample: Callable[[Any], dict[str, Any]]  # the sampler's one request (a StatsConn)
    comm: tuple[str, ...]          # process names of a running server (verify)
    service_users: tuple[str, ...]  # packaged service accounts (verify)
    default_port: int
    systemd_unit: str              # its packaged unit (the systemd drop-in's target)
    exporters: Callable[[], list[Any]] = field(default=lambda: [])  # its Exporters
    rules: Callable[[], list[Rule]] = field(default=lambda: [])  # between its knobs
    # its presets: name -> (knob names, domain overrides, only those available here)
    presets: Callable[[], dict[str, tuple[list[str], dict[str, Domain], bool]]] = field(
        default=lambda: {})
    load_drivers: Callable[[], list[type[Any]]] = field(default=lambda: [])  # LoadDrivers
    thread_knob: str | None = None  # the knob that sets its worker threads (exports)
    # the inline knob fields of a study file this kind owns ("memcached_flag": "module:Class")
    inline: dict[str, str] = field(default_factory=dict)
    # the per-slab-class table of its stats() (the report draws pages per class), or None
    slab_table: Callable[[dict[str, Any]], list[dict[str, float]]] | None = None
    # a phase's row of the stats sampled over time (telemetry/sampler.py, phase_table)
    phase_row: Callable[[dict[str, Any], dict[str, Any] | None,
                         Callable[[str], float | None]], dict[str, Any]] | None = None
    # the export format name that takes its application settings ("memcached", "redis")
    export_family: str | None = None
    # kvtune verify: the recommended settings read back from a running server's command
    # line (for the export families in argv_families), and the user its argv drops to
    argv_checks: Callable[[Any, list[str]], list[Any]] | None = None  # -> verify Checks
    argv_families: tuple[str, ...] = ()
    argv_user: Callable[[list[str]], str | None] | None = None
    # "module:READER" of its configuration file reader (kinds/<kind>/config.py): target.config
    # and export --from
    config_reader: str | None = None
    # "module:CAPTURER" of its traffic capture (kinds/<kind>/capture.py), None: no capture
    capture: str | None = None
    # "module:READER" of what `kvtune canary` reads from a running server and how it rolls
    # a setting back live (kinds/<kind>/canary.py), None: the kind has no canary
    canary: str | None = None
    # "module:INIT" of what `kvtune init` needs of the kind (kinds/<kind>/init.py): where
    # its packaged config lives, its config from a running server, the knobs a first
    # study searches; None: `kvtune init` does not write studies of this kind
    init: str | None = None
    # "module:MODEL" of how it holds items in memory (kinds/<kind>/mrc.py: a
    # kvtune.mrc.model.MemoryModel): `kvtune workload mrc`; None: no miss-ratio curve
    mrc: str | None = None
