"""The results databases the repository ships (results/*.db, examples/**/*.db), as the unit
tier reads them: each rendered screen of each once a test session.

`report(db, study, root)` is `kvtune report STUDY --storage sqlite:///COPY -o PAGE`, in
process (support.cli.cli), on a copy of `db` (the shipped file is never opened for
writing), its page written in a directory of its own. The run (exit code, output) and the
page are kept in `root`, keyed by the database's content (sha256) and the command line:
every test that only reads that page of that unchanged database asserts on the one
rendering (a report of a shipped case study is seconds: its analysis, its figures, its
memory section's curve). `root(tmp_path_factory)` is the session's: pytest-xdist's
workers share it (--dist load hands a module's tests to both), the first to ask renders
(support.session.once), the other reads what it wrote. The copy stays as it was: a reading
command creates nothing beside it, nor changes it (tests/test_readonly.py); `report`
checks it against the shipped file's digest before handing out a page."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import session
from support.cli import cli


def root(factory: pytest.TempPathFactory) -> Path:
    """Where the session's renderings are kept (support.session.root)."""
    return session.root(factory) / "shipped"


@functools.cache
def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _digest_now(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy(db: Path, where: Path) -> Path:
    """The session's copy of `db` (one a content): read it, never write it."""
    db = db.resolve()
    return session.once(where, f"db/{digest(db)}", lambda d: shutil.copy2(db, d)) / db.name


@dataclass(frozen=True)
class Report:
    ran: subprocess.CompletedProcess[str]  # the command's exit code and output
    page: str  # the page it wrote ("" when it wrote none)


def report(db: Path, study: str, where: Path) -> Report:
    """`kvtune report STUDY` of the shipped database `db`, rendered once a session."""
    db = db.resolve()
    return _report(db, digest(db), study, where)


@functools.cache
def _report(db: Path, sha: str, study: str, where: Path) -> Report:
    data = copy(db, where)
    args = ["report", study, "--storage", f"sqlite:///{data}"]
    key = hashlib.sha256(json.dumps([sha, args]).encode()).hexdigest()

    def render(d: Path) -> None:
        ran = cli(*args, "-o", str(d / "page.html"))
        (d / "ran.json").write_text(json.dumps({
            "returncode": ran.returncode, "stdout": ran.stdout, "stderr": ran.stderr}))

    d = session.once(where, f"pages/{key}", render)
    page = d / "page.html"
    done = json.loads((d / "ran.json").read_text())
    # What was rendered is what is read: the copy is still the shipped content.
    assert _digest_now(data) == sha, f"the copy of {db.name} was written to"
    return Report(subprocess.CompletedProcess(["kvtune", *args, "-o", str(page)],
                                              done["returncode"], done["stdout"],
                                              done["stderr"]),
                  page.read_text() if page.exists() else "")
