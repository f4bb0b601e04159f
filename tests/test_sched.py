"""Per-process scheduler knobs applied to a real memcached through kvtune's exec shim and read
back from every thread (sched_getattr and /proc/PID/task/*/sched); debugfs probed without
changing the host's mounts, mounted through the journal and unmounted on restore."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_knobs import FAKE, FAKE_KNOB, FakeDebugfsKnob
from support.servers import start, stop

from kvtune import roots
from kvtune.host import debugfs
from kvtune.host import plan as hostplan
from kvtune.host import sched as hsched
from kvtune.host.context import on_host
from kvtune.host.facts import collect, parse_kernel_version
from kvtune.host.journal import Journal
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import ApplyEnv, HostContext, Launch
from kvtune.knobs.appliers.hostfile import HostFile, Location
from kvtune.knobs.resolve import resolve_knobs
from kvtune.measure.session import Session
from kvtune.study.loader import parse_study

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="nice < 0 and mounts need root")


def _start(memcached_bin: str, s: hsched.ServerSched) -> subprocess.Popen[bytes]:
    """memcached started through kvtune's scheduling shim (which execs it)."""
    return start("memcached", ["-t", "4"], binary=memcached_bin, user="root",
                 wrap=lambda argv: hsched.wrap_argv(s, argv)).proc


