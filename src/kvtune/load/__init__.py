"""Load drivers, one module per load tool (see base.py). kvload and each server kind's
peer tools are found at the first lookup (`base._drivers`); another driver is its module
plus one `register` call."""

from kvtune.load.base import (
    METRICS,
    VERDICTS,
    LoadDriver,
    LoadResult,
    built_in,
    driver_class,
    driver_for,
    register,
    runs_remote,
    tools,
    transport_for,
)
from kvtune.load.cacheaside import CacheAsideDriver
from kvtune.load.kvload import KvloadDriver
from kvtune.load.transport import Transport


def _built_in() -> list[type[LoadDriver]]:
    from kvtune import kind_registry as kinds

    return [KvloadDriver, CacheAsideDriver,
            *(d for kind in kinds.every() for d in kind.load_drivers())]


built_in(_built_in)

__all__ = ["METRICS", "VERDICTS", "LoadDriver", "LoadResult", "Transport", "driver_class",
           "driver_for", "register", "runs_remote", "tools", "transport_for"]
