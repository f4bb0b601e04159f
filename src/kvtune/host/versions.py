"""Versions of the programs kvtune runs: `memcached -V`, `redis-server --version`."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kvtune.errors import HarnessError
from kvtune.safety import programs

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, ...]:
    """The first `X.Y.Z` in a version banner as a tuple, or (0,) when there is none."""
    m = _VERSION.search(text)
    if not m:
        return (0,)
    return tuple(int(x) for x in m.groups())


def run_version(prog: programs.Program, args: Sequence[str]) -> str:
    """What `prog args...` prints (stdout and stderr). Raises HarnessError when it cannot
    run."""
    try:
        out = prog.run(args, capture_output=True, text=True, timeout=10)
    except (OSError, programs.TimeoutExpired) as e:
        raise HarnessError(f"cannot run {prog.path}: {e}") from None
    return out.stdout + out.stderr
