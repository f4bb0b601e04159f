"""The one extension point for exports: an `Exporter` turns a study's measured
configuration into ready-to-use files.

What is exported is the configuration that was measured, whole: the target's fixed server
arguments (`target.args`), its placement (`target.cpus` pinning, the placement knobs) and
every knob the recommendation changes from the baseline. Every file's header names the
study, the workload it was tuned for, the confirmed gain with its CI and the kvtune version.

Rollbacks restore the state before the export, never kvtune's benchmark baseline. They are
written under `rollback/` (and, where a consumer reads a directory, with a suffix it
ignores), so copying a recommendation's folder never installs a rollback. A drop-in's
rollback is its removal; a server's is its own defaults or the host's previous
configuration file (`kvtune export --from FILE`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import ExportEntry, HostContext
from kvtune.knobs.baseline import baseline_value
from kvtune.knobs.domain import Value
from kvtune.knobs.knob import Knob

ROLLBACK_DIR = "rollback"


def thread_knobs() -> tuple[str, ...]:
    """Knobs whose best value depends on the CPUs the server had when it was measured: each
    server kind's thread count."""
    from kvtune import kind_registry as kinds

    return tuple(k.thread_knob for k in kinds.every() if k.thread_knob)


def placement_conditions(spec: Mapping[str, Any], config: Mapping[str, Any],
                         baseline: Mapping[str, Any]) -> list[str]:
    """The conditions a configuration was measured under that production must share, one
    sentence each: a thread count chosen for the CPUs the server was pinned to, a CPU quota.
    [] when the recommendation does not depend on its placement."""
    from kvtune.cpulist import parse_cpus

    target = spec.get("target") or {}
    cpus = config.get("placement.server_cpus") or config.get("placement.cpuset") \
        or target.get("cpus")
    out = []
    for name in thread_knobs():
        if name in config and config[name] != baseline.get(name) and cpus:
            try:
                n = len(parse_cpus(str(cpus)))
            except ValueError:
                continue
            out.append(f"{name} = {config[name]} was measured with the server on CPUs {cpus} "
                       f"({n} CPU{'s' if n != 1 else ''}): it depends on that placement; "
                       "install the systemd drop-in (CPUAffinity) with it, or tune again on "
                       "the production server's CPUs")
    quota = config.get("placement.cpu_quota_pct")
    if isinstance(quota, int | float) and quota >= 0:
        out.append(f"measured under a CPU quota of {quota:g}% of one CPU: the gain depends on "
                   "it; the systemd drop-in sets CPUQuota")
    return out


def _host_context() -> HostContext:
    from kvtune.targets import host_context

    return host_context()


@dataclass(frozen=True)
class ExportFile:
    """One file (path relative to the export directory) and its rollback (under
    `rollback/`; None when the consumer has its own way back, as TuneD has)."""

    path: str
    text: str
    rollback_path: str | None
    rollback_text: str | None
    install: str  # how a person installs it (and rolls it back), one line
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    """A knob of the recommendation: its export entry for the recommended value and for the
    baseline value (None when the applier emits nothing for that value)."""

    knob: Knob
    entry: ExportEntry | None
    rollback: ExportEntry | None


