"""Byte-LRU miss-ratio curves: exact stack distances (Mattson's, over item bytes, computed
in arrays), and SHARDS spatial sampling (Waldspurger et al., FAST '15) in its
fixed-rate and fixed-size forms.

The stack distance of a get is the bytes of the distinct items touched since its key was
last touched, its own item included: a byte-LRU cache of C bytes hits it iff the distance
is at most C. A get of a key never stored, deleted since, or expired (its set's time plus
TTL is past) misses at every size, and fills the cache (cache-aside). Written here rather
than taken from libCacheSim: kvtune's traces hold hashed keys and per-request TTLs already
in arrays, the curve needs the TTL rule above and per-kind item bytes, and the Python
binding (libcachesim 0.3.5) pulls boto3 and pytest in as run-time dependencies of a tool
that runs as root.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvtune.mrc.requests import DELETE, GET, SET, Requests, salted_hash

ItemBytes = Callable[[np.ndarray, np.ndarray], np.ndarray]


def plain_bytes(klen: np.ndarray, vlen: np.ndarray) -> np.ndarray:
    """Key plus value: the byte-LRU curve's item size, with no server's overhead."""
    return klen.astype(np.int64) + vlen.astype(np.int64)


@dataclass(frozen=True)
class Distances:
    """Per counted get: its stack distance in bytes (inf: misses at every size) and its
    weight (1, or 1/R of a sampled stream). `gets` is the weight of all gets counted (the
    denominator of the hit ratio)."""

    distance: np.ndarray
    weight: np.ndarray
    gets: float

    def hit_ratio(self, sizes: np.ndarray) -> np.ndarray:
        order = np.argsort(self.distance, kind="stable")
        d = self.distance[order]
        cw = np.concatenate([[0.0], np.cumsum(self.weight[order])])
        idx = np.searchsorted(d, np.asarray(sizes, dtype=np.float64), side="right")
        if self.gets <= 0:
            return np.zeros(len(np.atleast_1d(sizes)))
        return np.clip(cw[idx] / self.gets, 0.0, 1.0)


def stack_distances(req: Requests, item_bytes: ItemBytes = plain_bytes,
                    scale: float = 1.0, weight: float = 1.0,
                    measure_from: float = 0.0) -> Distances:
    """Exact byte-LRU stack distances of the gets of `req` (every request of it is
    simulated), each distance multiplied by `scale` (1/R for a sampled stream); only the
    gets at or after time `measure_from` are counted (the ones before warm up).

    Computed offline, in arrays: a request j (not a delete) holds its item's bytes from j
    until its key's next request nxt(j) (any: a get or set moves the item to the top, a
    delete removes it). A get i of a key whose last request p was not a delete (nor expired)
    has the distance size(p) + the bytes of the requests j in (p, i) still held at i
    (nxt(j) >= i):

        size(p) + [C(i) - C(p + 1)] - [E(i) - X(p)]

    with C(x) the bytes of the requests before x, E(x) those of the requests whose nxt is
    before x, and X(p) those of the requests before p whose nxt is before nxt(p) = i (a
    two-dimensional dominance sum: _held_before). The same integers as Mattson's algorithm
    over a Fenwick tree walked request by request, which this replaced (commit 428d32d:
    compared equal on seeded streams), 3-7 times faster; tests/test_mrc.py checks them
    against a byte-LRU cache simulated item by item."""
    size = np.asarray(item_bytes(req.klen, req.vlen), dtype=np.int64)
    counted = (req.op == GET) & (req.t >= measure_from)
    q, dist = _byte_distances(req.key, req.op, req.t, req.ttl, size, counted)
    out = np.full(len(req), math.inf)
    out[q] = dist * scale
    d = out[counted]
    return Distances(d, np.full(len(d), weight), float(len(d)) * weight)


def _byte_distances(key: np.ndarray, op: np.ndarray, t: np.ndarray, ttl: np.ndarray,
                    size: np.ndarray, counted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """stack_distances' integers: (the requests among `counted` that find their item,
    their distances in bytes); the other counted ones miss at every size."""
    n = len(key)
    prev, nxt = _neighbours(key)
    deleted = op == DELETE
    held = np.where(deleted, 0, size)  # the bytes each request holds until its key's next
    present = (prev >= 0) & ~deleted[np.maximum(prev, 0)]
    hits = counted & present
    if hits.any() and (ttl > 0).any():
        hits &= ~_expired(key, op, t, ttl, present)
    q = np.flatnonzero(hits)
    if not len(q):
        return q, np.zeros(0, dtype=np.int64)
    p = prev[q]
    before = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(held, out=before[1:])
    ended = np.zeros(n + 1, dtype=np.int64)  # by nxt: each position is one request's
    gone = nxt < n
    ended[nxt[gone] + 1] = held[gone]
    np.cumsum(ended, out=ended)
    x = _held_before(nxt, held)[p]
    return q, size[p] + (before[q] - before[p + 1]) - (ended[q] - x)


def _neighbours(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each request's previous and next request of the same key (-1, len(key): none)."""
    n = len(key)
    order = np.argsort(key, kind="stable")
    same = key[order][1:] == key[order][:-1]
    prev, nxt = np.full(n, -1, dtype=np.int64), np.full(n, n, dtype=np.int64)
    prev[order[1:][same]] = order[:-1][same]
    nxt[order[:-1][same]] = order[1:][same]
    return prev, nxt


