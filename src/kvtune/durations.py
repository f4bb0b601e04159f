"""Durations as the study file and kvload workload files write them: '3s', '500ms', '2m',
'1h' or a number of seconds. A leaf module, so that the schema (spec.py) and the load
drivers share one parser without importing each other."""

from __future__ import annotations

import math
import re
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(v: Any) -> float:
    """'3s', '500ms', '2m', '1h' or a number of seconds → seconds."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        if not math.isfinite(v) or abs(v) > 1e12:
            raise ValueError(f"{v} is not a finite duration")
        if v <= 0:
            raise ValueError("must be positive")
        return float(v)
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not a duration such as 10s, 500ms or 2m")
    m = _DURATION.match(v)
    if not m:
        raise ValueError(f"{v!r} is not a duration such as 10s, 500ms or 2m")
    n = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    if n <= 0:
        raise ValueError("must be positive")
    return n
