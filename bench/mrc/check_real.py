"""Predicted vs measured hit ratio on the real servers (issue 43).

For each workload and server kind, at each memory size: a fresh server (memcached `-m`,
Redis/Valkey `maxmemory` with `allkeys-lru`), the request stream replayed cache-aside by
kvtune.mrc.check (paced at the stream's rate; the first half warms the cache up, the
counters are reset, the second half is measured), and the simulator's prediction for the
same stream and the same split, the simulator fed each request at the time the replay
sent it (the server's clock: TTLs, Redis's one-second LRU clock), and also at the stream's
own times (`predicted_stream_times`, what `kvtune workload mrc` computes). Redis/Valkey: used_memory per key is measured first on a
server without a limit, and the simulator's byte formula is scaled by it; the baseline
used_memory of the idle server (with the client connected) is read before the replay.

    .venv/bin/python bench/mrc/check_real.py --json bench/mrc/check_real.json

Servers on CPU 0, this client on CPU 1 (taskset); loopback only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from kvtune.kinds.memcached import mrc as memcached
from kvtune.kinds.redis import mrc as redis
from kvtune.mrc import check
from kvtune.mrc.requests import Requests, from_model
from kvtune.targets.base import free_port

WORKLOADS: dict[str, dict[str, Any]] = {
    "skewed-small": {"keys": 100_000, "popularity": "zipf:0.99", "mix": "get:1",
                     "key_size": 24, "value_size": "list:16:1,32:2,64:2,100:1"},
    "mixed-ttl": {"keys": 40_000, "popularity": "zipf:0.9", "mix": "get:9,set:1",
                  "key_size": 32,
                  "value_size": "list:100:4,400:3,1500:2,6000:1,20000:0.3",
                  "ttl": "list:0:2,8:1,20:1"},
}
# The size mix shifts half-way: small items first (they take every page), then larger ones
# in another slab class; only the rebalancer (slab_automove=1) gives that class pages.
SHIFT = ({"keys": 80_000, "popularity": "zipf:0.9", "mix": "get:1", "key_size": 24,
          "value_size": 100},
         {"keys": 20_000, "popularity": "zipf:0.9", "mix": "get:1", "key_size": 24,
          "value_size": 1500})
SIZES_MB = {"skewed-small": {"memcached": [2, 3, 5, 8], "redis": [4, 6, 9, 13]},
            "mixed-ttl": {"memcached": [8, 16, 32, 48], "redis": [6, 12, 24, 48]},
            "size-shift": {"memcached": [8, 12, 16], "redis": []}}
POLICY = redis.Policy()  # Redis/Valkey eviction (--policy)
REQUESTS = {"skewed-small": 500_000, "mixed-ttl": 400_000, "size-shift": 900_000}
RATE = {"skewed-small": 18_000, "mixed-ttl": 16_000, "size-shift": 15_000}


def size_shift(rate: float) -> tuple[Requests, int]:
    """A third of the requests on small items, then two thirds on larger ones; the
    measured part is the second phase."""
    a = from_model(SHIFT[0], requests=REQUESTS["size-shift"] // 3, rate=rate, seed=7)
    b = from_model(SHIFT[1], requests=REQUESTS["size-shift"] * 2 // 3, rate=rate, seed=8)
    t = np.concatenate([a.t, b.t + a.t[-1] + 1 / rate])
    req = Requests(np.concatenate([a.key, b.key]), np.concatenate([a.op, b.op]),
                   np.concatenate([a.klen, b.klen]), np.concatenate([a.vlen, b.vlen]),
                   np.concatenate([a.ttl, b.ttl]), t, "size shift")
    return req, len(a)


def wait(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not listen")


def start(kind: str, mb: int | None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    if kind == "memcached":
        argv = [shutil.which("memcached") or "memcached", "-p", str(port), "-l", "127.0.0.1",
                "-U", "0", "-u", "memcache", "-t", "2", "-m", str(mb or 1024)]
    else:
        binary = shutil.which("redis-server" if kind == "redis" else "valkey-server")
        argv = [binary or kind, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--logfile", "", "--dir", "/tmp"]
        if mb:
            argv += ["--maxmemory", f"{mb}mb", "--maxmemory-policy", POLICY.name,
                     "--maxmemory-samples", str(POLICY.samples)]
    proc = subprocess.Popen(["taskset", "-c", "0", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    wait(port, proc)
    return proc, port


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(10)


def used_memory(port: int) -> int:
    c = redis.Client(port)
    try:
        return c.used_memory()
    finally:
        c.close()


def run(name: str, kind: str, req: Requests, sizes: list[int], speed: float,
        warm: int | None = None) -> list[dict[str, Any]]:
    warm = len(req) // 2 if warm is None else warm
    rows = []
    bytes_scale = 1.0
    if kind != "memcached":
        proc, port = start(kind, None)
        try:
            per_key, payload = redis.per_key_bytes(port, req)
        finally:
            stop(proc)
        _, first = np.unique(req.key, return_index=True)
        f = redis.key_bytes(req.klen[first], req.vlen[first]).sum() + redis.buckets(len(first))
        bytes_scale = per_key * len(first) / f
        print(f"{kind} {name}: used_memory per key {per_key:.1f} B (payload {payload:.1f} B); "
              f"formula x{bytes_scale:.3f}", flush=True)
    for mb in sizes:
        proc, port = start(kind, mb)
        try:
            base = used_memory(port) if kind != "memcached" else 0
            m = check.replay(req, kind, port, warm, speed=speed)
        finally:
            stop(proc)
        # the simulator sees the clock the server saw: each request at its send time
        seen = dataclasses.replace(req, t=m.times)
        if kind == "memcached":
            p = memcached.simulate(seen, mb << 20, measure_from=warm).hit_ratio
        else:
            p = redis.simulate(seen, mb << 20, POLICY, measure_from=warm, baseline=base,
                               bytes_scale=bytes_scale).hit_ratio
        # and the prediction from the stream's own times, as kvtune workload mrc makes it
        if kind == "memcached":
            p0 = memcached.simulate(req, mb << 20, measure_from=warm).hit_ratio
        else:
            p0 = redis.simulate(req, mb << 20, POLICY, measure_from=warm, baseline=base,
                                bytes_scale=bytes_scale).hit_ratio
        row: dict[str, Any] = {"workload": name, "kind": kind, "memory_mb": mb,
                               "predicted": round(p, 4),
               "measured": round(m.hit_ratio, 4), "diff_pts": round(100 * (p - m.hit_ratio), 2),
               "predicted_stream_times": round(p0, 4),
               "replay_s": round(m.seconds, 1), "behind_s": round(m.behind_s, 2)}
        if kind == "memcached" and name == "size-shift":
            mv = memcached.simulate(seen, mb << 20, measure_from=warm, automove=False)
            row["predicted_without_rebalancer"] = round(mv.hit_ratio, 4)
        if kind != "memcached":
            row["policy"] = POLICY.name
            row["baseline_used_memory"] = base
            row["bytes_scale"] = round(bytes_scale, 4)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="skewed-small, mixed-ttl (the default), size-shift")
    ap.add_argument("--kinds", default="memcached,redis,valkey")
    ap.add_argument("--requests", type=int, help="requests per stream (default: per workload)")
    ap.add_argument("--rate", type=float, help="the stream's requests/s (default: per "
                    "workload)")
    ap.add_argument("--policy", default="allkeys-lru",
                    help="Redis/Valkey maxmemory-policy: allkeys-lru or allkeys-lfu")
    ap.add_argument("--json")
    a = ap.parse_args()
    global POLICY
    POLICY = redis.Policy(a.policy)
    # a TERM stops the server in hand too (its `finally`), not only this process
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.sched_setaffinity(0, {1})
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    for name in a.workloads.split(","):
        warm = None
        if name == "size-shift":
            req, warm = size_shift(a.rate or RATE[name])
        else:
            req = from_model(WORKLOADS[name], requests=a.requests or REQUESTS[name],
                             rate=a.rate or RATE[name], seed=7)
        for kind in a.kinds.split(","):
            sizes = SIZES_MB[name]["memcached" if kind == "memcached" else "redis"]
            if sizes:
                rows += run(name, kind, req, sizes, speed=1.0, warm=warm)
    print("| workload | server | memory | predicted | measured | difference |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        auto = (f" (without the rebalancer: {r['predicted_without_rebalancer']:.3f})"
                if "predicted_without_rebalancer" in r else "")
        print(f"| {r['workload']} | {r['kind']} | {r['memory_mb']} MiB | {r['predicted']:.3f}"
              f"{auto} | {r['measured']:.3f} | {r['diff_pts']:+.1f} pt |")
    worst = max(abs(r["diff_pts"]) for r in rows)
    print(f"worst difference {worst:.1f} points; {time.time() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({"workloads": WORKLOADS | {"size-shift": list(SHIFT)},
                                            "requests": REQUESTS,
                                            "rate": RATE, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
