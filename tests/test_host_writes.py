"""Every host write passes the journal's checks (issue 32): the server's move into its cgroup
(cgroup.procs), the scheduler's features in debugfs, and what an undo replays from a
journal file."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from kvtune.errors import HarnessError
from kvtune.host import debugfs
from kvtune.host.journal import Journal, restore_state
from kvtune.kinds.memcached.target import MemcachedTarget
from kvtune.knobs.appliers import sched as sched_applier
from kvtune.knobs.appliers.base import ApplyEnv, Launch
from kvtune.spec import TargetSpec


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    root.mkdir()
    return root


def _target(binary: str) -> MemcachedTarget:
    return MemcachedTarget(TargetSpec(kind="memcached", binary=binary))


def _refused_start(t: MemcachedTarget, journal: Journal | None, d: Path, match: str) -> None:
    with pytest.raises(HarnessError, match=match):
        server = t.start(Launch(), journal, [d])
        t.stop(server, journal)  # started after all: stopped, and the test fails


def test_the_server_is_moved_into_a_cgroup_only_through_the_journal(
        tmp_path: Path, tree: Path, memcached_bin: str) -> None:
    stray = tmp_path / "not-a-cgroup"
    stray.mkdir()
    t = _target(memcached_bin)
    # Without a journal: refused, the server stopped, nothing written.
    _refused_start(t, None, stray, "only through the journal")
    assert not (stray / "cgroup.procs").exists()
    with Journal(tmp_path / "j.json", allowed_roots=(tree,)) as j:
        # Outside the journal's writable roots, also when reached by a link from inside.
        (tree / "link").symlink_to(stray)
        for d in (stray, tree / "link"):
            _refused_start(t, j, d, "only /proc/sys and /sys")
        assert not (stray / "cgroup.procs").exists()
        # Inside the roots but not a cgroup this journal created: restore could not remove it.
        (tree / "other").mkdir()
        _refused_start(t, j, tree / "other", "not a cgroup this study created")
        assert not (tree / "other" / "cgroup.procs").exists()
        # A cgroup the journal made: the pid is written there.
        j.make_dir(tree / "kvtune-1")
        server = t.start(Launch(), j, [tree / "kvtune-1"])
        try:
            assert (tree / "kvtune-1" / "cgroup.procs").read_text() == str(server.pid)
        finally:
            t.stop(server, j)
            (tree / "kvtune-1" / "cgroup.procs").unlink()  # a plain directory, not a cgroup


def _fake_features(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    monkeypatch.setattr(sched_applier, "FEATURES", str(path))
    monkeypatch.setattr(sched_applier, "debugfs_status",
                        lambda: types.SimpleNamespace(features=("HRTICK",)))
    monkeypatch.setattr(sched_applier, "_forget", lambda: None)


def test_a_scheduler_feature_is_written_only_where_the_journal_allows(
        tmp_path: Path, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "features"
    outside.write_text("HRTICK\n")
    (tree / "features").symlink_to(outside)
    applier = sched_applier.SchedFeature("HRTICK")
    for path in (outside, tree / "features"):  # the path judged resolved
        _fake_features(monkeypatch, path)
        with Journal(tmp_path / "j.json", allowed_roots=(tree,)) as j:
            with pytest.raises(HarnessError, match="only /proc/sys and /sys"):
                applier.apply(False, ApplyEnv(j, Launch(), None))  # type: ignore[arg-type]
            assert j._state["entries"] == []  # nothing recorded, nothing to undo
        assert outside.read_text() == "HRTICK\n"


def test_undo_entries_replayed_from_a_file_write_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feats = tmp_path / "features"
    feats.write_text("HRTICK\n")
    _fake_features(monkeypatch, feats)
    entries = [{"undo": "sched-feature", "module": "kvtune.knobs.appliers.sched",
                "args": {"name": "HRTICK\nNO_TTWU_QUEUE", "on": True}},
               {"undo": "debugfs-mount", "module": "kvtune.host.debugfs",
                "args": {"path": str(tmp_path)}}]
    with monkeypatch.context() as m:
        m.setattr(debugfs, "_mounted", lambda: True)
        results = restore_state({"entries": entries})
    assert [r.ok for r in results] == [False, False]
    assert "refusing to unmount" in results[0].detail
    assert "not a scheduler feature's name" in results[1].detail
    assert feats.read_text() == "HRTICK\n"
