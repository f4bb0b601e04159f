"""Valkey 8, the kind added as one folder (kinds/valkey/) and one registry line: a real
valkey-server (Debian bookworm-backports) tuned end to end, its INFO digested under its own
prefix and version, its config file read, its traffic captured, its valkey.conf include
exported and read back by the server, its process verified."""

from __future__ import annotations

import json
import re
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from support.cli import kvtune, show
from support.servers import Server, running, wait_traffic
from support.studies import make_study, study_file

from kvtune.export import recommendation, write
from kvtune.kinds.redis.target import resp_command
from kvtune.knobs.appliers.base import Launch
from kvtune.spec import TargetSpec
from kvtune.store import Store
from kvtune.targets import make_target
from kvtune.telemetry import server_digest

VALKEY_BASE = {"valkey.io_threads": 1, "valkey.hz": 10, "valkey.maxmemory_mb": 0,
               "valkey.maxmemory_policy": "noeviction", "valkey.lazyfree_lazy_eviction": True,
               "valkey.prefetch_batch_max_size": 16}
VALKEY_REC = {**VALKEY_BASE, "valkey.io_threads": 2, "valkey.hz": 50,
              "valkey.maxmemory_mb": 64, "valkey.maxmemory_policy": "allkeys-lru",
              "valkey.lazyfree_lazy_eviction": False, "valkey.prefetch_batch_max_size": 32}


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)


def valkey_get(port: int, directive: str) -> str:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(resp_command("CONFIG", "GET", directive))
        time.sleep(0.05)
        parts = s.recv(65536).decode().split("\r\n")
    return parts[4] if len(parts) > 4 else ""


@pytest.mark.e2e  # a whole study on a real server
def test_valkey_study_end_to_end(in_tmp: Path, kvload_bin: str, valkey_bin: str) -> None:
    """`kvtune tune` on a valkey target: every repetition's knob values reach
    valkey-server's argv, its INFO is digested under `valkey_` with Valkey's own version
    (not the redis_version 7.2.4 it keeps for clients)."""
    spec = study_file(in_tmp, "vk", kind="valkey", knobs=(
        "  - valkey.hz\n  - {name: valkey.prefetch_batch_max_size, range: [0, 64]}\n"))
    r = kvtune("tune", str(spec), "--no-confirm", cwd=in_tmp)
    assert r.returncode == 0, r.stderr + r.stdout
    data = show(spec, in_tmp)
    reps = Store(data["storage"]).repetitions("vk")
    info = reps[0]["raw"]["server_stats"]["info"]
    assert info["valkey_version"].startswith("8.") and info["server_name"] == "valkey"
    assert info["total_commands_processed"] > 1000
    assert reps[0]["metrics"]["valkey_total_commands"] > 1000
    assert not any(k.startswith("redis_") for k in reps[0]["metrics"])
    for rep in reps:
        argv = rep["raw"]["argv"]
        assert Path(argv[argv.index("--port") - 1]).name == "valkey-server"
        assert argv[argv.index("--hz") + 1] == str(rep["params"]["valkey.hz"])
        assert argv[argv.index("--prefetch-batch-max-size") + 1] == \
            str(rep["params"]["valkey.prefetch_batch_max_size"])


@pytest.mark.parallel  # a server started to read its INFO: nothing measured, no host knob
def test_valkey_info_digest_and_version(valkey_bin: str) -> None:
    t = make_target(TargetSpec(kind="valkey"))
    assert t.version() is not None and t.version()[0] >= 8  # type: ignore[index]
    server = t.start(Launch(options={"io-threads": "2"}))
    try:
        with __import__("socket").create_connection((t.host, t.port), timeout=5) as s:
            for i in range(100):
                s.sendall(resp_command("SET", f"k{i}", "v" * 10))
                s.recv(100)
        m, raw = server_digest("valkey", t.stats())
        assert valkey_get(t.port, "io-threads") == "2"
    finally:
        t.stop(server)
    assert m["valkey_keys"] == 100 and m["valkey_used_memory"] > 0
    assert raw["version"].startswith("8.")


@pytest.mark.parallel  # servers started to read their CONFIG: nothing measured, no host knob
def test_valkey_include_and_rollback(in_tmp: Path, valkey_bin: str) -> None:
    """The valkey.conf include sets what was measured on a real valkey-server; its rollback
    gives Valkey's own built-in defaults (lazyfree on, unlike Redis 7)."""
    url = make_study(in_tmp, "vk", "valkey", VALKEY_BASE, VALKEY_REC, confirmed=True,
                     cpus=None)
    write(recommendation(Store(url), "vk"), ["valkey"], in_tmp / "out")
    inc = in_tmp / "out/valkey/kvtune-vk.conf"
    back = in_tmp / "out/rollback/valkey/kvtune-vk.conf"
    text = inc.read_text()
    assert "valkey.conf include for vk" in text and "restart valkey-server" in text
    expect = {"io-threads": "2", "hz": "50", "maxmemory": str(64 * 1024 * 1024),
              "maxmemory-policy": "allkeys-lru", "lazyfree-lazy-eviction": "no",
              "prefetch-batch-max-size": "32"}

    def with_includes(includes: list[Path]) -> AbstractContextManager[Server]:
        def command(port: int) -> list[str]:
            conf = in_tmp / f"valkey-{port}.conf"
            conf.write_text(f"port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"\"\n"
                            f"dir {in_tmp}\nsave \"\"\n"
                            + "".join(f"include {i}\n" for i in includes))
            return [valkey_bin, str(conf)]

        return running("valkey", cwd=in_tmp, binary=valkey_bin, command=command)

    with with_includes([inc]) as server:
        assert {d: valkey_get(server.port, d) for d in expect} == expect
    with with_includes([inc, back]) as server:
        got = {d: valkey_get(server.port, d) for d in expect}
    assert got == {"io-threads": "1", "hz": "10", "maxmemory": "0",
                   "maxmemory-policy": "noeviction", "lazyfree-lazy-eviction": "yes",
                   "prefetch-batch-max-size": "16"}


