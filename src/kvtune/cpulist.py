"""CPU lists as the kernel writes them ("0", "0-1", "0,2-3"): the one parser in kvtune's
Python, with kvload's grammar (`parse_cpus` in kvload/src/config/spec.rs; both checked
against `kvload/tests/grammar.json`). No kvtune imports: the catalog, the appliers and the
study file all use it."""

from __future__ import annotations

import re

MAX_CPU = 8191  # the kernel's largest NR_CPUS - 1; kvload's own bound is CPU_SETSIZE - 1
# Spaces and tabs around a part, never a line break within the list (it lands on one line
# of a systemd drop-in: "0,\n1" would write a second line).
# ASCII digits only (`\d` would take any script's: "\u0661" is not CPU 1).
_PART = re.compile(r"[ \t]*([0-9]{1,5})(?:[ \t]*-[ \t]*([0-9]{1,5}))?[ \t]*")
FORMS = "a CPU list such as 0, 0-1 or 0,2-3"


def parse_cpus(text: str, limit: int = MAX_CPU) -> list[int]:
    """'0', '0-1', '0,2-3' → the CPUs, sorted; ValueError for anything else: an empty
    part, a range that runs backwards, a CPU named twice or beyond `limit` (checked before
    a range is expanded)."""
    if not isinstance(text, str) or len(text) > 4096:
        raise ValueError(f"{str(text)[:40]!r} is not {FORMS}")
    out: list[int] = []
    # Whitespace around the whole list (a line read from a file); inside it, spaces and
    # tabs only (a part's `_PART`).
    for part in text.strip().split(","):
        m = _PART.fullmatch(part)
        if not m:
            what = "an empty part" if not part.strip() else \
                f"{part.strip()[:20]!r} is not a CPU number or range"
            raise ValueError(f"{text.strip()[:60]!r} is not {FORMS} ({what})")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        for n in (lo, hi):
            if n > limit:
                raise ValueError(f"CPU {n} in {text.strip()[:60]!r} is beyond the limit "
                                 f"({limit})")
        if lo > hi:
            raise ValueError(f"CPU range {part.strip()!r} runs backwards")
        out.extend(range(lo, hi + 1))
    if len(set(out)) != len(out):
        raise ValueError(f"CPU list {text.strip()[:60]!r} names a CPU twice")
    return sorted(out)
