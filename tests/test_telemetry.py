"""Telemetry against real servers: perf stat on the server process (hardware counters when
the host has them, a clean fallback when it does not), /proc figures, CFS throttling under
a quota, memcached's slab and item digest, and Redis INFO."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtune.host.cgroup import ServerCgroup
from kvtune.host.facts import collect
from kvtune.host.journal import Journal
from kvtune.kinds.redis.target import resp_command
from kvtune.knobs.appliers.base import Launch
from kvtune.spec import TargetSpec
from kvtune.targets import make_target
from kvtune.targets.base import ServerProcess, Target
from kvtune.telemetry import Collector, Probe, collectors, is_telemetry, register, server_digest
from kvtune.telemetry.perf import PerfStat, find_perf, parse_csv

pytestmark = pytest.mark.integration
# The tests marked parallel: unpinned servers probed while this process sends them
# requests; the assertions are counts and the figures' presence (a busy CPU changes how
# many, not whether), nothing measured against a bound that needs a quiet CPU, no host knob.
# Not the two tests that make a cgroup (kvtune's cgroups are what the host guard of a test
# beside them compares).

PERF_VM = """\
# started on Sun Nov 22 05:08:22 2026

<not supported>,,cycles,0,100.00,,
<not supported>,,instructions,0,100.00,,
2509,,context-switches,698669905,100.00,3.591,K/sec
4,,cpu-migrations,698682454,100.00,5.725,/sec
0,,page-faults,698693570,100.00,0.000,/sec
698.71,msec,task-clock,698705318,100.00,0.749,CPUs utilized
"""
PERF_METAL = """\
635602955852,,cycles:u,30000,30.07,,
479554401177,,instructions:u,30000,40.02,0.75,insn per cycle
12585059799,,context-switches,1,100.00,,
"""


def test_parse_perf_without_hardware_counters() -> None:
    counts, unsupported = parse_csv(PERF_VM)
    assert unsupported == ["cycles", "instructions"]
    assert counts == {"context-switches": 2509, "cpu-migrations": 4, "page-faults": 0,
                      "task-clock": 698.71}


def test_parse_perf_with_hardware_counters_gives_ipc() -> None:
    from kvtune.telemetry.perf import PerfResult

    counts, unsupported = parse_csv(PERF_METAL)
    assert not unsupported
    m = PerfResult(counts, elapsed_s=60).metrics()
    assert m["perf_ipc"] == pytest.approx(0.7545, abs=1e-3)  # the case study's 0.75
    assert m["perf_cycles"] == 635602955852


def _memcached(args: list[str] | None = None) -> Target:
    return make_target(TargetSpec(kind="memcached", args=args or ["-m", "64"]))


def _mc_load(target: Target, seconds: float, sizes: tuple[int, ...] = (100, 5000)) -> int:
    """Sets and gets over the text protocol; returns the number of requests."""
    n = 0
    deadline = time.monotonic() + seconds
    with socket.create_connection((target.host, target.port), timeout=5) as s:
        f = s.makefile("rb")
        while time.monotonic() < deadline:
            for size in sizes:
                key = f"k{n % 500}:{size}"
                s.sendall(f"set {key} 0 0 {size}\r\n".encode() + b"x" * size + b"\r\n")
                f.readline()
                s.sendall(f"get {key} missing{n}\r\n".encode())
                while f.readline() not in (b"END\r\n", b""):
                    pass
                n += 2
    return n


@pytest.fixture
def memcached(memcached_bin: str) -> Iterator[tuple[Target, ServerProcess]]:
    t = _memcached()
    server = t.start(Launch())
    try:
        yield t, server
    finally:
        t.stop(server)


@pytest.mark.parallel
def test_probe_on_real_memcached(memcached: tuple[Target, ServerProcess]) -> None:
    target, server = memcached
    probe = Probe(server.pid)
    probe.start()
    requests = _mc_load(target, 1.0)
    tel = probe.stop()
    m = tel.metrics
    assert requests > 100
    # /proc: the server did work and switched context while serving.
    assert m["proc_user_s"] + m["proc_system_s"] > 0
    assert m["proc_voluntary_switches"] > 0
    assert m["proc_threads"] >= 4  # memcached's workers and helpers
    assert m["proc_cpu_s"] == pytest.approx(m["proc_user_s"] + m["proc_system_s"])
    assert 0 <= m["sys_idle_frac"] <= 1 and 0 <= m["steal"] < 1
    assert "throttle_quota_pct" not in m  # no quota on the server
    assert tel.raw["throttle"]["cgroup"] is None or tel.raw["throttle"]["quota_pct"] is None
    perf = tel.raw["perf"]
    if find_perf() is None:
        pytest.fail("perf is not installed: run `make setup` (make test installs linux-perf)")
    assert perf["error"] is None, perf
    assert m["perf_context_switches"] > 0
    assert m["perf_task_clock_ms"] > 0
    hw = {"cycles", "instructions"}
    if hw & set(perf["unsupported"]):
        assert "perf_ipc" not in m  # no IPC without hardware counters, and no error
    else:
        assert 0.05 < m["perf_ipc"] < 8
    assert all(is_telemetry(k) for k in m)


@pytest.mark.parallel
def test_memcached_digest_slabs_items_and_errors(memcached: tuple[Target, ServerProcess]) -> None:
    target, _ = memcached
    _mc_load(target, 0.3)
    with socket.create_connection((target.host, target.port), timeout=5) as s:
        big = 2 * 1024 * 1024  # above the 1 MB item size limit
        s.sendall(f"set huge 0 0 {big}\r\n".encode() + b"y" * big + b"\r\n")
        assert s.recv(200).startswith(b"SERVER_ERROR")
    m, raw = server_digest("memcached", target.stats())
    assert m["mc_get_hits"] > 0 and m["mc_get_misses"] > 0
    assert 0.3 < m["mc_hit_ratio"] < 0.7  # every get asks for one present and one absent key
    assert m["mc_store_too_large"] >= 1
    table = raw["slab_table"]
    with_pages = [r for r in table if r.get("total_pages", 0) > 0]
    assert len(with_pages) >= 2  # 100 B and 5 KB values live in different classes
    assert m["mc_total_pages"] == sum(r["total_pages"] for r in with_pages)
    assert all(r["chunk_size"] > 0 and "number" in r for r in with_pages)
    assert m["mc_outofmemory"] == 0


@pytest.mark.parallel
def test_memcached_evictions_under_a_small_memory_limit(memcached_bin: str) -> None:
    t = _memcached(["-m", "2"])
    server = t.start(Launch())
    try:
        _mc_load(t, 1.5, sizes=(20000,))
        m, _ = server_digest("memcached", t.stats())
    finally:
        t.stop(server)
    assert m["mc_limit_maxbytes"] == 2 * 1024 * 1024
    assert m["mc_evictions"] > 0
    assert m["mc_class_evictions"] == m["mc_evictions"]


@pytest.mark.parallel
def test_redis_info_digest(redis_bin: str) -> None:
    t = make_target(TargetSpec(kind="redis"))
    server = t.start(Launch())
    try:
        probe = Probe(server.pid)
        probe.start()
        with socket.create_connection((t.host, t.port), timeout=5) as s:
            for i in range(300):
                s.sendall(resp_command("SET", f"k{i}", "v" * 100))
                s.recv(100)
                s.sendall(resp_command("GET", f"k{i // 2}") + resp_command("GET", f"no{i}"))
                time.sleep(0)
                got = b""
                while got.count(b"\r\n") < 3 and not got.endswith(b"$-1\r\n"):
                    got += s.recv(1000)
        tel = probe.stop()
        m, raw = server_digest("redis", t.stats())
    finally:
        t.stop(server)
    assert m["redis_keyspace_hits"] >= 290 and m["redis_keyspace_misses"] >= 290
    assert 0.4 < m["redis_hit_ratio"] < 0.6
    assert m["redis_keys"] == 300
    assert m["redis_used_memory"] > 0 and m["redis_mem_fragmentation_ratio"] > 0
    assert raw["version"].startswith("7.")
    assert tel.metrics["proc_voluntary_switches"] > 0


@pytest.mark.parallel
def test_perf_missing_or_failing_falls_back_cleanly(
        memcached: tuple[Target, ServerProcess], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    target, server = memcached
    monkeypatch.setenv("KVTUNE_PERF", "off")
    probe = Probe(server.pid)
    probe.start()
    _mc_load(target, 0.2)
    tel = probe.stop()
    assert "perf not found" in tel.raw["perf"]["error"]
    assert not any(k.startswith("perf_") for k in tel.metrics)
    assert tel.metrics["proc_voluntary_switches"] > 0  # /proc still measured
    # A perf that exits at once with an error (as on a kernel without perf events).
    fake = tmp_path / "perf"
    fake.write_text("#!/bin/sh\necho 'perf_event_open: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    ps = PerfStat(server.pid, perf=str(fake))
    ps.start()
    res = ps.stop()
    assert res.counts == {} and res.error and "not permitted" in res.error
    assert res.metrics() == {}


@pytest.mark.parallel
def test_only_software_events_when_asked(memcached: tuple[Target, ServerProcess]) -> None:
    target, server = memcached
    if find_perf() is None:
        pytest.fail("perf is not installed: run `make setup` (make test installs linux-perf)")
    ps = PerfStat(server.pid, events=("context-switches", "task-clock"))
    ps.start()
    _mc_load(target, 0.3)
    res = ps.stop()
    assert set(res.counts) == {"context-switches", "task-clock"}
    assert res.metrics()["perf_cpus_utilized"] > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroup quotas need root")
def test_throttling_counted_under_a_cpu_quota(memcached_bin: str,
                                              host_unchanged: Path) -> None:
    """Measured in kvtune's own cgroup (given to the probe) and, the same figures, in the
    server's cgroup found from /proc/PID/cgroup (a cgroup kvtune did not create)."""
    t = _memcached(["-t", "2"])
    with Journal(path=host_unchanged, study="telemetry-test") as journal:
        cg = ServerCgroup(journal, {"cpu"}, mode=collect().cgroup)
        cg.create()
        cg.write("cpu", "cpu.cfs_period_us", "10000")
        cg.write("cpu", "cpu.cfs_quota_us", "2000")  # 20% of one CPU
        server = t.start(Launch(), journal, cg.unique_dirs())
        try:
            probes = [Probe(server.pid, cg), Probe(server.pid)]
            for p in probes:
                p.start()
            _mc_load(t, 1.0)
            tels = [p.stop() for p in probes]
        finally:
            t.stop(server, journal)
    for tel in tels:
        m = tel.metrics
        assert tel.raw["throttle"]["cgroup"] == str(cg.dirs["cpu"])
        assert m["throttle_quota_pct"] == pytest.approx(20.0)
        assert m["throttle_nr_periods"] > 0
        assert m["throttle_nr_throttled"] > 0
        assert 0 < m["throttle_ratio"] <= 1
        assert m["throttle_throttled_ms"] > 0
    assert [t.raw["throttle"]["kvtune_cgroup"] for t in tels] == [True, False]


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")
def test_own_cgroup_without_a_quota_is_measured(memcached_bin: str,
                                                host_unchanged: Path) -> None:
    """A study's baseline runs in kvtune's cgroup without a quota: the throttle figures are
    there (no period ran out), the quota is absent; a cgroup kvtune did not create and
    that has no quota is not measured."""
    t = _memcached()
    with Journal(path=host_unchanged, study="telemetry-test") as journal:
        cg = ServerCgroup(journal, {"cpu"}, mode=collect().cgroup)
        cg.create()
        cg.write("cpu", "cpu.cfs_quota_us", "-1")
        server = t.start(Launch(), journal, cg.unique_dirs())
        try:
            probes = [Probe(server.pid, cg), Probe(server.pid)]
            for p in probes:
                p.start()
            _mc_load(t, 0.3)
            own, found = (p.stop() for p in probes)
        finally:
            t.stop(server, journal)
    assert own.metrics["throttle_nr_throttled"] == 0
    assert "throttle_quota_pct" not in own.metrics and "throttle_ratio" not in own.metrics
    assert not any(k.startswith("throttle_") for k in found.metrics)


