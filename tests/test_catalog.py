"""Every catalog entry checked on this host: it exists and round-trips a write of its
current value (through the journal), or it is reported unavailable for the reason that
applies. Application knobs are checked against the real servers."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.servers import running

from kvtune.host.cgroup import ServerCgroup
from kvtune.host.journal import Journal
from kvtune.kinds.memcached.appliers import memcached_argv_options
from kvtune.kinds.memcached.target import MemcachedTarget
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import ApplyEnv, HostContext, Launch
from kvtune.knobs.appliers.cgroup import CpuQuota, CpusetCpus, host_cpus
from kvtune.knobs.catalog import check_rules
from kvtune.knobs.knob import Knob
from kvtune.knobs.rules import RULES
from kvtune.spec import TargetSpec, parse_cpus
from kvtune.targets import host_context

# Why a host knob may be missing here; anything else is a catalog bug.
REASONS = ("debugfs is not mounted", "absent on kernel", "does not exist", "is read-only",
           "EPERM")


def ctx() -> HostContext:
    return host_context()


def _other_value(knob: Knob, current: Any) -> Any:
    """A valid value of `knob` other than `current`, as close to it as the domain allows
    (so that the host is disturbed as little as possible for the moment it is set)."""
    d = knob.domain
    if d.type == "bool":
        return not current
    candidates = [v for v in (*d.choices, *d.special, *d.grid(8)) if d.contains(v)]
    if d.type in ("int", "float"):
        step = d.step or 1
        candidates += [current - step, current + step]
    others = [v for v in candidates if d.contains(v) and str(v) != str(current)]
    assert others, f"{knob.name}: no value other than {current!r} in {d.describe()}"
    if d.type in ("int", "float"):
        return min(others, key=lambda v: abs(float(v) - float(current)))
    return others[0]


@pytest.mark.integration  # writes to the host (put back afterwards)
@pytest.mark.parametrize("name", [k.name for k in catalog.CATALOG.values() if k.scope == "host"])
def test_host_knob_round_trips_or_says_why(name: str) -> None:
    """Each available host knob takes a value other than the host's (read back through the
    knob), and the journal puts the host's value back."""
    knob = catalog.CATALOG[name]
    c = ctx()
    a = knob.applier.check(c)
    if not a.ok:
        assert any(r in a.reason for r in REASONS), a.reason
        return
    current = a.current
    assert current is not None
    value: Any = bool(current) if knob.domain.type == "bool" else current
    assert knob.domain.contains(value), f"the host's {current!r} is outside " \
                                        f"{knob.domain.describe()}"
    other = _other_value(knob, value)
    with Journal() as j:
        knob.applier.apply(other, ApplyEnv(j, Launch(), c))
        got = knob.applier.current(c)
        assert got != current and str(got) == knob.applier.format(other), (other, got)
    assert knob.applier.current(c) == current


def test_scheduler_knobs_on_this_kernel_say_why() -> None:
    c = ctx()
    kv = c.facts.kernel_version
    for name in ("sched.latency_ns", "sched.wakeup_granularity_ns", "sched.min_granularity_ns"):
        a = catalog.CATALOG[name].applier.check(c)
        if kv >= (6, 6):
            assert not a.ok and f"absent on kernel {kv[0]}.{kv[1]}" in a.reason
            assert "EEVDF" in a.reason or "base_slice" in a.reason
    base = catalog.CATALOG["sched.base_slice_ns"].applier.check(c)
    if kv >= (6, 6) and not Path("/sys/kernel/debug/sched").exists():
        # Not mounted: judged as a private mount namespace sees the file (EPERM here).
        from kvtune.host.debugfs import debugfs_file

        probed = debugfs_file("/sys/kernel/debug/sched/base_slice_ns")
        assert base.ok == probed.writable
        assert base.ok or (base.reason == probed.reason and "not mounted" not in base.reason)


def test_case_study_names_map_to_catalog_knobs() -> None:
    for alias, name in catalog.ALIASES.items():
        assert name in catalog.CATALOG, alias
        knob = catalog.lookup(alias)
        assert knob is not None and knob.name == name
    knob = catalog.lookup("kernel.sched_wakeup_granularity_ns")
    assert knob is not None
    a = knob.applier.check(ctx())
    if ctx().facts.kernel_version >= (6, 6):
        assert not a.ok and "EEVDF" in a.reason


def test_excluded_foot_guns_are_not_in_the_catalog() -> None:
    for name in catalog.EXCLUDED:
        assert catalog.lookup(name) is None