def _proc_sched(pid: int) -> list[dict[str, int]]:
    """policy, prio and se.slice of every thread, from /proc/PID/task/*/sched."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "sched").read_text()
        row = {}
        for key in ("policy", "prio", "se.slice"):
            m = re.search(rf"^{re.escape(key)}\s*:\s*(\d+)", text, re.M)
            if m:
                row[key] = int(m.group(1))
        out.append(row)
    return out


SLICE_OK = parse_kernel_version(os.uname().release) >= hsched.SLICE_KERNEL


def test_shim_applies_policy_nice_slice_to_every_thread(memcached_bin: str) -> None:
    want = hsched.ServerSched("batch", 5, 3_000_000 if SLICE_OK else None)
    proc = _start(memcached_bin, want)
    try:
        # The shim execs: the PID is memcached's own, and it runs its threads.
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "memcached"
        threads = hsched.read_back(proc.pid)
        assert len(threads) >= 6  # main, 4 workers, maintenance threads
        assert hsched.verify(proc.pid, want) == []
        assert {t.policy for t in threads.values()} == {hsched.SCHED_BATCH}
        assert {t.nice for t in threads.values()} == {5}
        rows = _proc_sched(proc.pid)
        assert {r["policy"] for r in rows} == {3}
        assert {r["prio"] for r in rows} == {125}  # 120 + nice
        if SLICE_OK:
            assert {t.runtime_ns for t in threads.values()} == {3_000_000}
            assert {r["se.slice"] for r in rows} == {3_000_000}
    finally:
        stop(proc)


def test_verify_names_each_mismatch(memcached_bin: str) -> None:
    proc = _start(memcached_bin, hsched.ServerSched("batch", 3, None))
    try:
        problems = hsched.verify(proc.pid, hsched.ServerSched("other", 0, None))
        n = len(hsched.read_back(proc.pid))
        assert len(problems) == 2 * n
        assert any("policy batch, not other" in p for p in problems)
        assert any("nice 3, not 0" in p for p in problems)
    finally:
        stop(proc)


@pytest.mark.skipif(not SLICE_OK, reason="per-task slice needs Linux >= 6.12")
def test_slice_is_clamped_and_verified_against_the_clamp(memcached_bin: str) -> None:
    want = hsched.ServerSched(None, None, 50_000)  # below the kernel's 0.1 ms floor
    proc = _start(memcached_bin, want)
    try:
        assert {t.runtime_ns for t in hsched.read_back(proc.pid).values()} == {100_000}
        assert hsched.verify(proc.pid, want) == []
        assert hsched.verify(proc.pid, hsched.ServerSched(None, None, 200_000)) != []
    finally:
        stop(proc)


def test_appliers_fill_the_launch_and_catalog_has_the_knobs() -> None:
    ctx = HostContext(collect())
    launch = Launch()
    env = ApplyEnv(None, launch, ctx)
    for name, value in (("sched.server_policy", "batch"), ("sched.server_nice", 4),
                        ("sched.server_slice_ns", 2_000_000)):
        k = catalog.CATALOG[name]
        assert k.scope == "placement" and k.applier.check(ctx).ok == (
            name != "sched.server_slice_ns" or SLICE_OK)
        k.applier.apply(value, env)
    assert launch.sched == {"policy": "batch", "nice": 4, "slice_ns": 2_000_000}
    s = hsched.ServerSched.from_launch(launch.sched)
    assert s is not None and s.shim_args() == ["--policy", "batch", "--nice", "4",
                                               "--slice-ns", "2000000"]


def test_case_study_knobs_name_a_working_equivalent() -> None:
    ctx = HostContext(collect())
    text = catalog.equivalent("kernel.sched_wakeup_granularity_ns", ctx)
    assert "sched.server_policy" in text
    assert "sched.server_slice_ns" in catalog.equivalent("sched_min_granularity_ns", ctx) or \
        not SLICE_OK
    assert catalog.equivalent("memcached.threads", ctx) == ""


def _mounted() -> bool:
    return debugfs.debugfs_mounted()


@pytest.fixture
def debugfs_as_found() -> Iterator[bool]:
    """The test's debugfs state before it ran; a test that leaves debugfs mounted when it
    was not fails, after unmounting it."""
    before = _mounted()
    yield before
    if _mounted() and not before:
        subprocess.run(["umount", roots.DEBUGFS], check=False)
        pytest.fail("the test left debugfs mounted")


@pytest.mark.integration  # starts a Python child
def test_debugfs_probe_leaves_mounts_as_found_and_features_follow_it(
        debugfs_as_found: bool) -> None:
    debugfs._forget()
    st = debugfs.debugfs_status()
    assert _mounted() == debugfs_as_found
    ok, reason = debugfs.features_status()
    feature_knobs = [n for n in catalog.CATALOG if n.startswith("sched.feature.")]
    if ok:
        assert st.features and feature_knobs
    else:  # not offered, and the reason is said (lockdown's EPERM on this VM)
        assert reason and not feature_knobs
        assert "sched/features" in reason or "debugfs" in reason


@pytest.mark.integration  # starts a Python child
def test_unmounted_debugfs_knob_is_judged_by_the_probe(debugfs_as_found: bool) -> None:
    """On a host where debugfs is not mounted, a catalog knob in it is available or not as a
    private mount namespace sees its file (here: EPERM under lockdown), not 'not mounted'."""
    if debugfs_as_found:
        pytest.skip("debugfs is mounted here")
    ctx = HostContext(collect())
    knob = catalog.CATALOG["sched.migration_cost_ns"]
    path = knob.applier.resolve(ctx)  # type: ignore[attr-defined]
    if path is None or not path.startswith(roots.DEBUGFS):
        pytest.skip("sched_migration_cost_ns is not in debugfs on this kernel")
    debugfs._forget()
    probed = debugfs.debugfs_file(path)
    a = knob.applier.check(ctx)
    assert a.ok == probed.writable
    if not a.ok:
        assert a.reason == probed.reason and "not mounted" not in a.reason
        if debugfs.debugfs_status().mountable:
            assert "private mount namespace" in a.reason
    assert not _mounted()


def test_hostfile_under_unmounted_debugfs_takes_the_probed_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = f"{roots.DEBUGFS}/sched/migration_cost_ns"
    monkeypatch.setattr(debugfs, "debugfs_mounted", lambda: False)
    monkeypatch.setattr(debugfs, "debugfs_file",
                        lambda p: debugfs.DebugfsFile(p, True, True, "500000\n", ""))
    f = HostFile([Location(path)])
    ctx = HostContext(collect())
    a = f.check(ctx)
    assert a.ok and a.current == 500000 and f.current(ctx) == 500000
    monkeypatch.setattr(debugfs, "debugfs_file",
                        lambda p: debugfs.DebugfsFile(p, False, False, "", f"{p}: EPERM on read"))
    a = f.check(ctx)
    assert not a.ok and a.reason == f"{path}: EPERM on read" and f.current(ctx) is None


def test_debugfs_mount_is_journaled_and_undone_on_restore(tmp_path: Path,
                                                          debugfs_as_found: bool) -> None:
    if debugfs_as_found:
        pytest.skip("debugfs is already mounted here")
    if not debugfs.debugfs_status().mountable:
        pytest.skip("debugfs cannot be mounted here")
    with Journal(tmp_path / "j.json") as j:
        assert debugfs.mount_debugfs(j) is True
        assert _mounted()
        assert debugfs.mount_debugfs(j) is False  # already mounted: nothing more recorded
        results = j.restore()
    assert not _mounted()
    assert any(r.ok and "unmounted" in r.detail for r in results)


# -- a study whose knob lives in debugfs -------------------------------------------------
# This VM's sched files answer EPERM, so no real debugfs knob is available: the knob below
# says it is (its availability is faked) and writes nothing; what is tested is the study's
# mount around it, through the real Session / journal / CLI.

# (the knob: tests/support/fake_knobs.py)

STUDY = """\
study: {name}
target: {{kind: memcached, cpus: "0", args: ["-t", "1"]}}
load: {{mode: closed, connections: 2, duration: {duration}, warmup: 0s, cpus: "1",
        workload: {{keys: 1000, preload: false}}}}
