"""The typed, versioned result documents (issue 44, `kvtune.documents`): `store` is the one
place they become JSON and come back; every shipped database keeps opening, an older layout
is read in the current one, a newer or damaged one is refused by name."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from support import shipped
from support.cli import cli

from kvtune import documents
from kvtune.documents import Ablation, Confirmation, Document
from kvtune.errors import UserError
from kvtune.stats import MEDIANS_TEST, PAIRED_TEST
from kvtune.store import Store

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for p in (REPO / "results").glob("*.db")
                 if subprocess.run(["git", "-C", str(REPO), "ls-files", "--error-unmatch",
                                    str(p)], capture_output=True).returncode == 0) \
    if shutil.which("git") else sorted((REPO / "results").glob("*.db"))


def _rows(db: Path) -> list[tuple[int, str, str, str]]:
    with sqlite3.connect(db) as c:
        return list(c.execute("select id, study, key, data from kvtune_results"))


@pytest.mark.parametrize("db", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_database_reads_as_typed_documents(db: Path) -> None:
    """Each stored result of a shipped database reads as its type, in the current layout
    (its schema version), and writes back to the same document."""
    store = Store(f"sqlite:///{db}", create=False)
    rows = _rows(db)
    assert rows
    for rid, study, key, text in rows:
        raw = json.loads(text)
        doc = documents.read(key, raw, f"{db.name} #{rid}")
        kind = documents.type_of(key)
        assert kind is not None and isinstance(doc, kind), key
        stored = doc.stored()
        assert stored["schema"] == kind.VERSION
        # Nothing stored is lost on the way (unknown fields are kept).
        assert set(raw) - {"schema"} <= set(stored)
        assert documents.read(key, stored, "again").stored() == stored
        # The mapping screens get is the same upgraded document.
        assert store.results(study, key)[-1]["schema"] == kind.VERSION


def test_a_layout_0_confirmation_says_the_statistic_it_came_from() -> None:
    """Before versions, a confirmation's comparison came from the ratio of medians with a
    bootstrap interval: read today it says so (the report names `test`), and nothing else
    of it changes."""
    old = {"metric": "ops_per_sec", "direction": "maximize", "rounds": 4,
           "candidates": [{"trial": 3, "name": "trial 3", "config": {"k": 1},
                           "comparison": {"improvement": 0.1, "ci_low": 0.02,
                                          "ci_high": 0.2, "p_value": 0.01,
                                          "n_candidate": 4, "n_baseline": 4,
                                          "direction": "maximize"},
                           "significant": True}],
           "verdict": "trial 3: ..."}
    old["recommended"] = old["candidates"][0]
    doc = documents.read("confirmation", old, "old")
    assert isinstance(doc, Confirmation) and doc.schema_version == Confirmation.VERSION
    assert doc.candidates[0].comparison is not None
    assert doc.candidates[0].comparison.test == MEDIANS_TEST
    assert doc.recommended is not None and doc.recommended.comparison is not None
    assert doc.recommended.comparison.test == MEDIANS_TEST
    # A current document keeps the statistic it names.
    new = {**old, "schema": 1, "candidates": [
        {**old["candidates"][0], "comparison": {**old["candidates"][0]["comparison"],
                                                "test": PAIRED_TEST}}]}
    cur = documents.read("confirmation", new, "new")
    assert cur.candidates[0].comparison.test == PAIRED_TEST


def test_the_store_writes_typed_documents_with_their_version(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")
    store.tag = {"fingerprint": "fp1"}
    store.put_result("s", "confirmation", {"metric": "p99_us", "direction": "minimize",
                                           "candidates": [], "recommended": None,
                                           "verdict": "none"})
    store.put_result("s", "ablation", Ablation(skipped="one change", metric="p99_us"))
    raw = {k: json.loads(t) for _, _, k, t in _rows(tmp_path / "r.db")}
    assert raw["confirmation"]["schema"] == Confirmation.VERSION
    assert raw["ablation"]["schema"] == Ablation.VERSION
    assert raw["confirmation"]["fingerprint"] == "fp1"  # the run's host
    conf = store.document("s", Confirmation)
    assert isinstance(conf, Confirmation) and conf.direction == "minimize"
    assert store.document("s", Confirmation, fingerprint="other") is None
    abl = store.document("s", Ablation, fingerprint="fp1")
    assert abl is not None and abl.skipped == "one change" and abl.chosen is None
    # A phase's mapping of the wrong shape is refused before anything is written.
    with pytest.raises(UserError, match="stored field candidates"):
        store.put_result("s", "confirmation", {"candidates": "x"})
    assert len(_rows(tmp_path / "r.db")) == 2


@pytest.mark.parametrize("version, match", [
    (99, "stored at schema version 99 by a newer kvtune"),
    ("1", "not a schema version"),
    (True, "not a schema version"),
])
def test_a_version_this_kvtune_cannot_read_is_refused(version: object, match: str) -> None:
    with pytest.raises(UserError, match=match):
        documents.read("confirmation", {"schema": version, "candidates": []}, "db #1")


@pytest.mark.parametrize("key, doc, field", [
    ("confirmation", {"candidates": [{"comparison": {"p_value": "low"}}]},
     "candidates.0.comparison.p_value"),
    ("confirmation", {"recommended": {"significant": "yes"}}, "recommended.significant"),
    ("confirmation", {"baseline": {"config": {"k": [1, 2]}}}, "baseline.config.k"),
    ("ablation", {"knobs": [{"knob": 3}]}, "knobs.0.knob"),
    ("ablation", {"choice": {"chosen": "everything"}}, "choice.chosen"),
    ("noise_floor", {"cov": {"p99_us": "x"}}, "cov.p99_us"),
    ("drift", {"moved": 1}, "moved"),
    ("sweep:thp.enabled", {"rows": "x"}, "rows"),
])
def test_a_damaged_field_is_named(key: str, doc: dict[str, object], field: str) -> None:
    with pytest.raises(UserError) as e:
        documents.read(key, doc, "study 's' in results.db, result #4")
    assert f"the stored field {field} " in str(e.value)
    assert "study 's' in results.db, result #4" in str(e.value)


def test_a_newer_document_in_a_database_exits_2_naming_it(tmp_path: Path) -> None:
    """`show`, `report` and `export` on a database a newer kvtune wrote: exit 2, the
    study, the result and the version named, nothing written."""
    src = REPO / "results" / "cs002-redis-preemption-thp.db"
    db = tmp_path / "newer.db"
    shutil.copy(src, db)
    with sqlite3.connect(db) as c:
        rid, text = c.execute("select id, data from kvtune_results where key = "
                              "'confirmation'").fetchone()
        c.execute("update kvtune_results set data = ? where id = ?",
                  (json.dumps({**json.loads(text), "schema": 7}), rid))
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (["show", "cs002-redis-preemption-thp"],
                 ["export", "cs002-redis-preemption-thp", "--out", str(tmp_path / "out")]):
        r = cli(*args, "--storage", f"sqlite:///{db}")
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "schema version 7 by a newer kvtune" in r.stderr + r.stdout
        assert "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_every_result_key_a_study_writes_has_a_type() -> None:
    """What the phases store is typed: each key `put_result` is called with in src/."""
    import re

    keys = set()
    for p in (REPO / "src" / "kvtune").rglob("*.py"):
        text = p.read_text()
        keys |= set(re.findall(r'put_result\([^,]+,\s*"([a-z_]+)"', text))
        keys |= set(re.findall(r'put_result\([^,]+,\s*f"(sweep):', text))
    keys |= {"host_noise"}  # measure/host_noise.py stores under its KEY constant
    assert keys, "no put_result call found"
    for key in keys:
        assert documents.type_of(key if key != "sweep" else "sweep:k") is not None, key
    assert all(issubclass(t, Document) for t in documents.TYPES.values())


def test_a_damaged_trial_is_refused_by_every_screen(tmp_path: Path) -> None:
    """A trial's stored configuration that is not one: `show`, `export` and `report` exit
    2 naming the study and the trial (the report once fell back to its sweeps-only page
    on any refusal, hiding it), and nothing is written."""
    db = tmp_path / "damaged.db"
    shutil.copy(REPO / "results" / "cs002-redis-preemption-thp.db", db)
    with sqlite3.connect(db) as c:
        c.execute("update trial_user_attributes set value_json = '\"x\"' where key = "
                  "'config' and trial_id = (select min(t.trial_id) from trials t join "
                  "studies s on s.study_id = t.study_id where s.study_name = "
                  "'cs002-redis-preemption-thp')")
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (["show"], ["export", "--out", str(tmp_path / "out")],
                 ["report", "-o", str(tmp_path / "r.html")]):
        r = cli(args[0], "cs002-redis-preemption-thp", *args[1:], "--storage",
                f"sqlite:///{db}")
        assert r.returncode == 2, (args, r.stdout[-500:], r.stderr[-500:])
        assert "trial 0: the stored config is not a configuration" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_the_reports_commands_follow_the_headline(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Issue 44's case: the 002 study's report said "Keep the defaults" at the top and
    offered `kvtune run … --set … # the recommended configuration` in its Commands. The
    command now says what the configuration is: here the best candidate, not shown better
    than the defaults; only a headline that ships calls it that. (The report of the shipped
    database, rendered once a session: support.shipped.)"""
    report = shipped.report(REPO / "results" / "cs002-redis-preemption-thp.db",
                            "cs002-redis-preemption-thp", shipped.root(tmp_path_factory))
    assert report.ran.returncode == 0, report.ran.stderr
    page = report.page
    # Its headline ships nothing (not decided, on the paired statistic: 4 rounds).
    assert "Not decided: the best candidate" in page or "Keep the defaults" in page
    assert "# the recommended configuration" not in page
    assert "# the best candidate, not shown better than the defaults" in page