@pytest.mark.parallel
def test_each_figure_is_measured_by_one_collector(
        memcached: tuple[Target, ServerProcess]) -> None:
    """Collectors report only under their own prefixes, and no two share a prefix: the
    runner's former duplicates (server_cpu_s, server_*_ctxt_switches, cgroup_*,
    sys_steal_frac) are gone."""
    target, server = memcached
    probe = Probe(server.pid)
    probe.start()
    _mc_load(target, 0.3)
    tel = probe.stop()
    owners: dict[str, str] = {}
    for c in probe.collectors:
        for k in c.metrics():
            assert k.startswith(c.prefixes), (c.name, k)
            assert k not in owners, (k, owners.get(k), c.name)
            owners[k] = c.name
    assert owners.keys() == tel.metrics.keys()
    prefixes = [p for c in collectors() for p in c.prefixes]
    assert not [p for p in prefixes if any(q != p and p.startswith(q) for q in prefixes)]
    assert {"proc", "sys", "perf", "throttle"} <= {c.name for c in collectors()}
    assert not {"server_cpu_s", "server_voluntary_ctxt_switches", "sys_steal_frac",
                "cgroup_nr_periods"} & tel.metrics.keys()


@pytest.mark.parallel
def test_a_failing_collector_fails_nothing_else(memcached: tuple[Target, ServerProcess],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from kvtune.telemetry import base

    class Broken(Collector):
        name = "broken"
        prefixes = ("broken_",)

        def start(self) -> None:
            raise OSError("cannot open the counter")

        def stop(self) -> None:
            raise AssertionError("stop must not run after a failed start")

        def metrics(self) -> dict[str, float]:
            return {"broken_x": 1.0}

        def raw(self) -> dict[str, Any]:
            return {}

    monkeypatch.setattr(base, "_COLLECTORS", dict(base._COLLECTORS))
    register(Broken)
    target, server = memcached
    probe = Probe(server.pid)
    probe.start()
    _mc_load(target, 0.2)
    tel = probe.stop()
    assert tel.raw["broken"] == {"error": "OSError: cannot open the counter"}
    assert "broken_x" not in tel.metrics
    assert tel.metrics["proc_voluntary_switches"] > 0
