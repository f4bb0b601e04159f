"""Capturing a running Redis's traffic (`kvtune workload capture redis://...`): MONITOR
for a bounded window, INFO before and after for the true rate and MONITOR's cost, or a
sample of the keyspace (`--sample`: SCAN, STRLEN, TTL, MEMORY USAGE) where MONITOR costs too
much (workload/capture.py has the whole method)."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kvtune.errors import HarnessError
from kvtune.workload.capture import (
    BASELINE_S,
    Bounds,
    Capture,
    Conn,
    Target,
    _cost,
    key_hasher,
    read_window,
)
from kvtune.workload.model import ModelBuilder, weighted_list

DEFAULT_S = 5.0
MAX_S = 60.0
SAMPLE_KEYS = 10_000


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
        stop, t0 = read_window(m, p.feed, lambda: p.lines, bounds)
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


class Capturer:
    """Redis's capture (and that of a server speaking its protocol and MONITOR)."""

    method = "monitor"
    protocol = "resp"
    default_s = DEFAULT_S
    max_s = MAX_S
    max_note = " (MONITOR costs Redis much of its throughput)"
    sample_ok = True

    def run(self, t: Target, bounds: Bounds, say: Callable[[str], None], *, sample: bool,
            mget_gap: float, writer: Any) -> Capture:
        if sample:
            return capture_redis_sample(t, bounds, say)
        return capture_redis(t, bounds, say, writer)


CAPTURER = Capturer()
