"""`kvtune export`, tested with the real consumers of each file on this host:

- sysctl.d: `sysctl --dry-run -p` parses it, `sysctl -p` applies it and the rollback (after
  removing the drop-in) puts every value back;
- TuneD: its profile loader (with the `include=` of the recommended profile) and its sysctl
  and vm plugins in verify mode, without the daemon;
- systemd: `systemd-analyze verify` with Debian's memcached.service / redis-server.service
  and the drop-in;
- memcached: started through Debian's systemd-memcached-wrapper with the exported conf,
  `stats settings` compared; the rollback gives memcached's own defaults, or the --from file;
- redis-server: the include, then CONFIG GET; the rollback included after it gives Redis's
  built-in defaults (a redis-server started without a file).

The export is the measured configuration whole (target.args, pinning), the rollbacks live
under rollback/ only, and no recommendation means exit 1 unless --best-in-search."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.servers import Server, mc_settings, running
from support.studies import (
    HOST_NOW,
    MC_BASE,
    MC_REC,
    REDIS_BASE,
    REDIS_REC,
    SYSCTLS,
    files_under,
    make_study,
    run_cli,
)

from kvtune.errors import UserError
from kvtune.export import NoRecommendation, Recommendation, recommendation, write
from kvtune.export import tuned as tuned_export
from kvtune.host.facts import HostFacts
from kvtune.host.fs import HostFS
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import HostContext
from kvtune.store import Store
from kvtune.targets import host_context

# Each export is checked by its real consumer (sysctl, TuneD, systemd-analyze, memcached,
# redis-server), and export itself asks tuned-adm which profile the host runs. The tests
# marked parallel: stored studies, files read by their consumers, servers started only to
# read their settings (nothing measured, no host knob written); not the two that apply a
# sysctl.d file to the host.
pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)

# -- what is exported --------------------------------------------------------------------


@pytest.mark.parallel
def test_no_significant_recommendation_exits_1(in_tmp: Path) -> None:
    url = make_study(in_tmp, "nosig", "memcached", MC_BASE, MC_REC, confirmed=False)
    assert run_cli(["export", "nosig", "--storage", url]) == 1
    assert not (in_tmp / "export").exists()
    assert run_cli(["export", "nosig", "--storage", url, "--best-in-search",
                    "--format", "sysctl"]) == 0
    text = (in_tmp / "export/nosig/sysctl.d/90-kvtune-nosig.conf").read_text()
    assert "NOT confirmed" in text and f"net.core.somaxconn = {MC_REC['net.core.somaxconn']}" \
        in text


@pytest.mark.parallel
def test_export_refuses_etc_and_unknown_formats(in_tmp: Path) -> None:
    url = make_study(in_tmp, "etc", "memcached", MC_BASE, MC_REC, confirmed=True)
    assert run_cli(["export", "etc", "--storage", url, "-o", "/etc/kvtune-test"]) == 2
    assert not Path("/etc/kvtune-test").exists()
    assert run_cli(["export", "etc", "--storage", url, "--format", "ini"]) == 2


@pytest.fixture
def mc_export(in_tmp: Path) -> Path:
    url = make_study(in_tmp, "mc", "memcached", MC_BASE, MC_REC, confirmed=True,
                     args=["-m", "256", "-c", "2048"], cpus="0")
    write(recommendation(Store(url), "mc"), ["sysctl", "tuned", "memcached", "systemd",
                                             "redis"], in_tmp / "out")
    return in_tmp / "out"


@pytest.mark.parallel
def test_the_measured_configuration_whole_with_its_header(mc_export: Path) -> None:
    conf = (mc_export / "memcached/memcached.conf").read_text()
    # The fixed server arguments, and the pinning in the drop-in.
    assert re.search(r"^-m 256$", conf, re.M) and re.search(r"^-c 2048$", conf, re.M)
    assert re.search(r"^-t 2$", conf, re.M)
    drop_in = (mc_export / "systemd/memcached.service.d/90-kvtune.conf").read_text()
    assert re.search(r"^CPUAffinity=0$", drop_in, re.M)
    assert re.search(r"^CPUQuota=150%$", drop_in, re.M)
    from kvtune import __version__

    for f in ("memcached/memcached.conf", "systemd/memcached.service.d/90-kvtune.conf",
              "sysctl.d/90-kvtune-mc.conf", "tuned/kvtune-mc/tuned.conf"):
        text = (mc_export / f).read_text()
        assert f"kvtune {__version__}, study 'mc'" in text, f
        assert "+20.0% (95% CI +12.0% … +27.0%)" in text, f
        assert "closed-loop, 16 connections, pipeline 1, mix get:9,set:1" in text, f
        assert "memcached -m 256 -c 2048 pinned to CPUs 0" in text, f
    # Unchanged knobs are not exported (memcached.large_pages stays at its default).
    assert "-L" not in conf.replace("# ", "")


@pytest.mark.parallel
def test_rollbacks_live_under_rollback_only(mc_export: Path) -> None:
    files = files_under(mc_export)
    outside = [f for f in files if not f.startswith("rollback/")]
    assert not [f for f in outside if "rollback" in f], files
    # Copying a recommendation's folder never brings a rollback; sysctl.d ignores the suffix.
    assert "rollback/sysctl.d/90-kvtune-mc.conf.rollback" in files
    assert "rollback/systemd/memcached.service.d/90-kvtune.conf.remove.sh" in files
    assert "rollback/memcached/memcached.conf" in files
    # TuneD undoes a profile on switch: no rollback profile.
    assert not [f for f in files if f.startswith(("tuned/", "rollback/tuned"))
                and "kvtune-mc/" not in f]
    assert [f for f in files if "tuned" in f] == ["tuned/kvtune-mc/tuned.conf"]


@pytest.mark.parallel
def test_minimal_configuration_from_the_ablation(in_tmp: Path) -> None:
    minimal = {"memcached.threads": 2}
    abl = {"schema": 1, "minimal_changes": minimal, "minimal_config": {**MC_BASE, **minimal},
           "skipped": None}
    url = make_study(in_tmp, "mini", "memcached", MC_BASE, MC_REC, confirmed=True,
                     ablation=abl, args=["-m", "256"])
    rec = recommendation(Store(url), "mini", minimal=True)
    assert "MINIMAL" in rec.source and "memcached.threads" in rec.source
    write(rec, ["memcached", "sysctl"], in_tmp / "min")
    text = (in_tmp / "min/memcached/memcached.conf").read_text()
    assert re.search(r"^-t 2$", text, re.M) and re.search(r"^-m 256$", text, re.M)
    assert "-R 64" not in text and not (in_tmp / "min/sysctl.d").exists()
    assert "derived, not measured on its own" in rec.source  # no choice measured it alone
    url2 = make_study(in_tmp, "noabl", "memcached", MC_BASE, MC_REC, confirmed=True)
    with pytest.raises(NoRecommendation, match="no ablation"):
        recommendation(Store(url2), "noabl", minimal=True)


@pytest.mark.parallel
def test_a_minimal_configuration_measured_alone_is_exported_with_its_own_change(
        in_tmp: Path) -> None:
    """The ablation measured the smaller change alone against the defaults: `--minimal`'s
    header quotes that change (as the headline "Ship only …" does), not the whole
    configuration's gain as if it were the smaller one's, nor "not measured on its own"."""
    from kvtune.present import change_record

    minimal = {"memcached.threads": 2}
    abl = {"schema": 2, "minimal_changes": minimal, "minimal_config": {**MC_BASE, **minimal},
           "skipped": None,
           "choice": {"chosen": "minimal", "changes": minimal,
                      "config": {**MC_BASE, **minimal}, "measured": True, "rounds": 6,
                      "minimal_gain": change_record("ops_per_sec", 0.171, "maximize",
                                                    ci=(0.09, 0.25))}}
    url = make_study(in_tmp, "mini2", "memcached", MC_BASE, MC_REC, confirmed=True,
                     ablation=abl, args=["-m", "256"])
    rec = recommendation(Store(url), "mini2", minimal=True)
    assert rec.source.startswith("MINIMAL configuration from the ablation: only "
                                 "memcached.threads, measured alone against the defaults: "
                                 "ops_per_sec +17.1% (95% CI +9.0% … +25.0%), better"), \
        rec.source
    assert "not measured on its own" not in rec.source
    assert rec.config["memcached.threads"] == 2


@pytest.mark.parallel
def test_values_outside_the_stored_space_are_refused(in_tmp: Path) -> None:
    space = {"domains": {"memcached.threads": {"type": "int", "low": 4, "high": 8}},
             "baseline": {"memcached.threads": 4}}
    url = make_study(in_tmp, "sp", "memcached", MC_BASE, MC_REC, confirmed=True, space=space)
    with pytest.raises(UserError, match="does not fit the study's knob space") as e:
        recommendation(Store(url), "sp")
    assert "memcached.threads=2 is outside" in str(e.value)


@pytest.mark.parallel
def test_large_pages_refused_while_thp_is_never(tmp_path: Path) -> None:
    root = tmp_path / "root"
    thp = root / "sys/kernel/mm/transparent_hugepage"
    thp.mkdir(parents=True)
    (thp / "enabled").write_text("always madvise [never]\n")
    facts = HostFacts("6.12.0", (6, 12), "fake", 2, "v1", "never", "eevdf", False)
    ctx = HostContext(facts, HostFS(root), versions={"memcached": (1, 6, 18)})
    rec = Recommendation("lp", "memcached", {"memcached.large_pages": True},
                         {"memcached.large_pages": False}, "test", ctx)
    with pytest.raises(UserError, match="never"):
        write(rec, ["memcached"], tmp_path / "out")


# -- sysctl --------------------------------------------------------------------------------


def sysctl_dry_run(path: Path) -> dict[str, str]:
    out = subprocess.run(["sysctl", "--dry-run", "-p", str(path)], capture_output=True,
                         text=True, check=True)
    assert not out.stderr.strip(), out.stderr
    return dict(ln.split(" = ", 1) for ln in out.stdout.splitlines() if " = " in ln)


def sysctl_now(key: str) -> str:
    return Path("/proc/sys", key.replace(".", "/")).read_text().strip()


# Not parallel: applies the sysctl.d file to the host (and rolls it back).
def test_sysctl_dry_run_apply_and_roll_back(mc_export: Path) -> None:
    rec = mc_export / "sysctl.d/90-kvtune-mc.conf"
    back = mc_export / "rollback/sysctl.d/90-kvtune-mc.conf.rollback"
    want = {k: str(int(v)) for k, v in MC_REC.items() if k in SYSCTLS}
    assert sysctl_dry_run(rec) == want
    before = {k: sysctl_now(k) for k in SYSCTLS}
    assert sysctl_dry_run(back) == before
    try:
        subprocess.run(["sysctl", "-q", "-p", str(rec)], check=True)
        assert {k: sysctl_now(k) for k in SYSCTLS} == want
    finally:
        subprocess.run(["sysctl", "-q", "-p", str(back)], check=True)
    assert {k: sysctl_now(k) for k in SYSCTLS} == before


# -- TuneD ---------------------------------------------------------------------------------

TUNED_CHECK = r"""
import json, logging, sys
import tuned.profiles as P, tuned.monitors as M, tuned.storage as S, tuned.hardware as H
import tuned.plugins.instance as I
import tuned.utils.global_config as G
from tuned.profiles.variables import Variables
from tuned.plugins.plugin_sysctl import SysctlPlugin
from tuned.plugins.plugin_vm import VMPlugin
from tuned.plugins.plugin_scheduler import SchedulerPlugin
records = []
class H_(logging.Handler):
    def emit(self, r): records.append(r.getMessage())