def _expired(keys: np.ndarray, ops: np.ndarray, ts: np.ndarray, ttls: np.ndarray,
             present: np.ndarray) -> np.ndarray:
    """Whether each request finds its key's item expired (its expiry time, set when it was
    stored, or fetched into the cache after a miss, by the TTL of the key's last set or
    else the request's own, is past): walked request by request, over the keys that ever
    have a TTL only."""
    out = np.zeros(len(keys), dtype=bool)
    sel = np.flatnonzero(np.isin(keys, keys[ttls > 0]))
    exp: dict[int, float] = {}
    key_ttl: dict[int, int] = {}
    inf = math.inf
    for i, k, op, t, ttl, there in zip(sel.tolist(), keys[sel].tolist(), ops[sel].tolist(),
                                       ts[sel].tolist(), ttls[sel].tolist(),
                                       present[sel].tolist(), strict=True):
        if op == DELETE:
            exp.pop(k, None)
            continue
        if op == SET:
            key_ttl[k] = ttl
        gone = exp.get(k, inf) <= t
        if gone:
            out[i] = True
        if op == SET or not there or gone:
            tt = key_ttl.get(k, ttl)
            exp[k] = t + tt if tt > 0 else inf
    return out


def _held_before(b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """For each point e (in order): the sum of w over the points before it whose b is
    smaller, by merging sorted blocks (1, 2, 4, ... points; a stable sort of two sorted
    runs): in each merge, every point of the right block adds the weights of the left
    block's points merged before it (at an equal b, the right block's point goes first)."""
    m = len(b)
    acc = np.zeros(m, dtype=np.int64)
    if m < 2:
        return acc
    big = np.int64(2 * (int(b.max()) + 1))
    b2 = 2 * np.asarray(b, dtype=np.int64)
    order = np.arange(m)  # before the merge of level l: each block of 2^l points sorted by b
    at = np.arange(m)
    cl = np.zeros(m + 1, dtype=np.int64)
    level = 0
    while (1 << level) < m:
        left = ((at >> level) & 1) == 0
        perm = np.argsort((at >> (level + 1)) * big + b2[order] + left, kind="stable")
        order = order[perm]
        from_left = left[perm]
        np.cumsum(np.where(from_left, w[order], 0), out=cl[1:])
        r = np.flatnonzero(~from_left)
        acc[order[r]] += cl[r] - cl[(r >> (level + 1)) << (level + 1)]
        level += 1
    return acc


def shards_fixed_rate(req: Requests, rate: float, salt: int = 0,
                      item_bytes: ItemBytes = plain_bytes,
                      measure_from: float = 0.0) -> Distances:
    """SHARDS at a fixed sampling rate R: the keys whose salted hash falls below R·2^64,
    their distances scaled by 1/R; the count of sampled gets corrected to its expectation
    (SHARDS_adj: the difference counts at distance 0)."""
    if not 0 < rate <= 1:
        raise ValueError("rate in (0, 1]")
    if rate >= 1:
        return stack_distances(req, item_bytes, measure_from=measure_from)
    h = salted_hash(req.key, salt)
    cut = np.uint64(min(int(rate * 2.0 ** 64), (1 << 64) - 1))
    sub = req.take(h < cut)
    d = stack_distances(sub, item_bytes, scale=1.0 / rate, measure_from=measure_from)
    expected = int(np.count_nonzero((req.op == GET) & (req.t >= measure_from))) * rate
    diff = expected - len(d.distance)
    dist = np.concatenate([d.distance, [0.0]])
    w = np.concatenate([d.weight, [diff]])
    return Distances(dist, w / rate, expected / rate)


def shards_fixed_size(req: Requests, max_keys: int, salt: int = 0,
                      item_bytes: ItemBytes = plain_bytes,
                      measure_from: float = 0.0) -> Distances:
    """SHARDS with at most `max_keys` keys tracked: the threshold falls (the key of the
    largest hash leaves) whenever one more would be tracked; each get counts with weight
    1/R at the rate of its time, its distance scaled by 1/R; the difference between the
    gets of the stream and the sample's weight counts at distance 0 (SHARDS_adj).

    The sample is walked request by request (the threshold, the keys tracked, the rate at
    each get); a key that leaves is a delete of it in the sampled stream (its hash is the
    new threshold: it never comes back), whose stack distances are stack_distances'."""
    hashes = salted_hash(req.key, salt)
    sizes = item_bytes(req.klen, req.vlen)
    n = len(req)
    two64 = float(2 ** 64)
    thresh = 2 ** 64  # keys with hash < thresh are sampled
    tracked: set[int] = set()  # the keys sampled and stored
    heap: list[tuple[int, int]] = []  # (-hash, key) of tracked keys
    walked: list[int] = []  # the sampled stream: a request's index, or -1: a key leaving
    leaving: list[int] = []  # the keys leaving, in order
    rates: list[float] = []  # R at each counted get
    wts: list[float] = []
    total = 0.0
    # The threshold only falls: each chunk is cut by the threshold at its start (numpy),
    # and only the requests left are walked.
    chunk = 1 << 16
    for a in range(0, n, chunk):
        hh = hashes[a:a + chunk]
        sel = np.flatnonzero(hh < np.uint64(min(thresh, (1 << 64) - 1))) if thresh < 2 ** 64 \
            else np.arange(len(hh))
        idx = (sel + a).tolist()
        h_c = hh[sel].tolist()
        k_c = req.key[a:a + chunk][sel].tolist()
        op_c = req.op[a:a + chunk][sel].tolist()
        t_c = req.t[a:a + chunk][sel].tolist()
        for j, i in enumerate(idx):
            k, hk = k_c[j], h_c[j]
            if hk >= thresh:
                continue
            walked.append(i)
            op = op_c[j]
            if op == DELETE:
                tracked.discard(k)
                continue
            if op == GET and t_c[j] >= measure_from:
                r = thresh / two64
                total += 1 / r
                wts.append(1 / r)
                rates.append(r)
            if k not in tracked:
                tracked.add(k)
                heapq.heappush(heap, (-hk, k))
            while len(tracked) > max_keys:
                nh, ek = heapq.heappop(heap)
                if ek not in tracked:
                    continue
                thresh = -nh
                tracked.remove(ek)
                walked.append(-1)
                leaving.append(ek)
    w = np.array(walked, dtype=np.int64)
    real = w >= 0
    at = np.maximum.accumulate(np.maximum(w, 0)) if len(w) else w  # a key leaving: the
    key = req.key[at]  # request it leaves after (its time is not read)
    key[~real] = np.array(leaving, dtype=req.key.dtype)
    op = np.where(real, req.op[at], DELETE)
    t = req.t[at]
    counted = real & (op == GET) & (t >= measure_from)
    q, dist = _byte_distances(key, op, t, np.where(real, req.ttl[at], 0),
                              np.where(real, sizes[at], 0), counted)
    r_of = np.zeros(len(w))
    r_of[counted] = rates
    out = np.full(len(w), math.inf)
    out[q] = dist / r_of[q]
    # SHARDS_adj: the gets the sample stands for, against the gets there were
    gets = float(np.count_nonzero((req.op == GET) & (req.t >= measure_from)))
    return Distances(np.concatenate([out[counted], [0.0]]),
                     np.array([*wts, gets - total], dtype=np.float64), gets)


__all__ = ["GET", "SET", "Distances", "plain_bytes", "shards_fixed_rate",
           "shards_fixed_size", "stack_distances"]
