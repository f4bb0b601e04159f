"""Server stats over time: one sample per second during the load, lined up with the load's
window and its phases.

    sampler = ServerSampler("memcached", "127.0.0.1", 11211)   # or "redis"
    sampler.start()            # its own connection, opened before the load; a thread
    ... the load ...
    rec = sampler.stop(load_raw)   # samples, each with t_s (seconds after the window start)
                                   # and its phase, when the load reported its timeline
    phase_table(rec)           # per phase: pages per slab class, evictions, moves, errors

memcached is asked `stats`, `stats slabs` and `stats items` (pipelined in one write), Redis
`INFO` (its default sections). Samples are taken on absolute CLOCK_MONOTONIC deadlines
(`time.monotonic_ns`, the clock kvload's `timeline` uses, docs/kvload.md), so they line up
with the window without guessing. Each sample stores what it cost (`cost_us`, the wall time
of the request and the answer).

What a sample keeps is compact (the figures that explain memory and hit ratio, chosen by
each kind's `sample` in kinds/<kind>/telemetry.py), so a repetition of a minute stores about
60 × 2 KB.

The cost (bench/telemetry/sampling_cost.py; docs/case-studies.md, "Server stats over
time"): memcached answers the three stats requests in ~0.13 ms of server CPU, Redis INFO in
~0.08 ms, about 0.01 % of a CPU at 1 Hz; no throughput or p99 change was measurable in an
interleaved A/B, even at 20 Hz.

Sampling never fails a repetition: an error is recorded in the record's `errors`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

INTERVAL_S = 1.0

def parse_number(v: str) -> int | float | str:
    """A stats value as a number when it is one (int, else float), else the text."""
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


class StatsConn:
    """One persistent TCP connection with a read buffer (the sampler's own; benchmarks
    use it to time single stats requests)."""

    def __init__(self, host: str, port: int, timeout: float = 2.0) -> None:
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _more(self) -> None:
        chunk = self.s.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the stats connection")
        self.buf += chunk

    def until(self, terminator: bytes) -> bytes:
        while terminator not in self.buf:
            self._more()
        i = self.buf.index(terminator) + len(terminator)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.s.close()


def _sampler(kind: str) -> Any:
    from kvtune import kind_registry as kinds

    k = kinds.find(kind)
    return k.sample if k is not None else None


def supported(kind: str) -> bool:
    """Whether the server kind has a stats sampler (every registered kind has one)."""
    return _sampler(kind) is not None


class ServerSampler:
    """Samples a server's stats every `interval` seconds from a thread, on its own
    connection, until `stop`."""

    def __init__(self, kind: str, host: str, port: int, interval: float = INTERVAL_S) -> None:
        self._sample = _sampler(kind)
        if self._sample is None:
            raise ValueError(f"no stats sampler for target kind {kind!r}")
        self.kind, self.host, self.port, self.interval = kind, host, port, interval
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: StatsConn | None = None

    def start(self) -> None:
        try:
            self._conn = StatsConn(self.host, self.port)
        except OSError as e:
            self.errors.append(f"connect: {e}")
            return
        self._thread = threading.Thread(target=self._run, name="kvtune-sampler", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        assert self._conn is not None
        t0 = time.monotonic_ns()
        data = self._sample(self._conn)
        t1 = time.monotonic_ns()
        self.samples.append({"t_ns": t0, "cost_us": round((t1 - t0) / 1000, 1), **data})

    def _run(self) -> None:
        step = int(self.interval * 1e9)
        deadline = time.monotonic_ns()
        while not self._stop.is_set():
            try:
                self._take()
            except (OSError, ValueError) as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                return
            deadline += step
            now = time.monotonic_ns()
            while deadline <= now:  # a late sample skips missed deadlines
                deadline += step
            if self._stop.wait((deadline - now) / 1e9):
                return

    def stop(self, load_raw: dict[str, Any] | None = None) -> dict[str, Any]:
        """Stop sampling, take one last sample (the state at the end of the window) and
        return the record, lined up with the load's timeline when it has one."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._conn is not None and not self._thread.is_alive():
                try:
                    self._take()
                except (OSError, ValueError) as e:
                    self.errors.append(f"final sample: {type(e).__name__}: {e}")
        if self._conn is not None:
            self._conn.close()
        return align({"kind": self.kind, "interval_s": self.interval, "samples": self.samples,
                      "errors": self.errors}, load_raw)

    def close(self) -> None:
        self._stop.set()
        if self._conn is not None:
            self._conn.close()


