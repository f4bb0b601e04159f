#!/usr/bin/env python3
"""Capacity searches seeded from a neighbour's knee (issue 33), against servers whose
knee is known: `kvload --simulate` (an M/M/1 server, docs/kvload.md), the same search and
the same document as against a real server.

For each of `--servers` simulated servers (service rates log-uniform in 20k … 200k req/s,
the synthetic target's base latency and noise), one search cold (a closed-loop burst
estimates the first rate) and one seeded as kvtune's warm start seeds it (`--search-range
KNEE/4:KNEE*4`, whose geometric middle, the neighbour's knee, is the first rate; no burst),
with the same seed and precision. The neighbour's knee is the server's true knee times a
log-normal error of `--neighbour-error` (a neighbour's workload and configuration are not
this one's). Counted: the runs each search made (the burst included), whether it converged
to the precision, and its knee's error against the truth. Goal: seeded searches take at
most half the runs (median) to the same precision.

    .venv/bin/python bench/warmstart/capacity.py --json bench/warmstart/capacity.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
KVLOAD = str(REPO / "kvload" / "target" / "release" / "kvload")
SLO_US = 500.0
BASE_US = 40.0


def search(mu: float, seed: int, extra: list[str], precision: float) -> dict[str, Any]:
    sim = f"service={mu:.3f},base={BASE_US}us,jitter=0.03,noise=0.02"
    argv = [KVLOAD, "--simulate", sim, "--search", f"p99<={SLO_US:g}us", "--precision",
            f"{precision:g}", "--connections", "16", "--duration", "1500ms", "--warmup",
            "200ms", "--window", "250ms", "--seed", str(seed), "--json", "-", "--quiet",
            *extra]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"kvload failed: {r.stderr.strip()}")
    doc = json.loads(r.stdout)
    est = doc.get("estimate") or {}
    burst = 1 if est.get("closed_loop_rate") else 0
    drawn = (doc.get("config") or {}).get("simulated_service_rate") or mu
    truth = drawn - math.log(100) / ((SLO_US - BASE_US) * 1e-6)
    knee = doc.get("knee")
    return {"verdict": doc.get("verdict"), "runs": len(doc.get("steps") or []) + burst,
            "burst": bool(burst), "knee": knee, "truth": truth,
            "error": (knee / truth - 1) if knee else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=20)
    ap.add_argument("--neighbour-error", type=float, default=0.15)
    ap.add_argument("--precision", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    rows = []
    for i in range(args.servers):
        mu = float(math.exp(rng.uniform(math.log(20e3), math.log(200e3))))
        truth = mu - math.log(100) / ((SLO_US - BASE_US) * 1e-6)
        neighbour = truth * float(math.exp(rng.normal(0, args.neighbour_error)))
        seed = 1000 + i
        cold = search(mu, seed, [], args.precision)
        warm = search(mu, seed, ["--search-range", f"{neighbour / 4:.0f}:{neighbour * 4:.0f}"],
                      args.precision)
        rows.append({"service": mu, "neighbour_knee": neighbour, "cold": cold, "warm": warm})
        print(f"server {i}: truth {truth:,.0f}, neighbour {neighbour:,.0f}; runs cold "
              f"{cold['runs']} ({cold['verdict']}) warm {warm['runs']} ({warm['verdict']})",
              flush=True)
    ok = [r for r in rows if r["cold"]["verdict"] == "ok" and r["warm"]["verdict"] == "ok"]
    ratio = [r["warm"]["runs"] / r["cold"]["runs"] for r in ok]
    summary = {
        "servers": len(rows), "both_converged": len(ok),
        "median_runs_cold": statistics.median(r["cold"]["runs"] for r in rows),
        "median_runs_warm": statistics.median(r["warm"]["runs"] for r in rows),
        "median_ratio": statistics.median(ratio) if ratio else None,
        "median_abs_error_cold": statistics.median(abs(r["cold"]["error"]) for r in ok),
        "median_abs_error_warm": statistics.median(abs(r["warm"]["error"]) for r in ok),
        "goal_half": bool(ratio) and statistics.median(ratio) <= 0.5,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "args": vars(args),
                                               "seconds": round(time.time() - t0),
                                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
