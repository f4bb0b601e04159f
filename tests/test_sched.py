"""Per-process scheduler knobs applied to a real memcached through kvtune's exec shim and read
back from every thread (sched_getattr and /proc/PID/task/*/sched); debugfs probed without
changing the host's mounts, mounted through the journal and unmounted on restore."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from kvtune.host.facts import collect, parse_kernel_version
from kvtune.host.journal import Journal
from kvtune.knobs import catalog
from kvtune.knobs.appliers import sched
from kvtune.knobs.appliers.base import ApplyEnv, HostContext, Launch
from kvtune.targets.base import free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="nice < 0 and mounts need root")


def _start(memcached_bin: str, s: sched.ServerSched) -> subprocess.Popen[bytes]:
    port = free_port()
    argv = [memcached_bin, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "4",
            "-u", "root"]
    proc = subprocess.Popen(sched.wrap_argv(s, argv), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
    proc.kill()
    raise AssertionError("memcached did not start under the shim")


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


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=5)


SLICE_OK = parse_kernel_version(os.uname().release) >= sched.SLICE_KERNEL


def test_shim_applies_policy_nice_slice_to_every_thread(memcached_bin: str) -> None:
    want = sched.ServerSched("batch", 5, 3_000_000 if SLICE_OK else None)
    proc = _start(memcached_bin, want)
    try:
        # The shim execs: the PID is memcached's own, and it runs its threads.
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "memcached"
        threads = sched.read_back(proc.pid)
        assert len(threads) >= 6  # main, 4 workers, maintenance threads
        assert sched.verify(proc.pid, want) == []
        assert {t.policy for t in threads.values()} == {sched.SCHED_BATCH}
        assert {t.nice for t in threads.values()} == {5}
        rows = _proc_sched(proc.pid)
        assert {r["policy"] for r in rows} == {3}
        assert {r["prio"] for r in rows} == {125}  # 120 + nice
        if SLICE_OK:
            assert {t.runtime_ns for t in threads.values()} == {3_000_000}
            assert {r["se.slice"] for r in rows} == {3_000_000}
    finally:
        _stop(proc)


def test_verify_names_each_mismatch(memcached_bin: str) -> None:
    proc = _start(memcached_bin, sched.ServerSched("batch", 3, None))
    try:
        problems = sched.verify(proc.pid, sched.ServerSched("other", 0, None))
        n = len(sched.read_back(proc.pid))
        assert len(problems) == 2 * n
        assert any("policy batch, not other" in p for p in problems)
        assert any("nice 3, not 0" in p for p in problems)
    finally:
        _stop(proc)


@pytest.mark.skipif(not SLICE_OK, reason="per-task slice needs Linux >= 6.12")
def test_slice_is_clamped_and_verified_against_the_clamp(memcached_bin: str) -> None:
    want = sched.ServerSched(None, None, 50_000)  # below the kernel's 0.1 ms floor
    proc = _start(memcached_bin, want)
    try:
        assert {t.runtime_ns for t in sched.read_back(proc.pid).values()} == {100_000}
        assert sched.verify(proc.pid, want) == []
        assert sched.verify(proc.pid, sched.ServerSched(None, None, 200_000)) != []
    finally:
        _stop(proc)


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
    s = sched.ServerSched.from_launch(launch.sched)
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
    return sched._mounted()


def test_debugfs_probe_leaves_mounts_as_found_and_features_follow_it() -> None:
    before = _mounted()
    sched.debugfs_status.cache_clear()
    st = sched.debugfs_status()
    assert _mounted() == before
    ok, reason = sched.features_status()
    feature_knobs = [n for n in catalog.CATALOG if n.startswith("sched.feature.")]
    if ok:
        assert st.features and feature_knobs
    else:  # not offered, and the reason is said (lockdown's EPERM on this VM)
        assert reason and not feature_knobs
        assert "sched/features" in reason or "debugfs" in reason


def test_debugfs_mount_is_journaled_and_undone_on_restore(tmp_path: Path) -> None:
    if _mounted():
        pytest.skip("debugfs is already mounted here")
    if not sched.debugfs_status().mountable:
        pytest.skip("debugfs cannot be mounted here")
    with Journal(tmp_path / "j.json") as j:
        assert sched.mount_debugfs(j) is True
        assert _mounted()
        assert sched.mount_debugfs(j) is False  # already mounted: nothing more recorded
        results = j.restore()
    assert not _mounted()
    assert any(r.ok and "unmounted" in r.detail for r in results)