logging.getLogger().addHandler(H_())
gc, var = G.GlobalConfig(), Variables()
prof = P.Loader(P.Locator(["/usr/lib/tuned", "/etc/tuned", sys.argv[1]]), P.Factory(),
                P.Merger(), gc, var).load([sys.argv[2]])
units = {n: {"type": u.type, "options": dict(u.options)} for n, u in prof.units.items()}
verify = {}
for cls, unit in ((SysctlPlugin, "sysctl"), (VMPlugin, "vm")):
    if unit not in prof.units:
        continue
    p = cls(M.Repository(), S.Factory(S.PickleProvider(sys.argv[3])), H.Inventory(),
            H.DeviceMatcher(), H.DeviceMatcherUdev(), I.Factory(), gc, var)
    u = prof.units[unit]
    inst = p.create_instance(u.name, u.devices, u.devices_udev_regex, u.script_pre,
                             u.script_post, u.options)
    p.initialize_instance(inst)
    verify[unit] = p._instance_verify_static(inst, False, set())
print(json.dumps({"units": units, "verify": verify, "log": records,
                  "scheduler_options": sorted(SchedulerPlugin._get_config_options())}))
"""


def tuned_check(profile_dir: Path, profile: str, tmp: Path) -> dict[str, Any]:
    """TuneD 2.20's own loader and plugins (no daemon), from the distribution's python3."""
    out = subprocess.run(["/usr/bin/python3", "-c", TUNED_CHECK, str(profile_dir), profile,
                          str(tmp / "tuned-save.pickle")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


@pytest.fixture
def tuned_installed() -> tuple[int, ...]:
    v = tuned_export.installed_version()
    if v is None or not Path("/usr/lib/tuned").is_dir():
        pytest.fail("TuneD is not installed: run `make setup` (make test installs it)")
    return v


# Not parallel: applies the sysctl.d file to the host (and rolls it back).
def test_tuned_profile_loads_includes_and_verifies(mc_export: Path, tmp_path: Path,
                                                   tuned_installed: tuple[int, ...]) -> None:
    text = (mc_export / "tuned/kvtune-mc/tuned.conf").read_text()
    recommended = tuned_export.recommended_profile()
    assert recommended, "tuned-adm recommend names no profile"
    assert f"include={recommended}" in text
    assert "tuned-adm profile" in text and "Roll back: tuned-adm profile" in text
    res = tuned_check(mc_export / "tuned", "kvtune-mc", tmp_path)
    units = res["units"]
    want = {k: str(int(v)) for k, v in MC_REC.items() if k in SYSCTLS}
    for k, v in want.items():
        assert units["sysctl"]["options"][k] == v
    assert units["vm"]["options"]["transparent_hugepages"] == MC_REC["thp.enabled"]
    # The included profile's units are merged in (virtual-guest → throughput-performance).
    assert len(units) > 3 and any(u["type"] == "cpu" for u in units.values()), units
    # Verify reads the host and compares: our changed values are not what the host has...
    assert res["verify"]["sysctl"] is False
    for k in want:
        assert any(m.startswith(f"verify: failed: '{k}' = ") for m in res["log"]), k
    # ...and after applying the sysctl.d file (the consumer's way), TuneD verifies ours.
    back = mc_export / "rollback/sysctl.d/90-kvtune-mc.conf.rollback"
    try:
        subprocess.run(["sysctl", "-q", "-p", str(mc_export / "sysctl.d/90-kvtune-mc.conf")],
                       check=True)
        res = tuned_check(mc_export / "tuned", "kvtune-mc", tmp_path)
        for k in want:
            assert any(m.startswith(f"verify: passed: '{k}' = ") for m in res["log"]), k
    finally:
        subprocess.run(["sysctl", "-q", "-p", str(back)], check=True)
    # A sysctl.d file next to the profile fights it (reapply_sysctl): warned.
    assert "reapply_sysctl" in text


@pytest.mark.parallel
def test_tuned_version_gates_options(tmp_path: Path, tuned_installed: tuple[int, ...]) -> None:
    knob = catalog.CATALOG.get("sched.base_slice_ns")
    if knob is None:
        pytest.fail("sched.base_slice_ns is not in the catalog")
    ctx = host_context()
    swap = 10 if HOST_NOW["vm.swappiness"] != 10 else 20
    rec = Recommendation("gate", "memcached", {"sched.base_slice_ns": 2_000_000,
                                               "vm.swappiness": swap},
                         {"sched.base_slice_ns": 3_000_000,
                          "vm.swappiness": HOST_NOW["vm.swappiness"]}, "test", ctx,
                         tuned_include="")
    files = tuned_export.TunedExporter().files(rec)
    entry = knob.applier.export_entry(2_000_000, ctx)
    text = files[0].text
    assert f"vm.swappiness={swap}" in text and "include=" not in text
    if entry is None:  # no EEVDF here: nothing to gate
        assert "sched_base_slice_ns" not in text
        return
    sched = json.loads(subprocess.run(
        ["/usr/bin/python3", "-c", "import json; from tuned.plugins.plugin_scheduler import "
         "SchedulerPlugin as S; print(json.dumps(sorted(S._get_config_options())))"],
        capture_output=True, text=True, check=True).stdout)
    if "sched_base_slice_ns" in sched:
        assert "sched_base_slice_ns=2000000" in text
    else:
        assert tuned_installed < (2, 25)
        assert not re.search(r"^sched_base_slice_ns=", text, re.M)
        assert "needs TuneD >= 2.25" in text


# -- systemd -------------------------------------------------------------------------------


def analyze_verify(tmp: Path, unit: str, drop_in: str) -> str:
    """`systemd-analyze verify` of the distribution's unit with the drop-in beside it."""
    d = tmp / "units"
    (d / f"{unit}.d").mkdir(parents=True, exist_ok=True)
    shutil.copy(Path("/lib/systemd/system") / unit, d / unit)
    (d / f"{unit}.d" / "90-kvtune.conf").write_text(drop_in)
    out = subprocess.run(["systemd-analyze", "verify", str(d / unit)], capture_output=True,
                         text=True, env={"SYSTEMD_UNIT_PATH": f"{d}:", "PATH": "/usr/bin:/bin"})
    return out.stderr.strip()


