"""Benchmarks (a) and (b) of the evaluator, on the synthetic target, through kvtune's real
StudyRun / Evaluator / confirmation code.

    .venv/bin/python bench/evaluator/run.py                      # 50 studies x 30 trials
    .venv/bin/python bench/evaluator/run.py --studies 10 --trials 20 --jobs 1
    # in chunks of seeds (same --commit for all), then merged into one summary:
    .venv/bin/python bench/evaluator/run.py --seeds 0:25 --methods kvtune --out A.json
    .venv/bin/python bench/evaluator/run.py --merge A.json B.json --out results.json

(a) false improvements: how often the recommendation is claimed better than the baseline
    but is not (truly worse, or no better at all in the null scenario), how often the claim
    overstates the true gain by more than 5 points, how often kvtune answers "no significant
    improvement", and how often kvtune's 95% CI covers the true gain.
(b) search efficiency: trials, and measurements, until the incumbent's TRUE value is within 2%
    of the optimum; and where the incumbent / recommendation ends.

The truth is kvtune.targets.synthetic.true_value. Results: a table on stdout and
bench/evaluator/results.json. See docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


from pin import pin_source  # noqa: E402

SOURCE = pin_source(sys.argv)

from harness import METHODS, SCENARIOS, run_study  # noqa: E402
from variants import VARIANTS, policy  # noqa: E402


def _task(args: tuple[str, str, int, int, float, str | None]) -> list[dict[str, Any]]:
    method, scenario, seed, trials, noise, var = args
    t0 = time.monotonic()
    recs = run_study(method, scenario, seed, trials, noise, policy=policy(var))
    for r in recs:
        if var:
            r["method"] = f"{r['method']}[{var}]"
        r["seconds"] = time.monotonic() - t0
    return recs


def _pick_by_rank(r: dict[str, Any]) -> dict[str, Any] | None:
    """Proposed: recommend the first significant candidate in *search* rank order instead of
    the one with the largest confirmed gain. The search data is independent of the
    confirmation data, so the confirmed gain of the chosen one is not a maximum of three
    noisy estimates (no winner's curse in the stated improvement)."""
    if r["method"] != "kvtune" or "candidates" not in r:
        return None
    sig = [c for c in r["candidates"] if c["significant"]]
    d = dict(r, method="kvtune-pickbyrank")
    if not sig:
        d.update(claims_improvement=False, claimed_gain=None, claimed_ci=None, true_gain=0.0,
                 false_improvement=False, truly_worse=False, overclaim_5pt=False,
                 ci_covers_truth=None)
        return d
    c = sig[0]
    tg = c["true_gain"]
    d.update(claims_improvement=True, claimed_gain=c["claimed"], claimed_ci=c["ci"],
             true_gain=tg, false_improvement=tg <= 1e-9, truly_worse=tg < -1e-9,
             overclaim_5pt=c["claimed"] - tg > 0.05,
             ci_covers_truth=c["ci"][0] <= tg <= c["ci"][1])
    return d


def _wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    z = 1.959964
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else math.nan


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["scenario"], r["method"]), []).append(r)
    rows = []
    for (scenario, method), rs in sorted(groups.items()):
        n = len(rs)
        claims = [r for r in rs if r["claims_improvement"]]
        fi = sum(r["false_improvement"] for r in rs)
        cov = [r["ci_covers_truth"] for r in rs if r["ci_covers_truth"] is not None]
        reached = [r for r in rs if r["trials_to_2pct"] is not None]
        row: dict[str, Any] = {
            "scenario": scenario, "method": method, "studies": n,
            "claims": len(claims) / n,
            "no_significant_improvement": 1 - len(claims) / n,
            "false_improvement": fi / n, "false_improvement_ci95": _wilson(fi, n),
            "truly_worse": sum(r["truly_worse"] for r in rs) / n,
            "overclaim_5pt": sum(r["overclaim_5pt"] for r in rs) / n,
            "mean_claimed_minus_true": statistics.fmean(
                [r["claimed_gain"] - r["true_gain"] for r in claims]) if claims else math.nan,
            "mean_true_gain": statistics.fmean(r["true_gain"] for r in rs),
            "ci_coverage": (sum(cov) / len(cov)) if cov else None,
            "mean_measurements": statistics.fmean(r["measurements"] for r in rs),
            "trials": _median([r["trials"] for r in rs]),
        }
        if scenario == "surface":
            row.update({
                "reached_2pct": len(reached) / n,
                "median_trials_to_2pct_if_reached": _median(
                    [r["trials_to_2pct"] for r in reached]),
                "median_measurements_to_2pct_if_reached": _median(
                    [r["measurements_to_2pct"] for r in reached]),
                "incumbent_within_2pct_at_end": sum(
                    r["incumbent_true_over_opt"] >= 0.98 for r in rs) / n,
                "recommended_within_2pct": sum(
                    r["recommended_true_over_opt"] >= 0.98 for r in rs) / n,
                "mean_recommended_true_over_opt": statistics.fmean(
                    r["recommended_true_over_opt"] for r in rs),
            })
        prot = [r["protocol"] for r in rs if "protocol" in r]
        if prot:
            row["protocol_per_study"] = {k: statistics.fmean(p[k] for p in prot)
                                         for k in prot[0]}
            row["studies_with_drift_alarm"] = sum(p["drift_alarms"] > 0 for p in prot) / n
        rows.append(row)
    return rows


