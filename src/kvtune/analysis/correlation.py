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

from kvtune.analysis.data import StudyData
from kvtune.present import unit
from kvtune.stats import benjamini_hochberg, spearman
from kvtune.telemetry import is_telemetry

MIN_REPS = 5


@dataclass
class Correlation:
    metric: str
    rho: float
    p_value: float
    n: int
    telemetry: bool
    q_value: float = 1.0  # Benjamini–Hochberg over every figure tested

    @property
    def unit(self) -> str:
        return unit(self.metric)

    def lead(self, alpha: float = 0.05) -> bool:
        """Whether it survives the multiple-testing correction."""
        return self.q_value < alpha

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "unit": self.unit, "lead": self.lead()}


def correlations(data: StudyData, reps: list[dict[str, Any]] | None = None
                 ) -> list[Correlation]:
    """Every metric with at least MIN_REPS values that is not constant, strongest first,
    with Benjamini–Hochberg q-values over all of them (dozens of counters are tested: some
    correlate by chance)."""
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
        rho, p = spearman(xs, ys)
        if math.isnan(rho):
            continue
        out.append(Correlation(k, rho, p, len(xs), is_telemetry(k)))
    for c, q in zip(out, benjamini_hochberg([c.p_value for c in out]), strict=True):
        c.q_value = q
    out.sort(key=lambda c: -abs(c.rho))
    return out