knobs: [{knobs}]
objective: {{metric: ops_per_sec}}
"""

# Run by test_kvtune_restore_after_sigkill_unmounts_debugfs: a `kvtune sweep` of the fake
# knob, in its own process (the knob registered in that process's catalog).
SWEEP_SCRIPT = """\
import sys
sys.path.insert(0, {tests!r})
from support.fake_knobs import FAKE_KNOB
from kvtune.knobs import catalog
from kvtune.cli import main
from kvtune.study.loader import parse_study
catalog.register(FAKE_KNOB)
sys.argv = ["kvtune", "sweep", {study!r}, "--knob", FAKE_KNOB.name, "--values", "0,1",
            "--repetitions", "1"]
main()
"""


def _mountable(mounted_before: bool) -> None:
    if mounted_before:
        pytest.skip("debugfs is already mounted here: nothing for a study to mount")
    if not debugfs.debugfs_status().mountable:
        pytest.skip("debugfs cannot be mounted here")


def _session(text: str) -> Session:
    spec, lines = parse_study(text, "fake.yaml")
    session = Session(spec, resolve_knobs(spec, lines, extra_knobs={FAKE: FAKE_KNOB}), None)
    session.preflight()
    return session


def test_study_mounts_debugfs_through_the_journal_and_unmounts_at_its_end(
        debugfs_as_found: bool, memcached_bin: str, kvload_bin: str) -> None:
    _mountable(debugfs_as_found)
    journal = Path(os.environ["KVTUNE_JOURNAL"])
    FakeDebugfsKnob.applied.clear()
    session = _session(STUDY.format(name="fake-debugfs", duration="1s", knobs=FAKE))
    assert hostplan.knob_needs_debugfs(FAKE_KNOB, session.ctx)
    with on_host(session, "fake-debugfs"):
        assert _mounted()
        entries = json.loads(journal.read_text())["entries"]
        assert entries[0]["undo"] == "debugfs-mount"  # recorded before anything applied
        assert FakeDebugfsKnob.applied == [1]  # setup's write-back of the baseline
    assert not _mounted() and not journal.exists()


@pytest.mark.integration  # starts a Python child
def test_study_without_debugfs_knobs_does_not_mount_it(debugfs_as_found: bool) -> None:
    _mountable(debugfs_as_found)
    session = _session(STUDY.format(name="no-debugfs", duration="1s",
                                    knobs="memcached.threads"))
    with on_host(session, "no-debugfs"):
        assert not _mounted()


def test_kvtune_restore_after_sigkill_unmounts_debugfs(
        debugfs_as_found: bool, tmp_path: Path, memcached_bin: str, kvload_bin: str) -> None:
    _mountable(debugfs_as_found)
    study = tmp_path / "fake.yaml"
    study.write_text(STUDY.format(name="fake-kill", duration="20s", knobs=FAKE))
    script = SWEEP_SCRIPT.format(tests=str(Path(__file__).parent), study=str(study))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    journal = Path(os.environ["KVTUNE_JOURNAL"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            if _mounted() and journal.exists() and \
                    json.loads(journal.read_text()).get("processes"):
                break  # debugfs mounted and the first server running
            time.sleep(0.05)
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        assert _mounted(), "the sweep did not mount debugfs within 30 s"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _mounted() and journal.exists()  # left behind by the kill
    out = subprocess.run([sys.executable, "-c", "from kvtune.cli import main; main()",
                          "restore"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "debugfs unmounted" in out.stdout
    assert not _mounted() and not journal.exists()
