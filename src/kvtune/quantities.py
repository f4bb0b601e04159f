"""Rates and sizes as study files, workload files and the command line write them, parsed
by one function each in kvtune's Python (durations: `kvtune.durations`; CPU lists:
`kvtune.cpulist`). A leaf module.

The grammars are kvload's own (`parse_rate` and `parse_size` in kvload/src/config/spec.rs):
both sides are checked against one table of cases, `kvload/tests/grammar.json`
(tests/test_durations.py and kvload's `the_grammar_table`), which also holds the constants
both sides keep (`MAX_RATE`, `MAX_RELATIVE_TTL`).
"""

from __future__ import annotations

import math
import re


def is_count(text: str) -> bool:
    """Whether `text` is a whole number in ASCII digits ("0", "11211"), what `int()` reads
    as the number it shows: `str.isdigit` is true of any script's digits and of
    superscripts ("²", which `int()` refuses: a traceback; "٤", which it reads as 4)."""
    return text.isascii() and text.isdigit()


MAX_RATE = 1e7  # req/s: kvload's largest open-loop rate
# The memcache protocol reads a TTL above 30 days as an absolute Unix time.
MAX_RELATIVE_TTL = 30 * 24 * 3600

# A plain decimal number: digits, at most one point with digits on both sides.
NUMBER = r"[0-9]{1,30}(?:\.[0-9]{1,30})?"
_RATE = re.compile(rf"^\s*({NUMBER})([kKM]?)\s*$")
RATE_FORMS = "a rate such as 50000, 50k or 1.5M"

# A byte count: digits, then K, M or G (powers of 1024) or B.
SIZE = r"[0-9]{1,12}(?:[kKmMgG]|[bB])?"
_SIZE = re.compile(rf"^\s*({SIZE})\s*$")
_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "b": 1}
SIZE_FORMS = "a byte count such as 512, 64K, 512M or 2G (powers of 1024)"


def plain(x: float, decimals: int = 6) -> str:
    """`x` written as a plain number of the grammar (digits, a point; never an exponent):
    1e6 -> '1000000', 0.03 -> '0.03'; what kvtune writes into kvload's argv, where '1e+06'
    is refused. At most `decimals` decimals; ValueError for a negative or non-finite x."""
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{x!r} is not a non-negative finite number")
    return f"{x:.{decimals}f}".rstrip("0").rstrip(".") or "0"


def parse_rate(text: str) -> float:
    """'50000', '50k', '1.5M' → requests/s (positive). ValueError naming the forms."""
    m = _RATE.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{str(text)[:40]!r} is not {RATE_FORMS}")
    rate = float(m.group(1)) * {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6}[m.group(2)]
    if rate <= 0:
        raise ValueError(f"{text.strip()!r} is not {RATE_FORMS} (above 0)")
    return rate


def parse_size(text: str) -> int:
    """'512', '512B', '64K', '1M', '2G' → bytes. ValueError naming the forms."""
    m = _SIZE.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{str(text)[:40]!r} is not {SIZE_FORMS}")
    t = m.group(1)
    mult = _SIZE_UNITS.get(t[-1].lower())
    return int(t[:-1]) * mult if mult else int(t)