@pytest.mark.parallel
@pytest.mark.parametrize("unit", ["memcached.service", "redis-server.service"])
def test_systemd_analyze_verifies_the_drop_in(in_tmp: Path, unit: str) -> None:
    if not (Path("/lib/systemd/system") / unit).exists() or not shutil.which("systemd-analyze"):
        pytest.fail(f"{unit} or systemd-analyze missing: run `make setup`")
    kind = "memcached" if unit == "memcached.service" else "redis"
    base, rec = (MC_BASE, MC_REC) if kind == "memcached" else (
        {**REDIS_BASE, "placement.cpu_quota_pct": -1},
        {**REDIS_REC, "placement.cpu_quota_pct": 50})
    url = make_study(in_tmp, "sd", kind, base, rec, confirmed=True, cpus="1")
    write(recommendation(Store(url), "sd"), ["systemd"], in_tmp / "out")
    text = (in_tmp / f"out/systemd/{unit}.d/90-kvtune.conf").read_text()
    assert "CPUAffinity=1\n" in text
    assert analyze_verify(in_tmp, unit, text) == ""
    # The control: systemd-analyze does read the drop-in (a broken one is reported).
    assert "CPU affinity" in analyze_verify(in_tmp, unit, "[Service]\nCPUAffinity=zz\n")
    rb = (in_tmp / f"out/rollback/systemd/{unit}.d/90-kvtune.conf.remove.sh").read_text()
    assert f"rm -f /etc/systemd/system/{unit}.d/90-kvtune.conf" in rb
    assert "CPUAffinity=" not in rb  # removal, not values that would override an admin's


