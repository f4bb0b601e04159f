"""Redis and Valkey under `maxmemory`: per-key bytes, and eviction as the server does it.

- Bytes per key (Redis 7.0, jemalloc): a dict entry (24 B, allocated as 32), the key's sds
  (1-byte header for keys under 32 bytes, 3 below 256, plus a NUL), the value (an embedded
  string of at most 44 bytes shares one allocation with its 16-byte object header; a longer
  one is a 16-byte object plus an sds with a 3-, 5- or 9-byte header), each rounded up to
  jemalloc's size class; the main dict's buckets (8 B each, a power of two at least the key
  count); a key with a TTL adds an entry in the expires dict and its bucket. The formula is
  a starting point: `kvtune.mrc.check.per_key_bytes` measures the real server's
  used_memory per key, and `scale` carries the ratio (Valkey 8.0 embeds the key in its
  object, and measures lower).
- `maxmemory` counts used_memory: the server's own baseline (about 1 MB with a few
  clients) is not available to data.
- Eviction (`allkeys-lru`, `allkeys-lfu`): before a write, while used memory exceeds the
  limit, `maxmemory-samples` keys are drawn at random into a 16-entry pool ordered by idle
  time (LRU, on the one-second LRU clock) or by 255 minus the LFU counter; the pool's best
  candidate that still exists is evicted. The pool keeps candidates between rounds, with the
  idle time they had when sampled. LFU: a new key's counter is 5; a hit increments it with
  probability 1/((c-5)·lfu-log-factor+1); it decays by one per `lfu-decay-time` minutes.
- Expired keys are removed when found or by the active expiry cycle; modelled as removed at
  once (the cycle keeps fewer than 10% expired keys in its samples).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from kvtune.errors import UserError
from kvtune.mrc.check import Conn, key_name
from kvtune.mrc.model import MemoryModel, SimResult
from kvtune.mrc.requests import DELETE, GET, SET, Requests, salted_hash

POOL = 16
BASELINE = 1_000_000  # used_memory of an idle server with a few clients, about


def _jemalloc(n: np.ndarray) -> np.ndarray:
    """jemalloc's size class of each request of n bytes (8, 16, then four classes per
    doubling)."""
    n = np.maximum(np.asarray(n, dtype=np.int64), 1)
    out = np.where(n <= 8, 8, 0)
    small = (n > 8) & (n <= 128)
    out = np.where(small, (n + 15) // 16 * 16, out)
    big = n > 128
    lg = np.floor(np.log2(np.maximum(n - 1, 1))).astype(np.int64)
    step = np.left_shift(1, np.maximum(lg - 2, 0))
    out = np.where(big, (n + step - 1) // step * step, out)
    return out


def _sds(n: np.ndarray) -> np.ndarray:
    hdr = np.where(n < 32, 1, np.where(n < 256, 3, np.where(n < 65536, 5, 9)))
    return _jemalloc(hdr + n + 1)


def _sds_value(n: np.ndarray) -> np.ndarray:
    hdr = np.where(n < 256, 3, np.where(n < 65536, 5, 9))
    return _jemalloc(hdr + n + 1)


def key_bytes(klen: np.ndarray, vlen: np.ndarray, ttl: np.ndarray | None = None,
              scale: float = 1.0) -> np.ndarray:
    """Bytes of each key's entry, object and strings (not the dict buckets), times
    `scale` (a measured correction)."""
    klen = np.asarray(klen, dtype=np.int64)
    vlen = np.asarray(vlen, dtype=np.int64)
    value = np.where(vlen <= 44, _jemalloc(16 + 3 + vlen + 1), 16 + _sds_value(vlen))
    out = 32 + _sds(klen) + value
    if ttl is not None:
        out = out + np.where(np.asarray(ttl) > 0, 32, 0)
    return np.round(out * scale).astype(np.int64)


def buckets(keys: int) -> int:
    """Bytes of a dict's bucket array holding `keys` keys."""
    return 8 * (1 << max(2, math.ceil(math.log2(max(keys, 1)))))


@dataclass(frozen=True)
class Policy:
    name: str = "allkeys-lru"  # or allkeys-lfu
    samples: int = 5  # maxmemory-samples
    lfu_log_factor: int = 10
    lfu_decay_time: int = 1  # minutes


