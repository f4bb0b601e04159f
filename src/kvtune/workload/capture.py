"""`kvtune workload capture URL`: the live traffic of a running memcached or Redis, as a
workload model (kvtune.workload.model).

- memcached: `watch fetchers mutations` (memcached >= 1.5). The watcher's lines are put
  back in order by their `gid`, then reassembled per connection (`cfd`): a set logs a
  fetch and then a store of the same key, so the fetch is dropped; consecutive fetches of
  one connection within MGET_GAP are one multiget. delete, incr and touch are logged as
  fetches by memcached 1.6 and count as gets. `skipped=N` lines (the watcher lagged and
  memcached dropped N lines) are counted. `stats` before and after give the true rate,
  hit ratio and the share of the traffic seen.
- Redis: `MONITOR` for a bounded window (5 s by default, 60 s at most): it costs the
  server much of its throughput while it runs. The values it streams are measured (length)
  and dropped. `--sample` reads no request at all: `INFO commandstats` deltas for the mix
  and rate, `SCAN` with `STRLEN` and `TTL` on a bounded number of keys for the sizes.

Keys are hashed (BLAKE2b keyed with a random salt of this capture) as soon as a line is
parsed: no key is stored or printed in clear. Only read-only commands are sent, only to
the address given. The cost to the server is measured: its CPU time per request in a
window before the capture and during it.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import ipaddress
import os
import re
import secrets
import socket
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kvtune.errors import HarnessError, UserError
from kvtune.workload.model import ModelBuilder, weighted_list

MGET_GAP = 0.0  # fetches of one connection this close form one multiget (0: never)
DRAIN_S = 5.0  # at most this long to read what the watcher still holds after the window
REORDER_WINDOW = 20_000  # lines held to put the watcher's output back in gid order
BASELINE_S = 1.0  # the window before the capture that measures the server's own cost
REDIS_DEFAULT_S = 5.0
REDIS_MAX_S = 60.0
SAMPLE_KEYS = 10_000


@dataclass
class Target:
    kind: str  # memcached | redis
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.kind}://{host}:{self.port}"


def shown_url(url: str) -> str:
    """The URL for a message: a password (`user:secret@`) and a query replaced by ***,
    control characters dropped (the URL is echoed back to who typed it, and to logs)."""
    text = re.sub(r"[\x00-\x1f\x7f]", "", url)
    text = re.sub(r"(//[^/@:]*):[^@/]*@", r"\1:***@", text)
    return re.sub(r"\?.*$", "?***", text)


def parse_url(url: str, allow_remote: bool = False) -> Target:
    """memcached://HOST:PORT or redis://HOST:PORT; a non-loopback host only when the
    user says so (--remote). Raises UserError (exit 2), never echoing a password."""
    shown = shown_url(url)
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise UserError(f"capture URL {shown!r}: {e}") from None
    if u.scheme not in ("memcached", "redis"):
        raise UserError(f"capture URL {shown!r}: the scheme must be memcached:// or redis://")
    if not u.hostname or port is None:
        raise UserError(f"capture URL {shown!r}: give the host and the port, e.g. "
                        f"{u.scheme or 'memcached'}://127.0.0.1:11211")
    if u.path not in ("", "/") or u.query or u.fragment or u.username or u.password:
        raise UserError(f"capture URL {shown!r}: only SCHEME://HOST:PORT is taken (no path, "
                        "user, password or query)")
    host = u.hostname
    try:
        loop = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = host == "localhost"
    if not loop and not allow_remote:
        raise UserError(f"capture URL {shown!r}: {host} is not a loopback address; name a "
                        "remote server explicitly with --remote")
    return Target(u.scheme, host, port)


def key_hasher() -> Callable[[bytes], int]:
    """A 64-bit keyed hash with a salt that lives only in this process."""
    salt = secrets.token_bytes(16)

    def h(key: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(key, digest_size=8, key=salt).digest(), "little")
    return h


@dataclass
class Bounds:
    duration: float
    max_events: int
    max_bytes: int


@dataclass
class Capture:
    builder: ModelBuilder
    window: float
    notes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    rate: float | None = None
    keyspace: int | None = None  # the items the server holds: keys a window may not touch


class Conn:
    """A socket with line reading; every failure is a HarnessError naming the server."""

    def __init__(self, t: Target, timeout: float = 3.0) -> None:
        self.t = t
        try:
            self.s = socket.create_connection((t.host, t.port), timeout=timeout)
        except OSError as e:
            raise HarnessError(f"cannot connect to {t}: {e.strerror or e}") from None
        self.buf = b""
        self.read = 0

    def send(self, data: bytes) -> None:
        try:
            self.s.sendall(data)
        except OSError as e:
            raise HarnessError(f"{self.t}: {e.strerror or e}") from None

    def fill(self) -> bool:
        try:
            chunk = self.s.recv(1 << 16)
        except TimeoutError:
            return True
        except OSError as e:
            raise HarnessError(f"{self.t}: {e.strerror or e}") from None
        if not chunk:
            raise HarnessError(f"{self.t} closed the connection")
        self.read += len(chunk)
        self.buf += chunk
        return True

    def line(self, limit: int = 1 << 20) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > limit:
                raise HarnessError(f"{self.t}: a line longer than {limit} bytes")
            self.fill()
        line, _, self.buf = self.buf.partition(b"\n")
        return line.rstrip(b"\r")

    def lines(self, deadline: float) -> Iterator[bytes]:
        """Complete lines until `deadline` (monotonic), a received chunk at a time."""
        while True:
            if b"\n" in self.buf:
                parts = self.buf.split(b"\n")
                self.buf = parts.pop()
                for line in parts:
                    yield line[:-1] if line.endswith(b"\r") else line
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.s.settimeout(min(left, 0.2))
            self.fill()

    def close(self) -> None:
        self.s.close()


# ---- memcached ------------------------------------------------------------------------

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
        t0, wall0 = time.monotonic(), time.time()
        stop = "time"
        for line in w.lines(t0 + bounds.duration):
            asm.feed(line)
            if asm.lines >= bounds.max_events:
                stop = f"{bounds.max_events} events"
                break
            if w.read >= bounds.max_bytes:
                stop = f"{bounds.max_bytes} bytes"
                break
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
                         f"({100 * seen / served:.1f}%; every verb's share below)")
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


def _cost(cpu_before: float, req_before: float, cpu_during: float,
          req_during: float) -> dict[str, Any]:
    """The server's CPU time per request before and during the capture."""
    out: dict[str, Any] = {"method": "server CPU seconds per request, 1 s before vs during"}
    if req_before > 0 and req_during > 0:
        before, during = cpu_before / req_before, cpu_during / req_during
        out |= {"cpu_us_per_request_before": round(before * 1e6, 3),
                "cpu_us_per_request_during": round(during * 1e6, 3)}
        if before > 0:
            out["increase_pct"] = round(100 * (during / before - 1), 1)
    else:
        out["unmeasured"] = "the server served no request before or during the capture"
    return out


