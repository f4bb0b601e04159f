#!/usr/bin/env python3
"""What kvtune's own observation costs the server: `perf stat` attached to it.

kvtune attaches `perf stat -e context-switches,cpu-migrations,page-faults,task-clock -p PID`
to the server for every repetition (telemetry/perf.py). Software events are counted by the
kernel on every context switch of the server's threads, which a cache server under load
does tens of thousands of times a second. This bench measures, interleaved in one run on
fresh memcached servers (the settings of bench/capacity/precision.py), with and without
perf attached, in alternating order:
- the closed-loop peak throughput (kvload --mode closed, 16 connections);
- the knee of a capacity search (kvload --search).
Reported: the median ratio with/without and how many pairs went each way.

    python3 bench/capacity/observer.py --pairs 8 --json bench/capacity/observer.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import precision  # noqa: E402
from precision import REPO, interpreter, portable  # noqa: E402

EVENTS = "context-switches,cpu-migrations,page-faults,task-clock"


def measure(args: argparse.Namespace, extra: list[str], seed: int, perf: bool) -> dict:
    server, port = precision.start_memcached(args)
    attached = None
    try:
        if perf:
            attached = subprocess.Popen([args.perf, "stat", "-x", ",", "-e", EVENTS, "-p",
                                         str(server.pid), "-o", "/dev/null"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
        return precision.kvload(args, port, server.pid, extra, seed)
    finally:
        if attached is not None:
            attached.send_signal(signal.SIGINT)
            attached.wait(timeout=10)
        server.kill()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvload", default=str(REPO / "kvload/target/release/kvload"))
    ap.add_argument("--perf", default=shutil.which("perf") or "perf")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--slo", default="p99<=500us")
    precision.add_server_and_load_args(ap, duration="1500ms", warmup="500ms")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.time()
    rows = []
    for i in range(args.pairs):
        pair: dict = {}
        for perf in ((False, True) if i % 2 == 0 else (True, False)):
            key = "perf" if perf else "plain"
            closed = measure(args, ["--mode", "closed"], 1000 + i, perf)
            search = measure(args, ["--search", args.slo, "--precision", "2%"], 2000 + i, perf)
            pair[key] = {"closed_rate": closed["achieved_rate"], "knee": search.get("knee"),
                         "runs": len(search.get("steps") or [])}
        rows.append(pair)
        print(json.dumps(pair), flush=True)

    def ratios(field: str) -> list[float]:
        return [r["perf"][field] / r["plain"][field] for r in rows
                if r["perf"][field] and r["plain"][field]]

    summary = {}
    for field in ("closed_rate", "knee"):
        rs = ratios(field)
        summary[field] = {"median_ratio": statistics.median(rs) if rs else None,
                          "lower_with_perf": sum(x < 1 for x in rs), "pairs": len(rs)}
    out = {"what": "the server's throughput and knee with and without perf stat attached",
           "command": "python3 bench/capacity/observer.py " + " ".join(sys.argv[1:]),
           "kvload": portable(args.kvload), "python": interpreter(), "events": EVENTS,
           "settings": {k: v for k, v in vars(args).items() if k not in ("json", "kvload")},
           "pairs": rows, "summary": summary, "wall_s": time.time() - t0}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
