"""Analysis of a finished (or running) study: what mattered, and why.

    data = load(store, "memcached-demo")
    a = analyse(data)            # importance, sensitivity, correlations, zones
    a.as_dict()                  # JSON for `kvtune show --json` and the report

- importance: main effects with bootstrap intervals and a ranking only where the trials
  support one (PED-ANOVA or fANOVA on request);
- sensitivity: the objective against each knob's values, bootstrap CIs from raw
  repetitions (from a one-knob sweep when the study has one);
- correlations: Spearman's rho of each telemetry counter with the objective;
- zones: the values of each important knob that reached within x% of the best.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvtune.analysis.correlation import Correlation, correlations
from kvtune.analysis.data import KnobInfo, StudyData
from kvtune.analysis.data import load as _load
from kvtune.analysis.importance import Importance, importance
from kvtune.analysis.sensitivity import Curve, sensitivity
from kvtune.analysis.zones import Zone, zones


def load(store: Any, name: str, spec_of: Any = None) -> StudyData:
    """Study `name` of `store` as the screens read it (`kvtune.analysis.data.load`), every
    trial's stored attributes checked first (`kvtune.store.check_trial_attrs`: a results
    database is input; a configuration that was not a mapping was a traceback in show and
    the report); `spec_of`: as `kvtune.analysis.data.load`'s."""
    from kvtune.store import check_trial_attrs

    data = _load(store, name, spec_of)
    for t in data.trials:
        check_trial_attrs(t.user_attrs, f"study {name!r} in {data.storage}, trial {t.number}")
    return data


# Knobs with at least this share of the importance get a zone (the top three at least).
IMPORTANT = 0.10


@dataclass
class Analysis:
    importance: Importance
    curves: list[Curve] = field(default_factory=list)
    correlations: list[Correlation] = field(default_factory=list)
    zones: list[Zone] = field(default_factory=list)
    within: float = 0.05

    def as_dict(self) -> dict[str, Any]:
        return {"importance": self.importance.as_dict(),
                "sensitivity": [c.as_dict() for c in self.curves],
                "correlations": [c.as_dict() for c in self.correlations],
                "zones": [z.as_dict() for z in self.zones], "within": self.within}


def important_knobs(imp: Importance, data: StudyData) -> list[str]:
    if not imp.values:
        return [k.name for k in data.knobs]
    ranked = list(imp.values)
    return [k for i, k in enumerate(ranked) if i < 3 or imp.values[k] >= IMPORTANT]


def analyse(data: StudyData, within: float = 0.05, method: str = "main-effects",
            seed: int = 0) -> Analysis:
    imp = importance(data, method, seed)
    return Analysis(imp, sensitivity(data, seed), correlations(data),
                    zones(data, important_knobs(imp, data), within), within)


__all__ = ["Analysis", "Correlation", "Curve", "Importance", "KnobInfo", "StudyData", "Zone",
           "analyse", "correlations", "importance", "load", "sensitivity", "zones"]
