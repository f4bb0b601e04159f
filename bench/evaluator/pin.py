"""Benchmarks import kvtune from a snapshot of the last commit, not from the working tree
that other engineers edit while a benchmark runs."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_PREFIX = "kvtune-bench-src-"


def portable(path: str | Path) -> str:
    """A path as the results record it, naming no machine: relative to the repository when
    inside it, `snapshot <tree>/src/kvtune` for pin_source's snapshot, else the file name."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(REPO))
    except ValueError:
        pass
    for part in p.parts:
        if part.startswith(SNAPSHOT_PREFIX):
            rest = Path(*p.parts[p.parts.index(part) + 1:])
            return f"snapshot {part[len(SNAPSHOT_PREFIX):]}/{rest}"
    return p.name


def interpreter() -> str:
    """The Python that ran a benchmark, naming no machine: its version and whether it is
    the repository's .venv or another environment."""
    import platform

    where = "the repository's .venv" if portable(sys.prefix) == ".venv" else \
        "an environment outside the repository"
    return f"Python {platform.python_version()} ({where})"


def pin_source(argv: list[str]) -> str:
    """Import kvtune from a snapshot of the last commit (git archive HEAD src/kvtune), not
    from the working tree, which other engineers edit while this runs. --worktree opts out;
    --commit REV snapshots another commit (when HEAD is broken). Returns what was measured,
    for the results."""
    import subprocess

    if "--worktree" in argv:
        return "working tree src/"
    rev = argv[argv.index("--commit") + 1] if "--commit" in argv else "HEAD"
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = subprocess.run(["git", "-C", str(REPO), "rev-parse", f"{sha}:src/kvtune"],
                          check=True, capture_output=True, text=True).stdout.strip()
    import tempfile

    dest = Path(tempfile.gettempdir()) / f"{SNAPSHOT_PREFIX}{tree[:12]}"
    if not (dest / "src" / "kvtune").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", "-C", str(REPO), "archive", sha, "src/kvtune"],
                             check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    sys.path.insert(0, str(dest / "src"))
    return f"commit {sha} (src/kvtune tree {tree[:12]})"
