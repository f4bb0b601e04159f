"""The library of past studies (issue 33): the workload distance, bounded entries, the
store (SQLite; a corrupt file), neighbours and why entries are not used, categories and
profiles (exported through the real exporters), predictions, and the warm start end to
end through `kvtune tune` on the synthetic target's "workload" surface (whose optimum
moves with the workload): a second study of an alike workload starts from the first
one's answer and says so; an unlike one, `--cold` and a corrupt library start cold."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.cli import cli

from kvtune import __version__
from kvtune.library.entry import Entry, Host, Objective, Recommendation, parse
from kvtune.library.nearest import Context, incompatibility, neighbours
from kvtune.library.profiles import agreed, categories
from kvtune.library.store import Library, LibraryUnavailable, resolve
from kvtune.workload.features import ALIKE, distance, of_model, zipf_equivalent

REPO = Path(__file__).resolve().parents[1]


# ---- features and distance -----------------------------------------------------------------

def test_the_distance_is_the_documented_one() -> None:
    a = {"read_share": 0.9, "write_share": 0.1, "log10_value": 2.0}
    assert distance(a, a) == 0
    b = {**a, "read_share": 0.6}
    assert distance(a, b) == pytest.approx(1.5)  # 0.3 / 0.2
    assert distance(a, b) == distance(b, a)
    # values of 100 B and 1 KB are two scales apart: not alike
    assert distance(a, {**a, "log10_value": 3.0}) == pytest.approx(2.0)
    assert ALIKE < 2.0
    # a feature one workload lacks counts one scale
    assert distance(a, {**a, "log10_rate": 4.0}) == pytest.approx(1.0)
    c = {**a, "read_share": 0.8, "log10_value": 2.2}
    assert distance(a, c) == pytest.approx((0.5 ** 2 + 0.4 ** 2) ** 0.5)


def test_features_of_a_model_and_of_settings() -> None:
    f = of_model({"mix": "get:8,mget:1,set:1", "mget_size": 16, "value_size": "list:100:1,"
                  "900:1", "popularity": "zipf:0.99", "keys": 100000, "ttl": "list:0:1,60:3"},
                 rate=20000)
    assert f["read_share"] == pytest.approx(0.9) and f["mget_share"] == pytest.approx(0.1)
    assert f["log2_fanout"] == pytest.approx(4) and f["log10_value"] == pytest.approx(2.69897)
    assert f["zipf"] == pytest.approx(0.99) and f["ttl_share"] == pytest.approx(0.75)
    assert f["log10_keys"] == pytest.approx(5) and f["log10_rate"] == pytest.approx(4.30103)
    # Sizes kept per key: the mean over keys, not over requests.
    per_key = of_model({"mix": "get:1", "value_size": "list:8000:1", "key_buckets": [
        {"keys": 10, "value_size": "list:8000:1"}, {"keys": 990, "value_size": "100"}]})
    assert 10 ** per_key["log10_value"] == pytest.approx((10 * 8000 + 990 * 100) / 1000)


def test_the_zipf_equivalent_of_tables_and_hot_sets() -> None:
    assert zipf_equivalent("uniform", 1000) == 0
    assert zipf_equivalent("zipf:1.2", 1000) == 1.2
    # A hot set where 1% of keys take 50% of requests is steeper than one taking 20%.
    steep = zipf_equivalent("hotset:0.01:0.5", 100_000)
    flat = zipf_equivalent("hotset:0.01:0.2", 100_000)
    assert 0 < flat < steep
    # A table built from a Zipf 1.0 head comes back near 1.0.
    import numpy as np
    w = np.arange(1, 100_001, dtype=float) ** -1.0
    w /= w.sum()
    table = "table:" + ",".join(f"{b - a}:{w[a:b].sum():.6g}" for a, b in
                                [(0, 1000), (1000, 10000), (10000, 100000)])
    assert zipf_equivalent(table, 100_000) == pytest.approx(1.0, abs=0.05)


# ---- entries -------------------------------------------------------------------------------

def make_entry(study: str, features: dict[str, float], changes: dict[str, Any] | None,
               change: float | None = 0.1, *, target: str = "synthetic",
               version: str | None = None, cpus: int = 2, model: str = "cpu",
               kvtune: str = __version__, metric: str = "ops_per_sec",
               baseline: dict[str, Any] | None = None, noise: tuple[float, int] | None = None,
               ) -> Entry:
    data: dict[str, Any] = {
        "id": uuid.uuid4().hex, "created": time.time(), "kvtune_version": kvtune,
        "study": study, "target": target, "target_version": version,
        "host": Host(cpu_model=model, cpus=cpus).model_dump(),
        "objective": Objective(metric=metric, direction="maximize").model_dump(),
        "workload": features, "baseline": baseline or {},
        "recommendation": None if changes is None else Recommendation(
            changes=changes, change=change, ci=(change / 2, change * 1.5) if change else None,
            text="t").model_dump(),
    }
    if noise:
        data["noise"] = {"cov": noise[0], "n": noise[1]}
    return parse(data)


def test_an_entry_is_bounded_and_validated() -> None:
    good = make_entry("a", {"read_share": 0.9}, {"synthetic.x": 7.0}).as_json()
    assert parse(good).study == "a"
    for bad, says in [
        ({**good, "extra": 1}, "extra"),
        ({**good, "workload": {"read_share": float("nan")}}, "workload"),
        ({**good, "workload": {"cpu_burn": 1.0}}, "unknown workload feature"),
        ({**good, "id": "../../etc"}, "id"),
        ({**good, "knobs": ["k"] * 201}, "knobs"),
        ({**good, "study": "a b; rm -rf"}, "study"),
        ({**good, "recommendation": {"changes": {"x": {"nested": 1}}}}, "recommendation"),
        ({**good, "recommendation": {"changes": {"x": "y" * 300}}}, "recommendation"),
        ([], "object"),
    ]:
        with pytest.raises(ValueError, match=says):
            parse(bad)


# ---- the store -----------------------------------------------------------------------------

def test_the_store_keeps_reads_and_forgets(tmp_path: Path) -> None:
    lib = Library(f"sqlite:///{tmp_path / 'lib.db'}")
    a = make_entry("a", {"read_share": 0.9}, {"synthetic.x": 7.0})
    b = make_entry("b", {"read_share": 0.5}, None)
    assert lib.add([a, b]) == 2 and lib.add([a]) == 0  # an id is kept once
    read = lib.read()
    assert [e.study for e in read.entries] == ["a", "b"] and not read.invalid
    # A row that does not validate is skipped and counted, never used.
    with sqlite3.connect(tmp_path / "lib.db") as c:
        c.execute("insert into kvtune_library values (?, ?, ?, ?, ?, ?)",
                  ("f" * 32, time.time(), "synthetic", "ops_per_sec", "0.1.0",
                   '{"id": "oops"}'))
    read = lib.read()
    assert len(read.entries) == 2 and read.invalid[0][0] == "f" * 32
    assert lib.find(a.id[:8]) == [a.id]
    assert lib.forget(a.id) and [e.study for e in lib.read().entries] == ["b"]


def test_a_corrupt_library_is_unavailable_and_left_alone(tmp_path: Path) -> None:
    bad = tmp_path / "lib.db"
    bad.write_bytes(os.urandom(4096))
    before = bad.read_bytes()
    with pytest.raises(LibraryUnavailable, match="not a SQLite database"):
        Library(f"sqlite:///{bad}")
    assert bad.read_bytes() == before


def test_which_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KVTUNE_LIBRARY", "off")
    assert resolve() is None
    monkeypatch.setenv("KVTUNE_LIBRARY", str(tmp_path / "x.db"))
    assert resolve() == f"sqlite:///{tmp_path / 'x.db'}"
    monkeypatch.delenv("KVTUNE_LIBRARY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert resolve() == f"sqlite:///{tmp_path / 'data' / 'kvtune' / 'library.db'}"
    assert resolve(None, "postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert resolve("sqlite:///y.db", "postgresql+psycopg://u@h/db") == "sqlite:///y.db"


# ---- neighbours ----------------------------------------------------------------------------

CTX = Context(target="memcached", target_version="1.6.18", metric="ops_per_sec",
              direction="maximize", slo=None, cpu_model="cpu", cpus=2, server_cpus=None,
              kvtune_version=__version__, features={"read_share": 0.9, "log10_value": 2.0})


def test_entries_from_elsewhere_are_not_used_and_why() -> None:
    f = {"read_share": 0.9, "log10_value": 2.0}
    kw = {"target": "memcached", "version": "1.6.21"}
    cases = {
        "kvtune 9.0.0": make_entry("a", f, None, kvtune="9.0.0", **kw),
        "memcached 1.5.22": make_entry("b", f, None, target="memcached", version="1.5.22"),
        "another target": make_entry("c", f, None, target="redis", version="1.6.0"),
        "another objective": make_entry("d", f, None, metric="p99_us", **kw),
        "another CPU model": make_entry("e", f, None, model="other", **kw),
        "a host of 8 CPUs": make_entry("g", f, None, cpus=8, **kw),
    }
    for says, e in cases.items():
        why = incompatibility(e, CTX)
        assert why is not None and says in why, (says, why)
    # A patch release of the server is the same server.
    assert incompatibility(make_entry("h", f, None, **kw), CTX) is None


def test_neighbours_are_the_nearest_alike_ones() -> None:
    kw = {"target": "memcached", "version": "1.6.18"}
    near = make_entry("near", {"read_share": 0.86, "log10_value": 2.0}, None, **kw)
    nearer = make_entry("nearer", {"read_share": 0.9, "log10_value": 2.05}, None, **kw)
    far = make_entry("far", {"read_share": 0.2, "log10_value": 4.0}, None, **kw)
    found = neighbours([near, far, nearer], CTX)
    assert [e.study for e, _ in found.used] == ["nearer", "near"]
    found = neighbours([far], CTX)
    assert not found.used and found.nearest_beyond is not None
    assert found.nearest_beyond[1] > ALIKE
    assert not neighbours([near], CTX, exclude="near").used  # never itself


# ---- categories and profiles ---------------------------------------------------------------

def test_categories_group_alike_workloads_and_say_what_held() -> None:
    small = {"read_share": 0.95, "write_share": 0.05, "log10_value": 2.0, "zipf": 1.0}
    large = {"read_share": 0.6, "write_share": 0.4, "log10_value": 3.9, "zipf": 0.8}
    entries = [
        make_entry("s1", small, {"k.a": 4, "k.b": True}, 0.10),
        make_entry("s2", {**small, "read_share": 0.9}, {"k.a": 4}, 0.14),
        make_entry("s3", {**small, "zipf": 1.1}, {"k.a": 6}, 0.12),
        make_entry("l1", large, {"k.c": "x"}, 0.30),
        make_entry("l2", {**large, "log10_value": 4.0}, None),
    ]
    cats = categories(entries)
    assert [sorted(e.study for e in c.members) for c in cats] == [["s1", "s2", "s3"],
                                                                  ["l1", "l2"]]
    small_cat, large_cat = cats
    assert small_cat.name.startswith("read-heavy small values")
    assert large_cat.name.startswith("mixed read/write large values")
    knobs = {k.knob: k for k in small_cat.knobs()}
    assert knobs["k.a"].holds and knobs["k.a"].value == 4 and knobs["k.a"].confirmed_in == 3
    assert not knobs["k.b"].holds  # confirmed in 1 of 3: did not generalise
    assert small_cat.held() == {"k.a": 4}
    # 1 of 2 (the other's defaults held) is not most.
    assert large_cat.held() == {}
    assert sorted(small_cat.gains()) == [0.10, 0.12, 0.14]


def test_the_agreed_value() -> None:
    assert agreed([4, 4, 6]) == 4
    assert agreed([2, 4, 8]) == 4  # no majority: the median
    assert agreed(["a", "b", "a"]) == "a"
    assert agreed([True, False]) is True


# ---- end to end through `kvtune tune` ------------------------------------------------------

def kvtune(*args: str, env: dict[str, str], cwd: Path,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = cli(*args, cwd=cwd, env=env)
    # The consoles wrap long lines when piped: the words, one space apart.
    r.stdout, r.stderr = " ".join(r.stdout.split()), " ".join(r.stderr.split())
    return r


def study_file(d: Path, name: str, mix: str, value_size: int | str = 100,
               popularity: str = "zipf:0.99", trials: int = 8,
               extra: str = "") -> Path:
    p = d / f"{name}.yaml"
    p.write_text(f"""study: {name}
