"""One host, one study: the host-level lock covers every journal path (issue 12 item 7,
issue 15 item 3), and a journal left with changes blocks every other journal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import kvtune as run_kvtune

from kvtune.errors import UserError
from kvtune.host.journal import Journal, restore_from_file
from kvtune.host.lock import HostLock, holder

# kvtune processes holding and waiting for the host lock
pytestmark = pytest.mark.integration


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    root.mkdir()
    (root / "a").write_text("100\n")
    return root


def _holder_process(jpath: Path, tree: Path, study: str) -> subprocess.Popen[str]:
    """Another process that opens a journal (another study) and writes 200, then waits."""
    code = f"""
import sys, time
from pathlib import Path
from kvtune.host.journal import Journal
j = Journal(Path({str(jpath)!r}), allowed_roots=(Path({str(tree)!r}),), study={study!r})
j.open()
j.write(Path({str(tree / 'a')!r}), "200")
print("ready", flush=True)
sys.stdin.readline()
j.restore(); j.close()
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    return p


def test_second_study_with_another_journal_is_refused_naming_the_pid(
        tmp_path: Path, tree: Path) -> None:
    first = _holder_process(tmp_path / "one.json", tree, "study-one")
    try:
        owner = holder()
        assert owner is not None and owner["pid"] == first.pid and owner["study"] == "study-one"
        with pytest.raises(UserError) as err:
            Journal(tmp_path / "two.json", allowed_roots=(tree,), study="study-two").open()
        msg = str(err.value)
        assert f"pid {first.pid}" in msg and "'study-one'" in msg, msg
        assert (tree / "a").read_text().strip() == "200"  # the second wrote nothing
        # kvtune restore of another journal while a study runs is refused as well.
        with pytest.raises(UserError, match=f"pid {first.pid}"):
            restore_from_file(tmp_path / "one.json", allowed_roots=(tree,))
    finally:
        assert first.stdin is not None
        first.stdin.write("\n")
        first.stdin.flush()
        first.wait(10)
    assert (tree / "a").read_text().strip() == "100"
    assert holder() is None
    # Once the first has restored and ended, the second study may run.
    with Journal(tmp_path / "two.json", allowed_roots=(tree,), study="study-two") as j:
        j.write(tree / "a", "300")
    assert (tree / "a").read_text().strip() == "100"


def test_the_same_study_twice_on_one_host_is_named_as_such(tmp_path: Path, tree: Path) -> None:
    """Two processes of one study on one host (two fleet workers, say): the refusal says it
    is this study, not "another study", and names the holder's PID."""
    first = _holder_process(tmp_path / "one.json", tree, "fleet-study")
    try:
        with pytest.raises(UserError) as err:
            Journal(tmp_path / "two.json", allowed_roots=(tree,), study="fleet-study").open()
        msg = str(err.value)
        assert msg.startswith("this study already manages this host")
        assert f"pid {first.pid}" in msg and "one worker per server host" in msg, msg
    finally:
        assert first.stdin is not None
        first.stdin.write("\n")
        first.stdin.flush()
        first.wait(10)


def test_two_journals_never_stack_originals(tmp_path: Path, tree: Path) -> None:
    """The issue's bug: original 100, A writes 200 and is killed, B would record 200 as its
    original and write 300; restoring both left 200. Now B is refused until A's journal is
    restored, and the value ends at 100."""
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    a = _holder_process(one, tree, "crashed")
    a.kill()
    a.wait()
    assert (tree / "a").read_text().strip() == "200" and one.exists()
    with pytest.raises(UserError, match=f"kvtune restore --journal {one}"):
        Journal(two, allowed_roots=(tree,), study="next").open()
    assert (tree / "a").read_text().strip() == "200"
    assert all(r.ok for r in restore_from_file(one, allowed_roots=(tree,)))
    with Journal(two, allowed_roots=(tree,), study="next") as j:
        j.write(tree / "a", "300")
        assert j.original(tree / "a") == "100"
    assert (tree / "a").read_text().strip() == "100"


