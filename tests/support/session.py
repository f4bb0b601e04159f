"""What the tests of one session build once and then only read, shared by pytest-xdist's
workers: the session's own directory (`root`), and `once(where, name, build)`, which runs
`build` into a directory of its own for the first worker to ask, under a lock file, while
the others wait and then read what it wrote. A build that failed half-way is started over
by the next to ask. No other session reads the directory (pytest removes it with the
session's other temporary directories)."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def root(factory: pytest.TempPathFactory) -> Path:
    """The session's directory for what is built once: under the session's own temporary
    directory (above each pytest-xdist worker's)."""
    base = factory.getbasetemp()
    d = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "once"
    d.mkdir(exist_ok=True)
    return d


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """`path` held as an exclusive lock file (flock) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def once(where: Path, name: str, build: Callable[[Path], object]) -> Path:
    """The directory `where/name`, `build` run into it once a session (the first worker to
    ask builds, the others read)."""
    d = where / name
    with _locked(where / f"{name}.lock"):
        if not (d / ".built").exists():
            shutil.rmtree(d, ignore_errors=True)  # a build that failed half-way
            d.mkdir(parents=True)
            build(d)
            (d / ".built").touch()
    return d
