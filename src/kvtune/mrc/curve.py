"""The curve record, how it is built, and what an operator reads from it: the smallest
memory for a target hit ratio, with its uncertainty.

Every curve is the steady state: the stream's first half warms the cache up, the hit ratio
counts the gets of its second half (as the real-server check measures it).

- `lru`: byte-LRU (key plus value bytes), exact for at most EXACT_REQUESTS requests, else
  SHARDS keeping SAMPLED_KEYS keys (fixed size; bench/mrc/accuracy.py: mean absolute error
  0.004 against exact at 32,000 keys) under SALTS hash salts: the curve is their mean, the
  band their range. An explicit sample rate uses fixed-rate SHARDS.
- a server kind: its memory model's simulation (kinds/<kind>/mrc.py) at each size, on the
  whole stream or, past SIM_REQUESTS requests, on a SHARDS sample as a miniature cache
  (Waldspurger et al., ATC '17: a cache of R·C fed the sample emulates C), one per salt
  for the band.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kvtune import present
from kvtune.errors import UserError
from kvtune.mrc import lru
from kvtune.mrc.model import model_of
from kvtune.mrc.requests import Requests, salted_hash

LRU = "lru"
EXACT_REQUESTS = 300_000
SIM_REQUESTS = 150_000
SAMPLED_KEYS = 32_000
SALTS = 3
POINTS = 16


@dataclass(frozen=True)
class Curve:
    """Hit ratio (`hit_ratio`, with `low`–`high` from the sampling's salts; equal when
    exact) at each memory size in `sizes` (bytes of the kind's memory setting, or of the
    byte-LRU cache)."""

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


def default_rate(req: Requests) -> float:
    return 1.0 if len(req) <= SIM_REQUESTS else max(0.02, SIM_REQUESTS / len(req))


def sample(req: Requests, rate: float, salt: int) -> Requests:
    return req if rate >= 1 else req.take(
        salted_hash(req.key, salt) < np.uint64(int(rate * 2.0 ** 64)))


def default_sizes(req: Requests, kind: str, points: int = POINTS) -> list[int]:
    if kind == LRU:
        _, first = np.unique(req.key, return_index=True)
        top = int(lru.plain_bytes(req.klen[first], req.vlen[first]).sum())
        low = max(1, top // 1000)
    else:
        m = model_of(kind)
        top = m.working_set(req)
        low = m.smallest(top)
    top = max(top, low * 2)
    sizes = [int(x) for x in np.unique(np.geomspace(low, top * 1.1, points).astype(np.int64))]
    return sizes if kind == LRU else model_of(kind).round_sizes(sizes)


def build(req: Requests, kind: str = LRU, sizes: list[int] | None = None,
          sample_rate: float | None = None, salts: int = SALTS) -> Curve:
    """The curve of `req` for `kind` (a server kind with a memory model, or `lru`)."""
    if len(req) < 2:
        raise UserError(f"{req.source}: fewer than two requests")
    model = None if kind == LRU else model_of(kind)
    sizes = sizes or default_sizes(req, kind)
    half_t = float(req.t[len(req) // 2])
    keys = len(np.unique(req.key))
    notes: list[str] = []
    if model is None:
        if sample_rate is None and len(req) > EXACT_REQUESTS and keys > SAMPLED_KEYS:
            curves = np.array([
                lru.shards_fixed_size(req, SAMPLED_KEYS, salt=s, measure_from=half_t)
                .hit_ratio(np.array(sizes)) for s in range(salts)])
            method = f"SHARDS fixed size, {present.figure(SAMPLED_KEYS)} keys, {salts} salts"
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
        sample_rate = sample_rate or default_rate(req)
        n_salts = 1 if sample_rate >= 1 else max(1, min(salts, 2))
        runs = []
        # a model may simulate several sizes at once (the same hit ratios, faster)
        at_sizes = model.simulate_sizes
        for s in range(n_salts):
            sub = sample(req, sample_rate, s)
            mf = int(np.searchsorted(sub.t, half_t)) if sample_rate < 1 else len(req) // 2
            runs.append(at_sizes(sub, list(sizes), mf, sample_rate) if at_sizes is not None
                        else [model.simulate(sub, m, mf, sample_rate) for m in sizes])
        curves = np.array(runs)
        method = ("simulated, whole stream" if sample_rate >= 1 else
                  f"miniature simulation on SHARDS samples R={sample_rate:.4g}, "
                  f"{n_salts} salts")
        notes += model.notes(sample_rate)
    gets = int(np.count_nonzero((req.op == 0) & (req.t >= half_t)))
    return Curve(kind, [int(s) for s in sizes], [round(float(x), 5) for x in curves.mean(0)],
                 [round(float(x), 5) for x in curves.min(0)],
                 [round(float(x), 5) for x in curves.max(0)], method, float(sample_rate),
                 len(req), gets, req.source, notes)


def alternatives(req: Requests, kind: str, memory: int) -> tuple[str, list[dict[str, Any]]]:
    """(title, rows) of the kind's other settings at `memory`, or ("", [])."""
    if kind == LRU:
        return "", []
    model = model_of(kind)
    if model.alternatives is None:
        return "", []
    return model.alternatives_title, model.alternatives(req, memory, default_rate(req))
