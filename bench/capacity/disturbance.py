#!/usr/bin/env python3
"""Does a capacity search say "host disturbed" when the host is disturbed, instead of
reporting the host's knee as the server's?

Interleaved, each on a fresh memcached: `--searches` searches with a CPU hog (a busy loop
pinned to the server's CPU) started at a random moment of the search for `--hog` seconds,
and as many undisturbed searches (the control). Reported: each search's verdict; for the
disturbed ones, how many ended without a knee (host_disturbed, host_changed) and, for
those that still gave a knee, how far it is from the controls' median and whether the
controls' median is inside its interval (a knee the hog did not move is a right answer:
its windows were dropped). Standard library only.

    python3 bench/capacity/disturbance.py --slo 'p99<=2ms' --json bench/capacity/disturbance.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "capacity"))
sys.path.insert(0, str(REPO / "bench" / "evaluator"))
from pin import interpreter, portable  # noqa: E402
from precision import add_server_and_load_args, one, search_row  # noqa: E402


def with_hog(args: argparse.Namespace, seed: int, start: float) -> dict:
    """One search with a busy loop on the server's CPU from `start` s for `args.hog` s."""
    hog: dict[str, subprocess.Popen[bytes]] = {}

    def run_hog() -> None:
        time.sleep(start)
        hog["p"] = subprocess.Popen(["taskset", "-c", args.server_cpus, "timeout",
                                     str(args.hog), "sh", "-c", "while :; do :; done"])
        hog["p"].wait()

    t = threading.Thread(target=run_hog, daemon=True)
    t.start()
    try:
        return one(args, ["--search", args.slo, "--precision", args.precision], seed)
    finally:
        t.join(timeout=args.hog + start + 5)
        if "p" in hog and hog["p"].poll() is None:
            hog["p"].kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvload", default=str(REPO / "kvload/target/release/kvload"))
    ap.add_argument("--slo", default="p99<=2ms")
    ap.add_argument("--precision", default="3%")
    ap.add_argument("--searches", type=int, default=6)
    ap.add_argument("--hog", type=float, default=8.0, help="seconds the busy loop runs")
    add_server_and_load_args(ap, duration="1500ms", warmup="500ms")
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = random.Random(7)
    t0 = time.time()
    rows = []
    for i in range(args.searches):
        for kind in (("hog", "control") if i % 2 == 0 else ("control", "hog")):
            start = rng.uniform(3.0, 15.0)
            d = (with_hog(args, 300 + i, start) if kind == "hog"
                 else one(args, ["--search", args.slo, "--precision", args.precision],
                          400 + i))
            row = {"kind": kind, "hog_start_s": start if kind == "hog" else None,
                   **search_row(d, args)}
            rows.append(row)
            print(f"{kind} {i + 1}: {row['verdict']} knee {row['knee']} CI {row['ci']} "
                  f"({row['runs']} runs)" + (f", hog from {start:.1f} s" if kind == "hog"
                                             else ""), flush=True)
    controls = [r["knee"] for r in rows if r["kind"] == "control" and r["knee"]]
    ref = statistics.median(controls) if controls else None
    hogged = [r for r in rows if r["kind"] == "hog"]
    with_knee = [r for r in hogged if r["knee"]]
    summary = {
        "searches_with_hog": len(hogged),
        "said_host": sum(1 for r in hogged if r["verdict"] in ("host_disturbed",
                                                               "host_changed")),
        "verdicts_with_hog": {v: sum(1 for r in hogged if r["verdict"] == v)
                              for v in sorted({r["verdict"] for r in hogged})},
        "verdicts_control": {v: sum(1 for r in rows if r["kind"] == "control"
                                    and r["verdict"] == v)
                             for v in sorted({r["verdict"] for r in rows
                                              if r["kind"] == "control"})},
        "control_median_knee": ref,
        "hog_knees_vs_control": [r["knee"] / ref - 1 for r in with_knee] if ref else None,
        "hog_cis_holding_control_median": sum(1 for r in with_knee if ref and r["ci"]
                                              and r["ci"][0] <= ref <= r["ci"][1]),
        "wall_s": time.time() - t0,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "what": "capacity searches with a CPU hog on the server's CPU for part of each, "
                    "against undisturbed controls, interleaved",
            "command": " ".join(["python3", portable(__file__), *sys.argv[1:]]),
            "python": interpreter(),
            "host": {"cpus": os.cpu_count(), "kernel": os.uname().release},
            "settings": {k: v for k, v in vars(args).items() if k not in ("json", "kvload")},
            "summary": summary, "searches": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
