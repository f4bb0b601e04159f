"""A study file is untrusted input (issue 10): every file of tests/bad-inputs/ (one per
class of mistake or attack) and a few generated ones get exit 2 with a one-line message
naming the key, fast, with no traceback, no server or kvload started, no file created and
no host value changed (the autouse fixture in conftest.py checks the catalog's host knobs).

A corpus file's header says what to expect:
    # expect: TEXT      the message must contain TEXT (the key path, usually)
    # also: run         run `kvtune run FILE` too (besides `kvtune tune FILE`)
    # flags: ...        extra command-line flags
    # absent: TEXT      the output must not contain TEXT (a password)

Issue 29 adds the other commands and the files they read: each file of
tests/bad-inputs/commands/ is a case whose header gives the whole command line
    # argv: ...         kvtune's arguments ({cwd}: the sandbox's directory), or kvload's with
    # program: kvload   (the checkout's build, run directly)
    # exit: N           the exit code (2 unless said)
    # setup: NAME ...   fixtures made in the sandbox first (SETUPS below)
    # env: K=V          environment ({cwd} and relative paths made absolute)
    # path: DIR         prepended to PATH (relative to the sandbox's directory)
    # unopened: PATH    a file kvtune must never open (an include's target, a secret)
and every case, study file or command, also runs under an audit hook (sys.addaudithook)
that records every program kvtune starts and every watched file it opens, and the whole
sandbox is compared before and after: nothing started but a version probe of a trusted
binary, nothing watched opened, nothing written, changed or left behind.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import forkserver

# Every case is a kvtune (or kvload) process: the integration tier. Parallel-safe: every
# case is refused before anything starts (nothing measured, no host knob written), and what
# a case is judged by is its own: the wrapped binaries and the audit log of its sandbox, the
# sandbox's files, its own journal, run directory and temporary directory (below), and the
# /tmp names only the corpus points at.
pytestmark = [pytest.mark.integration, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "bad-inputs"
SRC = REPO / "src"
# A hang guard only: what proves that nothing ran is the wrapped binaries' record (no server,
# no kvload started; `started` below), not the wall time, which a busy host stretches (a
# 5 s limit failed at 5.2 s while other jobs loaded both CPUs).
LIMIT_S = 60.0
WRAPPED = ("memcached", "redis-server", "kvload", "taskset")
# kvtune's own read-only probe of debugfs (its Python, a fixed script, in a private mount
# namespace), run when the catalog is first imported to learn this kernel's scheduler
# features: the one program a refused input may see start besides a version probe.
DEBUGFS_PROBE = "import errno, json, os, stat, sys"
VERSION_PROBES = ("-V", "--version")


@dataclass
class Case:
    name: str
    path: Path  # relative to the sandbox's cwd
    expect: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=lambda: ["tune"])
    argv: list[str] | None = None  # the whole command line (tests/bad-inputs/commands/)
    program: str = "kvtune"
    exit: int = 2
    setup: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    path_dirs: list[str] = field(default_factory=list)
    unopened: list[str] = field(default_factory=list)


def _header(path: Path) -> Case:
    rel = path.relative_to(CORPUS)
    case = Case(path.stem if rel.parent == Path(".") else f"{rel.parent}-{path.stem}",
                Path("bad-inputs") / rel)
    for raw in path.read_bytes().splitlines():
        line = raw.decode("utf-8", errors="replace")
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(":")
        value = value.strip()
        if key == "expect":
            case.expect.append(value)
        elif key == "absent":
            case.absent.append(value)
        elif key == "flags":
            case.flags += value.split()
        elif key == "also":
            case.commands += value.split()
        elif key == "argv":
            case.argv, case.commands = shlex.split(value), ["argv"]
        elif key == "program":
            case.program = value
        elif key == "exit":
            case.exit = int(value)
        elif key == "setup":
            case.setup += value.split()
        elif key == "env":
            k, _, v = value.partition("=")
            case.env[k] = v
        elif key == "path":
            case.path_dirs.append(value)
        elif key == "unopened":
            case.unopened.append(value)
    assert case.expect, f"{path.name} has no '# expect:' header"
    assert all(s in SETUPS for s in case.setup), case.setup
    return case


def corpus() -> list[Case]:
    return [_header(p) for p in [*sorted(CORPUS.glob("*.yaml")),
                                 *sorted((CORPUS / "commands").glob("*.txt"))]]


def _generated(cwd: Path) -> list[Case]:
    """Files too big (or too odd) to commit: made in the sandbox."""
    gen = cwd / "generated"
    gen.mkdir()
    (gen / "huge.yaml").write_text("study: bad\n# " + "x" * (2 << 20) + "\n")
    keys = "".join(f"k{i}: {i}\n" for i in range(70_000))  # ~0.9 MiB, 140,000 nodes
    (gen / "many-keys.yaml").write_text("study: bad\n" + keys)
    (gen / "long-line.yaml").write_text("study: " + "a" * 1_000_000 + "\n")
    os.mkfifo(gen / "fifo.yaml")
    (gen / "dir.yaml").mkdir()
    return [
        Case("generated-huge", Path("generated/huge.yaml"), ["at most 1024 KiB"]),
        Case("generated-many-keys", Path("generated/many-keys.yaml"), ["YAML nodes"]),
        Case("generated-long-line", Path("generated/long-line.yaml"), ["study"]),
        Case("generated-fifo", Path("generated/fifo.yaml"), ["not a regular file"]),
        Case("generated-directory", Path("generated/dir.yaml"), ["is a directory"]),
    ]


@dataclass
class Outcome:
    rc: int
    out: str
    seconds: float
    marker: list[str]
    audit: list[str] = field(default_factory=list)


def _wrappers(bindir: Path, marker: Path) -> dict[str, str]:
    """Scripts named like the real binaries that record every call, then run the real one."""
    bindir.mkdir()
    real = {}
    for name in WRAPPED:
        found = shutil.which(name) or (str(REPO / "kvload/target/release/kvload")
                                       if name == "kvload" else None)
        if found is None:
            continue
        real[name] = found
        script = bindir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{marker}"\nexec "{found}" "$@"\n')
        script.chmod(0o755)
    return real


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# A file's content hash by its identity and times (device, inode, size, mtime, ctime): the
# sandboxes' corpus files are hard links to one copy (`outcomes`), hashed once instead of
# twice per case. Only a file whose times are a second old is remembered: any later write,
# chmod or link moves its mtime or ctime past the remembered key, so a change is never read
# from here.
_HASHES: dict[tuple[int, ...], str] = {}


def _digest(p: Path, st: os.stat_result) -> str:
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key in _HASHES:
        return _HASHES[key]
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    again = p.lstat()
    if (again.st_dev, again.st_ino, again.st_size, again.st_mtime_ns, again.st_ctime_ns) == key \
            and time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > 1_000_000_000:
        _HASHES[key] = digest
    return digest


def _snapshot(root: Path, skip: set[str]) -> dict[str, str]:
    """Every entry under `root` (links not followed) with what it is: a file's content hash
    and mode, a link's target, a directory's mode. What a case may not change."""
    out = {}
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        if rel in skip:
            continue
        st = p.lstat()
        if p.is_symlink():
            out[rel] = f"link {os.readlink(p)}"
        elif p.is_file():
            out[rel] = f"file {st.st_mode:o} {_digest(p, st)}"
        else:
            out[rel] = f"dir {st.st_mode:o}"
    return out


def _tmp_entries() -> set[str]:
    # What a bad input could make appear in /tmp: the corpus's paths (all /tmp/kvtune-bad*)
    # and what a server pointed at /tmp writes (Redis's dump and append-only files).
    # kvtune's own temporary files go to the case's TMPDIR, inside its sandbox (compared
    # there). Other processes sharing the host (other tools' scratch files, the tests that
    # run beside this module, whose temporary directories are /tmp/kvtune-*) are not ours
    # to judge.
    return {p.name for p in Path("/tmp").iterdir()
            if p.name.startswith(("kvtune-bad", "dump.rdb", "appendonly", "memcached"))}


# kvtune under an audit hook (PEP 578): every program it starts and every watched file it
# opens is written to $KVTUNE_TEST_AUDIT, through a descriptor opened before the hook.
AUDIT_BOOT = r"""
import os, sys
if sys.path and sys.path[0] == "":  # as the installed `kvtune` runs: no cwd on sys.path
    del sys.path[0]
