"""Every table a results database or a library holds is input, Optuna's own included: a
trial's attributes of the wrong type (`violations`, `fingerprint`, `worker`), a
repetition's `raw` record or `params` that are not mappings (or whose command line,
measurement, telemetry or server statistics have the wrong shape), a row of Optuna's
tables it did not write (a distribution that is not JSON or not Optuna's, a categorical
index outside its choices, a finished trial without its value, a state that is none of
Optuna's, an attribute that is not JSON) and a library row whose entry is not text. Each is
refused (UserError, exit 2) naming the storage, the study and the trial or repetition, or,
for a library row, skipped and counted like any entry that does not validate: never a
traceback.

Each case is a copy of a shipped database (results/) changed with sqlite3 in the test's
own directory, read through the in-process CLI."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.cli import cli

from kvtune.store import CheckedStorage, check_trial_attrs, results_store

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "results" / "atune-memcached-003.db"
STUDY = "atune-memcached-003"


def _copy(tmp_path: Path) -> Path:
    db = tmp_path / SHIPPED.name
    shutil.copy(SHIPPED, db)
    return db


def _sql(db: Path, query: str, args: tuple[Any, ...] = ()) -> list[Any]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute(query, args).fetchall()
        con.commit()
    finally:
        con.close()
    return rows


def _refused(db: Path, tmp_path: Path, *said: str,
             commands: tuple[str, ...] = ("show",)) -> str:
    """Each of `commands` on `db` exits 2 with kvtune's own message, which names the
    storage and each of `said`; the message."""
    url = f"sqlite:///{db}"
    text = ""
    for command in commands:
        extra = {"export": ["-o", str(tmp_path / "x"), "--best-in-search"],
                 "report": ["-o", str(tmp_path / "r.html")]}.get(command, [])
        r = cli(command, STUDY, "--storage", url, *extra, cwd=tmp_path)
        out = r.stdout + r.stderr
        assert "Traceback" not in out, f"{command}: {out[-3000:]}"
        assert r.returncode == 2, f"{command}: exit {r.returncode}: {out[-3000:]}"
        text = " ".join(r.stderr.split())
        assert text.startswith("kvtune: error:"), text
        for s in (url, *said):
            assert s in text, f"{command}: {s!r} not in {text!r}"
    return text


# -- a trial's attributes -------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), [
    ("violations", '["x"]'), ("violations", "5"), ("violations", "[null]"),
    ("violations", "null"), ("violations", "[true]"),
    ("fingerprint", '["a"]'), ("fingerprint", "5"), ("worker", '{"a": 1}'),
])
def test_a_trial_attribute_of_the_wrong_type_is_refused_naming_the_trial(
        key: str, value: str, tmp_path: Path) -> None:
    """`violations:"x"` was a TypeError ('<=' not supported), `violations:5` one ('int'
    object is not iterable), `fingerprint:[1]` one (unhashable type: 'list') in show,
    export and the report."""
    db = _copy(tmp_path)
    _sql(db, "DELETE FROM trial_user_attributes WHERE trial_id = 1 AND key = ?", (key,))
    _sql(db, "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (1, ?, ?)",
         (key, value))
    commands = ("show", "export", "report") if value == '["x"]' else ("show",)
    _refused(db, tmp_path, f"study {STUDY!r}", "trial 0", f"stored {key}",
             commands=commands)


def test_what_kvtune_stores_of_a_trial_passes() -> None:
    check_trial_attrs({"violations": [0.0, -2.5, 1, 10**400], "fingerprint": "ab12",
                       "worker": "host-1", "kind": "trial"}, "t")
    check_trial_attrs({"violations": [], "fingerprint": None, "worker": None}, "t")
    # A saturated run's p99 is infinite, its violation too; NaN compares as infeasible.
    check_trial_attrs({"violations": [float("inf"), float("nan")]}, "t")


# -- a repetition's raw record and configuration --------------------------------------------


def _set_raw(db: Path, change: Any) -> None:
    (raw,), = _sql(db, "SELECT raw FROM kvtune_repetitions WHERE id = 1")
    _sql(db, "UPDATE kvtune_repetitions SET raw = ? WHERE id = 1",
         (json.dumps(change(json.loads(raw))),))


@pytest.mark.parametrize(("change", "said"), [
    (lambda r: [1], "stored raw is [1], not a mapping"),
    (lambda r: "x", "stored raw is 'x', not a mapping"),
    (lambda r: {**r, "argv": 5}, "field argv is 5, not a list of text"),
    (lambda r: {**r, "argv": ["a", 1]}, "field argv"),
    (lambda r: {**r, "telemetry": "x"}, "field telemetry is 'x', not a mapping"),
    (lambda r: {**r, "telemetry": {**r["telemetry"], "server": [1]}}, "telemetry.server"),
    (lambda r: {**r, "telemetry": {**r["telemetry"], "samples": {"samples": [1]}}},
     "telemetry.samples.samples"),
    (lambda r: {**r, "load": 5}, "field load is 5, not a mapping"),
    (lambda r: {**r, "server_stats": [1]}, "field server_stats"),
    (lambda r: {**r, "load": {**r["load"], "argv": "x"}}, "field load.argv"),
], ids=["list", "text", "argv", "argv-item", "telemetry", "telemetry-server",
        "telemetry-samples", "load", "server_stats", "load-argv"])
def test_a_repetition_raw_record_of_the_wrong_shape_is_refused_naming_it(
        change: Any, said: str, tmp_path: Path) -> None:
    """`raw=[1]` and `raw.telemetry="x"` were AttributeErrors in the report, `raw.argv=5` a
    TypeError, `raw.load=5` an AttributeError."""
    db = _copy(tmp_path)
    _set_raw(db, change)
    commands = ("show", "report") if said.startswith("field telemetry is") else ("show",)
    _refused(db, tmp_path, f"study {STUDY!r}", "repetition #1", said, commands=commands)


@pytest.mark.parametrize(("params", "said"), [
    ("[1]", "stored params is [1], not a mapping"),
    ('{"memcached.threads": [4]}', "stored params is not a configuration"),
    ("5", "stored params is 5, not a mapping"),
])
def test_a_repetition_configuration_that_is_not_one_is_refused(
        params: str, said: str, tmp_path: Path) -> None:
    db = _copy(tmp_path)
    _sql(db, "UPDATE kvtune_repetitions SET params = ? WHERE id = 1", (params,))
    _refused(db, tmp_path, "repetition #1", said)


def _studies_with_repetitions(db: Path) -> list[str]:
    """The studies of a shipped database that stored repetitions ([] for another file),
    read without writing (the shipped file's digest is checked by other tests)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"kvtune_repetitions", "studies"} <= tables:
            return []
        return [r[0] for r in con.execute("SELECT DISTINCT study FROM kvtune_repetitions")]
    finally:
        con.close()


def test_every_shipped_repetition_passes_the_check() -> None:
    """What kvtune stores passes what it reads: the telemetry's sampler rows (its
    `samples`, records rather than figures) included."""
    checked = 0
    for db in sorted((REPO / "results").glob("*.db")):
        store = results_store(f"sqlite:///{db}")
        for study in _studies_with_repetitions(db):
            checked += len(store.repetitions(study))
    assert checked > 100  # the shipped case studies' repetitions, every one read


# -- Optuna's own tables --------------------------------------------------------------------


@pytest.mark.parametrize(("change", "said"), [
    ("UPDATE trial_params SET distribution_json = 'xx' WHERE param_id = 2",
     "trial 0: the stored trials cannot be read: JSONDecodeError"),
    ("UPDATE trial_params SET distribution_json = '{\"name\": \"Nope\", \"attributes\": {}}' "
     "WHERE param_id = 2", "trial 0: the stored trials cannot be read: ValueError"),
    ("UPDATE trial_params SET distribution_json = '{\"attributes\": {}}' WHERE param_id = 2",
     "trial 0: the stored trials cannot be read: KeyError"),
    ("UPDATE trial_params SET param_value = 99 WHERE param_id = 1",
     "trial 0: the stored trials cannot be read: IndexError"),
    ("UPDATE trial_values SET value = NULL WHERE trial_value_id = 1",
     "trial 0: the stored trials cannot be read: AssertionError"),
    ("UPDATE trial_user_attributes SET value_json = '{' WHERE trial_id = 1 AND key = 'kind'",
     "trial 0: the stored trials cannot be read: JSONDecodeError"),
    ("UPDATE trials SET state = 'BOGUS' WHERE trial_id = 1",
     "the stored trials cannot be read: LookupError"),
    ("UPDATE trials SET datetime_start = 'yesterday' WHERE trial_id = 1",
     "the stored trials cannot be read: ValueError"),
    ("UPDATE study_user_attributes SET value_json = '{' WHERE key = 'host'",
     "the stored study attributes cannot be read: JSONDecodeError"),
    ("UPDATE study_directions SET direction = 'SIDEWAYS'",
     "the stored study cannot be read: LookupError"),
], ids=["distribution-not-json", "distribution-unknown", "distribution-no-name",
        "categorical-out-of-range", "complete-without-value", "attribute-not-json",
        "state", "datetime", "study-attribute-not-json", "direction"])
def test_a_row_of_optunas_tables_it_did_not_write_is_refused_naming_the_study(
        change: str, said: str, tmp_path: Path) -> None:
    """Each was a traceback (JSONDecodeError, ValueError, IndexError, AssertionError,
    LookupError) in show, export and the report."""
    db = _copy(tmp_path)
    _sql(db, change)
    commands = ("show", "export", "report") if "'xx'" in change or \
        said.endswith("AssertionError") else ("show",)
    _refused(db, tmp_path, f"study {STUDY!r}", said, commands=commands)


def test_a_study_that_is_not_there_is_still_said_to_be_missing(tmp_path: Path) -> None:
    """Optuna's KeyError for a study that is not there passes the checked storage as it
    is: the command says which studies there are."""
    db = _copy(tmp_path)
    r = cli("show", "nope", "--storage", f"sqlite:///{db}", cwd=tmp_path)
    assert r.returncode == 2 and "no study named 'nope'" in r.stderr, r.stderr


def test_reading_optunas_tables_checked_costs_no_query(tmp_path: Path) -> None:
    """The checked storage catches errors only: each read makes the queries Optuna's own
    makes."""
    import optuna

    db = _copy(tmp_path)
    url = f"sqlite:///{db}"
    counts = []
    for cls in (optuna.storages.RDBStorage, CheckedStorage):
        storage = cls(url, skip_compatibility_check=True)
        seen: list[str] = []
        sa.event.listen(storage.engine, "before_cursor_execute",
                        lambda *a, seen=seen: seen.append(a[2]))
        sid = storage.get_study_id_from_name(STUDY)
        storage.get_study_directions(sid)
        trials = storage.get_all_trials(sid)
        storage.get_trial(trials[0]._trial_id)
        storage.get_study_system_attrs(sid)
        counts.append(len(seen))
        storage.engine.dispose()
    assert counts[0] == counts[1], counts


def test_a_storage_password_is_never_shown() -> None:
    storage = CheckedStorage.__new__(CheckedStorage)
    storage.url = "postgresql+psycopg://kv:s3cr3t-pw@db.example/results"
    storage.where = "postgresql+psycopg://kv:***@db.example/results"
    e = storage._unreadable(sa.exc.OperationalError(
        "SELECT 1", {}, Exception("password s3cr3t-pw refused\nmore")))
    assert "s3cr3t-pw" not in str(e) and "***" in str(e), str(e)
    assert str(e).startswith(storage.where), str(e)


# -- the library ----------------------------------------------------------------------------


def _library(tmp_path: Path, *rows: tuple[str, Any]) -> Path:
    """A library whose `data` column takes any value (another program made it)."""
    db = tmp_path / "lib.db"
    _sql(db, "CREATE TABLE kvtune_library (id VARCHAR(32) PRIMARY KEY, created FLOAT, "
             "target VARCHAR(128), metric VARCHAR(128), kvtune_version VARCHAR(32), data)")
    for i, (rid, data) in enumerate(rows):
        _sql(db, "INSERT INTO kvtune_library VALUES (?, ?, 'memcached', 'ops_per_sec', "
                 "'0.1.0', ?)", (rid, float(i), data))
    return db


def test_a_library_row_whose_entry_is_not_text_is_skipped_and_counted(
        tmp_path: Path) -> None:
    """A NULL or a number where the entry's JSON text belongs was a TypeError ('NoneType'
    has no len()) in `library list`, `profiles` and `library export`."""
    from kvtune.library.store import Library

    db = _library(tmp_path, ("a" * 32, None), ("b" * 32, 5), ("c" * 32, 5.5))
    read = Library(f"sqlite:///{db}", create=False).read()
    assert not read.entries
    assert [rid for rid, _ in read.invalid] == ["a" * 32, "b" * 32, "c" * 32]
    assert all("not JSON text" in why for _, why in read.invalid), read.invalid
    for args in (("library", "list"), ("profiles",),
                 ("library", "export", "-o", str(tmp_path / "out.json"))):
        r = cli(*args, "--library", str(db), cwd=tmp_path)
        out = r.stdout + r.stderr
        assert "Traceback" not in out, f"{args}: {out[-3000:]}"
        assert r.returncode in (0, 1), f"{args}: exit {r.returncode}: {out[-3000:]}"
        said = " ".join(r.stderr.split())
        assert "3 entries do not validate and are ignored (first, aaaaaaaa" in said, \
            f"{args}: {said}"