@pytest.mark.integration  # starts unshare -n
@pytest.mark.parallel  # a fresh network namespace read, nothing written to the host
def test_per_netns_tags_match_this_kernel() -> None:
    """A knob tagged netns:per is visible in a fresh network namespace; netns:init is not."""
    out = subprocess.run(["unshare", "-n", "sh", "-c", "cd /proc/sys && find net -type f"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {out.stderr.strip()}")
    visible = {p.replace("/", ".") for p in out.stdout.split()}
    for k in catalog.CATALOG.values():
        if catalog.PER_NS in k.tags and catalog.CATALOG[k.name].applier.check(ctx()).ok:
            assert k.name in visible, k.name
        if catalog.INIT_NS in k.tags:
            assert k.name not in visible, k.name


@pytest.mark.integration  # writes to the host (put back afterwards)
def test_cgroup_knobs_round_trip_in_a_cgroup_kvtune_creates() -> None:
    c = ctx()
    for name in ("placement.cpu_quota_pct", "placement.cpu_period_us", "placement.cpuset"):
        a = catalog.CATALOG[name].applier.check(c)
        assert a.ok, (name, a.reason)
    with Journal() as j:
        cg = ServerCgroup(j, {"cpu", "cpuset"}, mode=c.facts.cgroup)
        cg.create()
        launch = Launch(params={"placement.cpu_period_us": 50_000})
        env = ApplyEnv(j, launch, c)
        CpuQuota().apply(150, env)
        CpusetCpus().apply(catalog.CATALOG["placement.cpuset"].domain.choices[-1], env)
        for (controller, filename), value in launch.cgroup_files.items():
            cg.write(controller, filename, value)
        d = cg.dirs["cpu"]
        cpus = str(catalog.CATALOG["placement.cpuset"].domain.choices[-1])
        if c.facts.cgroup in ("v1", "hybrid"):
            assert (d / "cpu.cfs_period_us").read_text().strip() == "50000"
            assert (d / "cpu.cfs_quota_us").read_text().strip() == "75000"
            back = ("cpu.cfs_quota_us", "-1")
        else:
            assert c.facts.cgroup == "v2", c.facts.cgroup
            assert (d / "cpu.max").read_text().strip() == "75000 50000"
            back = ("cpu.max", "max 50000")
        assert set(parse_cpus((cg.dirs["cpuset"] / "cpuset.cpus").read_text().strip())) == \
            set(parse_cpus(cpus))
        # Back to unlimited: the quota round-trips too.
        cg.write("cpu", "cpu.cfs_quota_us", "-1")
        assert (d / back[0]).read_text().strip() == back[1]
        made = cg.unique_dirs()
        assert all(p.is_dir() for p in made)
    assert made and not any(p.exists() for p in made)


def test_placement_choices_come_from_this_host() -> None:
    cpus = set(host_cpus())
    for name in ("placement.cpuset", "placement.server_cpus"):
        choices = catalog.CATALOG[name].domain.choices
        assert choices
        for ch in choices:
            assert set(parse_cpus(str(ch))) <= cpus
        assert any(set(parse_cpus(str(ch))) == cpus for ch in choices)
    assert catalog.CATALOG["placement.cpu_quota_pct"].domain.high == 100 * len(cpus)


# -- application knobs against the real servers ---------------------------------------------


@contextlib.contextmanager
def running_memcached(binary: str, words: list[str]) -> Iterator[MemcachedTarget]:
    """memcached with these extra words on a free loopback port, through kvtune's target
    layer (the same start, readiness wait and stop as a study's)."""
    target = MemcachedTarget(TargetSpec(kind="memcached", binary=binary, args=words))
    server = target.start(Launch())
    try:
        yield target
    finally:
        target.stop(server)


def _memcached_argv(config: dict[str, Any]) -> list[str]:
    launch = Launch()
    env = ApplyEnv(None, launch, ctx())
    for name, value in config.items():
        catalog.CATALOG[name].applier.apply(value, env)
    return launch.flags + memcached_argv_options(launch.options)


def test_every_memcached_knob_starts_memcached_at_its_default(memcached_bin: str) -> None:
    knobs = [k for k in catalog.for_target("memcached") if k.target == "memcached"]
    avail = {k.name: k.default for k in knobs if k.applier.check(ctx()).ok}
    missing = {k.name: k.applier.check(ctx()).reason for k in knobs if k.name not in avail}
    if ctx().versions["memcached"] < (1, 6, 40):
        assert "memcached.worker_logbuf_size" in missing
    assert set(missing) <= {"memcached.worker_logbuf_size"}, missing
    argv = _memcached_argv(avail)
    assert "worker_logbuf_size" not in " ".join(argv)
    with running_memcached(memcached_bin, argv) as mc:
        s = mc.raw_stats("settings")
        assert s["num_threads"] == "4" and s["maxbytes"] == str(64 * 1024 * 1024)
        assert s["growth_factor"] == "1.25" and s["hashpower_init"] == "16"
        assert s["slab_chunk_max"] == str(512 * 1024)  # bytes on every version's stats


TUNED_MC: dict[str, Any] = {
    "memcached.threads": 2, "memcached.memory_mb": 128, "memcached.max_connections": 512,
    "memcached.growth_factor": 1.5, "memcached.min_item_bytes": 64, "memcached.backlog": 512,
    "memcached.reqs_per_event": 50, "memcached.protocol": "ascii",
    "memcached.max_item_size": "2m", "memcached.disable_cas": True,
    "memcached.hashpower": 18, "memcached.no_hashexpand": True,
    "memcached.hash_algorithm": "xxh3", "memcached.maxconns_fast": False,
    "memcached.slab_reassign": True, "memcached.slab_automove": 2,
    "memcached.slab_automove_ratio": 0.5, "memcached.slab_automove_window": 20,
    "memcached.slab_chunk_max": 256, "memcached.lru_crawler": False,
    "memcached.lru_crawler_sleep": 200, "memcached.lru_maintainer": True,
    "memcached.hot_lru_pct": 30, "memcached.warm_lru_pct": 30, "memcached.temporary_ttl": 30,
    "memcached.idle_timeout": 600, "memcached.modern": True,
}
EXPECT_MC = {"num_threads": "2", "maxconns": "512", "growth_factor": "1.50",
             "chunk_size": "64", "tcp_backlog": "512", "reqs_per_event": "50",
             "binding_protocol": "ascii", "item_size_max": str(2 * 1024 * 1024),
             "cas_enabled": "no", "hashpower_init": "18", "hash_algorithm": "xxh3",
             "maxconns_fast": "no", "slab_reassign": "yes", "slab_automove": "2",
             "slab_automove_ratio": "0.50", "slab_automove_window": "20",
             "slab_chunk_max": str(256 * 1024), "lru_crawler": "no",
             "lru_crawler_sleep": "200", "lru_maintainer_thread": "yes", "hot_lru_pct": "30",
             "warm_lru_pct": "30", "temp_lru": "yes", "temporary_ttl": "30",
             "idle_timeout": "600"}


def test_memcached_knobs_take_effect(memcached_bin: str) -> None:
    """Every non-default value shows in `stats settings`: the flags really are applied
    (A-Tune's sed lines never applied -b and -R)."""
    assert check_rules(TUNED_MC, ctx()) is None
    with running_memcached(memcached_bin, _memcached_argv(TUNED_MC)) as mc:
        s = mc.raw_stats("settings")
        wrong = {k: (s.get(k), v) for k, v in EXPECT_MC.items() if s.get(k) != v}
        assert not wrong, wrong


def test_slab_chunk_max_unit_matches_the_binary(memcached_bin: str) -> None:
    argv = _memcached_argv({"memcached.slab_chunk_max": 128})
    if ctx().versions["memcached"] < (1, 6, 24):
        assert argv == ["-o", f"slab_chunk_max={128 * 1024}"]
    else:
        assert argv == ["-o", "slab_chunk_max=128"]


def resp(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        out += f"${len(a.encode())}\r\n{a}\r\n".encode()
    return out


def redis_call(port: int, *args: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(resp(*args))
        time.sleep(0.05)
        return s.recv(65536).decode(errors="replace")


@pytest.mark.integration  # starts redis-server --port
@pytest.mark.parallel  # its own servers' CONFIG GET/SET: nothing measured, no host knob
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_every_directive_and_its_live_flag(kind: str, tmp_path: Path,
                                          request: pytest.FixtureRequest) -> None:
    """Each directive of a Redis-like kind (Redis 7, Valkey 8) starts the server at the
    catalog's default, which is the server's own built-in value (CONFIG GET of a server
    started without it); CONFIG SET succeeds exactly for the directives the catalog calls
    live."""
    binary = request.getfixturevalue(f"{kind}_bin")
    knobs = [k for k in catalog.for_target(kind) if k.target == kind]
    assert knobs and all(k.name.startswith(f"{kind}.") for k in knobs)
    missing = {k.name: k.applier.check(ctx()).reason for k in knobs
               if not k.applier.check(ctx()).ok}
    assert set(missing) <= {f"{kind}.activedefrag"}, missing
    if missing:
        assert "build" in missing[f"{kind}.activedefrag"]
    avail = [k for k in knobs if k.name not in missing]
    # The catalog's defaults are the server's: read them from one started without them
    # (save is kvtune's benchmark setting, said in the export's SERVER_DEFAULTS).
    with running(kind, cwd=tmp_path, binary=binary) as server:
        port = server.port
        for k in avail:
            d = k.applier.directive  # type: ignore[attr-defined]
            if d == "save":
                continue
            got = redis_call(port, "CONFIG", "GET", d).split("\r\n")
            value = got[4] if len(got) > 4 else None
            want = k.applier.format(k.default)  # type: ignore[arg-type]
            assert value == want.removesuffix("mb") or (
                want.endswith("mb") and value == str(int(want[:-2]) << 20)), (d, value, want)
    launch = Launch()
    env = ApplyEnv(None, launch, ctx())
    for k in avail:
        k.applier.apply(k.default, env)  # type: ignore[arg-type]
    extra = [w for d, v in launch.options.items() for w in (f"--{d}", v)]
    with running(kind, extra, cwd=tmp_path, binary=binary) as server:
        port = server.port
        for k in avail:
            d = k.applier.directive  # type: ignore[attr-defined]
            got = redis_call(port, "CONFIG", "GET", d)
            assert d in got, (d, got)
            answer = redis_call(port, "CONFIG", "SET", d, k.applier.format(k.default))  # type: ignore[arg-type]
            if k.restart:
                assert answer.startswith("-") and "immutable" in answer, (d, answer)
            else:
                assert answer.startswith("+OK"), (d, answer)


# -- rules and presets --------------------------------------------------------------------


@pytest.mark.parametrize(("config", "rule"), [
    ({"memcached.slab_chunk_max": 512, "memcached.max_item_size": "512k"},
     "memcached-slab-chunk-max"),
    ({"memcached.max_item_size": "4m", "memcached.memory_mb": 4}, "memcached-item-size-memory"),
    ({"memcached.hot_lru_pct": 50, "memcached.warm_lru_pct": 40}, "memcached-lru-segments"),
    ({"memcached.temporary_ttl": 10, "memcached.lru_maintainer": False},
     "memcached-temporary-ttl"),
    ({"memcached.large_pages": True, "thp.enabled": "never"}, "memcached-large-pages-thp"),
    ({"redis.io_threads": 3, "placement.server_cpus": "0-1"}, "redis-io-threads-cpus"),
    ({"sched.wakeup_granularity_ns": 4_000_000, "sched.latency_ns": 6_000_000},
     "cfs-wakeup-preemption"),
    ({"placement.cpu_quota_pct": 300, "placement.cpuset": "0"}, "placement-quota-cpuset"),
    ({"placement.server_cpus": "0-1", "placement.cpuset": "1"}, "placement-pin-inside-cpuset"),
    ({"vm.dirty_ratio": 10, "vm.dirty_background_ratio": 20}, "vm-dirty-ratios"),
])
def test_rules_refuse_invalid_combinations(config: dict[str, Any], rule: str) -> None:
    msg = check_rules(config, ctx())
    assert msg is not None and f"rule {rule}" in msg


def test_rules_pass_valid_combinations_and_can_be_relaxed() -> None:
    c = ctx()
    assert check_rules({"memcached.slab_chunk_max": 256, "memcached.max_item_size": "1m"},
                       c) is None
    assert check_rules({"redis.io_threads": 2, "placement.server_cpus": "0-1"}, c) is None
    assert check_rules({"sched.wakeup_granularity_ns": 2_000_000,
                        "sched.latency_ns": 6_000_000}, c) is None
    off = {"sched.wakeup_granularity_ns": 40_000_000, "sched.latency_ns": 6_000_000}
    assert check_rules(off, c, relax=["cfs-wakeup-preemption"]) is None


@pytest.mark.integration  # starts redis-server to check a preset
@pytest.mark.parallel  # a version probe: nothing measured, no host knob
def test_presets() -> None:
    app = catalog.preset_names("memcached-app", ctx())
    assert app == ["memcached.memory_mb", "memcached.max_connections", "memcached.growth_factor",
                   "memcached.min_item_bytes", "memcached.backlog", "memcached.threads",
                   "memcached.reqs_per_event"]
    knobs = {k.name: k for k in catalog.preset_knobs("memcached-app", ctx())}
    assert knobs["memcached.threads"].domain.describe() == "[4, 16] step 4"
    assert knobs["memcached.memory_mb"].domain.describe() == "[1024, 10240] step 1024"
    for k in knobs.values():
        assert k.default is not None and catalog.CATALOG[k.name].domain.contains(k.default)
    for preset in ("memcached-full", "redis-throughput", "placement"):
        names = catalog.preset_names(preset, ctx())
        assert names
        for n in names:
            assert catalog.CATALOG[n].applier.check(ctx()).ok, (preset, n)
    full = catalog.preset_names("memcached-full", ctx())
    assert set(app) <= set(full) and any(n.startswith("net.") for n in full)
    assert re.search(r"thp\.|kernel\.", " ".join(full))


def test_docs_list_every_knob_and_rule() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "knobs.md").read_text()
    for name in catalog.CATALOG:
        assert f"`{name}`" in text, f"docs/knobs.md misses {name}"
    for rule in RULES:
        assert f"`{rule.name}`" in text, f"docs/knobs.md misses rule {rule.name}"
