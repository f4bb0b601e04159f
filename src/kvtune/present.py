"""The one way kvtune shows a metric's change: the metric's own relative change (new /
baseline − 1, so a latency that falls is negative), its sign written with a real minus,
and the direction marked in words — "p99_us −82.6%, better". `kvtune show`, the report
and the JSON all use these functions, so the same change never reads "+569.9%" in one
place and "−82.6%" in another.

    describe_change("p99_us", -0.826, "minimize")                 # 'p99_us −82.6%, better'
    describe_change("ops_per_sec", 0.04, "maximize", ci=(-0.01, 0.09), significant=False)
    # 'ops_per_sec +4.0% (95% CI −1.0% … +9.0%), within noise'
    change_record("p99_us", -0.826, "minimize")                   # the same, for JSON

`direction` is the metric's good direction ("maximize"/"minimize"); `metric_direction`
guesses it for the figures kvtune shows beside the objective (latencies, errors and
evictions are better lower; throughput and hit ratios higher). None leaves the change
unjudged ("p99_us −82.6%").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvtune.metrics import guess_direction
from kvtune.metrics import unit as metric_unit

MINUS = "\u2212"  # −, not the hyphen

def metric_direction(metric: str) -> str | None:
    """The good direction of a figure kvtune knows by name, or None (`kvtune.metrics`)."""
    return guess_direction(metric)


def pct(x: float | None, digits: int = 1) -> str:
    """A signed percentage with a real minus sign ("−82.6%", "+4.0%"); "-" when unknown."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return ("+" if x > 0 else MINUS) + "∞%"
    s = f"{x * 100:+.{digits}f}%"
    return s.replace("-", MINUS)


def change_fraction(baseline: float | None, new: float | None) -> float | None:
    """new / baseline − 1 (the metric's own change), or None when either is missing or
    the baseline is 0."""
    if baseline is None or new is None:
        return None
    try:
        b, n = float(baseline), float(new)
    except (TypeError, ValueError):
        return None
    if b == 0 or math.isnan(b) or math.isnan(n):
        return None
    return n / b - 1


def judge(change: float | None, direction: str | None,
          significant: bool | None = None) -> str | None:
    """"better", "worse", "no change", "within noise", or None (direction unknown)."""
    if change is None or (isinstance(change, float) and math.isnan(change)):
        return None
    if significant is False:
        return "within noise"
    if direction not in ("maximize", "minimize"):
        return None
    if change == 0:
        return "no change"
    good = change > 0 if direction == "maximize" else change < 0
    return "better" if good else "worse"


def _ci_text(ci: Sequence[float | None] | None, level: float = 0.95) -> str:
    if not ci or len(ci) != 2 or any(
            v is None or (isinstance(v, float) and math.isnan(v)) for v in ci):
        return ""
    return f" ({level:.0%} CI {pct(ci[0])} … {pct(ci[1])})"


def describe_change(metric: str, change_fraction: float | None, direction: str | None,
                    ci: Sequence[float | None] | None = None,
                    significant: bool | None = None, level: float = 0.95) -> str:
    """"p99_us −82.6% (95% CI −85.0% … −80.1%), better": the metric's change, its CI when
    given, and the verdict in words (within noise when `significant` is False)."""
    word = judge(change_fraction, direction, significant)
    head = f"{metric} {pct(change_fraction)}{_ci_text(ci, level)}"
    return f"{head}, {word}" if word else head


def change_text(change_fraction: float | None, direction: str | None,
                significant: bool | None = None) -> str:
    """The change without the metric's name, for a table column: "−82.6%, better"."""
    word = judge(change_fraction, direction, significant)
    return f"{pct(change_fraction)}, {word}" if word else pct(change_fraction)


def change_record(metric: str, change_fraction: float | None, direction: str | None,
                  ci: Sequence[float | None] | None = None,
                  significant: bool | None = None, level: float = 0.95) -> dict[str, Any]:
    """The same change for JSON: {"metric", "change" (new/baseline − 1), "ci" ([low, high]
    of the change, or None), "direction", "verdict" ("better"/"worse"/"no change"/
    "within noise"/None), "text" (describe_change's)}."""
    c = None if change_fraction is None or math.isnan(change_fraction) else change_fraction
    return {"metric": metric, "change": c,
            "ci": list(ci) if ci and len(ci) == 2 else None, "direction": direction,
            "verdict": judge(change_fraction, direction, significant),
            "text": describe_change(metric, change_fraction, direction, ci, significant,
                                    level)}


def number(v: Any) -> str:
    """A figure for people: thousands separators, no exponent notation below a million
    (0.000123 → "0.000123", 123456 → "123,456"), 4 significant digits for fractions;
    booleans as yes/no; None and NaN as "-"."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        a = abs(v)
        if math.isinf(v):
            return "∞" if v > 0 else MINUS + "∞"
        if a >= 1e6:
            return f"{v:.4g}" if a >= 1e15 else f"{v:,.0f}"
        if a >= 1000 or v == int(v):
            return f"{v:,.0f}"
        if a >= 1:
            return f"{v:.4g}"
        # Fractions: enough decimals for 3 significant digits, never an exponent.
        decimals = min(12, max(3, 2 - math.floor(math.log10(a)) if a else 3))
        s = f"{v:.{decimals}f}".rstrip("0").rstrip(".")
        return s or "0"
    return str(v)


def unit(metric: str) -> str:
    """The unit of a figure kvtune records ("count" for counts; `kvtune.metrics`)."""
    return metric_unit(metric)
