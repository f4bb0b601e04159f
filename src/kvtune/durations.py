"""Durations as the study file, the command line and kvload workload files write them:
'3s', '500ms', '250us', '2m', '1h' or a number of seconds. The one parser of duration text
in kvtune's Python (issue 32): the schema (spec.py), the workload-file check
(safety/workload.py), the run budget (load/kvload.py), `load.extra_args` and the command
line all ask it. A leaf module, so that they share it without importing each other.

The grammar is kvload's own (`parse_duration` in kvload/src/config/spec.rs): a number, an
optional unit among ns, us (or µs), ms, s, m and h, a bare number being seconds, blanks
around. Both sides take exactly the same texts: they are checked against one table of cases,
`kvload/tests/grammar.json` (tests/test_durations.py and kvload's `the_grammar_table`);
kvload parses with the fundu crate, configured to this grammar.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Seconds per unit, kvload's units.
UNITS: dict[str, float] = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0,
                           "m": 60.0, "h": 3600.0}
_UNIT = "|".join(sorted(map(re.escape, UNITS), key=len, reverse=True))
_DURATION = re.compile(rf"^\s*([0-9]{{1,30}}(?:\.[0-9]{{1,30}})?)\s*({_UNIT})?\s*$")


def pattern(digits: int = 30) -> str:
    """The grammar as regex text for one word (an argv value: no blanks), at most `digits`
    digits on each side of the point; it matches nothing `parse_duration` refuses."""
    return rf"[0-9]{{1,{digits}}}(?:\.[0-9]{{1,{digits}}})?(?:{_UNIT})?"

FORMS = "a duration such as 10s, 500ms, 250us or 2m (units ns, us, ms, s, m, h; a bare " \
        "number is seconds)"


def parse_duration(v: Any, *, zero: bool = False) -> float:
    """'3s', '500ms', '250us', '2m', '1h' or a number of seconds → seconds. ValueError
    naming the forms when `v` is not one; 0 only with `zero` (no warm-up), else a
    duration is positive."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        # abs() first: a 400-digit int is beyond any float (isfinite would overflow)
        if abs(v) > 1e12 or not math.isfinite(v):
            said = str(v) if isinstance(v, float) or abs(v) < 10**40 else "a number beyond 10^40"
            raise ValueError(f"{said} is not a finite duration of at most 10^12 s")
        n = float(v)
    elif isinstance(v, str):
        m = _DURATION.match(v)
        if not m:
            raise ValueError(f"{v[:40]!r} is not {FORMS}")
        n = float(m.group(1)) * UNITS[m.group(2) or "s"]
        if n * 1e9 >= 2.0 ** 64:  # kvload holds nanoseconds in 64 bits (584 years)
            raise ValueError(f"{v[:40]!r} is longer than kvload can hold (584 years)")
    else:
        raise ValueError(f"{v!r} is not {FORMS}"[:200])
    if n < 0 or (n == 0 and not zero):
        raise ValueError("must be positive")
    return n


def is_duration(v: Any, *, zero: bool = True) -> bool:
    """Whether `v` parses as a duration (`parse_duration`)."""
    try:
        parse_duration(v, zero=zero)
    except ValueError:
        return False
    return True
