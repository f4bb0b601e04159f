"""A study file is untrusted input (issue 10): every file of tests/bad-inputs/ (one per
class of mistake or attack) and a few generated ones get exit 2 with a one-line message
naming the key, fast, with no traceback, no server or kvload started, no file created and
no host value changed (the autouse fixture in conftest.py checks the catalog's host knobs).

A corpus file's header says what to expect:
    # expect: TEXT      the message must contain TEXT (the key path, usually)
    # also: run         run `kvtune run FILE` too (besides `kvtune tune FILE`)
    # flags: ...        extra command-line flags
    # absent: TEXT      the output must not contain TEXT (a password)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "bad-inputs"
SRC = REPO / "src"
# A hang guard only: what proves that nothing ran is the wrapped binaries' record (no server,
# no kvload started; `started` below), not the wall time, which a busy host stretches (a
# 5 s limit failed at 5.2 s while other jobs loaded both CPUs).
LIMIT_S = 30.0
WRAPPED = ("memcached", "redis-server", "kvload", "taskset")
VERSION_PROBES = ("-V", "--version")


@dataclass
class Case:
    name: str
    path: Path  # relative to the sandbox's cwd
    expect: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=lambda: ["tune"])


def _header(path: Path) -> Case:
    case = Case(path.stem, Path("bad-inputs") / path.name)
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
    assert case.expect, f"{path.name} has no '# expect:' header"
    return case


def corpus() -> list[Case]:
    return [_header(p) for p in sorted(CORPUS.glob("*.yaml"))]


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


def _tmp_entries() -> set[str]:
    # What a bad input could make appear in /tmp: the corpus's paths (all /tmp/kvtune-*),
    # kvtune's own files, and what a server pointed at /tmp writes (Redis's dump and
    # append-only files). Other processes sharing the host (other tools' scratch files,
    # concurrent test runs) are not ours to judge.
    return {p.name for p in Path("/tmp").iterdir()
            if p.name.startswith(("kvtune", "dump.rdb", "appendonly", "memcached"))}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Outcome]:
    """Runs every case (two at a time: the host has 2 CPUs) in its own sandbox."""
    base = tmp_path_factory.mktemp("bad-inputs")
    tmp_before = _tmp_entries()
    jobs = []
    for case in [*corpus(), None]:
        sandbox = base / (case.name if case else "generated")
        cwd = sandbox / "cwd"
        cwd.mkdir(parents=True)
        shutil.copytree(CORPUS, cwd / "bad-inputs")
        cases = [case] if case else _generated(cwd)
        marker = sandbox / "executed.log"
        _wrappers(sandbox / "bin", marker)
        env = {**os.environ, "PATH": f"{sandbox / 'bin'}:{os.environ.get('PATH', '')}",
               "KVLOAD": str(sandbox / "bin" / "kvload"), "PYTHONPATH": str(SRC),
               "KVTUNE_JOURNAL": str(sandbox / "journal.json")}
        for c in cases:
            for cmd in c.commands:
                jobs.append((c, cmd, cwd, env, marker))

    def run(job: tuple[Case, str, Path, dict[str, str], Path]) -> tuple[tuple[str, str],
                                                                        Outcome]:
        c, cmd, cwd, env, marker = job
        before = _tree(cwd)
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "kvtune", cmd, str(c.path), *c.flags],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        seconds = time.monotonic() - t0
        created = _tree(cwd) - before
        calls = marker.read_text().splitlines() if marker.exists() else []
        out = p.stdout + p.stderr
        if created:
            out += f"\n[test] created in cwd: {sorted(created)}"
        return (c.name, cmd), Outcome(p.returncode, out, seconds, calls)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(run, jobs))
    results[("*", "tmp")] = Outcome(0, "\n".join(sorted(_tmp_entries() - tmp_before)), 0, [])
    return results


CASES = [(c, cmd) for c in corpus() for cmd in c.commands]
GENERATED = ["generated-huge", "generated-many-keys", "generated-long-line",
             "generated-fifo", "generated-directory"]


def _check(o: Outcome, expect: list[str], absent: list[str]) -> None:
    assert "Traceback" not in o.out, o.out
    assert o.rc == 2, o.out
    for text in expect:
        assert text in o.out, o.out
    for text in absent:
        assert text not in o.out, o.out
    assert "[test] created in cwd" not in o.out, o.out
    assert o.seconds < LIMIT_S, f"took {o.seconds:.1f}s"
    started = [c for c in o.marker if c.split(" ", 1)[-1] not in VERSION_PROBES]
    assert not started, f"started: {started}"
    assert o.out and "kvtune: error:" in o.out.splitlines()[0], o.out


@pytest.mark.parametrize(("case", "cmd"), CASES, ids=[f"{c.name}-{cmd}" for c, cmd in CASES])
def test_bad_study_file(case: Case, cmd: str,
                        outcomes: dict[tuple[str, str], Outcome]) -> None:
    _check(outcomes[(case.name, cmd)], case.expect, case.absent)


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
