"""kvload vs redis-benchmark on the same Redis (GET, 16 connections, pipeline 1 and 16),
interleaved, closed loop both: throughput, the ratio, and the client's CPU time per request
(RUSAGE_CHILDREN), which explains the differences (docs/kvload.md, "Peer load tools").

    flock /tmp/kvtune-test.lock .venv/bin/python bench/peers/peers.py --rounds 3 \\
        --out bench/peers/results.json

The server is pinned to CPU 0 and the client to CPU 1 (taskset); loopback only."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kvtune import load
from kvtune.spec import LoadSpec
from kvtune.targets.base import free_port


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    port = free_port()
    srv = subprocess.Popen(["taskset", "-c", "0", "redis-server", "--port", str(port), "--bind",
                            "127.0.0.1", "--save", "", "--appendonly", "no"],
                           stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    rows = []
    try:
        for rnd in range(a.rounds):
            for pipeline in (1, 16):
                order = ["kvload", "redis-benchmark"]
                if rnd % 2:
                    order.reverse()
                for tool in order:
                    spec = LoadSpec(tool=tool, mode="closed", connections=16, pipeline=pipeline,
                                    duration=a.duration, warmup=0.5, cpus="1",
                                    workload={"keys": 10000, "value_size": 100,  # type: ignore[arg-type]
                                              "mix": "get:1", "key_size": 16})
                    drv = load.driver_for(spec)
                    drv.prepare()
                    c0 = child_cpu()
                    res = drv.run(f"127.0.0.1:{port}", "resp", rnd)
                    cpu = child_cpu() - c0
                    ops = res.metrics["ops_per_sec"]
                    # Requests of the measured window and the client CPU of the whole run
                    # (preload and warm-up included, the same for both tools' shape).
                    rows.append({"round": rnd, "pipeline": pipeline, "tool": tool,
                                 "ops_per_sec": ops, "client_cpu_s": cpu,
                                 "p99_us": res.metrics.get("p99_us")})
                    print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        srv.terminate()
        srv.wait(10)
    summary = {}
    for pipeline in (1, 16):
        med = {t: statistics.median(r["ops_per_sec"] for r in rows
                                    if r["tool"] == t and r["pipeline"] == pipeline)
               for t in ("kvload", "redis-benchmark")}
        cpu = {t: statistics.median(r["client_cpu_s"] for r in rows
                                    if r["tool"] == t and r["pipeline"] == pipeline)
               for t in ("kvload", "redis-benchmark")}
        summary[f"pipeline_{pipeline}"] = {"median_ops_per_sec": med, "client_cpu_s": cpu,
                                           "ratio_redis_benchmark_over_kvload":
                                           med["redis-benchmark"] / med["kvload"]}
    doc = {"rows": rows, "summary": summary}
    print(json.dumps(summary, indent=1))
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