# -- memcached through Debian's wrapper ----------------------------------------------------

WRAPPER = Path("/usr/share/memcached/scripts/systemd-memcached-wrapper")
SETTINGS = ("maxbytes", "maxconns", "num_threads", "reqs_per_event", "tcp_backlog",
            "hashpower_init", "slab_chunk_max", "lru_crawler", "item_size_max")


@contextmanager
def wrapper_memcached(conf: Path, tmp: Path) -> Iterator[dict[str, str]]:
    """memcached started by Debian's systemd-memcached-wrapper from `conf`, on a free
    loopback port (the conf's -p and -P lines replaced, everything else as exported)."""
    if not WRAPPER.exists():
        pytest.fail(f"{WRAPPER} missing: run `make setup` (memcached package)")
    lines = []
    for ln in conf.read_text().splitlines():
        if re.match(r"\s*-[pP]\s", ln):
            continue
        lines.append(re.sub(r"^-l .*", "-l 127.0.0.1", ln))

    def command(port: int) -> list[str]:
        test_conf = tmp / f"wrapper-{port}.conf"
        test_conf.write_text("\n".join(lines) + f"\n-p {port}\n-U 0\n")
        return [str(WRAPPER), str(test_conf)]

    with running("memcached", cwd=tmp, command=command) as server:
        yield mc_settings(server.port)