@pytest.mark.parallel  # kvtune check reads the file: nothing measured, no host knob
def test_valkey_conf_as_target_config(tmp_path: Path, valkey_bin: str) -> None:
    """An operator's valkey.conf is read as the study's baseline: a searched knob takes its
    value, Valkey 8's own directives are known, its thread pinning is kvtune's to place."""
    (tmp_path / "valkey.conf").write_text(
        "port 6390\nbind 127.0.0.1\nhz 25\nprefetch-batch-max-size 8\n"
        "server-cpulist 0-1\nmaxclients 500\n")
    (tmp_path / "s.yaml").write_text(
        "study: vc\ntarget: {kind: valkey, config: valkey.conf, cpus: '0'}\n"
        "load: {mode: closed, duration: 300ms, warmup: 0, cpus: '1'}\n"
        "knobs: [valkey.hz]\nobjective: {metric: ops_per_sec}\n")
    r = kvtune("check", "s.yaml", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr + r.stdout
    out = r.stdout + r.stderr
    assert "valkey.hz baseline 25" in out, out
    assert re.search(r"server-cpulist. replaced", out), out
    assert "--prefetch-batch-max-size 8" in out or "prefetch-batch-max-size 8" in out, out


def test_capture_of_valkey(tmp_path: Path, valkey_bin: str, kvload_bin: str) -> None:
    with running("valkey", cwd=tmp_path, binary=valkey_bin) as server:
        port = server.port
        load = subprocess.Popen([kvload_bin, "--server", f"127.0.0.1:{port}", "--protocol",
                                 "resp", "--rate", "2000", "--duration", "5s", "--warmup",
                                 "1s", "--keys", "1000", "--mix", "get:8,set:2",
                                 "--value-size", "200", "-q"])
        wait_traffic("valkey", port)
        out = tmp_path / "m.json"
        r = kvtune("workload", "capture", f"valkey://127.0.0.1:{port}", "--duration", "1s",
                   "-o", str(out), cwd=tmp_path)
        load.terminate()  # the capture is done: the rest of the traffic is not needed
        load.wait(timeout=30)
        assert r.returncode == 0, r.stderr
        doc = json.loads(out.read_text())
        assert doc["protocol"] == "resp" and doc["about"]["captured"]["method"] == "monitor"
        assert doc["rate"] > 500
        r = kvtune("workload", "capture", f"valkey://127.0.0.1:{port}", "--duration", "2m",
                   "-o", str(tmp_path / "long.json"), cwd=tmp_path)
        assert r.returncode == 2 and "MONITOR costs Valkey" in r.stderr, r.stderr


@pytest.mark.integration  # runs kvtune check as a process
@pytest.mark.parallel  # kvtune check: nothing measured, no host knob
def test_an_inline_valkey_directive_is_checked_like_the_catalogs(tmp_path: Path) -> None:
    """`applier: {valkey_directive: ...}` (the kind's inline key): a safe directive with
    safe values is a knob; one that makes the server write files is refused, naming it."""
    base = ("study: vi\ntarget: {kind: valkey, cpus: '0'}\n"
            "load: {mode: closed, duration: 300ms, warmup: 0, cpus: '1'}\n"
            "objective: {metric: ops_per_sec}\nknobs:\n")
    (tmp_path / "ok.yaml").write_text(base + "  - {name: my.prefetch, type: int, range: "
                                      "[1, 64], applier: {valkey_directive: "
                                      "prefetch-batch-max-size}}\n")
    r = kvtune("check", "ok.yaml", cwd=tmp_path)
    assert r.returncode in (0, 1) and "my.prefetch" in r.stdout, r.stdout + r.stderr
    (tmp_path / "bad.yaml").write_text(base + "  - {name: my.dir, type: categorical, "
                                       "choices: [/tmp], applier: {valkey_directive: dir}}\n")
    r = kvtune("check", "bad.yaml", cwd=tmp_path)
    said = r.stdout + r.stderr  # `check` lists its problems on stdout
    assert r.returncode == 2 and "Valkey directive 'dir' is refused" in said, said
    assert "Traceback" not in said
    # Another kind's key on a valkey target is refused too.
    (tmp_path / "other.yaml").write_text(base + "  - {name: my.t, type: int, range: [1, 4], "
                                         "applier: {memcached_flag: -t}}\n")
    r = kvtune("check", "other.yaml", cwd=tmp_path)
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "a memcached knob but the target is valkey" in said, said
