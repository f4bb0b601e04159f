"""Versions of the programs kvtune runs: `memcached -V`, `redis-server --version`."""

from __future__ import annotations

import re
import subprocess

from kvtune.errors import HarnessError

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, ...]:
    """The first `X.Y.Z` in a version banner as a tuple, or (0,) when there is none."""
    m = _VERSION.search(text)
    if not m:
        return (0,)
    return tuple(int(x) for x in m.groups())


def run_version(argv: list[str]) -> str:
    """What `argv` prints (stdout and stderr). Raises HarnessError when it cannot run."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"cannot run {argv[0]}: {e}") from None
    return out.stdout + out.stderr
