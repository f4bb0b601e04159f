"""Make result databases shippable: rewrite the paths of the machine that ran them.

A study's store records what ran, as run: absolute paths of the binaries (kvload, the
scheduler shim's Python) and of per-repetition temp files. That is right on the host that
ran it, but a database shipped in the repository (results/cs0*.db, docs/case-studies.md)
must name no machine's path. This rewrites every text value in place: paths inside the
checkout become relative to it, temp directories become `$TMPDIR/`; then VACUUM.

    .venv/bin/python scripts/portable_results.py results/cs000-sched-p99.db [...]
"""

from __future__ import annotations

import re
import sqlite3
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rewrite(text: str) -> str:
    text = text.replace(str(REPO) + "/", "")
    tmp = re.escape(tempfile.gettempdir().rstrip("/"))
    return re.sub(tmp + r"/kvtune-[A-Za-z0-9_]+/", "$TMPDIR/", text)


def portable(db: Path) -> int:
    """Rewrite `db` in place; the number of values changed."""
    con = sqlite3.connect(db)
    changed = 0
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for t in tables:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        for c in cols:
            rows = con.execute(f'SELECT rowid, "{c}" FROM "{t}" WHERE typeof("{c}") = \'text\'')
            for rowid, v in rows.fetchall():
                new = rewrite(v)
                if new != v:
                    con.execute(f'UPDATE "{t}" SET "{c}" = ? WHERE rowid = ?', (new, rowid))
                    changed += 1
    con.commit()
    con.execute("VACUUM")
    con.close()
    return changed


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for p in argv:
        print(f"{p}: {portable(Path(p))} values rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
