#!/usr/bin/env python3
"""Does the capacity search find a knee that is known, with an interval that holds it,
at a host's window noise?

Against `kvload --simulate` (docs/kvload.md "A simulated server"): an M/M/1 server whose
speed is drawn again for every window (`wnoise`, the window-to-window σ of log p99 a host
shows: bench/capacity/precision.py measures it), whose stalls some windows see and the
host watch catches (`stall`), and whose idle path makes low rates slow (`wake`). The
truth of such a server is the curve a search measures, pooled over very many windows:
each curve's **truth** is the last up-crossing of the bound by a dense simulated sweep of
long runs (`--truth-seconds` per rate, every window pooled: kvload --ramp --ramp-slo),
the search's own definition.

For each curve and noise level, `--searches` searches of the same server (fresh seeds):
the share whose 95% interval holds the truth (goal ≥ 90%), within ±10% (≥ 90%), the
knees' CoV (≤ 5% on the simulator), the runs per search, and the shape said (dips).

    python3 bench/capacity/truth.py --json bench/capacity/truth.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "evaluator"))
sys.path.insert(0, str(REPO / "bench" / "capacity"))
from pin import interpreter, portable  # noqa: E402
from precision import crossing  # noqa: E402

# (name, simulated server, SLO, ramp of the truth sweep)
CURVES = [
    ("queue at 90% load", "service=50k,base=100us", "p99<=1ms", "20k:50k:1k"),
    ("tight bound", "service=100k,base=50us", "p99<=200us", "40k:100k:2k"),
    ("p99.9", "service=40k,base=80us", "p99.9<=2ms", "16k:40k:1k"),
    ("idle path", "service=50k,base=50us,wake=600us", "p99<=1ms", "2k:50k:2k"),
]


def kvload(binary: str, argv: list[str]) -> dict:
    r = subprocess.run([binary, *argv, "--json", "-", "--quiet"], capture_output=True,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"bench: kvload failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def alpha(slo: str) -> float:
    """1 − q of the SLO's percentile: the share of requests allowed over the bound."""
    return 1 - {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}[slo.split("<=")[0]]


def truth(binary: str, sim: str, slo: str, ramp: str, seconds: float, seeds: int) -> dict:
    """The pooled curve of `seeds` long ramps (each its own server draw and windows): a
    noisy level's share over the bound is carried by its rare worst windows, so one ramp's
    few hundred windows per rate leave the truth itself several % off."""
    shares: dict[float, list[float]] = {}
    for seed in range(1, seeds + 1):
        doc = kvload(binary, ["--simulate", sim, "--ramp", ramp, "--ramp-slo", slo,
                              "--duration", f"{seconds:g}s", "--warmup", "300ms",
                              "--window", "250ms", "--connections", "16",
                              "--seed", str(seed)])
        for s in doc["steps"]:
            share = 1.0 if s["figures"]["verdict"] == "saturated" else s["exceed"]
            if share is not None:
                shares.setdefault(float(s["rate"]), []).append(float(share))
    # Every seed offers the same requests at a rate: the pooled share is the mean share.
    curve = sorted((r, sum(v) / len(v)) for r, v in shares.items())
    return {"knee": crossing(curve, alpha(slo)), "curve": curve, "seeds": seeds}


def search(binary: str, sim: str, slo: str, seed: int, precision: str) -> dict:
    doc = kvload(binary, ["--simulate", sim, "--search", slo, "--precision", precision,
                          "--duration", "1500ms", "--warmup", "300ms", "--window", "250ms",
                          "--connections", "16", "--seed", str(seed)])
    return {"verdict": doc["verdict"], "knee": doc["knee"], "ci": doc["ci"],
            "runs": len(doc["steps"]), "dips": doc["shape"]["dips"],
            "dropped": sum(doc["windows"]["dropped"].values()),
            "windows": doc["windows"]["total"]}


def summarize(rows: list[dict], knee: float | None) -> dict:
    ok = [r for r in rows if r["knee"] is not None and r["ci"]]
    errs = [r["knee"] / knee - 1 for r in ok] if knee else []
    held = sum(1 for r in ok if knee and r["ci"][0] <= knee <= r["ci"][1])
    knees = [r["knee"] for r in ok]
    return {
        "searches": len(rows), "with_knee": len(ok),
        "verdicts": {v: sum(1 for r in rows if r["verdict"] == v)
                     for v in sorted({r["verdict"] for r in rows})},
        "share_ci_holds_truth": held / len(ok) if ok else None,
        "share_within_10pct": sum(abs(e) <= 0.10 for e in errs) / len(ok) if ok else None,
        "share_within_5pct": sum(abs(e) <= 0.05 for e in errs) / len(ok) if ok else None,
        "median_error": statistics.median(errs) if errs else None,
        "knee_cov": statistics.stdev(knees) / statistics.mean(knees) if len(knees) > 1
        else None,
        "median_ci_half_width": statistics.median((r["ci"][1] - r["ci"][0]) / 2 / r["knee"]
                                                  for r in ok) if ok else None,
        "median_runs": statistics.median(r["runs"] for r in rows),
        "p90_runs": sorted(r["runs"] for r in rows)[int(0.9 * (len(rows) - 1))],
        "with_dips": sum(1 for r in rows if r["dips"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvload", default=str(REPO / "kvload/target/release/kvload"))
    ap.add_argument("--searches", type=int, default=40)
    ap.add_argument("--precision", default="3%")
    ap.add_argument("--levels", default="quiet:;lnoise=0.3,stall=0.02:20:0.5;"
                                        "wnoise=0.1,stall=0.02:20:0.5",
                    help="noise levels, ';'-separated simulator keys (lnoise: the "
                         "window-to-window σ of log latency, as precision.py measures a "
                         "host's; wnoise: of the server's speed; stall: P:MS:SEEN); "
                         "'quiet:' is none")
    ap.add_argument("--truth-seconds", type=float, default=60.0)
    ap.add_argument("--truth-seeds", type=int, default=10,
                    help="long ramps pooled for each curve's truth")
    ap.add_argument("--json")
    args = ap.parse_args()
    t0 = time.time()
    out = []
    for name, server, slo, ramp in CURVES:
        for level in args.levels.split(";"):
            w = "quiet" if level.startswith("quiet") else level
            sim = server + ("" if w == "quiet" else f",{level}")
            t = truth(args.kvload, sim, slo, ramp, args.truth_seconds, args.truth_seeds)
            rows = [search(args.kvload, sim, slo, 1000 + i, args.precision)
                    for i in range(args.searches)]
            s = summarize(rows, t["knee"])
            out.append({"curve": name, "server": sim, "slo": slo, "noise": w,
                        "truth": t["knee"], "summary": s, "searches": rows})

            def pct(x: float | None) -> str:
                return "-" if x is None else f"{x:.0%}"

            print(f"{name:18} {w:34} truth {t['knee'] or 0:>7.0f}  CI holds "
                  f"{pct(s['share_ci_holds_truth'])}  ±10% {pct(s['share_within_10pct'])}  "
                  f"CoV {pct(s['knee_cov'])}  runs {s['median_runs']}  "
                  f"{s['verdicts']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "what": "kvload --search against simulated servers of known pooled curves",
            "command": " ".join(["python3", portable(__file__), *sys.argv[1:]]),
            "kvload": portable(args.kvload), "python": interpreter(),
            "host": {"cpus": os.cpu_count(), "kernel": os.uname().release},
            "wall_s": time.time() - t0, "results": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
