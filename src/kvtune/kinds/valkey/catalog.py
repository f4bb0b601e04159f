"""Valkey's knobs: `valkey.*`. Redis 7's directives with Valkey 8.0's defaults (the lazyfree
family is on: Valkey 8 frees in the background by default), without `io-threads-do-reads`
(deprecated in 8.0 and of no effect: its I/O threads always read and parse), and 8.0's own
I/O-threading settings.

What changed in 8.0's I/O threading (its release notes): the main thread hands
reads, query parsing and writes to the I/O threads asynchronously and keeps executing
commands, instead of waiting for each fan-out; the number of active threads follows the
load (`events-per-io-thread` events per active thread), and commands of a batch have their
keys' memory prefetched (`prefetch-batch-max-size`). `io-threads` counts the main thread:
`io-threads 2` is one I/O thread beside it."""

from __future__ import annotations

from dataclasses import replace

from kvtune.kinds.redis.appliers import RedisDirective
from kvtune.kinds.redis.catalog import PRESETS as REDIS_PRESETS
from kvtune.kinds.redis.catalog import knobs as redis_knobs
from kvtune.kinds.valkey.appliers import ValkeyDirective
from kvtune.knobs.domain import Domain
from kvtune.knobs.knob import Knob

V8 = (8, 0, 0)
# Redis's knobs Valkey 8 does not have, or has with no effect.
_DROPPED = {"redis.io_threads_do_reads"}
# Valkey 8's defaults where they differ from Redis 7's (CONFIG GET * of both, compared in
# tests/test_valkey.py against a valkey-server started without a file).
_DEFAULTS = {f"lazyfree_lazy_{n}": True
             for n in ("eviction", "expire", "server_del", "user_del", "user_flush")}


def _from_redis(k: Knob) -> Knob:
    a = k.applier
    assert isinstance(a, RedisDirective)
    name = k.name.removeprefix("redis.")
    desc = k.description.replace("redis process", "valkey process")
    return replace(k, name=f"valkey.{name}",
                   applier=ValkeyDirective(a.directive, a.live, a.min_version, a.suffix,
                                           a.probe),
                   default=_DEFAULTS.get(name, k.default), description=desc)


def knobs() -> list[Knob]:
    own = [
        Knob("valkey.events_per_io_thread", Domain("int", 1, 64, log=True),
             ValkeyDirective("events-per-io-thread", live=True, min_version=V8), 2,
             "events per active I/O thread before another is woken (8.0; a hidden "
             "directive)"),
        Knob("valkey.prefetch_batch_max_size", Domain("int", 0, 128),
             ValkeyDirective("prefetch-batch-max-size", live=True, min_version=V8), 16,
             "commands whose keys are prefetched together, with I/O threads (0 or 1: no "
             "prefetching; 8.0)"),
        Knob("valkey.max_new_connections_per_cycle", Domain("int", 1, 1000, log=True),
             ValkeyDirective("max-new-connections-per-cycle", live=True, min_version=V8),
             10, "connections accepted per event-loop cycle (8.0)"),
    ]
    return [_from_redis(k) for k in redis_knobs() if k.name not in _DROPPED] + own


# The Redis preset's knobs under Valkey's names (without io-threads-do-reads), with 8.0's
# I/O-threading settings.
PRESETS: dict[str, tuple[list[str], dict[str, Domain], bool]] = {
    "valkey-throughput": (
        [n.replace("redis.", "valkey.") for n in REDIS_PRESETS["redis-throughput"][0]
         if n not in _DROPPED]
        + ["valkey.events_per_io_thread", "valkey.prefetch_batch_max_size"],
        {}, True),
}
