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
from dataclasses import dataclass
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
    rng = random.Random(seed)
    size = key_bytes(req.klen, req.vlen, req.ttl, bytes_scale).tolist()
    keys, ops, ts, ttls = req.key.tolist(), req.op.tolist(), req.t.tolist(), req.ttl.tolist()
    lfu = policy.name.endswith("lfu")
    room = (maxmemory - baseline) * scale
    slots: list[int] = []  # keys, for drawing at random
    index: dict[int, int] = {}
    cur: dict[int, int] = {}
    last: dict[int, float] = {}  # LRU: access time (s); LFU: last decrement time (min)
    counter: dict[int, int] = {}
    exp: dict[int, float] = {}
    key_ttl: dict[int, int] = {}
    pool: list[tuple[float, int]] = []  # (score, key), ascending score
    used = 0
    gets = hits = evictions = 0

    def remove(k: int) -> None:
        nonlocal used
        i = index.pop(k)
        tail = slots.pop()
        if tail != k:
            slots[i] = tail
            index[tail] = i
        used -= cur.pop(k)
        last.pop(k, None)
        counter.pop(k, None)
        exp.pop(k, None)

    def score(k: int, now: float) -> float:
        if lfu:
            return 255 - _decayed(k, now)
        return math.floor(now) - last[k]

    def _decayed(k: int, now: float) -> int:
        mins = int(now // 60)
        periods = (mins - int(last[k])) // policy.lfu_decay_time if policy.lfu_decay_time \
            else 0
        return max(0, counter[k] - periods)

    # the dict's bucket bytes at the last key count asked (a write asks at the count of
    # the one before, mostly)
    held = [-1, 0.0]
    getrandbits, samples = rng.getrandbits, policy.samples

    def evict(now: float) -> None:
        # the hot path of a curve (every write asks): the bucket bytes looked up, an LRU
        # score and the draw inline; the same draws and evictions as randrange, score()
        # and buckets() give
        nonlocal evictions
        lru_now = math.floor(now)
        while slots:
            n = len(slots)
            if held[0] != n:
                held[0], held[1] = n, buckets(n) * bytes_scale * scale
            if not used + held[1] > room:
                return
            bits = n.bit_length()
            for _ in range(min(samples, n)):
                # rng.randrange(n), inline: Random's own draw below n (getrandbits of n's
                # bit length until below n), the same numbers without its two calls
                r = getrandbits(bits)
                while r >= n:
                    r = getrandbits(bits)
                k = slots[r]
                sc = score(k, now) if lfu else lru_now - last[k]
                if len(pool) >= POOL and sc <= pool[0][0]:
                    continue
                j = 0
                while j < len(pool) and pool[j][0] < sc:
                    j += 1
                pool.insert(j, (sc, k))
                if len(pool) > POOL:
                    pool.pop(0)
            while pool:
                _, k = pool.pop()
                if k in index:
                    remove(k)
                    evictions += 1
                    break

    def touch(k: int, now: float) -> None:
        if lfu:
            c = _decayed(k, now)
            if c < 255:
                base = max(0, c - 5)
                if rng.random() < 1.0 / (base * policy.lfu_log_factor + 1):
                    c += 1
            counter[k] = c
            last[k] = now // 60
        else:
            last[k] = math.floor(now)

    for i in range(len(keys)):
        k, op, t = keys[i], ops[i], ts[i]
        if k in exp and exp[k] <= t:
            remove(k)
        if op == DELETE:
            if k in index:
                remove(k)
            continue
        if op == SET:
            key_ttl[k] = ttls[i]
        if op == GET:
            if i >= measure_from:
                gets += 1
            if k in index:
                if i >= measure_from:
                    hits += 1
                touch(k, t)
                continue
        # a write: eviction runs before it, as processCommand does
        evict(t)
        if k in index:
            used -= cur[k]
        else:
            index[k] = len(slots)
            slots.append(k)
            counter[k] = 5
            last[k] = t // 60 if lfu else math.floor(t)
        cur[k] = size[i]
        used += size[i]
        tt = key_ttl.get(k, ttls[i])
        if tt > 0:
            exp[k] = t + tt
        else:
            exp.pop(k, None)
        if not lfu:
            last[k] = math.floor(t)
    return SimResult(maxmemory, gets, hits, evictions)


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
           "per_key_bytes", "simulate", "working_set"]