def _pct(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.0%}"


def print_tables(rows: list[dict[str, Any]]) -> None:
    print("\n(a) claims of improvement, scored against the true surface")
    hdr = (f"{'scenario':8} {'method':34} {'n':>3} {'claims':>6} {'false':>6} {'(95% CI)':>11} "
           f"{'worse':>5} {'over5':>5} {'bias':>6} {'cover':>5} {'meas':>5}")
    print(hdr)
    for r in rows:
        lo, hi = r["false_improvement_ci95"]
        bias = r["mean_claimed_minus_true"]
        print(f"{r['scenario']:8} {r['method']:34} {r['studies']:>3} {_pct(r['claims']):>6} "
              f"{_pct(r['false_improvement']):>6} {f'{lo:.0%}-{hi:.0%}':>11} "
              f"{_pct(r['truly_worse']):>5} {_pct(r['overclaim_5pt']):>5} "
              f"{'-' if math.isnan(bias) else f'{bias:+.1%}':>6} "
              f"{_pct(r['ci_coverage']):>5} {r['mean_measurements']:>5.0f}")
    print("\n(b) search efficiency on the surface (true value within 2% of the optimum)")
    print(f"{'method':34} {'trials':>6} {'reached':>7} {'trials→2%':>9} {'meas→2%':>8} "
          f"{'inc@end':>7} {'rec≥98%':>7} {'rec/opt':>7}")
    for r in rows:
        if r["scenario"] != "surface" or r["method"].endswith("pickbyrank"):
            continue
        t2 = r["median_trials_to_2pct_if_reached"]
        m2 = r["median_measurements_to_2pct_if_reached"]
        print(f"{r['method']:34} {r['trials']:>6.0f} {_pct(r['reached_2pct']):>7} "
              f"{'-' if math.isnan(t2) else f'{t2:.0f}':>9} "
              f"{'-' if math.isnan(m2) else f'{m2:.0f}':>8} "
              f"{_pct(r['incumbent_within_2pct_at_end']):>7} "
              f"{_pct(r['recommended_within_2pct']):>7} "
              f"{r['mean_recommended_true_over_opt']:>7.1%}")
    print("\nevaluator behaviour per kvtune study (means)")
    for r in rows:
        if "protocol_per_study" in r:
            p = r["protocol_per_study"]
            print(f"{r['scenario']:8} {r['method']:34} early stops {p['early_stopped']:.1f} "
                  f"(wrong {p['early_stopped_wrongly']:.2f}), intensified "
                  f"{p['intensified']:.1f}, drift checks {p['drift_checks']:.1f}, "
                  f"studies with a (false) drift alarm {_pct(r['studies_with_drift_alarm'])}")


