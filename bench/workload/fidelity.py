#!/usr/bin/env python3
"""How faithful a workload model is (issue 21), side by side in one run on this host.

1. Capture: kvload drives a known workload into a fresh memcached; `kvtune workload
   capture` records it. The model must recover it: verb mix within 1 point, Zipf exponent
   within 0.05, key and value sizes within a KS distance of 0.05, rate within 2%.
2. Replay: the same known workload, the captured model (`kvload --workload`) and the
   captured trace (`kvload --trace`), each against a fresh memcached for the same window.
   The server's own counters say what it saw: get share, hit ratio, rate, and how its
   items spread over the slab classes (total variation distance to the original's).
3. Import: a Twitter-format trace with known verb shares, rate and sizes is imported and
   replayed (model and request by request); the server sees the trace's shares, rate and
   size mix.
4. Cost: closed-loop throughput of a CPU-capped server with and without a watcher
   (memcached `watch fetchers mutations`, Redis MONITOR), interleaved rounds.
5. What belongs to a key (issue 33): a Twitter-format trace whose sizes are fixed per key
   (~100 B for 60% of the keys, ~1 KB for 30%, ~8 KB for 10%, drawn at random; Zipf 1.0)
   is imported and replayed three ways: the model with its per-key sizes (`key_buckets`),
   the same model without them (the per-request sizes, as before issue 33), and the trace.
   The server's bytes per item and items per slab class say whether the replay stores the
   trace's bytes; its bytes received per request whether it sends them
   (`--only per-key` runs this part alone).

The server runs on --server-cpu; kvload, the capture and the watchers on --client-cpu.

    .venv/bin/python bench/workload/fidelity.py --json bench/workload/fidelity.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
KVLOAD = str(REPO / "kvload" / "target" / "release" / "kvload")

# The known workload of parts 1 and 2.
TRUTH = {"rate": 10_000, "keys": 20_000, "zipf": 0.99, "get": 0.9, "value": (100, 2000),
         "key_sizes": {10: 1, 20: 2, 40: 1}, "ttl": "list:0:1,3600:1"}
KNOWN = ["--rate", str(TRUTH["rate"]), "--keys", str(TRUTH["keys"]), "--popularity",
         f"zipf:{TRUTH['zipf']}", "--mix", "get:9,set:1", "--value-size", "100-2000",
         "--key-size", "list:10:1,20:2,40:1", "--ttl", TRUTH["ttl"], "--connections", "8"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int) -> None:
    for _ in range(200):
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        time.sleep(0.05)
    raise SystemExit(f"bench: nothing listens on {port}")


class Server:
    def __init__(self, kind: str, cpu: str, cgroup: str | None = None) -> None:
        self.kind, self.port = kind, free_port()
        if kind == "memcached":
            argv = ["memcached", "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-t",
                    "2", "-m", "1024", "-u", "nobody"]
        else:
            argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no"]
        self.p = subprocess.Popen(["taskset", "-c", cpu, *argv], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wait_port(self.port)
        if cgroup:
            Path(cgroup, "tasks").write_text(str(self.p.pid))

    def stats(self, sub: str = "") -> dict[str, str]:
        with socket.create_connection(("127.0.0.1", self.port), timeout=3) as s:
            s.sendall(f"stats {sub}\r\n".encode() if sub else b"stats\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        out = {}
        for line in buf.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out

    def stop(self) -> None:
        self.p.terminate()
        self.p.wait()


def kvload(port: int, args: list[str], cpu: str, protocol: str = "memcache") -> subprocess.Popen:
    return subprocess.Popen([KVLOAD, "--server", f"127.0.0.1:{port}", "--cpus", cpu,
                             "--protocol", protocol, "-q", *args])


def kvtune(*args: str, cpu: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["taskset", "-c", cpu, sys.executable, "-m", "kvtune", *args],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"bench: kvtune {' '.join(args)}: {r.stderr}")
    return r


def weighted(spec: str) -> list[tuple[float, float]]:
    if not spec.startswith("list:"):
        return [(float(spec), 1.0)]
    items = [(float(a), float(b)) for a, b in (p.split(":") for p in spec[5:].split(","))]
    total = sum(w for _, w in items)
    return sorted((v, w / total) for v, w in items)


def ks_uniform(spec: str, lo: float, hi: float) -> float:
    """KS distance between a model's weighted list and the continuous uniform [lo, hi]
    (kvload's A-B draws integers; the steps of the list are checked on both sides)."""
    worst, acc = 0.0, 0.0
    for v, w in weighted(spec):
        f = min(max((v - lo + 1) / (hi - lo + 1), 0.0), 1.0)
        f_before = min(max((v - lo) / (hi - lo + 1), 0.0), 1.0)
        worst = max(worst, abs(acc - f_before))
        acc += w
        worst = max(worst, abs(acc - f))
    return worst


def ks_discrete(spec: str, truth: dict[int, float]) -> float:
    total = sum(truth.values())
    support = sorted(set(truth) | {int(v) for v, _ in weighted(spec)})
    model = dict((int(v), w) for v, w in weighted(spec))
    a = b = worst = 0.0
    for x in support:
        a += model.get(x, 0.0)
        b += truth.get(x, 0) / total
        worst = max(worst, abs(a - b))
    return worst


def mix_of(spec: str) -> dict[str, float]:
    items = {v: float(w) for v, w in (p.split(":") for p in spec.split(","))}
    total = sum(items.values())
    return {v: w / total for v, w in items.items()}


# ---- 1. capture ---------------------------------------------------------------------------

def capture_once(args: argparse.Namespace, tmp: Path, i: int) -> dict[str, Any]:
    srv = Server("memcached", args.server_cpu)
    try:
        load = kvload(srv.port, [*KNOWN, "--duration", "12s", "--warmup", "1s", "--seed",
                                 str(i + 1), "--json", str(tmp / f"orig{i}.json")],
                      args.client_cpu)
        time.sleep(4)
        model, trace = tmp / f"model{i}.json", tmp / f"trace{i}.csv"
        kvtune("workload", "capture", f"memcached://127.0.0.1:{srv.port}", "--duration",
               f"{args.capture_s}s", "-o", str(model), "--keep-trace", str(trace),
               cpu=args.client_cpu)
        load.wait(timeout=60)
    finally:
        srv.stop()
    doc = json.loads(model.read_text())
    ran = json.loads((tmp / f"orig{i}.json").read_text())
    mix = mix_of(doc["mix"])
    s = float(doc["popularity"][5:]) if doc["popularity"].startswith("zipf:") else None
    cap = doc["about"]["captured"]
    return {
        "model": str(model), "trace": str(trace),
        "get_share": round(mix.get("get", 0.0), 4),
        "mix_error_points": round(100 * abs(mix.get("get", 0.0) - TRUTH["get"]), 2),
        "popularity": doc["popularity"][:40],
        "zipf_error": round(abs(s - TRUTH["zipf"]), 4) if s is not None else None,
        "value_size_ks": round(ks_uniform(doc["value_size"], *TRUTH["value"]), 4),
        "key_size_ks": round(ks_discrete(doc["key_size"], TRUTH["key_sizes"]), 4),
        "rate": doc["rate"], "generator_rate": round(ran["achieved_rate"], 1),
        "rate_error_pct": round(100 * (doc["rate"] / ran["achieved_rate"] - 1), 2),
        "seen_fraction": cap.get("seen_fraction"), "dropped_lines": cap.get("skipped_lines"),
        "capture_cost_pct": cap.get("capture_cost", {}).get("increase_pct"),
        "keys": doc["keys"],
    }


# ---- 2. and 3. what the server sees -------------------------------------------------------

def served(args: argparse.Namespace, load_args: list[str], settle: float,
           window: float) -> dict[str, Any]:
    """Runs kvload with `load_args` on a fresh memcached; the server's counters over
    `window` seconds starting `settle` seconds in, and its slab classes at the end."""
    srv = Server("memcached", args.server_cpu)
    try:
        load = kvload(srv.port, load_args, args.client_cpu)
        time.sleep(settle)
        s1, t1 = srv.stats(), time.monotonic()
        time.sleep(window)
        s2, t2 = srv.stats(), time.monotonic()
        slabs = srv.stats("slabs")
        load.wait(timeout=120)
    finally:
        srv.stop()

    def d(k: str) -> float:
        return float(s2.get(k, 0)) - float(s1.get(k, 0))
    gets, sets = d("cmd_get"), d("cmd_set")
    deletes = d("delete_hits") + d("delete_misses")
    total = gets + sets + deletes
    chunks: dict[int, int] = {}
    for k, v in slabs.items():
        cls, _, name = k.partition(":")
        if name == "used_chunks" and cls.isdigit() and int(v):
            chunks[int(slabs[f"{cls}:chunk_size"])] = int(v)
    items = sum(chunks.values())
    return {"rate": round(total / (t2 - t1), 1),
            "get_share": round(gets / total, 4) if total else None,
            "set_share": round(sets / total, 4) if total else None,
            "delete_share": round(deletes / total, 4) if total else None,
            "hit_ratio": round(d("get_hits") / gets, 4) if gets else None,
            "items": items,
            "slab_shares": {str(c): round(n / items, 4) for c, n in sorted(chunks.items())}}


def tvd(a: dict[str, float], b: dict[str, float]) -> float:
    return round(0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b)), 4)


