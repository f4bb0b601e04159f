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

Figures, one formatter per unit (as pyperf's `_formatter.format_values`): `column(values,
unit)` formats a list of one unit's values together — one scale for the whole list (µs,
ms or s for a latency; B, KiB, MiB or GiB for a size), one number of decimals (enough for
three significant digits of the largest, more while two different values would print the
same), `MISSING` for what was not measured, and the minus sign U+2212 for every negative.
The unit is the metric's (`metrics.unit`: "req/s", "µs", "B", "ratio", "count", ...) or
one of the kinds below (`CHANGE`, a signed relative change as a percentage; `SHARE`, a
fraction as a percentage; `SECONDS`). A table formats each of its columns (or, where a
column mixes metrics, each metric's figures) with one call; a single figure is a column
of one (`value`), an interval its two ends together (`interval`: "−9.7% … +43.2%").

    column([253.4, 1234.0], "µs").cells        # ('0.25', '1.23'), unit 'ms'
    column([0.012, -0.347, None], CHANGE).cells  # ('+1.2%', '−34.7%', '-')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvtune.metrics import Direction
from kvtune.metrics import unit as metric_unit

MINUS = "\u2212"  # −, not the hyphen
MISSING = "-"  # a figure not measured (None, NaN, text where a number belongs)


def as_number(x: Any) -> float | None:
    """`x` as a float, or None when it is not a measured number (None, NaN, a bool, text:
    what a stored result can hold in place of a figure). Every formatter reads through it,
    so a figure storage could not keep prints as "-", never as an error."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    v = float(x)
    return None if math.isnan(v) else v


# -- one formatter per unit, a column formatted together ----------------------------------

CHANGE = "change"  # a relative change (new / baseline − 1), signed, as a percentage
SHARE = "share"  # a fraction (of a gain, of CPU time, of the requests), as a percentage
SECONDS = "seconds"  # a time in seconds (scaled like a latency)
PLAIN = "plain"  # a figure of no known unit

# A time's scales, in seconds, largest first; a size's, in bytes.
_TIMES = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
_TIME_OF = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9, SECONDS: 1.0}
_SIZES = (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10), ("B", 1.0))
_SIZE_OF = {"B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30}
# How many more decimals a column may take to tell its values apart.
_MORE = 3
_MOST_DECIMALS = 12


@dataclass(frozen=True)
class Column:
    """A column's figures as printed (`cells`, one per value, in order) and the unit they
    are printed in (`unit`: "ms" for a latency column scaled from µs; "" for a count or a
    ratio, "%" for changes and shares, whose cells carry it)."""

    cells: tuple[str, ...]
    unit: str
    decimals: int

    def __iter__(self) -> Any:
        return iter(self.cells)

    def labelled(self) -> tuple[str, ...]:
        """Each cell with its unit ("253 µs", "35,703 req/s"); a missing figure stays
        `MISSING`, a cell that carries its unit is left as it is."""
        if not self.unit or self.unit == "%":
            return self.cells
        return tuple(c if c == MISSING else f"{c} {self.unit}" for c in self.cells)


def _kind(unit: str) -> str:
    """The formatting kind of a unit: a metric's (`metrics.unit`) or a kind above."""
    if unit in (CHANGE, SHARE, PLAIN, "count", "ratio", "%"):
        return unit
    if unit in _TIME_OF:
        return "time"
    if unit in _SIZE_OF:
        return "size"
    if unit == "share of CPU time":
        return SHARE
    if unit.endswith("/s"):
        return "rate"
    return PLAIN


def _sig_decimals(largest: float, significant: int = 3) -> int:
    """Decimals that give `largest` (> 0) `significant` significant digits, at least 0."""
    return max(0, significant - 1 - math.floor(math.log10(largest))) if largest > 0 else 0


def _render(x: float, decimals: int, signed: bool, separators: bool, suffix: str) -> str:
    if math.isinf(x):
        sign = ("+" if signed else "") if x > 0 else MINUS
        return f"{sign}∞{suffix}"
    body = f"{abs(x):,.{decimals}f}" if separators else f"{abs(x):.{decimals}f}"
    if x < 0 and not (not signed and float(body.replace(",", "")) == 0):
        sign = MINUS  # a change keeps the way it went, even when it rounds to 0
    else:
        sign = "+" if signed else ""
    return f"{sign}{body}{suffix}"


def column(values: Sequence[Any], unit: str = PLAIN, *, decimals: int | None = None,
           signed: bool | None = None) -> Column:
    """`values` of one `unit`, formatted together (module docstring): one scale, one number
    of decimals, `MISSING` for a value that is not a number, U+2212 for a negative.
    `decimals` fixes the decimals (else chosen from the values); `signed` writes "+" on
    positive figures (by default only changes do)."""
    nums = [as_number(v) for v in values]
    kind = _kind(unit)
    finite = [abs(x) for x in nums if x is not None and math.isfinite(x)]
    largest = max(finite, default=0.0)
    factor, label, suffix, separators = 1.0, "" if kind in ("count", "ratio", PLAIN) \
        else unit, "", True
    least, most = 0, 6
    if kind in (CHANGE, SHARE):
        factor, label, suffix = 100.0, "%", "%"
        least = 1 if kind == CHANGE else 0
        start = least if kind == CHANGE else max(least, _sig_decimals(largest * 100, 2))
        most = 4
    elif kind == "%":
        suffix, label = "%", "%"
        start = _sig_decimals(largest, 2)
    elif kind == "time":
        seconds = _TIME_OF[unit]
        label, scale = next(((n, s) for n, s in _TIMES if largest * seconds >= s),
                            _TIMES[-1])
        factor = seconds / scale
        start = _sig_decimals(largest * factor)
    elif kind == "size":
        own = _SIZE_OF[unit]
        label, scale = next(((n, s) for n, s in _SIZES if largest * own >= s), _SIZES[-1])
        factor = own / scale
        start = 0 if label == "B" else _sig_decimals(largest * factor)
    elif kind == "ratio":
        start, most = 3, 6
    elif kind == "count" and all(float(x).is_integer() for x in finite):
        start = 0
    else:  # rates, counts that are medians, figures of no known unit
        start = _sig_decimals(largest)
    start = min(start, _MOST_DECIMALS)  # a figure below 1e-12 of its unit reads as 0
    sign = kind == CHANGE if signed is None else signed
    scaled = [None if x is None else x * factor for x in nums]

    def cells(d: int) -> tuple[str, ...]:
        return tuple(MISSING if x is None else _render(x, d, sign, separators, suffix)
                     for x in scaled)

    if decimals is not None:
        return Column(cells(decimals), label, decimals)
    d = start
    distinct = {x for x in scaled if x is not None and math.isfinite(x)}
    while d < max(most, start + _MORE):
        shown = {_render(x, d, sign, separators, suffix) for x in distinct}
        if len(shown) == len(distinct) or d >= start + _MORE:
            break
        d += 1
    return Column(cells(d), label, d)


def value(x: Any, unit: str = PLAIN, *, decimals: int | None = None,
          signed: bool | None = None) -> str:
    """One figure with its unit, as a column of one ("253 µs", "1.23 ms", "35,703 req/s",
    "−4.2%"); `MISSING` when not measured."""
    return column([x], unit, decimals=decimals, signed=signed).labelled()[0]


def interval(lo: Any, hi: Any, unit: str = CHANGE, *, decimals: int | None = None,
             point: Any = None) -> str:
    """An interval's two ends formatted together, low end first ("−9.7% … +43.2%"; with
    `point`, the point's decimals too); "" when an end is not a number."""
    a, b = as_number(lo), as_number(hi)
    if a is None or b is None:
        return ""
    a, b = min(a, b), max(a, b)
    col = column([a, b] + ([point] if as_number(point) is not None else []), unit,
                 decimals=decimals).labelled()
    return f"{col[0]} … {col[1]}"


def with_interval(point: Any, lo: Any, hi: Any, unit: str = CHANGE, *,
                  decimals: int | None = None) -> tuple[str, str]:
    """A figure and its interval formatted together (one scale, one number of decimals):
    ("−0.7%", "−9.7% … +43.2%"); the interval "" when an end is not a number."""
    a, b = as_number(lo), as_number(hi)
    if a is None or b is None:
        return value(point, unit, decimals=decimals), ""
    a, b = min(a, b), max(a, b)
    col = column([point, a, b], unit, decimals=decimals).labelled()
    return col[0], f"{col[1]} … {col[2]}"


def named_shares(shares: Mapping[str, Any]) -> str:
    """Named fractions as one column of percentages: "ops_per_sec 2.1%, p99_us 7.9%"
    (a noise floor's CoV per metric); a name whose figure is not a number is left out."""
    kept = {k: v for k, v in shares.items() if as_number(v) is not None}
    cells = column(list(kept.values()), SHARE).cells
    return ", ".join(f"{k} {c}" for k, c in zip(kept, cells, strict=True))


def pair(base: Any, new: Any, metric: str) -> Column:
    """One metric's two figures in a comparison table (the baseline's and the compared
    configuration's), formatted together in the metric's unit (`metrics.unit`): the same
    cells in `kvtune show` and the report; a table of several metrics formats each
    metric's figures as a column."""
    return column([base, new], metric_unit(metric))


def share_cells(points: Sequence[Any], intervals: Sequence[Sequence[Any] | None]) -> list[str]:
    """Shares with their intervals as one column (`SHARE`: one number of decimals for the
    points and every end): "40% (12% … 71%)", `MISSING` for a share not measured."""
    ends = [tuple(iv) if iv and len(iv) == 2 else (None, None) for iv in intervals]
    col = column([*points, *(e[0] for e in ends), *(e[1] for e in ends)], SHARE)
    n = len(points)
    out = []
    for i, (lo, hi) in enumerate(ends):
        point = col.cells[i]
        if point == MISSING or as_number(lo) is None or as_number(hi) is None:
            out.append(point)
        else:
            out.append(f"{point} ({col.cells[n + i]} … {col.cells[2 * n + i]})")
    return out


def signed(x: Any, decimals: int = 2) -> str:
    """A signed coefficient (a correlation's ρ) with a real minus: "+0.42", "−0.07"."""
    return column([x], PLAIN, decimals=decimals, signed=True).cells[0]


def pct(x: float | None, digits: int = 1) -> str:
    """A signed percentage with a real minus sign ("−82.6%", "+4.0%"); "-" when unknown (a
    change alone: `column(..., CHANGE)` at `digits` decimals)."""
    return column([x], CHANGE, decimals=digits).cells[0]


def share(x: Any, digits: int = 0) -> str:
    """A fraction as a percentage, unsigned unless negative ("40%", "12.5%", "−3%"): shares
    of a gain, of CPU time, of the requests; "-" when unknown (`column(..., SHARE)`)."""
    return column([x], SHARE, decimals=digits).cells[0]


def figure(x: Any, digits: int = 0) -> str:
    """A figure with thousands separators and `digits` decimals ("52,340", "1,234.5"),
    a real minus; "-" when unknown."""
    return column([x], PLAIN, decimals=digits).cells[0]


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


def level_text(c: float) -> str:
    """A confidence level as people write it: 95%, 97.5%, 99.5%, 99.95%."""
    if as_number(c) is None:
        return MISSING
    for digits in range(0, 4):
        text = column([c], SHARE, decimals=digits).cells[0]
        if abs(float(text.rstrip("%")) - c * 100) < 1e-9:
            return text
    return column([c], SHARE, decimals=3).cells[0]


def describe_change(metric: str, change_fraction: float | None, direction: Direction | None,
                    ci: Sequence[float | None] | None = None,
                    significant: bool | None = None, level: float = 0.95) -> str:
    """"p99_us −82.6% (95% CI −85.0% … −80.1%), better": the metric's change, its CI when
    given (the three figures formatted together: `with_interval`), and the verdict in
    words (`judge`: the CI decides when there is one)."""
    word = judge(change_fraction, direction, significant, ci)
    bounds = _finite_ci(ci)
    if bounds is None:
        head = f"{metric} {pct(change_fraction)}"
    else:
        point, span = with_interval(change_fraction, *bounds, CHANGE)
        head = f"{metric} {point} ({level_text(level)} CI {span})"
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


def search_change_record(metric: str, change_fraction: float | None,
                         direction: Direction | None) -> dict[str, Any]:
    """A search trial's change against its baseline, for JSON: the figure and no claim
    (one noisy measurement each, no interval: no "better" or "worse"), worded as the trial
    table says it: {"metric", "change", "ci": None, "direction", "verdict": None, "text":
    "ops_per_sec +12.0%, not confirmed"}."""
    c = as_number(change_fraction)
    return {"metric": metric, "change": c, "ci": None, "direction": direction,
            "verdict": None,
            "text": f"{metric} {pct(change_fraction)}, not confirmed" if c is not None
            else f"{metric} {MISSING}"}


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