_log = os.open(os.environ["KVTUNE_TEST_AUDIT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
_watch = frozenset(p for p in os.environ.get("KVTUNE_TEST_UNOPENED", "").split(os.pathsep) if p)
_STARTS = {"subprocess.Popen": 1, "os.exec": 1, "os.posix_spawn": 1, "os.spawn": 2,
           "os.system": 0}
def _hook(event, args):
    try:
        if event == "open" and _watch and isinstance(args[0], (str, bytes)):
            p = os.path.abspath(os.fsdecode(args[0]))
            if p in _watch:
                os.write(_log, ("open " + p + "\n").encode())
        elif event in _STARTS:
            argv = args[_STARTS[event]]
            words = [os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple)) \
                else [os.fsdecode(argv)]
            line = " ".join(w.replace("\n", "\\n") for w in words)
            os.write(_log, ("exec " + line[:8000] + "\n").encode())
    except Exception:
        pass
sys.addaudithook(_hook)
sys.argv[0] = "kvtune"
import tempfile
tempfile.tempdir = None  # a forked child reads its own TMPDIR, not the fork server's
import runpy
runpy.run_module("kvtune", run_name="__main__", alter_sys=True)
"""


def _untrusted(path: Path, banner: str) -> None:
    """A program another user owns and anyone may change: kvtune must never run it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho \"untrusted $0 $*\" >> {path.parent / 'ran.log'}\n"
                    f"echo '{banner}'\n")
    path.chmod(0o777)
    os.chown(path, 65534, 65534)
    os.chown(path.parent, 65534, 65534)


