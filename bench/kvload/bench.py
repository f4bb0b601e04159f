#!/usr/bin/env python3
"""kvload benchmark driver (see run.sh). Standard library only.

Every figure is measured in the same run, with the same server, connections
and pipeline depth for every client. Client CPU is user+sys time of the client
process from wait4() (getrusage of the child), divided by the requests it
completed. Servers: memcached -t 1 and redis-server, both pinned to CPU 0;
clients pinned to CPU 1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

SERVER_CPU = "0"
RESOLUTION_FLOOR_NS = 20_000
CLIENT_CPU = "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"bench: server on port {port} did not start")


@dataclass
class Run:
    cpu_s: float
    requests: int
    wall_s: float
    extra: dict = field(default_factory=dict)

    @property
    def us_per_req(self) -> float:
        return self.cpu_s * 1e6 / max(self.requests, 1)


def timed(argv: list[str], timeout: float = 120.0) -> tuple[str, float, float]:
    """Like run_child, but measures the child's CPU via wait4."""
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as f:
        p = subprocess.Popen(["taskset", "-c", CLIENT_CPU, *argv], stdout=f, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                p.kill()
                raise SystemExit(f"bench: {argv[0]} timed out")
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        f.seek(0)
        out = f.read()
    if p.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} failed ({p.returncode}):\n{out[-2000:]}")
    return out, ru.ru_utime + ru.ru_stime, time.time() - t0


