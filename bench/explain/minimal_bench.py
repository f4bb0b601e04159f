#!/usr/bin/env python3
"""Benchmark (issue 30): does kvtune recommend the changes that carry the gain, and
nothing else, and what does its ablation cost?

Each seed is a whole `kvtune tune` of the synthetic target (its surface is known:
kvtune.targets.synthetic.true_value) over the knobs x (a 30% peak), threads (a few %),
mode (+10%), flag (+8%, only with x > 5: the interaction) and inert (no effect), CoV 5%,
20 TPE trials, the study's default confirmation and ablation. The truth is read off the
noise-free surface for the configuration the confirmation recommended: reverting a
changed knob k loses `true(rec) / true(rec with k reverted) - 1`; k truly carries the
gain above CARRY (2%), is inert below NONE (0.5%), and either answer is right between.

Per study: whether the final recommendation (`ablation.choose`'s, what `kvtune export`
writes) contains every true carrier and no inert change; whether its measured gain's 95%
CI holds its true gain; the ablation's repetitions. `--kvtune-src DIR` runs another
checkout's src (e.g. the commit before issue 30) on the same seeds: "today's" cost side by
side.

    .venv/bin/python bench/explain/minimal_bench.py --seeds 50 --json bench/explain/minimal.json
    .venv/bin/python bench/explain/minimal_bench.py --seeds 50 --kvtune-src /tmp/old/src \\
        --json bench/explain/minimal-before.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))
from kvtune.targets.synthetic import SYNTHETIC_KNOBS, true_value  # noqa: E402

CARRY, NONE = 0.02, 0.005
KNOBS = ["synthetic.x", "synthetic.threads", "synthetic.mode", "synthetic.flag",
         "synthetic.inert"]
BASELINE = {k: SYNTHETIC_KNOBS[k].default for k in KNOBS}

STUDY = """\
study: minimal-{seed}
target: {{kind: synthetic, noise_cov: 0.05}}
knobs: [{knobs}]
objective: {{metric: ops_per_sec}}
budget: {{trials: {trials}}}
repetitions: 2
seed: {seed}
storage: sqlite:///minimal-{seed}.db
"""


def truth(rec: dict[str, Any]) -> dict[str, str]:
    """Each changed knob's true role in `rec`: carries, inert or either."""
    out = {}
    for k in KNOBS:
        if rec.get(k) == BASELINE[k]:
            continue
        loss = true_value(rec) / true_value({**rec, k: BASELINE[k]}) - 1
        out[k] = "carries" if loss > CARRY else "inert" if abs(loss) < NONE else "either"
    return out


def one(seed: int, trials: int, src: Path, work: Path) -> dict[str, Any]:
    (work / f"s{seed}.yaml").write_text(STUDY.format(seed=seed, trials=trials,
                                                     knobs=", ".join(KNOBS)))
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kvtune", "tune", f"s{seed}.yaml"], cwd=work,
                       env=env, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"seed {seed}: kvtune tune failed: {r.stderr[-2000:]}")
    probe = ("import json,sys; from kvtune.store import Store; "
             f"s=Store('sqlite:///{work}/minimal-{seed}.db'); "
             f"print(json.dumps({{'c': s.last_result('minimal-{seed}', 'confirmation'), "
             f"'a': s.last_result('minimal-{seed}', 'ablation')}}, default=str))")
    got = json.loads(subprocess.run([sys.executable, "-c", probe], cwd=work, env=env,
                                    capture_output=True, text=True, check=True).stdout)
    conf, abl = got["c"] or {}, got["a"] or {}
    rec = (conf.get("recommended") or {}).get("config")
    row: dict[str, Any] = {"seed": seed, "wall_s": wall, "recommended": rec is not None}
    if rec is None:
        return row
    roles = truth(rec)
    choice = abl.get("choice") or {}
    chosen = {**BASELINE, **(choice.get("config") or rec)} if choice else \
        {**BASELINE, **rec}
    kept = [k for k in KNOBS if chosen.get(k) != BASELINE[k]]
    carriers = [k for k, v in roles.items() if v == "carries"]
    inert = [k for k, v in roles.items() if v == "inert"]
    true_gain = true_value(chosen) / true_value(BASELINE) - 1
    gain = choice.get("minimal_gain") if choice.get("chosen") == "minimal" else None
    gain = gain or (conf.get("recommended") or {}).get("comparison")
    ci = (gain or {}).get("ci") or [(gain or {}).get("change_ci_low"),
                                    (gain or {}).get("change_ci_high")]
    row.update({
        "roles": roles, "kept": kept, "chosen": choice.get("chosen", "full"),
        "has_every_carrier": all(k in kept for k in carriers),
        "no_inert": not any(k in kept for k in inert),
        "true_gain": true_gain, "gain": (gain or {}).get("change"), "gain_ci": ci,
        "ci_holds_truth": (None if not ci or ci[0] is None else
                           ci[0] <= true_gain <= ci[1]),
        "ablation_repetitions": abl.get("measurements", 0),
        "ablation_skipped": abl.get("skipped")})
    row["right"] = row["has_every_carrier"] and row["no_inert"]
    return row



def source(src: Path) -> str:
    """The code measured, named by its commit (a machine path is no result's business)."""
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True)
        commit = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = "unknown commit"
    return f"src at {commit}" + ("" if src.resolve() == (REPO / "src").resolve() else
                                 " (--kvtune-src)")

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--kvtune-src", type=Path, default=REPO / "src")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for s in range(args.seeds):
            row = one(s, args.trials, args.kvtune_src.resolve(), Path(d))
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("seed", "chosen", "kept", "roles",
                                                      "right", "ci_holds_truth",
                                                      "ablation_repetitions")}), flush=True)
    rec = [r for r in rows if r["recommended"]]
    held = [r["ci_holds_truth"] for r in rec if r.get("ci_holds_truth") is not None]
    summary = {
        "studies": len(rows), "recommended": len(rec),
        "right": sum(r["right"] for r in rec),
        "share_right": sum(r["right"] for r in rec) / len(rec) if rec else None,
        "every_carrier": sum(r["has_every_carrier"] for r in rec),
        "no_inert": sum(r["no_inert"] for r in rec),
        "minimal_chosen": sum(r["chosen"] == "minimal" for r in rec),
        "ci_holds_true_gain": sum(held), "with_ci": len(held),
        "ablation_repetitions_median": statistics.median(
            r["ablation_repetitions"] for r in rec) if rec else None,
        "ablation_repetitions_total": sum(r["ablation_repetitions"] for r in rec),
        "median_wall_s": statistics.median(r["wall_s"] for r in rows),
        "src": source(args.kvtune_src),
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "studies": rows},
                                              indent=1, default=lambda x: None
                                              if isinstance(x, float) and math.isnan(x)
                                              else str(x)) + "\n")


if __name__ == "__main__":
    main()
