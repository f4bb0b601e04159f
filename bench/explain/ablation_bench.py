"""Benchmark: does the ablation attribute the gain to the right knobs?

For each seed, a TPE search of the synthetic surface (bench/explain/importance_bench.py's
study: 4 real knobs and a no-effect one, CoV 5%, 20 trials) gives a recommendation (its
best trial). The truth comes from the noise-free surface: reverting a changed knob k
loses `true(rec) / true(rec with k reverted) - 1`; k truly carries the gain when that
loss exceeds CARRY (2%), is truly without effect below NONE (0.5%), and is ambiguous in
between (either answer counts as right). The ablation is then measured as kvtune runs it
(evaluation defaults: 5 interleaved rounds for every arm, then more rounds only for the
changes still ambiguous, up to what the measured noise needs to resolve a 5% revert
effect, at most `ablation_max_rounds` = 30; alpha 0.05) with fresh noisy repetitions; a
study is right when every true carrier is in `carries` and no no-effect knob is. The
cost is the repetitions the ablation ran; "extra" is what it ran beyond the fixed
5-round design ((changed knobs + 2) x 5).

    .venv/bin/python bench/explain/ablation_bench.py [--seeds 10] [--rounds 5]
        [--max-rounds 30] [--effect 0.05] [--json F]

`--max-rounds` equal to `--rounds` is the former fixed design (one look at alpha).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from importance_bench import BASELINE, COV, run_study

from kvtune.documents import build
from kvtune.spec import EvaluationSpec
from kvtune.study import ablation
from kvtune.targets.synthetic import true_value

CARRY, NONE = 0.02, 0.005


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="evaluation.confirm_rounds")
    ap.add_argument("--max-rounds", type=int, default=EvaluationSpec().ablation_max_rounds,
                    help="evaluation.ablation_max_rounds (= --rounds: one fixed look)")
    ap.add_argument("--effect", type=float, default=EvaluationSpec().ablation_effect,
                    help="evaluation.ablation_effect")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for s in range(args.seeds):
        data = run_study(args.trials, s)
        best = max((t for t in data.search_trials() if t.user_attrs.get("kind") == "trial"),
                   key=lambda t: float(t.value or 0))
        rec = dict(best.params)
        changed = ablation.changed_knobs(rec, BASELINE)
        truth = {}
        for k in changed:
            loss = true_value(rec) / true_value({**rec, k: BASELINE[k]}) - 1
            truth[k] = "carries" if loss > CARRY else "none" if abs(loss) < NONE else "either"
        rng = np.random.default_rng(5000 + s)

        def measure(cfg: dict[str, Any], rng: np.random.Generator = rng
                    ) -> tuple[str, str, dict[str, Any]]:
            v = true_value(cfg) * float(rng.lognormal(-COV**2 / 2, COV))
            return "ok", "", {"ops_per_sec": v}

        conf = build("confirmation", {
            "recommended": {"name": f"trial {best.number}", "config": rec, "samples": [],
                            "comparison": {"p_value": 0.0}},
            "baseline": {"samples": []}})
        res = ablation.ablate(conf, BASELINE, "ops_per_sec", "maximize",
                              EvaluationSpec(confirm_rounds=args.rounds,
                                             ablation_max_rounds=args.max_rounds,
                                             ablation_effect=args.effect), s, measure)
        if len(changed) == 1:  # the confirmation measured it: carries if it truly does
            res["carries"] = changed if truth[changed[0]] != "none" else []
        got = set(res["carries"])
        must = {k for k, t in truth.items() if t == "carries"}
        never = {k for k, t in truth.items() if t == "none"}
        right = must <= got and not (got & never)
        top = max(must, key=lambda k: true_value(rec) / true_value({**rec, k: BASELINE[k]}),
                  default=None)
        rows.append({"seed": s, "changed": changed, "truth": truth,
                     "carries": sorted(got), "right": right,
                     "largest_named": top is None or top in got,
                     "false_carrier": bool(got & never),
                     "resolution": res.get("resolution"),
                     "measurements": res.get("measurements", 0),
                     "fixed_5_rounds": (len(changed) + 2) * 5 if len(changed) > 1 else 0,
                     # every arm at the rounds the noise asked for, in one fixed look
                     "fixed_planned": (len(changed) + 2) * int(res.get("planned_rounds") or 0),
                     "rounds": res.get("rounds"), "planned_rounds": res.get("planned_rounds"),
                     "unresolved": res.get("unresolved", []),
                     "arm_rounds": {r["knob"]: r.get("rounds") for r in res["knobs"]},
                     "stopped": {r["knob"]: r.get("stopped") for r in res["knobs"]}})
        print(json.dumps(rows[-1]))
    rate = sum(r["right"] for r in rows) / len(rows)
    largest = sum(r["largest_named"] for r in rows) / len(rows)
    false = sum(r["false_carrier"] for r in rows)
    reps = [r["measurements"] for r in rows]
    fixed = [r["fixed_5_rounds"] for r in rows]
    extra = sum(reps) - sum(fixed)
    planned = sum(r["fixed_planned"] for r in rows)
    print(f"ablation right in {rate:.0%} of {len(rows)} studies; the largest carrier named in "
          f"{largest:.0%}; a no-effect change called a carrier in {false} "
          f"({args.trials} trials, {args.rounds} first rounds, at most {args.max_rounds}, "
          f"effect {args.effect:.0%}, CoV {COV:.0%}); repetitions {sum(reps)} "
          f"(median {float(np.median(reps)):g}, max {max(reps)} per study), "
          f"{extra:+d} against the fixed 5-round design ({sum(fixed)}); every arm at the "
          f"planned rounds would have taken {planned}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "rate": rate, "largest_named": largest, "false_carriers": false,
            "rounds": args.rounds, "max_rounds": args.max_rounds, "effect": args.effect,
            "repetitions": sum(reps), "repetitions_fixed_5_rounds": sum(fixed),
            "repetitions_fixed_planned": planned,
            "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
