"""Load drivers, one module per load tool (see base.py). The registry of built-in drivers:
a new driver is its module plus one `register` line here."""

from kvtune import kind_registry as kinds
from kvtune.load.base import (
    METRICS,
    VERDICTS,
    LoadDriver,
    LoadResult,
    driver_class,
    driver_for,
    register,
    runs_remote,
    tools,
    transport_for,
)
from kvtune.load.kvload import KvloadDriver
from kvtune.load.transport import Transport

register(KvloadDriver)
for _kind in kinds.every():  # the peer tools of each server kind (redis-benchmark, ...)
    for _driver in _kind.load_drivers():
        register(_driver)

__all__ = ["METRICS", "VERDICTS", "LoadDriver", "LoadResult", "Transport", "driver_class",
           "driver_for", "register", "runs_remote", "tools", "transport_for"]
