"""Why did the surface scenario of run.py come out worse at 13152e5 than at 17a6391?
Runs kvtune's surface studies of two commits side by side, seed by seed, each with the
harness of its own time, and counts per study what the scores of run.py do not show:
Optuna trials asked, measured search trials, distinct configurations, repeats reused,
rule-breaking proposals, failed trials, measurements by kind; then where the quality is lost
(the search's incumbent at the end vs the confirmation's recommendation).

    .venv/bin/python bench/evaluator/surface_diff.py --commit 13152e5 --seeds 0:10 --out new.json
    .venv/bin/python bench/evaluator/surface_diff.py --commit 17a6391 \
        --harness "$OLD"/bench/evaluator --seeds 0:10 --out old.json
    .venv/bin/python bench/evaluator/surface_diff.py --compare old.json new.json

(--harness: the bench/evaluator directory whose harness.py scores the studies; run.py's
results.json of 17a6391 was made with the harness of commit cad494c, so a worktree of it:
`git worktree add "$OLD" cad494c`, OLD any directory outside this checkout.)
See docs/evaluation.md, "Why the surface search came out worse".
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _setup(commit: str, harness_dir: str) -> Any:
    sys.path.insert(0, str(HERE))
    from pin import pin_source

    pin_source(["--commit", commit])
    sys.path.insert(0, harness_dir)
    import harness

    return harness


def _one(args: tuple[str, str, int, int, int | None]) -> dict[str, Any]:
    commit, harness_dir, seed, trials, drift_reps = args
    harness = _setup(commit, harness_dir)
    if drift_reps is not None:
        # The drift check's repetitions (5 since issue 12, 3 before): every extra
        # measurement shifts the seeded noise stream of everything after it.
        import kvtune.study.drift as drift

        drift.DRIFT_REPETITIONS = drift_reps
    captured: list[Any] = []
    base_cls = harness.StudyRun

    class Capturing(base_cls):  # type: ignore[misc, valid-type]
        def run(self, confirm: bool = True) -> dict[str, Any]:
            captured.append(self)
            out: dict[str, Any] = super().run(confirm=confirm)
            return out

    harness.StudyRun = Capturing
    try:
        recs = harness.run_study("kvtune", "surface", seed, trials, 0.10)
    finally:
        harness.StudyRun = base_cls
    rec = next(r for r in recs if r["method"] == "kvtune")
    nc = next(r for r in recs if r["method"] == "kvtune-noconfirm")
    study = captured[0].study
    trials_all = study.get_trials(deepcopy=False)
    kinds: dict[str, int] = {}
    for t in trials_all:
        k = str(t.user_attrs.get("kind"))
        kinds[k] = kinds.get(k, 0) + 1
    search = [t for t in trials_all if t.user_attrs.get("kind") == "trial"]
    keys = {json.dumps(t.user_attrs.get("config"), sort_keys=True) for t in search}
    failed = sum(1 for t in search if t.state.name == "FAIL")
    opt = harness._OPT
    tv = harness.true_value
    # The best configuration the search measured (truth), and the best of the top 3 by
    # search value (what the confirmation could pick at best).
    trues = [tv(t.user_attrs["config"]) / opt for t in search if t.state.name == "COMPLETE"]
    cands = rec.get("candidates") or []
    base_true = rec["baseline_true"]
    cand_true = [(1 + c["true_gain"]) * base_true / opt for c in cands]
    return {
        "seed": seed, "asked": len(trials_all), "kinds": kinds, "measured_search": len(search),
        "distinct_search_configs": len(keys), "failed_search": failed,
        "measurements_by_kind": rec.get("measurements_by_kind"),
        "measurements": rec["measurements"],
        "best_measured_true_over_opt": max(trues) if trues else math.nan,
        "best_candidate_true_over_opt": max(cand_true) if cand_true else math.nan,
        "incumbent_true_over_opt": rec["incumbent_true_over_opt"],
        "recommended_true_over_opt": rec["recommended_true_over_opt"],
        "reached_2pct": rec["trials_to_2pct"] is not None,
        "claims": rec["claims_improvement"], "claimed_gain": rec["claimed_gain"],
        "true_gain": rec["true_gain"], "noconfirm_claimed": nc["claimed_gain"],
        "protocol": rec.get("protocol"),
        "search_values": [[t.number, t.value, tv(t.user_attrs["config"]) / opt]
                          for t in sorted(search, key=lambda t: t.number)],
    }


def summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rs)
    claims = [r for r in rs if r["claims"]]

    def mean(k: str) -> float:
        return statistics.fmean(r[k] for r in rs)

    return {
        "studies": n, "asked": mean("asked"), "measured_search": mean("measured_search"),
        "distinct_search_configs": mean("distinct_search_configs"),
        "repeats": statistics.fmean(r["kinds"].get("repeat", 0) for r in rs),
        "rejected": statistics.fmean(r["kinds"].get("rejected", 0) for r in rs),
        "failed_search": mean("failed_search"), "measurements": mean("measurements"),
        "best_measured_within_2pct": sum(r["best_measured_true_over_opt"] >= 0.98
                                         for r in rs) / n,
        "mean_best_measured": mean("best_measured_true_over_opt"),
        "reached_2pct": sum(r["reached_2pct"] for r in rs) / n,
        "incumbent_within_2pct": sum(r["incumbent_true_over_opt"] >= 0.98 for r in rs) / n,
        "mean_incumbent": mean("incumbent_true_over_opt"),
        "best_candidate_within_2pct": sum(r["best_candidate_true_over_opt"] >= 0.98
                                          for r in rs) / n,
        "recommended_within_2pct": sum(r["recommended_true_over_opt"] >= 0.98 for r in rs) / n,
        "mean_recommended": mean("recommended_true_over_opt"),
        "claims": len(claims) / n,
        "bias": statistics.fmean(r["claimed_gain"] - r["true_gain"] for r in claims)
        if claims else math.nan,
        "drift_alarms": statistics.fmean((r["protocol"] or {}).get("drift_alarms", 0)
                                         for r in rs),
        "early_stops": statistics.fmean((r["protocol"] or {}).get("early_stopped", 0)
                                        for r in rs),
    }


def compare(paths: list[Path]) -> None:
    docs = [json.loads(p.read_text()) for p in paths]
    rows = [(d["commit"], d["seeds"], summary(d["records"])) for d in docs]
    keys = list(rows[0][2])
    print(f"{'':28}" + "".join(f"{c[:9] + ' ' + str(s[0]) + ':' + str(s[1]):>22}"
                               for c, s, _ in rows))
    for k in keys:
        print(f"{k:28}" + "".join(f"{r[k]:>22.3f}" for _, _, r in rows))
    if len(docs) == 2:
        a = {r["seed"]: r for r in docs[0]["records"]}
        b = {r["seed"]: r for r in docs[1]["records"]}
        same = [s for s in a if s in b and [v[2] for v in a[s]["search_values"]]
                == [v[2] for v in b[s]["search_values"]]]
        print(f"seeds whose 30 search configurations are identical: {len(same)} of "
              f"{len(set(a) & set(b))}")


def _harness_name(harness_dir: str) -> str:
    """The harness as recorded: this checkout's bench/evaluator, or the commit of the
    worktree it came from (never a machine's path)."""
    import subprocess

    if Path(harness_dir).resolve() == HERE:
        return "bench/evaluator"
    sha = subprocess.run(["git", "-C", harness_dir, "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=False).stdout.strip()
    return f"bench/evaluator of commit {sha}" if sha else "bench/evaluator of another checkout"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--harness", default=str(HERE))
    ap.add_argument("--seeds", default="0:10")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--drift-reps", type=int, default=None,
                    help="set kvtune.study.drift.DRIFT_REPETITIONS (the old code drew 3)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path, nargs="+")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare)
        return 0
    lo, hi = (int(x) for x in a.seeds.split(":"))
    tasks = [(a.commit, a.harness, s, a.trials, a.drift_reps) for s in range(lo, hi)]
    with ProcessPoolExecutor(max_workers=max(1, min(2, a.jobs))) as pool:
        records = list(pool.map(_one, tasks))
    import subprocess

    sha = subprocess.run(["git", "-C", str(HERE), "rev-parse", a.commit], check=True,
                         capture_output=True, text=True).stdout.strip()
    doc = {"commit": sha, "harness": _harness_name(a.harness), "seeds": [lo, hi], "trials": a.trials,
           "drift_reps": a.drift_reps,
           "summary": summary(records), "records": records}
    if a.out:
        a.out.write_text(json.dumps(doc, indent=None, default=str))
    print(json.dumps(doc["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
