"""The checks behind issue 10, one by one: host paths resolved before the deny-list, the
allow-lists of server and kvload flags, catalog bounds, the binary probe, storage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvtune.errors import HarnessError, UserError
from kvtune.host.facts import collect
from kvtune.host.fs import HostFS
from kvtune.kinds.memcached.appliers import MemcachedFlag, MemcachedOption
from kvtune.kinds.memcached.target import MemcachedTarget
from kvtune.kinds.redis.target import RedisTarget
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.appliers.hostfile import HostFile, Location
from kvtune.knobs.resolve import resolve_knobs
from kvtune.load.kvload import KvloadDriver
from kvtune.safety.binary import find_server_binary
from kvtune.safety.hostpaths import refusal, resolve
from kvtune.safety.storage import check_url, mask
from kvtune.study.inline import check_inline_host_knobs
from kvtune.study.loader import parse_study

HEAD = "study: x\ntarget: {kind: memcached}\nload: {rate: 10}\nknobs:\n"


def _fake_tree(root: Path) -> None:
    (root / "sys/kernel/mm").mkdir(parents=True)
    (root / "sys/kernel/mm/knob").write_text("1\n")
    (root / "etc").mkdir()
    (root / "etc/secret").write_text("password\n")
    (root / "sys/kernel/mm/out").symlink_to(root / "etc/secret")
    (root / "sys/kernel/mm/in").symlink_to(root / "sys/kernel/mm/knob")
    (root / "sys/power").mkdir()
    (root / "sys/power/state").write_text("mem\n")
    (root / "sys/kernel/mm/sleep").symlink_to(root / "sys/power/state")


def test_host_paths_are_resolved_before_they_are_judged(tmp_path: Path) -> None:
    _fake_tree(tmp_path)
    assert resolve(tmp_path / "sys/kernel/mm/in", tmp_path) == "/sys/kernel/mm/knob"
    with pytest.raises(ValueError, match="outside /proc/sys and /sys"):
        resolve(tmp_path / "sys/kernel/mm/out", tmp_path)
    with pytest.raises(ValueError, match="resolved to /sys/power/state"):
        resolve(tmp_path / "sys/kernel/mm/sleep", tmp_path)


def test_a_host_file_that_resolves_outside_is_never_read(tmp_path: Path) -> None:
    _fake_tree(tmp_path)
    ctx = HostContext(collect(), fs=HostFS(tmp_path))
    out = HostFile([Location("/sys/kernel/mm/out")])
    a = out.check(ctx)
    assert not a.ok and "outside" in a.reason and a.current is None
    assert "password" not in a.reason
    assert out.current(ctx) is None
    ok = HostFile([Location("/sys/kernel/mm/in")]).check(ctx)
    assert ok.ok and ok.current == 1


def test_no_catalog_host_file_is_on_the_deny_list() -> None:
    for k in catalog.CATALOG.values():
        if isinstance(k.applier, HostFile):
            for loc in k.applier.locations:
                assert refusal(loc.path) is None, (k.name, loc.path)


def test_the_idle_state_switches_are_allowed_and_nothing_else_of_a_cpu() -> None:
    """cpu.idle_disable writes cpuN/cpuidle/stateK/disable inside the CPU devices that
    /sys/bus/cpu links to (denied whole): those files, and only those, are writable."""
    for p in ("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable",
              "/sys/devices/system/cpu/cpu1/cpuidle/state0/disable"):
        assert refusal(p) is None, p
    for p in ("/sys/devices/system/cpu/cpu0/online",
              "/sys/devices/system/cpu/cpu0/cpuidle/state1/x",
              "/sys/devices/system/cpu/cpu0/cpuidle/state1/disable/x",
              "/sys/devices/system/cpu/cpu0/cpuidle/state1/disablex"):
        assert refusal(p) is not None, p


@pytest.mark.parametrize("path", [
    "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hotplug",
    "/sys/kernel/uevent_helper", "/proc/sys/kernel/poweroff_cmd", "/sys/power/state",
    "/proc/sys/kernel/sysrq", "/sys/devices/pci0000:00/0000:00:01.0/remove",
    "/sys/bus/pci/drivers/virtio-pci/unbind", "/sys/block/sda/device/delete",
    "/proc/sys/fs/binfmt_misc/register", "/sys/devices/system/cpu/cpu1/online",
    "/proc/sys/kernel/panic_on_oops", "/sys/kernel/debug/provoke-crash/DIRECT", "/etc/passwd",
])
def test_deny_list(path: str) -> None:
    assert refusal(path) is not None


def test_inline_host_knobs_need_the_command_line_flag() -> None:
    text = HEAD + ("  - name: my.fin\n    domain: {type: int, low: 10, high: 60}\n"
                   "    applier: {sysctl: net.ipv4.tcp_fin_timeout}\n")
    spec, lines = parse_study(text)
    with pytest.raises(UserError, match=r"knobs\[0\].applier, line 7: .*--allow-inline"):
        check_inline_host_knobs(spec, lines, False, "s.yaml")
    check_inline_host_knobs(spec, lines, True, "s.yaml")


@pytest.mark.parametrize("args", [
    ["-m", "256"], ["-m", "256", "-C", "--threads=2", "-o", "modern,hashpower=20,slab_reassign"],
    ["-I", "2m", "-f", "1.25", "-B", "ascii"],
])
def test_safe_memcached_args_are_accepted(args: list[str]) -> None:
    MemcachedTarget.check_args(args)


@pytest.mark.parametrize("args", [
    ["--maxmemory", "256mb"], ["--hz", "100", "--maxmemory-policy", "allkeys-lru"],
    ["--list-max-listpack-size", "-2"],
])
def test_safe_redis_args_are_accepted(args: list[str]) -> None:
    RedisTarget.check_args(args)


@pytest.mark.parametrize(("check", "args"), [
    (MemcachedTarget.check_args, ["-t", "\u0664"]),  # ARABIC-INDIC DIGIT FOUR
    (MemcachedTarget.check_args, ["-m", "\uff16\uff14"]),  # FULLWIDTH 6 4
    (MemcachedTarget.check_args, ["-o", "hashpower=\u0661\u0666"]),
    (MemcachedTarget.check_args, ["-o", "slab_sizes=96-\u0661\u0662\u0668"]),
    (RedisTarget.check_args, ["--hz", "\u0661\u0660"]),
    (KvloadDriver.check_extra_args, ["--spin-us", "\u0665"]),
])
def test_an_argument_value_in_another_scripts_digits_is_refused(check, args: list[str]) -> None:
    """A value lands in the server's or kvload's argv, where only ASCII digits are digits
    (strtol, Redis's config parser, clap): Python's `\\d` would take any script's."""
    with pytest.raises(ValueError, match="not a valid value"):
        check(args)


def test_catalog_memcached_knobs_are_on_the_allow_lists() -> None:
    """Inline knobs and target.args can name what the catalog itself uses."""
    for k in catalog.CATALOG.values():
        a = k.applier
        if isinstance(a, MemcachedOption):
            assert a.key in MemcachedTarget.SAFE_OPTIONS, a.key
            if a.negate:
                assert a.negate in MemcachedTarget.SAFE_OPTIONS, a.negate
        elif isinstance(a, MemcachedFlag):
            assert a.flag in MemcachedTarget.SAFE_FLAGS, a.flag


def test_allow_and_deny_lists_do_not_overlap() -> None:
    assert not set(MemcachedTarget.SAFE_FLAGS) & set(MemcachedTarget.UNSAFE_FLAGS)
    assert not set(RedisTarget.SAFE_DIRECTIVES) & set(RedisTarget.UNSAFE_DIRECTIVES)


@pytest.mark.parametrize(("override", "ok"), [
    ("range: [16, 64]\n    step: 4", True), ("range: [16, 64]\n    step: 3", False),
    ("range: [2, 64]", False), ("range: [8, 2048]", False), ("range: [8, 1024]", True),
])
def test_overrides_may_narrow_never_widen(override: str, ok: bool) -> None:
    spec, lines = parse_study(HEAD + f"  - name: memcached.min_item_bytes\n    {override}\n")
    if ok:
        (k,) = resolve_knobs(spec, lines)
        base = catalog.CATALOG["memcached.min_item_bytes"].domain
        assert all(base.contains(v) for v in k.domain.grid(50))
    else:
        with pytest.raises(UserError, match=r"knobs\[0\]"):
            resolve_knobs(spec, lines)


def test_the_binary_probe(tmp_path: Path, memcached_bin: str, redis_bin: str) -> None:
    assert find_server_binary("memcached", "memcached", "memcached",
                              MemcachedTarget.version_args, MemcachedTarget.version_banner)
    assert find_server_binary(redis_bin, "redis", "redis-server", RedisTarget.version_args,
                              RedisTarget.version_banner) == redis_bin
    fake = tmp_path / "memcached"
    marker = tmp_path / "ran"
    fake.write_text(f"#!/bin/sh\necho hello\ntouch {marker}.$1\n")
    fake.chmod(0o755)
    with pytest.raises(UserError, match="not the memcached server's version banner"):
        find_server_binary(str(fake), "memcached", "memcached",
                           MemcachedTarget.version_args, MemcachedTarget.version_banner)
    assert [p.name for p in tmp_path.glob("ran.*")] == ["ran.-V"]  # only ever the probe
    with pytest.raises(UserError, match="is a directory"):
        find_server_binary(str(tmp_path), "memcached", "memcached", ("-V",), "^memcached")
    with pytest.raises(UserError, match="is not a memcached server"):
        find_server_binary("/bin/sh", "memcached", "memcached", ("-V",), "^memcached")


def test_credentials_are_masked() -> None:
    assert "hunter2" not in mask("postgresql+psycopg://kvtune:hunter2@db.example/kv")
    assert mask("postgresql+psycopg://kvtune:hunter2@db/kv").count("***") == 1
    assert mask("sqlite:///results/x.db") == "sqlite:///results/x.db"
    assert "hunter2" not in mask("garbage://a:hunter2@b:c:d/%%%")


def test_storage_rules(tmp_path: Path) -> None:
    check_url(f"sqlite:///{tmp_path}/x.db", tmp_path)  # the directory exists
    check_url("sqlite:///results/new/x.db", tmp_path)  # inside the results directory
    with pytest.raises(ValueError, match="creates directories only inside"):
        check_url(f"sqlite:///{tmp_path}/a/b/x.db", tmp_path)
    with pytest.raises(ValueError, match="under /proc"):
        check_url("sqlite:////proc/self/x.db", tmp_path)
    with pytest.raises(ValueError, match="pip install 'psycopg2-binary'"):
        check_url("postgresql+psycopg2://u:p@127.0.0.1/x", tmp_path)
    assert not list(tmp_path.iterdir())  # checking creates nothing


def test_spurious_union_message_is_gone() -> None:
    with pytest.raises(UserError) as ei:
        parse_study(HEAD + "  - name: my.x\n    colour: red\n")
    assert "valid string" not in str(ei.value)
    assert len(ei.value.problems) == 1


def test_storage_directory_is_not_created_by_parsing(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    parse_study("study: x\ntarget: {kind: synthetic}\nstorage: sqlite:///results/deep/x.db\n")
    assert not os.listdir(tmp_path)


# -- issue 29: one deny-list, judged on resolved paths, for host writes and exports ----------

@pytest.mark.parametrize("name", ["kernel.tainted", "kernel.oops_limit", "kernel.warn_limit",
                                  "net.ipv4.ip_unprivileged_port_start",
                                  "vm.overcommit_memory"])
def test_the_sysctls_added_in_round_three_are_denied(name: str) -> None:
    assert refusal("/proc/sys/" + name.replace(".", "/")) is not None


def _linked(pattern: str) -> Path:
    found = sorted(Path("/sys").glob(pattern))
    if not found:
        pytest.skip(f"no {pattern} on this host")
    return found[0]


@pytest.mark.parametrize("pattern", ["class/net/*", "bus/*/devices/*"])
def test_the_devices_behind_denied_links_are_denied(pattern: str) -> None:
    """/sys/class/net/lo is a link to /sys/devices/virtual/net/lo: naming the device
    directory (or a file in it) is refused as the link is, for a write and an export."""
    from kvtune.host.journal import check_path
    from kvtune.safety.hostpaths import export_refusal

    link = _linked(pattern)
    real = os.path.realpath(link)
    assert real.startswith("/sys/devices/")
    for p in (str(link / "x"), real + "/x", real):
        assert refusal(p) is not None, p
    attr = next((a for a in ("ifalias", "enable", "uevent", "power") if (link / a).exists()),
                None)
    if attr is not None:
        with pytest.raises(HarnessError, match="refusing to write"):
            check_path(Path(real) / attr)
        assert export_refusal("sysfs", f"{real}/{attr}") is not None
    assert export_refusal("sysctl", "kernel.tainted") is not None
    assert export_refusal("sysctl", "vm.swappiness") is None
    assert export_refusal("sysfs", "/sys/kernel/mm/transparent_hugepage/enabled") is None


def test_an_export_leaves_out_what_the_deny_list_refuses(in_tmp: Path) -> None:
    """The exporters read Recommendation.entries(), which drops a denied sysctl or sysfs
    entry with a note (a recommendation read from a shared storage is untrusted too)."""
    from kvtune.export import exporters
    from kvtune.export.base import Recommendation
    from kvtune.knobs.appliers.base import ExportEntry

    knob = catalog.lookup("vm.swappiness")
    assert knob is not None
    rec = Recommendation("x", "memcached", {"vm.swappiness": 10}, {"vm.swappiness": 60}, "t")
    orig = type(knob.applier).export_entry
    try:
        type(knob.applier).export_entry = (  # type: ignore[method-assign]
            lambda self, v, ctx: ExportEntry("sysctl", "kernel.tainted", str(v)))
        assert rec.entries("host") == []
        assert rec.refused and "kernel.tainted" in rec.refused[0], rec.refused
        assert exporters()["sysctl"].files(rec) == []
    finally:
        type(knob.applier).export_entry = orig  # type: ignore[method-assign]


def test_the_parsing_budget_is_cpu_time_not_the_hosts_wall_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A study file's parse is stopped by its own CPU time, never by a busy host: the bad-
    inputs corpus saw a 20,001-node file refused for "parsing took more than 2s" instead of
    its node count while other jobs loaded both CPUs."""
    import itertools
    import time

    import yaml

    from kvtune.safety import yamlload

    text = "\n".join(f"k{i}: {i}" for i in range(600))  # 1,201 nodes: checked 4 times
    wall = itertools.count(0.0, 10.0)  # a wall clock that jumps 10 s between reads
    monkeypatch.setattr(time, "monotonic", lambda: next(wall))
    assert len(yamlload.load(text)) == 600
    monkeypatch.setattr(yamlload, "MAX_SECONDS", -1.0)  # any CPU time is over the budget
    with pytest.raises(yaml.YAMLError, match="of CPU time"):
        yamlload.load(text)
