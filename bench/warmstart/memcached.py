#!/usr/bin/env python3
"""The library and the warm start on a real memcached (issue 33): three workload
categories (small values read-heavy, 4-16 KB values, multiget-heavy), two short studies
each (the second a slightly different workload of the same category), in one fresh
library, through `kvtune tune` as a person runs it. The first study of each category
starts cold (the library holds nothing alike); the second draws from it.

Reported per study: its warm start (from which study, how near), the baseline's
repetitions, the search trial at which it first came within 5% of its own best measured
value, its repetitions and seconds in all, and its result; then `kvtune profiles` (do the
categories' profiles differ?) and `kvtune predict` of a third workload. memcached runs on
--server-cpu, kvload on --client-cpu.

    .venv/bin/python bench/warmstart/memcached.py --json bench/warmstart/memcached.json
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

CATEGORIES: dict[str, list[dict[str, Any]]] = {
    "small-read-heavy": [
        {"mix": "get:0.95,set:0.05", "value_size": 100, "mget_size": 10},
        {"mix": "get:0.93,set:0.07", "value_size": 120, "mget_size": 10}],
    "large-values": [
        {"mix": "get:0.9,set:0.1", "value_size": "4096-16384", "mget_size": 10},
        {"mix": "get:0.88,set:0.12", "value_size": "4096-12288", "mget_size": 10}],
    "multiget-heavy": [
        {"mix": "get:0.2,mget:0.7,set:0.1", "value_size": 200, "mget_size": 16},
        {"mix": "get:0.25,mget:0.65,set:0.1", "value_size": 200, "mget_size": 12}],
}


def study(name: str, w: dict[str, Any], d: Path, args: argparse.Namespace) -> Path:
    vs = w["value_size"]
    vs_text = f'"{vs}"' if isinstance(vs, str) else str(vs)
    p = d / f"{name}.yaml"
    p.write_text(f"""study: {name}
target:
  kind: memcached
  cpus: "{args.server_cpu}"
  args: ["-m", "1024"]
load:
  mode: closed
  connections: 8
  pipeline: 8
  duration: {args.duration}s
  warmup: 0.5s
  cpus: "{args.client_cpu}"
  workload:
    keys: 20000
    value_size: {vs_text}
    popularity: "zipf:0.99"
    mix: "{w['mix']}"
    mget_size: {w['mget_size']}
knobs:
  - name: memcached.threads
    range: [1, 4]
  - memcached.reqs_per_event
  - memcached.lru_crawler
  - memcached.maxconns_fast
objective: {{metric: ops_per_sec}}
constraints: ["hit_ratio >= 0.95", "errors <= 0"]
budget: {{trials: {args.trials}}}
repetitions: 2
evaluation: {{noise_floor_runs: 4, confirm_top: 2, confirm_rounds: 4, drift_every: 0,
              ablation_max_rounds: 3}}
seed: 1
storage: sqlite:///{d / (name + '.db')}
""")
    return p


def kvtune(*a: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvtune", *a], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **env}, timeout=3600)


def facts(db: Path, name: str, direction: str = "maximize") -> dict[str, Any]:
    with sqlite3.connect(db) as c:
        reps = dict(c.execute("select kind, count(*) from kvtune_repetitions where study = ? "
                              "group by kind", (name,)).fetchall())
        warm = [json.loads(r[0]) for r in c.execute(
            "select data from kvtune_results where study = ? and key = 'warm_start' "
            "order by id", (name,))]
        trials = c.execute(
            "select t.number, v.value, a.value_json from trials t join trial_values v on "
            "v.trial_id = t.trial_id join trial_user_attributes a on a.trial_id = t.trial_id "
            "and a.key = 'kind' order by t.number").fetchall()
    search = [(n, v) for n, v, k in trials if json.loads(k) == "trial"]
    best = max((v for _, v in search), default=None)
    first = next((i for i, (_, v) in enumerate(search, 1) if best and v >= 0.95 * best), None)
    return {"repetitions": reps, "warm_start": warm[-1] if warm else None,
            "search_trials": len(search), "best": best, "first_within_5pct_of_best": first,
            "values": [v for _, v in search]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-cpu", default="0")
    ap.add_argument("--client-cpu", default="1")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    t0 = time.time()
    out: dict[str, Any] = {"studies": []}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        scratch = str(d)
        env = {"KVTUNE_LIBRARY": str(d / "library.db")}
        for cat, works in CATEGORIES.items():
            for i, w in enumerate(works, 1):
                name = f"{cat}-{i}"
                p = study(name, w, d, args)
                s0 = time.monotonic()
                r = kvtune("tune", str(p), env=env, cwd=d)
                secs = time.monotonic() - s0
                warm_lines = [ln.strip() for ln in r.stderr.splitlines()
                              if "Warm start" in ln or "first trials" in ln
                              or "noise floor: the neighbours" in ln or "Library:" in ln]
                row = {"category": cat, "study": name, "workload": w, "exit": r.returncode,
                       "seconds": round(secs, 1), "said": warm_lines,
                       "verdict": next((ln.strip() for ln in r.stdout.splitlines()
                                        if "recommend" in ln.lower()), ""),
                       **facts(d / f"{name}.db", name)}
                if r.returncode not in (0, 1):
                    row["stderr"] = r.stderr[-3000:]
                out["studies"].append(row)
                print(json.dumps({k: row[k] for k in ("study", "exit", "seconds", "said",
                                                      "repetitions", "search_trials",
                                                      "first_within_5pct_of_best", "best")}),
                      flush=True)
        prof = kvtune("profiles", env=env, cwd=d)
        out["profiles"] = prof.stdout
        print(prof.stdout)
        lst = kvtune("library", "list", env=env, cwd=d)
        out["library_list"] = lst.stdout
        print(lst.stdout)
        third = study("small-read-heavy-3", {"mix": "get:0.94,set:0.06", "value_size": 110,
                                             "mget_size": 10}, d, args)
        pred = kvtune("predict", str(third), env=env, cwd=d)
        out["predict"] = pred.stdout
        print(pred.stdout)
    out["seconds"] = round(time.time() - t0)
    out["args"] = vars(args)
    if args.json:
        # The scratch library's path is this machine's, not the result's.
        text = json.dumps(out, indent=1).replace(scratch, "$TMPDIR")
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