def simulate(req: Requests, maxmemory: int, policy: Policy = Policy(),
             measure_from: int = 0, baseline: int = BASELINE, scale: float = 1.0,
             bytes_scale: float = 1.0, seed: int = 1) -> SimResult:
    """Redis or Valkey with `maxmemory` bytes over the requests (cache-aside), hit ratio
    of the gets from `measure_from` on. `scale` < 1 is a miniature cache of a sampled
    stream (the data's share of the limit scaled by R)."""
    return _run(req, maxmemory, policy, measure_from, baseline, scale, bytes_scale, seed)[0]


def simulate_sizes(req: Requests, sizes: list[int], policy: Policy = Policy(),
                   measure_from: int = 0, baseline: int = BASELINE, scale: float = 1.0,
                   bytes_scale: float = 1.0, seed: int = 1) -> list[SimResult]:
    """`simulate` at each of `sizes`: the same results, in less time. A run that never
    evicted (used memory plus the buckets never above its room, the limit less the
    baseline, scaled) is the run of every size with as much room or more: the room is read
    only there, and nothing else (no random draw) depends on it."""
    def room(m: int) -> float:
        return (m - baseline) * scale
    out: dict[int, SimResult] = {}
    unmet: tuple[float, SimResult] | None = None  # (room, result) of a run that never evicted
    for j in sorted(range(len(sizes)), key=lambda j: room(sizes[j])):
        if unmet is not None and room(sizes[j]) >= unmet[0]:
            r = unmet[1]
            out[j] = SimResult(sizes[j], r.gets, r.hits, r.evictions)
            continue
        out[j], met = _run(req, sizes[j], policy, measure_from, baseline, scale, bytes_scale,
                           seed)
        if not met:
            unmet = (room(sizes[j]), out[j])
    return [out[j] for j in range(len(sizes))]


