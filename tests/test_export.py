"""`kvtune export`: the files are accepted by the real programs (memcached starts with the
exported flags, redis-server with the include), tuned.conf parses as INI, sysctl.d lines
are `key = value` for keys that exist; every file has a rollback; no recommendation means
exit 1 unless --best-in-search."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
from test_catalog import redis_call, running_memcached

from kvtune.cli import main
from kvtune.errors import UserError
from kvtune.export import Recommendation, write
from kvtune.host.facts import HostFacts
from kvtune.host.fs import HostFS
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import HostContext
from kvtune.store import Store
from kvtune.targets import host_context
from kvtune.targets.base import free_port

HOST_NOW = {name: catalog.CATALOG[name].applier.current(host_context())
            for name in ("net.core.somaxconn", "net.ipv4.tcp_autocorking", "thp.enabled",
                         "thp.defrag", "kernel.sched_autogroup_enabled", "vm.swappiness")}

MC_BASE = {"memcached.threads": 4, "memcached.reqs_per_event": 20, "memcached.backlog": 1024,
           "memcached.slab_chunk_max": 512, "memcached.max_item_size": "1m",
           "memcached.lru_crawler": True, "memcached.large_pages": False,
           "memcached.worker_logbuf_size": 64, "memcached.hashpower": 16,
           "net.core.somaxconn": HOST_NOW["net.core.somaxconn"],
           "net.ipv4.tcp_autocorking": bool(HOST_NOW["net.ipv4.tcp_autocorking"]),
           "kernel.sched_autogroup_enabled": bool(HOST_NOW["kernel.sched_autogroup_enabled"]),
           "vm.swappiness": HOST_NOW["vm.swappiness"],
           "thp.enabled": HOST_NOW["thp.enabled"], "thp.defrag": HOST_NOW["thp.defrag"],
           "placement.server_cpus": "0", "placement.cpu_quota_pct": -1}
MC_REC = {**MC_BASE, "memcached.threads": 2, "memcached.reqs_per_event": 64,
          "memcached.backlog": 2048, "memcached.slab_chunk_max": 256,
          "memcached.max_item_size": "2m", "memcached.lru_crawler": False,
          "memcached.large_pages": True, "memcached.worker_logbuf_size": 32,
          "memcached.hashpower": 20, "net.core.somaxconn": 8192,
          "net.ipv4.tcp_autocorking": False, "kernel.sched_autogroup_enabled": False,
          "vm.swappiness": 10, "thp.enabled": "madvise", "thp.defrag": "defer+madvise",
          "placement.server_cpus": "0-1", "placement.cpu_quota_pct": 150}

REDIS_BASE = {"redis.io_threads": 1, "redis.hz": 10, "redis.maxmemory_mb": 0,
              "redis.maxmemory_policy": "noeviction", "redis.lazyfree_lazy_eviction": False,
              "redis.save": "", "redis.jemalloc_bg_thread": True, "redis.disable_thp": True,
              "redis.activedefrag": False}
REDIS_REC = {**REDIS_BASE, "redis.io_threads": 2, "redis.hz": 50, "redis.maxmemory_mb": 64,
             "redis.maxmemory_policy": "allkeys-lru", "redis.lazyfree_lazy_eviction": True,
             "redis.save": "3600 1 300 100 60 10000", "redis.jemalloc_bg_thread": False,
             "redis.disable_thp": False, "redis.activedefrag": True}


def make_study(tmp: Path, name: str, target: str, base: dict[str, Any], rec: dict[str, Any],
               confirmed: bool) -> str:
    url = f"sqlite:///{tmp / 'results' / (name + '.db')}"
    store = Store(url)
    study = optuna.create_study(study_name=name, storage=store.storage, direction="maximize")
    study.set_user_attr("spec", {"study": name, "target": {"kind": target}})
    study.set_user_attr("baseline", base)
    for i, (kind, cfg, value) in enumerate((("baseline", base, 100.0), ("trial", rec, 120.0))):
        study.add_trial(optuna.trial.create_trial(
            value=value, user_attrs={"kind": kind, "config": cfg,
                                     "eval": {"metrics": {"ops_per_sec": value}, "n": 3}},
            params={}, distributions={}))
        assert study.trials[i].user_attrs["kind"] == kind
    conf: dict[str, Any] = {"baseline": {"config": base, "metrics": {}}, "candidates": []}
    if confirmed:
        conf.update(recommended={"name": "trial 1", "config": rec, "metrics": {}},
                    verdict="trial 1 improves ops_per_sec by +20.0%")
    else:
        conf.update(recommended=None, verdict="no significant improvement found")
    store.put_result(name, "confirmation", conf)
    return url


def run_cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(args)
        raise SystemExit(0)
    return int(e.value.code or 0)


def test_no_significant_recommendation_exits_1(in_tmp: Path) -> None:
    url = make_study(in_tmp, "nosig", "memcached", MC_BASE, MC_REC, confirmed=False)
    assert run_cli(["export", "nosig", "--storage", url]) == 1
    assert not (in_tmp / "export").exists()
    assert run_cli(["export", "nosig", "--storage", url, "--best-in-search",
                    "--format", "sysctl"]) == 0
    text = (in_tmp / "export/nosig/sysctl.d/90-kvtune-nosig.conf").read_text()
    assert "NOT confirmed" in text and "net.core.somaxconn = 8192" in text


def test_export_refuses_etc_and_unknown_formats(in_tmp: Path) -> None:
    url = make_study(in_tmp, "etc", "memcached", MC_BASE, MC_REC, confirmed=True)
    assert run_cli(["export", "etc", "--storage", url, "-o", "/etc/kvtune-test"]) == 2
    assert not Path("/etc/kvtune-test").exists()
    assert run_cli(["export", "etc", "--storage", url, "--format", "ini"]) == 2


@pytest.fixture
def mc_export(in_tmp: Path) -> Path:
    url = make_study(in_tmp, "mc", "memcached", MC_BASE, MC_REC, confirmed=True)
    assert run_cli(["export", "mc", "--storage", url, "-o", str(in_tmp / "out")]) == 0
    return in_tmp / "out"


def test_sysctl_file_is_key_value_for_existing_keys(mc_export: Path) -> None:
    for f in ("90-kvtune-mc.conf", "90-kvtune-mc.rollback.conf"):
        lines = [ln for ln in (mc_export / "sysctl.d" / f).read_text().splitlines()
                 if ln and not ln.startswith("#")]
        assert lines
        for ln in lines:
            m = re.fullmatch(r"([a-z0-9_.]+) = (\S+)", ln)
            assert m, ln
            assert Path("/proc/sys", m.group(1).replace(".", "/")).exists(), ln
    text = (mc_export / "sysctl.d/90-kvtune-mc.conf").read_text()
    assert "net.core.somaxconn = 8192" in text and "kernel.sched_autogroup_enabled = 0" in text
    back = (mc_export / "sysctl.d/90-kvtune-mc.rollback.conf").read_text()
    assert f"net.core.somaxconn = {HOST_NOW['net.core.somaxconn']}" in back
    # THP is not a sysctl: it goes to the tuned profile.
    assert "transparent" not in "".join(lines)


def test_tuned_profile_parses_as_ini(mc_export: Path) -> None:
    for d in ("kvtune-mc", "kvtune-mc-rollback"):
        cp = configparser.ConfigParser()
        cp.read_string((mc_export / "tuned" / d / "tuned.conf").read_text())
        assert set(cp.sections()) >= {"main", "sysctl", "vm"}
    cp = configparser.ConfigParser()
    cp.read_string((mc_export / "tuned/kvtune-mc/tuned.conf").read_text())
    assert cp["vm"]["transparent_hugepages"] == "madvise"
    assert cp["vm"]["transparent_hugepage.defrag"] == "defer+madvise"
    assert cp["sysctl"]["vm.swappiness"] == "10"
    rb = configparser.ConfigParser()
    rb.read_string((mc_export / "tuned/kvtune-mc-rollback/tuned.conf").read_text())
    assert rb["vm"]["transparent_hugepages"] == HOST_NOW["thp.enabled"]


def conf_words(path: Path) -> list[str]:
    """The options of a memcached.conf, without the service lines the test replaces."""
    words: list[str] = []
    for ln in path.read_text().splitlines():
        ln = ln.strip()
        if not ln.startswith("-") or ln.split()[0] in ("-p", "-u", "-l", "-P", "-d"):
            continue
        words += ln.split(None, 1)
    return words


def test_memcached_starts_with_the_exported_flags(mc_export: Path, memcached_bin: str) -> None:
    conf = mc_export / "memcached/memcached.conf"
    text = conf.read_text()
    assert "-R 64" in text and "-b 2048" in text  # the flags A-Tune's sed never applied
    if host_context().versions["memcached"] < (1, 6, 40):
        assert "worker_logbuf_size=" not in text.replace("# left out", "")
        assert "left out memcached.worker_logbuf_size" in text
    with running_memcached(memcached_bin, conf_words(conf)) as mc:
        s = mc.raw_stats("settings")
        assert s["num_threads"] == "2" and s["reqs_per_event"] == "64"
        assert s["tcp_backlog"] == "2048" and s["hashpower_init"] == "20"
        assert s["slab_chunk_max"] == str(256 * 1024) and s["lru_crawler"] == "no"
        assert s["item_size_max"] == str(2 * 1024 * 1024)
    rollback = conf_words(mc_export / "memcached/memcached.rollback.conf")
    with running_memcached(memcached_bin, rollback) as mc:
        s = mc.raw_stats("settings")
        assert s["num_threads"] == "4" and s["reqs_per_event"] == "20"
        assert s["slab_chunk_max"] == str(512 * 1024)


def test_systemd_drop_in(mc_export: Path) -> None:
    d = mc_export / "systemd/memcached.service.d"
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string((d / "90-kvtune.conf").read_text())
    assert cp["Service"]["CPUAffinity"] == "0-1"
    assert cp["Service"]["CPUQuota"] == "150%"
    rb = configparser.ConfigParser(strict=False, interpolation=None)
    rb.optionxform = str  # type: ignore[assignment,method-assign]
    rb.read_string((d / "90-kvtune.rollback.conf").read_text())
    assert rb["Service"]["CPUAffinity"] == "" and rb["Service"]["CPUQuota"] == ""


def test_redis_starts_with_the_include(in_tmp: Path, redis_bin: str) -> None:
    url = make_study(in_tmp, "rd", "redis", REDIS_BASE, REDIS_REC, confirmed=True)
    assert run_cli(["export", "rd", "--storage", url, "-o", str(in_tmp / "out")]) == 0
    inc = in_tmp / "out/redis/kvtune-rd.conf"
    text = inc.read_text()
    activedefrag_ok = catalog.CATALOG["redis.activedefrag"].applier.check(
        host_context()).ok
    assert ("activedefrag yes" in text) == activedefrag_ok
    expect = {"io-threads": "2", "hz": "50", "maxmemory": str(64 * 1024 * 1024),
              "maxmemory-policy": "allkeys-lru", "lazyfree-lazy-eviction": "yes",
              "save": "3600 1 300 100 60 10000", "jemalloc-bg-thread": "no",
              "disable-thp": "no"}
    base = {"io-threads": "1", "hz": "10", "maxmemory": "0", "save": "",
            "maxmemory-policy": "noeviction", "disable-thp": "yes"}
    for include, want in ((inc, expect), (in_tmp / "out/redis/kvtune-rd.rollback.conf", base)):
        port = free_port()
        main_conf = in_tmp / f"redis-{include.stem}.conf"
        main_conf.write_text(f"port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"\"\n"
                             f"dir {in_tmp}\nappendonly no\ninclude {include}\n")
        proc = subprocess.Popen([redis_bin, str(main_conf)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, cwd=in_tmp)
        try:
            from test_catalog import _wait_port

            _wait_port(port, proc)
            for d, v in want.items():
                got = redis_call(port, "CONFIG", "GET", d)
                assert f"\r\n{v}\r\n" in got or (v == "" and got.endswith("$0\r\n\r\n")), \
                    (include.name, d, v, got)
        finally:
            proc.terminate()
            proc.wait(10)


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