@dataclass
class Recommendation:
    """What a study recommends, the baseline it was compared with, and what the export
    needs to say how it was measured."""

    study: str
    target: str | None  # a target kind ("memcached", "redis", ...) or None when unknown
    config: dict[str, Value]
    baseline: dict[str, Value]
    source: str  # for people: where the configuration comes from (and its gain)
    ctx: HostContext = field(default_factory=_host_context)
    spec: Mapping[str, Any] = field(default_factory=dict)  # the study file, as stored
    previous: Path | None = None  # the host's config file before the export (--from)
    previous_text: str | None = None  # its text, read once and checked (server_config)
    tuned_include: str | None = None  # TuneD profile to include (None: the recommended)
    workload_text: str | None = None  # the measured workload, as the run described it
    # Entries left out because the host-write deny-list refuses them (one line each).
    refused: list[str] = field(default_factory=list)

    # -- the measured configuration ----------------------------------------------------------

    @property
    def target_args(self) -> list[str]:
        return [str(a) for a in (self.spec.get("target") or {}).get("args") or []]

    @property
    def target_cpus(self) -> str | None:
        cpus = (self.spec.get("target") or {}).get("cpus")
        return str(cpus) if cpus else None

    def changed(self, name: str) -> bool:
        """Whether the recommendation changes knob `name` from the baseline. Placement
        knobs always count: the configuration was measured with that placement. So does
        a knob the study pins, and the server's memory knob in a study of hit_ratio or
        memory: the hit ratio was measured at that memory, the memory is what was
        chosen."""
        knob = catalog.lookup(name)
        if knob is not None and knob.scope == "placement":
            return True
        if name == self.memory_knob or name in self.pinned:
            return True
        return name not in self.baseline or self.baseline[name] != self.config[name]

    @property
    def pinned(self) -> set[str]:
        """The knobs the study file pins (`{name, fixed: V}`): every configuration was
        measured with that value, the server's default or not (a Redis study of hit ratio
        pins maxmemory-policy to allkeys-lru: the export must say so)."""
        return {str(k.get("name")) for k in self.spec.get("knobs") or []
                if isinstance(k, dict) and k.get("fixed") is not None}

    @property
    def memory_knob(self) -> str | None:
        """The target kind's memory knob (kinds/<kind>/mrc.py) when the study's objective or
        a constraint is hit_ratio or memory, else None."""
        obj = self.spec.get("objective") or {}
        names = {str(obj.get("metric", ""))} | {
            str(o.get("metric", "")) for o in obj.get("also") or [] if isinstance(o, dict)}
        for c in self.spec.get("constraints") or []:
            names.add(str(c).split()[0] if str(c).split() else "")
        if not names & {"hit_ratio", "memory"} or not self.target:
            return None
        from kvtune.mrc.model import kinds_with_a_model, model_of

        return model_of(self.target).memory_knob if self.target in kinds_with_a_model() \
            else None

    def knobs(self, scope: str | None = None) -> list[tuple[Knob, Value, Value | None]]:
        """(knob, recommended value, baseline value) for every catalog knob the
        recommendation changes (and every placement knob), optionally of one scope
        ("app", "host", "cgroup", "placement")."""
        out = []
        for name, value in self.config.items():
            knob = catalog.lookup(name)
            if knob is None or (scope is not None and knob.scope != scope):
                continue
            if not self.changed(name):
                continue
            base = self.baseline.get(name)
            if base is None:
                base = baseline_value(knob, self.ctx, None)
            out.append((knob, value, base))
        return out

    def host_entry(self, row: Row) -> ExportEntry | None:
        """The export entry of a host knob's value on this host now (the state before the
        export), falling back to the baseline's when it cannot be read."""
        try:
            now = row.knob.applier.current(self.ctx)
        except (OSError, ValueError):
            now = None
        if now is None:
            return row.rollback
        return row.knob.applier.export_entry(now, self.ctx)

    def unchanged(self) -> list[str]:
        return [n for n in self.config if not self.changed(n)]

    def entries(self, scope: str | None = None) -> list[Row]:
        """Every changed catalog knob of the configuration (optionally of one scope) with
        what its applier exports for the recommended and for the baseline value."""
        from kvtune.safety.hostpaths import export_refusal

        out = []
        for knob, value, base in self.knobs(scope):
            entry = knob.applier.export_entry(value, self.ctx)
            back = None if base is None else knob.applier.export_entry(base, self.ctx)
            why = export_refusal(entry.family, entry.key) if entry is not None else None
            if entry is not None and why:  # the one deny-list of host writes, for exports too
                note = f"left out {knob.name} ({entry.family} {entry.key}): writing it {why}"
                if note not in self.refused:
                    self.refused.append(note)
                continue
            out.append(Row(knob, entry, back))
        return out

    # -- headers ----------------------------------------------------------------------------

    def workload(self) -> str:
        """The workload the configuration was tuned for, in one line."""
        t = self.spec.get("target") or {}
        load = self.spec.get("load") or {}
        w = load.get("workload") or {}
        server = str(t.get("kind") or self.target or "?")
        if self.target_args:
            server += " " + " ".join(self.target_args)
        if self.target_cpus:
            server += f" pinned to CPUs {self.target_cpus}"
        if not load:
            return server
        mode = load.get("mode", "open")
        rate = f" at {load['rate']:g}/s" if mode == "open" and load.get("rate") else ""
        what = (self.workload_text if self.workload_text else
                f"mix {w.get('mix', '?')}, {w.get('keys', '?')} keys "
                f"({w.get('popularity', '?')}), values {w.get('value_size', '?')} B")
        return (f"{server}; load {load.get('tool', 'kvload')} {mode}-loop{rate}, "
                f"{load.get('connections', '?')} connections, pipeline "
                f"{load.get('pipeline', 1)}, {what}")

    def conditions(self) -> list[str]:
        """What production must share with the measurement (`placement_conditions`)."""
        return placement_conditions(self.spec, self.config, self.baseline)

    def header(self, what: str, *extra: str) -> list[str]:
        from kvtune import __version__

        return [what, f"kvtune {__version__}, study {self.study!r}: {self.source}",
                f"Tuned for: {self.workload()}",
                *(f"Condition: {c}" for c in self.conditions()),
                "Generated by `kvtune export`; review before installing.", *extra]

    def rollback_header(self, what: str, restores: str, *extra: str) -> list[str]:
        from kvtune import __version__

        return [f"ROLLBACK of {what}", f"Restores {restores}, as before the export of "
                f"kvtune {__version__} study {self.study!r}.",
                "Never install it together with the recommendation.", *extra]


class Exporter(ABC):
    """One export format. `files` reads `Recommendation.entries()` and keeps the entries of
    the families it writes; it never looks at applier classes."""

    name: ClassVar[str]
    help: ClassVar[str]

    @abstractmethod
    def files(self, rec: Recommendation) -> list[ExportFile]:
        """The files for this format; empty when the configuration has nothing for it."""


def comment(lines: list[str], mark: str = "#") -> str:
    """Comment lines: every control character of a line (a newline, from a stored study's
    text or a library's) becomes a space, so a line stays one comment line."""
    return "".join(f"{mark} {_one_line(ln)}".rstrip() + "\n" for ln in lines)


def _one_line(text: str) -> str:
    return "".join(" " if ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 else c for c in text)


def rollback_path(path: str, suffix: str = "") -> str:
    """Where the rollback of `path` goes: under rollback/, with `suffix` appended when the
    consumer reads whole directories (sysctl.d reads *.conf only)."""
    return f"{ROLLBACK_DIR}/{path}{suffix}"
