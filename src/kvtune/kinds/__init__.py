"""The server kinds, one folder each (`kinds/<kind>/`), registered here by name. Everything
specific to one server lives in its folder: its target, appliers, catalog entries, stats
client and telemetry digest, exports, load tools; the generic layers ask this registry.

    kind = get("valkey")          # a Kind (kinds/base.py), its folder imported on first use
    for k in every(): ...         # every registered kind

A new kind is its folder plus one line in `_REGISTRY`."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtune.kinds.base import Kind

# kind name -> the module whose KIND describes it
_REGISTRY: dict[str, str] = {
    "memcached": "kvtune.kinds.memcached",
    "redis": "kvtune.kinds.redis",
    "valkey": "kvtune.kinds.valkey",
}

__all__ = ["every", "find", "get", "names", "register"]


def register(name: str, module: str) -> None:
    """Register a kind (its module's KIND) under `name`."""
    _REGISTRY[name] = module


def names() -> tuple[str, ...]:
    """The registered server kinds."""
    return tuple(_REGISTRY)


def find(name: str | None) -> Kind | None:
    """The kind registered as `name`, or None (another target kind, like synthetic)."""
    if not name or name not in _REGISTRY:
        return None
    kind: Kind = importlib.import_module(_REGISTRY[name]).KIND
    return kind


def get(name: str) -> Kind:
    """The kind registered as `name` (ValueError for another)."""
    kind = find(name)
    if kind is None:
        raise ValueError(f"unknown server kind {name!r}; known: {', '.join(_REGISTRY)}")
    return kind


def every() -> list[Kind]:
    """Every registered kind, in registration order."""
    return [get(n) for n in _REGISTRY]
