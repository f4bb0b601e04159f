"""End to end against real servers on loopback: memcached and redis-server started by
kvtune's own target layer, load from kvload, host knobs through the journal."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import kvtune, show
from support.studies import journal_has_process, study_file, wait_for

from kvtune.host.cgroup import ServerCgroup
from kvtune.host.facts import collect
from kvtune.host.journal import Journal, default_path

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)

def cpu_cgroups() -> list[Path]:
    """kvtune's CPU cgroups on this host, in the hierarchy kvtune uses here (v1 `cpu`
    controller, or v2 at /sys/fs/cgroup or /sys/fs/cgroup/unified)."""
    mine = ServerCgroup(Journal(), {"cpu"}, mode=collect().cgroup).dirs["cpu"]  # not created
    return sorted(mine.parent.glob("kvtune-*"))


def quota_text(cg: Path) -> str:
    """The CFS quota as kvtune wrote it: `50000` (v1) or `50000 100000` (v2's cpu.max)."""
    v1 = cg / "cpu.cfs_quota_us"
    return v1.read_text().strip() if v1.exists() else (cg / "cpu.max").read_text().strip()


@pytest.mark.e2e  # a whole study on a real server
def test_memcached_study_end_to_end(in_tmp: Path, kvload_bin: str, memcached_bin: str) -> None:
    spec = study_file(in_tmp, "mc", knobs="  - {name: memcached.threads, range: [1, 4]}\n"
                                          "  - memcached.reqs_per_event\n")
    r = kvtune("tune", str(spec), cwd=in_tmp)
    assert r.returncode in (0, 1), r.stderr + r.stdout  # 1: ran, no significant recommendation
    assert "Best configuration beside the baseline" in r.stdout
    assert "Confirmation" in r.stdout
    data = show(spec, in_tmp)
    base = data["baseline"]
    assert base["config"] == {"memcached.threads": 4, "memcached.reqs_per_event": 20}
    assert base["metrics"]["p99_us"] > 0 and base["metrics"]["hit_ratio"] > 0.9
    assert len([t for t in data["trials"] if t["kind"] == "trial"]) == 2
    # Every repetition is kept raw: the kvload document, the server's stats, the argv, host.
    from kvtune.store import Store

    reps = Store(data["storage"]).repetitions("mc")
    assert len(reps) >= 2 + 2 + 2 * 2  # noise floor, trials, confirmation
    raw = reps[0]["raw"]
    assert raw["load"]["tool"] == "kvload" and raw["load"]["schema"].split(".")[0] == "kvload/1"
    assert raw["server_stats"]["stats"]["cmd_get"] > 0
    assert raw["argv"][:3] == ["/usr/bin/taskset", "-c", "0"] or raw["argv"][1:3] == ["-c", "0"]
    assert "-t" in raw["argv"] and raw["placement"] == {"server_cpus": "0", "client_cpus": "1"}
    assert raw["host"]["kernel"]
    # The trial's application knobs reached memcached's argv.
    t1 = next(x for x in reps if x["kind"] == "trial")
    argv = t1["raw"]["argv"]
    assert argv[argv.index("-t") + 1] == str(t1["params"]["memcached.threads"])
    assert argv[argv.index("-R") + 1] == str(t1["params"]["memcached.reqs_per_event"])
    # Running it again resumes: nothing is re-measured, the budget is already spent.
    r2 = kvtune("tune", str(spec), "--no-confirm", cwd=in_tmp)
    assert r2.returncode == 0, r2.stderr
    assert len(show(spec, in_tmp)["trials"]) == len(data["trials"])


@pytest.mark.e2e  # a whole study on a real server
def test_redis_study_end_to_end(in_tmp: Path, kvload_bin: str, redis_bin: str) -> None:
    spec = study_file(in_tmp, "rd", kind="redis",
                      knobs="  - redis.hz\n  - {name: redis.io_threads, range: [1, 2]}\n")
    r = kvtune("tune", str(spec), "--no-confirm", cwd=in_tmp)
    assert r.returncode == 0, r.stderr + r.stdout
    data = show(spec, in_tmp)
    from kvtune.store import Store

    reps = Store(data["storage"]).repetitions("rd")
    info = reps[0]["raw"]["server_stats"]["info"]
    assert info["redis_version"].startswith("7.")
    assert info["total_commands_processed"] > 1000
    for rep in reps:  # every repetition's knob values reached redis-server's argv
        argv = rep["raw"]["argv"]
        assert argv[argv.index("--hz") + 1] == str(rep["params"]["redis.hz"])
        assert argv[argv.index("--io-threads") + 1] == str(rep["params"]["redis.io_threads"])
    assert {rep["params"]["redis.hz"] for rep in reps} != {10}  # the search moved off it


@pytest.mark.e2e  # a whole study on a real server
@pytest.mark.skipif(os.geteuid() != 0, reason="host knobs need root")
def test_host_and_cgroup_knobs_are_applied_and_restored(in_tmp: Path, kvload_bin: str,
                                                        memcached_bin: str) -> None:
    autocork = Path("/proc/sys/net/ipv4/tcp_autocorking")
    before = autocork.read_text().strip()
    # Every combination once: autocorking off and on, with and without a 50% CPU quota (the
    # grid's 4 points, the defaults' among them); a wider quota range only adds trials.
    spec = study_file(in_tmp, "host", trials=4, sampler="grid", knobs=(
        "  - net.ipv4.tcp_autocorking\n"
        "  - {name: placement.cpu_quota_pct, range: [50, 50]}\n"))
    r = kvtune("tune", str(spec), "--no-confirm", cwd=in_tmp)
    assert r.returncode == 0, r.stderr + r.stdout
    from kvtune.store import Store

    data = show(spec, in_tmp)
    reps = Store(data["storage"]).repetitions("host")
    quota_reps = [x for x in reps if x["params"]["placement.cpu_quota_pct"] != -1]
    assert quota_reps, "some trial ran under a CPU quota"
    for x in quota_reps:  # read back from the server's cgroup, whichever hierarchy
        assert x["metrics"]["throttle_quota_pct"] == pytest.approx(
            x["params"]["placement.cpu_quota_pct"]), x["params"]
        assert x["metrics"]["throttle_nr_periods"] > 0
        assert x["raw"]["telemetry"]["throttle"]["kvtune_cgroup"] is True
    assert autocork.read_text().strip() == before
    assert not cpu_cgroups()
    assert not default_path().exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="host knobs need root")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_killed_study_leaves_nothing_changed(in_tmp: Path, kvload_bin: str, memcached_bin: str,
                                             sig: signal.Signals) -> None:
    """SIGKILL mid-trial: `kvtune restore` puts every knob back, stops the orphaned server
    and removes the cgroup. SIGTERM and SIGHUP (a closed terminal or ssh session): the
    study restores by itself."""
    autocork = Path("/proc/sys/net/ipv4/tcp_autocorking")
    before = autocork.read_text().strip()
    changed = "0" if before == "1" else "1"
    spec = study_file(in_tmp, "kill", duration="20s", knobs=(
        "  - net.ipv4.tcp_autocorking\n  - {name: placement.cpu_quota_pct, range: [50, 100]}\n"))
    p = subprocess.Popen([sys.executable, "-m", "kvtune", "run", str(spec), "--set",
                          f"net.ipv4.tcp_autocorking={changed}", "--set",
                          "placement.cpu_quota_pct=50"], cwd=in_tmp,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for(journal_has_process), "the study never started its server"
        time.sleep(0.5)
        assert autocork.read_text().strip() == changed
        state = json.loads(default_path().read_text())
        server_pid = state["processes"][0]["pid"]
        cg = cpu_cgroups()
        assert len(cg) == 1 and quota_text(cg[0]) in ("50000", "50000 100000")
        p.send_signal(sig)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if sig == signal.SIGKILL:
        assert autocork.read_text().strip() == changed  # nothing ran after the kill ...
        assert Path(f"/proc/{server_pid}").exists()
        r = kvtune("restore", cwd=in_tmp)
        assert r.returncode == 0, r.stderr + r.stdout
        assert "tcp_autocorking" in r.stdout
    else:
        assert p.returncode == 130, p.stderr.read() if p.stderr else ""
    assert autocork.read_text().strip() == before
    assert not cpu_cgroups()
    assert not default_path().exists()
    assert wait_for(lambda: not Path(f"/proc/{server_pid}").exists()
                     or Path(f"/proc/{server_pid}/stat").read_text().split()[2] == "Z", 5)
    r = kvtune("restore", cwd=in_tmp)
    assert r.returncode == 0 and "Nothing to restore" in r.stdout


@pytest.mark.parallel  # the server refuses the configuration: nothing measured, no host knob
def test_a_failing_configuration_fails_the_trial_with_stderr(in_tmp: Path, kvload_bin: str,
                                                             memcached_bin: str) -> None:
    # An inline knob: a catalog override may only narrow the catalog's choices (issue 10).
    spec = study_file(in_tmp, "bad", knobs="  - name: my.item_size\n"
                                           "    domain: {type: categorical,"
                                           " choices: ['1m', '100']}\n"
                                           "    default: '1m'\n"
                                           "    applier: {memcached_flag: '-I'}\n")
    r = kvtune("run", str(spec), "--set", "my.item_size=100", "--repetitions", "1",
               cwd=in_tmp)
    assert r.returncode == 1
    assert "memcached exited with code" in r.stdout + r.stderr
    assert "Item max size cannot be less than" in r.stdout  # the server's own stderr


@pytest.mark.parallel  # refused before the server starts: nothing measured, no host knob
def test_port_taken_stops_the_study(in_tmp: Path, kvload_bin: str, memcached_bin: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        spec = study_file(in_tmp, "port", port=port)
        r = kvtune("tune", str(spec), cwd=in_tmp)
    assert r.returncode == 3  # a harness fault
    assert f"port {port} on 127.0.0.1 is taken by another process" in r.stderr


def test_saturated_baseline_stops_before_the_search(in_tmp: Path, kvload_bin: str,
                                                    memcached_bin: str) -> None:
    spec = study_file(in_tmp, "sat", rate=2_000_000, knobs="  - memcached.threads\n")
    r = kvtune("tune", str(spec), cwd=in_tmp)
    assert r.returncode == 2, r.stderr
    # At 2M req/s one client thread fills its CPU before memcached does: either verdict
    # means this workload cannot measure the configuration.
    assert "most of the baseline's repetitions" in r.stderr
    assert "saturated" in r.stderr or "client_bound" in r.stderr
    # The advice follows the cause measured (issue 44): the client's limit, pipelining;
    # an overloaded server, a rate below its capacity.
    if "client_bound" in r.stderr:
        assert "pipelining" in r.stderr
    if "saturated" in r.stderr:
        assert "open-loop rate below capacity" in r.stderr
    data = show(spec, in_tmp)
    assert [t["kind"] for t in data["trials"]] == ["baseline"]


@pytest.mark.skipif(os.geteuid() != 0, reason="host knobs need root")
def test_tune_killed_mid_trial_then_restore(in_tmp: Path, kvload_bin: str,
                                            memcached_bin: str) -> None:
    """`kvtune tune` SIGKILLed while a search trial runs with a changed host knob."""
    autocork = Path("/proc/sys/net/ipv4/tcp_autocorking")
    before = autocork.read_text().strip()
    # 1 s windows: a trial holds the changed knob for over a second, long enough for the
    # 50 ms poll below to see it and kill inside it; the resumed study's trials are what is
    # checked, not their figures.
    spec = study_file(in_tmp, "tunekill", trials=4, sampler="grid", duration="1s",
                      knobs="  - net.ipv4.tcp_autocorking\n")
    p = subprocess.Popen([sys.executable, "-m", "kvtune", "tune", str(spec)], cwd=in_tmp,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: autocork.read_text().strip() != before
                         and journal_has_process(), timeout=120), "no trial changed the knob"
        p.kill()
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert autocork.read_text().strip() != before
    r = kvtune("restore", cwd=in_tmp)
    assert r.returncode == 0, r.stderr + r.stdout
    assert autocork.read_text().strip() == before
    assert not default_path().exists()
    # The study resumes afterwards: the interrupted trial is failed and queued again.
    r = kvtune("tune", str(spec), "--no-confirm", cwd=in_tmp)
    assert r.returncode == 0, r.stderr + r.stdout
    data = show(spec, in_tmp)
    assert any(t["state"] == "FAIL" for t in data["trials"])
    assert sum(1 for t in data["trials"] if t["kind"] == "baseline") == 1