def _setup_untrusted_servers(cwd: Path, stores: Path) -> None:
    _untrusted(cwd / "evil" / "redis-server", "Redis server v=7.0.15 sha=0")
    _untrusted(cwd / "evil" / "memcached", "memcached 1.6.18")


def _setup_untrusted_kvload(cwd: Path, stores: Path) -> None:
    _untrusted(cwd / "evil" / "kvload", "kvload 0.1.0")


def _setup_store(cwd: Path, stores: Path) -> None:
    (cwd / "results").mkdir(exist_ok=True)
    for db in stores.glob("*.db"):
        shutil.copy(db, cwd / "results" / db.name)


def _setup_planted_links(cwd: Path, stores: Path) -> None:
    """An export directory with a link planted where kvtune writes, and the files it
    points at (which must stay as they are)."""
    (cwd / "victim").mkdir()
    (cwd / "victim" / "memcached.conf").write_text("the victim's file\n")
    (cwd / "out" / "memcached").mkdir(parents=True)
    (cwd / "out" / "memcached" / "memcached.conf").symlink_to(cwd / "victim" /
                                                              "memcached.conf")
    (cwd / "out2").mkdir()
    (cwd / "out2" / "memcached").symlink_to(cwd / "victim")


def _setup_trace_links(cwd: Path, stores: Path) -> None:
    (cwd / "sub").mkdir()
    (cwd / "trace-link.csv").symlink_to(cwd / "bad-inputs" / "files" / "small-trace.csv")


def _setup_zstd_bomb(cwd: Path, stores: Path) -> None:
    """81 MB of trace rows in 7 KB of zstd. The rows are well-formed with a 2,000-byte key:
    the ratio is judged once 16 MiB are decompressed (kvtune.workload.traces.RATIO_AFTER),
    which is 8,000 such rows to read first (1.5 s) instead of 620,000 short ones (15 s)."""
    import zstandard

    key = "k" * 2000
    row = f"1600000000,{key},{len(key)},100,1,get,0\n".encode()
    with open(cwd / "bomb.csv.zst", "wb") as f, \
            zstandard.ZstdCompressor(level=19).stream_writer(f) as w:
        chunk = row * 1000
        for _ in range(40):
            w.write(chunk)


def _setup_hard_links(cwd: Path, stores: Path) -> None:
    """A redis.conf including eight hard links to one 1 MiB file (8 MiB read as one)."""
    d = cwd / "links"
    d.mkdir()
    (d / "big.conf").write_text(("# " + "x" * 1020 + "\n") * 1023)
    for i in range(8):
        os.link(d / "big.conf", d / f"big{i}.conf")
    (d / "redis.conf").write_text("".join(f"include big{i}.conf\n" for i in range(8)))


def _setup_planted_modules(cwd: Path, stores: Path) -> None:
    """Modules named like those kvtune's own Python children import (the debugfs probe,
    the scheduler shim), and a `kvtune/` package, in the working directory: importing any
    of them leaves a file behind (the sandbox must stay as it was)."""
    body = ("import os\nopen(os.path.join(os.path.dirname(os.path.abspath(__file__)), "
            "'planted-ran-' + __name__), 'w').close()\n")
    for name in ("json", "argparse", "runpy", "ctypes", "platform"):
        (cwd / f"{name}.py").write_text(body)
    (cwd / "kvtune" / "host").mkdir(parents=True)
    for rel in ("__init__.py", "host/__init__.py", "host/sched.py", "__main__.py"):
        (cwd / "kvtune" / rel).write_text(body)