class Bench:
    def __init__(self, target: str, secs: float, reps: int) -> None:
        self.kvload = os.path.join(target, "kvload")
        self.bare = os.path.join(target, "examples", "bare_client")
        self.overhead = os.path.join(target, "examples", "record_overhead")
        self.secs = secs
        self.reps = reps
        self.tmp = tempfile.mkdtemp(prefix="kvload-bench-")
        self.procs: list[subprocess.Popen] = []
        self.commands: dict[str, str] = {}

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_servers(self) -> None:
        self.mc_port = free_port()
        mc = ["taskset", "-c", SERVER_CPU, "memcached", "-t", "1", "-m", "1024", "-U", "0",
              "-l", "127.0.0.1", "-p", str(self.mc_port)]
        if os.geteuid() == 0:
            mc += ["-u", "root"]
        self.rd_port = free_port()
        rd = ["taskset", "-c", SERVER_CPU, "redis-server", "--port", str(self.rd_port), "--bind",
              "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.tmp]
        for argv in (mc, rd):
            self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(self.mc_port)
        wait_port(self.rd_port)
        self.commands["memcached"] = shlex.join(mc).replace(str(self.mc_port), "PORT")
        self.commands["redis-server"] = shlex.join(rd).replace(str(self.rd_port), "PORT").replace(self.tmp, "TMPDIR")
        # Preload both keyspaces once (10000 keys of 16 B, 100 B values).
        for proto, port in (("memcache", self.mc_port), ("resp", self.rd_port)):
            timed([self.kvload, "--server", f"127.0.0.1:{port}", "--protocol", proto, "--mode", "closed",
                   "--duration", "200ms", "--warmup", "0s", "--quiet"])
        # redis-benchmark's GET reads the literal key "key:__rand_int__" without -r.
        subprocess.run(["redis-cli", "-p", str(self.rd_port), "set", "key:__rand_int__", "x" * 100],
                       check=True, stdout=subprocess.DEVNULL)

    # --- clients -----------------------------------------------------------------
    def run_kvload(self, proto: str, port: int, conns: int, depth: int, mix: str) -> Run:
        argv = [self.kvload, "--server", f"127.0.0.1:{port}", "--protocol", proto, "--mode", "closed",
                "--connections", str(conns), "--pipeline", str(depth), "--duration", f"{self.secs}s",
                "--warmup", "0s", "--no-preload", "--cpus", CLIENT_CPU, "--mix", mix,
                "--key-size", "16", "--value-size", "100", "--quiet", "--json", "-"]
        self.commands[f"kvload {proto} c{conns} p{depth} {mix}"] = "taskset -c 1 kvload/target/release/kvload " + " ".join(argv[1:]).replace(str(port), "PORT")
        out, cpu, wall = timed(argv)
        d = json.loads(out[out.index("{"):])
        n = d["requests"]["completed"]
        return Run(cpu, n, wall, {"rate": d["achieved_rate"], "util": d["client_cpu"]["utilization"]})

    def run_bare(self, proto: str, port: int, conns: int, depth: int) -> Run:
        argv = [self.bare, f"127.0.0.1:{port}", proto, str(conns), str(depth), str(self.secs)]
        self.commands[f"bare {proto} c{conns} p{depth}"] = "taskset -c 1 kvload/target/release/examples/bare_client 127.0.0.1:PORT " + " ".join(argv[2:])
        out, cpu, wall = timed(argv)
        n = int(re.search(r"requests=(\d+)", out).group(1))
        return Run(cpu, n, wall)

    def run_memaslap(self, port: int, conns: int) -> Run:
        cfg = os.path.join(self.tmp, "memaslap.cfg")
        with open(cfg, "w") as f:
            f.write("key\n16 16 1\nvalue\n100 100 1\ncmd\n0 0.1\n1 0.9\n")
        argv = ["memcaslap", "-s", f"127.0.0.1:{port}", "-T", "1", "-c", str(conns), "-t",
                f"{int(self.secs)}s", "-F", cfg]
        self.commands[f"memaslap c{conns}"] = "taskset -c 1 " + " ".join(argv).replace(str(port), "PORT").replace(cfg, "memaslap.cfg")
        out, cpu, wall = timed(argv)
        n = int(re.search(r"Ops:\s*(\d+)", out).group(1))
        return Run(cpu, n, wall)

    def run_redis_benchmark(self, port: int, conns: int, depth: int) -> Run:
        n = 300_000 if depth == 1 else 3_000_000
        argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "get", "-c", str(conns),
                "-P", str(depth), "-n", str(n), "--threads", "1", "-q"]
        self.commands[f"redis-benchmark c{conns} p{depth}"] = "taskset -c 1 " + " ".join(argv).replace(str(port), "PORT")
        out, cpu, wall = timed(argv)
        return Run(cpu, n, wall)

    # --- sections ----------------------------------------------------------------
    def cpu_section(self) -> list[dict]:
        mc, rd = self.mc_port, self.rd_port
        settings = [
            ("memcached get, 16 conns, unpipelined", {
                "kvload": lambda: self.run_kvload("memcache", mc, 16, 1, "get:1"),
                "bare": lambda: self.run_bare("memcache", mc, 16, 1)}),
            ("memcached get:9,set:1, 16 conns, unpipelined", {
                "kvload": lambda: self.run_kvload("memcache", mc, 16, 1, "get:9,set:1"),
                "memaslap": lambda: self.run_memaslap(mc, 16)}),
            ("memcached get, 16 conns, pipeline 16", {
                "kvload": lambda: self.run_kvload("memcache", mc, 16, 16, "get:1"),
                "bare": lambda: self.run_bare("memcache", mc, 16, 16)}),
            ("redis GET, 16 conns, unpipelined", {
                "kvload": lambda: self.run_kvload("resp", rd, 16, 1, "get:1"),
                "bare": lambda: self.run_bare("resp", rd, 16, 1),
                "redis-benchmark": lambda: self.run_redis_benchmark(rd, 16, 1)}),
            ("redis GET, 16 conns, pipeline 16", {
                "kvload": lambda: self.run_kvload("resp", rd, 16, 16, "get:1"),
                "bare": lambda: self.run_bare("resp", rd, 16, 16),
                "redis-benchmark": lambda: self.run_redis_benchmark(rd, 16, 16)}),
        ]
        rows = []
        for name, clients in settings:
            runs: dict[str, list[Run]] = {c: [] for c in clients}
            for rep in range(self.reps):
                order = list(clients)
                random.Random(rep).shuffle(order)  # interleaved, order varied per repetition
                for c in order:
                    runs[c].append(clients[c]())
            med = {c: statistics.median(r.us_per_req for r in rs) for c, rs in runs.items()}
            rate = {c: statistics.median(r.requests / r.wall_s for r in rs) for c, rs in runs.items()}
            rows.append({"setting": name, "us_per_request": med, "req_per_s": rate,
                         "all": {c: [round(r.us_per_req, 3) for r in rs] for c, rs in runs.items()}})
            print(f"  {name}: " + ", ".join(f"{c} {v:.2f} us" for c, v in med.items()), file=sys.stderr)
        return rows

    def open_loop_section(self) -> dict:
        mc = self.mc_port
        # Capacity: closed loop with the open-loop runs' 16 connections, 4 deep.
        caps = [self.run_kvload("memcache", mc, 16, 4, "get:9,set:1").extra["rate"] for _ in range(2)]
        cap = statistics.median(caps)
        self.commands["capacity"] = self.commands["kvload memcache c16 p4 get:9,set:1"]
        rows = []
        # (load, arrival, --spin-us, --realtime); blocking waits are kvload's default.
        cases = [(0.1, "poisson", 0, False), (0.5, "poisson", 0, False), (0.8, "poisson", 0, False),
                 (0.5, "etc", 0, False), (0.5, "fixed", 0, False),
                 (0.1, "poisson", 0, True), (0.5, "poisson", 0, True), (0.8, "poisson", 0, True),
                 (0.5, "etc", 0, True),
                 (0.1, "poisson", 50, True), (0.1, "etc", 50, True), (0.5, "poisson", 50, False),
                 (0.1, "poisson", 50, False)]
        for frac, arrival, spin, rt in cases:
            rate = round(cap * frac)
            dump = os.path.join(self.tmp, f"arr-{arrival}-{frac}-{spin}-{rt}.txt")
            argv = [self.kvload, "--server", f"127.0.0.1:{mc}", "--rate", str(rate), "--arrival", arrival,
                    "--connections", "16", "--duration", f"{max(self.secs, 5)}s", "--warmup", "1s",
                    "--no-preload", "--cpus", CLIENT_CPU, "--spin-us", str(spin), "--dump-arrivals", dump,
                    "--quiet", "--json", "-"] + (["--realtime"] if rt else [])
            self.commands[f"open {arrival} {frac} spin {spin}{' realtime' if rt else ''}"] = "taskset -c 1 kvload/target/release/kvload " + " ".join(argv[1:]).replace(str(mc), "PORT").replace(dump, "arrivals.txt")
            out, cpu, wall = timed(argv)
            d = json.loads(out[out.index("{"):])
            sent = []
            with open(dump) as f:
                for line in f:
                    if not line.startswith("#"):
                        sent.append(int(line.split()[2]))
            sent.sort()
            gaps = [b - a for a, b in itertools.pairwise(sent)]
            fit = goodness_of_fit(gaps, arrival, rate)
            scheduled = d["requests"]["scheduled"] / d["duration_s"]
            rows.append({"arrival": arrival, "fraction": frac, "spin_us": spin, "realtime": rt, "requested": rate,
                         "scheduled": scheduled, "achieved": d["achieved_rate"], "ratio": d["achieved_rate"] / rate,
                         "ratio_scheduled": d["achieved_rate"] / scheduled,
                         "verdict": d["verdict"], "lag_p99_us": d["schedule_lag"]["p99_us"],
                         "lag_p50_us": d["schedule_lag"]["p50_us"],
                         "corrected_p99_us": d["latency"]["total"]["corrected"]["p99_us"], **fit})
            print(f"  open {arrival} {frac:.0%} spin {spin} rt {rt}: {rows[-1]['ratio']:.4f} {fit}", file=sys.stderr)
        return {"capacity": cap, "runs": rows}

    def overhead_section(self) -> dict:
        out, _, _ = timed([self.overhead, "10000000"])
        self.commands["overhead"] = "taskset -c 1 kvload/target/release/examples/record_overhead 10000000"
        return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", out)}