def _command() -> str:
    """This run's command line as recorded: paths made portable (no machine's path)."""
    from pin import portable

    args = [portable(x) if x.startswith("/") else x for x in sys.argv[1:]]
    return " ".join([".venv/bin/python", "bench/evaluator/run.py", *args])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--studies", type=int, default=50, help="seeded studies per cell")
    ap.add_argument("--trials", type=int, default=30, help="search trials per study")
    ap.add_argument("--noise", type=float, default=0.10,
                    help="synthetic noise_cov (the CoV at x=0; it grows to 1.5x at x=10)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (at most 2)")
    ap.add_argument("--variant-studies", type=int, default=None,
                    help="studies for each proposed evaluator change (default: --studies; "
                         "0 skips them)")
    ap.add_argument("--seeds", default=None,
                    help="A:B runs seeds A..B-1 only (a chunk; default 0:--studies)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated subset of {','.join(METHODS)}")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help=f"comma-separated subset of {','.join(SCENARIOS)}")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="summarise the records of these result files (chunks) instead of "
                         "running studies")
    ap.add_argument("--out", type=Path, default=HERE / "results.json")
    ap.add_argument("--worktree", action="store_true",
                    help="measure src/ as it is on disk instead of the last commit")
    ap.add_argument("--commit", default="HEAD", help="measure src/kvtune of this commit")
    a = ap.parse_args()
    if a.merge:
        return merge(a.merge, a.out)
    jobs = max(1, min(2, a.jobs))
    lo, hi = (int(x) for x in a.seeds.split(":")) if a.seeds else (0, a.studies)
    vstudies = (hi - lo) if a.variant_studies is None else a.variant_studies
    methods = [m for m in a.methods.split(",") if m]
    if unknown := set(methods) - set(METHODS):
        ap.error(f"unknown methods {sorted(unknown)}")
    tasks: list[tuple[str, str, int, int, float, str | None]] = []
    for seed in range(lo, hi):
        for scenario in a.scenarios.split(","):
            for method in methods:
                tasks.append((method, scenario, seed, a.trials, a.noise, None))
    for seed in range(lo, lo + vstudies):
        for var in VARIANTS:
            tasks.append(("kvtune", "surface", seed, a.trials, a.noise, var))
    t0 = time.monotonic()
    records: list[dict[str, Any]] = []
    if jobs == 1:
        results = map(_task, tasks)
    else:
        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(_task, tasks, chunksize=2)
    for done, recs in enumerate(results, 1):
        records.extend(recs)
        if done % 10 == 0 or done == len(tasks):
            print(f"  {done}/{len(tasks)} studies, {time.monotonic() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    for r in list(records):
        d = _pick_by_rank(r)
        if d:
            records.append(d)
    rows = summarise(records)
    print_tables(rows)
    elapsed = time.monotonic() - t0
    print(f"\n{len(tasks)} studies in {elapsed:.0f} s with {jobs} worker(s) on "
          f"{os.cpu_count()} CPUs")
    import kvtune

    print(f"kvtune measured: {SOURCE} ({Path(kvtune.__file__).parent})")
    doc = {"source": SOURCE,
           "command": _command(),
           "studies": hi - lo, "seeds": [lo, hi], "trials": a.trials, "noise_cov": a.noise,
           "variant_studies": vstudies, "elapsed_s": elapsed, "summary": rows,
           "records": records}
    write(doc, a.out)
    return 0


def write(doc: dict[str, Any], out: Path) -> None:
    doc["note"] = ("the synthetic target's values do not depend on timing: other work on the "
                   "host changes only elapsed_s")
    # The summary readable, the records one a line (the file stays diffable and small).
    records = doc["records"]
    head = json.dumps({k: v for k, v in doc.items() if k != "records"}, indent=1, default=str)
    lines = ",\n".join(json.dumps(r, separators=(",", ":"), default=str) for r in records)
    out.write_text(head[:-2] + ',\n "records": [\n' + lines + "\n ]\n}\n")
    print(f"wrote {out}")


def merge(paths: list[Path], out: Path) -> int:
    """One summary over the records of several chunks (they must measure the same source)."""
    docs = [json.loads(p.read_text()) for p in paths]
    sources = {d["source"] for d in docs}
    if len(sources) != 1:
        raise SystemExit(f"chunks measured different sources: {sorted(sources)}")
    records = [r for d in docs for r in d["records"]]
    rows = summarise(records)
    print_tables(rows)
    seeds = sorted({r["seed"] for r in records})
    doc = {"source": docs[0]["source"],
           "command": _command(),
           "chunks": [{"file": p.name, "command": d["command"], "elapsed_s": d["elapsed_s"]}
                      for p, d in zip(paths, docs, strict=True)],
           "studies": len(seeds), "trials": docs[0]["trials"], "noise_cov": docs[0]["noise_cov"],
           "elapsed_s": sum(d["elapsed_s"] for d in docs), "summary": rows,
           "records": records}
    write(doc, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