def _setup_env_s_server(cwd: Path, stores: Path) -> None:
    """A root-owned `memcached` script whose interpreter is env with options of its own
    (`-S -C DIR ./memcached`: env would change directory and run another user's file)."""
    evil = cwd / "evil"
    _untrusted(evil / "memcached", "memcached 1.6.18")
    d = cwd / "envs"
    d.mkdir(mode=0o755)
    (d / "memcached").write_text(f"#!/usr/bin/env -S -C {evil} ./memcached\n")
    (d / "memcached").chmod(0o755)


def _setup_fifo_inputs(cwd: Path, stores: Path) -> None:
    """FIFOs where kvtune reads an input (a model, a trace, a library file, a server's
    configuration): opening one would wait for a writer; kvtune must not open it."""
    for rel in ("fifo.json", "fifo.csv", "bad-inputs/fifo.conf"):
        os.mkfifo(cwd / rel)


def _tamper(db: Path, attr: str | None = None, value: object = None,
            result: tuple[str, object] | None = None) -> None:
    """Change what a results database holds behind kvtune's back: a study's user
    attribute (Optuna's table) or the latest of one of kvtune's results."""
    import json
    import sqlite3

    con = sqlite3.connect(db)
    try:
        if attr is not None:
            con.execute("UPDATE study_user_attributes SET value_json = ? WHERE key = ?",
                        (json.dumps(value), attr))
            if con.execute("SELECT changes()").fetchone()[0] == 0:
                con.execute("INSERT INTO study_user_attributes (study_id, key, value_json) "
                            "VALUES (1, ?, ?)", (attr, json.dumps(value)))
        if result is not None:
            key, data = result
            con.execute("UPDATE kvtune_results SET data = ? WHERE key = ?",
                        (json.dumps(data), key))
        con.commit()
    finally:
        con.close()


def _setup_tampered_stores(cwd: Path, stores: Path) -> None:
    """Copies of the confirmed memcached study, each changed as an attacker with write
    access to a shared results database would: a newline in the stored workload mix and
    in the run's workload description (a drop-in's `[Service] ExecStartPre=`), a refused
    server argument in the stored target.args, a recommended value outside its knob's
    catalog domain (with no stored space to compare with), a study attribute (the space, the
    study file) and a trial's configuration that are not mappings (each was a traceback in
    show or report), and a sweep
    whose knob name is markup (for the report)."""
    import json
    import sqlite3

    (cwd / "results").mkdir(exist_ok=True)
    rec = stores / "rec.db"
    con = sqlite3.connect(rec)
    spec = json.loads(con.execute("SELECT value_json FROM study_user_attributes "
                                  "WHERE key = 'spec'").fetchone()[0])
    conf = json.loads(con.execute("SELECT data FROM kvtune_results WHERE key = "
                                  "'confirmation' ORDER BY id DESC").fetchone()[0])
    con.close()
    inject = "\n[Service]\nExecStartPre=/bin/sh -c 'touch /tmp/kvtune-bad-pwned'\n"
    for name in ("mix", "text", "args", "value", "value-escape", "attrs", "spec-text",
                 "trial"):
        shutil.copy(rec, cwd / "results" / f"{name}.db")
    _tamper(cwd / "results" / "attrs.db", "space", "not a mapping")
    _tamper(cwd / "results" / "spec-text.db", "spec", "not a mapping")
    con = sqlite3.connect(cwd / "results" / "trial.db")
    con.execute("UPDATE trial_user_attributes SET value_json = ? WHERE key = 'config'",
                (json.dumps("not a mapping"),))
    con.commit()
    con.close()
    mix = json.loads(json.dumps(spec))
    mix["load"]["workload"]["mix"] = "get:9,set:1" + inject
    _tamper(cwd / "results" / "mix.db", "spec", mix)
    _tamper(cwd / "results" / "text.db", "workload", {"text": "get-heavy" + inject})
    args = json.loads(json.dumps(spec))
    args["target"]["args"] = ["-m", "256", "-o", "ext_path=/tmp/kvtune-bad-ext:64m"]
    _tamper(cwd / "results" / "args.db", "spec", args)
    value = json.loads(json.dumps(conf))
    value["recommended"]["config"]["memcached.max_item_size"] = (
        "2m -o ext_path=/tmp/kvtune-bad-ext:64m")
    _tamper(cwd / "results" / "value.db", result=("confirmation", value))
    value["recommended"]["config"]["memcached.max_item_size"] = (
        "2m\x1b[2K\r-o ext_path=/tmp/kvtune-bad-ext:64m")
    _tamper(cwd / "results" / "value-escape.db", result=("confirmation", value))
    sweep = cwd / "results" / "sweep.db"
    shutil.copy(stores / "sweep.db", sweep)
    con = sqlite3.connect(sweep)
    evil = "<img src=x onerror=alert(1)>"
    con.execute("UPDATE kvtune_results SET key = ? WHERE key LIKE 'sweep:%'",
                (f"sweep:{evil}",))
    con.execute("UPDATE kvtune_repetitions SET study = ? WHERE study LIKE 'sweep.sweep.%'",
                (f"sweep.sweep.{evil}",))
    con.commit()
    con.close()


