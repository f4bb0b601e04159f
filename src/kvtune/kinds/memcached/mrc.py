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
from dataclasses import dataclass, field
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
    # the automover's view: evictions and pages at its last look, its window
    evicted_before: int = 0
    pages_before: int = 0
    window: list[tuple[float, int, int]] = field(default_factory=list)  # (age, dirty, evicted)


def simulate(req: Requests, memory: int, settings: Settings = Settings(),
             measure_from: int = 0, scale: float = 1.0, automove: bool | None = None
             ) -> SimResult:
    """memcached with `memory` bytes of `-m` over the requests; the hit ratio counts the
    gets from index `measure_from` on (the ones before warm the cache up). `scale` < 1
    simulates a miniature cache (a sampled stream at rate R: pages of R·page_size).
    `automove` (default: the settings') runs the rebalancer's rule once a second of the
    stream's time."""
    if automove is None:
        automove = settings.automove
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
        return True

    next_look = 1.0
    looks = 0
    atime: dict[int, float] = {}  # each item's last access (memcached's it->time)

    def move_page(src: int, dst: int) -> None:
        nonlocal pages_left, evictions
        sc = classes[src]
        # the page's items go: what the class's free chunks cannot hold is evicted
        drop = max(0, sc.per_page - (sc.pages * sc.per_page - sc.used))
        while drop > 0:
            q = sc.cold if sc.cold else (sc.hot if sc.hot else sc.warm)
            if not q:
                break
            k = next(iter(q))
            drop -= where[k][1]
            unlink(k)
            evictions += 1
        sc.pages -= 1
        if dst < 0:
            pages_left += 1
        else:
            classes[dst].pages += 1

    for i in range(len(keys)):
        k, op, t = keys[i], ops[i], ts[i]
        while automove and t >= next_look:
            looks += 1
            mv = _automove(classes, next_look, atime, looks)
            if mv is not None:
                move_page(*mv)
            next_look += 1.0
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
                atime[k] = t
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
        atime[k] = t
        sc.used += n
        where[k] = (c, n, t + tt if tt > 0 else inf)
        juggle(sc)
    return SimResult(memory, gets, hits, evictions,
                     {i + 1: sc.pages for i, sc in enumerate(classes) if sc.pages})


AUTOMOVE_WINDOW = 30  # slab_automove_window
AUTOMOVE_RATIO = 0.8  # slab_automove_ratio


def _automove(classes: list[_Class], t: float, atime: dict[int, float],
              looks: int) -> tuple[int, int] | None:
    """memcached 1.6's slab_automove=1 (slab_automove.c), run once a second: per class a
    window of 30 looks (the age of its COLD tail, whether it evicted, whether it gained
    a page); a class with more than 2.5 pages of free chunks and a clean window gives a
    page back (destination 0); else, once the window has filled, a page moves from the
    oldest class (window-average age, more than 2 pages) to the youngest class that
    evicted in more than half the window (or did a quarter of this second's evictions)
    and evicted in this second, when the youngest's age is below 0.8 of the oldest's.
    Returns (source, destination) as class indexes (destination -1: the global pool)."""
    total = sum(sc.evictions - sc.evicted_before for sc in classes)
    oldest = youngest = None
    oldest_age, youngest_age = -1.0, math.inf
    youngest_evicting = False
    move: tuple[int, int] | None = None
    for n, sc in enumerate(classes):
        ev = sc.evictions - sc.evicted_before
        dirty = 1 if ev > 0 or sc.pages > sc.pages_before else 0
        tail = next(iter(sc.cold), None) if sc.cold else None
        age = t - atime[tail] if tail is not None else 0.0
        sc.window.append((age, dirty, 1 if ev > 0 else 0))
        if len(sc.window) > AUTOMOVE_WINDOW:
            sc.window.pop(0)
        w_age = sum(a for a, _, _ in sc.window) / AUTOMOVE_WINDOW
        w_dirty = sum(d for _, d, _ in sc.window)
        w_evicted = sum(e for _, _, e in sc.window)
        sc.evicted_before, sc.pages_before = sc.evictions, sc.pages
        if move is None and sc.pages * sc.per_page - sc.used > sc.per_page * 2.5 \
                and w_dirty == 0:
            move = (n, -1)
        if w_age > oldest_age and sc.pages > 2:
            oldest, oldest_age = n, w_age
        if w_age < youngest_age and (w_evicted > AUTOMOVE_WINDOW / 2 or ev > total / 4):
            youngest, youngest_age = n, w_age
            youngest_evicting = ev > 0
    if move is not None:
        return move
    if youngest is not None and oldest is not None and looks > AUTOMOVE_WINDOW \
            and youngest != oldest and youngest_age < oldest_age * AUTOMOVE_RATIO \
            and youngest_evicting:
        return oldest, youngest
    return None


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
           "simulate", "working_set"]
