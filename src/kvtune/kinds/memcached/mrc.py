"""memcached as it allocates memory (1.6): item bytes, slab classes, 1 MiB pages handed to
classes as they fill, a segmented LRU per class, TTL expiry.

- Item bytes: 48 (header) + 8 (CAS, unless -C) + key + 1 + value + 2 (CRLF) + 4 when the
  client flags are not 0 (kvload and kvtune's check send 0).
- Chunk sizes: 48 + `-n` (48) = 96, then times `-f` (1.25) rounded up to 8, up to
  `slab_chunk_max` (half a page, 512 KiB): 39 classes at the defaults, as memcached 1.6.18
  prints them with -vv (checked by tests/test_mrc.py against the real server's
  `stats slabs`). An item larger than `slab_chunk_max` is chained over chunks of it.
- Pages: `-m` MiB of 1 MiB pages, given to a class when it has no free chunk; a class with no
  page takes its first one even past the limit. Once the pages are gone, a class evicts from
  its own LRU. The rebalancer (slab_automove=1, on by default) moves at most a page a
  second, after a 30-second window, and only when ages differ widely; `_automove` follows
  its rule (on, as in memcached; `Settings(automove=False)` for `slab_automove=0`).
- LRU: HOT (new items, at most 20% of the class's items), WARM (at most 40%), COLD. An item
  fetched a second time is active; an active item leaving HOT's tail goes to WARM, an
  inactive one to COLD; an active COLD item is bumped to WARM when fetched; WARM's tail
  goes back to WARM's head when active, else to COLD; evictions take COLD's tail (HOT's when
  COLD is empty). Expired items are misses; their memory is reused when they reach a tail.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

from kvtune.errors import UserError
from kvtune.mrc.check import Conn
from kvtune.mrc.model import MemoryModel, SimResult
from kvtune.mrc.requests import DELETE, GET, SET, Requests, salted_hash

PAGE = 1 << 20
HEADER = 48
CAS = 8


@dataclass(frozen=True)
class Settings:
    """The memcached settings that decide where an item goes."""

    growth_factor: float = 1.25  # -f
    chunk_min: int = 48  # -n
    slab_chunk_max: int = PAGE // 2
    page_size: int = PAGE  # -I
    cas: bool = True  # -C turns it off
    hot_pct: float = 0.20
    warm_pct: float = 0.40
    automove: bool = True  # slab_automove=1, memcached's default

    def chunk_sizes(self) -> list[int]:
        """The chunk size of each slab class, smallest first (memcached's slabs_init)."""
        if self.growth_factor <= 1.0:
            raise ValueError("-f must be above 1")
        sizes: list[int] = []
        size = HEADER + self.chunk_min
        while len(sizes) < 62 and size <= self.slab_chunk_max / self.growth_factor:
            if size % 8:
                size += 8 - size % 8
            sizes.append(size)
            size = int(size * self.growth_factor)
        sizes.append(self.slab_chunk_max)
        return sizes

    def item_bytes(self, klen: np.ndarray, vlen: np.ndarray) -> np.ndarray:
        return (HEADER + (CAS if self.cas else 0) + 1 + 2 + klen.astype(np.int64)
                + vlen.astype(np.int64))


def classes_of(settings: Settings, item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class index, chunks used) of each item size; items beyond slab_chunk_max chain
    chunks of the largest class."""
    sizes = np.array(settings.chunk_sizes(), dtype=np.int64)
    cls = np.searchsorted(sizes, item, side="left")
    big = cls >= len(sizes)
    chunks = np.ones(len(item), dtype=np.int64)
    chunks[big] = -(-item[big] // settings.slab_chunk_max)
    cls[big] = len(sizes) - 1
    return cls.astype(np.int64), chunks


AUTOMOVE_WINDOW = 30  # slab_automove_window
AUTOMOVE_RATIO = 0.8  # slab_automove_ratio


def simulate(req: Requests, memory: int, settings: Settings = Settings(),
             measure_from: int = 0, scale: float = 1.0, automove: bool | None = None
             ) -> SimResult:
    """memcached with `memory` bytes of `-m` over the requests; the hit ratio counts the
    gets from index `measure_from` on (the ones before warm the cache up). `scale` < 1
    simulates a miniature cache (a sampled stream at rate R: pages of R·page_size).
    `automove` (default: the settings') runs the rebalancer's rule once a second of the
    stream's time."""
    return _run(_Stream.of(req, settings), memory, settings, measure_from, scale,
                automove)[0]


def simulate_sizes(req: Requests, sizes: list[int], settings: Settings = Settings(),
                   measure_from: int = 0, scale: float = 1.0, automove: bool | None = None
                   ) -> list[SimResult]:
    """`simulate` at each of `sizes`: the same results, in less time. The stream is read
    once; and a run that never met its limit (never had to evict or reclaim an item to make
    room) is the run of every larger size. Its pages_left (the pages `-m` has not given out)
    is read only where a class needs a page, and there the run took one (a class takes a
    page when pages_left > 0 or it has none); a run from more pages has at every request
    the same state and at least as many pages left (taking a page lowers both by one, or
    the larger alone when the smaller is at 0; a page the rebalancer frees adds one to
    both; the rebalancer reads no pages_left), so it takes the same branches: the same
    gets, hits, evictions and pages. Sizes are run from the fewest pages up."""
    stream = _Stream.of(req, settings)
    order = sorted(range(len(sizes)), key=lambda j: _limit_pages(sizes[j], settings, scale))
    out: dict[int, SimResult] = {}
    unmet: tuple[int, SimResult] | None = None  # (pages, result) of a run that never met
    for j in order:
        pages = _limit_pages(sizes[j], settings, scale)
        if unmet is not None and pages >= unmet[0]:
            r = unmet[1]
            out[j] = SimResult(sizes[j], r.gets, r.hits, r.evictions, dict(r.pages))
            continue
        out[j], met_limit = _run(stream, sizes[j], settings, measure_from, scale, automove)
        if not met_limit:
            unmet = (pages, out[j])
    return [out[j] for j in range(len(sizes))]


def _limit_pages(memory: int, settings: Settings, scale: float) -> int:
    """The pages `-m` gives (of R·page_size in a miniature cache)."""
    page = max(1, int(settings.page_size * scale))
    return max(0, int(memory // page)) if scale >= 1 else max(0, int(memory * scale // page))


@dataclass(frozen=True)
class _Stream:
    """The requests as the simulation reads them, one list per field: each key numbered
    (0..keys-1), the time of a get (+inf for other requests: an item is a hit when its
    expiry is later), the expiry an item stored by the request has (its time plus the TTL
    of its key's last set so far, else its own; +inf for none), its time, its slab class
    (-1: a delete) and chunks."""

    keys: int
    key: list[int]
    t_get: list[float]
    expiry: list[float]
    t: list[float]
    cls: list[int]
    chunks: list[int]
    op: np.ndarray
    seconds: np.ndarray  # whole seconds of the largest time so far (when the rebalancer looks)

    @staticmethod
    def of(req: Requests, settings: Settings) -> _Stream:
        n = len(req)
        cls, chunks = classes_of(settings, settings.item_bytes(req.klen, req.vlen))
        cls = np.where(req.op == DELETE, -1, cls)
        order = np.argsort(req.key, kind="stable")  # each key's requests, in time order
        first = np.ones(n, dtype=bool)
        first[1:] = req.key[order][1:] != req.key[order][:-1]
        group = np.cumsum(first) - 1
        key = np.empty(n, dtype=np.int64)
        key[order] = group
        inf = math.inf
        if req.t.dtype == np.float64 and not req.ttl.any():  # no TTL: nothing expires
            t_get = np.where(req.op == GET, req.t, inf).tolist()
            expiry = [inf] * n
        elif req.t.dtype == np.float64:
            pos = np.arange(n)
            last_set = np.maximum.accumulate(np.where(req.op[order] == SET, pos, -1))
            ttl = req.ttl[order]
            ttl = np.where(last_set >= np.flatnonzero(first)[group],
                           ttl[np.maximum(last_set, 0)], ttl)
            tt = np.empty_like(ttl)
            tt[order] = ttl
            t_get = np.where(req.op == GET, req.t, inf).tolist()
            expiry = np.where(tt > 0, req.t + tt, inf).tolist()
        else:  # the same, one request at a time, in the stream's own numbers
            key_ttl: dict[int, int] = {}
            t_get, expiry = [], []
            for k, op, t, ttl_ in zip(key.tolist(), req.op.tolist(), req.t.tolist(),
                                      req.ttl.tolist(), strict=True):
                if op == SET:
                    key_ttl[k] = ttl_
                t_ = key_ttl.get(k, ttl_)
                t_get.append(t if op == GET else inf)
                expiry.append(t + t_ if t_ > 0 else inf)
        seconds = np.maximum.accumulate(np.nan_to_num(np.maximum(np.floor(
            np.asarray(req.t, dtype=np.float64)), 0.0), nan=0.0)).astype(np.int64) \
            if n else np.zeros(0, dtype=np.int64)
        return _Stream(int(group[-1]) + 1 if n else 0, key.tolist(), t_get, expiry,
                       req.t.tolist(), cls.tolist(), chunks.tolist(), req.op, seconds)


def _run(s: _Stream, memory: int, settings: Settings, measure_from: int, scale: float,
         automove: bool | None) -> tuple[SimResult, bool]:
    """The simulation at one memory size: (its result, whether it met its limit).

    Written for speed, the model's steps in its order: each stored item is one list,
    [class, chunks, expiry, its queue (its class's HOT, WARM or COLD), fetched (0: not yet,
    1: fetched, 2: fetched and active), last access], and a key with none holds GONE; a
    get that hits an item fetched and active (most gets) reads one list; a set that
    replaces an item of its class updates its list; each class's free chunks and items
    are kept, not recounted; the stream is cut where the rebalancer looks and where the
    measured gets begin, not tested at each request."""
    if automove is None:
        automove = settings.automove
    page = max(1, int(settings.page_size * scale))
    sizes = settings.chunk_sizes()
    ncls = len(sizes)
    per_page = [max(1, page // c) if scale >= 1 else max(1, int(PAGE // c * scale))
                for c in sizes]
    pages_left = _limit_pages(memory, settings, scale)
    hot_q: list[OrderedDict[int, None]] = [OrderedDict() for _ in sizes]
    warm_q: list[OrderedDict[int, None]] = [OrderedDict() for _ in sizes]
    cold_q: list[OrderedDict[int, None]] = [OrderedDict() for _ in sizes]
    pages = [0] * ncls
    free = [0] * ncls  # pages · per_page − chunks holding items
    count = [0] * ncls  # items (in HOT, WARM and COLD)
    evicted = [0] * ncls  # evictions to make room (what the rebalancer counts)
    # the rebalancer's view: evictions and pages at its last look, its window
    evicted_before = [0] * ncls
    pages_before = [0] * ncls
    win_age: list[list[float]] = [[] for _ in sizes]
    win_dirty: list[list[int]] = [[] for _ in sizes]
    win_evicted: list[list[int]] = [[] for _ in sizes]
    inf = math.inf
    gone: list[Any] = [-1, 0, -inf, None, 0, 0.0]  # expired before any time: never a hit
    items: list[list[Any]] = [gone] * s.keys
    evictions = 0
    met_limit = False
    hot_most, warm_most = _most(settings.hot_pct, s.keys), _most(settings.warm_pct, s.keys)

    def juggle(c: int) -> None:
        n_items = count[c]
        hot = hot_q[c]
        lim = hot_most[n_items]
        while hot and len(hot) > lim:
            k, _ = hot.popitem(last=False)
            it = items[k]
            if it[4] == 2:  # active: to WARM, inactive
                it[4] = 1
                q = warm_q[c]
            else:
                q = cold_q[c]
            q[k] = None
            it[3] = q
        warm = warm_q[c]
        lim = warm_most[n_items]
        while warm and len(warm) > lim:
            k, _ = warm.popitem(last=False)
            it = items[k]
            if it[4] == 2:  # active: back to WARM's head, inactive
                it[4] = 1
                warm[k] = None
            else:
                cold = cold_q[c]
                cold[k] = None
                it[3] = cold

    def make_room(c: int, n: int, t: float) -> bool:
        nonlocal pages_left, evictions, met_limit
        while free[c] < n:
            if pages_left > 0 or pages[c] == 0:
                pages[c] += 1
                free[c] += per_page[c]
                pages_left = max(0, pages_left - 1)
                continue
            met_limit = True
            q = cold_q[c] or hot_q[c] or warm_q[c]
            if not q:
                return False
            k, _ = q.popitem(last=False)
            it = items[k]
            items[k] = gone
            free[c] += it[1]
            count[c] -= 1
            if not it[2] <= t:  # not expired
                evictions += 1
                evicted[c] += 1
        return True

    def move_page(src: int, dst: int) -> None:
        nonlocal pages_left, evictions
        # the page's items go: what the class's free chunks cannot hold is evicted
        drop = max(0, per_page[src] - free[src])
        while drop > 0:
            q = cold_q[src] or hot_q[src] or warm_q[src]
            if not q:
                break
            k, _ = q.popitem(last=False)
            it = items[k]
            items[k] = gone
            drop -= it[1]
            free[src] += it[1]
            count[src] -= 1
            evictions += 1
        pages[src] -= 1
        free[src] -= per_page[src]
        if dst < 0:
            pages_left += 1
        else:
            pages[dst] += 1
            free[dst] += per_page[dst]

    def look(t: float, looks: int) -> None:
        """memcached 1.6's slab_automove=1 (slab_automove.c), run once a second: per class
        a window of 30 looks (the age of its COLD tail, whether it evicted, whether it
        gained a page); a class with more than 2.5 pages of free chunks and a clean window
        gives a page back (to the global pool); else, once the window has filled, a page
        moves from the oldest class (window-average age, more than 2 pages) to the
        youngest class that evicted in more than half the window (or did a quarter of this
        second's evictions) and evicted in this second, when the youngest's age is below
        0.8 of the oldest's."""
        total = sum(evicted[x] - evicted_before[x] for x in range(ncls))
        oldest = youngest = -1
        oldest_age, youngest_age = -1.0, inf
        youngest_evicting = False
        move: tuple[int, int] | None = None
        for x in range(ncls):
            ev = evicted[x] - evicted_before[x]
            pg = pages[x]
            cold = cold_q[x]
            age = t - items[next(iter(cold))][5] if cold else 0.0
            ages, dirty, evd = win_age[x], win_dirty[x], win_evicted[x]
            ages.append(age)
            dirty.append(1 if ev > 0 or pg > pages_before[x] else 0)
            evd.append(1 if ev > 0 else 0)
            if len(ages) > AUTOMOVE_WINDOW:
                del ages[0], dirty[0], evd[0]
            w_age = sum(ages) / AUTOMOVE_WINDOW
            evicted_before[x], pages_before[x] = evicted[x], pg
            if move is None and free[x] > per_page[x] * 2.5 and not any(dirty):
                move = (x, -1)
            if w_age > oldest_age and pg > 2:
                oldest, oldest_age = x, w_age
            if w_age < youngest_age and (sum(evd) > AUTOMOVE_WINDOW / 2 or ev > total / 4):
                youngest, youngest_age = x, w_age
                youngest_evicting = ev > 0
        if move is not None:
            move_page(*move)
        elif youngest >= 0 and oldest >= 0 and looks > AUTOMOVE_WINDOW \
                and youngest != oldest and youngest_age < oldest_age * AUTOMOVE_RATIO \
                and youngest_evicting:
            move_page(oldest, youngest)

    n_req = len(s.key)
    split = min(max(math.ceil(measure_from), 0), n_req)  # the first request measured
    due = s.seconds if automove else np.zeros(n_req, dtype=np.int64)  # looks before i
    cuts = sorted({split, n_req, *np.flatnonzero(np.diff(due, prepend=0)).tolist()})
    looks_due = due.tolist()
    stream = zip(s.key, s.t_get, s.expiry, s.t, s.cls, s.chunks, strict=True)
    looks = 0
    hits = warm_hits = 0
    at = 0
    for cut in cuts:
        for k, tg, e, t, c, n in islice(stream, cut - at):
            it = items[k]
            if it[2] > tg:  # a get, of an item stored and not expired
                hits += 1
                it[5] = tg
                if it[4] == 2:
                    continue
                if it[4] == 0:  # fetched for the first time
                    it[4] = 1
                    continue
                q = it[3]
                if q is cold_q[it[0]]:  # fetched again in COLD: to WARM, inactive
                    del q[k]
                    warm = warm_q[it[0]]
                    warm[k] = None
                    it[3] = warm
                    juggle(it[0])
                else:  # fetched again: active
                    it[4] = 2
                continue
            if c < 0:  # a delete
                if it is not gone:
                    items[k] = gone
                    del it[3][k]
                    free[it[0]] += it[1]
                    count[it[0]] -= 1
                continue
            # a set, or a get that missed: the item is stored (as new), in place of the
            # item stored under its key if any
            hot = hot_q[c]
            if it is gone:
                if free[c] < n and not make_room(c, n, t):
                    continue
                hot[k] = None
                items[k] = [c, n, e, hot, 0, t]
                free[c] -= n
                cnt = count[c] + 1
                count[c] = cnt
            elif it[0] == c and (it[1] == n or free[c] + it[1] >= n):
                # the same class, and room once the old item goes (free chunks are never
                # negative): its list is reused
                if it[1] != n:
                    free[c] += it[1] - n
                    it[1] = n
                q = it[3]
                if q is hot:
                    hot.move_to_end(k)
                else:
                    del q[k]
                    hot[k] = None
                    it[3] = hot
                it[2] = e
                it[4] = 0
                it[5] = t
                cnt = count[c]
            else:
                del it[3][k]
                free[it[0]] += it[1]
                count[it[0]] -= 1
                items[k] = gone
                if free[c] < n and not make_room(c, n, t):
                    continue
                hot[k] = None
                items[k] = [c, n, e, hot, 0, t]
                free[c] -= n
                cnt = count[c] + 1
                count[c] = cnt
            # juggle(c), its usual case written out: one item leaves HOT's tail
            if len(hot) > hot_most[cnt]:
                k, _ = hot.popitem(last=False)
                it = items[k]
                if it[4] == 2:  # active: to WARM, inactive
                    it[4] = 1
                    q = warm_q[c]
                else:
                    q = cold_q[c]
                q[k] = None
                it[3] = q
                if len(hot) > hot_most[cnt] or len(warm_q[c]) > warm_most[cnt]:
                    juggle(c)
            elif len(warm_q[c]) > warm_most[cnt]:
                juggle(c)
        at = cut
        if cut == split:
            warm_hits = hits
        if cut < n_req:
            while looks < looks_due[cut]:
                looks += 1
                look(float(looks), looks)
    gets = int(np.count_nonzero(s.op[split:] == GET))
    return (SimResult(memory, gets, hits - warm_hits, evictions,
                      {x + 1: pages[x] for x in range(ncls) if pages[x]}), met_limit)


def _most(pct: float, items: int) -> list[int]:
    """At each item count x up to `items`, the longest queue that is not over pct·x (a
    queue of L items is over it when L > pct·x: when L > floor(pct·x), the same product)."""
    big = float(1 << 62)  # beyond any queue: no queue is over NaN or +inf, all over -inf
    with np.errstate(invalid="ignore"):  # inf·0
        lim = np.floor(pct * np.arange(items + 1, dtype=np.float64))
    return np.clip(np.nan_to_num(lim, nan=big, posinf=big, neginf=-big), -big, big
                   ).astype(np.int64).tolist()


class Client:
    """memcached's text protocol, as the real-server check speaks it: pipelined gets,
    sets with noreply closed by `mn`, `stats reset`, `get_hits`/`get_misses` (expired gets
    are among the misses)."""

    def __init__(self, port: int) -> None:
        self.c = Conn(port)

    def gets(self, keys: list[bytes]) -> list[bool]:
        self.c.send(b"get " + b" ".join(keys) + b"\r\n")
        found: set[bytes] = set()
        while True:
            ln = self.c.line()
            if ln == b"END":
                break
            if not ln.startswith(b"VALUE "):
                raise UserError(f"the server answered {ln[:60]!r} to a get")
            parts = ln.split()
            self.c.exact(int(parts[3]) + 2)
            found.add(parts[1])
        return [k in found for k in keys]

    def sets(self, items: list[tuple[bytes, int, int]]) -> None:
        out = [b"set %s 0 %d %d noreply\r\n%s\r\n" % (k, ttl, v, b"x" * v)
               for k, v, ttl in items]
        out.append(b"mn\r\n")
        self.c.send(b"".join(out))
        ln = self.c.line()
        if ln != b"MN":
            raise UserError(f"the server answered {ln[:60]!r} to a set")

    def deletes(self, keys: list[bytes]) -> None:
        self.c.send(b"".join(b"delete %s noreply\r\n" % k for k in keys) + b"mn\r\n")
        self.c.line()

    def reset(self) -> None:
        self.c.send(b"stats reset\r\n")
        self.c.line()

    def counts(self) -> tuple[int, int]:
        self.c.send(b"stats\r\n")
        st = {}
        while (ln := self.c.line()) != b"END":
            p = ln.split()
            st[p[1]] = p[2]
        return int(st[b"get_hits"]), int(st[b"get_misses"])

    def close(self) -> None:
        self.c.close()


def configured(stats: dict[str, Any]) -> int | None:
    """`-m` in bytes, from the stats a study stores (`stats`'s limit_maxbytes)."""
    v = (stats.get("stats") or {}).get("limit_maxbytes") if isinstance(stats, dict) else None
    return int(v) if isinstance(v, int | float) and v > 0 else None


def working_set(req: Requests, settings: Settings = Settings()) -> int:
    """The chunks the stream's distinct keys take at once (each at its first size), plus a
    page per class."""
    _, first = np.unique(req.key, return_index=True)
    sizes = np.array(settings.chunk_sizes())
    item = settings.item_bytes(req.klen[first], req.vlen[first])
    idx = np.minimum(np.searchsorted(sizes, item), len(sizes) - 1)
    return int(sizes[idx].sum() + len(sizes) * settings.page_size)


def alternatives(req: Requests, memory: int, sample_rate: float,
                 factors: tuple[float, ...] = (1.08, 1.15, 1.25, 1.5, 2.0)
                 ) -> list[dict[str, object]]:
    """The hit ratio at `memory` under other growth factors (-f), and without the
    rebalancer (slab_automove=0), with the bytes the chunks waste per item (chunk minus
    item), on the same stream (a sample at `sample_rate`, as a miniature cache)."""
    sub = req
    if sample_rate < 1:
        sub = req.take(salted_hash(req.key, 0) < np.uint64(int(sample_rate * 2.0 ** 64)))
    out: list[dict[str, object]] = []
    for f, automove in [(f, True) for f in factors] + [(1.25, False)]:
        st = Settings(growth_factor=f, automove=automove)
        r = simulate(sub, memory, st, measure_from=len(sub) // 2, scale=sample_rate)
        item = st.item_bytes(sub.klen, sub.vlen)
        chunks = np.array(st.chunk_sizes())
        idx = np.minimum(np.searchsorted(chunks, item), len(chunks) - 1)
        waste = float(np.mean(np.maximum(chunks[idx] - item, 0)))
        out.append({"setting": f"-f {f}" if automove else "-o slab_automove=0",
                    "growth_factor": f, "slab_automove": 1 if automove else 0,
                    "classes": len(chunks), "hit_ratio": round(r.hit_ratio, 4),
                    "waste_per_item": round(waste, 1)})
    return out


MODEL = MemoryModel(
    name="memcached",
    simulate=lambda req, memory, measure_from, scale: simulate(
        req, memory, measure_from=measure_from, scale=scale).hit_ratio,
    simulate_sizes=lambda req, sizes, measure_from, scale: [
        r.hit_ratio for r in simulate_sizes(req, sizes, measure_from=measure_from,
                                            scale=scale)],
    working_set=working_set,
    smallest=lambda top: PAGE,
    client=Client,
    round_sizes=lambda sizes: sorted({max(1, round(s / PAGE)) * PAGE for s in sizes}),
    alternatives=alternatives,
    alternatives_title="slab settings (defaults: -f 1.25, slab_automove=1)",
    notes=lambda rate: ["a miniature memcached has pages of R MiB: at small R the page "
                        "split over slab classes is coarse"] if rate < 0.1 else [],
    configured=configured,
    memory_knob="memcached.memory_mb",
)

__all__ = ["MODEL", "Client", "Settings", "SimResult", "alternatives", "classes_of",
           "simulate", "simulate_sizes", "working_set"]