def kolmogorov_p(d: float, n: int) -> float:
    """Asymptotic p-value of the one-sample KS statistic (Stephens' correction)."""
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    if lam < 0.2:
        return 1.0
    return max(0.0, min(1.0, 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))))


def ks(sample: list[float], cdf) -> tuple[float, float]:
    xs = sorted(sample)
    n = len(xs)
    d = 0.0
    for i, x in enumerate(xs):
        f = cdf(x)
        d = max(d, (i + 1) / n - f, f - i / n)
    return d, kolmogorov_p(d, n)


def goodness_of_fit(gaps_ns: list[int], arrival: str, rate: float) -> dict:
    """KS of the actual send gaps against the requested distribution (one thread carries the
    whole rate). The test uses 5000 gaps drawn at random (seeded); D over all gaps is reported
    too. For fixed arrivals the distribution is degenerate, so the gap jitter is reported."""
    mean = 1e9 / rate
    if arrival == "fixed":
        jit = statistics.median(abs(g - mean) for g in gaps_ns)
        return {"n": len(gaps_ns), "test": "median |gap - interval| (ns)", "jitter_ns": jit,
                "mean_gap_ratio": statistics.fmean(gaps_ns) / mean}
    k = 0.154971

    def cdf_for(excess_over: float):
        """CDF of the gap minus `excess_over`, given gap > excess_over: the exponential is
        memoryless; the excess of a GPD(0, s, k) over u is GPD(0, s + k u, k)."""
        if arrival == "poisson":
            return lambda x: 1 - math.exp(-x / mean)
        scale = mean * (1 - k) + k * excess_over
        return lambda x: 1 - (1 + k * x / scale) ** (-1 / k)

    rng = random.Random(1)
    sub1 = rng.sample(gaps_ns, min(1000, len(gaps_ns)))
    d1, p1 = ks(sub1, cdf_for(0))
    d_all, _ = ks(gaps_ns, cdf_for(0))
    # Above a resolution floor: a single-threaded client cannot issue two writes closer
    # than one write system call (several µs on this VM), so test the excess over FLOOR.
    excess = [g - RESOLUTION_FLOOR_NS for g in gaps_ns if g > RESOLUTION_FLOOR_NS]
    e1 = rng.sample(excess, min(1000, len(excess)))
    e5 = rng.sample(excess, min(5000, len(excess)))
    de1, pe1 = ks(e1, cdf_for(RESOLUTION_FLOOR_NS))
    de5, pe5 = ks(e5, cdf_for(RESOLUTION_FLOOR_NS))
    expect_above = 1 - cdf_for(0)(RESOLUTION_FLOOR_NS)
    return {"test": "KS", "D1000": d1, "p1000": p1, "D_all": d_all, "n_all": len(gaps_ns),
            "floor_D1000": de1, "floor_p1000": pe1, "floor_D5000": de5, "floor_p5000": pe5,
            "above_floor": len(excess) / len(gaps_ns), "above_floor_expected": expect_above,
            "zero_gaps": sum(1 for g in gaps_ns if g == 0) / len(gaps_ns),
            "mean_gap_ratio": statistics.fmean(gaps_ns) / mean}


