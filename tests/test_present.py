"""One formatter per unit, a column formatted together, one minus sign (issue 44, item 5).

`kvtune.present.column` formats a list of one unit's values together: one scale, one
number of decimals, enough digits to tell different values apart, `MISSING` for what was
not measured, U+2212 for every negative. Checked on the formatter itself, then on every
screen of every shipped database (`kvtune show` and the HTML report, rendered in process:
no process started), where no figure may carry an ASCII hyphen as its minus sign."""

from __future__ import annotations

import functools
import html.parser
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from support import shipped

from kvtune import present
from kvtune.present import CHANGE, MINUS, MISSING, SHARE, column

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "results").glob("*.db")) + sorted((REPO / "examples").rglob("*.db"))

UNITS = ("req/s", "µs", "ms", "s", "B", "KiB", "ratio", "count", "%", "CPUs",
         "share of CPU time", CHANGE, SHARE, present.SECONDS, present.PLAIN)
_NUMBER = re.compile(r"^[+\u2212]?[\d,]*\.?(\d*)")


def _decimals(cell: str) -> int | None:
    """The decimals a cell was printed with (None for a missing or infinite one)."""
    if cell == MISSING or "∞" in cell:
        return None
    m = _NUMBER.match(cell)
    assert m and m.group(0), cell
    return len(m.group(1))


def _value(cell: str, col: present.Column, unit: str) -> float:
    """A printed cell read back in its column's unit (to check the scale)."""
    return float(_NUMBER.match(cell).group(0).replace(",", "").replace(MINUS, "-"))  # type: ignore[union-attr]


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize("unit", UNITS)
@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.one_of(finite, st.none()), min_size=1, max_size=12))
def test_a_column_has_one_scale_one_decimal_count_and_one_minus_sign(
        unit: str, values: list[float | None]) -> None:
    col = column(values, unit)
    assert len(col.cells) == len(values)
    decimals = {d for d in map(_decimals, col.cells) if d is not None}
    assert len(decimals) <= 1, (unit, values, col)  # one number of decimals
    assert decimals <= {col.decimals}
    for v, cell in zip(values, col.cells, strict=True):
        if v is None:
            assert cell == MISSING
            continue
        assert "-" not in cell, (v, cell)  # never the hyphen as a minus
        if v < 0 and _value(cell, col, unit) != 0:
            assert cell.startswith(MINUS), (v, cell)
    # One scale: every cell, read back and put in the values' unit by the column's one
    # factor, is its value to within half the last decimal printed.
    factor = _SCALE.get(unit, 1.0) / _SCALE.get(col.unit, 1.0) if unit in _SCALE else (
        100.0 if unit in (CHANGE, SHARE, "share of CPU time") else 1.0)
    half = 0.5 * 10.0 ** -col.decimals
    for v, cell in zip(values, col.cells, strict=True):
        if v is not None:
            shown = _value(cell, col, unit)
            assert abs(shown - v * factor) <= half * (1 + 1e-9) + abs(v * factor) * 1e-12, \
                (unit, values, col)


# Each scale in its base unit (seconds, bytes): a column's unit against its values'.
_SCALE = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9, "seconds": 1.0,
          "B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30}


@pytest.mark.parametrize("unit", UNITS)
@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(min_value=0.001, max_value=1e7), min_size=2, max_size=8,
                       unique=True))
def test_values_that_differ_print_differently(unit: str, values: list[float]) -> None:
    """Different values print differently, as far as the column's extra decimals go (three
    past the three significant digits of the largest): here values whose relative
    difference is at least a thousandth of the largest."""
    top = max(values)
    kept = sorted(values)
    spaced = [kept[0]]
    for v in kept[1:]:
        if v - spaced[-1] >= top * 1e-3:
            spaced.append(v)
    col = column(spaced, unit)
    assert len(set(col.cells)) == len(spaced), (unit, spaced, col)


def test_the_units_scale_as_people_read_them() -> None:
    assert column([253.4, 1234.0], "µs") == present.Column(("0.25", "1.23"), "ms", 2)
    assert column([12.0, 80.5], "µs").labelled() == ("12.0 µs", "80.5 µs")
    assert column([3.5e6], "µs").labelled() == ("3.50 s",)
    assert column([35703.2, 35703.4, 33269], "req/s").cells == (
        "35,703.2", "35,703.4", "33,269.0")
    assert column([2**28, 1.5 * 2**30], "B").labelled() == ("0.25 GiB", "1.50 GiB")
    assert column([512, 1000], "B").labelled() == ("512 B", "1,000 B")
    assert column([3, 5, None], "count").cells == ("3", "5", MISSING)
    assert column([0.9123, 0.9127], "ratio").cells == ("0.912", "0.913")
    assert column([0.012, -0.347, None], CHANGE).cells == ("+1.2%", f"{MINUS}34.7%", MISSING)
    assert column([0.079, 0.09], "share of CPU time").cells == ("7.9%", "9.0%")
    assert column([float("inf"), -float("inf")], CHANGE).cells == ("+∞%", f"{MINUS}∞%")
    # A change that rounds to zero keeps the way it went; a share that does is 0%.
    assert present.pct(-0.0001) == f"{MINUS}0.0%" and present.share(-0.001) == "0%"
    assert present.signed(-0.07) == f"{MINUS}0.07" and present.signed(0.42) == "+0.42"