# ---- Redis -----------------------------------------------------------------------------

def resp(*args: str | bytes) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        v = a.encode() if isinstance(a, str) else a
        out += [f"${len(v)}\r\n".encode(), v, b"\r\n"]
    return b"".join(out)


def redis_reply(c: Conn) -> Any:
    line = c.line(1 << 26)
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode(errors="replace")
    if kind == b"-":
        return RedisError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        while len(c.buf) < n + 2:
            c.fill()
        v, c.buf = c.buf[:n], c.buf[n + 2:]
        return v
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [redis_reply(c) for _ in range(n)]
    raise HarnessError(f"{c.t} does not answer as Redis does ({line[:40]!r})")


class RedisError(str):
    pass


def redis_call(c: Conn, *args: str | bytes) -> Any:
    c.send(resp(*args))
    c.s.settimeout(3)
    return redis_reply(c)


def redis_info(c: Conn, section: str) -> dict[str, str]:
    r = redis_call(c, "INFO", section)
    if not isinstance(r, bytes):
        raise HarnessError(f"{c.t} does not answer INFO as Redis does ({str(r)[:60]!r})")
    out = {}
    for line in r.decode(errors="replace").splitlines():
        k, sep, v = line.partition(":")
        if sep and not k.startswith("#"):
            out[k] = v
    return out