def plain_memcached(binary: str, tmp: Path) -> dict[str, str]:
    with running("memcached", cwd=tmp, binary=binary) as server:
        return mc_settings(server.port)


@pytest.mark.parallel
def test_memcached_through_debians_wrapper(mc_export: Path, memcached_bin: str,
                                           tmp_path: Path) -> None:
    conf = mc_export / "memcached/memcached.conf"
    text = conf.read_text()
    assert "-R 64" in text and "-b 2048" in text
    if host_context().versions["memcached"] < (1, 6, 40):
        assert "worker_logbuf_size=" not in text.replace("# left out", "")
    with wrapper_memcached(conf, tmp_path) as s:
        assert s["maxbytes"] == str(256 * 1024 * 1024) and s["maxconns"] == "2048"
        assert s["num_threads"] == "2" and s["reqs_per_event"] == "64"
        assert s["tcp_backlog"] == "2048" and s["hashpower_init"] == "20"
        assert s["slab_chunk_max"] == str(256 * 1024) and s["lru_crawler"] == "no"
        assert s["item_size_max"] == str(2 * 1024 * 1024)
    # The rollback is memcached's own defaults, not the study's baseline.
    defaults = plain_memcached(memcached_bin, tmp_path)
    with wrapper_memcached(mc_export / "rollback/memcached/memcached.conf", tmp_path) as s:
        assert {k: s[k] for k in SETTINGS} == {k: defaults[k] for k in SETTINGS}