def test_an_interval_is_formatted_with_its_figure() -> None:
    """"−0.7% (95% CI −9.7% … +43.2%)": the figure and both ends at one number of
    decimals, low end first, each negative with U+2212; ends that would read the same at
    one decimal get more."""
    assert present.interval(0.432, -0.097) == f"{MINUS}9.7% … +43.2%"
    assert present.with_interval(-0.007, -0.097, 0.432) == (
        f"{MINUS}0.7%", f"{MINUS}9.7% … +43.2%")
    text = present.describe_change("p99_us", -0.0001, "minimize", (0.0002, -0.0003), False)
    assert text == (f"p99_us {MINUS}0.01% (95% CI {MINUS}0.03% … +0.02%), "
                    "no significant change"), text
    assert present.with_interval(0.1, None, 0.2) == ("+10.0%", "")
    assert present.level_text(0.9995) == "99.95%" and present.level_text(0.95) == "95%"


# -- every screen of every shipped database ------------------------------------------------

# An ASCII hyphen written as a figure's minus: not inside a word or a number (a study's
# name "atune-memcached-003", a date, a kernel's version, a p-value's exponent "1e-05").
HYPHEN_MINUS = re.compile(r"(?<![\w.\-/:])-(?=\d)")


class _Visible(html.parser.HTMLParser):
    """The report's text a reader sees as figures: no scripts (plotly's data), styles, or
    command lines (<pre>, <code>: what a shell reads keeps its ASCII)."""

    SKIP = ("script", "style", "pre", "code")

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skip = 0
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skip += 1
        elif tag in ("td", "th", "p", "li", "div", "tr"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def _studies(db: Path) -> list[str]:
    with sqlite3.connect(db) as c:
        names = {r[0] for r in c.execute("select study_name from studies")}
        names |= {r[0] for r in c.execute("select distinct study from kvtune_results")}
    return sorted(names)


def _hyphen_minus(text: str) -> list[str]:
    return [text[max(0, m.start() - 30):m.end() + 10].replace("\n", " | ")
            for m in HYPHEN_MINUS.finditer(text)]


@functools.cache
def _collected(db: Path, where: Path) -> dict[str, dict[str, Any]]:
    """What `kvtune show` renders (`collect`) of every study the database holds, read in
    process on the session's copy of it (support.shipped, kept in `where`), once a
    database: the screens and the trial table's columns below both read it (neither
    changes it)."""
    from kvtune.report.summary import collect
    from kvtune.store import Store

    copy = shipped.copy(db, where)
    store = Store(f"sqlite:///{copy}", create=False)
    return {name: collect(store, name) for name in _studies(copy)}


@functools.cache
def _screens(db: Path, where: Path) -> dict[str, str]:
    """`kvtune show` and the report of every study the database holds, rendered in
    process on a copy (the shipped file is never opened for writing), once a database."""
    from kvtune.report.summary import next_steps, render

    out: dict[str, str] = {}
    collected = _collected(db, where)
    for name in _studies(shipped.copy(db, where)):
        console = Console(record=True, width=200, color_system=None)
        data = collected[name]
        render(data, console, next_steps(data, name))
        out[f"{name}: show"] = console.export_text()
        # `kvtune report NAME` (a study's report, or a sweep's own page), rendered once a
        # session for every test that reads it (support.shipped).
        report = shipped.report(db, name, where)
        assert report.ran.returncode == 0, (name, report.ran.stderr[-2000:])
        visible = _Visible()
        visible.feed(report.page)
        out[f"{name}: report"] = "".join(visible.parts)
    return out


@pytest.mark.parametrize("db", SHIPPED, ids=lambda p: p.stem)
def test_every_screen_of_a_shipped_database_writes_one_minus_sign(
        db: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    screens = _screens(db, shipped.root(tmp_path_factory))
    assert screens
    found = {where: hits for where, text in screens.items() if (hits := _hyphen_minus(text))}
    assert not found, found


def test_the_shipped_screens_print_negative_figures_at_all(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The check above is not vacuous: the shipped results hold negative changes, and the
    screens print them with U+2212 (003's trials mostly measured below the baseline; a
    database the repository ships, not one `make demo` leaves behind)."""
    screens = _screens(REPO / "results" / "atune-memcached-003.db",
                       shipped.root(tmp_path_factory))
    assert screens
    for where, text in screens.items():
        assert re.search(MINUS + r"\d", text), where


def test_the_hyphen_check_sees_a_hyphen_minus() -> None:
    assert _hyphen_minus("p99_us -72.0% (95% CI -73.7% … +1.0%)")
    assert _hyphen_minus("share (-48% … 246%)")
    assert not _hyphen_minus("atune-memcached-003 2026-11-27 5.15.0-91 p=1.2e-05 "
                             f"{MINUS}72.0% -t 4 --rate")


@pytest.mark.parametrize("db", SHIPPED, ids=lambda p: p.stem)
def test_show_formats_each_column_of_the_trial_table_together(
        db: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`kvtune show`'s trial table: the objective's column has one number of decimals,
    and so has the column of changes against the baseline."""
    from kvtune.report.summary import trial_columns

    for data in _collected(db, shipped.root(tmp_path_factory)).values():
        if "trials" not in data:
            continue
        values, intervals, counts, vs = trial_columns(data["trials"], data["metric"])
        assert len({d for d in map(_decimals, values.cells) if d is not None}) <= 1, values
        ends = [c for i in intervals if i != MISSING
                for left, right in [i.rsplit(" … ", 1)] for c in (left.split()[-1], right)]
        assert {_decimals(c) for c in ends} <= {values.decimals}, (intervals, values)
        shown = [c for c in vs if c]
        assert len({_decimals(c) for c in shown}) <= 1, vs
        assert {d for d in map(_decimals, counts.cells) if d is not None} <= {0}, counts
