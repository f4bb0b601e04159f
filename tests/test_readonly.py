"""Reading never writes (issue 41): every command that only reads — show, report (but for
its -o page), verify, predict, check, library list/show, profiles, workload describe —
run in an empty directory creates no file and no directory there, nor beside the paths it
was given (a study file, a results database, a library); a path that does not exist is
said to be missing (exit 2, the message naming it), never created, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.cli import cli
from support.studies import make_study

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "synthetic.yaml"
WITH_LOAD = REPO / "examples" / "memcached.yaml"  # a workload, to key the library by
MODEL = REPO / "examples" / "workloads"


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root`: a file's (size, mtime), a directory's (-1, 0)."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = (-1, 0)
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), root)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kvtune ARGS` in `cwd`, with the library at its default place (XDG_DATA_HOME, under
    `cwd`'s parent, not there) unless --library says otherwise."""
    env = {"KVTUNE_LIBRARY": None, "XDG_DATA_HOME": str(cwd.parent / "xdg"),
           "COLUMNS": "100"}
    r = cli(*args, cwd=cwd, env=env)  # type: ignore[arg-type]
    assert "Traceback" not in r.stdout + r.stderr, (args, r.stderr)
    return r


def model_file() -> Path:
    found = sorted(MODEL.glob("*.json"))
    assert found, MODEL
    return found[0]


def reads(study: str, storage: list[str]) -> list[list[str]]:
    """The read-only command lines of `study` (a study file or a name, with `storage`)."""
    return [
        ["show", study, *storage], ["show", study, *storage, "--json"],
        ["verify", study, *storage, "--host-only"],
    ]


LIBRARY_READS = [["library", "list"], ["library", "list", "--json"],
                 ["library", "show", "0123abcd"], ["profiles"], ["profiles", "--json"]]


def test_reading_commands_create_nothing_in_an_empty_directory(empty: Path) -> None:
    before_repo = tree(EXAMPLE.parent)
    assert not (EXAMPLE.parent / "results").exists()
    lines = [*reads(str(EXAMPLE), []), ["predict", str(WITH_LOAD)],
             ["check", str(EXAMPLE)], ["check", str(EXAMPLE), "--json"],
             ["report", str(EXAMPLE), "-o", "r.html"], *LIBRARY_READS,
             ["workload", "describe", str(model_file())],
             ["workload", "describe", str(model_file()), "--json"]]
    for args in lines:
        r = run(empty, *args)
        assert r.returncode in (0, 1, 2), (args, r.returncode, r.stderr)
        if r.returncode == 2:  # the study's results are not here: said, not created
            assert "does not exist" in r.stderr, (args, r.stderr)
        assert tree(empty) == {}, (args, tree(empty))
        assert not (empty.parent / "xdg").exists(), args
    assert tree(EXAMPLE.parent) == before_repo  # nothing beside the study file either
    # The known case: a study file's results database from another directory.
    r = run(empty, "show", str(EXAMPLE))
    assert r.returncode == 2 and "results/synthetic-demo.db does not exist" in r.stderr
    assert "studies there" not in r.stdout + r.stderr
    r = run(empty, "library", "list")
    assert r.returncode == 0 and "is empty" in " ".join(r.stdout.split()), r.stdout