@pytest.mark.parallel
def test_memcached_from_the_hosts_file(in_tmp: Path) -> None:
    prev = in_tmp / "memcached.conf"
    prev.write_text("# the admin's file\n-d\nlogfile /var/log/memcached.log\n-m 64\n-p 11211\n"
                    "-u memcache\n-l 127.0.0.1\n-c 4096\n-t 8\n")
    url = make_study(in_tmp, "fr", "memcached", MC_BASE, MC_REC, confirmed=True,
                     args=["-m", "256"])
    write(recommendation(Store(url), "fr", previous=prev), ["memcached"], in_tmp / "out")
    assert (in_tmp / "out/rollback/memcached/memcached.conf").read_bytes() == prev.read_bytes()
    conf = (in_tmp / "out/memcached/memcached.conf").read_text()
    # Production keeps its own settings: the study's -m 256 was a test setting (issue 34).
    assert "kept from" in conf and "-m 64 (the study measured with -m 256" in conf
    with wrapper_memcached(in_tmp / "out/memcached/memcached.conf", in_tmp) as s:
        assert s["maxbytes"] == str(64 * 1024 * 1024) and s["num_threads"] == "2"
        assert s["maxconns"] == "4096"  # the admin's own setting is kept
    with wrapper_memcached(in_tmp / "out/rollback/memcached/memcached.conf", in_tmp) as s:
        assert s["maxbytes"] == str(64 * 1024 * 1024) and s["num_threads"] == "8"
        assert s["maxconns"] == "4096" and s["reqs_per_event"] == "20"


# -- Redis ---------------------------------------------------------------------------------


def redis_get(port: int, directive: str) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        cmd = ["CONFIG", "GET", directive]
        s.sendall(f"*{len(cmd)}\r\n".encode() + b"".join(
            f"${len(c)}\r\n{c}\r\n".encode() for c in cmd))
        time.sleep(0.05)
        reply = s.recv(65536).decode()
    parts = reply.split("\r\n")
    return parts[4] if len(parts) > 4 else ""


def redis_with(binary: str, tmp: Path, includes: list[Path]) -> AbstractContextManager[Server]:
    """redis-server started from a main file of its own that includes `includes`."""
    def command(port: int) -> list[str]:
        main_conf = tmp / f"redis-{port}.conf"
        main_conf.write_text(f"port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"\"\n"
                             f"dir {tmp}\n" + "".join(f"include {i}\n" for i in includes))
        return [binary, str(main_conf)]

    return running("redis", cwd=tmp, binary=binary, command=command)


