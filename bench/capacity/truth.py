#!/usr/bin/env python3
"""Does the capacity search recover a knee that is known exactly?

Against `kvload --simulate` (an M/M/1 server, docs/kvload.md "A simulated server"), whose
knee at an SLO `pq <= B` is `service - ln(1/(1-q)) / (B - base)`, in one run:

1. **kvload's knee search**: `--searches` searches of each curve (several service rates,
   base latencies and SLOs) at each run-to-run noise level (`noise`, the log-normal spread
   of the service rate from one step to the next; the finite windows add their own
   sampling noise). Reported per noise level: the share of searches within ±5% of the true
   knee, the median |error| and bias, the runs (votes included), the distinct rates per
   search and the CoV of one curve's knees.
2. **A mutilate-style fixed-step scan** of the same curves to the same precision (`--ramp`
   upward in steps of the precision of the knee until the first fail, as `mutilate --scan`
   is used): its runs and its error, side by side.
3. **kvtune's capacity study** of the synthetic target (`target.kind: synthetic`, each
   repetition a search of a simulated server whose knee follows the knobs): is the
   recommendation's true capacity near the best in the domain, and does the confirmation's
   95% CI contain the true change?

    python3 bench/capacity/truth.py --json bench/capacity/truth.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "evaluator"))
sys.path.insert(0, str(REPO / "src"))
from pin import interpreter, portable  # noqa: E402

from kvtune.spec import parse_slo  # noqa: E402
from kvtune.targets.synthetic import SYNTHETIC_KNOBS, true_capacity  # noqa: E402

# (service req/s, base µs, SLO): a tight and a loose bound, a high percentile, a slow server.
CURVES = [
    (100_000.0, 50.0, "p99<=500us"),
    (100_000.0, 50.0, "p99<=200us"),
    (150_000.0, 80.0, "p99.9<=2ms"),
    (20_000.0, 100.0, "p99<=1ms"),
    (60_000.0, 30.0, "p50<=100us"),
]
QUANTILE = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99.9": 0.999}


def slo_parts(slo: str) -> tuple[float, float]:
    label, bound = slo.split("<=")
    b = float(bound.removesuffix("us").removesuffix("ms")) * (1000 if bound.endswith("ms")
                                                               else 1)
    return QUANTILE[label], b


def knee_truth(service: float, base: float, slo: str) -> float:
    q, b = slo_parts(slo)
    return service - math.log(1 / (1 - q)) / ((b - base) * 1e-6)


def kvload(binary: str, argv: list[str]) -> dict:
    r = subprocess.run([binary, *argv, "--duration", "1s", "--warmup", "200ms",
                        "--connections", "16", "--json", "-", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"bench: kvload failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def search(binary: str, service: float, base: float, noise: float, slo: str,
           seed: int) -> dict:
    doc = kvload(binary, ["--simulate", f"service={service},base={base}us,noise={noise}",
                          "--search", slo, "--seed", str(seed)])
    return {"knee": doc["knee"], "verdict": doc["verdict"], "runs": len(doc["steps"]),
            "rates": len({s["rate"] for s in doc["steps"]}), "pairs": pair_diffs(doc["steps"])}


def pair_diffs(steps: list[dict]) -> list[float]:
    """The log differences of the SLO's latency between consecutive runs at one rate (a
    step measured again), both unsaturated: their spread is the search's step noise
    (variance 2σ²), comparable between this simulator and a real host
    (bench/capacity/precision.py's traces)."""
    out = []
    for a, b in itertools.pairwise(steps):
        if a["rate"] == b["rate"] and b.get("repeat") and "saturated" not in (
                a["outcome"], b["outcome"]) and a["latency_us"] > 0 and b["latency_us"] > 0:
            out.append(math.log(b["latency_us"] / a["latency_us"]))
    return out


def step_sigma(diffs: list[float]) -> float | None:
    """σ of one run's log latency from pair differences (a robust scale: the median
    absolute difference over 0.6745·√2, for the normal with variance 2σ²)."""
    if not diffs:
        return None
    return statistics.median(abs(d) for d in diffs) / 0.6745 / math.sqrt(2)


def scan(binary: str, service: float, base: float, noise: float, slo: str, seed: int,
         precision: float) -> dict:
    """Upward from a tenth of the knee in steps of `precision` × the knee, to the first
    fail: the last pass is the answer (a fixed-step scan knows no better step)."""
    truth = knee_truth(service, base, slo)
    step = precision * truth
    # The grid does not know the knee: its start is offset by a fraction of a step.
    lo, hi = (0.1 + precision * ((seed * 0.618034) % 1.0)) * truth, service * 1.05
    doc = kvload(binary, ["--simulate", f"service={service},base={base}us,noise={noise}",
                          "--ramp", f"{lo:.0f}:{hi:.0f}:{step:.0f}", "--seed", str(seed)])
    q, b = slo_parts(slo)
    key = {0.5: "p50_us", 0.9: "p90_us", 0.99: "p99_us", 0.999: "p999_us"}[q]
    last_pass, runs = None, 0
    for s in doc["steps"]:
        runs += 1
        f = s["figures"]
        ok = f["verdict"] == "ok" and f["latency"]["total"]["corrected"][key] <= b
        if not ok:
            break
        last_pass = s["rate"]
    return {"knee": last_pass, "runs": runs}


def summarize(rows: list[dict], truth_key: str = "truth") -> dict:
    errs = [r["knee"] / r[truth_key] - 1 for r in rows if r["knee"]]
    return {
        "n": len(rows),
        "with_knee": len(errs),
        "within_5pct": sum(abs(e) <= 0.05 for e in errs) / len(rows),
        "within_2pct": sum(abs(e) <= 0.02 for e in errs) / len(rows),
        "median_abs_error": statistics.median(abs(e) for e in errs),
        "bias": statistics.median(errs),
        "median_runs": statistics.median(r["runs"] for r in rows),
        "p90_runs": sorted(r["runs"] for r in rows)[int(0.9 * (len(rows) - 1))],
        "median_rates": statistics.median(r["rates"] for r in rows) if "rates" in rows[0]
        else None,
        "share_runs_at_most_8": sum(r["runs"] <= 8 for r in rows) / len(rows),
    }


def best_in_domain(slo: str) -> tuple[float, dict]:
    s = parse_slo(slo)
    best = (0.0, {})
    modes = SYNTHETIC_KNOBS["synthetic.mode"].domain.choices or ()
    for x, t, m, f in itertools.product([i / 20 for i in range(201)], range(1, 17), modes,
                                        (False, True)):
        p = {"synthetic.x": x, "synthetic.threads": t, "synthetic.mode": m,
             "synthetic.flag": f}
        c = true_capacity(p, s)
        if not math.isnan(c) and c > best[0]:
            best = (c, p)
    return best


STUDY = """\
study: truth-{seed}
target: {{kind: synthetic, noise_cov: {cov}}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: capacity, slo: "{slo}"}}
budget: {{trials: {trials}}}
repetitions: 3
seed: {seed}
storage: sqlite:///truth-{seed}.db
"""


def study(seed: int, cov: float, slo: str, trials: int, work: Path) -> dict:
    path = work / f"truth-{seed}.yaml"
    path.write_text(STUDY.format(seed=seed, cov=cov, slo=slo, trials=trials))
    env = {**os.environ, "COLUMNS": "200", "KVLOAD": str(REPO / "kvload/target/release/kvload")}
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "kvtune", "tune", path.name], cwd=work, env=env,
                       capture_output=True, text=True, timeout=1800)
    wall = time.time() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"bench: kvtune tune failed: {r.stderr[-2000:]}")
    show = subprocess.run([sys.executable, "-m", "kvtune", "show", path.name, "--json"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads(show.stdout)
    s = parse_slo(slo)
    base_truth = true_capacity({}, s)
    out: dict = {"seed": seed, "wall_s": wall, "baseline_truth": base_truth}
    conf = doc.get("confirmation") or {}
    rec = conf.get("recommended") or {}
    cfg = rec.get("config") or {}  # none: the defaults stand
    out["recommended"] = cfg
    out["recommended_truth"] = true_capacity(cfg, s) if cfg else base_truth
    out["true_change"] = out["recommended_truth"] / base_truth - 1
    comp = rec.get("comparison") or {}
    if cfg and comp.get("change_ci_low") is not None:
        out["measured_change"] = comp.get("change")
        out["ci"] = [comp["change_ci_low"], comp["change_ci_high"]]
        out["ci_covers_truth"] = out["ci"][0] <= out["true_change"] <= out["ci"][1]
    out["verdict"] = conf.get("verdict")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvload", default=str(REPO / "kvload/target/release/kvload"))
    ap.add_argument("--searches", type=int, default=40)
    ap.add_argument("--noises", default="0,0.03,0.1",
                    help="run-to-run noise levels of a server's steps (log-normal sigma)")
    ap.add_argument("--studies", type=int, default=4)
    ap.add_argument("--study-slo", default="p99_us <= 300")
    ap.add_argument("--study-cov", type=float, default=0.05)
    ap.add_argument("--study-trials", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.time()
    result: dict = {"what": "capacity search vs the known knee of kvload --simulate",
                    "command": "python3 bench/capacity/truth.py " + " ".join(sys.argv[1:]),
                    "kvload": portable(args.kvload), "python": interpreter(),
                    "curves": [{"service": s, "base_us": b, "slo": slo,
                                "knee": knee_truth(s, b, slo)} for s, b, slo in CURVES]}
    levels = {}
    seed = 1
    for noise in (float(j) for j in args.noises.split(",")):
        rows, scans = [], []
        for (service, base, slo), i in itertools.product(CURVES, range(args.searches)):
            seed += 1
            truth = knee_truth(service, base, slo)
            rows.append({**search(args.kvload, service, base, noise, slo, seed),
                         "truth": truth, "curve": slo + f"@{service:g}"})
            if i < max(4, args.searches // 4):
                scans.append({**scan(args.kvload, service, base, noise, slo, seed, 0.02),
                              "truth": truth})
        summary = summarize(rows)
        # Repeatability: the CoV of the knees of one curve's searches, averaged over curves.
        covs = []
        for c in {r["curve"] for r in rows}:
            ks = [r["knee"] for r in rows if r["curve"] == c and r["knee"]]
            covs.append(statistics.stdev(ks) / statistics.mean(ks))
        summary["knee_cov"] = statistics.mean(covs)
        summary["step_sigma_log_latency"] = step_sigma([d for r in rows for d in r["pairs"]])
        for r in rows:
            del r["pairs"]
        levels[f"{noise:g}"] = {"search": summary, "fixed_step_scan": summarize(scans)}
        print(f"noise {noise:g}: search {json.dumps(summary)}")
        print(f"          scan {json.dumps(levels[f'{noise:g}']['fixed_step_scan'])}")
    result["levels"] = levels
    opt, opt_cfg = best_in_domain(args.study_slo)
    studies = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.studies):
            s = study(100 + i, args.study_cov, args.study_slo, args.study_trials, Path(tmp))
            s["share_of_optimum"] = s["recommended_truth"] / opt
            studies.append(s)
            print(f"study {i}: {json.dumps(s)}")
    result["studies"] = {"slo": args.study_slo, "noise_cov": args.study_cov,
                         "trials": args.study_trials,
                         "optimum": opt, "optimum_config": opt_cfg,
                         "baseline": true_capacity({}, parse_slo(args.study_slo)),
                         "runs": studies}
    result["wall_s"] = time.time() - t0
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
