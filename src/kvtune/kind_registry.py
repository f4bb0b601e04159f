"""The registry of server kinds: each kind's folder (`kinds/<kind>/`, everything specific to
one server: its target, appliers, catalog entries, stats client and telemetry digest,
exports, load tools) by name. The generic layers ask it; it imports no kind until asked
(by its module path), so it sits below them and the folders above.

    kind = get("valkey")          # a Kind (kinds/base.py), its folder imported on first use
    for k in every(): ...         # every registered kind

A new kind is its folder plus one line in `_REGISTRY`."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvtune.kinds.base import Kind

# kind name -> the module whose KIND describes it
_REGISTRY: dict[str, str] = {
    "memcached": "kvtune.kinds.memcached",
    "redis": "kvtune.kinds.redis",
    "valkey": "kvtune.kinds.valkey",
}

__all__ = ["every", "find", "get", "load", "names", "register"]


def load(path: str) -> Any:
    """What a "module:name" path names, its module imported now (a kind's parts are named
    this way, so that naming them imports none)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


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
