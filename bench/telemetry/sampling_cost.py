"""What the 1 s server-stats sampler (kvtune/telemetry/sampler.py) costs the server, on real
servers, in one run:

1. **Server CPU per request** (idle server, filled with keys): for memcached `stats`,
   `stats slabs`, `stats items` one at a time and the three pipelined (what a sample sends),
   for Redis `INFO`; back-to-back requests on the sampler's own connection (`StatsConn`).
   Server CPU is the sum of every server thread's time on CPU (/proc/PID/task/*/schedstat,
   ns), less the idle server's rate over the same wall time.
2. **Interleaved A/B under load**: the server pinned to CPU 0, kvload (through kvtune's load
   driver) pinned to CPU 1; each round measures every arm once (no sampler, `ServerSampler`
   at 1 Hz, and at a faster stress rate), the order rotating each round to cancel drift.
   For each round the ratio arm / no sampler of throughput (closed loop) or p99 (open loop at
   a fixed rate), and the median ratio with its distribution-free CI over rounds
   (`stats.order_statistic_ci`: a 95 % CI from 6 rounds on, the range below).

    flock /tmp/kvtune-test.lock .venv/bin/python bench/telemetry/sampling_cost.py \\
        --out bench/telemetry/results.json

Loopback only; the servers are started and stopped here. ~6 min with the defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kvtune import load
from kvtune.kinds.memcached.telemetry import memcached_sample
from kvtune.kinds.redis.telemetry import redis_sample
from kvtune.spec import LoadSpec
from kvtune.stats import order_statistic_ci
from kvtune.targets.base import free_port
from kvtune.telemetry.sampler import ServerSampler, StatsConn

PROTOCOL = {"memcached": "memcache", "redis": "resp"}


def server_cpu_ns(pid: int) -> int:
    """Time on CPU of every thread of `pid` (schedstat's first field, ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def start_server(kind: str, port: int) -> subprocess.Popen[bytes]:
    if kind == "memcached":
        argv = [shutil.which("memcached") or "memcached", "-u", "nobody", "-l", "127.0.0.1",
                "-p", str(port), "-U", "0", "-t", "1", "-m", "1024"]
    else:
        argv = [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
                "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"]
    proc = subprocess.Popen(["taskset", "-c", "0", *argv], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            StatsConn("127.0.0.1", port, timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"{kind} did not start")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def spec(mode: str, duration: float, warmup: float, rate: float | None, keys: int,
         value_size: int, mix: str, preload: bool) -> LoadSpec:
    return LoadSpec(tool="kvload", mode=mode, rate=rate,  # type: ignore[arg-type]
                    connections=16, pipeline=4 if mode == "closed" else 1,
                    duration=duration, warmup=warmup, cpus="1",
                    workload={"keys": keys, "value_size": value_size,  # type: ignore[arg-type]
                              "mix": mix, "preload": preload})


def run_load(s: LoadSpec, port: int, kind: str, seed: int) -> dict[str, Any]:
    drv = load.driver_for(s)
    drv.prepare()
    res = drv.run(f"127.0.0.1:{port}", PROTOCOL[kind], seed)
    return {"metrics": res.metrics, "verdict": res.verdict, "raw": res.raw}


# -- 1. server CPU per request ---------------------------------------------------------------


def _mc(cmd: bytes, answers: int) -> Any:
    """A memcached request of `answers` stats answers (each ends with END): bytes read."""
    def send(conn: StatsConn) -> int:
        conn.s.sendall(cmd)
        return sum(len(conn.until(b"END\r\n")) for _ in range(answers))
    return send


def _redis_info(conn: StatsConn) -> int:
    conn.s.sendall(b"*1\r\n$4\r\nINFO\r\n")
    header = conn.until(b"\r\n")
    return len(header) + len(conn.exact(int(header[1:-2]) + 2))


def _sample(kind: str) -> Any:
    fn = memcached_sample if kind == "memcached" else redis_sample

    def send(conn: StatsConn) -> None:
        fn(conn)
    return send


# name: (what is timed, how the answer's size is read once)
REQUESTS = {
    "memcached": {"stats": (_mc(b"stats\r\n", 1), _mc(b"stats\r\n", 1)),
                  "stats slabs": (_mc(b"stats slabs\r\n", 1), _mc(b"stats slabs\r\n", 1)),
                  "stats items": (_mc(b"stats items\r\n", 1), _mc(b"stats items\r\n", 1)),
                  "a sample: the three pipelined, parsed (memcached_sample)":
                      (_sample("memcached"), _mc(b"stats\r\nstats slabs\r\nstats items\r\n", 3))},
    "redis": {"a sample: INFO, parsed (redis_sample)": (_sample("redis"), _redis_info)},
}


def fill(kind: str, port: int) -> str:
    """Keys in several size classes, so `stats slabs`/`items` answer for many classes."""
    sizes = ((50_000, 100), (20_000, 1_000), (2_000, 10_000))
    for i, (keys, size) in enumerate(sizes):
        run_load(spec("closed", 0.3, 0.0, None, keys, size, "get:1", True), port, kind, i)
    return ", ".join(f"{k:,} keys of {v:,} B" for k, v in sizes)


def micro(kind: str, n: int) -> dict[str, Any]:
    port = free_port()
    srv = start_server(kind, port)
    try:
        filled = fill(kind, port)
        time.sleep(0.5)
        conn = StatsConn("127.0.0.1", port)
        t0, c0 = time.monotonic_ns(), server_cpu_ns(srv.pid)  # the idle server's own rate
        time.sleep(2.0)
        idle_rate = (server_cpu_ns(srv.pid) - c0) / (time.monotonic_ns() - t0)
        out: dict[str, Any] = {"filled": filled, "idle_server_cpu_share": idle_rate,
                               "requests": {}}
        for name, (fn, size_of) in REQUESTS[kind].items():
            size = size_of(conn)
            for _ in range(20):  # warm the connection and the caches
                fn(conn)
            walls = []
            c0, t0, th0 = server_cpu_ns(srv.pid), time.monotonic_ns(), time.thread_time_ns()
            for _ in range(n):
                w0 = time.monotonic_ns()
                fn(conn)
                walls.append(time.monotonic_ns() - w0)
            wall = time.monotonic_ns() - t0
            server = server_cpu_ns(srv.pid) - c0 - idle_rate * wall
            out["requests"][name] = {
                "n": n, "answer_bytes": size,
                "server_cpu_us": round(server / n / 1000, 1),
                "client_cpu_us": round((time.thread_time_ns() - th0) / n / 1000, 1),
                "wall_us_median": round(statistics.median(walls) / 1000, 1),
                "wall_us_p90": round(sorted(walls)[int(0.9 * n)] / 1000, 1),
                "server_cpu_share_at_1hz": round(server / n / 1e9, 7),
            }
        conn.close()
        return out
    finally:
        stop_server(srv)


# -- 2. interleaved A/B under load -----------------------------------------------------------


def ab(kind: str, mode: str, rate: float | None, rounds: int, hz: list[float],
       duration: float) -> dict[str, Any]:
    arms = [0.0, *hz]  # 0 = no sampler
    port = free_port()
    srv = start_server(kind, port)
    runs: list[dict[str, Any]] = []
    try:
        run_load(spec(mode, 1.0, 0.5, rate, 100_000, 100, "get:9,set:1", True), port, kind,
                 0)  # fills the keys; not measured
        s = spec(mode, duration, 1.0, rate, 100_000, 100, "get:9,set:1", False)
        for r in range(rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            for arm in order:
                sampler = ServerSampler(kind, "127.0.0.1", port, 1 / arm) if arm else None
                c0 = server_cpu_ns(srv.pid)
                if sampler:
                    sampler.start()
                res = run_load(s, port, kind, 1000 * r + int(arm))
                rec = sampler.stop(res["raw"]) if sampler else None
                m = res["metrics"]
                runs.append({
                    "round": r, "hz": arm, "ops_per_sec": m["ops_per_sec"],
                    "p50_us": m["p50_us"], "p99_us": m["p99_us"], "verdict": res["verdict"],
                    "server_cpu_s": (server_cpu_ns(srv.pid) - c0) / 1e9,
                    "samples": len(rec["samples"]) if rec else 0,
                    "sample_errors": rec["errors"] if rec else [],
                    "sample_cost_us_median": statistics.median(
                        x["cost_us"] for x in rec["samples"]) if rec and rec["samples"]
                    else None})
                print(json.dumps({"kind": kind, "mode": mode, **runs[-1]}), flush=True)
    finally:
        stop_server(srv)
    metric = "ops_per_sec" if mode == "closed" else "p99_us"
    out: dict[str, Any] = {"kind": kind, "mode": mode, "rate": rate, "rounds": rounds,
                           "duration_s": duration, "metric": metric, "arms": {}, "runs": runs}
    for arm in hz:
        ratios = {}
        for key in ("ops_per_sec", "p99_us", "server_cpu_s"):
            per = []
            for r in range(rounds):
                off = next(x for x in runs if x["round"] == r and x["hz"] == 0)
                on = next(x for x in runs if x["round"] == r and x["hz"] == arm)
                per.append(on[key] / off[key])
            lo, hi, ci = order_statistic_ci(per)
            ratios[key] = {"per_round": [round(x, 4) for x in per],
                           "median": round(statistics.median(per), 4),
                           "low": round(lo, 4), "high": round(hi, 4), "interval": ci}
        out["arms"][f"{arm:g} Hz"] = ratios
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2000, help="requests per micro figure")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=float, default=3.0, help="measured window, seconds")
    ap.add_argument("--hz", default="1,20", help="sampling rates of the arms (besides none)")
    ap.add_argument("--mc-rate", type=float, default=60_000)
    ap.add_argument("--redis-rate", type=float, default=40_000)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    hz = [float(x) for x in a.hz.split(",") if x]
    t0 = time.monotonic()
    result: dict[str, Any] = {
        "command": " ".join(["bench/telemetry/sampling_cost.py", *sys.argv[1:]]),
        "host": {"kernel": platform.release(), "cpus": os.cpu_count()},
        "micro": {k: micro(k, a.samples) for k in ("memcached", "redis")},
        "ab": [ab("memcached", "closed", None, a.rounds, hz, a.duration),
               ab("memcached", "open", a.mc_rate, a.rounds, hz, a.duration),
               ab("redis", "closed", None, a.rounds, hz, a.duration),
               ab("redis", "open", a.redis_rate, a.rounds, hz, a.duration)],
    }
    result["wall_s"] = round(time.monotonic() - t0, 1)
    summary = {k: v["requests"] for k, v in result["micro"].items()}
    print(json.dumps(summary, indent=1))
    for t in result["ab"]:
        for arm, r in t["arms"].items():
            m = r[t["metric"]]
            print(f"{t['kind']} {t['mode']} {arm}: {t['metric']} ratio median {m['median']} "
                  f"({m['interval']} {m['low']} … {m['high']}); server CPU ratio "
                  f"{r['server_cpu_s']['median']}")
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