def table(res: dict) -> str:
    out = []
    out.append("### Client CPU time per request (µs, median of %d interleaved runs)\n" % res["reps"])
    out.append("| setting | kvload | bare epoll client | memaslap | redis-benchmark | kvload / bare | kvload / peer | kvload req/s |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in res["cpu"]:
        u = r["us_per_request"]
        k = u["kvload"]
        bare = u.get("bare")
        peer = u.get("memaslap", u.get("redis-benchmark"))
        f = lambda v: f"{v:.2f}" if v is not None else "–"  # noqa: E731
        out.append(f"| {r['setting']} | {k:.2f} | {f(bare)} | {f(u.get('memaslap'))} | {f(u.get('redis-benchmark'))} | "
                   f"{f(k / bare) if bare else '–'} | {f(k / peer) if peer else '–'} | {r['req_per_s']['kvload']:.0f} |")
    ol = res["open"]
    out.append(f"\n### Open loop against memcached (capacity {ol['capacity']:.0f} req/s: closed loop, 16 connections × 4)\n")
    out.append("| arrival | load | wait | requested req/s | achieved/requested | achieved/scheduled | verdict | lag p50 / p99 µs | KS all gaps, n=1000: D (p) | KS gaps > 20 µs, n=1000: D (p) | n=5000: D (p) | share > 20 µs (expected) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ol["runs"]:
        if r["test"] == "KS":
            fit = (f"{r['D1000']:.3f} ({r['p1000']:.3f}) | {r['floor_D1000']:.3f} ({r['floor_p1000']:.3f}) | "
                   f"{r['floor_D5000']:.3f} ({r['floor_p5000']:.3f}) | {r['above_floor']:.3f} ({r['above_floor_expected']:.3f})")
        else:
            fit = f"median abs(gap − interval) {r['jitter_ns'] / 1000:.1f} µs | | | "
        wait = f"spin {r['spin_us']} µs" if r["spin_us"] else "block"
        if r.get("realtime"):
            wait += " + SCHED_FIFO"
        out.append(f"| {r['arrival']} | {r['fraction']:.0%} | {wait} | {r['requested']} | {r['ratio']:.4f} | "
                   f"{r['ratio_scheduled']:.4f} | {r['verdict']} | {r['lag_p50_us']:.1f} / {r['lag_p99_us']:.1f} | {fit} |")
    o = res["overhead"]
    out.append("\n### Recording overhead per request (ns, 10M iterations)\n")
    out.append("| schedule | one clock read (TSC) | histograms + counters | total (schedule + 2 reads + histograms) | clock_gettime | request generation (not recording) |")
    out.append("|---|---|---|---|---|---|")
    out.append(f"| {o['schedule_ns']:.1f} | {o['clock_read_ns']:.1f} | {o['histograms_ns']:.1f} | {o['recording_overhead_ns']:.1f} | "
               f"{o['clock_gettime_ns']:.1f} | {o['request_generation_ns']:.1f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--secs", type=float, default=4.0)
    ap.add_argument("--quick", action="store_true", help="1 repetition of 2 s")
    ap.add_argument("--out", help="also write the results as JSON here")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.secs = 1, 2.0
    for tool in ("memcached", "redis-server", "redis-cli", "memcaslap", "redis-benchmark", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench: {tool} not found")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("bench: needs 2 CPUs (server on CPU 0, client on CPU 1)")
    load0 = os.getloadavg()
    b = Bench(a.target, a.secs, a.reps)
    try:
        b.start_servers()
        print("client CPU per request:", file=sys.stderr)
        cpu = b.cpu_section()
        print("open loop:", file=sys.stderr)
        ol = b.open_loop_section()
        ov = b.overhead_section()
    finally:
        b.close()
    res = {"loadavg_end": os.getloadavg(), "loadavg_start": load0, "reps": a.reps, "secs": a.secs, "cpu": cpu, "open": ol, "overhead": ov, "commands": b.commands,
           "kernel": os.uname().release, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    print(f"Load average at start {load0[0]:.2f}, at end {res['loadavg_end'][0]:.2f} (2 CPUs); "
          f"kernel {res['kernel']}; {res['date']}\n")
    print(table(res))
    print("\n### Commands\n")
    for k, v in b.commands.items():
        print(f"- {k}: `{v}`")


if __name__ == "__main__":
    main()
