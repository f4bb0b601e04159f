"""The one extension point for applying knob values.

Life cycle, as in TuneD's plugins: `check` (exists, readable, writable on this host),
`current` (read), `apply` (through the journal for host files, into the launch for the
server), with read-back verification done by the journal; `export_entry` says what a value
becomes in an exported configuration file (`kvtune export`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from kvtune.host.fs import HostFS
from kvtune.knobs.domain import Value

if TYPE_CHECKING:
    from kvtune.host.facts import HostFacts
    from kvtune.host.journal import Journal


@dataclass(frozen=True)
class Availability:
    """Whether a knob can be applied on this host; `reason` says why not, for people;
    `current` is the value read while checking, when there was one."""

    ok: bool
    reason: str = ""
    current: Value | None = None


@dataclass(frozen=True)
class ExportEntry:
    """One line of an exported configuration: `family` names the exporter format that takes
    it ("sysctl", "sysfs", "systemd", or a server kind's: "memcached-flag", "redis"), `key`
    the setting there (a sysctl name, a sysfs path, a flag, an option, a directive, a unit
    setting) and `value` its text ("" for a bare flag or option). `live` says the setting
    can change without a restart."""

    family: str
    key: str
    value: str
    live: bool = False


@dataclass
class HostContext:
    """What appliers need to know about this host and the servers on it."""

    facts: HostFacts
    fs: HostFS = field(default_factory=HostFS)
    versions: dict[str, tuple[int, ...]] = field(default_factory=dict)  # "memcached": (1, 6, 18)
    binaries: dict[str, str] = field(default_factory=dict)  # "redis": "/usr/bin/redis-server"
    # The study's CPUs (the server's and the load's), for knobs set per CPU (the cpuidle
    # states); empty: every CPU.
    cpus: tuple[int, ...] = ()


@dataclass
class Launch:
    """The server launch under construction for one trial."""

    flags: list[str] = field(default_factory=list)
    # the server's own named settings (memcached's -o options, Redis's directives), as its
    # kind's appliers write them and its target passes them
    options: dict[str, str] = field(default_factory=dict)
    server_cpus: str | None = None
    cgroup_files: dict[tuple[str, str], str] = field(default_factory=dict)  # (controller, file)
    params: dict[str, Value] = field(default_factory=dict)  # every knob's value, by name
    # per-process scheduler settings ("policy", "nice", "slice_ns"), applied at exec by
    # the shim in host/sched.py
    sched: dict[str, Value] = field(default_factory=dict)


@dataclass
class ApplyEnv:
    journal: Journal | None
    launch: Launch
    ctx: HostContext


class Applier(ABC):
    scope: ClassVar[str]  # "app", "host", "cgroup" or "placement"
    restart: ClassVar[bool] = True
    target: str | None = None  # "memcached" / "redis" for application knobs

    @abstractmethod
    def where(self) -> str:
        """Where the value goes, for people: '-t', '/proc/sys/net/core/somaxconn'."""

    @abstractmethod
    def check(self, ctx: HostContext) -> Availability:
        """Whether this knob can be applied on this host, and why not."""

    def current(self, ctx: HostContext) -> Value | None:
        """The host's value now (host knobs); None for application knobs."""
        return None

    @abstractmethod
    def apply(self, value: Value, env: ApplyEnv) -> None:
        """Apply a value. Host writes go through env.journal."""

    def controllers(self) -> tuple[str, ...]:
        """The cgroup controllers a cgroup knob needs in the server's cgroup."""
        return ()

    def sets(self) -> tuple[str, ...]:
        """The server settings an application knob sets, as its target names them in
        `Target.arg_names` (a flag, `-o name`, a directive); () for host knobs."""
        return ()

    def format(self, value: Value) -> str:
        """`value` as the text this applier writes (to a file, an argv, a config line)."""
        return format_value(value)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        """What `value` becomes in an exported configuration file, or None when it emits
        nothing (a false flag, an omitted option) or this applier exports nothing."""
        return None


def format_value(value: Value) -> str:
    """The one value formatter for files, sysctls and argv: booleans as 1/0, integral
    floats without a fraction."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