def phases_of(load_raw: dict[str, Any] | None) -> tuple[int | None, int | None, list[dict]]:
    """(window_start_ns, window_end_ns, phases with start_s and duration_s) from a load
    tool's raw output (kvload/1.1 `timeline` and `config.phases`)."""
    if not load_raw:
        return None, None, []
    tl = load_raw.get("timeline") or {}
    cfg = load_raw.get("config") or {}
    phases = list(cfg.get("phases") or [])
    offset = 0.0
    for p in phases:  # kvload/1 documents lack start_s: phases run back to back
        p.setdefault("start_s", offset)
        offset = float(p["start_s"]) + float(p.get("duration_s") or 0)
    return tl.get("window_start_ns"), tl.get("window_end_ns"), phases


def align(rec: dict[str, Any], load_raw: dict[str, Any] | None) -> dict[str, Any]:
    """Add `t_s` (seconds after the window start; negative during preload and warm-up)
    and `phase` (index; None outside the window) to each sample, and the window and
    phases to the record."""
    ws, we, phases = phases_of(load_raw)
    rec["window"] = {"start_ns": ws, "end_ns": we,
                     "duration_s": (we - ws) / 1e9 if ws is not None and we is not None
                     else None}
    rec["phases"] = [{k: p.get(k) for k in ("start_s", "duration_s", "rate", "value_size",
                                            "mix")} for p in phases]
    for s in rec["samples"]:
        if ws is None:
            s["t_s"], s["phase"] = None, None
            continue
        t = (s["t_ns"] - ws) / 1e9
        s["t_s"] = round(t, 4)
        s["phase"] = phase_at(phases, t, (we - ws) / 1e9 if we is not None else None)
    return rec


def phase_at(phases: list[dict], t: float, window_s: float | None) -> int | None:
    """The phase in force `t` seconds after the window start (as kvload decides it: the
    last phase lasts until the window ends), or None outside the window."""
    if t < 0 or (window_s is not None and t > window_s + 0.5):
        return None
    if not phases:
        return 0
    idx = 0
    for i, p in enumerate(phases):
        if t >= float(p["start_s"]):
            idx = i
    return idx


def phase_table(rec: dict[str, Any], load_raw: dict[str, Any] | None = None) -> list[dict]:
    """One row per phase from the last sample taken in that phase (the state at its end):
    what the server's kind reads from it (its `phase_row`: memcached's pages per slab class,
    evictions, pages moved, hit ratio, out-of-memory errors; Redis's evictions, hits and
    memory), plus the load's own error count for the phase's seconds when `load_raw` has a
    series."""
    from kvtune import kind_registry as kinds

    kind = kinds.find(rec.get("kind"))
    samples = [s for s in rec.get("samples", []) if s.get("phase") is not None]
    phases = rec.get("phases") or [{}]
    series = (load_raw or {}).get("series") or []
    rows: list[dict] = []
    prev: dict[str, Any] | None = None
    before = [s for s in rec.get("samples", []) if s.get("t_s") is not None and s["t_s"] < 0]
    if before:
        prev = before[-1]
    for i, ph in enumerate(phases):
        mine = [s for s in samples if s["phase"] == i]
        if not mine:
            rows.append({"phase": i, **ph, "samples": 0})
            continue
        last = mine[-1]
        st, p0 = last.get("stats", {}), (prev or {}).get("stats", {})

        def delta(key: str, st: dict = st, p0: dict = p0) -> float | None:
            if key not in st:
                return None
            return float(st[key]) - float(p0.get(key, 0))

        row: dict[str, Any] = {"phase": i, **ph, "samples": len(mine), "t_s": last["t_s"]}
        if kind is not None and kind.phase_row is not None:
            row.update(kind.phase_row(last, prev, delta))
        if series:
            lo = float(ph.get("start_s") or 0)
            hi = lo + float(ph.get("duration_s") or 1e18)
            row["load_errors"] = sum(int(s.get("errors", 0)) for s in series
                                     if lo < float(s["t"]) <= hi + 1e-9)
        rows.append(row)
        prev = last
    return rows


def cost_summary(rec: dict[str, Any]) -> dict[str, float | None]:
    """Median and max wall time per sample (µs)."""
    costs = sorted(float(s["cost_us"]) for s in rec.get("samples", []) if "cost_us" in s)
    if not costs:
        return {"n": 0, "median_us": None, "max_us": None}
    return {"n": len(costs), "median_us": costs[len(costs) // 2], "max_us": costs[-1]}
