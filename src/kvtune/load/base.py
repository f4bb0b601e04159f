"""The load-driver extension point: one `LoadDriver` per load tool, looked up by the study
file's `load.tool`.

    driver = driver_for(spec.load)   # the registered driver class for load.tool
    driver.prepare()                 # preflight: find the tool (HarnessError if missing)
    result = driver.run("127.0.0.1:11211", "memcache", seed)
    result.metrics["p99_us"], result.verdict, result.raw

A driver turns one run of its tool into kvtune's metric names (`METRICS`), a verdict
(`ok`, or `saturated` / `client_bound` when the run measured the client or an overloaded
server rather than the configuration) and the tool's raw output, which the runner stores
with the repetition under `raw["load"]` (with `raw["load"]["tool"]`).

A new driver is one module with a `LoadDriver` subclass, registered by `register` (the
built-in ones in `kvtune/load/__init__.py`).

Where the tool runs is a `Transport` (`load/transport.py`), chosen once from the study file
by `transport_for`:
`LocalTransport` (this host) or, with `load.host`, `load.remote.SshTransport` (kvload on a
load host over ssh). A driver that sets `remote = True` runs its argv through its transport
and never asks where it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kvtune.cpulist import MAX_CPU
from kvtune.errors import UserError
from kvtune.load.transport import LocalTransport, Transport
from kvtune.metrics import NAMES

if TYPE_CHECKING:
    from kvtune.spec import CapacitySearch, LoadSpec

VERDICTS = ("ok", "saturated", "client_bound")

# The metric names a driver reports (those it cannot measure it leaves out or sets to None):
# kvtune.metrics owns them, their units and directions.
METRICS = NAMES


@dataclass
class LoadResult:
    """One run of a load tool."""

    metrics: dict[str, Any]
    verdict: str = "ok"  # one of VERDICTS
    reason: str = ""  # why the verdict is not ok, for people
    raw: dict[str, Any] = field(default_factory=dict)  # the tool's own output (and argv)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"load verdict {self.verdict!r} is not one of {VERDICTS}")


class LoadDriver(ABC):
    """Runs one load tool against a server. Subclasses set `tool` (the `load.tool` name)."""

    tool: ClassVar[str]
    # True for a driver that runs its tool through `Transport` (so `load.host` may name a
    # load host for it).
    remote: ClassVar[bool] = False
    # True for tools with no open-loop schedule (the peers redis-benchmark and memaslap):
    # they refuse `load.mode: open` when constructed.
    closed_loop: ClassVar[bool] = False
    # True for a driver that can measure `capacity` (a knee search at an SLO per run).
    searches: ClassVar[bool] = False
    # The load keys (dotted, under `load.`) this tool has no way to honour: a study that
    # sets one is refused (exit 2) rather than measured with the key silently dropped.
    ignores: ClassVar[tuple[str, ...]] = ()
    # The highest CPU `load.cpus` may name for this tool (taskset takes the kernel's).
    max_cpu: ClassVar[int] = MAX_CPU
    # Set by `driver_for` when the study's objective is capacity: each run is then one
    # search, and its result's metrics carry `capacity` (req/s) and the figures of the knee.
    capacity: CapacitySearch | None = None

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec

    @classmethod
    def check_extra_args(cls, args: list[str]) -> None:
        """Check `load.extra_args` against this tool's allow-list (kvtune.safety.args has
        the scanners). Raises ValueError naming the first refused item."""
        if args:
            raise ValueError(f"load.extra_args: {cls.tool} takes none")

    def prepare(self) -> None:  # noqa: B027 (optional hook; most tools need nothing)
        """Find what the driver runs, once, before anything is applied to the host.
        Raises HarnessError when the tool is missing."""

    @abstractmethod
    def run(self, address: str, protocol: str, seed: int) -> LoadResult:
        """Drive load against `address` (`HOST:PORT` or `unix:PATH`) speaking `protocol`
        (`memcache`, `meta` or `resp`, unless load.protocol overrides it), seeded with
        `seed`. Raises TrialFailed when the server failed under load (refused, reset,
        malformed answers), HarnessError when the tool itself is missing or misused."""


def transport_for(spec: LoadSpec) -> Transport:
    """Where the study's load tool runs: its `load.host`, else this host."""
    target = spec.load_host
    if target is None:
        return LocalTransport()
    from kvtune.load.remote import SshTransport  # ssh only when a study names a load host

    return SshTransport(target, spec.remote_binary)


_REGISTERED: dict[str, type[LoadDriver]] = {}
_BUILT_IN: dict[str, type[LoadDriver]] = {}
_SOURCES: list[Callable[[], list[type[LoadDriver]]]] = []


def built_in(source: Callable[[], list[type[LoadDriver]]]) -> None:
    """Where the built-in drivers come from, asked at the first lookup (the package's
    `__init__` names kvload and the server kinds' peer tools)."""
    _SOURCES.append(source)
    _BUILT_IN.clear()


def register(cls: type[LoadDriver]) -> type[LoadDriver]:
    """Make `cls` the driver for `load.tool: <cls.tool>` (usable as a class decorator); it
    replaces a built-in driver of the same name."""
    name = getattr(cls, "tool", "")
    if not name:
        raise ValueError(f"{cls.__name__} sets no `tool` name")
    _REGISTERED[name] = cls
    return cls


def _drivers() -> dict[str, type[LoadDriver]]:
    """Every driver: the built-in ones (kvload and each server kind's peer tools,
    redis-benchmark, ...), found at the first lookup rather than at import, so that a
    kind's driver module may be imported before this package without a circle; then the
    registered ones."""
    if not _BUILT_IN:
        _BUILT_IN.update((d.tool, d) for source in _SOURCES for d in source())
    return {**_BUILT_IN, **_REGISTERED}


def runs_remote(tool: str) -> bool:
    """Whether `load.host` may name a load host for `tool`."""
    cls = _drivers().get(tool)
    return cls is not None and cls.remote


def driver_class(tool: str) -> type[LoadDriver]:
    """The driver class registered for `tool` (ValueError for an unknown one)."""
    try:
        return _drivers()[tool]
    except KeyError:
        raise ValueError(f"unknown load tool {tool!r} (known: {', '.join(tools())})") \
            from None


def tools() -> list[str]:
    """The registered load tool names."""
    return sorted(_drivers())


def driver_for(spec: LoadSpec, capacity: CapacitySearch | None = None) -> LoadDriver:
    """A new driver for the study's load section (its `tool`); `capacity`: each run is a
    capacity search (the study's objective is capacity)."""
    try:
        cls = _drivers()[spec.tool]
    except KeyError:
        raise UserError(f"load.tool: unknown load tool {spec.tool!r} "
                        f"(known: {', '.join(tools())})") from None
    if capacity is not None and not cls.searches:
        raise UserError(f"load.tool: {spec.tool} cannot measure capacity (a knee search "
                        "over open-loop rates); kvload can")
    dropped = [key for key in cls.ignores if _is_set(spec, key)]
    if dropped:
        raise UserError(f"load.tool: {spec.tool} cannot honour "
                        f"{', '.join('load.' + k for k in dropped)} (it would measure "
                        "without it); use kvload, or remove the key")
    driver = cls(spec)
    driver.capacity = capacity
    return driver


def _is_set(spec: LoadSpec, dotted: str) -> bool:
    """Whether the study set `dotted` (e.g. "workload.popularity") to other than its
    default."""
    node: Any = spec
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = getattr(node, part)
    if leaf not in node.model_fields_set:
        return False
    return bool(getattr(node, leaf) != type(node).model_fields[leaf].default)
