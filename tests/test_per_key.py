"""What belongs to a key (issue 33, item 0): a trace whose value sizes are fixed per key
(as in every real trace) is imported into a model that keeps sizes per popularity bucket
(`key_buckets`), and kvload's replay stores each key at its own size, so the server holds
the trace's bytes (measured on a real memcached against the trace's own replay). Without
the buckets (the per-request sizes, dominated by the hot keys) it does not."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.cli import cli
from support.servers import mc_stats, running

from kvtune.safety.workload import value_problem
from kvtune.workload.model import ModelBuilder, extend_key_buckets, parse_weighted

KEYS = 20_000


def per_key_trace(path: Path, rows: int = 60_000, seconds: int = 20,
                  seed: int = 5) -> dict[int, int]:
    """A Twitter-format trace: each key keeps one size (~100 B for 60% of keys, ~1 KB for
    30%, ~8 KB for 10%), the hottest 1% small; Zipf 1.0 requests, 90% gets. Returns the
    size of every key requested."""
    rng = np.random.default_rng(seed)
    kind = rng.choice(3, size=KEYS, p=[0.6, 0.3, 0.1])
    kind[: KEYS // 100] = 0  # hot keys hold small values (counters, flags)
    base = np.array([100, 1000, 8000])[kind]
    sizes = (base * rng.uniform(0.9, 1.1, KEYS)).astype(int)
    w = np.arange(1, KEYS + 1, dtype=float) ** -1.0
    ranks = rng.choice(KEYS, size=rows, p=w / w.sum())
    ops = rng.choice(["get", "set"], size=rows, p=[0.9, 0.1])
    seen: dict[int, int] = {}
    with path.open("w") as f:
        for n, (r, op) in enumerate(zip(ranks, ops, strict=True)):
            key = f"k:{r:07d}"
            seen[int(r)] = int(sizes[r])
            f.write(f"{1_000_000 + n * seconds // rows},{key},{len(key)},{sizes[r]},"
                    f"c{n % 8},{op},{3600 if op == 'set' else 0}\n")
    return seen


def kvtune(*args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args)


def test_the_builder_keeps_sizes_and_ttls_per_popularity_bucket() -> None:
    b = ModelBuilder("test")
    rng = np.random.default_rng(1)
    for i in range(20_000):
        k = (int(rng.zipf(1.3)) - 1) % 500  # 0 is the hottest
        size = 8000 if k < 5 else 100  # the five hottest keys are large
        b.request(float(i) / 1000, "set" if i % 10 == 0 else "get", [(k + 1, 10)],
                  value_size=size, ttl=60 if k < 5 else 0,
                  item_sizes=[size])
    doc = b.build()
    buckets = doc["key_buckets"]
    assert buckets[0]["value_size"] == "list:8000:1" and buckets[0]["ttl"] == "list:60:1"
    assert buckets[-1]["value_size"] == "list:100:1"
    assert dict(parse_weighted(buckets[-1]["ttl"])).get(0.0, 0) > 0.9
    assert sum(x["keys"] for x in buckets) == doc["keys"]
    about = doc["about"]["per_key"]
    assert about["mean_value_per_request"] > 5 * about["mean_value_per_key"]
    assert value_problem("key_buckets", buckets) is None
    extend_key_buckets(doc, 1000)
    assert doc["key_buckets"][-1]["keys"] == 1000
    cold = dict(parse_weighted(doc["key_buckets"][-1]["value_size"]))
    assert set(cold) == {8000.0, 100.0}


@pytest.mark.parametrize("bad", [[], [{"keys": 0}], [{"keys": 5, "value_size": "2G"}],
                                 [{"keys": 5, "ttl": "99999999"}], [{"keys": 5, "x": 1}],
                                 [{"value_size": "10"}], "list:1:1", [[1]]])
def test_bad_key_buckets_are_refused_before_kvload(bad: Any) -> None:
    assert value_problem("key_buckets", bad) is not None


def _stored(memcached: str, kvload: str, args: list[str]) -> float:
    """The mean stored item (bytes / items) of a fresh memcached after kvload `args`."""
    with running("memcached", ["-m", "512"], binary=memcached, user="nobody") as srv:
        port = srv.port
        r = subprocess.run([kvload, "--server", f"127.0.0.1:{port}", "-q", *args],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        s = mc_stats(port)
        return int(s["bytes"]) / int(s["curr_items"])


def test_a_replay_stores_the_traces_bytes_per_key(tmp_path: Path, memcached_bin: str,
                                                  kvload_bin: str) -> None:
    src = tmp_path / "tw.csv"
    truth = per_key_trace(src)
    model, kept = tmp_path / "m.json", tmp_path / "t.csv"
    r = kvtune("workload", "import", "twitter", str(src), "-o", str(model),
               "--keep-trace", str(kept))
    assert r.returncode == 0, r.stderr
    doc = json.loads(model.read_text())
    per_key = doc["about"]["per_key"]
    mean_key = sum(truth.values()) / len(truth)
    assert per_key["mean_value_per_key"] == pytest.approx(mean_key, rel=0.03)
    # The hot keys are small: per request the mean is far lower.
    assert per_key["mean_value_per_request"] < 0.7 * mean_key
    run = ["--duration", "1s", "--warmup", "0.2s", "--rate", "1000"]
    by_trace = _stored(memcached_bin, kvload_bin, ["--trace", str(kept), "--warmup", "0.2s",
                                                   "--duration", "1s"])
    by_model = _stored(memcached_bin, kvload_bin, ["--workload", str(model), *run])
    old = dict(doc)
    old.pop("key_buckets")
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps(old))
    by_flat = _stored(memcached_bin, kvload_bin, ["--workload", str(flat), *run])
    assert by_model == pytest.approx(by_trace, rel=0.05), (by_model, by_trace, by_flat)
    assert abs(by_flat / by_trace - 1) > 0.15, (by_model, by_trace, by_flat)
