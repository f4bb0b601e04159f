"""Workload models (issue 21): the fit on known truth, trace import (Twitter, Meta, zstd,
malformed lines), live capture of a real memcached (watch) and Redis (MONITOR, --sample)
driven by kvload with a known workload, kvload's replay of the model (TTLs, tables), and
the bad inputs of tests/bad-inputs/traces/."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from support.cli import cli
from support.servers import free_port, running, wait_traffic

from kvtune.workload.model import fit_popularity, parse_weighted, weighted_list

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "bad-inputs" / "traces"


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)


def kvtune(*args: str, cwd: Path | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd)


# ---- the fit against known truth -------------------------------------------------------

def _zipf_counts(n: int, s: float, draws: int, seed: int) -> dict[int, int]:
    rng = np.random.default_rng(seed)
    p = np.arange(1, n + 1, dtype=float) ** -s
    p /= p.sum()
    counts = rng.multinomial(draws, p)
    return {int(rng.integers(1 << 62)) + i: int(c) for i, c in enumerate(counts) if c}


@pytest.mark.parametrize("s", [0.7, 0.99, 1.2])
def test_the_zipf_fit_recovers_the_exponent(s: float) -> None:
    fit = fit_popularity(_zipf_counts(20_000, s, 400_000, 1), 1.0)
    assert fit["spec"].startswith("zipf:")
    assert abs(float(fit["spec"][5:]) - s) <= 0.05, fit["about"]
    assert fit["about"]["ks_distance"] <= 0.05


def test_a_distribution_zipf_cannot_fit_gets_the_empirical_table() -> None:
    # 100 hot keys with 90% of the requests, 9,900 cold ones uniform: a step, not a power law.
    rng = np.random.default_rng(2)
    hot = rng.multinomial(450_000, np.full(100, 0.01))
    cold = rng.multinomial(50_000, np.full(9_900, 1 / 9_900))
    counts = {i: int(c) for i, c in enumerate(np.concatenate([hot, cold])) if c}
    fit = fit_popularity(counts, 1.0)
    assert fit["spec"].startswith("table:"), fit["about"]
    assert fit["about"]["ks_distance"] > 0.05
    buckets = [(int(k), float(m)) for k, m in
               (p.split(":") for p in fit["spec"][6:].split(","))]
    assert sum(k for k, _ in buckets) == len(counts)
    head, seen = 0.0, 0
    for k, m in buckets:  # the buckets of the first 100 ranks carry the hot set's mass
        seen += k
        if seen > 100:
            break
        head += m
    assert abs(head - 0.9) < 0.01, buckets[:10]


def test_a_weighted_list_stays_within_its_ks_bound() -> None:
    rng = np.random.default_rng(3)
    sizes = rng.lognormal(6, 1, 200_000).astype(int) + 1
    spec = weighted_list(Counter(sizes.tolist()))
    items = sorted(parse_weighted(spec))
    assert len(items) <= 64
    xs = np.sort(sizes)
    worst = 0.0
    acc = 0.0
    for v, w in items:
        acc += w
        emp = np.searchsorted(xs, v, side="right") / len(xs)
        worst = max(worst, abs(emp - acc))
    assert worst <= 0.05, worst


# ---- import ----------------------------------------------------------------------------

def _twitter_trace(path: Path, seconds: int = 20, per_second: int = 500) -> None:
    rng = np.random.default_rng(4)
    rows = []
    for t in range(seconds):
        for _ in range(per_second):
            key = f"user:{int(rng.zipf(1.3)) % 5000:06d}"
            op = "get" if rng.random() < 0.8 else "set"
            vsize = int(rng.choice([100, 400])) if op == "set" else 100
            rows.append(f"{1000 + t},{key},{len(key)},{vsize},c{int(rng.integers(8))},{op},"
                        f"{3600 if op == 'set' else 0}")
    path.write_text("\n".join(rows) + "\n")


def test_a_twitter_trace_imports_to_its_mix_rate_and_sizes(tmp_path: Path) -> None:
    trace = tmp_path / "cluster.csv"
    _twitter_trace(trace)
    import zstandard

    zst = tmp_path / "cluster.csv.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(trace.read_bytes()))
    for src in (trace, zst):
        out = tmp_path / f"{src.name}.json"
        r = kvtune("workload", "import", "twitter", str(src), "-o", str(out))
        assert r.returncode == 0, r.stderr
        doc = json.loads(out.read_text())
        mix = dict((v, float(w)) for v, w in (p.split(":") for p in doc["mix"].split(",")))
        assert abs(mix["get"] - 0.8) < 0.02 and abs(mix["set"] - 0.2) < 0.02, doc["mix"]
        assert doc["rate"] == pytest.approx(500, rel=0.01)
        assert sorted(v for v, _ in parse_weighted(doc["value_size"])) == [100, 400]
        assert parse_weighted(doc["ttl"]) == [(3600, 1.0)]
        assert doc["connections"] == 8
        assert "user:" not in out.read_text()  # no key in clear
    # A window and a key sample narrow it; the rate stays the trace's.
    out = tmp_path / "window.json"
    r = kvtune("workload", "import", "twitter", str(trace), "-o", str(out), "--start", "5",
               "--end", "10", "--key-sample", "0.5")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["about"]["imported"]["requests"] < 5 * 500
    assert doc["rate"] == pytest.approx(500, rel=0.15)


def test_meta_layouts_expand_op_count(tmp_path: Path) -> None:
    kv1 = tmp_path / "kv1.csv"
    kv1.write_text("key,op,size,op_count,key_size\n"
                   "a1,GET,100,3,20\nb2,SET,200,1,30\nc3,GET,100,6,20\n")
    kv2 = tmp_path / "kv2.csv"
    kv2.write_text("op_time,key,key_size,op,op_count,size,cache_hits,ttl\n"
                   + "".join(f"{100 + i // 10},k{i % 7},16,{'GET' if i % 4 else 'SET'},2,"
                             f"300,{2 if i % 4 else 0},60\n" for i in range(200)))
    out1, out2 = tmp_path / "m1.json", tmp_path / "m2.json"
    assert kvtune("workload", "import", "meta", str(kv1), "-o", str(out1)).returncode == 0
    d1 = json.loads(out1.read_text())
    assert d1["about"]["requests"] == 10 and d1["mix"] == "get:0.9,set:0.1"
    assert "rate" not in d1  # this layout has no time
    r = kvtune("workload", "import", "meta", str(kv2), "-o", str(out2))
    assert r.returncode == 0, r.stderr
    d2 = json.loads(out2.read_text())
    assert d2["about"]["requests"] == 400 and d2["rate"] == pytest.approx(20)
    assert d2["about"]["hit_ratio"] == 1.0 and parse_weighted(d2["ttl"]) == [(60, 1.0)]


def test_malformed_lines_are_skipped_and_counted_until_too_many(tmp_path: Path) -> None:
    good = tmp_path / "few-bad.csv"
    _twitter_trace(good, seconds=4)
    lines = good.read_text().splitlines()
    lines[10] = "garbage"
    good.write_text("\n".join(lines) + "\n")
    out = tmp_path / "m.json"
    r = kvtune("workload", "import", "twitter", str(good), "-o", str(out))
    assert r.returncode == 0, r.stderr
    imp = json.loads(out.read_text())["about"]["imported"]
    assert imp["malformed_lines_skipped"] == 1 and imp["first_malformed_line"] == 11


@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.iterdir()))
def test_bad_workload_inputs_exit_2_naming_what_and_write_nothing(tmp_path: Path,
                                                                  case: str) -> None:
    src = CORPUS / case
    head = src.read_text(errors="replace").splitlines()[0]
    m = re.match(r"# (\S+) (\S+)(?: (.*))? expect: (.*)$", head)
    assert m, f"{case}: first line names the format and what to expect"
    fmt, how, extra, expect = m.groups()
    body = "\n".join(src.read_text(errors="replace").splitlines()[1:]) + "\n"
    trace = tmp_path / case
    if how == "repeat":  # a short body written many times: a big trace of one mistake
        trace.write_text(body * 2000)
    else:
        trace.write_text(body)
    out = tmp_path / "model.json"
    r = kvtune("workload", "import", fmt, str(trace), "-o", str(out), *(extra or "").split())
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expect in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.parallel  # captures refused before they measure: nothing measured, no host knob
def test_bad_capture_targets(tmp_path: Path, redis_bin: str) -> None:
    out = tmp_path / "m.json"
    for url, code, says in (("http://127.0.0.1:80", 2, "memcached:// or redis://"),
                            ("memcached://10.1.2.3:11211", 2, "not a loopback"),
                            ("memcached://127.0.0.1", 2, "the port"),
                            (f"memcached://127.0.0.1:{free_port()}", 3, "cannot connect")):
        r = kvtune("workload", "capture", url, "-o", str(out), "--duration", "1s")
        assert r.returncode == code and says in r.stderr, (url, r.stderr)
        assert "Traceback" not in r.stderr and not out.exists()
    # A Redis named memcached:// refuses `watch`: exit 3 with the reason, nothing written.
    with running("redis", binary=redis_bin, cwd=tmp_path) as server:
        port = server.port
        r = kvtune("workload", "capture", f"memcached://127.0.0.1:{port}", "-o", str(out),
                   "--duration", "1s")
        assert r.returncode == 3 and "memcached" in r.stderr, r.stderr
        assert not out.exists()
        r = kvtune("workload", "capture", f"redis://127.0.0.1:{port}", "-o",
                   str(tmp_path / "missing" / "m.json"))
        assert r.returncode == 2 and "does not exist" in r.stderr


# ---- live capture of known traffic, and its replay -------------------------------------

def _mix(doc: dict) -> dict[str, float]:
    return {v: float(w) for v, w in (p.split(":") for p in doc["mix"].split(","))}


def test_capture_of_memcached_recovers_the_known_workload_and_replays(
        tmp_path: Path, memcached_bin: str, kvload_bin: str) -> None:
    with running("memcached", ["-t", "2", "-m", "256"], binary=memcached_bin,
                 user="nobody") as server:
        port = server.port
        load = subprocess.Popen([kvload_bin, "--server", f"127.0.0.1:{port}", "--rate",
                                 "8000", "--duration", "9s", "--warmup", "1s", "--keys",
                                 "5000", "--popularity", "zipf:0.99", "--mix", "get:9,set:1",
                                 "--value-size", "list:100:1,1000:1", "--key-size",
                                 "list:12:1,30:1", "--ttl", "list:0:1,600:1",
                                 "--connections", "4", "-q"])
        wait_traffic("memcached", port)
        out = tmp_path / "model.json"
        r = kvtune("workload", "capture", f"memcached://127.0.0.1:{port}", "--duration", "3s",
                   "-o", str(out))
        load.terminate()  # the capture is done: the rest of the traffic is not needed
        load.wait(timeout=30)
        assert r.returncode == 0, r.stderr
        doc = json.loads(out.read_text())
        text = out.read_text()
        # kvload's keys are zero-padded digits; a figure's decimals (0.000403) are not one.
        assert not re.search(r"(?<![\d.])0{3,}\d{3,}\b", text), "a key in clear"
        mix = _mix(doc)
        assert abs(mix["get"] - 0.9) < 0.02 and abs(mix["set"] - 0.1) < 0.02, doc["mix"]
        assert doc["popularity"].startswith("zipf:")
        assert abs(float(doc["popularity"][5:]) - 0.99) < 0.1, doc["about"]["popularity"]
        assert doc["rate"] == pytest.approx(8000, rel=0.1)
        assert sorted(v for v, _ in parse_weighted(doc["value_size"])) == [100, 1000]
        assert sorted(v for v, _ in parse_weighted(doc["key_size"])) == [12, 30]
        # memcached's watcher logs a store's remaining TTL: one second less when its
        # clock (a tick a second, on its own thread) moved between the store and the log.
        ttls = dict(parse_weighted(doc["ttl"]))
        assert {0, 600} <= set(ttls) <= {0, 599, 600} and ttls.get(599, 0) < 0.1, doc["ttl"]
        assert doc["about"]["captured"]["seen_fraction"] > 0.95
        assert "increase_pct" in doc["about"]["captured"]["capture_cost"]
        d = kvtune("workload", "describe", str(out), "--html", str(tmp_path / "w.html"))
        assert d.returncode == 0 and "zipf" in d.stdout and (tmp_path / "w.html").exists()
    # kvload replays the model on a fresh server, at twice its rate.
    with running("memcached", binary=memcached_bin, user="nobody") as server:
        port = server.port
        rep = tmp_path / "replay.json"
        subprocess.run([kvload_bin, "--server", f"127.0.0.1:{port}", "--workload", str(out),
                        "--duration", "2s", "--warmup", "0.5s", "--rate-scale", "2", "-q",
                        "--json", str(rep)], check=True, timeout=60)
        res = json.loads(rep.read_text())
        assert res["achieved_rate"] == pytest.approx(2 * doc["rate"], rel=0.05)
        assert res["config"]["ttl"] == doc["ttl"]


def test_capture_of_redis_by_monitor_and_by_sampling(tmp_path: Path, redis_bin: str,
                                                    kvload_bin: str) -> None:
    with running("redis", binary=redis_bin, cwd=tmp_path) as server:
        port = server.port
        load = subprocess.Popen([kvload_bin, "--server", f"127.0.0.1:{port}", "--protocol",
                                 "resp", "--rate", "3000", "--duration", "8s", "--warmup",
                                 "1s", "--keys", "2000", "--popularity", "zipf:0.9", "--mix",
                                 "get:8,set:2", "--value-size", "300", "--ttl", "900", "-q"])
        wait_traffic("redis", port)
        mon, smp = tmp_path / "monitor.json", tmp_path / "sample.json"
        r = kvtune("workload", "capture", f"redis://127.0.0.1:{port}", "--duration", "2s",
                   "-o", str(mon))
        assert r.returncode == 0, r.stderr
        r2 = kvtune("workload", "capture", f"redis://127.0.0.1:{port}", "--duration", "2s",
                    "--sample", "-o", str(smp))
        load.terminate()  # the capture is done: the rest of the traffic is not needed
        load.wait(timeout=30)
        assert r2.returncode == 0, r2.stderr
        for path in (mon, smp):
            doc = json.loads(path.read_text())
            mix = _mix(doc)
            assert abs(mix["get"] - 0.8) < 0.03, (path.name, doc["mix"])
            assert doc["rate"] == pytest.approx(3000, rel=0.15), path.name
            assert parse_weighted(doc["value_size"]) == [(300, 1.0)], path.name
            assert doc["protocol"] == "resp"
        m = json.loads(mon.read_text())
        assert abs(float(m["popularity"][5:]) - 0.9) < 0.1
        assert parse_weighted(m["ttl"]) == [(900, 1.0)]
        assert "increase_pct" in m["about"]["captured"]["capture_cost"]
        s = json.loads(smp.read_text())
        assert s["keys"] == 2000 and s["popularity"] == "uniform"
        # Remaining TTLs: the preloaded keys have none, keys set since have up to 900 s.
        assert any(0 < v <= 900 for v, _ in parse_weighted(s["ttl"]))
        # MONITOR is bounded: more than a minute is refused before anything connects.
        r = kvtune("workload", "capture", f"redis://127.0.0.1:{port}", "--duration", "2m",
                   "-o", str(tmp_path / "long.json"))
        assert r.returncode == 2 and "60" in r.stderr


def test_replay_honours_ttls_and_tables_on_redis(tmp_path: Path, redis_bin: str,
                                                kvload_bin: str) -> None:
    model = tmp_path / "m.json"
    model.write_text(json.dumps({
        "protocol": "resp", "rate": 2000, "mix": "get:1,set:1", "popularity":
        "table:10:0.5,990:0.5", "ttl": "list:0:1,900:1", "value_size": "64",
        "about": {"source": "test"}}))
    with running("redis", binary=redis_bin, cwd=tmp_path) as server:
        port = server.port
        subprocess.run([kvload_bin, "--server", f"127.0.0.1:{port}", "--workload", str(model),
                        "--duration", "2s", "--warmup", "0.2s", "-q"], check=True, timeout=60)
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"INFO keyspace\r\n")
            time.sleep(0.2)
            info = s.recv(4096).decode()
        m = re.search(r"keys=(\d+),expires=(\d+)", info)
        assert m, info
        keys, expires = int(m.group(1)), int(m.group(2))
        assert keys == 1000  # the table's keyspace, preloaded
        assert 0.2 < expires / keys < 0.8  # sets with a TTL on about half the keys touched


# ---- the normalized trace (--keep-trace) and its request-by-request replay --------------

def _trace_lines(path: Path) -> list[list[str]]:
    text = path.read_text()
    assert text.startswith("# kvtune-trace/1\n")
    return [ln.split(",") for ln in text.splitlines() if not ln.startswith("#")]


def test_an_imported_trace_is_kept_and_replayed_request_by_request(
        tmp_path: Path, memcached_bin: str, kvload_bin: str) -> None:
    src = tmp_path / "cluster.csv"
    _twitter_trace(src, seconds=8, per_second=500)
    model, kept = tmp_path / "m.json", tmp_path / "kept.csv"
    r = kvtune("workload", "import", "twitter", str(src), "-o", str(model),
               "--keep-trace", str(kept))
    assert r.returncode == 0, r.stderr
    rows = _trace_lines(kept)
    assert len(rows) == 4000 and json.loads(model.read_text())["about"]["trace"]["requests"] \
        == 4000
    assert "user:" not in kept.read_text()  # hashed keys only
    sets = [r for r in rows if r[1] == "s"]
    assert abs(len(sets) / len(rows) - 0.2) < 0.03
    assert {r[4] for r in sets} == {"100", "400"} and {r[5] for r in sets} == {"3600"}
    # Whole-second stamps, spread evenly over each second.
    assert [int(r[0]) for r in rows[:3]] == [0, 2000, 4000] and int(rows[-1][0]) == 7_998_000
    with running("memcached", binary=memcached_bin, user="nobody") as server:
        port = server.port
        rep = tmp_path / "replay.json"
        # At 4x: 8 s of trace in 2 s, the first 0.25 s as warm-up.
        r = subprocess.run([kvload_bin, "--server", f"127.0.0.1:{port}", "--trace", str(kept),
                            "--rate-scale", "4", "--warmup", "0.25s", "-q", "--json",
                            str(rep)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        res = json.loads(rep.read_text())
        assert res["config"]["trace"]["requests"] == 4000
        assert res["config"]["keys"] == len({r[2] for r in rows})
        per_verb = {v: d["corrected"]["count"] for v, d in res["latency"]["per_verb"].items()}
        # Every request after the warm-up, in the trace's order: the same sets and gets.
        after = [r for r in rows if int(r[0]) / 4 >= 250_000]
        assert per_verb.get("set", 0) == sum(1 for r in after if r[1] == "s")
        assert per_verb["get"] == sum(1 for r in after if r[1] == "g"), res["requests"]
        assert res["hit_ratio"] == 1.0  # the keyspace was preloaded at the trace's sizes


def test_a_memcached_capture_says_the_deletes_its_stream_cannot_show(
        tmp_path: Path, memcached_bin: str, kvload_bin: str) -> None:
    """memcached 1.6's watcher logs a delete as a fetch: the capture takes the deletes from
    the server's own counters into the model's mix and says so; with --mget-gap-us 0 no
    multi-get is invented."""
    with running("memcached", binary=memcached_bin, user="nobody") as server:
        port = server.port
        load = subprocess.Popen([kvload_bin, "--server", f"127.0.0.1:{port}", "--rate",
                                 "5000", "--duration", "6s", "--warmup", "0.5s", "--keys",
                                 "3000", "--mix", "get:7,set:2,delete:1", "--value-size",
                                 "300", "-q"])
        wait_traffic("memcached", port)
        model = tmp_path / "m.json"
        r = kvtune("workload", "capture", f"memcached://127.0.0.1:{port}", "--duration",
                   "2s", "--mget-gap-us", "0", "-o", str(model))
        load.terminate()  # the capture is done: the rest of the traffic is not needed
        load.wait(timeout=30)
        assert r.returncode == 0, r.stderr
        doc = json.loads(model.read_text())
        mix = _mix(doc)
        assert abs(mix.get("delete", 0) - 0.1) < 0.03, doc["mix"]
        assert abs(mix["get"] - 0.7) < 0.04, doc["mix"]
        assert "mget" not in mix, doc["mix"]
        captured = doc["about"]["captured"]
        assert captured["server_counts"]["deletes"] > 0
        assert "shows no deletes" in r.stdout + r.stderr


def test_a_live_capture_keeps_its_trace(tmp_path: Path, memcached_bin: str,
                                        kvload_bin: str) -> None:
    with running("memcached", binary=memcached_bin, user="nobody") as server:
        port = server.port
        load = subprocess.Popen([kvload_bin, "--server", f"127.0.0.1:{port}", "--rate",
                                 "4000", "--duration", "6s", "--warmup", "0.5s", "--keys",
                                 "3000", "--mix", "get:3,set:1", "--value-size", "700",
                                 "--ttl", "120", "-q"])
        wait_traffic("memcached", port)
        model, kept = tmp_path / "m.json", tmp_path / "kept.csv"
        r = kvtune("workload", "capture", f"memcached://127.0.0.1:{port}", "--duration",
                   "2s", "-o", str(model), "--keep-trace", str(kept))
        load.terminate()  # the capture is done: the rest of the traffic is not needed
        load.wait(timeout=30)
        assert r.returncode == 0, r.stderr
        rows = _trace_lines(kept)
        doc = json.loads(model.read_text())
        assert len(rows) == doc["about"]["captured"]["trace"]["requests"]
        assert len(rows) == pytest.approx(8000, rel=0.1)
        sets = [r for r in rows if r[1] == "s"]
        assert abs(len(sets) / len(rows) - 0.25) < 0.03
        # memcached's watcher logs a store's remaining TTL (its expiry less its clock,
        # which ticks once a second, on its own thread): 119 when the tick fell between
        # the store and its log line (CI's run 59), never anything else.
        stored = {(r[4], r[5]) for r in sets}
        assert ("700", "120") in stored and stored <= {("700", "120"), ("700", "119")}, stored
        assert {r[4] for r in rows if r[1] == "g"} <= {"700", "0"}
        assert not re.search(r",0{3,}\d+,", kept.read_text())  # kvload's keys never in clear
        res = subprocess.run([kvload_bin, "--server", f"127.0.0.1:{port}", "--trace",
                              str(kept), "--warmup", "0.2s", "-q", "--json", "-"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["achieved_rate"] == pytest.approx(4000, rel=0.1)


@pytest.mark.parallel  # kvload and kvtune refusing their arguments: nothing measured
def test_bad_traces_and_keep_trace_misuse(tmp_path: Path, kvload_bin: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("# kvtune-trace/1\n0,g,ff,10,0,0\n5,g,nothex,10,0,0\n")
    r = subprocess.run([kvload_bin, "--trace", str(bad), "--server", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "bad.csv:3" in r.stderr and "key" in r.stderr, r.stderr
    r = subprocess.run([kvload_bin, "--trace", str(bad), "--search", "p99<=1ms"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--search" in r.stderr
    # The Meta layout without times has nothing to replay: exit 2, neither file left.
    kv1 = tmp_path / "kv1.csv"
    kv1.write_text("key,op,size,op_count,key_size\na1,GET,100,3,20\n")
    model, kept = tmp_path / "m.json", tmp_path / "t.csv"
    r = kvtune("workload", "import", "meta", str(kv1), "-o", str(model), "--keep-trace",
               str(kept))
    assert r.returncode == 2 and "no request times" in r.stderr, r.stderr
    assert not model.exists() and not kept.exists()
    r = kvtune("workload", "import", "meta", str(kv1), "-o", str(model), "--keep-trace",
               str(model))
    assert r.returncode == 2 and "model's own file" in r.stderr
    r = kvtune("workload", "capture", "redis://127.0.0.1:6379", "--sample", "-o", str(model),
               "--keep-trace", str(kept))
    assert r.returncode == 2 and "--sample" in r.stderr
    r = kvtune("workload", "capture", "redis://127.0.0.1:6379", "-o", str(model),
               "--keep-trace", str(tmp_path / "nowhere" / "t.csv"))
    assert r.returncode == 2 and "--keep-trace" in r.stderr and "does not exist" in r.stderr
    assert not model.exists() and not kept.exists()
