"""CPU lists as the kernel writes them ("0", "0-1", "0,2-3"). No kvtune imports: the
catalog, the appliers and the study file all use it."""

from __future__ import annotations


def parse_cpus(text: str) -> list[int]:
    """'0', '0-1', '0,2-3' → [0, 1, ...]; raises ValueError."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if lo > hi:
                raise ValueError(f"CPU range {part!r} runs backwards")
            out.extend(range(lo, hi + 1))
        else:
            out.append(int(part))
    if not out:
        raise ValueError("empty CPU list")
    return sorted(set(out))
