"""Targets: the server's life cycle (fresh start, ready, stats, stop), one module each."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtune.spec import TargetSpec
    from kvtune.targets.base import Target
    from kvtune.targets.synthetic import SyntheticTarget


def make_target(spec: TargetSpec) -> Target | SyntheticTarget:
    if spec.kind == "memcached":
        from kvtune.targets.memcached import MemcachedTarget

        return MemcachedTarget(spec)
    if spec.kind == "redis":
        from kvtune.targets.redis import RedisTarget

        return RedisTarget(spec)
    from kvtune.targets.synthetic import SyntheticTarget

    return SyntheticTarget(spec)