def _setup_library(cwd: Path, stores: Path) -> None:
    """lib.db: a library holding one crafted entry (written into its table directly, as a
    colleague's database or an imported file could hold it) whose confirmed changes are a
    memcached option smuggled into a value and a thread count outside the knob catalog,
    and a value with rich markup; and crafted.json, the same entry as an import file."""
    import json
    import sqlite3

    from kvtune.library.store import Library

    Library(f"sqlite:///{cwd / 'lib.db'}")
    entry = {
        "schema": "kvtune/library/1", "id": "00112233445566778899aabbccddeeff",
        "created": 1.7e9, "kvtune_version": "0.1.0", "study": "crafted",
        "target": "memcached", "host": {"cpus": 2},
        "objective": {"metric": "ops_per_sec", "direction": "maximize"},
        "workload": {"read_share": 0.9, "write_share": 0.1, "log10_value": 2.0},
        "baseline": {"memcached.threads": 4, "memcached.max_item_size": "1m"},
        "recommendation": {"changes": {
            "memcached.max_item_size": "2m -o ext_path=/tmp/kvtune-bad-ext:64m",
            "memcached.threads": 100000,
            "memcached.hashpower": "[link=https://kvtune.invalid]20[/link]"},
            "change": 0.2, "ci": [0.1, 0.3]},
    }
    con = sqlite3.connect(cwd / "lib.db")
    con.execute("INSERT INTO kvtune_library (id, created, target, metric, kvtune_version, "
                "data) VALUES (?, ?, ?, ?, ?, ?)",
                (entry["id"], entry["created"], "memcached", "ops_per_sec", "0.1.0",
                 json.dumps(entry)))
    con.commit()
    con.close()
    (cwd / "crafted.json").write_text(json.dumps(
        {"schema": "kvtune/library-export/1", "entries": [entry]}))


SETUPS = {
    "untrusted-servers": _setup_untrusted_servers, "untrusted-kvload": _setup_untrusted_kvload,
    "store": _setup_store, "planted-links": _setup_planted_links,
    "trace-links": _setup_trace_links, "zstd-bomb": _setup_zstd_bomb,
    "hard-links": _setup_hard_links, "planted-modules": _setup_planted_modules,
    "env-s-server": _setup_env_s_server, "fifo-inputs": _setup_fifo_inputs,
    "tampered-stores": _setup_tampered_stores, "library": _setup_library,
}


