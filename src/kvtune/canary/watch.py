"""What the canary watches: each server's counters read through its kind's reader
(kinds/<kind>/canary.py, `Kind.canary`) over its own connection, and the figures of one
interval between two snapshots. Canary and control are read one after the other at each
look, so their intervals cover the same traffic to within a few milliseconds.

Figures per interval (`METRICS`): CPU seconds per request (the server's rusage over its
request counters), hit ratio, evictions and errors per thousand requests, refused
connections per second, memory in use; for a kind with latency figures of its own, the
mean and the p99 of its command latency (the p99 from the difference of the cumulative
power-of-two histograms, interpolated within a bucket: a factor-2 resolution, coarse but
the same for both sides)."""

from __future__ import annotations

import contextlib
import ipaddress
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kvtune import kind_registry as kinds
from kvtune.errors import UserError
from kvtune.metrics import Direction
from kvtune.quantities import is_count
from kvtune.telemetry.sampler import StatsConn


class Reader(Protocol):
    """A kind's canary reader (kinds/<kind>/canary.py)."""

    latency: bool
    live_settings: bool
    undo_kind: str  # the journal's undo kind of a setting it changes

    def snapshot(self, conn: StatsConn) -> dict[str, Any]: ...
    def settings(self, conn: StatsConn, names: list[str]) -> dict[str, str]: ...
    def set_setting(self, conn: StatsConn, name: str, value: str) -> None: ...
    def rollback_settings(self, change: str, rollback: str) -> dict[str, str]: ...
    def changes(self, change: str, current: str) -> dict[str, tuple[str, str | None]]: ...
    def same(self, expected: str, found: str) -> bool: ...


@dataclass(frozen=True)
class Metric:
    """A watched figure: its unit, its good direction, and the scale its change is judged
    on: "log" (relative: canary / control - 1) or "diff" (canary - control, in its unit)."""

    name: str
    unit: str
    direction: Direction
    scale: Literal["log", "diff"]
    latency: bool = False  # only for kinds with latency figures of their own
    probe: bool = False  # only with the probe (--probe-rate)
    about: str = ""


MIN, MAX = Direction.MINIMIZE, Direction.MAXIMIZE
METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("cpu_per_request", "µs/req", MIN, "log",
           about="server CPU time (user + system) over the requests it answered"),
    Metric("hit_ratio", "fraction", MAX, "diff", about="hits / (hits + misses)"),
    Metric("evictions", "per 1k req", MIN, "diff", about="evictions per 1,000 requests"),
    Metric("errors", "per 1k req", MIN, "diff",
           about="error replies (out of memory, too large, refused) per 1,000 requests"),
    Metric("refused", "per s", MIN, "diff", about="connections refused per second"),
    Metric("memory", "bytes", MIN, "log", about="memory in use at the end of the interval"),
    Metric("latency_mean", "µs", MIN, "log", latency=True,
           about="the server's mean command execution time"),
    Metric("p99", "µs", MIN, "log", latency=True,
           about="the 99th percentile of the server's command execution time"),
    Metric("probe_p99", "µs", MIN, "log", probe=True,
           about="the 99th percentile of the probe's requests (kvload at a small fixed "
                 "rate on keys of its own), from its send time"),
)}


def metrics_for(reader: Reader, probe: bool = False) -> list[str]:
    return [m.name for m in METRICS.values()
            if (reader.latency or not m.latency) and (probe or not m.probe)]


def reader_of(kind: str) -> Reader:
    """The canary reader of a server kind (UserError: an unknown kind or one without)."""
    k = kinds.find(kind)
    if k is None:
        raise UserError(f"--kind: unknown server kind {kind!r}; known: "
                        f"{', '.join(kinds.names())}")
    if k.canary is None:
        raise UserError(f"--kind {kind}: kvtune canary cannot read this kind's servers")
    reader: Reader = kinds.load(k.canary)
    return reader


