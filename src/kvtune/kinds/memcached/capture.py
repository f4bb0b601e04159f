"""Capturing a running memcached's traffic (`kvtune workload capture memcached://...`):
`watch fetchers mutations` (memcached >= 1.5), its lines put back in order, multigets
assembled, `stats` before and after for the true rate and the watcher's cost
(workload/capture.py has the whole method)."""

from __future__ import annotations

import contextlib
import heapq
import time
from collections.abc import Callable
from typing import Any

from kvtune import present
from kvtune.errors import HarnessError
from kvtune.workload.capture import (
    BASELINE_S,
    MGET_GAP,
    Bounds,
    Capture,
    Conn,
    Target,
    _cost,
    key_hasher,
    read_window,
)
from kvtune.workload.model import ModelBuilder

DRAIN_S = 5.0  # at most this long to read what the watcher still holds after the window
REORDER_WINDOW = 20_000  # lines held to put the watcher's output back in gid order


def memcached_stats(t: Target) -> dict[str, float]:
    c = Conn(t)
    try:
        c.send(b"stats\r\n")
        out: dict[str, float] = {}
        deadline = time.monotonic() + 3
        for line in c.lines(deadline):
            if line == b"END":
                return out
            if line.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")) \
                    or not line.startswith(b"STAT "):
                raise HarnessError(f"{t} does not answer `stats` as memcached does "
                                   f"({line[:40]!r})")
            parts = line.split(b" ", 2)
            with contextlib.suppress(ValueError, IndexError):
                out[parts[1].decode()] = float(parts[2])
        raise HarnessError(f"{t}: no answer to `stats` within 3 s")
    finally:
        c.close()


def _ts(v: bytes) -> float:
    """memcached prints the microseconds of `ts=` without zero padding (1.6: "%d.%d"):
    ts=1795588663.69981 is 69,981 µs after the second."""
    sec, _, frac = v.partition(b".")
    return int(sec) + (int(frac) / 1e6 if frac else 0.0)


def mc_request_total(st: dict[str, float]) -> float:
    """Requests a memcached served, keys of a multiget counted each (as its fetch lines)."""
    return sum(st.get(k, 0.0) for k in (
        "cmd_get", "cmd_set", "cmd_touch", "delete_hits", "delete_misses", "incr_hits",
        "incr_misses", "decr_hits", "decr_misses"))


def mc_cpu(st: dict[str, float]) -> float:
    return st.get("rusage_user", 0.0) + st.get("rusage_system", 0.0)


