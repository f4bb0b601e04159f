"""Targets: what is tuned, registered here by kind: every server kind's (its folder under
`kinds/`, through the kind registry) and the simulated ones (`synthetic`). `host_context()`
is this host's facts and the servers found on it.

    target = make_target(spec.target)      # a Target of the registered class
    ctx = host_context()                   # collected once per process
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from kvtune import kind_registry as _kinds

if TYPE_CHECKING:
    from kvtune.knobs.appliers.base import HostContext
    from kvtune.knobs.knob import Knob
    from kvtune.spec import TargetSpec
    from kvtune.targets.base import Target

# Targets that are no server kind (kinds/ holds those): kind → "module:Class", imported on
# first use (so naming the kinds imports no target).
_REGISTRY: dict[str, str | type[Target]] = {
    "synthetic": "kvtune.targets.synthetic:SyntheticTarget",
}
_CLASSES: dict[str, type[Target]] = {}

__all__ = ["context_for", "host_context", "kinds", "make_target", "register", "target_class",
           "target_knobs"]


def register(kind: str, cls: str | type[Target]) -> None:
    """Register a target class (or its "module:Class" path) under `kind` (a server kind is
    registered in kvtune.kinds instead, with its folder)."""
    _REGISTRY[kind] = cls
    _CLASSES.pop(kind, None)
    _host_context.cache_clear()


def kinds() -> tuple[str, ...]:
    """The registered target kinds: every server kind, then the others."""
    return tuple(dict.fromkeys((*_kinds.names(), *_REGISTRY)))


def target_class(kind: str) -> type[Target]:
    """The class registered for `kind` (a server kind's comes from its folder). Raises
    ValueError for an unknown kind."""
    if kind in _CLASSES:
        return _CLASSES[kind]
    entry: str | type[Target] | None = _REGISTRY.get(kind)
    if entry is None:
        server = _kinds.find(kind)
        if server is None:
            raise ValueError(f"unknown target kind {kind!r}; known: {', '.join(kinds())}")
        entry = server.target
    if isinstance(entry, str):
        entry = _kinds.load(entry)
    assert not isinstance(entry, str)
    _CLASSES[kind] = entry
    return entry


def make_target(spec: TargetSpec) -> Target:
    return target_class(spec.kind)(spec)


def target_knobs(kind: str) -> Mapping[str, Knob]:
    """The knobs a target kind contributes itself (the `extra_knobs` of knob resolution)."""
    return target_class(kind).knobs()


def host_context(kinds: Iterable[str] | None = None) -> HostContext:
    """This host's facts (collected once per process) and the binary and version of every
    registered target kind (or of `kinds`) found on PATH. Cached: callers must not change it;
    `context_for` gives a study its own copy."""
    return _host_context(tuple(kinds) if kinds is not None else None)


@lru_cache(maxsize=8)
def _host_context(names: tuple[str, ...] | None) -> HostContext:
    from kvtune.host.facts import this_host
    from kvtune.knobs.appliers.base import HostContext

    ctx = HostContext(this_host())
    for kind in names if names is not None else kinds():
        found = target_class(kind).installed()
        if found is not None:
            ctx.binaries[kind], ctx.versions[kind] = found
    return ctx


def context_for(target: Target) -> HostContext:
    """The host context of a study on `target`: the shared facts, with the binary and version
    the study runs (which may not be the one on PATH)."""
    ctx = host_context()
    version = target.version()
    if target.binary is None or version is None:
        return dataclasses.replace(ctx, versions=dict(ctx.versions),
                                   binaries=dict(ctx.binaries))
    return dataclasses.replace(ctx, versions={**ctx.versions, target.kind: version},
                               binaries={**ctx.binaries, target.kind: target.binary})
