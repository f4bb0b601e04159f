"""What ships in the repository names no machine's path: the benchmarks' JSON results, the
case studies' result databases (scripts/portable_results.py rewrites them)."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from portable_results import rewrite  # noqa: E402

# An absolute path under a home, a temp or a work directory, as a whole JSON string value
# or at the start of a command line's argument.
MACHINE_PATH = re.compile(r'(?:"|\s)/(?:tmp|home|root|work|srv|mnt)/[^"\s]*')


def _tracked(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", pattern], capture_output=True,
                         text=True, check=False).stdout.split()
    return [REPO / p for p in out]


BENCH_JSON = _tracked("bench/*.json")
SHIPPED_DBS = _tracked("results/*.db")


@pytest.mark.parametrize("path", BENCH_JSON, ids=[p.name for p in BENCH_JSON])
def test_bench_results_name_no_machine_path(path: Path) -> None:
    hits = MACHINE_PATH.findall(path.read_text())
    assert not hits, f"{path.relative_to(REPO)}: {hits[:3]}"


@pytest.mark.parametrize("db", SHIPPED_DBS, ids=[p.name for p in SHIPPED_DBS])
def test_shipped_results_name_no_machine_path(db: Path) -> None:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            for c in [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]:
                for (v,) in con.execute(f'SELECT "{c}" FROM "{t}" WHERE typeof("{c}")=\'text\''):
                    assert rewrite(v) == v, f"{db.name} {t}.{c}: {v[:200]}"
                    assert str(REPO) not in v
                    # Another checkout's path (the host that ran it) is as wrong as this one's.
                    assert not MACHINE_PATH.findall(v), f"{db.name} {t}.{c}: {v[:200]}"
    finally:
        con.close()


def test_rewrite_makes_paths_portable() -> None:
    import tempfile

    tmp = tempfile.gettempdir()
    v = f'["{REPO}/kvload/target/release/kvload", "--json", "{tmp}/kvtune-ab_12/kvload.json"]'
    assert rewrite(v) == '["kvload/target/release/kvload", "--json", "$TMPDIR/kvload.json"]'