class WatchAssembler:
    """Watcher lines in gid order to requests, per connection (module docstring)."""

    def __init__(self, b: ModelBuilder, hasher: Callable[[bytes], int],
                 mget_gap: float = MGET_GAP) -> None:
        self.b = b
        self.hash = hasher
        self.mget_gap = mget_gap
        self.heap: list[tuple[int, bytes, dict[bytes, bytes]]] = []
        self.groups: dict[bytes, list[tuple[float, bytes, int, int | None]]] = {}
        self.skipped = 0
        self.lines = 0
        self.gets = 0  # key fetches (a set's own fetch excluded)
        self.sets = 0
        self.unparsed = 0
        self.out_of_order = 0
        self.last_gid = -1

    def feed(self, line: bytes, until: float | None = None) -> float | None:
        """Takes one watcher line; returns its time. A line at or after `until` (the end
        of the window, while draining what the watcher still holds) is not taken."""
        if line.startswith(b"skipped="):
            try:
                self.skipped += int(line.split(b"=", 1)[1].split()[0])
            except ValueError:
                self.unparsed += 1
            return None
        try:
            f = dict(p.split(b"=", 1) for p in line.split(b" "))
            gid = int(f[b"gid"])
            ts = _ts(f[b"ts"])
        except (ValueError, KeyError):
            self.unparsed += 1
            return None
        if until is not None and ts >= until:
            return ts
        self.lines += 1
        heapq.heappush(self.heap, (gid, line, f))
        if len(self.heap) > REORDER_WINDOW:
            self._take(heapq.heappop(self.heap))
        return ts
        if len(self.heap) > REORDER_WINDOW:
            self._take(heapq.heappop(self.heap))

    def finish(self) -> None:
        while self.heap:
            self._take(heapq.heappop(self.heap))
        for cfd in list(self.groups):
            self._flush(cfd)

    def _take(self, item: tuple[int, bytes, dict[bytes, bytes]]) -> None:
        gid, _, f = item
        if gid < self.last_gid:
            self.out_of_order += 1  # later than the window could repair
        self.last_gid = max(self.last_gid, gid)
        kind, key, cfd = f.get(b"type"), f.get(b"key"), f.get(b"cfd", b"?")
        if key is None or kind not in (b"item_get", b"item_store"):
            self.unparsed += 1
            return
        try:
            ts = _ts(f.get(b"ts", b"0"))
            size = int(f.get(b"size", b"0"))
        except ValueError:
            self.unparsed += 1
            return
        group = self.groups.setdefault(cfd, [])
        if kind == b"item_get":
            # A gap of 0 never groups: every fetch is its own get, even two logged in the
            # same microsecond.
            if group and (self.mget_gap <= 0 or ts - group[-1][0] > self.mget_gap):
                self._flush(cfd)
                group = self.groups.setdefault(cfd, [])
            found = size if f.get(b"status") == b"found" else None
            group.append((ts, key, len(key), found))
            return
        # A store: the fetch just before it on this connection, of the same key, is its own.
        if group and group[-1][1] == key:
            group.pop()
        self._flush(cfd)
        try:
            ttl = int(f.get(b"ttl", b"0"))
        except ValueError:
            ttl = 0
        self.sets += 1
        self.b.request(ts, "set", [(self.hash(key), len(key))], value_size=size, ttl=ttl,
                       conn=cfd)

    def _flush(self, cfd: bytes) -> None:
        group = self.groups.pop(cfd, [])
        if not group:
            return
        hits = 0
        for _, _, _, found in group:
            if found is not None:
                hits += 1
                self.b.hit_size(found)
        self.gets += len(group)
        self.b.request(group[0][0], "get", [(self.hash(k), n) for _, k, n, _ in group],
                       conn=cfd, hits=hits, item_sizes=[found for *_, found in group])


def capture_memcached(t: Target, bounds: Bounds, say: Callable[[str], None],
                      mget_gap: float = MGET_GAP, trace: Any = None) -> Capture:
    hasher = key_hasher()
    b = ModelBuilder(source=str(t), trace=trace)
    s0 = memcached_stats(t)
    time.sleep(BASELINE_S)
    s1 = memcached_stats(t)
    w = Conn(t)
    try:
        w.send(b"watch fetchers mutations\r\n")
        w.s.settimeout(3)
        first = w.line()
        if first != b"OK":
            raise HarnessError(f"{t} refused `watch fetchers mutations` ({first[:60]!r}): "
                               "memcached 1.5 or later is needed, and the watcher must be "
                               "allowed")
        say(f"capturing {t} for {bounds.duration:g} s (watch fetchers mutations)")
        asm = WatchAssembler(b, hasher, mget_gap)
        wall0 = time.time()
        stop, _ = read_window(w, asm.feed, lambda: asm.lines, bounds)
        wall1 = time.time()
        s2 = memcached_stats(t)  # the server's counts at the end of the window
        drained = 0
        if stop == "time":
            # What memcached logged before the end but the watcher has not sent yet.
            for line in w.lines(time.monotonic() + DRAIN_S):
                ts = asm.feed(line, until=wall1)
                drained += 1
                if (ts is not None and ts >= wall1 + 0.05) or w.read >= bounds.max_bytes:
                    break
        window = wall1 - wall0
    finally:
        w.close()
    asm.finish()
    served = mc_request_total(s2) - mc_request_total(s1)
    seen = asm.gets + asm.sets
    cap = Capture(b, window)
    cap.facts = {
        "stopped_by": stop, "watch_lines": asm.lines, "drained_lines": drained,
        "mget_gap_us": mget_gap * 1e6, "skipped_lines": asm.skipped,
        "unparsed_lines": asm.unparsed, "out_of_order_after_window": asm.out_of_order,
        "served_during_capture": served, "seen": seen,
        "seen_fraction": round(seen / served, 4) if served else None,
    }
    hits = s2.get("get_hits", 0) - s1.get("get_hits", 0)
    cmd_get = s2.get("cmd_get", 0) - s1.get("cmd_get", 0)
    if cmd_get:
        cap.facts["server_hit_ratio"] = round(hits / cmd_get, 4)
    unseen_verbs(cap, b, s1, s2, asm.gets, served, seen)
    if served and seen and window > 0:
        # Requests seen per second, scaled by the share of the server's count seen.
        cap.rate = b.requests / window * min(max(served / seen, 1.0), 100.0)
    cap.facts["capture_cost"] = _cost(
        mc_cpu(s1) - mc_cpu(s0), mc_request_total(s1) - mc_request_total(s0),
        mc_cpu(s2) - mc_cpu(s1), served)
    cap.keyspace = int(s2["curr_items"]) if s2.get("curr_items") else None
    if asm.skipped:
        cap.notes.append(f"memcached dropped {asm.skipped} watcher lines (the watcher lagged)")
    if served:
        cap.notes.append(f"seen {seen} of the {int(served)} requests the server counted "
                         f"({present.share(seen / served, 1)}; every verb's share below)")
    return cap


