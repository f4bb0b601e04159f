#!/usr/bin/env python3
"""Record A/A series for the canary's statistics: two servers of one kind on the same
configuration, kvload replaying the same traffic to both (the same seed and arguments), and
every `--interval` each server's figures as `kvtune canary` computes them
(kvtune/canary/watch.py). The series are stored for tests/test_canary_stats.py, which draws
A/A sessions from them (a circular block bootstrap keeps their autocorrelation) and counts
the verdict's false alarms.

    .venv/bin/python bench/canary/record_aa.py --kind memcached --seconds 90 \\
        --out tests/data/canary/aa_memcached.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

from kvtune.canary import watch

REPO = Path(__file__).resolve().parents[2]
KVLOAD = REPO / "kvload" / "target" / "release" / "kvload"
BINARY = {"memcached": "memcached", "redis": "redis-server", "valkey": "valkey-server"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str, port: int) -> subprocess.Popen[bytes]:
    exe = shutil.which(BINARY[kind])
    assert exe, f"{BINARY[kind]} is not installed"
    argv = ([exe, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-u", "nobody", "-m", "128"]
            if kind == "memcached" else
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--daemonize", "no", "--logfile", "", "--dir", "/tmp"])
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"{kind} did not start on {port}")


def kvload(kind: str, port: int, *args: str) -> list[str]:
    return [str(KVLOAD), "--server", f"127.0.0.1:{port}", "--protocol",
            "memcache" if kind == "memcached" else "resp", "--keys", "20000",
            "--value-size", "100-2000", "--popularity", "zipf:0.99", "--no-preload",
            "--warmup", "0s", "--json", "-", "--seed", "11", *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=sorted(BINARY), required=True)
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--rate", default="4000")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    ports = [free_port(), free_port()]
    procs = [start(a.kind, p) for p in ports]
    loads: list[subprocess.Popen[bytes]] = []
    try:
        for p in ports:  # every key once, then the steady mix
            subprocess.run(kvload(a.kind, p, "--mode", "closed", "--mix", "set:1",
                                  "--duration", "2s", "--pipeline", "16"), check=True,
                           capture_output=True)
        loads = [subprocess.Popen(kvload(a.kind, p, "--rate", a.rate, "--duration",
                                         f"{a.seconds + 5:g}s", "--connections", "2"),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for p in ports]
        reader = watch.reader_of(a.kind)
        servers = [watch.Server(r, "127.0.0.1", p) for r, p in zip(("canary", "control"),
                                                                   ports, strict=True)]
        time.sleep(2)  # the load's start
        prev = [watch.snapshot(reader, s) for s in servers]
        rows = []
        deadline = time.monotonic()
        end = deadline + a.seconds
        while deadline + a.interval <= end:
            deadline += a.interval
            time.sleep(max(deadline - time.monotonic(), 0))
            now = [watch.snapshot(reader, s) for s in servers]
            figs = [watch.interval_figures(x, y) for x, y in zip(prev, now, strict=True)]
            prev = now
            rows.append({"canary": figs[0], "control": figs[1]})
        watch.close_all(servers)
    finally:
        for p in loads + procs:
            p.kill()
            p.wait()
    a.out.write_text(json.dumps({
        "kind": a.kind, "interval_s": a.interval, "rate_per_server": a.rate,
        "command": f".venv/bin/python bench/canary/record_aa.py --kind {a.kind} --seconds "
                   f"{a.seconds:g} --interval {a.interval:g} --rate {a.rate} --out {a.out}",
        "intervals": rows}, indent=0) + "\n")
    print(f"{a.kind}: {len(rows)} intervals -> {a.out}")


if __name__ == "__main__":
    main()
