"""Benchmarks import kvtune from a snapshot of the last commit, not from the working tree
that other engineers edit while a benchmark runs."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pin_source(argv: list[str]) -> str:
    """Import kvtune from a snapshot of the last commit (git archive HEAD src/kvtune), not
    from the working tree, which other engineers edit while this runs. --worktree opts out;
    --commit REV snapshots another commit (when HEAD is broken). Returns what was measured,
    for the results."""
    import subprocess

    if "--worktree" in argv:
        return "working tree " + str(REPO / "src")
    rev = argv[argv.index("--commit") + 1] if "--commit" in argv else "HEAD"
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = subprocess.run(["git", "-C", str(REPO), "rev-parse", f"{sha}:src/kvtune"],
                          check=True, capture_output=True, text=True).stdout.strip()
    dest = Path(f"/tmp/kvtune-bench-src-{tree[:12]}")
    if not (dest / "src" / "kvtune").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", "-C", str(REPO), "archive", sha, "src/kvtune"],
                             check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    sys.path.insert(0, str(dest / "src"))
    return f"commit {sha} (src/kvtune tree {tree[:12]})"
