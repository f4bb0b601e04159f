"""A stored result is input to every screen that reads it (issues 40 and 44): the numbers a
results database hands back may be null (JSON has no NaN: a candidate whose every round
failed has no interval, and it is stored as null), of another type, or missing. Every
screen that reads results (`show`, `show --json`, `report`, `export`) answers such a
database with its own words and exit code, never a traceback.

The shipped databases are the corpus: each result row and each trial's stored evaluation
is rewritten so that every number it holds is null, or text, and the screens run on the
copy. Nulls read as "not measured"; text where a figure belongs is refused (exit 2) by the
check every stored document passes (`kvtune.study.stored.check_document`)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.cli import cli

REPO = Path(__file__).resolve().parents[1]
# The databases the repository ships (a local run's own databases under results/ are not
# the corpus: CI's clone has none).
SHIPPED = sorted(p for p in (REPO / "results").glob("*.db")
                 if not p.name.startswith(os.environ.get("KVTUNE_FUZZ_SKIP", "memcached-demo")))


def _rewrite(obj: Any, leaf: Callable[[Any], Any]) -> Any:
    if isinstance(obj, dict):
        return {k: _rewrite(v, leaf) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rewrite(v, leaf) for v in obj]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return leaf(obj)
    return obj


MUTATIONS: dict[str, Callable[[Any], Any]] = {
    "null": lambda v: None,
    "text": lambda v: "n/a",
}


def _mutated(db: Path, tmp: Path, leaf: Callable[[Any], Any]) -> Path:
    out = tmp / db.name
    shutil.copy(db, out)
    con = sqlite3.connect(out)
    try:
        rows = con.execute("SELECT id, key, data FROM kvtune_results").fetchall()
        for rid, key, data in rows:
            if key == "spec":  # the study file itself is checked by the study file's rules
                continue
            try:
                doc = json.loads(data)
            except ValueError:
                continue
            con.execute("UPDATE kvtune_results SET data = ? WHERE id = ?",
                        (json.dumps(_rewrite(doc, leaf)), rid))
        for rid, data in con.execute(
                "SELECT trial_user_attribute_id, value_json FROM trial_user_attributes "
                "WHERE key = 'eval'").fetchall():
            con.execute("UPDATE trial_user_attributes SET value_json = ? "
                        "WHERE trial_user_attribute_id = ?",
                        (json.dumps(_rewrite(json.loads(data), leaf)), rid))
        con.commit()
    finally:
        con.close()
    return out


def _study(db: Path) -> str:
    """The database's first study: an Optuna study's, else a sweep's (a sweep stores only
    results)."""
    con = sqlite3.connect(db)
    try:
        row = (con.execute("SELECT study_name FROM studies ORDER BY study_id").fetchone()
               or con.execute("SELECT study FROM kvtune_results ORDER BY id").fetchone())
    finally:
        con.close()
    assert row, f"{db.name}: no study in the shipped database"
    return str(row[0])


def _tables_ok(db: Path) -> bool:
    con = sqlite3.connect(db)
    try:
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    return {"kvtune_results", "studies"} <= have


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("db", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_screen_reads_a_database_whose_numbers_are_not_numbers(
        db: Path, mutation: str, tmp_path: Path) -> None:
    if not _tables_ok(db):
        pytest.skip(f"{db.name} holds no kvtune results")
    copy = _mutated(db, tmp_path, MUTATIONS[mutation])
    study = _study(copy)
    url = f"sqlite:///{copy}"
    runs = {
        "show": cli("show", study, "--storage", url, cwd=tmp_path),
        "show --json": cli("show", study, "--storage", url, "--json", cwd=tmp_path),
        "report": cli("report", study, "--storage", url, "-o", str(tmp_path / "r.html"),
                      cwd=tmp_path),
        "export": cli("export", study, "--storage", url, "-o", str(tmp_path / "x"),
                      cwd=tmp_path),
    }
    for what, r in runs.items():
        said = r.stdout[-3000:] + r.stderr[-3000:]
        assert "Traceback" not in said, f"{what}: {said}"
        assert r.returncode in (0, 1, 2), f"{what}: exit {r.returncode}: {said}"
        if r.returncode == 2:
            assert r.stderr.strip(), f"{what}: exit 2 without a word"
    if runs["show --json"].returncode == 0:
        json.loads(runs["show --json"].stdout)
    if mutation == "text":  # a figure that is text is refused where it is read, named
        refused = [w for w, r in runs.items() if r.returncode == 2]
        assert refused, {w: r.returncode for w, r in runs.items()}
        for w in refused:
            assert "not a number" in runs[w].stderr or "is not" in runs[w].stderr, \
                f"{w}: {runs[w].stderr[-2000:]}"


def test_what_kvtune_stores_passes_what_it_reads() -> None:
    """A server's stderr is stored with a study (a failed trial's evaluation): its newlines
    are kept, an escape sequence becomes U+FFFD, and the document passes the reading check
    (a Valkey study's export was refused: "the stored field stderr is not plain text")."""
    from kvtune.store import check_document, dumps

    doc = json.loads(dumps({"stderr": "Server started\n\x1b[31mWARNING\x1b[0m\r\n",
                            "ci": [float("nan"), 1.0], "metrics": {"p99_us": float("inf")}}))
    check_document(doc, "round trip")
    assert doc["stderr"].count("\n") == 2 and "\x1b" not in doc["stderr"]
    assert doc["ci"] == [None, 1.0] and doc["metrics"] == {"p99_us": None}