def _make_stores(d: Path) -> None:
    """rec.db: a confirmed memcached recommendation; sweep.db: a study that only swept."""
    from support.studies import MC_BASE, MC_REC, make_study

    (d / "results").mkdir(parents=True)
    make_study(d, "rec", "memcached", MC_BASE, MC_REC, confirmed=True, args=["-m", "256"])
    shutil.copy(REPO / "examples" / "synthetic.yaml", d / "sweep.yaml")
    text = (d / "sweep.yaml").read_text()
    (d / "sweep.yaml").write_text(text.replace("synthetic-demo", "sweep"))
    from support.cli import kvtune  # forked from the session's fork server

    r = kvtune("sweep", "sweep.yaml", "--knob", "synthetic.x", "--values", "1,2",
               "--repetitions", "2", cwd=d, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for db in (d / "results").glob("*.db"):
        shutil.move(str(db), d / db.name)


def _absolute(value: str, cwd: Path) -> str:
    value = value.replace("{cwd}", str(cwd))
    return str(cwd / value) if value and not value.startswith("/") and "/" in value else value


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    """Runs every case (two at a time: the host has 2 CPUs) in its own sandbox."""
    base = tmp_path_factory.mktemp("bad-inputs")
    stores = base / "stores"
    _make_stores(stores)
    tmp_before = _tmp_entries()
    # Each sandbox's bad-inputs/ is its own directory tree whose files are hard links to one
    # copy of the corpus (a tenth of the time of copying it ~270 times): a case that changed
    # a file would still be seen by its own sandbox's comparison (and by every other's).
    corpus_copy = base / "corpus"
    shutil.copytree(CORPUS, corpus_copy)
    jobs = []
    for case in [*corpus(), None]:
        sandbox = base / (case.name if case else "generated")
        cwd = sandbox / "cwd"
        cwd.mkdir(parents=True)
        shutil.copytree(corpus_copy, cwd / "bad-inputs", copy_function=os.link)
        cases = [case] if case else _generated(cwd)
        for name in case.setup if case else []:
            SETUPS[name](cwd, stores)
        marker = sandbox / "executed.log"
        _wrappers(sandbox / "bin", marker)
        (sandbox / "tmp").mkdir()
        run_dir = base / "run-dirs" / sandbox.name
        run_dir.mkdir(parents=True)
        # The case's own journal, run directory (the host lock and the list of open
        # journals: never /run/kvtune, which a kvtune elsewhere on the host may hold),
        # temporary directory (in the sandbox: anything left there is seen) and no library;
        # the console's width kvtune picks when piped (160; pytest-xdist's workers set
        # COLUMNS=80), as in a serial run.
        env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
               "PATH": f"{sandbox / 'bin'}:{os.environ.get('PATH', '')}",
               "KVLOAD": str(sandbox / "bin" / "kvload"), "PYTHONPATH": str(SRC),
               "KVTUNE_JOURNAL": str(sandbox / "journal.json"),
               "KVTUNE_RUN_DIR": str(run_dir), "KVTUNE_LIBRARY": "off",
               "TMPDIR": str(sandbox / "tmp"),
               "KVTUNE_TEST_AUDIT": str(sandbox / "audit.log")}
        if case is not None:
            env.update({k: _absolute(v, cwd) for k, v in case.env.items()})
            env["PATH"] = ":".join([*(str(cwd / d) for d in case.path_dirs), env["PATH"]])
            env["KVTUNE_TEST_UNOPENED"] = os.pathsep.join(
                os.path.abspath(_absolute(u, cwd)) for u in case.unopened)
        for c in cases:
            for cmd in c.commands:
                jobs.append((c, cmd, cwd, env, marker))

    def run(job: tuple[Case, str, Path, dict[str, str], Path]) -> tuple[tuple[str, str],
                                                                        Outcome]:
        c, cmd, cwd, env, marker = job
        sandbox = cwd.parent
        logs = {"executed.log", "audit.log"}
        before = _snapshot(sandbox, logs)
        if c.argv is None:
            argv = [sys.executable, "-c", AUDIT_BOOT, cmd, str(c.path), *c.flags]
        elif c.program == "kvload":
            argv = [str(REPO / "kvload/target/release/kvload"),
                    *(a.replace("{cwd}", str(cwd)) for a in c.argv)]
        else:
            argv = [sys.executable, "-c", AUDIT_BOOT,
                    *(a.replace("{cwd}", str(cwd)) for a in c.argv)]
        t0 = time.monotonic()
        if argv[:3] == [sys.executable, "-c", AUDIT_BOOT]:  # kvtune: forked, not started
            p: subprocess.CompletedProcess[str] | forkserver.Ran = _server().run(
                AUDIT_BOOT, argv[3:], cwd, env, timeout=120)
        else:
            p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL)
        seconds = time.monotonic() - t0
        after = _snapshot(sandbox, logs)
        changed = sorted(k for k in before.keys() | after.keys()
                         if before.get(k) != after.get(k))
        calls = marker.read_text().splitlines() if marker.exists() else []
        audit = (sandbox / "audit.log").read_text().splitlines() \
            if (sandbox / "audit.log").exists() else []
        out = p.stdout + p.stderr
        if changed:
            out += f"\n[test] created or changed in the sandbox: {changed}"
        return (c.name, cmd), Outcome(p.returncode, out, seconds, calls, audit)

    # Two at a time (the host has 2 CPUs), each thread with a fork server of its own: a case
    # is a process of its own, forked from one that has the libraries imported already.
    local, servers = threading.local(), []

    def _server() -> forkserver.ForkServer:
        if not hasattr(local, "server"):
            # A scratch directory per thread: two threads may ask for their first server at
            # the same moment.
            local.server = forkserver.ForkServer(SRC, base / f"forks-{threading.get_ident()}")
            servers.append(local.server)
        return local.server

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = dict(pool.map(run, jobs))
    finally:
        for server in servers:
            server.close()
    results[("*", "tmp")] = Outcome(0, "\n".join(sorted(_tmp_entries() - tmp_before)), 0, [])
    # What the tests read is in `results` (each case's output, what it started and opened,
    # what it changed in its sandbox): the ~300 sandboxes (~60,000 hard links to the corpus)
    # go now, not at the start of a pytest session three sessions later (pytest keeps its
    # last three temporary directories: deleting this one took 5.7 s of that session).
    shutil.rmtree(base, ignore_errors=True)
    return results