@dataclass
class Server:
    """One watched server on this host: its role ("canary" or "control"), loopback address
    and its own stats connection (opened on first use)."""

    role: str
    host: str
    port: int
    conn: StatsConn | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> StatsConn:
        if self.conn is None:
            try:
                self.conn = StatsConn(self.host, self.port)
            except OSError as e:
                raise UserError(f"--{self.role} {self.address}: cannot connect: "
                                f"{e.strerror or e}") from None
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def parse_server(text: str, role: str) -> Server:
    """HOST:PORT or PORT (on 127.0.0.1); the host must be a loopback address: kvtune canary
    watches servers on this host (it rolls back the canary here)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        loop = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = False
    if not loop:
        raise UserError(f"--{role} {text}: {host!r} is not a loopback address; kvtune canary "
                        "watches and rolls back servers on this host (127.0.0.1:PORT)")
    if not is_count(port) or not 0 < int(port) < 65536:
        raise UserError(f"--{role} {text}: {port!r} is not a TCP port")
    return Server(role, host, int(port))


def snapshot(reader: Reader, server: Server) -> dict[str, Any]:
    """The server's counters now, with the monotonic time they were read at."""
    conn = server.connect()
    try:
        snap = reader.snapshot(conn)
    except (OSError, ConnectionError, ValueError) as e:
        server.close()
        raise ConnectionError(f"{server.role} {server.address}: {e}") from None
    snap["t"] = time.monotonic()
    return snap


class Reset(Exception):
    """A counter went back between two snapshots: the server restarted or its stats were
    reset; the interval is not a measurement."""


def _delta(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    d = float(b.get(key, 0.0)) - float(a.get(key, 0.0))
    if d < 0:
        raise Reset(f"{key} went back by {-d:g}")
    return d


def _cum(hist: list[list[float]], bound: float) -> float:
    """A cumulative histogram's count at `bound` (its largest listed bucket below it)."""
    out = 0.0
    for b, c in hist:
        if b <= bound:
            out = c
        else:
            break
    return out


def interval_p(a: dict[str, Any], b: dict[str, Any], q: float) -> float | None:
    """The q-quantile (µs) of the commands between snapshots a and b, from the difference
    of their cumulative power-of-two histograms, log-linear within the bucket."""
    la, lb = a.get("latency") or {}, b.get("latency") or {}
    bounds = sorted({bb for c in lb.values() for bb, _ in c.get("hist", [])})
    if not bounds:
        return None
    counts = []
    for bound in bounds:
        n = 0.0
        for cmd, cur in lb.items():
            n += _cum(cur.get("hist", []), bound) - _cum((la.get(cmd) or {}).get("hist", []),
                                                          bound)
        counts.append(n)
    total = counts[-1]
    if total <= 0:
        return None
    want, below = q * total, 0.0
    for bound, n in zip(bounds, counts, strict=True):
        if n >= want:
            inside = n - below
            frac = (want - below) / inside if inside > 0 else 1.0
            lo = bound / 2
            return lo * (bound / lo) ** frac if lo > 0 else bound * frac
        below = n
    return bounds[-1]


def interval_figures(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    """The figures of the interval between two snapshots of one server (Reset when a
    counter went back). A figure without data in the interval (no gets: no hit ratio) is
    None."""
    if float(b.get("uptime_s", 0)) < float(a.get("uptime_s", 0)):
        raise Reset("uptime went back")
    dt = float(b["t"]) - float(a["t"])
    req = _delta(a, b, "requests")
    hits, misses = _delta(a, b, "hits"), _delta(a, b, "misses")
    out: dict[str, float | None] = {
        "cpu_per_request": _delta(a, b, "cpu_s") / req * 1e6 if req > 0 else None,
        "hit_ratio": hits / (hits + misses) if hits + misses > 0 else None,
        "evictions": _delta(a, b, "evictions") / req * 1000 if req > 0 else None,
        "errors": _delta(a, b, "errors") / req * 1000 if req > 0 else None,
        "refused": _delta(a, b, "refused") / dt if dt > 0 else None,
        "memory": float(b.get("memory_bytes", 0.0)) or None,
        "requests_per_s": req / dt if dt > 0 else None,
    }
    la, lb = a.get("latency") or {}, b.get("latency") or {}
    if lb:
        calls = sum(float(c.get("calls", 0)) - float((la.get(k) or {}).get("calls", 0))
                    for k, c in lb.items())
        usec = sum(float(c.get("usec", 0)) - float((la.get(k) or {}).get("usec", 0))
                   for k, c in lb.items())
        out["latency_mean"] = usec / calls if calls > 0 else None
        out["p99"] = interval_p(a, b, 0.99)
    return out


def difference(metric: Metric, canary: float | None, control: float | None) -> float:
    """One interval's paired difference: log(canary / control) on the log scale, canary -
    control on the diff scale; NaN when either side has no figure (or a log of 0)."""
    if canary is None or control is None:
        return math.nan
    if metric.scale == "log":
        return math.log(canary / control) if canary > 0 and control > 0 else math.nan
    return canary - control


def close_all(servers: list[Server]) -> None:
    for s in servers:
        with contextlib.suppress(OSError):
            s.close()
