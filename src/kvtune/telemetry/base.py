"""The telemetry extension point: a `Collector` measures some figures of one repetition
over the load window; `Probe` runs every registered collector around the load.

    probe = Probe(server_pid, cgroup)   # one instance of each registered collector
    probe.start()                       # each collector.start(), in registration order
    ... the load ...
    tel = probe.stop()                  # each collector.stop(), in reverse order
    tel.metrics                         # every collector's metrics(), merged
    tel.raw[collector.name]             # each collector's raw()

Each figure is measured by one collector, under one name that starts with one of the
collector's `prefixes` (which is how reports tell telemetry from the load's own figures).
Collection never fails a repetition: a collector leaves out what it cannot read and says
why in its raw record; an exception from a collector is recorded there too.

A new collector is one module with a `Collector` subclass, registered by `register`
(the built-in ones in `kvtune/telemetry/__init__.py`).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kvtune.host.cgroup import ServerCgroup


@dataclass(frozen=True)
class ProbeContext:
    """What collectors may look at: the server process, and the cgroup kvtune created for
    it (None when the study has no cgroup knobs)."""

    pid: int
    cgroup: ServerCgroup | None = None


class Collector(ABC):
    """Figures of one repetition: `start` before the load, `stop` after it, then `metrics`
    (flat numbers named with one of `prefixes`) and `raw` (details, JSON-serializable)."""

    name: ClassVar[str]  # key of its raw record under raw["telemetry"]
    prefixes: ClassVar[tuple[str, ...]]  # every metric it reports starts with one of these

    def __init__(self, ctx: ProbeContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def metrics(self) -> dict[str, float]: ...

    @abstractmethod
    def raw(self) -> dict[str, Any]: ...

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release what `start` acquired without measuring (the repetition failed)."""


_COLLECTORS: dict[str, type[Collector]] = {}


def register(cls: type[Collector]) -> type[Collector]:
    """Add `cls` to the collectors every Probe runs (usable as a class decorator)."""
    if not getattr(cls, "name", "") or not getattr(cls, "prefixes", ()):
        raise ValueError(f"{cls.__name__} needs a `name` and metric `prefixes`")
    _COLLECTORS[cls.name] = cls
    return cls


def collectors() -> list[type[Collector]]:
    """The registered collectors, in registration order."""
    return list(_COLLECTORS.values())


def collector_prefixes() -> tuple[str, ...]:
    return tuple(p for c in _COLLECTORS.values() for p in c.prefixes)


@dataclass
class Telemetry:
    metrics: dict[str, float] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def _failed(e: Exception) -> dict[str, Any]:
    return {"error": f"{type(e).__name__}: {e}"}


class Probe:
    """Every registered collector, for one server process over the load window."""

    def __init__(self, pid: int, cgroup: ServerCgroup | None = None) -> None:
        ctx = ProbeContext(pid, cgroup)
        self._errors: dict[str, dict[str, Any]] = {}
        self.collectors: list[Collector] = []
        for cls in collectors():
            try:
                self.collectors.append(cls(ctx))
            except Exception as e:  # collection never fails a repetition
                self._errors[cls.name] = _failed(e)
        self._done: Telemetry | None = None

    def _each(self, method: str, order: list[Collector]) -> None:
        for c in order:
            if c.name in self._errors:
                continue
            try:
                getattr(c, method)()
            except Exception as e:
                self._errors[c.name] = _failed(e)

    def start(self) -> None:
        self._each("start", self.collectors)

    def stop(self) -> Telemetry:
        """Stop every collector (last started, first stopped) and gather their figures.
        Safe to call more than once."""
        if self._done is not None:
            return self._done
        self._each("stop", self.collectors[::-1])
        tel = Telemetry(raw=dict(self._errors))
        for c in self.collectors:
            if c.name in self._errors:
                continue
            try:
                metrics, raw = c.metrics(), c.raw()
            except Exception as e:
                tel.raw[c.name] = _failed(e)
                continue
            tel.metrics.update(metrics)
            tel.raw[c.name] = raw
        self._done = tel
        return tel

    def close(self) -> None:
        """Release everything without measuring (the repetition failed)."""
        for c in self.collectors:
            with contextlib.suppress(Exception):
                c.close()