CASES = [(c, cmd) for c in corpus() for cmd in c.commands]
GENERATED = ["generated-huge", "generated-many-keys", "generated-long-line",
             "generated-fifo", "generated-directory"]


def _check(o: Outcome, expect: list[str], absent: list[str], exit_code: int = 2,
           program: str = "kvtune") -> None:
    assert "Traceback" not in o.out and "panicked" not in o.out, o.out
    assert o.rc == exit_code, o.out
    flat = " ".join(o.out.split())  # a long message wraps at the console's width
    for text in expect:
        assert text in flat, o.out
    for text in absent:
        assert text not in o.out and text not in flat, o.out
    assert "[test] created or changed" not in o.out, o.out
    assert o.seconds < LIMIT_S, f"took {o.seconds:.1f}s"
    started = [c for c in o.marker if c.split(" ", 1)[-1] not in VERSION_PROBES]
    assert not started, f"started: {started}"
    execs = [a for a in o.audit if a.startswith("exec ")
             and a.split(" ")[2:] not in [[v] for v in VERSION_PROBES]
             and DEBUGFS_PROBE not in a]
    assert not execs, f"kvtune started: {execs}"
    opened = [a for a in o.audit if a.startswith("open ")]
    assert not opened, f"kvtune opened what it must not: {opened}"
    if exit_code == 2:  # one message first (or, for `kvtune check`, the plan's verdict)
        first = o.out.splitlines()[0] if o.out else ""
        assert f"{program}: error:" in first or "NOT runnable" in first, o.out


@pytest.mark.parametrize(("case", "cmd"), CASES, ids=[f"{c.name}-{cmd}" for c, cmd in CASES])
def test_bad_study_file(case: Case, cmd: str,
                        outcomes: dict[tuple[str, str], Outcome]) -> None:
    _check(outcomes[(case.name, cmd)], case.expect, case.absent, case.exit, case.program)


@pytest.mark.parametrize("name", GENERATED)
def test_generated_bad_file(name: str, outcomes: dict[tuple[str, str], Outcome]) -> None:
    expect = {"generated-huge": ["at most 1024 KiB"], "generated-many-keys": ["YAML nodes"],
              "generated-long-line": ["study"], "generated-fifo": ["not a regular file"],
              "generated-directory": ["is a directory"]}[name]
    _check(outcomes[(name, "tune")], expect, [])


def test_the_wrappers_record_what_runs(outcomes: dict[tuple[str, str], Outcome]) -> None:
    """The "nothing started" check is not vacuous: a file refused only at preflight (a CPU
    this host lacks) has run the binary's version probe, through the wrapper, and nothing
    else (the host context also probes the version of each registered server on PATH)."""
    calls = set(outcomes[("cpus-absent-cpu", "tune")].marker)
    assert "memcached -V" in calls
    assert calls <= {"memcached -V", "redis-server --version"}, calls
    # The audit hook saw the same probe from inside kvtune.
    audit = outcomes[("cpus-absent-cpu", "tune")].audit
    assert any(a.startswith("exec ") and a.endswith("memcached -V") for a in audit), audit


