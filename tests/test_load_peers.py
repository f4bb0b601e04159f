"""The peer load tools behind the load-driver interface: redis-benchmark (redis-tools) and
memaslap (libmemcached-tools' memcaslap) run against real servers on loopback, their output
parsed into kvtune's metrics and checked against what the server itself counted; both are
closed-loop and refuse an open-loop study; `kvtune run FILE --load-tool redis-benchmark`
measures the study's configuration with the peer."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import kvtune as run_kvtune
from support.servers import running

from kvtune import load
from kvtune.errors import UserError
from kvtune.kinds.redis.load import parse_csv
from kvtune.spec import LoadSpec


def redis_info(port: int, section: str = "stats") -> dict[str, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"*2\r\n$4\r\nINFO\r\n${len(section)}\r\n{section}\r\n".encode())
        buf = b""
        while True:
            buf += s.recv(65536)
            head, _, body = buf.partition(b"\r\n")
            if head.startswith(b"$") and len(body) >= int(head[1:]):
                break
    return dict(ln.split(":", 1) for ln in body.decode().splitlines() if ":" in ln)


def mc_stats(port: int) -> dict[str, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    return {p[1]: p[2] for ln in buf.decode().splitlines() if (p := ln.split())[0] == "STAT"}


@pytest.fixture
def redis_port(redis_bin: str, tmp_path: Path) -> Iterator[int]:
    with running("redis", cwd=tmp_path, binary=redis_bin) as server:
        yield server.port


@pytest.fixture
def memcached_port(memcached_bin: str) -> Iterator[int]:
    with running("memcached", binary=memcached_bin) as server:
        yield server.port


@pytest.mark.parametrize("tool", ["redis-benchmark", "memaslap"])
def test_peers_are_closed_loop_and_refuse_open_mode(tool: str) -> None:
    assert tool in load.tools()
    with pytest.raises(UserError, match=r"closed-loop.*load\.mode: closed"):
        load.driver_for(LoadSpec(tool=tool, mode="open", rate=1000))
    assert load.driver_for(LoadSpec(tool=tool, mode="closed")).closed_loop


def test_redis_benchmark_csv_is_parsed() -> None:
    text = ('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
            '"p99_latency_ms","max_latency_ms"\n"GET","25000.00","0.600","0.100","0.550",'
            '"0.900","1.200","3.100"\n')
    assert parse_csv(text)["get"]["p99_latency_ms"] == 1.2


@pytest.mark.parallel  # unpinned, checks counts and a 100 req/s floor only: nothing timed
def test_redis_benchmark_driver_against_redis(redis_port: int) -> None:
    spec = LoadSpec(tool="redis-benchmark", mode="closed", connections=4, pipeline=1,
                    duration=1, warmup=0.2,
                    workload={"keys": 1000, "value_size": 32, "mix": "get:1"})  # type: ignore[arg-type]
    drv = load.driver_for(spec)
    drv.prepare()
    before = int(redis_info(redis_port)["total_commands_processed"])
    res = drv.run(f"127.0.0.1:{redis_port}", "resp", 1)
    after = int(redis_info(redis_port)["total_commands_processed"])
    m = res.metrics
    assert m["ops_per_sec"] > 100 and 0 < m["p50_us"] <= m["p99_us"] <= m["max_us"]
    assert m["p999_us"] is None and "p999_us" in res.raw["missing"]
    # Every request the tool says it sent reached the server (preload, warm-up, measure).
    sent = sum(r.get("n", 0) for r in res.raw["runs"] if r["phase"] == "measure")
    assert after - before >= sent + 3000  # the preload's 3 × keys SETs
    keys = int(redis_info(redis_port, "keyspace").get("db0", "keys=0").split(",")[0][5:])
    assert 900 <= keys <= 1000


@pytest.mark.parallel  # unpinned, checks counts and a 100 req/s floor only: nothing timed
def test_memaslap_driver_against_memcached(memcached_port: int) -> None:
    spec = LoadSpec(tool="memaslap", mode="closed", connections=4, duration=1, warmup=0,
                    workload={"key_size": 16, "value_size": 64, "mix": "get:9,set:1"})  # type: ignore[arg-type]
    drv = load.driver_for(spec)
    drv.prepare()
    before = mc_stats(memcached_port)
    res = drv.run(f"127.0.0.1:{memcached_port}", "memcache", 1)
    after = mc_stats(memcached_port)
    served = sum(int(after[k]) - int(before[k]) for k in ("cmd_get", "cmd_set"))
    ops = res.raw["summary"]["ops"]
    assert res.metrics["ops_per_sec"] > 100
    assert abs(served - ops) <= 0.05 * ops + 10 * spec.connections, (served, ops)
    assert res.metrics["p99_us"] is None and "p99_us" in res.raw["missing"]


STUDY = """study: peer
target: {{kind: redis, cpus: "0"}}
load:
  mode: {mode}
  connections: 4
  duration: 1s
  warmup: 0.2s
  cpus: "1"
  workload: {{keys: 1000, value_size: 32, mix: "get:1"}}
knobs: []
repetitions: 1
"""


def kvtune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_kvtune(*args, cwd=cwd, timeout=300)


def test_kvtune_run_with_a_peer_load_tool(in_tmp: Path, redis_bin: str) -> None:
    (in_tmp / "s.yaml").write_text(STUDY.format(mode="closed"))
    r = kvtune("run", "s.yaml", "--load-tool", "redis-benchmark", "--json", cwd=in_tmp)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["metrics"]["ops_per_sec"] > 100 and res["metrics"]["p99_us"] > 0
    (in_tmp / "o.yaml").write_text(STUDY.format(mode="open\n  rate: 1000"))
    r = kvtune("run", "o.yaml", "--load-tool", "redis-benchmark", cwd=in_tmp)
    assert r.returncode == 2 and "closed-loop" in r.stderr


@pytest.mark.parametrize("tool", ["redis-benchmark", "memaslap"])
@pytest.mark.parametrize("key,value", [
    ("workload_file", "model.json"),
    ("rate_scale", 2.0),
    ("workload", {"popularity": "zipf:0.99"}),
])
def test_peers_refuse_what_they_would_silently_drop(tool: str, key: str, value: object) -> None:
    """A peer tool cannot replay a captured model, scale its rates or draw Zipf keys: a
    study that asks for one is refused (exit 2, naming the key) instead of measured
    without it; the defaults, and kvload, are accepted."""
    spec = LoadSpec(tool=tool, mode="closed", **{key: value})  # type: ignore[arg-type]
    shown = "workload.popularity" if key == "workload" else key
    with pytest.raises(UserError, match=rf"cannot honour load\.{shown}"):
        load.driver_for(spec)
    load.driver_for(LoadSpec(tool=tool, mode="closed",
                             workload={"popularity": "uniform"}))  # type: ignore[arg-type]
    load.driver_for(LoadSpec(tool="kvload", mode="closed", **{key: value}))  # type: ignore[arg-type]