@pytest.mark.parallel
def test_redis_include_and_rollback(in_tmp: Path, redis_bin: str) -> None:
    url = make_study(in_tmp, "rd", "redis", REDIS_BASE, REDIS_REC, confirmed=True,
                     args=["--maxclients", "2000"], cpus=None)
    write(recommendation(Store(url), "rd"), ["redis", "systemd"], in_tmp / "out")
    inc = in_tmp / "out/redis/kvtune-rd.conf"
    back = in_tmp / "out/rollback/redis/kvtune-rd.conf"
    text = inc.read_text()
    # save lines add up across includes: the include clears the earlier ones first.
    assert re.search(r'^save ""\nsave 900 1 300 10$', text, re.M)
    assert not (in_tmp / "out/systemd").exists()  # no placement measured, no drop-in
    expect = {"io-threads": "2", "hz": "50", "maxmemory": str(64 * 1024 * 1024),
              "maxmemory-policy": "allkeys-lru", "lazyfree-lazy-eviction": "yes",
              "save": "900 1 300 10", "jemalloc-bg-thread": "no", "disable-thp": "no",
              "maxclients": "2000"}
    with redis_with(redis_bin, in_tmp, [inc]) as server:
        for d, v in expect.items():
            assert redis_get(server.port, d) == v, (d, v)
    # The rollback, included after the recommendation, gives Redis's built-in defaults
    # (a redis-server started without any file), snapshots included.
    rb = back.read_text()
    assert "save 3600 1 300 100 60 10000" in rb
    # (no --save: the built-in snapshots are among the defaults compared)
    with running("redis", cwd=in_tmp, binary=redis_bin,
                 command=lambda port: [redis_bin, "--port", str(port), "--bind",
                                       "127.0.0.1"]) as server:
        defaults = {d: redis_get(server.port, d) for d in expect}
    # maxclients (target.args) has no default kvtune knows: the rollback says so.
    assert re.search(r"^# not here .*: maxclients$", rb, re.M)
    defaults.pop("maxclients")
    with redis_with(redis_bin, in_tmp, [inc, back]) as server:
        assert {d: redis_get(server.port, d) for d in defaults} == defaults


@pytest.mark.parallel
def test_redis_rollback_from_the_hosts_file(in_tmp: Path, redis_bin: str) -> None:
    prev = in_tmp / "redis.conf"
    prev.write_text("hz 20\nsave 900 1\nsave 300 10\nmaxmemory-policy volatile-lru\n")
    url = make_study(in_tmp, "rf", "redis", REDIS_BASE, REDIS_REC, confirmed=True, cpus=None)
    write(recommendation(Store(url), "rf", previous=prev), ["redis"], in_tmp / "out")
    # With --from, the rollback is the operator's file byte for byte (issue 34): restoring
    # it (without the include line) undoes the export.
    back = in_tmp / "out/rollback/redis/redis.conf"
    assert back.read_bytes() == prev.read_bytes()
    with redis_with(redis_bin, in_tmp, [back]) as server:
        port = server.port
        assert redis_get(port, "hz") == "20"
        assert redis_get(port, "save") == "900 1 300 10"
        assert redis_get(port, "maxmemory-policy") == "volatile-lru"
        assert redis_get(port, "io-threads") == "1"


@pytest.mark.parallel
def test_an_export_says_the_placement_it_depends_on(in_tmp: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22 item 3: a thread count chosen on the CPUs the server was pinned to, and a
    quota, are conditions: every file's header, export's output and `kvtune show` say them,
    and the systemd drop-in carries the placement."""
    url = make_study(in_tmp, "cond", "memcached", MC_BASE, MC_REC, confirmed=True,
                     args=["-m", "64"], cpus="0")
    assert run_cli(["export", "cond", "--storage", url, "-o", str(in_tmp / "x")]) == 0
    out = capsys.readouterr().out
    threads = ("memcached.threads = 2 was measured with the server on CPUs 0 (1 CPU): it "
               "depends on that placement")
    quota = "measured under a CPU quota of 150% of one CPU"
    assert threads in out.replace("\n", " ") and quota in out.replace("\n", " "), out
    conf = (in_tmp / "x" / "memcached" / "memcached.conf").read_text()
    assert f"# Condition: {threads}" in conf
    dropin = next((in_tmp / "x").rglob("90-kvtune.conf")).read_text()
    assert "CPUAffinity=0" in dropin and "CPUQuota=150%" in dropin
    # Only the memcached file asked for: the placement is not silently dropped.
    assert run_cli(["export", "cond", "--storage", url, "-o", str(in_tmp / "y"),
                    "--format", "memcached"]) == 0
    err = capsys.readouterr().err
    assert "depends on its placement" in err and "--format systemd" in err, err
    assert run_cli(["show", "cond", "--storage", url]) == 0
    assert "Condition: memcached.threads = 2" in capsys.readouterr().out.replace("\n", " ")
