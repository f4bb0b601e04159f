#!/usr/bin/env python3
"""Valkey 8 against Redis 7 on this host: capacity at one SLO and one workload, the
defaults and the I/O-threads configuration of each, side by side in one run.

Each round measures the four configurations in a shuffled order, each with `kvtune run
--capacity SLO --repetitions N` (a host profile, then N knee searches on fresh servers,
pooled with their intervals). A comparison pairs two configurations by round: the change
is the random-effects mean of the rounds' log ratios with its Hartung–Knapp interval
(kvtune.stats.compare_paired, the confirmation's own), so the host's drift between rounds
cancels.

    python bench/valkey/compare.py --rounds 3 --repetitions 2 --slo 'p99_us <= 2000' \\
        --json bench/valkey/compare.json

The configurations (the workload and SLO of examples/redis-capacity.yaml and
examples/valkey-capacity.yaml: MGET of 16 keys of 1000 B, zipf 0.99, one SET in eleven):

- redis7, valkey8: the defaults, the server pinned to CPU 0, kvload on CPU 1;
- redis7-io2: io-threads 2 with io-threads-do-reads, on the server's one CPU;
- valkey8-io2: io-threads 2 (8.0 reads and parses on its I/O threads by itself), on the
  server's one CPU;
- valkey8-io2-cpus01 (first round only): io-threads 2 with the server on CPUs 0-1, the
  second shared with kvload.

A host of two CPUs has no CPU for an I/O thread that is not the server's or the load's:
the io2 rows measure what the thread costs without one, the cpus01 row what kvtune says
when the server shares the load's CPU."""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1].parent
KVTUNE = [sys.executable, "-m", "kvtune"]

# name -> (study file, --set values, extra target.args). On two CPUs the server keeps CPU 0
# and kvload CPU 1: the io2 configurations run their second I/O thread on the server's one
# CPU (target.args; a tuning study refuses it, rule <kind>-io-threads-cpus, since that thread
# has no CPU of its own). `SHARED` gives the server CPUs 0-1, shared with kvload: measured in
# the first round only, to show what kvtune says of it.
CONFIGS: dict[str, tuple[str, list[str], list[str]]] = {
    "redis7": ("examples/redis-capacity.yaml", [], []),
    "valkey8": ("examples/valkey-capacity.yaml", [], []),
    "redis7-io2": ("examples/redis-capacity.yaml", [],
                   ["--io-threads", "2", "--io-threads-do-reads", "yes"]),
    "valkey8-io2": ("examples/valkey-capacity.yaml", [], ["--io-threads", "2"]),
}
SHARED: dict[str, tuple[str, list[str], list[str]]] = {
    "valkey8-io2-cpus01": ("examples/valkey-capacity.yaml", ["placement.server_cpus=0-1"],
                           ["--io-threads", "2"]),
}
PAIRS = (("valkey8", "redis7"), ("valkey8-io2", "valkey8"), ("redis7-io2", "redis7"),
         ("valkey8-io2", "redis7-io2"))


def study_file(name: str, workdir: Path) -> Path:
    """The configuration's study: the example with its extra target.args, and without the
    knobs that would set what those arguments set (a knob and target.args may not both)."""
    import yaml

    study, _, extra = {**CONFIGS, **SHARED}[name]
    doc = yaml.safe_load((REPO / study).read_text())
    if extra:
        doc["target"]["args"] = [*(doc["target"].get("args") or []), *extra]
        doc["knobs"] = [k for k in doc.get("knobs") or []
                        if "io_threads" not in (k if isinstance(k, str) else k["name"])]
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    sets = {**CONFIGS, **SHARED}[name][1]
    argv = [*KVTUNE, "run", str(study_file(name, workdir)), "--capacity", args.slo,
            "--repetitions", str(args.repetitions), "--json",
            *[w for s in sets for w in ("--set", s)]]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, cwd=workdir, timeout=3600)
    took = time.monotonic() - t0
    out: dict[str, Any] = {"config": name, "rc": r.returncode, "seconds": round(took, 1)}
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        out["error"] = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return out
    cap = doc.get("capacity") or {}
    out.update({"value": cap.get("value"), "ci": cap.get("ci"),
                "searches": cap.get("searches"), "with_knee": cap.get("with_knee"),
                "knees": [(rep.get("search") or {}).get("knee")
                          for rep in doc.get("repetitions", [])],
                "verdicts": [(rep.get("search") or {}).get("verdict")
                             for rep in doc.get("repetitions", [])],
                "failed": doc.get("failed"),
                "profile": {k: (cap.get("host_profile") or {}).get("kvload", {}).get(k)
                            for k in ("burst_rate", "floor_us")}})
    return out


def compare(rows: list[dict[str, Any]], a: str, b: str) -> dict[str, Any]:
    from kvtune.stats import compare_paired

    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["config"]] = r
    pairs = [(x[a], x[b]) for x in by_round.values()
             if a in x and b in x and x[a].get("value") and x[b].get("value")]
    if len(pairs) < 2:
        return {"candidate": a, "baseline": b, "rounds": len(pairs),
                "note": "fewer than 2 rounds with both values"}
    c = compare_paired([p[0]["value"] for p in pairs], [tuple(p[0]["ci"]) for p in pairs],
                       [p[1]["value"] for p in pairs], [tuple(p[1]["ci"]) for p in pairs],
                       "maximize")
    change, lo, hi = c.change()
    return {"candidate": a, "baseline": b, "rounds": len(pairs),
            "change": change, "ci": [lo, hi], "p_value": c.p_value,
            "ratios": [p[0]["value"] / p[1]["value"] for p in pairs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repetitions", type=int, default=2)
    ap.add_argument("--slo", default="p99_us <= 2000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    workdir = Path.cwd() / "bench-valkey-work"
    workdir.mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for rnd in range(1, args.rounds + 1):
        order = list(CONFIGS) + (list(SHARED) if rnd == 1 else [])
        rng.shuffle(order)
        for name in order:
            row = {"round": rnd, **run(name, args, workdir)}
            rows.append(row)
            ci = row.get("ci") or [math.nan, math.nan]
            print(f"round {rnd} {name:12} rc={row['rc']} capacity="
                  f"{row.get('value') or float('nan'):,.0f} req/s (95% CI {ci[0]:,.0f} … "
                  f"{ci[1]:,.0f}) knees={row.get('knees')} {row.get('error') or ''}"
                  f"({row['seconds']} s)", flush=True)
    comparisons = [compare(rows, a, b) for a, b in PAIRS]
    for c in comparisons:
        if "change" in c:
            print(f"{c['candidate']} vs {c['baseline']}: {c['change']:+.1%} (95% CI "
                  f"{c['ci'][0]:+.1%} … {c['ci'][1]:+.1%}), {c['rounds']} rounds")
        else:
            print(f"{c['candidate']} vs {c['baseline']}: {c['note']}")
    doc = {"date": time.strftime("%Y-%m-%d"), "slo": args.slo, "rounds": args.rounds,
           "repetitions": args.repetitions, "seconds": round(time.monotonic() - t0),
           "runs": rows, "comparisons": comparisons}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
