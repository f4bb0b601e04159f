#!/usr/bin/env python3
"""How well one capacity search answers on this host, against dense sweeps, in one run.

Interleaved (the sweeps spread evenly among the searches: the host's speed drifts), each
on a fresh memcached pinned to the server CPU with kvload on the client CPU and watching
the server (`--watch-cpus`, `--watch-pid`):

- `--sweeps` dense sweeps (`kvload --ramp LO:HI:STEP:shuffle --ramp-slo SLO`): each rate's
  percentile over its undisturbed windows. The **reference** capacity is the last
  up-crossing of the bound by the curve through the per-rate medians over the sweeps
  (interpolated in 1/latency, saturated rates at infinite latency: the search's own
  definition), with a bootstrap interval over the sweeps;
- `--searches` knee searches (`kvload --search SLO`) with the same load, each giving a
  knee and its 95% interval, or a verdict without one (host disturbed or changed,
  client-bound, no pass).

Scored against the issue's goals: how often a search's 95% interval holds the reference
(≥ 90%), how often its knee is within ±10% of it (≥ 90%), the knees' CoV (≤ 10%), and the
cost in load-seconds (warm-up + window of every run, the burst included) against one set
of dense sweeps (≤ a quarter). Also each rate's window-to-window noise (σ of log p99
between undisturbed windows at one rate), the input of the simulator's benchmark
(bench/capacity/truth.py). Standard library only.

    python3 bench/capacity/precision.py --ramp 4k:48k:4k --slo 'p99<=2ms' \\
        --json bench/capacity/precision.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "evaluator"))
from pin import interpreter, portable  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_memcached(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = ["taskset", "-c", args.server_cpus, "memcached", "-l", "127.0.0.1", "-p",
            str(port), "-U", "0", "-t", str(args.threads), "-m", "256", "-u", "nobody"]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < 10:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("bench: memcached did not start")


def kvload(args: argparse.Namespace, port: int, pid: int, extra: list[str], seed: int,
           binary: str | None = None, duration: str | None = None) -> dict:
    argv = [binary or args.kvload, "--server", f"127.0.0.1:{port}", "--cpus", args.client_cpus,
            "--connections", str(args.connections), "--keys", str(args.keys),
            "--value-size", str(args.value_size), "--popularity", args.popularity,
            "--mix", args.mix, "--mget-size", str(args.mget_size),
            "--duration", duration or args.duration, "--warmup", args.warmup,
            "--watch-cpus", args.server_cpus, "--watch-pid", str(pid),
            "--spin-us", args.spin_us,
            "--seed", str(seed), "--json", "-", "--quiet", *extra]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"bench: kvload failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def one(args: argparse.Namespace, extra: list[str], seed: int, binary: str | None = None,
        duration: str | None = None) -> dict:
    server, port = start_memcached(args)
    try:
        return kvload(args, port, server.pid, extra, seed, binary, duration)
    finally:
        server.kill()
        server.wait()


def seconds(text: str) -> float:
    t = text.strip()
    for unit, f in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0), ("m", 60.0)):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * f
    return float(t)


def crossing(curve: list[tuple[float, float]], alpha: float) -> float | None:
    """The last up-crossing of `alpha` by the curve (rate, share of requests over the
    bound) sorted by rate, interpolated in the log of the share toward the next rate (a
    share of zero counts as 1e-6, a saturated rate as 1). None when no rate meets it
    (kvload/src/search.rs `crossing`)."""
    idx = [i for i, (_, e) in enumerate(curve) if e <= alpha]
    if not idx:
        return None
    i = idx[-1]
    if i + 1 == len(curve):
        return curve[i][0]
    (ri, ei), (rj, ej) = curve[i], curve[i + 1]
    yi, yj, ya = math.log(max(ei, 1e-6)), math.log(max(ej, 1e-6)), math.log(alpha)
    if yj <= yi:
        return ri
    return min(rj, max(ri, ri + (rj - ri) * (ya - yi) / (yj - yi)))


def step_share(step: dict) -> float | None:
    """A sweep step's share of requests over the bound in its undisturbed windows; 1 when
    saturated; None when the host disturbed it (no undisturbed window)."""
    if (step.get("figures") or {}).get("verdict") == "saturated":
        return 1.0
    v = step.get("exceed")
    return float(v) if isinstance(v, int | float) else None


def step_latency(step: dict) -> float | None:
    if (step.get("figures") or {}).get("verdict") == "saturated":
        return math.inf
    v = step.get("latency_us")
    return float(v) if isinstance(v, int | float) else None


def reference(sweeps: list[dict], alpha: float, seed: int = 1) -> dict:
    """The reference capacity: the crossing of the per-rate mean share over the bound
    across the sweeps (equal windows: the pooled share), and its bootstrap interval over
    the sweeps (which sweeps were measured)."""
    rates = sorted({float(s["rate"]) for d in sweeps for s in d["steps"]})

    def curve(ds: list[dict]) -> list[tuple[float, float]]:
        out = []
        for r in rates:
            vals = [v for d in ds for s in d["steps"] if float(s["rate"]) == r
                    and (v := step_share(s)) is not None]
            if vals:
                out.append((r, statistics.mean(vals)))
        return out

    knee = crossing(curve(sweeps), alpha)
    rng = random.Random(seed)
    boot = []
    for _ in range(400):
        k = crossing(curve([rng.choice(sweeps) for _ in sweeps]), alpha)
        if k is not None:
            boot.append(k)
    boot.sort()
    ci = [boot[int(0.025 * (len(boot) - 1))], boot[int(0.975 * (len(boot) - 1))]] \
        if boot else None
    lat = {}
    for r in rates:
        vals = [v for d in sweeps for s in d["steps"] if float(s["rate"]) == r
                and (v := step_latency(s)) is not None]
        if vals:
            lat[f"{r:g}"] = statistics.median(vals)
    return {"knee": knee, "ci": ci, "share_over_bound": dict(
                (f"{r:g}", e) for r, e in curve(sweeps)),
            "median_latency_us": lat,
            "dips": [r for r, e in curve(sweeps) if knee and r < knee and e > alpha]}


def window_noise(sweeps: list[dict]) -> dict:
    """Each rate's window-to-window σ of log p99 over undisturbed windows of unsaturated
    steps (the simulator's `wnoise`), the share of windows dropped, and the median."""
    sigmas, dropped, total = [], 0, 0
    for d in sweeps:
        for s in d["steps"]:
            f = s.get("figures") or {}
            total += s.get("windows") or 0
            dropped += sum((s.get("dropped") or {}).values())
            if f.get("verdict") != "ok":
                continue
            logs = [math.log(w["p99_us"]) for w in f.get("windows") or []
                    if w.get("p99_us")]
            if len(logs) >= 4:
                sigmas.append(statistics.stdev(logs))
    return {"median_sigma_log_p99": statistics.median(sigmas) if sigmas else None,
            "windows": total, "dropped": dropped,
            "dropped_share": dropped / total if total else None}


def load_seconds(doc: dict, args: argparse.Namespace) -> float:
    """Seconds of load a document cost: warm-up + window of every run, plus the burst."""
    runs = len(doc.get("steps") or [])
    per = seconds(args.duration) + seconds(args.warmup)
    burst = min(seconds(args.duration), 1.0) + min(seconds(args.warmup), 0.5) \
        if doc.get("kind") == "search" else 0.0
    return runs * per + burst


def score(ref: dict, rows: list[dict], sweep_cost: float) -> dict:
    knee = ref["knee"]
    with_knee = [r for r in rows if r["knee"] is not None and r["ci"]]
    covered = [r for r in with_knee if knee is not None and r["ci"][0] <= knee <= r["ci"][1]]
    errors = [r["knee"] / knee - 1 for r in with_knee] if knee else []
    knees = [r["knee"] for r in with_knee]
    verdicts: dict[str, int] = {}
    for r in rows:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    costs = sorted(r["load_seconds"] for r in rows)
    return {
        "reference_knee": knee, "reference_ci": ref["ci"],
        "searches": len(rows), "with_knee": len(with_knee), "verdicts": verdicts,
        "ci_holds_reference": len(covered),
        "share_ci_holds": len(covered) / len(with_knee) if with_knee else None,
        "within_10pct": sum(1 for e in errors if abs(e) <= 0.10),
        "share_within_10pct": (sum(1 for e in errors if abs(e) <= 0.10) / len(with_knee)
                               if with_knee else None),
        "within_5pct": sum(1 for e in errors if abs(e) <= 0.05),
        "median_error": statistics.median(errors) if errors else None,
        "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
        "knee_cov": statistics.stdev(knees) / statistics.mean(knees) if len(knees) > 1
        else None,
        "median_ci_half_width": statistics.median((r["ci"][1] - r["ci"][0]) / 2 / r["knee"]
                                                  for r in with_knee) if with_knee else None,
        "median_runs": statistics.median(r["runs"] for r in rows) if rows else None,
        "median_load_seconds": statistics.median(costs) if costs else None,
        "dense_sweeps_load_seconds": sweep_cost,
        "cost_share": (statistics.median(costs) / sweep_cost) if costs and sweep_cost
        else None,
        "median_seconds": statistics.median(r["seconds"] for r in rows) if rows else None,
    }


def regimes(rows: list[dict]) -> dict:
    """The searches split by the host's state during each: its first look at the
    reference rate (the host watch) below or above the median look. On this host the two
    groups' knees differ by a third, and each group's knees agree far better than all of
    them: the spread is the host's speed changing between searches, not the search."""
    looked = [r for r in rows if r["knee"] and r.get("reference")]
    if len(looked) < 4:
        return {}
    lat = sorted(r["reference"][0]["latency_us"] for r in looked)
    mid = lat[len(lat) // 2]
    out = {}
    for name, group in (("faster host (reference latency below the median)",
                         [r for r in looked if r["reference"][0]["latency_us"] < mid]),
                        ("slower host (at or above it)",
                         [r for r in looked if r["reference"][0]["latency_us"] >= mid])):
        knees = [r["knee"] for r in group]
        out[name] = {"searches": len(group),
                     "reference_latency_us": [min(r["reference"][0]["latency_us"]
                                                  for r in group),
                                              max(r["reference"][0]["latency_us"]
                                                  for r in group)],
                     "knee_median": statistics.median(knees),
                     "knee_cov": statistics.stdev(knees) / statistics.mean(knees)
                     if len(knees) > 1 else None}
    return out


def add_server_and_load_args(ap: argparse.ArgumentParser, duration: str,
                              warmup: str) -> None:
    """The server and load settings `start_memcached` and `kvload` read (shared with
    bench/capacity/observer.py and disturbance.py)."""
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--value-size", default="200")
    ap.add_argument("--popularity", default="zipf:0.99")
    ap.add_argument("--mix", default="mget:9,set:1")
    ap.add_argument("--mget-size", type=int, default=16)
    ap.add_argument("--duration", default=duration)
    ap.add_argument("--warmup", default=warmup)
    ap.add_argument("--spin-us", default="1000",
                    help="kvload --spin-us (kvtune's default in open loop on pinned CPUs)")


def search_row(d: dict, args: argparse.Namespace) -> dict:
    return {"verdict": d["verdict"], "reason": d["reason"], "knee": d.get("knee"),
            "ci": d.get("ci"), "bracket": d["bracket"], "runs": len(d["steps"]),
            "dips": (d.get("shape") or {}).get("dips"),
            "windows": d.get("windows"), "reference": d.get("reference"),
            "trace": [[round(s["rate"]), s["purpose"][0], s["outcome"],
                       None if s["latency_us"] is None else round(s["latency_us"])]
                      for s in d["steps"]],
            "closed_loop_rate": d["estimate"]["closed_loop_rate"],
            "load_seconds": load_seconds(d, args), "seconds": d["seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvload", default=str(REPO / "kvload/target/release/kvload"))
    ap.add_argument("--slo", default="p99<=2ms")
    ap.add_argument("--ramp", required=True, help="LO:HI:STEP of the dense sweeps")
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--searches", type=int, default=20)
    ap.add_argument("--precision", default="3%")
    ap.add_argument("--sweep-duration", default="3s",
                    help="each sweep step's window (longer than a search's)")
    add_server_and_load_args(ap, duration="1500ms", warmup="500ms")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    label = args.slo.split("<")[0].strip()
    alpha = 1 - {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999, "p999": 0.999,
                 "p99.99": 0.9999}[label]

    t0 = time.time()
    sweeps: list[dict] = []
    searches: list[dict] = []
    every = max(1, args.searches // max(args.sweeps, 1))
    sweep_at = {min(args.searches - 1, every * k + every // 2) for k in range(args.sweeps)}
    for i in range(max(args.sweeps, args.searches)):
        if i < args.searches:
            d = one(args, ["--search", args.slo, "--precision", args.precision], 100 + i)
            searches.append(d)
            ci = d.get("ci") or [None, None]
            print(f"search {i + 1}: {d['verdict']} knee {d.get('knee')} CI {ci} "
                  f"({len(d['steps'])} runs, {d['seconds']:.0f} s, "
                  f"{sum(d['windows']['dropped'].values())}/{d['windows']['total']} windows "
                  "disturbed)", flush=True)
        if i in sweep_at or (i >= args.searches and len(sweeps) < args.sweeps):
            d = one(args, ["--ramp", f"{args.ramp}:shuffle", "--ramp-slo", args.slo],
                    200 + i, duration=args.sweep_duration)
            sweeps.append(d)
            print(f"sweep {len(sweeps)}: " + " ".join(
                f"{s['rate'] / 1000:g}k:{step_latency(s) or 0:.0f}"
                for s in sorted(d["steps"], key=lambda s: s["rate"])), flush=True)
    ref = reference(sweeps, alpha)
    rows = [search_row(d, args) for d in searches]
    per_sweep = sum(len(d["steps"]) for d in sweeps) / max(len(sweeps), 1)
    sweep_cost = per_sweep * len(sweeps) * (seconds(args.sweep_duration)
                                            + seconds(args.warmup))
    summary = score(ref, rows, sweep_cost)
    summary["window_noise"] = window_noise(sweeps)
    summary["regimes"] = regimes(rows)
    summary["wall_s"] = time.time() - t0
    half = len(rows) // 2
    summary["first_half_cov"] = score(ref, rows[:half], sweep_cost)["knee_cov"]
    summary["second_half_cov"] = score(ref, rows[half:], sweep_cost)["knee_cov"]
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "what": "kvload --search knees and intervals against dense sweeps, interleaved, "
                    "each on a fresh memcached",
            "command": " ".join(["python3", portable(__file__), *sys.argv[1:]]),
            "kvload": portable(args.kvload),
            "python": interpreter(),
            "host": {"cpus": os.cpu_count(), "kernel": os.uname().release},
            "settings": {k: v for k, v in vars(args).items() if k not in ("json", "kvload")},
            "summary": summary, "reference": ref, "searches": rows,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
