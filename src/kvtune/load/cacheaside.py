"""`load.tool: cache-aside` — the study's workload replayed as an application in front of a
database uses a cache: each get that misses is followed by the set of that key (its size,
its TTL), from an empty cache. Its `hit_ratio` is the one `kvtune workload mrc` predicts
(the real-server check of the miss-ratio curve, kvtune.mrc.check, is this replay), so a
study can take `hit_ratio` as its objective at a fixed memory, or keep it as a constraint
while it looks for the smallest memory.

kvload sets a key only when its mix draws a set (and preloads every key): its hit ratio is
not the cache-aside one. This driver replays `load.rate × (load.warmup + load.duration)`
requests drawn from the workload (the workload file's model, else `load.workload`),
paced to their times (TTLs and the LRU clocks run on wall time); the gets after
`load.warmup` are measured from the server's own counters. It speaks the server kind's
protocol (the kind's memory model, kinds/<kind>/mrc.py) from this process, on loopback.

Metrics: hit_ratio, ops_per_sec (requests replayed per second of the measured part).
Missing: every latency figure, errors, client_utilization. A replay that falls behind its
schedule by more than a tenth of its span is `client_bound` (the server's clocks no longer
see the stream's times).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kvtune import present
from kvtune.errors import TrialFailed, UserError
from kvtune.load.base import METRICS, LoadDriver, LoadResult
from kvtune.quantities import is_count

if TYPE_CHECKING:
    from kvtune.spec import LoadSpec

DEFAULT_RATE = 10_000.0
MAX_REQUESTS = 5_000_000  # a study's replay: tens of seconds at most of this client


def kind_for(protocol: str) -> str:
    """The server kind with a memory model that speaks `protocol` (its client is the one
    the replay uses; the hit ratio is read from the server's counters)."""
    from kvtune import kind_registry as kinds

    for k in kinds.every():
        if k.mrc and getattr(kinds.load(k.target), "protocol", None) == protocol:
            return k.name
    raise UserError(f"load.tool cache-aside: no server kind with a memory model speaks "
                    f"{protocol}")


class CacheAsideDriver(LoadDriver):
    """Replays the workload cache-aside (kvtune.mrc.check.replay)."""

    tool = "cache-aside"
    # What a replay from this process, one connection, paced to the stream, has no way to
    # honour.
    ignores = ("connections", "pipeline", "window", "spin_us", "cpus", "workload.arrival",
               "workload.preload")

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        if spec.mode != "open":
            raise UserError("load.tool cache-aside replays the workload at its rate: "
                            "load.mode must be open")
        if spec.protocol == "meta":
            raise UserError("load.tool cache-aside speaks the kind's text protocol, not "
                            "meta: leave load.protocol out")
        self.requests = requests_of(spec)

    def run(self, address: str, protocol: str, seed: int) -> LoadResult:
        from kvtune.mrc import check
        from kvtune.mrc import requests as rq

        host, _, port = address.rpartition(":")
        if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not is_count(port):
            raise UserError(f"load.tool cache-aside replays to a server on 127.0.0.1, not "
                            f"{address}")
        s = self.spec
        doc, rate = workload_of(s)
        req = rq.from_model(doc, requests=self.requests, seed=seed, rate=rate)
        warm = int(np.searchsorted(req.t, s.warmup))
        if warm >= len(req):
            raise UserError("load.tool cache-aside: the warm-up takes the whole replay")
        kind = kind_for(protocol)
        try:
            got = check.replay(req, kind, int(port), warm)
        except (OSError, UserError) as e:
            raise TrialFailed(f"the cache-aside replay failed: {e}") from None
        span = float(req.t[-1]) if len(req) else 0.0
        metrics: dict[str, Any] = dict.fromkeys(METRICS)
        metrics["hit_ratio"] = got.hit_ratio if got.hits + got.misses else None
        metrics["ops_per_sec"] = (len(req) - warm) / got.seconds if got.seconds > 0 else None
        metrics["offered_rate"] = rate
        verdict, reason = "ok", ""
        if got.behind_s > max(0.5, 0.1 * span):
            verdict = "client_bound"
            reason = (f"the replay fell {got.behind_s:.1f} s behind its schedule (this "
                      "client's pace): lower load.rate")
        raw = {"tool": self.tool, "kind": kind, "requests": len(req), "warm_requests": warm,
               "hits": got.hits, "misses": got.misses, "seconds": round(got.seconds, 3),
               "behind_s": round(got.behind_s, 3), "rate": rate, "seed": seed,
               "missing": [m for m, v in metrics.items() if v is None]}
        return LoadResult(metrics, verdict, reason, raw)


def workload_of(spec: LoadSpec) -> tuple[dict[str, Any], float]:
    """(the workload model the replay draws from, its rate in requests/s)."""
    doc = spec.workload_document()
    if doc is None:
        doc = spec.workload.model_dump(mode="json")
        if doc.get("key_size") == "etc" or doc.get("value_size") == "etc" \
                or "etc" in str(doc.get("value_size")):
            raise UserError("load.tool cache-aside draws sizes from a model: give "
                            "load.workload.key_size and value_size as N, A-B or list:..., "
                            "not etc")
    rate = spec.rate or (doc.get("rate") if isinstance(doc.get("rate"), int | float)
                         else None) or DEFAULT_RATE
    return doc, float(rate) * (spec.rate_scale or 1.0)


def requests_of(spec: LoadSpec) -> int:
    """The requests one run replays (UserError past MAX_REQUESTS)."""
    try:
        _, rate = workload_of(spec)
    except ValueError as e:
        raise UserError(f"load.workload_file: {e}") from None
    n = int(rate * (spec.warmup + spec.duration))
    if not 1_000 <= n <= MAX_REQUESTS:
        raise UserError(f"load.tool cache-aside: load.rate × (warmup + duration) is "
                        f"{present.figure(n)} requests; 1,000 to "
                        f"{present.figure(MAX_REQUESTS)} replay in a run")
    return n


__all__ = ["CacheAsideDriver", "kind_for", "requests_of", "workload_of"]
