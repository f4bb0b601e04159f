"""Each extension point takes a toy implementation in its own module plus one registration:
the toy runs through kvtune's real machinery (the runner, a real server on loopback)."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from kvtune import load
from kvtune.errors import UserError
from kvtune.knobs.resolve import resolve_knobs
from kvtune.load import base as load_base
from kvtune.runner import Session
from kvtune.spec import parse_spec


class ToyDriver(load.LoadDriver):
    """A closed-loop memcached client in Python: one connection, set then get, for the
    study's load.duration."""

    tool = "toy"

    def run(self, address: str, protocol: str, seed: int) -> load.LoadResult:
        assert protocol == "memcache"
        host, _, port = address.rpartition(":")
        lat: list[float] = []
        hits = gets = 0
        with socket.create_connection((host, int(port)), timeout=5) as s:
            f = s.makefile("rb")
            t0 = time.monotonic()
            while time.monotonic() - t0 < self.spec.duration:
                key = f"toy{seed}:{len(lat) % 100}"
                start = time.perf_counter()
                s.sendall(f"set {key} 0 0 3\r\nabc\r\n".encode())
                assert f.readline() == b"STORED\r\n"
                s.sendall(f"get {key}\r\n".encode())
                gets += 1
                while (line := f.readline()) not in (b"END\r\n", b""):
                    hits += line.startswith(b"VALUE")
                lat.append((time.perf_counter() - start) * 1e6)
            elapsed = time.monotonic() - t0
        us = np.array(lat)
        metrics = {"ops_per_sec": 2 * len(lat) / elapsed, "p50_us": float(np.median(us)),
                   "p99_us": float(np.percentile(us, 99)), "hit_ratio": hits / gets,
                   "errors": 0, "server_errors": 0}
        return load.LoadResult(metrics, "ok", "", {"gets": gets, "sets": len(lat)})


STUDY = """\
study: toy-load
target: {kind: memcached, cpus: "0"}
load: {tool: toy, mode: closed, connections: 1, duration: 300ms, warmup: 10ms, cpus: "1"}
knobs: [{name: memcached.threads, range: [1, 4]}]
objective: {metric: p99_us}
"""


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_base, "_DRIVERS", dict(load_base._DRIVERS))
    load.register(ToyDriver)


def test_toy_load_driver(toy_registered: None, memcached_bin: str) -> None:
    spec, lines = parse_spec(STUDY, "toy.yaml")  # load.tool: toy validates once registered
    assert spec.load is not None and spec.load.tool == "toy"
    session = Session(spec, resolve_knobs(spec, lines), None)
    session.preflight()
    rep = session.measure({**session.baseline, "memcached.threads": 2})
    assert rep.status == "ok", rep.reason
    assert rep.raw["load"]["tool"] == "toy"
    assert rep.metrics["verdict"] == "ok" and rep.metrics["hit_ratio"] == 1.0
    assert rep.metrics["ops_per_sec"] > 0 and rep.metrics["p99_us"] >= rep.metrics["p50_us"]
    # The toy's requests reached the real server the runner started (with the trial's -t 2).
    stats = rep.raw["server_stats"]["stats"]
    assert stats["cmd_get"] == rep.raw["load"]["gets"] > 10
    assert stats["threads"] == 2
    # Telemetry ran around the toy load as around kvload.
    assert rep.metrics["proc_voluntary_switches"] > 0


def test_unknown_load_tool_is_a_study_file_error() -> None:
    with pytest.raises(UserError, match=r"load.tool, line 3: unknown load tool 'toy' "
                                        r"\(known: kvload\)"):
        parse_spec(STUDY, "toy.yaml")