MISTYPED = [
    ["show", "nosuch.yaml"], ["show", "nosuch"], ["show", "s", "--storage", "sqlite:///no.db"],
    ["show", "s", "--storage", "sqlite:///sub/dir/no.db"],
    ["report", "nosuch.yaml", "-o", "r.html"], ["report", "nosuch", "-o", "out/r.html"],
    ["report", "s", "--storage", "sqlite:///no.db", "-o", "r.html"],
    ["verify", "nosuch.yaml"], ["verify", "nosuch"],
    ["verify", "s", "--storage", "sqlite:///no.db", "--host-only"],
    ["export", "nosuch", "-o", "exp"], ["export", "s", "--storage", "sqlite:///no.db"],
    ["predict", "nosuch.yaml"], ["predict", "nosuch"],
    ["predict", "s", "--storage", "sqlite:///no.db"],
    ["check", "nosuch.yaml"], ["check", "nosuch.yaml", "--json"],
    ["library", "list", "--library", "no.db"], ["library", "list", "--library", "sub/no.db"],
    ["library", "list", "--library", "sqlite:///no.db"],
    ["library", "show", "0123abcd", "--library", "no.db"],
    ["library", "forget", "0123abcd", "--library", "no.db"],
    ["library", "export", "-o", "out.json", "--library", "no.db"],
    ["profiles", "--library", "no.db"], ["profiles", "export", "c1", "--library", "no.db"],
    ["profiles", "--library", "no.db", "export", "c1", "-o", "prof"],
    ["predict", str(EXAMPLE), "--library", "no.db"],
    ["workload", "describe", "nosuch.json"],
]


@pytest.mark.parametrize("args", MISTYPED, ids=[" ".join(a) for a in MISTYPED])
def test_a_mistyped_path_is_said_to_be_missing(empty: Path, args: list[str]) -> None:
    r = run(empty, *args)
    said = r.stderr if args[0] != "check" else r.stdout  # check's plan says its problems
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "does not exist" in said, said
    named = [a for a in args if "no" in a.split("/")[-1] and a not in ("--host-only",)]
    assert any(n.removeprefix("sqlite:///") in said for n in named), (named, said)
    assert tree(empty) == {}, tree(empty)
    assert not (empty.parent / "xdg").exists()


def test_reading_stored_results_leaves_them_as_they_were(tmp_path: Path,
                                                         empty: Path) -> None:
    data = tmp_path / "data"
    (data / "results").mkdir(parents=True)
    url = make_study(data, "syn", "synthetic", {"synthetic.x": 5.0}, {"synthetic.x": 7.0},
                     confirmed=True)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "library.db").write_bytes(b"")  # an empty file: no library table, no entry
    before, before_lib = tree(data), tree(lib)
    pages = tmp_path / "pages"
    pages.mkdir()
    lines = [*reads("syn", ["--storage", url]),
             ["report", "syn", "--storage", url, "-o", str(pages / "r.html")],
             ["predict", "syn", "--storage", url, "--library", str(lib / "library.db")],
             ["library", "list", "--library", str(lib / "library.db")],
             ["profiles", "--library", str(lib / "library.db")]]
    for args in lines:
        r = run(empty, *args)
        assert r.returncode in (0, 1), (args, r.stdout, r.stderr)
        assert tree(empty) == {}, (args, tree(empty))
        assert tree(data) == before, args
        assert tree(lib) == before_lib, args
    assert [p.name for p in pages.iterdir()] == ["r.html"]  # report's -o, and only it
    shown = json.loads(run(empty, "show", "syn", "--storage", url, "--json").stdout)
    assert isinstance(shown, dict) and shown, shown


def test_an_empty_database_is_not_given_a_schema(tmp_path: Path, empty: Path) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    for args in (["show", "s"], ["report", "s", "-o", "r.html"], ["verify", "s"],
                 ["export", "s", "-o", "exp"], ["predict", "s"]):
        r = run(empty, *args, "--storage", f"sqlite:///{db}")
        assert r.returncode == 2 and "holds no results" in r.stderr, (args, r.stderr)
        assert db.stat().st_size == 0 and tree(empty) == {}, args


def test_an_empty_postgresql_database_is_not_given_a_schema(pg_url: str,
                                                            empty: Path) -> None:
    import sqlalchemy as sa

    for args in (["show", "s"], ["report", "s", "-o", "r.html"], ["verify", "s"],
                 ["predict", "s"]):
        r = run(empty, *args, "--storage", pg_url)
        assert r.returncode == 2 and "holds no results" in r.stderr, (args, r.stderr)
        assert tree(empty) == {}, args
    engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
