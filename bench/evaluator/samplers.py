"""Samplers on the synthetic target extended with a rule and a failure region like the real
catalog's, run through kvtune's own StudyRun (search only, no confirmation).

The surface is the synthetic target's (optimum 1.55x the defaults, failure region
threads >= 14 with mode c: the server "refuses to start", as memcached does with
hashpower <= its lock table), plus a rule like memcached-hashpower-lock-table:
`synthetic.threads > 2 * synthetic.x + 4` is forbidden (about a quarter of the space).

Per sampler and study: wasted measured trials (rule-breaking: always 0 now; failed starts),
rule-breaking proposals (told infeasible, never measured), the first measured trial whose
configuration's true value is within 2% of the optimum among valid configurations, and the
true value of the incumbent at the end. Methods:

    tpe, random, cmaes, tpe-independent,  kvtune's protocol (r = 3, intensification, early
    gp                                     stop), search only, with that sampler (gp needs
                                           torch: run it with a Python that has it)
    onesample-tpe, onesample-random        one repetition per configuration (A-Tune, MLOS)

Each row also has the sampler's time per proposal (`ask_ms`: kvtune.optimizer.ask, which
includes the rule check, timed around every call).

    .venv/bin/python bench/evaluator/samplers.py --studies 50 --trials 30 [--out FILE]
    # chunks of seeds, every chunk the same --commit, then merged:
    .venv/bin/python bench/evaluator/samplers.py --seeds 0:10 --jobs 2 --out A.json
    .venv/bin/python bench/evaluator/samplers.py --merge A.json B.json --out samplers.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pin import interpreter, pin_source, portable

SOURCE = pin_source(sys.argv)

from rich.console import Console  # noqa: E402

from kvtune import optimizer  # noqa: E402
from kvtune.errors import UserError  # noqa: E402
from kvtune.knobs import rules  # noqa: E402
from kvtune.study.loader import load_study as load  # noqa: E402
from kvtune.study.run import StudyRun  # noqa: E402
from kvtune.targets.synthetic import true_value  # noqa: E402

RULE = rules.Rule("synthetic-threads-x", ("synthetic.threads", "synthetic.x"),
                  lambda v: int(v.get("synthetic.threads")) > 2 * float(v.get("synthetic.x")) + 4,
                  "synthetic.threads may not exceed 2 x synthetic.x + 4")

STUDY = """\
study: {name}
target: {{kind: synthetic, noise_cov: 0.10}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: ops_per_sec}}
budget: {{trials: {trials}}}
repetitions: {reps}
evaluation: {evaluation}
seed: {seed}
"""
KVTUNE_EVAL = "{noise_floor_runs: 5, drift_every: 0, confirm_rounds: 0}"
ONESAMPLE_EVAL = ("{noise_floor_runs: 1, intensify: false, early_stop: false, drift_every: 0, "
                  "confirm_rounds: 0, max_reruns: 0}")
METHODS = ("tpe", "random", "cmaes", "tpe-independent", "gp", "onesample-tpe",
           "onesample-random")
ASK_SECONDS: list[float] = []  # every optimizer.ask of the current study, timed


def _timed_ask(*args: Any, **kwargs: Any) -> optimizer.Asked:
    t0 = time.perf_counter()
    try:
        return _ASK(*args, **kwargs)
    finally:
        ASK_SECONDS.append(time.perf_counter() - t0)


_ASK = optimizer.ask
optimizer.ask = _timed_ask  # measured, not changed: the search calls optimizer.ask


def valid_optimum() -> float:
    best = 0.0
    for i in range(1001):
        x = i / 100
        for t in range(1, 17):
            cfg = {"synthetic.x": x, "synthetic.threads": t, "synthetic.mode": "b",
                   "synthetic.flag": True}
            if t > 2 * x + 4:
                continue
            v = true_value(cfg)
            if not math.isnan(v):
                best = max(best, v)
    return best


OPT = valid_optimum()


def run(method: str, seed: int, trials: int, tmp: Path) -> dict[str, Any]:
    one = method.startswith("onesample")
    sampler = method.split("-", 1)[1] if one else method
    p = tmp / f"{method}-{seed}.yaml"
    p.write_text(STUDY.format(name=f"{method}-{seed}", trials=trials, reps=1 if one else 3,
                              evaluation=ONESAMPLE_EVAL if one else KVTUNE_EVAL, seed=seed))
    loaded = load(p)
    loaded.spec = loaded.spec.model_copy(update={"sampler": sampler})
    r = StudyRun(loaded, console=Console(quiet=True), base_dir=tmp)
    ASK_SECONDS.clear()
    t0 = time.monotonic()
    r.run(confirm=False)
    wall = time.monotonic() - t0
    study = optuna.load_study(study_name=f"{method}-{seed}", storage=r.store.storage)
    measured = [t for t in study.trials if t.user_attrs.get("kind") == "trial"]
    first_2pct = next((i + 1 for i, t in enumerate(measured)
                       if t.state == optuna.trial.TrialState.COMPLETE
                       and true_value(t.user_attrs["config"]) >= 0.98 * OPT), None)
    broke = sum(1 for t in measured if RULE.broken(rules.Values(
        t.user_attrs["config"], r.session.ctx, lambda n: None, "synthetic")))
    failed = sum(1 for t in measured if t.state == optuna.trial.TrialState.FAIL)
    done = [t for t in measured if t.state == optuna.trial.TrialState.COMPLETE]
    best = max(done, key=lambda t: float(t.value or 0)) if done else None
    return {"method": method, "seed": seed, "measured": len(measured),
            "rule_measured": broke, "failed_starts": failed,
            "rejected": sum(1 for t in study.trials if t.user_attrs.get("kind") == "rejected"),
            "repeats": sum(1 for t in study.trials if t.user_attrs.get("kind") == "repeat"),
            "first_within_2pct": first_2pct,
            "incumbent_true": true_value(best.user_attrs["config"]) / OPT if best else None,
            "measurements": len(r.store.repetitions(f"{method}-{seed}")), "wall_s": wall,
            "asks": len(ASK_SECONDS), "ask_ms_mean": 1000 * statistics.mean(ASK_SECONDS),
            "ask_ms_max": 1000 * max(ASK_SECONDS)}


def summary(rows: list[dict[str, Any]], trials: int) -> list[dict[str, Any]]:
    out = []
    for m in METHODS:
        every = [r for r in rows if r["method"] == m]
        rs = [r for r in every if "error" not in r]
        if not every:
            continue
        if not rs:
            out.append({"method": m, "studies": len(every), "errors": len(every)})
            continue
        reached = [r["first_within_2pct"] for r in rs if r["first_within_2pct"]]
        out.append({
            "method": m, "studies": len(rs), "errors": len(every) - len(rs),
            "rule_breaking_measured": sum(r["rule_measured"] for r in rs),
            "failed_starts_per_study": statistics.mean(r["failed_starts"] for r in rs),
            "rejected_per_study": statistics.mean(r["rejected"] for r in rs),
            "reached_2pct": len(reached) / len(rs),
            # Studies that never reach count as budget + 1 (a censored median).
            "median_trials_to_2pct": statistics.median(
                [r["first_within_2pct"] or trials + 1 for r in rs]),
            "incumbent_true_mean": statistics.mean(r["incumbent_true"] or 0 for r in rs),
            "measurements_mean": statistics.mean(r["measurements"] for r in rs),
            "wall_s_mean": statistics.mean(r["wall_s"] for r in rs),
            "ask_ms_mean": statistics.mean(r["ask_ms_mean"] for r in rs),
            "ask_ms_max": max(r["ask_ms_max"] for r in rs)})
    return out


def _task(args: tuple[str, int, int, bool]) -> dict[str, Any]:
    method, seed, trials, rule = args
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if rule and RULE not in rules.RULES:
        rules.RULES.append(RULE)
    with tempfile.TemporaryDirectory(prefix="kvtune-samplers-") as d:
        try:
            row = run(method, seed, trials, Path(d))
        except UserError as e:  # e.g. a sampler that keeps proposing rule-breaking points
            row = {"method": method, "seed": seed, "error": str(e)}
    row["rule"] = rule
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=50)
    ap.add_argument("--seeds", default=None, help="A:B runs seeds A..B-1 (a chunk)")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--methods", default=",".join(m for m in METHODS if m != "gp"))
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (at most 2)")
    ap.add_argument("--merge", nargs="+", default=None,
                    help="summarise the rows of these result files (chunks)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("samplers.json")))
    ap.add_argument("--no-rule", action="store_true",
                    help="without the rule (the failure region stays): for samplers that "
                         "cannot learn from rejected proposals")
    ap.add_argument("--commit", default="HEAD", help="measure src/kvtune of this commit")
    ap.add_argument("--worktree", action="store_true", help="measure src/ as it is on disk")
    a = ap.parse_args()
    if a.merge:
        docs = [json.loads(Path(p).read_text()) for p in a.merge]
        if len({d["source"] for d in docs}) != 1:
            raise SystemExit("chunks measured different sources")
        rows = [r for d in docs for r in d["rows"]]
        trials = docs[0]["args"]["trials"]
        summ = summary(rows, trials)
        for s in summ:
            print(json.dumps(s))
        Path(a.out).write_text(json.dumps(
            {"valid_optimum": OPT, "source": docs[0]["source"], "args": vars(a),
             "chunks": [{"file": portable(p), "args": d["args"], "python": d.get("python")}
                        for p, d in zip(a.merge, docs, strict=True)],
             "studies": len({r["seed"] for r in rows}), "summary": summ, "rows": rows},
            indent=1))
        return
    lo, hi = (int(x) for x in a.seeds.split(":")) if a.seeds else (0, a.studies)
    tasks = [(m, seed, a.trials, not a.no_rule) for seed in range(lo, hi) for m in a.methods.split(",")]
    jobs = max(1, min(2, a.jobs))
    rows = []
    results = map(_task, tasks) if jobs == 1 else ProcessPoolExecutor(jobs).map(_task, tasks)
    for row in results:
        rows.append(row)
        print(json.dumps(row), flush=True)
    summ = summary(rows, a.trials)
    for s in summ:
        print(json.dumps(s))
    Path(a.out).write_text(json.dumps({"valid_optimum": OPT, "source": SOURCE,
                                       "python": interpreter(), "args": vars(a),
                                       "summary": summ, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
