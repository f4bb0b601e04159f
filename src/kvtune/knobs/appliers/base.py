"""The one extension point for applying knob values.

Life cycle, as in TuneD's plugins: `check` (exists, readable, writable on this host),
`current` (read), `apply` (through the journal for host files, into the launch for the
server), with read-back verification done by the journal.
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


@dataclass
class HostContext:
    """What appliers need to know about this host and the servers on it."""

    facts: HostFacts
    fs: HostFS = field(default_factory=HostFS)
    versions: dict[str, tuple[int, ...]] = field(default_factory=dict)  # "memcached": (1, 6, 18)
    binaries: dict[str, str] = field(default_factory=dict)  # "redis": "/usr/bin/redis-server"


@dataclass
class Launch:
    """The server launch under construction for one trial."""

    flags: list[str] = field(default_factory=list)
    memcached_options: dict[str, str] = field(default_factory=dict)
    redis_directives: dict[str, str] = field(default_factory=dict)
    server_cpus: str | None = None
    cgroup_files: dict[tuple[str, str], str] = field(default_factory=dict)  # (controller, file)
    params: dict[str, Value] = field(default_factory=dict)  # every knob's value, by name


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

    def format(self, value: Value) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)