def unseen_verbs(cap: Capture, b: ModelBuilder, s1: dict[str, float],
                 s2: dict[str, float], stream_fetches: int, served: float,
                 seen: float) -> None:
    """What the watch stream could not show, from the server's own counters over the
    window: memcached 1.6's watcher logs a delete, an incr/decr and a touch as a fetch of
    the key, so they arrive as gets. The server's counts say how many there were: deletes
    move from the model's gets into its deletes (in the share of the stream the watcher
    showed); incr/decr and touch, which kvload does not send, stay gets and are said."""
    def d(*keys: str) -> float:
        return sum(s2.get(k, 0.0) - s1.get(k, 0.0) for k in keys)

    deletes = d("delete_hits", "delete_misses")
    incrs = d("incr_hits", "incr_misses", "decr_hits", "decr_misses")
    touches = d("cmd_touch")
    share = min(seen / served, 1.0) if served else 1.0
    moved = round(min(deletes * share, b.verbs.get("get", 0)))
    if moved:
        b.verbs["get"] -= moved
        b.verbs["delete"] += moved
        b.fanout[1] = max(0, b.fanout.get(1, 0) - moved)
        b.gets = max(0, b.gets - moved)
    cap.facts["server_counts"] = {"gets": d("cmd_get"), "sets": d("cmd_set"),
                                  "deletes": deletes, "incr_decr": incrs, "touch": touches}
    if deletes:
        cap.notes.append(
            f"the watch stream shows no deletes (memcached's watcher logs them as fetches): "
            f"the server counted {int(deletes)} in the window; {moved} of the stream's "
            "gets are counted as deletes in the model")
    if incrs or touches:
        cap.notes.append(
            f"the server counted {int(incrs)} incr/decr and {int(touches)} touch in the "
            "window, logged as fetches and kept as gets in the model (kvload sends neither)")
    if served:
        really = stream_fetches - moved - (incrs + touches) * share
        cap.facts["seen_by_verb"] = {
            "gets": round(really / d("cmd_get"), 4) if d("cmd_get") else None,
            "deletes": "from the server's counters" if deletes else None}


class Capturer:
    """memcached's capture: its watcher costs little, so no sampling mode."""

    method = "watch"
    protocol = "memcache"
    default_s = 10.0
    max_s = 3600.0
    max_note = ""
    sample = ""  # why --sample is not offered

    def run(self, t: Target, bounds: Bounds, say: Callable[[str], None], *, sample: bool,
            mget_gap: float, writer: Any) -> Capture:
        return capture_memcached(t, bounds, say, mget_gap, writer)


CAPTURER = Capturer()
