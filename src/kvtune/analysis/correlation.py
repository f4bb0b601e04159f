"""Which counters move with the objective: Spearman's rank correlation of every numeric
metric of the repetitions (telemetry and the load generator's own figures) with the
objective, across all repetitions of the study that measured something.

Rank correlation, because the relations are monotone rather than linear (context switches
against throughput) and a few outliers must not dominate. Correlation is not cause: the
report shows these as leads to read beside the sensitivity curves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from kvtune.analysis.data import StudyData
from kvtune.telemetry import is_telemetry

MIN_REPS = 5


@dataclass
class Correlation:
    metric: str
    rho: float
    p_value: float
    n: int
    telemetry: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def correlations(data: StudyData, reps: list[dict[str, Any]] | None = None
                 ) -> list[Correlation]:
    """Every metric with at least MIN_REPS values that is not constant, strongest first."""
    rows = reps if reps is not None else data.ok_reps()
    y_all = {i: float(r["value"]) for i, r in enumerate(rows)}
    keys = sorted({k for r in rows for k, v in r["metrics"].items()
                   if isinstance(v, int | float) and not isinstance(v, bool)})
    out = []
    for k in keys:
        if k == data.metric:  # each figure is measured once, by one collector
            continue
        xs, ys = [], []
        for i, r in enumerate(rows):
            v = r["metrics"].get(k)
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                xs.append(float(v))
                ys.append(y_all[i])
        if len(xs) < MIN_REPS or len(set(xs)) < 2 or len(set(ys)) < 2:
            continue
        res = sps.spearmanr(np.array(xs), np.array(ys))
        rho, p = float(res.statistic), float(res.pvalue)
        if math.isnan(rho):
            continue
        out.append(Correlation(k, rho, p, len(xs), is_telemetry(k)))
    out.sort(key=lambda c: -abs(c.rho))
    return out
