"""The results databases the repository ships (results/*.db, examples/**/*.db), as the unit
tier reads them: each rendered screen of each once a test process.

`report(db, study)` is `kvtune report STUDY --storage sqlite:///COPY -o PAGE`, in process
(support.cli.cli), on a copy of `db` made once a process (the shipped file is never
opened for writing), its page written in a directory of its own. The run and the page are
kept, keyed by the database's content (sha256) and the command line: every test that only
reads that page of that unchanged database asserts on the one rendering (a report of a
shipped case study is seconds: its analysis, its figures, its memory section's curve). The
copy stays as it was: a reading command creates nothing beside it, nor changes it
(tests/test_readonly.py); `report` checks it against the shipped file's digest before
handing out a page."""

from __future__ import annotations

import atexit
import functools
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from support.cli import cli

_ROOT: list[Path] = []


def _root() -> Path:
    """This process's directory of copies and pages (removed when the process ends)."""
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="test-kvtune-shipped-")))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    return _ROOT[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.cache
def _copy(sha: str, db: Path) -> Path:
    d = _root() / "db" / sha
    d.mkdir(parents=True)
    shutil.copy2(db, d / db.name)
    return d / db.name


def copy(db: Path) -> Path:
    """A copy of `db`, one a content a process: read it, never write it."""
    db = db.resolve()
    return _copy(digest(db), db)


@dataclass(frozen=True)
class Report:
    ran: subprocess.CompletedProcess[str]  # the command's exit code and output
    page: str  # the page it wrote ("" when it wrote none)


def report(db: Path, study: str) -> Report:
    """`kvtune report STUDY` of the shipped database `db`, rendered once a process."""
    db = db.resolve()
    sha = digest(db)
    out = _report(sha, db, ("report", study, "--storage", f"sqlite:///{_copy(sha, db)}"))
    # What was rendered is what is read: the copy is still the shipped content.
    assert digest(_copy(sha, db)) == sha, f"the copy of {db.name} was written to"
    return out


@functools.cache
def _report(sha: str, db: Path, args: tuple[str, ...]) -> Report:
    page = _root() / "pages" / sha / f"{args[1]}.html"  # one study of one database
    page.parent.mkdir(parents=True, exist_ok=True)
    ran = cli(*args, "-o", str(page))
    return Report(ran, page.read_text() if page.exists() else "")