def _run(req: Requests, maxmemory: int, policy: Policy, measure_from: int, baseline: int,
         scale: float, bytes_scale: float, seed: int) -> tuple[SimResult, bool]:
    """One size: (its result, whether it ever evicted). Written for speed, the steps and
    the random draws of the model in its order: keys numbered 0..keys-1, their state in
    lists; the bucket bytes of each key count computed once; the pool kept as two sorted
    lists."""
    rng = random.Random(seed)
    n_req = len(req)
    ids, key_id = np.unique(req.key, return_inverse=True)
    size = key_bytes(req.klen, req.vlen, req.ttl, bytes_scale).tolist()
    ops, ts, ttls = req.op.tolist(), req.t.tolist(), req.ttl.tolist()
    # the LRU clock of each request: math.floor of its time
    lru_t = np.floor(req.t).astype(np.int64).tolist() if req.t.dtype == np.float64 \
        and n_req and np.all(np.abs(req.t) < 2.0 ** 62) else [math.floor(t) for t in ts]
    lfu = policy.name.endswith("lfu")
    room = (maxmemory - baseline) * scale
    nan = math.nan
    slots: list[int] = []  # keys, for drawing at random
    index = [-1] * len(ids)  # each key's place in slots, -1: not stored
    cur = [0] * len(ids)
    last: list[float] = [0] * len(ids)  # LRU: access time (s); LFU: last decrement (min)
    counter = [0] * len(ids)
    exp = [nan] * len(ids)  # expiry; NaN: none (never <= a time)
    key_ttl: list[int | None] = [None] * len(ids)
    pscore: list[float] = []  # the pool: scores ascending, and their keys
    pkey: list[int] = []
    used = 0
    hits = evictions = 0
    met = False
    held: dict[int, float] = {}  # bucket bytes at each key count
    decay_time, log_factor = policy.lfu_decay_time, policy.lfu_log_factor

    def remove(k: int) -> None:
        nonlocal used
        i = index[k]
        index[k] = -1
        tail = slots.pop()
        if tail != k:
            slots[i] = tail
            index[tail] = i
        used -= cur[k]
        exp[k] = nan

    def decayed(k: int, now: float) -> int:
        mins = int(now // 60)
        periods = (mins - int(last[k])) // decay_time if decay_time else 0
        return max(0, counter[k] - periods)

    getrandbits, samples = rng.getrandbits, policy.samples

    def evict(now: float, lru_now: int) -> None:
        nonlocal evictions, met, used
        met = True
        pooled = len(pscore)
        while slots:
            n = len(slots)
            h = held.get(n)
            if h is None:
                h = held[n] = buckets(n) * bytes_scale * scale
            if not used + h > room:
                return
            bits = n.bit_length()
            for _ in range(samples if samples < n else n):
                # rng.randrange(n): getrandbits of n's bit length until below n
                r = getrandbits(bits)
                while r >= n:
                    r = getrandbits(bits)
                k = slots[r]
                sc = 255 - decayed(k, now) if lfu else lru_now - last[k]
                if pooled >= POOL and sc <= pscore[0]:
                    continue
                j = bisect_left(pscore, sc)  # before the first as high
                pscore.insert(j, sc)
                pkey.insert(j, k)
                if pooled == POOL:
                    del pscore[0], pkey[0]
                else:
                    pooled += 1
            while pooled:  # the pool's best that is still stored goes
                pscore.pop()
                k = pkey.pop()
                pooled -= 1
                i = index[k]
                if i >= 0:
                    index[k] = -1
                    tail = slots.pop()
                    if tail != k:
                        slots[i] = tail
                        index[tail] = i
                    used -= cur[k]
                    exp[k] = nan
                    evictions += 1
                    break

    split = min(max(math.ceil(measure_from), 0), n_req)  # the first request measured
    stream = zip(key_id.tolist(), ops, ts, lru_t, size, ttls, strict=True)
    warm_hits = 0
    for part in (islice(stream, split), stream):
        for k, op, t, lt, sz, ttl in part:
            if exp[k] <= t:
                remove(k)
            if op == GET:
                if index[k] >= 0:
                    hits += 1
                    if lfu:
                        c = decayed(k, t)
                        if c < 255:
                            base = max(0, c - 5)
                            if rng.random() < 1.0 / (base * log_factor + 1):
                                c += 1
                        counter[k] = c
                        last[k] = t // 60
                    else:
                        last[k] = lt
                    continue
            elif op == DELETE:
                if index[k] >= 0:
                    remove(k)
                continue
            elif op == SET:
                key_ttl[k] = ttl
            # a write: eviction runs before it, as processCommand does
            if slots:
                n = len(slots)
                h = held.get(n)
                if h is None:
                    h = held[n] = buckets(n) * bytes_scale * scale
                if used + h > room:
                    evict(t, lt)
            if index[k] >= 0:
                used -= cur[k]
            else:
                index[k] = len(slots)
                slots.append(k)
                counter[k] = 5
                last[k] = t // 60 if lfu else lt
            cur[k] = sz
            used += sz
            tt = key_ttl[k]
            if tt is None:
                tt = ttl
            exp[k] = t + tt if tt > 0 else nan
            if not lfu:
                last[k] = lt
        if part is not stream:
            warm_hits = hits
    gets = int(np.count_nonzero(req.op[split:] == GET))
    return SimResult(maxmemory, gets, hits - warm_hits, evictions), met


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Client:
    """RESP as the real-server check speaks it: pipelined GET, SET (EX for a TTL), DEL,
    CONFIG RESETSTAT, INFO's keyspace_hits/keyspace_misses."""

    def __init__(self, port: int) -> None:
        self.c = Conn(port)

    def _reply(self) -> bytes | None:
        ln = self.c.line()
        if ln[:1] == b"$":
            n = int(ln[1:])
            return None if n < 0 else self.c.exact(n + 2)[:-2]
        if ln[:1] == b"-":
            raise UserError(f"the server answered {ln[:80]!r}")
        return ln

    def gets(self, keys: list[bytes]) -> list[bool]:
        self.c.send(b"".join(_resp(b"GET", k) for k in keys))
        return [self._reply() is not None for _ in keys]

    def sets(self, items: list[tuple[bytes, int, int]]) -> None:
        self.c.send(b"".join(
            _resp(b"SET", k, b"x" * v, b"EX", b"%d" % ttl) if ttl > 0 else
            _resp(b"SET", k, b"x" * v) for k, v, ttl in items))
        for _ in items:
            self._reply()

    def deletes(self, keys: list[bytes]) -> None:
        self.c.send(b"".join(_resp(b"DEL", k) for k in keys))
        for _ in keys:
            self._reply()

    def reset(self) -> None:
        self.c.send(_resp(b"CONFIG", b"RESETSTAT"))
        self._reply()

    def info(self, section: bytes) -> dict[bytes, bytes]:
        self.c.send(_resp(b"INFO", section))
        text = self._reply() or b""
        return dict(ln.split(b":", 1) for ln in text.split(b"\r\n") if b":" in ln)

    def counts(self) -> tuple[int, int]:
        st = self.info(b"stats")
        return int(st[b"keyspace_hits"]), int(st[b"keyspace_misses"])

    def used_memory(self) -> int:
        return int(self.info(b"memory")[b"used_memory"])

    def close(self) -> None:
        self.c.close()


def per_key_bytes(port: int, req: Requests) -> tuple[float, float]:
    """(used_memory per key, bytes of key plus value per key) of a server with no
    maxmemory, once every distinct key of `req` is stored (measured, not guessed:
    `INFO memory`'s used_memory before and after)."""
    cli = Client(port)
    try:
        before = cli.used_memory()
        _, first = np.unique(req.key, return_index=True)
        items = [(key_name(int(req.key[x]), int(req.klen[x])), int(req.vlen[x]), 0)
                 for x in first.tolist()]
        for a in range(0, len(items), 256):
            cli.sets(items[a:a + 256])
        after = cli.used_memory()
        payload = float(np.mean([len(k) + v for k, v, _ in items]))
        return (after - before) / len(items), payload
    finally:
        cli.close()


def working_set(req: Requests) -> int:
    _, first = np.unique(req.key, return_index=True)
    return int(key_bytes(req.klen[first], req.vlen[first], req.ttl[first]).sum()
               + buckets(len(first)) + BASELINE)


POLICIES = (Policy("allkeys-lru", 5), Policy("allkeys-lru", 10), Policy("allkeys-lfu", 5))


def alternatives(req: Requests, memory: int, sample_rate: float,
                 bytes_scale: float = 1.0) -> list[dict[str, object]]:
    """The hit ratio at `memory` under each eviction setting of POLICIES, on the same
    stream (a sample at `sample_rate`, as a miniature cache)."""
    sub = req
    if sample_rate < 1:
        sub = req.take(salted_hash(req.key, 0) < np.uint64(int(sample_rate * 2.0 ** 64)))
    mf = len(sub) // 2
    return [{"setting": f"{p.name}, maxmemory-samples {p.samples}",
             "hit_ratio": round(simulate(sub, memory, p, measure_from=mf, scale=sample_rate,
                                         bytes_scale=bytes_scale).hit_ratio, 4)}
            for p in POLICIES]


def configured(stats: dict[str, Any]) -> int | None:
    """`maxmemory` in bytes, from the INFO a study stores (`stats["info"]`; None when 0:
    no limit)."""
    info = stats.get("info") if isinstance(stats, dict) else None
    v = info.get("maxmemory") if isinstance(info, dict) else None
    return int(v) if isinstance(v, int | float) and v > 0 else None


def model(name: str, bytes_scale: float = 1.0, notes: tuple[str, ...] = ()) -> MemoryModel:
    """The memory model of this kind (or a fork of it: `bytes_scale` corrects the
    per-key bytes)."""
    return MemoryModel(
        name=name,
        simulate=lambda req, memory, measure_from, scale: simulate(
            req, memory, measure_from=measure_from, scale=scale,
            bytes_scale=bytes_scale).hit_ratio,
        simulate_sizes=lambda req, sizes, measure_from, scale: [
            r.hit_ratio for r in simulate_sizes(req, sizes, measure_from=measure_from,
                                                scale=scale, bytes_scale=bytes_scale)],
        working_set=working_set,
        smallest=lambda top: BASELINE + max(64 << 10, (top - BASELINE) // 200),
        client=Client,
        alternatives=lambda req, memory, rate: alternatives(req, memory, rate, bytes_scale),
        alternatives_title="eviction (maxmemory-policy; the curve is allkeys-lru with 5 "
                           "samples)",
        notes=lambda rate: list(notes),
        configured=configured,
        memory_knob=f"{name}.maxmemory_mb",
    )


MODEL = model("redis")

__all__ = ["MODEL", "Client", "Policy", "SimResult", "buckets", "key_bytes", "model",
           "per_key_bytes", "simulate", "simulate_sizes", "working_set"]