def test_the_audit_hook_sees_a_watched_open_and_a_start(tmp_path: Path) -> None:
    """The "nothing opened" and "nothing started" checks are not vacuous: kvtune opening a
    watched file, and kvtune starting a program, are both recorded."""
    model = tmp_path / "m.json"
    model.write_text('{"rate": 100}')
    log = tmp_path / "audit.log"
    env = {**os.environ, "PYTHONPATH": str(SRC), "KVTUNE_TEST_AUDIT": str(log),
           "KVTUNE_TEST_UNOPENED": str(model)}
    r = subprocess.run([sys.executable, "-c", AUDIT_BOOT, "workload", "describe", str(model)],
                       env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-c", AUDIT_BOOT, "--version"], env=env,
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = log.read_text().splitlines()
    assert f"open {model}" in lines, lines
    assert any(a.startswith("exec ") and a.endswith("--version") for a in lines), lines


def test_nothing_created_outside_the_sandboxes(
        outcomes: dict[tuple[str, str], Outcome]) -> None:
    new = outcomes[("*", "tmp")].out
    assert not new, f"new entries in /tmp: {new}"
    assert not list(Path("/tmp").glob("kvtune-bad*"))


def test_the_corpus_covers_the_classes_of_issue_10() -> None:
    names = {c.name for c in corpus()}
    assert len(names) >= 90
    for must in ("o-value-comma-inline", "args-e", "args-d", "args-l", "extra-args-server",
                 "extra-args-dump-arrivals", "binary-sh", "binary-directory", "sysfs-dotdot",
                 "sysfs-symlink-out", "sysctl-core-pattern", "sysctl-modprobe",
                 "storage-deep-new-dir", "storage-proc", "widened-range", "duration-inf",
                 "range-nan", "seed-negative", "seed-2-70", "noise-cov-inf", "non-utf8",
                 "binary-garbage", "deep-nesting", "yaml-bomb", "cpus-4-billion",
                 "cpus-minus-one", "budget-time-1e309", "missing-target", "unknown-key",
                 "redis-args-dir"):
        assert must in names, must


def test_the_corpus_covers_the_holes_of_issue_40() -> None:
    names = {c.name for c in corpus()}
    for must in (
            # children isolated; every interpreter of a #! line judged
            "commands-planted-modules-knobs", "commands-planted-modules-check",
            "commands-planted-modules-export", "commands-env-s-shebang",
            # check before open: a character device and FIFOs as inputs
            "config-char-device", "config-fifo", "commands-describe-fifo",
            "commands-import-fifo", "commands-library-import-fifo",
            "commands-export-from-char-device", "commands-canary-config-fifo",
            "commands-canary-config-dev-zero",
            # storage URLs: file: URIs, where a database may be created, read-only commands
            "storage-file-uri", "storage-outside-results", "storage-etc",
            "commands-show-file-uri", "commands-predict-file-uri", "commands-library-file-uri",
            "commands-show-creates-no-database", "commands-predict-storage-password",
            "commands-library-import-sqlite-query", "storage-postgres-file-option",
            # storage is input: tampered results databases, a crafted library, the report
            "commands-stored-mix-newline-export", "commands-stored-mix-newline-show",
            "commands-stored-mix-newline-report", "commands-stored-workload-text-newline",
            "commands-stored-target-args", "commands-stored-value-outside-catalog",
            "commands-stored-sweep-markup-report", "commands-stored-attr-not-mapping-show",
            "commands-stored-spec-not-mapping-report", "commands-stored-trial-config-show",
            "commands-library-crafted-profile-export",
            "commands-library-crafted-profiles-markup",
            "commands-library-export-over-itself",
            # the low items: deny-list gaps reachable with --allow-inline-host-knobs
            "sysctl-mmap-rnd-bits", "sysfs-thermal-trip-point"):
        assert must in names, must


def test_the_corpus_covers_the_holes_of_issue_29() -> None:
    names = {c.name for c in corpus()}
    for must in (
            # untrusted programs: a redis-server first on PATH, KVLOAD, the target binary
            "commands-untrusted-redis-server-check", "commands-untrusted-redis-server-knobs",
            "commands-untrusted-redis-server-tune", "commands-untrusted-kvload-version",
            "commands-untrusted-kvload-check", "commands-untrusted-memcached-binary",
            # target.config: includes, kernel files, secrets, the total bound, markup
            "config-include-shadow", "config-include-environ", "config-include-dotdot",
            "config-proc-environ", "config-proc-kmsg", "config-dev-zero",
            "config-shadow-as-redis", "config-shadow-as-memcached", "config-markup",
            "config-escape-sequences", "commands-config-hard-links-total",
            # export --from and links in the output directory; the sweep-only storage
            "commands-export-from-shadow", "commands-export-from-binary",
            "commands-export-from-proc", "commands-export-planted-file-link",
            "commands-export-planted-dir-link", "commands-export-sweep-only",
            # workload import naming its own input; traces and models out of bounds
            "commands-import-keep-trace-dotdot", "commands-import-keep-trace-link",
            "commands-import-output-is-input", "commands-import-output-is-input-via-link",
            "commands-import-zstd-bomb", "commands-import-secret-values",
            "workload-model-item-size-huge", "workload-file-dev-zero", "workload-file-proc",
            "commands-kvload-cpus-3-billion", "commands-kvload-connections-huge",
            "commands-kvload-max-item-size", "commands-kvload-workload-item-size",
            "commands-kvload-workload-dev-zero", "commands-kvload-trace-dev-zero",
            # verify, capture, the deny-list
            "commands-verify-pid-of-no-process", "commands-capture-url-password",
            "sysfs-devices-behind-class-net", "sysfs-devices-behind-bus", "sysctl-tainted",
            "sysctl-oops-limit", "sysctl-warn-limit", "sysctl-unprivileged-port-start",
            "sysctl-overcommit-memory"):
        assert must in names, must
