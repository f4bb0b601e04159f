"""What the miss-ratio curve asks of a server kind: how it holds items in memory.

Each kind that has a curve gives a `MemoryModel` in its folder (`kinds/<kind>/mrc.py`,
registered as the kind's `mrc`); this layer asks the kind registry for it and names no
kind. `lru` is the kind-free byte-LRU cache (kvtune.mrc.lru).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvtune import kind_registry as kinds
from kvtune.errors import UserError
from kvtune.mrc.requests import Requests


class Client(Protocol):
    """A server's protocol, as the real-server check speaks it (kvtune.mrc.check)."""

    def gets(self, keys: list[bytes]) -> list[bool]: ...
    def sets(self, items: list[tuple[bytes, int, int]]) -> None: ...
    def deletes(self, keys: list[bytes]) -> None: ...
    def reset(self) -> None: ...
    def counts(self) -> tuple[int, int]: ...  # (hits, misses) since the reset
    def close(self) -> None: ...


@dataclass(frozen=True)
class SimResult:
    """A simulated server at one memory size: its gets, hits, evictions and (memcached)
    the slab pages each class holds at the end."""

    memory: int
    gets: int
    hits: int
    evictions: int
    pages: dict[int, int] = field(default_factory=dict)

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.gets if self.gets else 0.0


@dataclass(frozen=True)
class MemoryModel:
    """A kind's memory: `simulate(req, memory, measure_from, scale)` the hit ratio of the
    gets from index `measure_from` on, with `memory` bytes (scale < 1: a miniature cache
    fed a sample at that rate); `working_set(req)` the bytes the stream's keys take at
    once; `smallest(top)` the smallest memory worth showing; `round_sizes` what the
    server's memory setting can be; `alternatives(req, memory, rate)` the hit ratio at
    `memory` under other settings of the kind (rows with `setting`, `hit_ratio`);
    `client(port)` its protocol on 127.0.0.1; `notes(rate)` caveats of the curve;
    `configured(stats)` the memory setting in bytes read from the server's stats as a study
    stores them (None: not there, or no limit); `memory_knob` the catalog knob (in MB)
    that sets it; `simulate_sizes(req, sizes, measure_from, scale)` (optional) the hit
    ratios `simulate` gives at each of `sizes`, at once (the stream read once; a run that
    never had to make room standing for every larger size), which a curve uses when the
    kind has it."""

    name: str
    simulate: Callable[[Requests, int, int, float], float]
    working_set: Callable[[Requests], int]
    smallest: Callable[[int], int]
    client: Callable[[int], Client]
    round_sizes: Callable[[list[int]], list[int]] = field(default=lambda s: s)
    alternatives: Callable[[Requests, int, float], list[dict[str, Any]]] | None = None
    alternatives_title: str = "other settings"
    notes: Callable[[float], list[str]] = field(default=lambda rate: [])
    configured: Callable[[dict[str, Any]], int | None] = field(default=lambda stats: None)
    memory_knob: str | None = None
    simulate_sizes: Callable[[Requests, list[int], int, float], list[float]] | None = None


def model_of(kind: str) -> MemoryModel:
    """The memory model of a registered server kind (UserError naming the kinds with one)."""
    k = kinds.find(kind)
    if k is None or not k.mrc:
        have = [n for n in kinds.names() if kinds.get(n).mrc]
        raise UserError(f"--kind {kind}: one of {', '.join([*have, 'lru'])}")
    model: MemoryModel = kinds.load(k.mrc)
    return model


def configured_memory(kind: str, stats: dict[str, Any]) -> int | None:
    """The memory setting (bytes) of a server of `kind` from its stats (None: a kind with no
    memory model, or a server without a limit)."""
    k = kinds.find(kind)
    if k is None or not k.mrc or not isinstance(stats, dict):
        return None
    return model_of(kind).configured(stats)


def kinds_with_a_model() -> list[str]:
    return [n for n in kinds.names() if kinds.get(n).mrc]
