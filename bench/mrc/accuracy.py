"""SHARDS against the exact byte-LRU curve (issue 43: mean absolute error ≤ 0.01).

For each stream: the exact curve (Mattson stack distances over every request), then
SHARDS at fixed rates and fixed sizes under three hash salts; the mean absolute error over
40 log-spaced sizes from 0.1% to 110% of the stream's distinct bytes, its maximum, and the
time each took. The hit ratio counts every get (cold misses included).

    .venv/bin/python bench/mrc/accuracy.py --json bench/mrc/accuracy.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from kvtune.mrc import lru
from kvtune.mrc.requests import from_model

STREAMS: dict[str, tuple[dict[str, Any], int]] = {
    "zipf0.8-1M-keys": ({"keys": 1_000_000, "popularity": "zipf:0.8", "mix": "get:1",
                         "key_size": 20, "value_size": "100-1000"}, 3_000_000),
    "zipf1.0-mixed-ttl": ({"keys": 500_000, "popularity": "zipf:1.0", "mix": "get:9,set:1",
                           "key_size": 30, "value_size": "list:100:4,1000:3,10000:1",
                           "ttl": "list:0:2,60:1"}, 3_000_000),
    # SHARDS's low rates need many keys in the sample: 0.1% of 4 million keys (run alone
    # with --streams: the exact curve of 20 million requests takes about ten minutes)
    "zipf0.8-4M-keys-20M": ({"keys": 4_000_000, "popularity": "zipf:0.8", "mix": "get:1",
                             "key_size": 20, "value_size": "100-1000"}, 20_000_000),
}
DEFAULT_STREAMS = ("zipf0.8-1M-keys", "zipf1.0-mixed-ttl")
METHODS = [("rate", 0.1), ("rate", 0.01), ("rate", 0.001), ("size", 8_000),
           ("size", 32_000)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--salts", type=int, default=3)
    ap.add_argument("--streams", default=",".join(DEFAULT_STREAMS),
                    help=f"comma-separated, of {', '.join(STREAMS)}")
    ap.add_argument("--methods", default=None,
                    help="comma-separated rate:R or size:N (default: all)")
    a = ap.parse_args()
    names = a.streams.split(",")
    methods = METHODS if not a.methods else [
        (m.split(":")[0], float(m.split(":")[1]) if m.startswith("rate") else
         int(m.split(":")[1])) for m in a.methods.split(",")]
    rows = []
    for name in names:
        doc, n = STREAMS[name]
        req = from_model(doc, requests=n, rate=10_000, seed=11)
        _, first = np.unique(req.key, return_index=True)
        total = float(lru.plain_bytes(req.klen[first], req.vlen[first]).sum())
        sizes = np.geomspace(total * 1e-3, total * 1.1, 40)
        t0 = time.time()
        exact = lru.stack_distances(req).hit_ratio(sizes)
        t_exact = time.time() - t0
        print(f"{name}: {n:,} requests, {len(first):,} keys, exact in {t_exact:.1f} s, "
              f"hit ratio {exact[0]:.3f} to {exact[-1]:.3f}", flush=True)
        for how, x in methods:
            for salt in range(a.salts):
                t0 = time.time()
                d = (lru.shards_fixed_rate(req, float(x), salt=salt) if how == "rate" else
                     lru.shards_fixed_size(req, int(x), salt=salt))
                dt = time.time() - t0
                err = np.abs(d.hit_ratio(sizes) - exact)
                row = {"stream": name, "method": f"fixed-{how}", "param": x, "salt": salt,
                       "mae": round(float(err.mean()), 4), "max": round(float(err.max()), 4),
                       "seconds": round(dt, 2), "exact_seconds": round(t_exact, 1)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print("| stream | SHARDS | MAE (mean of salts) | worst salt's MAE | max error | seconds |")
    print("|---|---|---|---|---|---|")
    for name in names:
        for how, x in methods:
            rs = [r for r in rows if r["stream"] == name and r["param"] == x]
            print(f"| {name} | fixed-{how} {x} | {np.mean([r['mae'] for r in rs]):.4f} | "
                  f"{max(r['mae'] for r in rs):.4f} | {max(r['max'] for r in rs):.3f} | "
                  f"{np.mean([r['seconds'] for r in rs]):.1f} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"streams": {k: {"model": v[0], "requests": v[1]}
                                                        for k, v in STREAMS.items()
                                                        if k in names},
                                            "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
