"""The journal: originals recorded before the first write, read-back, restore, crash safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtune.errors import HarnessError, UserError
from kvtune.host.journal import Journal, register_undo, restore_from_file


def _undo_toy(args: dict[str, object]) -> str:
    """A toy non-file change (think: a process's scheduler policy): its state lives in a
    file outside the allowed roots, which only this undo function touches."""
    Path(str(args["state"])).write_text(str(args["was"]))
    return f"put back {args['was']}"


register_undo("toy-state", _undo_toy)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    root.mkdir()
    (root / "a").write_text("10\n")
    (root / "thp").write_text("always [madvise] never\n")
    return root


def test_write_records_original_and_restore_puts_it_back(tmp_path: Path, tree: Path) -> None:
    jpath = tmp_path / "j.json"
    with Journal(jpath, allowed_roots=(tree,)) as j:
        j.write(tree / "a", "20")
        j.write(tree / "a", "30")
        state = json.loads(jpath.read_text())
        assert state["entries"] == [{"path": str(tree / "a"), "original": "10",
                                     "reader": "plain"}]
        assert (tree / "a").read_text() == "30"
    assert (tree / "a").read_text() == "10"
    assert not jpath.exists()


def test_refuses_paths_outside_allowed_roots(tmp_path: Path, tree: Path) -> None:
    outside = tmp_path / "etc-passwd"
    outside.write_text("x")
    with Journal(tmp_path / "j.json", allowed_roots=(tree,)) as j:
        with pytest.raises(HarnessError, match="only /proc/sys and /sys"):
            j.write(outside, "y")
        # A symlink inside the allowed tree that points outside is refused as well.
        (tree / "link").symlink_to(outside)
        with pytest.raises(HarnessError):
            j.write(tree / "link", "y")
    assert outside.read_text() == "x"


def test_default_roots_are_proc_sys_and_sys(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.json")
    with pytest.raises(HarnessError):
        j.check_allowed(Path("/etc/hostname"))
    with pytest.raises(HarnessError):
        j.check_allowed(Path("/proc/self/environ"))
    j.check_allowed(Path("/proc/sys/net/core/somaxconn"))


def test_read_back_mismatch_raises(tmp_path: Path, tree: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A write the kernel accepts but does not keep (it clamps) fails, and is still restored."""
    import kvtune.host.journal as jmod

    real = jmod._write_file
    monkeypatch.setattr(jmod, "_write_file",
                        lambda p, v: real(p, "50" if v == "5000" else v))
    with (Journal(tmp_path / "j.json", allowed_roots=(tree,)) as j,
          pytest.raises(ValueError, match="read back '50'")):
        j.write(tree / "a", "5000")
    assert (tree / "a").read_text() == "10"


def test_bracketed_reader(tmp_path: Path, tree: Path) -> None:
    with Journal(tmp_path / "j.json", allowed_roots=(tree,)) as j:
        j.write(tree / "thp", "never", reader="bracketed")
        assert j.original(tree / "thp") == "madvise"
    assert (tree / "thp").read_text() == "madvise"


def test_refuses_to_start_over_a_crashed_journal(tmp_path: Path, tree: Path) -> None:
    jpath = tmp_path / "j.json"
    j = Journal(jpath, allowed_roots=(tree,))
    j.open()
    j.write(tree / "a", "99")
    j.close()  # as if killed: nothing restored
    with pytest.raises(UserError, match="kvtune restore"):
        Journal(jpath, allowed_roots=(tree,)).open()
    results = restore_from_file(jpath, allowed_roots=(tree,))
    assert all(r.ok for r in results)
    assert (tree / "a").read_text() == "10"
    assert not jpath.exists()


def test_a_second_study_cannot_share_the_journal(tmp_path: Path, tree: Path) -> None:
    jpath = tmp_path / "j.json"
    with Journal(jpath, allowed_roots=(tree,)), pytest.raises(UserError, match="another"):
        Journal(jpath, allowed_roots=(tree,)).open()


@pytest.mark.integration  # starts a Python child
def test_restore_after_sigkill_of_a_writer(tmp_path: Path, tree: Path) -> None:
    """A process writes through the journal and is killed with SIGKILL; restore_from_file
    puts the value back and stops the process it had recorded."""
    jpath = tmp_path / "j.json"
    code = f"""
import os, subprocess, sys, time
from pathlib import Path
from kvtune.host.journal import Journal
j = Journal(Path({str(jpath)!r}), allowed_roots=(Path({str(tree)!r}),))
j.open()
j.write(Path({str(tree / 'a')!r}), "77")
child = subprocess.Popen(["sleep", "60"], start_new_session=True)
j.add_process(child.pid, "sleep")
print(child.pid, flush=True)
time.sleep(60)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    child = int(p.stdout.readline())
    p.kill()
    p.wait()
    assert (tree / "a").read_text() == "77"
    assert Path(f"/proc/{child}").exists()
    results = restore_from_file(jpath, allowed_roots=(tree,))
    assert all(r.ok for r in results), results
    assert (tree / "a").read_text() == "10"
    # The orphan is re-parented to init; it is gone or a zombie waiting to be reaped.
    stat = Path(f"/proc/{child}/stat")
    state = stat.read_text().rsplit(")", 1)[1].split()[0] if stat.exists() else "gone"
    assert state in ("gone", "Z")


@pytest.mark.integration  # writes to the host (put back afterwards)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write a real sysctl")
def test_real_sysctl_round_trip(tmp_path: Path) -> None:
    path = Path("/proc/sys/net/core/somaxconn")
    before = path.read_text().strip()
    new = "1234" if before != "1234" else "1235"
    with Journal(tmp_path / "j.json") as j:
        j.write(path, new)
        assert path.read_text().strip() == new
    assert path.read_text().strip() == before


@pytest.mark.integration  # starts a Python child
def test_undo_entry_is_replayed_by_restore_from_file_after_sigkill(tmp_path: Path,
                                                                    tree: Path) -> None:
    """An applier records an undo entry before a change that is not a file write; after
    the process is killed with SIGKILL, restore_from_file replays it from the journal file
    alone (in reverse order with file entries), and the journal is gone."""
    jpath = tmp_path / "j.json"
    state = tmp_path / "toy-state"
    state.write_text("original")
    code = f"""
import os, signal
from pathlib import Path
from kvtune.host.journal import Journal, register_undo
register_undo("toy-state", lambda args: "unused in this process")
j = Journal(Path({str(jpath)!r}), allowed_roots=(Path({str(tree)!r}),))
j.open()
j.write(Path({str(tree / 'a')!r}), "55")
j.record_undo("toy-state", {{"state": {str(state)!r}, "was": "original"}}, key="toy")
j.record_undo("toy-state", {{"state": {str(state)!r}, "was": "changed"}}, key="toy")
Path({str(state)!r}).write_text("changed")
os.kill(os.getpid(), signal.SIGKILL)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    assert state.read_text() == "changed" and (tree / "a").read_text() == "55"
    entries = json.loads(jpath.read_text())["entries"]
    assert [e.get("undo") for e in entries] == [None, "toy-state"]  # one per key
    results = restore_from_file(jpath, allowed_roots=(tree,))
    assert [r.ok for r in results] == [True, True], results
    assert results[0].detail == "put back original"  # the undo entry first: reverse order
    assert state.read_text() == "original" and (tree / "a").read_text() == "10"
    assert not jpath.exists()


def test_unknown_undo_kind_keeps_the_journal(tmp_path: Path, tree: Path) -> None:
    jpath = tmp_path / "j.json"
    jpath.write_text(json.dumps({"entries": [
        {"undo": "no-such-kind", "module": "kvtune.nothing", "args": {}, "key": None}]}))
    with pytest.raises(UserError, match="undo kind 'no-such-kind' is not one kvtune registers"):
        restore_from_file(jpath)
    assert jpath.exists()
    with pytest.raises(HarnessError, match="not registered"), \
            Journal(tmp_path / "k.json", allowed_roots=(tree,)) as j:
        j.record_undo("no-such-kind", {})

