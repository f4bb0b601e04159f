"""The curve record, how it is built for each kind of cache, and what an operator reads
from it: the smallest memory for a target hit ratio, with its uncertainty.

Every curve is the steady state: the stream's first half warms the cache up, the hit ratio
counts the gets of its second half (as the real-server check measures it).

- `lru`: byte-LRU (key plus value bytes), exact for at most EXACT_REQUESTS requests, else
  SHARDS keeping SAMPLED_KEYS keys (fixed size; bench/mrc/accuracy.py: mean absolute error
  0.004 against exact at 32,000 keys) under SALTS hash salts: the curve is their mean, the
  band their range. An explicit sample rate uses fixed-rate SHARDS.
- `memcached`, `redis`, `valkey`: the simulators of kvtune.mrc.memcached and
  kvtune.mrc.redis at each size, on the whole stream or, past SIM_REQUESTS requests, on a
  SHARDS sample as a miniature cache (Waldspurger et al., ATC '17: a cache of R·C fed the
  sample emulates C), one per salt for the band.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kvtune.errors import UserError
from kvtune.mrc import lru, memcached, redis
from kvtune.mrc.requests import Requests, salted_hash

KINDS = ("memcached", "redis", "valkey", "lru")
EXACT_REQUESTS = 300_000
SIM_REQUESTS = 150_000
SAMPLED_KEYS = 32_000
SALTS = 3
POINTS = 16


@dataclass(frozen=True)
class Curve:
    """Hit ratio (`hit_ratio`, with `low`–`high` from the sampling's salts; equal when
    exact) at each memory size in `sizes` (bytes: memcached's -m, Redis's maxmemory, the
    byte-LRU cache's bytes)."""

    kind: str
    sizes: list[int]
    hit_ratio: list[float]
    low: list[float]
    high: list[float]
    method: str
    sample_rate: float
    requests: int
    gets_measured: int
    source: str
    notes: list[str] = field(default_factory=list)

    def smallest_memory(self, target: float) -> tuple[int | None, int | None, int | None]:
        """(estimate, low, high) of the smallest size reaching `target`: from the mean
        curve and from the band's upper and lower edges; None where the largest size
        computed does not reach it."""
        def first(h: list[float]) -> int | None:
            arr = np.maximum.accumulate(np.asarray(h))
            idx = np.flatnonzero(arr >= target)
            if not len(idx):
                return None
            i = int(idx[0])
            if i == 0:
                return self.sizes[0]
            # linear between the two sizes around the crossing
            x0, x1, y0, y1 = self.sizes[i - 1], self.sizes[i], arr[i - 1], arr[i]
            return int(x0 + (x1 - x0) * (target - y0) / max(y1 - y0, 1e-12))
        return first(self.hit_ratio), first(self.high), first(self.low)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def working_set(req: Requests, kind: str) -> int:
    """Bytes the stream's distinct keys take at once in this kind of cache (each at its
    first size): where the curve's sizes end."""
    _, first = np.unique(req.key, return_index=True)
    k, v = req.klen[first], req.vlen[first]
    if kind == "memcached":
        s = memcached.Settings()
        sizes = np.array(s.chunk_sizes())
        idx = np.minimum(np.searchsorted(sizes, s.item_bytes(k, v)), len(sizes) - 1)
        return int(sizes[idx].sum() + len(sizes) * memcached.PAGE)
    if kind in ("redis", "valkey"):
        return int(redis.key_bytes(k, v, req.ttl[first]).sum() + redis.buckets(len(first))
                   + redis.BASELINE)
    return int(lru.plain_bytes(k, v).sum())


def default_sizes(req: Requests, kind: str, points: int = POINTS) -> list[int]:
    top = working_set(req, kind)
    low = memcached.PAGE if kind == "memcached" else (
        redis.BASELINE + max(64 << 10, (top - redis.BASELINE) // 200) if kind != "lru"
        else max(1, top // 1000))
    top = max(top, low * 2)
    sizes = np.unique(np.geomspace(low, top * 1.1, points).astype(np.int64))
    if kind == "memcached":
        sizes = np.unique(np.maximum(1, np.round(sizes / memcached.PAGE)).astype(np.int64)
                          * memcached.PAGE)
    return [int(x) for x in sizes]


def build(req: Requests, kind: str = "memcached", sizes: list[int] | None = None,
          sample_rate: float | None = None, salts: int = SALTS,
          settings: memcached.Settings | None = None,
          policy: redis.Policy | None = None, bytes_scale: float = 1.0) -> Curve:
    if kind not in KINDS:
        raise UserError(f"--kind {kind}: one of {', '.join(KINDS)}")
    if len(req) < 2:
        raise UserError(f"{req.source}: fewer than two requests")
    sizes = sizes or default_sizes(req, kind)
    half_t = float(req.t[len(req) // 2])
    half_i = len(req) // 2
    keys = len(np.unique(req.key))
    notes: list[str] = []
    if kind == "lru":
        if sample_rate is None and len(req) > EXACT_REQUESTS and keys > SAMPLED_KEYS:
            curves = np.array([
                lru.shards_fixed_size(req, SAMPLED_KEYS, salt=s, measure_from=half_t)
                .hit_ratio(np.array(sizes)) for s in range(salts)])
            method = f"SHARDS fixed size, {SAMPLED_KEYS:,} keys, {salts} salts"
            sample_rate = SAMPLED_KEYS / keys
        else:
            sample_rate = sample_rate or 1.0
            n_salts = 1 if sample_rate >= 1 else salts
            curves = np.array([
                lru.shards_fixed_rate(req, sample_rate, salt=s, measure_from=half_t)
                .hit_ratio(np.array(sizes)) for s in range(n_salts)])
            method = "exact stack distances" if sample_rate >= 1 else \
                f"SHARDS fixed rate R={sample_rate:.4g}, {n_salts} salts"
    else:
        if sample_rate is None:
            sample_rate = 1.0 if len(req) <= SIM_REQUESTS else max(
                0.02, SIM_REQUESTS / len(req))
        n_salts = 1 if sample_rate >= 1 else max(1, min(salts, 2))
        runs = []
        for s in range(n_salts):
            sub = req
            if sample_rate < 1:
                h = salted_hash(req.key, s)
                sub = req.take(h < np.uint64(int(sample_rate * 2.0 ** 64)))
            mf = int(np.searchsorted(sub.t, half_t)) if sample_rate < 1 else half_i
            row = []
            for m in sizes:
                if kind == "memcached":
                    r = memcached.simulate(sub, m, settings or memcached.Settings(),
                                           measure_from=mf, scale=sample_rate)
                    row.append(r.hit_ratio)
                else:
                    rr = redis.simulate(sub, m, policy or redis.Policy(), measure_from=mf,
                                        scale=sample_rate, bytes_scale=bytes_scale)
                    row.append(rr.hit_ratio)
            runs.append(row)
        curves = np.array(runs)
        method = ("simulated, whole stream" if sample_rate >= 1 else
                  f"miniature simulation on SHARDS samples R={sample_rate:.4g}, "
                  f"{n_salts} salts")
        if kind == "memcached" and sample_rate < 0.1:
            notes.append("a miniature memcached has pages of R MiB: at small R the page "
                         "split over slab classes is coarse")
        if kind == "valkey" and bytes_scale == 1.0:
            notes.append("per-key bytes from Redis 7.0's layout; Valkey 8.0 measures lower "
                         "(docs/evaluation.md): calibrate on the server for a tighter curve")
    gets = int(np.count_nonzero((req.op == 0) & (req.t >= half_t)))
    return Curve(kind, [int(s) for s in sizes], [round(float(x), 5) for x in curves.mean(0)],
                 [round(float(x), 5) for x in curves.min(0)],
                 [round(float(x), 5) for x in curves.max(0)], method, float(sample_rate),
                 len(req), gets, req.source, notes)


def slab_alternatives(req: Requests, memory: int,
                      factors: tuple[float, ...] = (1.08, 1.15, 1.25, 1.5, 2.0),
                      sample_rate: float | None = None) -> list[dict[str, Any]]:
    """memcached's hit ratio at `memory` under other growth factors (-f), and without the
    rebalancer (slab_automove=0), with the bytes its chunks waste per item (chunk minus
    item), on the same stream."""
    if sample_rate is None:
        sample_rate = 1.0 if len(req) <= SIM_REQUESTS else max(0.02, SIM_REQUESTS / len(req))
    sub = req
    if sample_rate < 1:
        sub = req.take(salted_hash(req.key, 0) < np.uint64(int(sample_rate * 2.0 ** 64)))
    out = []
    for f, automove in [(f, True) for f in factors] + [(1.25, False)]:
        st = memcached.Settings(growth_factor=f, automove=automove)
        r = memcached.simulate(sub, memory, st, measure_from=len(sub) // 2,
                               scale=sample_rate)
        item = st.item_bytes(sub.klen, sub.vlen)
        chunks = np.array(st.chunk_sizes())
        idx = np.minimum(np.searchsorted(chunks, item), len(chunks) - 1)
        waste = float(np.mean(np.maximum(chunks[idx] - item, 0)))
        out.append({"growth_factor": f, "slab_automove": 1 if automove else 0,
                    "classes": len(chunks),
                    "hit_ratio": round(r.hit_ratio, 4), "waste_per_item": round(waste, 1)})
    return out
