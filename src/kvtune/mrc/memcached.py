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
  its own LRU: the rebalancer (slab_automove=1) moves at most a page a second, and only
  when ages differ widely, so pages stay where the fill put them (`automove` simulates the
  mover's rule at that pace; off by default).
- LRU: HOT (new items, at most 20% of the class's items), WARM (at most 40%), COLD. An item
  fetched a second time is active; an active item leaving HOT's tail goes to WARM, an
  inactive one to COLD; an active COLD item is bumped to WARM when fetched; WARM's tail
  goes back to WARM's head when active, else to COLD; evictions take COLD's tail (HOT's when
  COLD is empty). Expired items are misses; their memory is reused when they reach a tail.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from kvtune.mrc.requests import DELETE, GET, SET, Requests

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


@dataclass
class _Class:
    chunk: int
    per_page: int
    pages: int = 0
    used: int = 0  # chunks holding items
    hot: OrderedDict[int, bool] = field(default_factory=OrderedDict)  # key -> active
    warm: OrderedDict[int, bool] = field(default_factory=OrderedDict)
    cold: OrderedDict[int, bool] = field(default_factory=OrderedDict)
    evictions: int = 0
    last_evict: float = -math.inf
    touched: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SimResult:
    memory: int
    gets: int
    hits: int
    evictions: int
    pages: dict[int, int]

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.gets if self.gets else 0.0


def simulate(req: Requests, memory: int, settings: Settings = Settings(),
             measure_from: int = 0, scale: float = 1.0, automove: bool = False
             ) -> SimResult:
    """memcached with `memory` bytes of `-m` over the requests; the hit ratio counts the
    gets from index `measure_from` on (the ones before warm the cache up). `scale` < 1
    simulates a miniature cache (a sampled stream at rate R: pages of R·page_size)."""
    page = max(1, int(settings.page_size * scale))
    sizes = settings.chunk_sizes()
    chunk_scaled = sizes
    item = settings.item_bytes(req.klen, req.vlen)
    cls_arr, chunks_arr = classes_of(settings, item)
    classes = [_Class(c, max(1, page // c) if scale >= 1 else max(1, int(PAGE // c * scale)))
               for c in chunk_scaled]
    limit_pages = max(0, int(memory // page)) if scale >= 1 else max(
        0, int(memory * scale // page))
    pages_left = limit_pages
    where: dict[int, tuple[int, int, float]] = {}  # key -> (class, chunks, expiry)
    fetched: set[int] = set()
    keys, ops, ts = req.key.tolist(), req.op.tolist(), req.t.tolist()
    ttls = req.ttl.tolist()
    cl, ch = cls_arr.tolist(), chunks_arr.tolist()
    key_ttl: dict[int, int] = {}
    gets = hits = evictions = 0
    inf = math.inf

    def unlink(k: int) -> None:
        c, n, _ = where.pop(k)
        sc = classes[c]
        for q in (sc.hot, sc.warm, sc.cold):
            if k in q:
                del q[k]
                break
        sc.used -= n
        fetched.discard(k)

    def juggle(sc: _Class) -> None:
        items = len(sc.hot) + len(sc.warm) + len(sc.cold)
        while sc.hot and len(sc.hot) > settings.hot_pct * items:
            k, active = sc.hot.popitem(last=False)
            if active:
                sc.warm[k] = False
            else:
                sc.cold[k] = False
        while sc.warm and len(sc.warm) > settings.warm_pct * items:
            k, active = sc.warm.popitem(last=False)
            if active:
                sc.warm[k] = False
            else:
                sc.cold[k] = False

    def make_room(c: int, n: int, t: float) -> bool:
        nonlocal pages_left, evictions
        sc = classes[c]
        while sc.pages * sc.per_page - sc.used < n:
            if pages_left > 0 or sc.pages == 0:
                sc.pages += 1
                pages_left = max(0, pages_left - 1)
                continue
            q = sc.cold if sc.cold else (sc.hot if sc.hot else sc.warm)
            if not q:
                return False
            k = next(iter(q))
            expired = where[k][2] <= t
            unlink(k)
            if not expired:
                evictions += 1
                sc.evictions += 1
                sc.last_evict = t
        return True

    last_move = 0.0
    for i in range(len(keys)):
        k, op, t = keys[i], ops[i], ts[i]
        if automove and t - last_move >= 1.0:
            last_move = t
            _automove(classes, t)
        if op == DELETE:
            if k in where:
                unlink(k)
            continue
        if op == SET:
            key_ttl[k] = ttls[i]
        w = where.get(k)
        if op == GET:
            if i >= measure_from:
                gets += 1
            if w is not None and w[2] > t:
                if i >= measure_from:
                    hits += 1
                sc = classes[w[0]]
                if k in fetched:
                    if k in sc.cold:
                        del sc.cold[k]
                        sc.warm[k] = False
                        juggle(sc)
                    elif k in sc.hot:
                        sc.hot[k] = True
                    elif k in sc.warm:
                        sc.warm[k] = True
                else:
                    fetched.add(k)
                continue
        # a set, or a get that missed: the item is stored (as new)
        if w is not None:
            unlink(k)
        c, n = cl[i], ch[i]
        if not make_room(c, n, t):
            continue
        tt = key_ttl.get(k, ttls[i])
        sc = classes[c]
        sc.hot[k] = False
        sc.used += n
        where[k] = (c, n, t + tt if tt > 0 else inf)
        juggle(sc)
    return SimResult(memory, gets, hits, evictions,
                     {i + 1: sc.pages for i, sc in enumerate(classes) if sc.pages})


def _automove(classes: list[_Class], t: float) -> None:
    """slab_automove=1's rule, once a second: a page from the class whose LRU tail is
    oldest (with more than 2 pages) to the class that evicted most recently, when the
    youngest evicting class's tail age is below 0.8 of the oldest's."""

    def tail_age(sc: _Class) -> float:
        return 0.0 if not sc.used else sc.last_evict

    evicting = [sc for sc in classes if t - sc.last_evict <= 1.0]
    donors = [sc for sc in classes if sc.pages > 2]
    if not evicting or not donors:
        return
    young = max(evicting, key=lambda sc: sc.last_evict)
    old = min(donors, key=lambda sc: sc.last_evict)
    if old is young or t - old.last_evict <= 1.25 * max(t - young.last_evict, 1e-9):
        return
    # the page's items leave the donor (the mover evicts what it cannot rescue)
    free = old.pages * old.per_page - old.used
    drop = max(0, old.per_page - free)
    for q in (old.cold, old.hot, old.warm):
        while drop > 0 and q:
            q.popitem(last=False)
            old.used -= 1
            drop -= 1
    old.pages -= 1
    young.pages += 1
    _ = tail_age


def memory_floor(settings: Settings = Settings()) -> int:
    """The smallest -m memcached accepts is not what limits a prediction: classes may
    take a first page past it. Returned: one page."""
    return settings.page_size


__all__ = ["GET", "SET", "Settings", "SimResult", "classes_of", "memory_floor", "simulate"]