def _rnum(d: dict[str, str], k: str) -> float:
    try:
        return float(d.get(k, 0))
    except ValueError:
        return 0.0


def redis_cpu(i: dict[str, str]) -> float:
    return _rnum(i, "used_cpu_sys") + _rnum(i, "used_cpu_user")


_MONITOR = re.compile(rb'^\+?(\d+\.\d+) \[\d+ ([^\]]*)\] (.*)$')
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')


def _unescape_len(a: bytes) -> int:
    """The length of a MONITOR-quoted argument once unescaped (\\xHH is one byte)."""
    n, i = 0, 0
    while i < len(a):
        if a[i] == 0x5C and i + 1 < len(a):
            i += 4 if a[i + 1] == ord("x") else 2
        else:
            i += 1
        n += 1
    return n


def _unescape(a: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(a):
        c = a[i]
        if c == 0x5C and i + 1 < len(a):
            nxt = a[i + 1]
            if nxt == ord("x") and i + 3 < len(a):
                out.append(int(a[i + 2:i + 4], 16))
                i += 4
                continue
            out.append({ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("a"): 7,
                        ord("b"): 8}.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return bytes(out)


class MonitorParser:
    def __init__(self, b: ModelBuilder, hasher: Callable[[bytes], int]) -> None:
        self.b, self.hash = b, hasher
        self.lines = 0
        self.unparsed = 0

    def feed(self, line: bytes) -> None:
        m = _MONITOR.match(line)
        if not m:
            if line not in (b"+OK", b""):
                self.unparsed += 1
            return
        self.lines += 1
        ts, client, rest = float(m.group(1)), m.group(2), m.group(3)
        args = _ARG.findall(rest)
        if not args:
            self.unparsed += 1
            return
        cmd = args[0].upper()
        b = self.b

        def key(i: int) -> tuple[int, int]:
            k = _unescape(args[i])
            return self.hash(k), len(k)
        if cmd == b"GET" and len(args) == 2:
            b.request(ts, "get", [key(1)], conn=client)
        elif cmd == b"MGET" and len(args) >= 2:
            b.request(ts, "get", [key(i) for i in range(1, len(args))], conn=client)
        elif cmd == b"SET" and len(args) >= 3:
            b.request(ts, "set", [key(1)], value_size=_unescape_len(args[2]),
                      ttl=_set_ttl(args[3:]), conn=client)
        elif cmd in (b"SETEX", b"PSETEX") and len(args) == 4:
            try:
                ttl = int(args[2]) // (1000 if cmd == b"PSETEX" else 1)
            except ValueError:
                ttl = 0
            b.request(ts, "set", [key(1)], value_size=_unescape_len(args[3]), ttl=ttl,
                      conn=client)
        elif cmd in (b"DEL", b"UNLINK") and len(args) >= 2:
            for i in range(1, len(args)):
                b.request(ts, "delete", [key(i)], conn=client)
        else:
            b.other[cmd.decode(errors="replace")[:32]] += 1


def _set_ttl(opts: list[bytes]) -> int:
    up = [o.upper() for o in opts]
    for name, div in ((b"EX", 1), (b"PX", 1000)):
        if name in up and up.index(name) + 1 < len(opts):
            try:
                return int(opts[up.index(name) + 1]) // div
            except ValueError:
                return 0
    return 0


def capture_redis(t: Target, bounds: Bounds, say: Callable[[str], None],
                  trace: Any = None) -> Capture:
    hasher = key_hasher()
    b = ModelBuilder(source=str(t), trace=trace)
    c = Conn(t)
    try:
        i0 = {**redis_info(c, "stats"), **redis_info(c, "cpu")}
        time.sleep(BASELINE_S)
        i1 = {**redis_info(c, "stats"), **redis_info(c, "cpu")}
    finally:
        c.close()
    m = Conn(t)
    try:
        r = redis_call(m, "MONITOR")
        if r != "OK":
            raise HarnessError(f"{t} refused MONITOR ({str(r)[:80]}); `--sample` captures "
                               "without it")
        say(f"capturing {t} for {bounds.duration:g} s (MONITOR)")
        p = MonitorParser(b, hasher)
        t0 = time.monotonic()
        stop = "time"
        for line in m.lines(t0 + bounds.duration):
            p.feed(line)
            if p.lines >= bounds.max_events:
                stop = f"{bounds.max_events} events"
                break
            if m.read >= bounds.max_bytes:
                stop = f"{bounds.max_bytes} bytes"
                break
        window = time.monotonic() - t0
    finally:
        m.close()  # MONITOR ends with its connection
    c = Conn(t)
    try:
        i2 = {**redis_info(c, "stats"), **redis_info(c, "cpu")}
        dbsize = redis_call(c, "DBSIZE")
    finally:
        c.close()
    served = _rnum(i2, "total_commands_processed") - _rnum(i1, "total_commands_processed")
    cap = Capture(b, window)
    cap.facts = {"stopped_by": stop, "monitor_lines": p.lines, "unparsed_lines": p.unparsed,
                 "served_during_capture": served}
    hits = _rnum(i2, "keyspace_hits") - _rnum(i1, "keyspace_hits")
    misses = _rnum(i2, "keyspace_misses") - _rnum(i1, "keyspace_misses")
    if hits + misses:
        cap.facts["server_hit_ratio"] = round(hits / (hits + misses), 4)
    cap.facts["capture_cost"] = _cost(
        redis_cpu(i1) - redis_cpu(i0),
        _rnum(i1, "total_commands_processed") - _rnum(i0, "total_commands_processed"),
        redis_cpu(i2) - redis_cpu(i1), served)
    cap.notes.append("MONITOR streams every value: kvtune keeps only their lengths")
    cap.keyspace = dbsize if isinstance(dbsize, int) and dbsize > 0 else None
    return cap


def capture_redis_sample(t: Target, bounds: Bounds, say: Callable[[str], None]) -> Capture:
    """No MONITOR: the verb mix and rate from `INFO commandstats` over the window, sizes
    and TTLs from SCAN + STRLEN + TTL on at most SAMPLE_KEYS keys (MEMORY USAGE adds what
    each item costs the server), popularity from OBJECT FREQ under an LFU policy (else
    unknown: uniform)."""
    hasher = key_hasher()
    b = ModelBuilder(source=str(t))
    c = Conn(t)
    try:
        say(f"sampling {t} for {bounds.duration:g} s (INFO commandstats, SCAN; no MONITOR)")
        cs0 = _commandstats(redis_info(c, "commandstats"))
        s0 = {**redis_info(c, "stats"), **redis_info(c, "cpu")}
        t0 = time.monotonic()
        policy = redis_call(c, "CONFIG", "GET", "maxmemory-policy")
        lfu = isinstance(policy, list) and len(policy) == 2 and b"lfu" in (policy[1] or b"")
        keys_seen, cursor, freq = 0, b"0", {}
        memory: Counter[int] = Counter()
        while keys_seen < min(SAMPLE_KEYS, bounds.max_events) and \
                time.monotonic() - t0 < bounds.duration:
            r = redis_call(c, "SCAN", cursor, "COUNT", "200")
            if not isinstance(r, list) or len(r) != 2:
                raise HarnessError(f"{t}: SCAN answered {str(r)[:60]!r}")
            cursor, batch = r
            for k in batch:
                ln = redis_call(c, "STRLEN", k)
                ttl = redis_call(c, "TTL", k)
                mem = redis_call(c, "MEMORY", "USAGE", k, "SAMPLES", "0")
                if isinstance(mem, int):
                    memory[mem] += 1
                h = hasher(k)
                if isinstance(ln, int):
                    b.set_sizes[ln] += 1
                    b.key_sizes[len(k)] += 1
                    b.ttls[max(int(ttl), 0) if isinstance(ttl, int) else 0] += 1
                if lfu:
                    f = redis_call(c, "OBJECT", "FREQ", k)
                    if isinstance(f, int):
                        freq[h] = f + 1
                keys_seen += 1
            if cursor == b"0":
                break
        time.sleep(max(0.0, bounds.duration - (time.monotonic() - t0)))
        window = time.monotonic() - t0
        cs1 = _commandstats(redis_info(c, "commandstats"))
        s1 = {**redis_info(c, "stats"), **redis_info(c, "cpu")}
        dbsize = redis_call(c, "DBSIZE")
    finally:
        c.close()
    calls = {k: cs1.get(k, 0) - cs0.get(k, 0) for k in cs1}
    verb_of = {"get": "get", "mget": "mget", "set": "set", "setex": "set", "psetex": "set",
               "del": "delete", "unlink": "delete"}
    for cmd, n in calls.items():
        if n <= 0 or cmd in ("info", "scan", "strlen", "ttl", "object", "config", "dbsize",
                             "memory|usage", "memory"):
            continue
        if cmd in verb_of:
            b.verbs[verb_of[cmd]] += int(n)
            b.requests += int(n)
        else:
            b.other[cmd] += int(n)
    if freq:
        b.key_counts = dict(freq)
    cap = Capture(b, window)
    cap.rate = b.requests / window if window > 0 else None
    cap.facts = {"mode": "sample", "keys_sampled": keys_seen,
                 "dbsize": dbsize if isinstance(dbsize, int) else None,
                 "popularity_from": "OBJECT FREQ (LFU)" if freq else "unknown (uniform)"}
    if memory:
        cap.facts["memory_usage_bytes"] = weighted_list(memory)
    hits = _rnum(s1, "keyspace_hits") - _rnum(s0, "keyspace_hits")
    misses = _rnum(s1, "keyspace_misses") - _rnum(s0, "keyspace_misses")
    if hits + misses:
        cap.facts["server_hit_ratio"] = round(hits / (hits + misses), 4)
    if not freq:
        cap.notes.append("popularity is unknown without MONITOR (the server's policy is not "
                         "LFU): the model draws keys uniformly")
    cap.keyspace = dbsize if isinstance(dbsize, int) and dbsize > 0 else None
    return cap


def _commandstats(info: dict[str, str]) -> dict[str, float]:
    out = {}
    for k, v in info.items():
        if k.startswith("cmdstat_"):
            m = re.search(r"calls=(\d+)", v)
            if m:
                out[k[8:].lower()] = float(m.group(1))
    return out


def check_output(path: str) -> str:
    """The model's file: a new or regular file in an existing directory, not a link and not
    one of the run's inputs however it is spelled (kvtune.safety.files, by device and
    inode). Checked before anything connects or is read; written once, at the end,
    atomically."""
    from kvtune.safety.files import is_input

    if not path or "\x00" in path:
        raise UserError("-o: not a file name")
    p = os.path.abspath(path)
    parent = os.path.dirname(p)
    if not os.path.isdir(parent):
        raise UserError(f"-o {path}: the directory {parent} does not exist")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise UserError(f"-o {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"-o {path} is a symbolic link; name the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"-o {path} exists and is not a regular file")
    source = is_input(st)
    if source is not None:
        raise UserError(f"-o {path} is {source}, an input of this run: kvtune never "
                        "overwrites what it reads (name another file)")
    return p


def _same_file(a: str, b: str) -> bool:
    """Whether two output names are one file: the same device and inode when both exist,
    else the same resolved directory and name."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except OSError:
        pass
    return (os.path.realpath(os.path.dirname(a)), os.path.basename(a)) == \
        (os.path.realpath(os.path.dirname(b)), os.path.basename(b))


def check_trace_output(keep_trace: str | None, model_path: str) -> str | None:
    """--keep-trace's file: as the model's, and not the model itself."""
    if keep_trace is None:
        return None
    try:
        p = check_output(keep_trace)
    except UserError as e:
        raise UserError(str(e).replace("-o ", "--keep-trace ", 1)) from None
    if _same_file(p, model_path):
        raise UserError("--keep-trace names the model's own file (-o)")
    return p


def write_model(path: str, doc: dict[str, Any]) -> None:
    """The model, written atomically without following a link (kvtune.safety.files)."""
    import json

    from kvtune.safety.files import write_file

    write_file(path, json.dumps(doc, indent=1) + "\n", what="-o")


def capture(url: str, duration: float | None, out: str, *, max_events: int,
            max_bytes: int, sample: bool, allow_remote: bool, mget_gap: float = MGET_GAP,
            keep_trace: str | None = None,
            say: Callable[[str], None]) -> tuple[dict[str, Any], Capture]:
    t = parse_url(url, allow_remote)
    path = check_output(out)
    trace_path = check_trace_output(keep_trace, path)
    if trace_path and sample:
        raise UserError("--keep-trace needs the requests themselves: not with --sample")
    if sample and t.kind != "redis":
        raise UserError("--sample is for Redis (memcached's watcher costs little)")
    if duration is None:
        duration = REDIS_DEFAULT_S if t.kind == "redis" else 10.0
    if not 0.1 <= duration <= (REDIS_MAX_S if t.kind == "redis" and not sample else 3600):
        top = REDIS_MAX_S if t.kind == "redis" and not sample else 3600
        raise UserError(f"--duration {duration:g}: between 0.1 and {top:g} seconds"
                        + (" (MONITOR costs Redis much of its throughput)"
                           if top == REDIS_MAX_S else ""))
    if not 0 <= mget_gap <= 0.01:
        raise UserError(f"--mget-gap {mget_gap * 1e6:g} µs: between 0 and 10000")
    if max_events < 1 or max_bytes < 1024:
        raise UserError("--max-events must be at least 1 and --max-bytes at least 1024")
    bounds = Bounds(duration, max_events, max_bytes)
    from kvtune.workload.trace import TraceWriter

    writer = TraceWriter(trace_path) if trace_path else None
    try:
        if t.kind == "memcached":
            cap = capture_memcached(t, bounds, say, mget_gap, writer)
        elif sample:
            cap = capture_redis_sample(t, bounds, say)
        else:
            cap = capture_redis(t, bounds, say, writer)
        if cap.builder.requests == 0:
            raise HarnessError(f"{t} served no request kvload can replay during the "
                               f"{cap.window:.1f} s capture; nothing written")
    except BaseException:
        if writer:
            writer.abandon()
        raise
    if writer:
        cap.facts["trace"] = writer.close()
    about = {"captured": {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "method": "sample" if sample else
                          ("watch" if t.kind == "memcached" else "monitor"),
                          **cap.facts}, "notes": cap.notes}
    doc = cap.builder.build(duration=cap.window, rate=cap.rate, about=about)
    if doc["arrival"] != "poisson":
        # A server stamps a request when it serves it: its threads' turns on the CPU and its
        # event-loop batches bunch the stamps whatever the arrivals. The dispersion stays
        # in about.arrival; the model assumes independent clients.
        doc["about"]["arrival"]["chosen"] = "poisson"
        doc["about"]["notes"].append(
            f"the server's timestamps suggest '{doc['arrival']}' arrivals, but they are "
            "service times; the model uses Poisson arrivals")
        doc["arrival"] = "poisson"
    if cap.keyspace and cap.keyspace > doc["keys"]:
        # The server holds keys the window did not request: the replay preloads them too
        # (a table gains a bucket of them with no requests; a Zipf spreads over them all).
        doc["about"]["keyspace"] = {"keys_seen_estimate": doc["keys"],
                                    "server_items": cap.keyspace}
        if doc["popularity"].startswith("table:"):
            held = sum(int(b.split(":")[0]) for b in doc["popularity"][6:].split(","))
            if cap.keyspace > held:
                doc["popularity"] += f",{cap.keyspace - held}:0"
                from kvtune.workload.model import extend_key_buckets

                extend_key_buckets(doc, cap.keyspace - held)
        doc["keys"] = cap.keyspace
    doc["protocol"] = "resp" if t.kind == "redis" else "memcache"
    write_model(path, doc)
    return doc, cap
