"""The one way kvtune shows a metric's change: the metric's own relative change (new /
baseline − 1, so a latency that falls is negative), its sign written with a real minus,
and the direction marked in words — "p99_us −82.6%, better". `kvtune show`, the report
and the JSON all use these functions, so the same change never reads "+569.9%" in one
place and "−82.6%" in another.

    describe_change("p99_us", -0.826, "minimize")                 # 'p99_us −82.6%, better'
    describe_change("ops_per_sec", 0.04, "maximize", ci=(-0.01, 0.09))
    # 'ops_per_sec +4.0% (95% CI −1.0% … +9.0%), no significant change'

The words follow the interval, everywhere a change is printed (`judge`): a 95% CI wholly
on the better side is "better", wholly on the worse side "worse", and only an interval
that spans zero is "no significant change".
    change_record("p99_us", -0.826, "minimize")                   # the same, for JSON

`direction` is the metric's good direction ("maximize"/"minimize", a `metrics.Direction`);
`metrics.guess_direction`
guesses it for the figures kvtune shows beside the objective (latencies, errors and
evictions are better lower; throughput and hit ratios higher). None leaves the change
unjudged ("p99_us −82.6%").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvtune.metrics import Direction
from kvtune.metrics import unit as metric_unit

MINUS = "\u2212"  # −, not the hyphen


def as_number(x: Any) -> float | None:
    """`x` as a float, or None when it is not a measured number (None, NaN, a bool, text:
    what a stored result can hold in place of a figure). Every formatter reads through it,
    so a figure storage could not keep prints as "-", never as an error."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    v = float(x)
    return None if math.isnan(v) else v


def pct(x: float | None, digits: int = 1) -> str:
    """A signed percentage with a real minus sign ("−82.6%", "+4.0%"); "-" when unknown."""
    x = as_number(x)
    if x is None:
        return "-"
    if math.isinf(x):
        return ("+" if x > 0 else MINUS) + "∞%"
    s = f"{x * 100:+.{digits}f}%"
    return s.replace("-", MINUS)


def share(x: Any, digits: int = 0) -> str:
    """A fraction as a percentage, unsigned unless negative ("40%", "12.5%", "−3%"): shares
    of a gain, of CPU time, of the requests; "-" when unknown."""
    x = as_number(x)
    if x is None:
        return "-"
    if math.isinf(x):
        return ("" if x > 0 else MINUS) + "∞%"
    return f"{x * 100:.{digits}f}%".replace("-", MINUS)


def figure(x: Any, digits: int = 0) -> str:
    """A figure with thousands separators and `digits` decimals ("52,340", "1,234.5"),
    a real minus; "-" when unknown."""
    x = as_number(x)
    if x is None:
        return "-"
    if math.isinf(x):
        return "∞" if x > 0 else MINUS + "∞"
    return f"{x:,.{digits}f}".replace("-", MINUS)


def p_value(x: Any, digits: int = 3) -> str:
    """A p-value to `digits` significant digits ("0.0123", "1.2e-05"); "-" when unknown."""
    x = as_number(x)
    return "-" if x is None else f"{x:.{digits}g}"


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


NO_SIGNIFICANT_CHANGE = "no significant change"


def _finite_ci(ci: Sequence[float | None] | None) -> tuple[float, float] | None:
    if not ci or len(ci) != 2:
        return None
    lo, hi = as_number(ci[0]), as_number(ci[1])
    if lo is None or hi is None:
        return None
    # An interval's ends in order whichever way a caller mapped them (a minimized
    # metric's change swaps the ends of its improvement's interval).
    return min(lo, hi), max(lo, hi)


def judge(change: float | None, direction: Direction | None, significant: bool | None = None,
          ci: Sequence[float | None] | None = None) -> str | None:
    """The words of a change: "better", "worse", "no significant change", "no change", or
    None (direction unknown, or no change measured). With a CI of the change, the CI
    decides: wholly above or below zero is better or worse by the direction, spanning zero
    is "no significant change". Without one, `significant` False says "no significant
    change", else the sign decides."""
    change = as_number(change)
    if change is None:
        return None
    interval = _finite_ci(ci)
    if interval is not None:
        lo, hi = interval
        if lo <= 0 <= hi:
            return NO_SIGNIFICANT_CHANGE
        side = 1 if lo > 0 else -1
    else:
        if significant is False:
            return NO_SIGNIFICANT_CHANGE
        if change == 0:
            return "no change"
        side = 1 if change > 0 else -1
    if direction not in tuple(Direction):
        return None
    good = Direction(direction).better(side, 0)
    return "better" if good else "worse"


def _ci_text(ci: Sequence[float | None] | None, level: float = 0.95) -> str:
    interval = _finite_ci(ci)
    if interval is None:
        return ""
    lo, hi = interval
    return f" ({level:.0%} CI {pct(lo)} … {pct(hi)})"


def describe_change(metric: str, change_fraction: float | None, direction: Direction | None,
                    ci: Sequence[float | None] | None = None,
                    significant: bool | None = None, level: float = 0.95) -> str:
    """"p99_us −82.6% (95% CI −85.0% … −80.1%), better": the metric's change, its CI when
    given, and the verdict in words (`judge`: the CI decides when there is one)."""
    word = judge(change_fraction, direction, significant, ci)
    head = f"{metric} {pct(change_fraction)}{_ci_text(ci, level)}"
    return f"{head}, {word}" if word else head


def change_text(change_fraction: float | None, direction: Direction | None,
                significant: bool | None = None) -> str:
    """The change without the metric's name, for a table column: "−82.6%, better"."""
    word = judge(change_fraction, direction, significant)
    return f"{pct(change_fraction)}, {word}" if word else pct(change_fraction)


def change_record(metric: str, change_fraction: float | None, direction: Direction | None,
                  ci: Sequence[float | None] | None = None,
                  significant: bool | None = None, level: float = 0.95) -> dict[str, Any]:
    """The same change for JSON: {"metric", "change" (new/baseline − 1), "ci" ([low, high]
    of the change, or None), "direction", "verdict" (`judge`'s words, or None), "text"
    (describe_change's)}."""
    c = as_number(change_fraction)
    return {"metric": metric, "change": c, "ci": list(_finite_ci(ci) or ()) or None,
            "direction": direction,
            "verdict": judge(change_fraction, direction, significant, ci),
            "text": describe_change(metric, change_fraction, direction, ci, significant,
                                    level)}


def fmt(v: Any) -> str:
    """A value as a configuration writes it (knob values, trial figures): None and NaN as
    "-", booleans as the study file spells them (true/false), floats to 4 significant
    digits (whole numbers from 1,000), the rest as str()."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def number(v: Any) -> str:
    """A figure for people: thousands separators, no exponent notation below a million
    (0.000123 → "0.000123", 123456 → "123,456"), 4 significant digits for fractions;
    booleans as yes/no; None and NaN as "-"; a negative figure with a real minus (−)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float) and v < 0:  # one minus sign everywhere: −, not -
        return MINUS + number(-v)
    if v == 0:
        return "0"  # −0.0 too
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


def duration(seconds: float | None) -> str:
    """A duration for people: "45 s", "3 min 20 s", "1 h 05 min"; "-" for None or NaN."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, s = divmod(s, 60)
        return f"{m} min {s:02d} s" if s else f"{m} min"
    h, rest = divmod(s, 3600)
    return f"{h} h {rest // 60:02d} min"
