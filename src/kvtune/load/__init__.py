"""Load drivers, one module per load tool (see base.py). The registry of built-in drivers:
a new driver is its module plus one `register` line here."""

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
from kvtune.load.memaslap import MemaslapDriver
from kvtune.load.redis_benchmark import RedisBenchmarkDriver
from kvtune.load.transport import Transport

for _driver in (KvloadDriver, RedisBenchmarkDriver, MemaslapDriver):
    register(_driver)

__all__ = ["METRICS", "VERDICTS", "LoadDriver", "LoadResult", "Transport", "driver_class",
           "driver_for", "register", "runs_remote", "tools", "transport_for"]
