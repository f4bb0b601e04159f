"""The synthetic target's "workload" surface: a family of response surfaces whose optimum
moves with the workload (issue 33), so that a warm start's benefit is measured against a
known truth (bench/warmstart/).

The study's workload features (kvtune.workload.features: read share r, write share w,
mget share m, log10 of the mean value size v, Zipf exponent z) place the optimum:

    x*(w)       = 2 + 5 r + 2 m                      (clipped to 0.5 … 9.5)
    threads*(w) = round(2 + 3 (v − 2) + 6 m)         (clipped to 1 … 13)
    mode*(w)    = a when z < 0.6, b when z < 1.05, else c
    flag*(w)    = w > 0.2

and the surface (maximize ops_per_sec) is

    true(x, threads, mode, flag; w) = 100000
        * (1 + 0.35 * exp(-((x - x*) / 1.5) ** 2))
        * (1 - 0.30 * min(1, ((threads - threads*) / 5) ** 2))
        * (1.10 if mode == mode* else 0.97)
        * (1.05 if flag == flag* else 0.97)

failing, like the default surface, when threads >= 14 with mode c. The defaults (x = 2,
threads = 4, mode a, flag off) are optimal for no workload of the benchmark; alike
workloads have near optima (a read share 0.1 apart moves x* by 0.5), unlike ones far
apart. Latencies follow throughput as on the default surface.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

BASE_RATE = 100_000.0


def optimum_of(features: Mapping[str, float]) -> dict[str, Any]:
    """The optimal configuration for a workload's features."""
    r = float(features.get("read_share", 0.9))
    w = float(features.get("write_share", 0.1))
    m = float(features.get("mget_share", 0.0))
    v = float(features.get("log10_value", 2.0))
    z = float(features.get("zipf", 1.0))
    return {
        "synthetic.x": min(9.5, max(0.5, 2 + 5 * r + 2 * m)),
        "synthetic.threads": int(min(13, max(1, round(2 + 3 * (v - 2) + 6 * m)))),
        "synthetic.mode": "a" if z < 0.6 else "b" if z < 1.05 else "c",
        "synthetic.flag": w > 0.2,
    }


def value(params: Mapping[str, Any], features: Mapping[str, float],
          defaults: Mapping[str, Any]) -> float:
    """The noiseless ops_per_sec of a configuration for a workload (NaN where it fails)."""
    def get(k: str) -> Any:
        return params.get(f"synthetic.{k}", defaults[f"synthetic.{k}"])

    best = optimum_of(features)
    x, threads = float(get("x")), int(get("threads"))
    mode, flag = str(get("mode")), bool(get("flag"))
    if threads >= 14 and mode == "c":
        return math.nan
    out = BASE_RATE
    out *= 1 + 0.35 * math.exp(-(((x - best["synthetic.x"]) / 1.5) ** 2))
    out *= 1 - 0.30 * min(1.0, ((threads - best["synthetic.threads"]) / 5) ** 2)
    out *= 1.10 if mode == best["synthetic.mode"] else 0.97
    out *= 1.05 if flag == best["synthetic.flag"] else 0.97
    return out


def best_value(features: Mapping[str, float], defaults: Mapping[str, Any]) -> float:
    """The true maximum for a workload (at its optimum, by construction)."""
    return value(optimum_of(features), features, defaults)