target:
  kind: synthetic
  surface: workload
  noise_cov: 0.03
load:
  mode: closed
  workload:
    mix: "{mix}"
    value_size: {value_size}
    popularity: "{popularity}"
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: ops_per_sec}}
budget: {{trials: {trials}}}
repetitions: 2
evaluation: {{noise_floor_runs: 5, confirm_rounds: 4, confirm_top: 2, drift_every: 0}}
seed: 3
storage: sqlite:///{d / (name + '.db')}
{extra}""")
    return p


def trials_of(db: Path, name: str) -> list[dict[str, Any]]:
    import optuna

    s = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    return [{"kind": t.user_attrs.get("kind"), "config": t.user_attrs.get("config"),
             "number": t.number} for t in s.trials]


def results_of(db: Path, name: str, key: str) -> list[Any]:
    with sqlite3.connect(db) as c:
        return [json.loads(r[0]) for r in c.execute(
            "select data from kvtune_results where study = ? and key = ? order by id",
            (name, key))]


@pytest.fixture
def lib_env(tmp_path: Path) -> dict[str, str]:
    return {"KVTUNE_LIBRARY": str(tmp_path / "library.db")}


def test_a_second_alike_study_starts_from_the_first_ones_answer(
        tmp_path: Path, lib_env: dict[str, str]) -> None:
    a = study_file(tmp_path, "first", "get:9,set:1")
    r = kvtune("tune", str(a), env=lib_env, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    assert "the library" in r.stderr and "holds no synthetic study yet" in r.stderr
    assert "Library: added as" in r.stderr
    lib = Library(f"sqlite:///{tmp_path / 'library.db'}")
    [first] = lib.read().entries
    assert first.recommendation is not None, first.verdict  # the defaults are far off
    assert first.noise is not None and first.noise.n == 5 and not first.warm_start

    b = study_file(tmp_path, "second", "get:0.88,set:0.12")
    r = kvtune("tune", str(b), env=lib_env, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    assert "Warm start from 1 past study" in r.stderr, r.stderr
    assert f"'first' ({first.short_id}), distance 0.14" in r.stderr  # 0.02/0.2 twice
    assert "first trials: 1 configuration(s)" in r.stderr or \
        "first trials: 2 configuration(s)" in r.stderr
    trials = trials_of(tmp_path / "second.db", "second")
    search = [t for t in trials if t["kind"] == "trial"]
    want = {**first.baseline, **first.recommendation.changes}
    assert search[0]["config"] == want  # its first trial is the first study's answer
    [warm] = results_of(tmp_path / "second.db", "second", "warm_start")[-1:]
    assert warm["mode"] == "warm" and warm["from"][0]["id"] == first.id
    # The noise floor's prior (5 repetitions) lets the baseline be measured 3 times.
    assert "measured 3 times instead of 5" in r.stderr
    base = [t for t in trials if t["kind"] == "baseline"]
    with sqlite3.connect(tmp_path / "second.db") as c:
        n = c.execute("select count(*) from kvtune_repetitions where study = 'second' and "
                      "kind = 'baseline'").fetchone()[0]
    assert len(base) == 1 and n in (3, 5)
    second = next(e for e in lib.read().entries if e.study == "second")
    assert [w.id for w in second.warm_start] == [first.id]

    # An unlike workload starts cold and says why; --cold says so too.
    c = study_file(tmp_path, "third", "get:1,set:9", value_size=8000,
                   popularity="uniform")
    r = kvtune("tune", str(c), "--no-ablation", env=lib_env, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    assert "unlike anything in the library" in r.stderr and "starts cold" in r.stderr
    d = study_file(tmp_path, "fourth", "get:9,set:1")
    r = kvtune("tune", str(d), "--cold", "--no-ablation", env=lib_env, cwd=tmp_path)
    assert "none: --cold; the study starts cold" in r.stderr
    assert results_of(tmp_path / "fourth.db", "fourth", "warm_start")[-1]["mode"] == "cold"

    # The commands read what the studies left.
    r = kvtune("library", "list", env=lib_env, cwd=tmp_path)
    assert r.returncode == 0 and all(n in r.stdout for n in ("first", "second", "third"))
    r = kvtune("library", "show", first.short_id, env=lib_env, cwd=tmp_path)
    assert r.returncode == 0 and "noise floor: CoV" in r.stdout
    r = kvtune("profiles", env=lib_env, cwd=tmp_path)
    assert r.returncode == 0 and "c1:" in r.stdout and "c2:" in r.stdout, r.stdout
    e = study_file(tmp_path, "fifth", "get:0.9,set:0.1")
    r = kvtune("predict", str(e), env=lib_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "PREDICTION" in r.stdout and "nothing measured" in r.stdout
    assert "synthetic.x=" in r.stdout
    r = kvtune("predict", str(c), env={"KVTUNE_LIBRARY": str(tmp_path / "empty.db")},
               cwd=tmp_path)  # a library that is not there: missing, not created
    assert r.returncode == 2 and "empty.db does not exist" in r.stderr, r.stderr
    assert not (tmp_path / "empty.db").exists()
    Library(f"sqlite:///{tmp_path / 'empty.db'}")  # an empty one: nothing near
    r = kvtune("predict", str(c), env={"KVTUNE_LIBRARY": str(tmp_path / "empty.db")},
               cwd=tmp_path)
    assert r.returncode == 1 and "no prediction" in r.stdout


def test_a_corrupt_library_never_stops_a_study(tmp_path: Path) -> None:
    bad = tmp_path / "library.db"
    bad.write_bytes(b"not a database" * 100)
    before = bad.read_bytes()
    a = study_file(tmp_path, "solo", "get:9,set:1", trials=3)
    r = kvtune("tune", str(a), "--no-ablation", env={"KVTUNE_LIBRARY": str(bad)},
               cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    assert "not a SQLite database" in r.stderr and "the study starts cold" in r.stderr
    assert "this study was not added" in r.stderr
    assert bad.read_bytes() == before
    r = kvtune("library", "list", env={"KVTUNE_LIBRARY": str(bad)}, cwd=tmp_path)
    assert r.returncode == 2 and "not a SQLite database" in r.stderr
    assert "Traceback" not in r.stderr


def test_import_export_forget_and_bad_imports(tmp_path: Path,
                                              lib_env: dict[str, str]) -> None:
    src = Library(f"sqlite:///{tmp_path / 'theirs.db'}")
    src.add([make_entry("x", {"read_share": 0.9}, {"synthetic.x": 7.0}),
             make_entry("y", {"read_share": 0.5}, None)])
    dump = tmp_path / "dump.json"
    r = kvtune("library", "export", str(dump), "--library", str(tmp_path / "theirs.db"),
               env=lib_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = kvtune("library", "import", str(dump), env=lib_env, cwd=tmp_path)
    assert r.returncode == 0 and "imported 2 entries" in r.stdout, r.stderr
    r = kvtune("library", "import", str(dump), env=lib_env, cwd=tmp_path)
    assert "imported 0 entries" in r.stdout
    mine = Library(f"sqlite:///{tmp_path / 'library.db'}")
    assert sorted(e.study for e in mine.read().entries) == ["x", "y"]
    # One bad entry refuses the whole file; nothing is written.
    doc = json.loads(dump.read_text())
    doc["entries"].append({**doc["entries"][0], "id": "a" * 32, "run": "rm -rf /"})
    doc["entries"].append({**doc["entries"][0], "id": "b" * 32})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = kvtune("library", "import", str(bad), env=lib_env, cwd=tmp_path)
    assert r.returncode == 2 and "nothing was imported" in r.stderr and "entries[2]" in \
        r.stderr, r.stderr
    assert len(mine.read().entries) == 2
    for text in ("[1, 2", '{"schema": "other", "entries": []}', "\x00\xff"):
        bad.write_text(text)
        r = kvtune("library", "import", str(bad), env=lib_env, cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    r = kvtune("library", "import", "/dev/zero", env=lib_env, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    x = next(e for e in mine.read().entries if e.study == "x")
    r = kvtune("library", "forget", x.short_id, env=lib_env, cwd=tmp_path)
    assert r.returncode == 0 and [e.study for e in mine.read().entries] == ["y"]
    r = kvtune("library", "show", "0123abcd", env=lib_env, cwd=tmp_path)
    assert r.returncode == 1 and "no library entry" in r.stderr


@pytest.mark.integration  # starts tuned-adm
def test_a_profile_exports_as_a_tuned_profile_and_a_server_drop_in(
        tmp_path: Path, lib_env: dict[str, str]) -> None:
    base = {"memcached.threads": 4, "kernel.numa_balancing": 1}
    f = {"read_share": 0.95, "write_share": 0.05, "log10_value": 2.0, "zipf": 1.0}
    kw = {"target": "memcached", "version": "1.6.18", "baseline": base}
    lib = Library(f"sqlite:///{tmp_path / 'library.db'}")
    lib.add([make_entry("m1", f, {"memcached.threads": 2, "kernel.numa_balancing": 0},
                        0.12, **kw),
             make_entry("m2", {**f, "read_share": 0.9}, {"memcached.threads": 2}, 0.08, **kw),
             make_entry("m3", {**f, "zipf": 0.9}, {"memcached.threads": 2,
                                                   "kernel.numa_balancing": 0}, 0.1, **kw)])
    r = kvtune("profiles", env=lib_env, cwd=tmp_path)
    assert "holds: memcached.threads = 2 (confirmed in 3 of 3" in r.stdout, r.stdout
    assert "holds: kernel.numa_balancing = 0 (confirmed in 2 of 3" in r.stdout
    out = tmp_path / "prof"
    r = kvtune("profiles", "export", "c1", "-o", str(out), env=lib_env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    tuned = [p for p in files if p.endswith("tuned.conf") and not p.startswith("rollback")]
    assert tuned, files
    text = (out / tuned[0]).read_text()
    assert "kernel.numa_balancing" in text and "profile c1 of the kvtune library" in text
    assert any("memcached" in p and not p.startswith("rollback") for p in files), files
    r = kvtune("profiles", "export", "c9", "-o", str(out), env=lib_env, cwd=tmp_path)
    assert r.returncode == 2 and "no category 'c9'" in r.stderr


def test_a_profile_of_knobs_this_kvtune_does_not_know_is_refused(
        tmp_path: Path, lib_env: dict[str, str]) -> None:
    """A library is input: a category whose held changes name knobs outside the catalog
    exits 2 naming them, and writes nothing (it once ended with exit 1, "no export
    format")."""
    f = {"read_share": 0.95, "write_share": 0.05, "log10_value": 2.0, "zipf": 1.0}
    kw = {"target": "memcached", "version": "1.6.18", "baseline": {"nosuch.knob": 1}}
    lib = Library(f"sqlite:///{tmp_path / 'library.db'}")
    lib.add([make_entry(f"u{i}", {**f, "zipf": 1.0 - i / 20}, {"nosuch.knob": 2}, 0.1, **kw)
             for i in range(3)])
    out = tmp_path / "prof"
    r = cli("profiles", "export", "c1", "-o", str(out), env=lib_env, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "nosuch.knob: not a knob of the catalog" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


# The synthetic target's capacity (kvload --simulate: no clock), no host knob: beside the
# unit tier (docs/testing.md).
@pytest.mark.parallel
def test_a_capacity_study_opens_its_searches_at_a_neighbours_knee(
        tmp_path: Path, lib_env: dict[str, str], kvload_bin: str) -> None:
    extra = """objective: {metric: capacity, slo: "p99_us <= 500"}
"""
    def cap_study(name: str, mix: str) -> Path:
        p = study_file(tmp_path, name, mix, trials=1)
        text = p.read_text().replace("objective: {metric: ops_per_sec}\n", extra)
        text = text.replace("mode: closed", "mode: open").replace(
            "repetitions: 2", "repetitions: 1").replace(
            "noise_floor_runs: 5, confirm_rounds: 4, confirm_top: 2",
            "noise_floor_runs: 2, confirm_rounds: 4, confirm_top: 1")
        p.write_text(text)
        return p

    r = kvtune("tune", str(cap_study("cap1", "get:9,set:1")), "--no-ablation",
               env=lib_env, cwd=tmp_path, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    [first] = Library(f"sqlite:///{tmp_path / 'library.db'}").read().entries
    assert first.capacity is not None and first.capacity.curve, first
    knee = first.capacity.knee
    r = kvtune("tune", str(cap_study("cap2", "get:0.88,set:0.12")), "--no-ablation",
               env=lib_env, cwd=tmp_path, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    assert f"the searches start at the neighbour's knee, {knee:,.0f} req/s" in r.stderr
    with sqlite3.connect(tmp_path / "cap2.db") as c:
        raws = [json.loads(x[0]) for x in c.execute(
            "select raw from kvtune_repetitions where study = 'cap2' and kind = 'baseline'")]
    assert raws
    for raw in raws:
        doc = raw["load"]
        assert doc["estimate"]["closed_loop_rate"] is None  # no burst
        assert doc["estimate"]["first_rate"] == pytest.approx(knee, rel=0.01)
        assert doc["range"] == pytest.approx([knee / 4, knee * 4], rel=0.01)


def test_a_postgresql_storage_holds_the_fleets_library(pg_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With a PostgreSQL study storage the library is that database's (a fleet shares
    it): entries added by one process are read by another."""
    monkeypatch.delenv("KVTUNE_LIBRARY")
    assert resolve(None, pg_url) == pg_url
    one = Library(pg_url)
    a = make_entry("pa", {"read_share": 0.9}, {"synthetic.x": 7.0})
    assert one.add([a]) == 1
    other = Library(pg_url)
    [got] = other.read(target="synthetic").entries
    assert got == a and other.find(a.id[:6]) == [a.id]
    assert other.forget(a.id) and not one.read().entries


def test_a_prior_quieter_than_this_host_is_dropped(tmp_path: Path,
                                                   lib_env: dict[str, str]) -> None:
    """A neighbour whose noise floor was far quieter than this host's: the baseline is
    measured 3 times, found noisier than twice the prior, and measured to the full 5."""
    from kvtune.host.facts import collect

    facts = collect()
    a = study_file(tmp_path, "noisy", "get:9,set:1", trials=2)
    a.write_text(a.read_text().replace("noise_cov: 0.03", "noise_cov: 0.3"))
    from kvtune.workload.features import of_model

    feats = of_model({"mix": "get:9,set:1", "value_size": 100, "popularity": "zipf:0.99",
                      "keys": 10000})
    quiet = make_entry("quiet", feats, {"synthetic.x": 6.5}, model=facts.cpu_model,
                       cpus=facts.cpus, noise=(0.0001, 10))
    Library(f"sqlite:///{tmp_path / 'library.db'}").add([quiet])
    r = kvtune("tune", str(a), "--no-ablation", env=lib_env, cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    assert "measured 3 times instead of 5" in r.stderr
    assert "this host is noisier than the library's; measured 5 times" in r.stderr, r.stderr
    with sqlite3.connect(tmp_path / "noisy.db") as c:
        n = c.execute("select count(*) from kvtune_repetitions where study = 'noisy' and "
                      "kind = 'baseline'").fetchone()[0]
    assert n == 5
    warm = results_of(tmp_path / "noisy.db", "noisy", "warm_start")[-1]
    assert warm["prior_rejected"]["cov"] > 0.0002 and "noise_pooled" not in warm


def test_a_capacity_entry_keeps_the_figures_its_change_is_the_ratio_of() -> None:
    """`library show`'s knees and `library list`'s change, from one confirmation: the
    baseline's capacity pooled over its confirmation searches with that pooled interval,
    the recommendation's as that times the change (not the rounds' medians, nor one
    search's interval beside them)."""
    from types import SimpleNamespace

    from kvtune.documents import build
    from kvtune.library.record import _capacity
    from kvtune.metrics import Direction
    from kvtune.spec import EvaluationSpec
    from kvtune.stats import pool_intervals
    from kvtune.store import config_key
    from kvtune.study.confirm import Arm, verdict

    base_knees = [(50_000, 48_000, 52_000), (60_000, 57_000, 63_000),
                  (57_000, 50_000, 64_000), (56_000, 55_000, 57_000)]
    cand_knees = [(60_000, 58_000, 62_000), (70_000, 68_000, 72_000),
                  (66_000, 62_000, 70_000), (66_000, 65_000, 67_000)]

    def arm(name: str, cfg: dict[str, Any], knees: list[tuple[int, int, int]]) -> Arm:
        a = Arm(name, cfg)
        for r, (v, lo, hi) in enumerate(knees):
            a.metrics.append({"capacity": v, "capacity_ci_low": lo, "capacity_ci_high": hi})
            a.rounds.append(r)
            a.samples.append(v)
        return a

    base_cfg, cand_cfg = {"memcached.threads": 4}, {"memcached.threads": 2}
    conf = build("confirmation", verdict(
        arm("baseline", base_cfg, base_knees),
        [({"trial": 1, "config": cand_cfg, "search_value": 1.0},
          arm("trial 1", cand_cfg, cand_knees))],
        "capacity", Direction.MAXIMIZE, EvaluationSpec(confirm_rounds=4), 0, (),
        "p99_us <= 1000"))
    assert conf.recommended is not None  # +17%, every round
    reps = [{"kind": "confirm", "config_key": config_key(cfg), "status": "ok",
             "metrics": {"capacity": v}, "raw": {"load": {"ci": [lo, hi]}}}
            for cfg, knees in ((base_cfg, base_knees), (cand_cfg, cand_knees))
            for v, lo, hi in knees]

    class Store:
        def repetitions(self, study: str, kind: str | None = None) -> list[dict[str, Any]]:
            return [r for r in reps if kind is None or r["kind"] == kind]

    run = SimpleNamespace(spec=SimpleNamespace(study="s", capacity=SimpleNamespace(
        slo="p99_us <= 1000")), store=Store(), baseline_eval=None)
    cap = _capacity(run, conf)  # type: ignore[arg-type]
    assert cap is not None and cap.recommended_knee is not None
    ch = conf.recommended.changes["capacity"]
    assert cap.knee == ch.baseline and cap.recommended_knee == pytest.approx(ch.candidate)
    assert cap.recommended_knee / cap.knee - 1 == pytest.approx(ch.change)
    pooled = pool_intervals([float(v) for v, _, _ in base_knees],
                            [(float(lo), float(hi)) for _, lo, hi in base_knees])
    assert cap.ci == pytest.approx(pooled.ci) and cap.ci[0] <= cap.knee <= cap.ci[1]