def compare(ref: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    out = {"slab_tvd": tvd(ref["slab_shares"], got["slab_shares"]),
           "rate_error_pct": round(100 * (got["rate"] / ref["rate"] - 1), 2),
           "items_ratio": round(got["items"] / ref["items"], 3) if ref["items"] else None}
    for k in ("get_share", "hit_ratio"):
        if ref.get(k) is not None and got.get(k) is not None:
            out[f"{k}_points"] = round(100 * (got[k] - ref[k]), 2)
    return out


def replay(args: argparse.Namespace, cap: dict[str, Any]) -> dict[str, Any]:
    w = args.window
    orig = served(args, [*KNOWN, "--duration", f"{w + 3}s", "--warmup", "1s"], 2.0, w)
    model = served(args, ["--workload", cap["model"], "--duration", f"{w + 3}s", "--warmup",
                          "1s"], 2.0, w)
    # The trace is as long as the capture: replayed once, its first second as the warm-up.
    trace = served(args, ["--trace", cap["trace"], "--warmup", "1s"], 1.5,
                   max(1.0, args.capture_s - 2.5))
    return {"original": orig, "model": model, "trace": trace,
            "model_vs_original": compare(orig, model),
            "trace_vs_original": compare(orig, trace)}


def twitter_trace(path: Path, seconds: int, per_second: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    ops = rng.choice(["get", "set", "delete"], size=seconds * per_second, p=[0.75, 0.2, 0.05])
    ranks = rng.zipf(1.2, size=len(ops)) % 30_000
    sizes = rng.choice([64, 300, 1500, 6000], size=len(ops), p=[0.4, 0.3, 0.2, 0.1])
    with path.open("w") as f:
        for n, (op, r, sz) in enumerate(zip(ops, ranks, sizes, strict=True)):
            key = f"tw:{r:08d}"
            f.write(f"{1_000_000 + n // per_second},{key},{len(key)},{sz},c{n % 16},{op},"
                    f"{600 if op == 'set' else 0}\n")
    return {"get": 0.75, "set": 0.2, "delete": 0.05, "rate": per_second,
            "value_sizes": {64: 0.4, 300: 0.3, 1500: 0.2, 6000: 0.1}}


def per_key_trace(path: Path, keys: int = 20_000, rows: int = 90_000, seconds: int = 30,
                  seed: int = 8) -> dict[str, Any]:
    """The Twitter layout of part 5: each key keeps one size; Zipf 1.0 over the keys."""
    rng = np.random.default_rng(seed)
    base = rng.choice([100, 1000, 8000], size=keys, p=[0.6, 0.3, 0.1])
    sizes = (base * rng.uniform(0.9, 1.1, keys)).astype(int)
    w = np.arange(1, keys + 1, dtype=float) ** -1.0
    ranks = rng.choice(keys, size=rows, p=w / w.sum())
    ops = rng.choice(["get", "set"], size=rows, p=[0.9, 0.1])
    with path.open("w") as f:
        for n, (r, op) in enumerate(zip(ranks, ops, strict=True)):
            key = f"tw:{r:08d}"
            f.write(f"{1_000_000 + n * seconds // rows},{key},{len(key)},{sizes[r]},"
                    f"c{n % 16},{op},{600 if op == 'set' else 0}\n")
    seen = np.unique(ranks)
    return {"keys_requested": len(seen),
            "mean_value_per_key": round(float(sizes[seen].mean()), 1),
            "mean_value_per_request": round(float(sizes[ranks].mean()), 1),
            "mean_value_all_keys": round(float(sizes.mean()), 1)}


def stored(args: argparse.Namespace, load_args: list[str], settle: float,
           window: float) -> dict[str, Any]:
    """What a fresh memcached holds after `load_args` (bytes per item, slab classes) and
    the bytes it received per request over `window` seconds."""
    srv = Server("memcached", args.server_cpu)
    try:
        load = kvload(srv.port, load_args, args.client_cpu)
        time.sleep(settle)
        s1 = srv.stats()
        time.sleep(window)
        s2 = srv.stats()
        load.wait(timeout=120)
        s3, slabs = srv.stats(), srv.stats("slabs")
    finally:
        srv.stop()
    reqs = sum(float(s2[k]) - float(s1[k]) for k in ("cmd_get", "cmd_set"))
    chunks: dict[int, int] = {}
    for k, v in slabs.items():
        cls, _, name = k.partition(":")
        if name == "used_chunks" and cls.isdigit() and int(v):
            chunks[int(slabs[f"{cls}:chunk_size"])] = int(v)
    items = sum(chunks.values())
    return {"items": int(s3["curr_items"]),
            "bytes_per_item": round(int(s3["bytes"]) / max(1, int(s3["curr_items"])), 1),
            "bytes_read_per_request": round((float(s2["bytes_read"]) - float(s1["bytes_read"]))
                                            / max(1.0, reqs), 1),
            "slab_shares": {str(c): round(n / items, 4) for c, n in sorted(chunks.items())}}


def per_key(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    src = tmp / "per-key.csv"
    truth = per_key_trace(src, seed=args.trace_seed)
    model, trace = tmp / "pk-model.json", tmp / "pk-trace.csv"
    kvtune("workload", "import", "twitter", str(src), "-o", str(model), "--keep-trace",
           str(trace), cpu=args.client_cpu)
    doc = json.loads(model.read_text())
    flat_doc = {k: v for k, v in doc.items() if k != "key_buckets"}
    flat = tmp / "pk-flat.json"
    flat.write_text(json.dumps(flat_doc))
    w = args.window
    run = ["--duration", f"{w + 3}s", "--warmup", "1s"]
    by_trace = stored(args, ["--trace", str(trace), *run], 2.0, w)
    by_model = stored(args, ["--workload", str(model), *run], 2.0, w)
    by_flat = stored(args, ["--workload", str(flat), *run], 2.0, w)
    out: dict[str, Any] = {"truth": truth, "model_per_key": doc["about"].get("per_key"),
                           "by_trace": by_trace, "by_model": by_model,
                           "by_model_without_buckets": by_flat}
    ref = by_trace["bytes_per_item"]
    for name, got in (("by_model", by_model), ("by_model_without_buckets", by_flat)):
        out[f"{name}_vs_trace"] = {
            "bytes_per_item_pct": round(100 * (got["bytes_per_item"] / ref - 1), 1),
            "bytes_read_per_request_pct": round(100 * (got["bytes_read_per_request"]
                                                       / by_trace["bytes_read_per_request"]
                                                       - 1), 1),
            "slab_tvd": tvd(by_trace["slab_shares"], got["slab_shares"])}
    return out


def imported(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    src = tmp / "twitter.csv"
    truth = twitter_trace(src, 30, 3000)
    model, trace = tmp / "tw-model.json", tmp / "tw-trace.csv"
    kvtune("workload", "import", "twitter", str(src), "-o", str(model), "--keep-trace",
           str(trace), cpu=args.client_cpu)
    doc = json.loads(model.read_text())
    w = args.window
    by_model = served(args, ["--workload", str(model), "--duration", f"{w + 3}s", "--warmup",
                             "1s"], 2.0, w)
    by_trace = served(args, ["--trace", str(trace), "--warmup", "1s", "--duration",
                             f"{w + 3}s"], 2.0, w)
    out: dict[str, Any] = {"truth": truth, "model_mix": doc["mix"], "model_rate": doc["rate"],
                           "model_value_size": doc["value_size"],
                           "by_model": by_model, "by_trace": by_trace}
    for name, got in (("by_model", by_model), ("by_trace", by_trace)):
        # memcached counts a miss on delete too; its get share includes the misses.
        out[f"{name}_errors"] = {
            "get_points": round(100 * (got["get_share"] - truth["get"]), 2),
            "set_points": round(100 * (got["set_share"] - truth["set"]), 2),
            "delete_points": round(100 * (got["delete_share"] - truth["delete"]), 2),
            "rate_error_pct": round(100 * (got["rate"] / truth["rate"] - 1), 2)}
    out["slab_tvd_model_vs_trace"] = tvd(by_trace["slab_shares"], by_model["slab_shares"])
    return out


# ---- 4. cost -----------------------------------------------------------------------------

WATCHER = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(sys.argv[2].encode() + b"\r\n")
while s.recv(1 << 20):
    pass
"""


def throughput(args: argparse.Namespace, kind: str, watch: bool, cgroup: str | None) -> float:
    srv = Server(kind, args.server_cpu, cgroup)
    watcher = None
    try:
        if watch:
            cmd = "watch fetchers mutations" if kind == "memcached" else "MONITOR"
            watcher = subprocess.Popen(["taskset", "-c", args.client_cpu, sys.executable, "-c",
                                        WATCHER, str(srv.port), cmd])
            time.sleep(0.3)
        out = Path(tempfile.mkstemp(suffix=".json")[1])
        kvload(srv.port, ["--mode", "closed", "--connections", "8", "--pipeline", "4",
                          "--keys", "10000", "--popularity", "zipf:0.99", "--value-size",
                          "200", "--duration", f"{args.cost_s}s", "--warmup", "1s", "--json",
                          str(out)], args.client_cpu,
               "resp" if kind == "redis" else "memcache").wait(timeout=120)
        rate = float(json.loads(out.read_text())["achieved_rate"])
        out.unlink()
        return rate
    finally:
        if watcher:
            watcher.kill()
            watcher.wait()
        srv.stop()


def cost(args: argparse.Namespace) -> dict[str, Any]:
    cg = "/sys/fs/cgroup/cpu/kvtune-bench-fidelity"
    made = False
    if args.quota and os.path.isdir("/sys/fs/cgroup/cpu"):
        os.makedirs(cg, exist_ok=True)
        made = True
        Path(cg, "cpu.cfs_period_us").write_text("100000")
        Path(cg, "cpu.cfs_quota_us").write_text(str(int(args.quota * 100000)))
    try:
        out: dict[str, Any] = {"server_cpu_quota": args.quota if made else None}
        for kind, what in (("memcached", "watch"), ("redis", "monitor")):
            rounds = []
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                got = {w: throughput(args, kind, w, cg if made else None) for w in order}
                rounds.append({"without": round(got[False]), f"with_{what}": round(got[True]),
                               "ratio": round(got[True] / got[False], 4)})
            out[kind] = {"rounds": rounds,
                         "median_ratio": round(statistics.median(x["ratio"] for x in rounds),
                                               4)}
        return out
    finally:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(cg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-cpu", default="0")
    ap.add_argument("--client-cpu", default="1")
    ap.add_argument("--captures", type=int, default=3)
    ap.add_argument("--capture-s", type=float, default=6.0)
    ap.add_argument("--window", type=float, default=5.0, help="seconds of server counters")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the cost")
    ap.add_argument("--cost-s", type=float, default=3.0)
    ap.add_argument("--quota", type=float, default=0.5,
                    help="the server's CPU quota in the cost part (CPUs; 0: none)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--only", choices=["per-key"], help="run one part alone")
    ap.add_argument("--trace-seed", type=int, default=8,
                    help="the seed of part 5's trace (which sizes the hot keys got)")
    args = ap.parse_args()
    if not os.path.exists(KVLOAD):
        raise SystemExit("bench: build kvload first (make kvload)")
    t0 = time.time()
    if args.only == "per-key":
        with tempfile.TemporaryDirectory() as d:
            pk = per_key(args, Path(d))
        print(json.dumps(pk, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps({"host": os.uname().nodename,
                                                   "seconds": round(time.time() - t0),
                                                   "per_key": pk}, indent=1) + "\n")
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        caps = [capture_once(args, tmp, i) for i in range(args.captures)]
        for c in caps:
            print(f"capture: get {c['get_share']:.4f} ({c['mix_error_points']} pt), "
                  f"{c['popularity']} (err {c['zipf_error']}), KS value "
                  f"{c['value_size_ks']} key {c['key_size_ks']}, rate {c['rate']} vs "
                  f"{c['generator_rate']} ({c['rate_error_pct']}%), seen "
                  f"{c['seen_fraction']}, cost +{c['capture_cost_pct']}% CPU/request")
        rep = replay(args, caps[0])
        for k in ("model_vs_original", "trace_vs_original"):
            print(f"replay {k}: {rep[k]}")
        imp = imported(args, tmp)
        print(f"import: model {imp['by_model_errors']} trace {imp['by_trace_errors']} "
              f"slab TVD model vs trace {imp['slab_tvd_model_vs_trace']}")
        pk = per_key(args, tmp)
        print(f"per key: model {pk['by_model_vs_trace']} without buckets "
              f"{pk['by_model_without_buckets_vs_trace']}")
        for c in caps:
            c.pop("model")
            c.pop("trace")
    co = cost(args)
    for kind in ("memcached", "redis"):
        print(f"cost {kind}: median throughput ratio {co[kind]['median_ratio']} "
              f"{co[kind]['rounds']}")
    doc = {"host": os.uname().nodename, "seconds": round(time.time() - t0),
           "truth": TRUTH, "captures": caps, "replay": rep, "import": imp, "cost": co,
           "per_key": pk}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