def test_lock_released_when_holder_is_killed(tmp_path: Path) -> None:
    code = """
import sys
from kvtune.host.lock import HostLock
HostLock("victim").acquire()
print("ready", flush=True)
sys.stdin.readline()
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    assert (holder() or {}).get("pid") == p.pid
    p.kill()
    p.wait()
    assert holder() is None  # the kernel drops a dead process's flock
    with HostLock("next") as lock:
        assert lock.held and (holder() or {}).get("pid") == os.getpid()


def test_cli_second_tune_on_the_same_host_is_refused(tmp_path: Path, tree: Path) -> None:
    """`kvtune tune` of a memcached study (it manages a server and a journal) and
    `kvtune restore`, run while another study holds the host, exit 2 naming its PID, and
    start no server."""
    repo = Path(__file__).resolve().parents[1]
    study = tmp_path / "mc.yaml"
    study.write_text((repo / "examples" / "memcached.yaml").read_text()
                     + f"storage: sqlite:///{tmp_path}/mc.db\n")
    first = _holder_process(tmp_path / "one.json", tree, "study-one")
    try:
        for argv in (["tune", str(study), "--trials", "1"],
                     ["restore", "--journal", str(tmp_path / "one.json")]):
            t0 = time.monotonic()
            p = run_kvtune(*argv, env=os.environ.copy(), timeout=60)
            assert time.monotonic() - t0 < 30
            assert p.returncode == 2, (argv, p.stdout, p.stderr)
            assert f"pid {first.pid}" in p.stderr + p.stdout, (argv, p.stderr)
        assert subprocess.run(["pgrep", "-P", str(os.getpid()), "memcached"]).returncode == 1
    finally:
        assert first.stdin is not None
        first.stdin.write("\n")
        first.stdin.flush()
        first.wait(10)
    assert (tree / "a").read_text().strip() == "100"


def _left(jpath: Path, processes: list[dict[str, object]]) -> None:
    """A journal as a study killed after it started a server and before any host change."""
    import json
    jpath.write_text(json.dumps({"version": 1, "owner_pid": 999999, "study": "killed",
                                 "started": 0.0, "entries": [], "created_dirs": [],
                                 "processes": processes}))


def _index(jpath: Path) -> None:
    lock = HostLock("killed", jpath)
    lock.acquire()
    try:
        lock.add_journal(jpath)
    finally:
        lock.release()


def test_a_journal_whose_only_server_has_exited_leaves_nothing_to_repair(
        tmp_path: Path, tree: Path) -> None:
    """A study killed between starting a server and any host change, whose server has since
    exited (pid gone, or reused by a process with another start time): nothing is left to
    restore, so it blocks no later study, in its own journal path or another."""
    from kvtune.host.lock import starttime
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    _left(tmp_path / "one.json", [{"pid": dead.pid, "starttime": 1, "name": "memcached"},
                                  {"pid": os.getpid(), "starttime": 1, "name": "memcached"}])
    _index(tmp_path / "one.json")
    with Journal(tmp_path / "two.json", allowed_roots=(tree,), study="next") as j:
        j.write(tree / "a", "300")
    with Journal(tmp_path / "one.json", allowed_roots=(tree,), study="next") as j:
        j.write(tree / "a", "300")
    assert (tree / "a").read_text().strip() == "100"
    # A server that still runs (this very process, by its start time) is something to repair.
    _left(tmp_path / "one.json", [{"pid": os.getpid(), "starttime": starttime(os.getpid()),
                                   "name": "memcached"}])
    _index(tmp_path / "one.json")
    with pytest.raises(UserError, match="restore"):
        Journal(tmp_path / "two.json", allowed_roots=(tree,), study="next").open()
    with pytest.raises(UserError, match="restore"):
        Journal(tmp_path / "one.json", allowed_roots=(tree,), study="next").open()
