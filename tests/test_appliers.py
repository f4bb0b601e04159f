"""Knob resolution against fake /proc and /sys trees of other kernels (5.10, 6.1, 6.6+),
and argv building for the servers."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from kvtune.host.facts import HostFacts
from kvtune.host.fs import HostFS
from kvtune.kinds.memcached.appliers import memcached_argv_options
from kvtune.knobs.appliers.base import ApplyEnv, HostContext, Launch
from kvtune.knobs.catalog import CATALOG

SCHED_61 = ["latency_ns", "min_granularity_ns", "wakeup_granularity_ns", "migration_cost_ns",
            "nr_migrate"]
SCHED_66 = ["base_slice_ns", "migration_cost_ns", "nr_migrate"]
PROC_510 = ["sched_latency_ns", "sched_min_granularity_ns", "sched_wakeup_granularity_ns",
            "sched_migration_cost_ns", "sched_nr_migrate", "sched_autogroup_enabled"]


def fake_host(tmp_path: Path, kernel: tuple[int, int], debugfs: list[str] | None,
              proc_kernel: list[str]) -> HostContext:
    root = tmp_path / f"root-{kernel[0]}.{kernel[1]}"
    pk = root / "proc/sys/kernel"
    pk.mkdir(parents=True)
    for name in proc_kernel:
        (pk / name).write_text("1000000\n")
    if debugfs is not None:
        d = root / "sys/kernel/debug/sched"
        d.mkdir(parents=True)
        for name in debugfs:
            (d / name).write_text("3000000\n")
    thp = root / "sys/kernel/mm/transparent_hugepage"
    thp.mkdir(parents=True)
    (thp / "enabled").write_text("[always] madvise never\n")
    facts = HostFacts(f"{kernel[0]}.{kernel[1]}.0", kernel, "fake", 2, "v1", "always",
                      "eevdf" if kernel >= (6, 6) else "cfs", False)
    return HostContext(facts, HostFS(root))


def test_kernel_510_uses_proc_sys(tmp_path: Path) -> None:
    ctx = fake_host(tmp_path, (5, 10), None, PROC_510)
    for name in ("sched.migration_cost_ns", "sched.latency_ns", "sched.wakeup_granularity_ns"):
        a = CATALOG[name].applier.check(ctx)
        assert a.ok, (name, a.reason)
        assert a.current == 1000000
    assert not CATALOG["sched.base_slice_ns"].applier.check(ctx).ok
    assert "absent on kernel 5.10" in CATALOG["sched.base_slice_ns"].applier.check(ctx).reason


def test_kernel_61_uses_debugfs(tmp_path: Path) -> None:
    ctx = fake_host(tmp_path, (6, 1), SCHED_61, ["sched_autogroup_enabled"])
    for name in ("sched.migration_cost_ns", "sched.latency_ns", "sched.min_granularity_ns",
                 "sched.wakeup_granularity_ns", "sched.nr_migrate"):
        a = CATALOG[name].applier.check(ctx)
        assert a.ok, (name, a.reason)
        assert a.current == 3000000
    assert CATALOG["sched.latency_ns"].applier.resolve(ctx) == \
        "/sys/kernel/debug/sched/latency_ns"


def test_kernel_66_is_eevdf(tmp_path: Path) -> None:
    ctx = fake_host(tmp_path, (6, 6), SCHED_66, ["sched_autogroup_enabled"])
    assert CATALOG["sched.base_slice_ns"].applier.check(ctx).ok
    assert CATALOG["sched.migration_cost_ns"].applier.check(ctx).ok
    for name in ("sched.latency_ns", "sched.wakeup_granularity_ns", "sched.min_granularity_ns"):
        a = CATALOG[name].applier.check(ctx)
        assert not a.ok
        assert "absent on kernel 6.6" in a.reason and "EEVDF" in a.reason


def test_debugfs_not_mounted(tmp_path: Path) -> None:
    ctx = fake_host(tmp_path, (6, 12), None, ["sched_autogroup_enabled"])
    a = CATALOG["sched.base_slice_ns"].applier.check(ctx)
    assert not a.ok and "debugfs is not mounted" in a.reason


def test_lockdown_eperm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = fake_host(tmp_path, (6, 12), SCHED_66, ["sched_autogroup_enabled"])
    real = HostFS.read_text

    def read(self: HostFS, host_path: str, default: str | None = None) -> str:
        if "/debug/" in host_path:
            raise OSError(errno.EPERM, "Operation not permitted")
        return real(self, host_path, default)

    monkeypatch.setattr(HostFS, "read_text", read)
    a = CATALOG["sched.base_slice_ns"].applier.check(ctx)
    assert not a.ok and "EPERM" in a.reason and "lockdown" in a.reason


def test_read_only_file(tmp_path: Path) -> None:
    ctx = fake_host(tmp_path, (6, 12), SCHED_66, ["sched_autogroup_enabled"])
    p = ctx.fs.path("/proc/sys/kernel/sched_autogroup_enabled")
    p.chmod(0o444)
    a = CATALOG["kernel.sched_autogroup_enabled"].applier.check(ctx)
    assert not a.ok and "read-only" in a.reason


def test_thp_reads_bracketed_value(tmp_path: Path) -> None:
    ctx = fake_host(tmp_path, (6, 12), None, [])
    assert CATALOG["thp.enabled"].applier.current(ctx) == "always"


def test_memcached_argv_is_structural() -> None:
    launch = Launch()
    env = ApplyEnv(None, launch, HostContext(fake_facts()))
    CATALOG["memcached.threads"].applier.apply(2, env)
    CATALOG["memcached.reqs_per_event"].applier.apply(5, env)
    CATALOG["memcached.hashpower"].applier.apply(20, env)
    CATALOG["memcached.slab_reassign"].applier.apply(True, env)
    CATALOG["memcached.lru_crawler"].applier.apply(False, env)
    CATALOG["memcached.growth_factor"].applier.apply(1.1, env)
    assert launch.flags == ["-t", "2", "-R", "5", "-f", "1.1"]
    assert memcached_argv_options(launch.options) == [
        "-o", "hashpower=20,slab_reassign,no_lru_crawler"]


def test_redis_directives() -> None:
    launch = Launch()
    env = ApplyEnv(None, launch, HostContext(fake_facts()))
    CATALOG["redis.io_threads"].applier.apply(2, env)
    CATALOG["redis.io_threads_do_reads"].applier.apply(True, env)
    CATALOG["redis.maxmemory_policy"].applier.apply("allkeys-lru", env)
    assert launch.options == {"io-threads": "2", "io-threads-do-reads": "yes",
                                       "maxmemory-policy": "allkeys-lru"}


def test_memcached_version_gate() -> None:
    from kvtune.kinds.memcached.appliers import MemcachedOption

    ctx = HostContext(fake_facts(), versions={"memcached": (1, 6, 18)})
    a = MemcachedOption("worker_logbuf_size", min_version=(1, 6, 40)).check(ctx)
    assert not a.ok and "needs memcached >= 1.6.40 (this is 1.6.18)" in a.reason


def fake_facts() -> HostFacts:
    return HostFacts("6.12.0", (6, 12), "fake", 2, "v1", "madvise", "eevdf", False)


# -- the case studies' names on each kernel layout, and the memcached version traps ---------

CASE_STUDY_NAMES = ("kernel.sched_migration_cost_ns", "kernel.sched_wakeup_granularity_ns",
                    "kernel.sched_latency_ns", "kernel.sched_min_granularity_ns")


@pytest.mark.parametrize(("kernel", "debugfs", "proc", "where", "missing"), [
    ((5, 10), None, PROC_510, "/proc/sys/kernel/sched_", ()),
    ((6, 1), SCHED_61, ["sched_autogroup_enabled"], "/sys/kernel/debug/sched/", ()),
    ((6, 6), SCHED_66, ["sched_autogroup_enabled"], "/sys/kernel/debug/sched/",
     ("kernel.sched_wakeup_granularity_ns", "kernel.sched_latency_ns",
      "kernel.sched_min_granularity_ns")),
])
def test_case_study_names_resolve_per_kernel(
        tmp_path: Path, kernel: tuple[int, int], debugfs: list[str] | None, proc: list[str],
        where: str, missing: tuple[str, ...]) -> None:
    from kvtune.knobs import catalog

    ctx = fake_host(tmp_path, kernel, debugfs, proc)
    for name in CASE_STUDY_NAMES:
        knob = catalog.lookup(name)
        assert knob is not None and knob.name.startswith("sched.")
        a = knob.applier.check(ctx)
        if name in missing:
            assert not a.ok and ("EEVDF" in a.reason or "base_slice" in a.reason), a.reason
        else:
            assert a.ok, (name, a.reason)
            path = knob.applier.resolve(ctx)  # type: ignore[attr-defined]
            assert path is not None and path.startswith(where)


def test_base_slice_only_on_eevdf(tmp_path: Path) -> None:
    for kernel, debugfs in (((6, 1), SCHED_61), ((6, 6), SCHED_66)):
        ctx = fake_host(tmp_path, kernel, debugfs, ["sched_autogroup_enabled"])
        a = CATALOG["sched.base_slice_ns"].applier.check(ctx)
        assert a.ok == (kernel >= (6, 6)), a.reason


def test_round_trip_on_fake_tree_through_a_journal(tmp_path: Path) -> None:
    from kvtune.host.journal import Journal

    ctx = fake_host(tmp_path, (6, 1), SCHED_61, ["sched_autogroup_enabled"])
    knob = CATALOG["sched.wakeup_granularity_ns"]
    with Journal(tmp_path / "j.json", allowed_roots=(ctx.fs.root,)) as j:
        knob.applier.apply(5_000_000, ApplyEnv(j, Launch(), ctx))
        assert knob.applier.current(ctx) == 5_000_000
    assert knob.applier.current(ctx) == 3_000_000  # restored


@pytest.mark.parametrize(("version", "emitted"), [((1, 6, 18), "262144"), ((1, 6, 23), "262144"),
                                                  ((1, 6, 24), "256"), ((1, 6, 40), "256")])
def test_slab_chunk_max_unit_by_version(version: tuple[int, ...], emitted: str) -> None:
    launch = Launch()
    ctx = HostContext(fake_facts(), versions={"memcached": version})
    CATALOG["memcached.slab_chunk_max"].applier.apply(256, ApplyEnv(None, launch, ctx))
    assert launch.options == {"slab_chunk_max": emitted}


def test_worker_logbuf_size_is_never_emitted_before_1_6_40() -> None:
    from kvtune.errors import UserError

    knob = CATALOG["memcached.worker_logbuf_size"]
    old = HostContext(fake_facts(), versions={"memcached": (1, 6, 39)})
    with pytest.raises(UserError, match=r"1\.6\.40"):
        knob.applier.apply(64, ApplyEnv(None, Launch(), old))
    launch = Launch()
    new = HostContext(fake_facts(), versions={"memcached": (1, 6, 40)})
    knob.applier.apply(64, ApplyEnv(None, launch, new))
    assert launch.options == {"worker_logbuf_size": "64"}


def test_large_pages_refused_while_thp_never(tmp_path: Path) -> None:
    """-L under THP `never` is refused by the one rule, reading the host's THP mode when the
    configuration does not set thp.enabled; -L alone is an ordinary flag."""
    from kvtune.knobs.catalog import check_rules

    ctx = fake_host(tmp_path, (6, 12), None, [])
    (ctx.fs.path("/sys/kernel/mm/transparent_hugepage/enabled")).write_text(
        "always madvise [never]\n")
    msg = check_rules({"memcached.large_pages": True}, ctx)
    assert msg is not None and "rule memcached-large-pages-thp" in msg
    assert check_rules({"memcached.large_pages": False}, ctx) is None
    assert check_rules({"memcached.large_pages": True, "thp.enabled": "madvise"}, ctx) is None
    launch = Launch()
    CATALOG["memcached.large_pages"].applier.apply(True, ApplyEnv(None, launch, ctx))
    assert launch.flags == ["-L"]


def test_no_hashexpand_and_temporary_ttl_forms() -> None:
    launch = Launch()
    env = ApplyEnv(None, launch, HostContext(fake_facts()))
    CATALOG["memcached.no_hashexpand"].applier.apply(False, env)  # 1.6 has no `hashexpand`
    CATALOG["memcached.temporary_ttl"].applier.apply(0, env)  # 0 = no TEMP LRU: left out
    CATALOG["memcached.modern"].applier.apply(False, env)
    assert launch.options == {"no_modern": ""}


def test_quota_follows_the_period() -> None:
    launch = Launch(params={"placement.cpu_period_us": 20_000})
    CATALOG["placement.cpu_quota_pct"].applier.apply(50, ApplyEnv(None, launch,
                                                                  HostContext(fake_facts())))
    assert launch.cgroup_files == {("cpu", "cpu.cfs_period_us"): "20000",
                                   ("cpu", "cpu.cfs_quota_us"): "10000"}
