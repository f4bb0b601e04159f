"""`load.tool: redis-benchmark` — Redis's own benchmark (Debian's redis-tools) as a peer of
kvload, to cross-check what kvload measures (`kvtune run FILE --load-tool redis-benchmark`).

It is closed-loop: each connection sends its next request (or pipeline) when the previous
answer arrives, so there is no offered rate and no coordinated-omission correction; a study
with `load.mode: open` is refused. It runs a request count, not a duration: a short
calibration run (also the warm-up) sizes the measured run to `load.duration`. GET and SET
of the mix run one after the other (redis-benchmark has no mixed test); the keys are
`key:__rand_int__` over `workload.keys`, preloaded by SETs when `workload.preload`.

Metrics: ops_per_sec, mean_us, p50_us, p99_us, max_us (its --csv columns; p95 kept in raw).
Missing: p90_us, p999_us, p9999_us, service_p99_us, hit_ratio, errors, offered_rate,
client_utilization (the percentiles of a mixed GET/SET run are left out: the tests run
separately and percentiles do not add up)."""

from __future__ import annotations

import csv
import io
import re
import time
from typing import TYPE_CHECKING, Any

from kvtune.errors import HarnessError, TrialFailed, UserError
from kvtune.load.base import LoadDriver, LoadResult
from kvtune.safety import programs

if TYPE_CHECKING:
    from kvtune.spec import LoadSpec

MISSING = ("p90_us", "p999_us", "p9999_us", "service_p99_us", "hit_ratio", "errors",
           "server_errors", "client_utilization", "offered_rate")
OPS = {"get": "get", "set": "set"}


def parse_mix(mix: str) -> dict[str, float]:
    """`get:9,set:1` → {"get": 0.9, "set": 0.1}; only GET and SET are supported."""
    weights: dict[str, float] = {}
    for part in mix.split(","):
        op, _, w = part.strip().partition(":")
        op = op.strip().lower()
        if op not in OPS:
            raise UserError(f"load.workload.mix: redis-benchmark runs only get and set, not "
                            f"{op!r}")
        weights[op] = float(w or 1)
    total = sum(weights.values())
    if total <= 0:
        raise UserError(f"load.workload.mix {mix!r} has no weight")
    return {op: w / total for op, w in weights.items() if w > 0}


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    """redis-benchmark --csv: test name → {rps, avg/min/p50/p95/p99/max latency in ms}."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0][:2] != ["test", "rps"]:
        raise HarnessError(f"redis-benchmark printed no CSV table: {text[:200]!r}")
    head = rows[0]
    out = {}
    for r in rows[1:]:
        if len(r) == len(head):
            out[r[0].split()[0].lower()] = {h: float(v) for h, v in zip(head[1:], r[1:],
                                                                         strict=True)}
    return out


class RedisBenchmarkDriver(LoadDriver):
    """Runs `redis-benchmark` (closed loop)."""

    tool = "redis-benchmark"
    closed_loop = True
    # A captured model, its rate scale and a key popularity: the tool draws keys uniformly
    # and has its own workload grammar.
    ignores = ("workload_file", "rate_scale", "workload.popularity", "window", "spin_us")

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        if spec.mode == "open":
            raise UserError("load.tool redis-benchmark is closed-loop (no open-loop rate): set "
                            "load.mode: closed, or use kvload for an open-loop study")
        if (spec.protocol or "resp") != "resp":
            raise UserError("load.tool redis-benchmark speaks RESP only (a Redis target)")
        if not isinstance(spec.workload.value_size, int):
            raise UserError("load.tool redis-benchmark takes a fixed value size (an integer)")
        self.mix = parse_mix(spec.workload.mix)
        self.binary: str | None = None

    def prepare(self) -> None:
        if programs.which("redis-benchmark") is None:
            raise HarnessError("redis-benchmark not found: install redis-tools (make setup)")
        # Only a binary kvtune may execute (kvtune.safety.programs); checked again per run.
        self.binary = programs.find("redis-benchmark", "load.tool redis-benchmark").path

    def _run(self, host: str, port: str, test: str, n: int) -> tuple[dict[str, float], float,
                                                                     list[str]]:
        assert self.binary
        s = self.spec
        argv = [self.binary, "-h", host, "-p", port, "-c", str(s.connections), "-P",
                str(s.pipeline), "-n", str(max(n, 1)), "-r", str(s.workload.keys), "-d",
                str(s.workload.value_size), "-t", test, "--csv", *s.extra_args]
        if s.cpus:
            argv = ["taskset", "-c", s.cpus,
                    *programs.find(self.binary, "load.tool redis-benchmark").argv(argv[1:])]
        t0 = time.monotonic()
        try:
            out = programs.run(argv, "load.tool redis-benchmark", capture_output=True,
                               text=True, timeout=s.duration * 4 + s.warmup + 120)
        except programs.TimeoutExpired:
            raise TrialFailed("redis-benchmark did not finish (server hung?)") from None
        wall = time.monotonic() - t0
        if out.returncode != 0 or re.search(r"error|refused", out.stderr, re.I):
            raise TrialFailed(f"redis-benchmark failed: {out.stderr.strip()[-300:]}",
                              out.stderr[-4000:])
        rows = parse_csv(out.stdout)
        if test not in rows:
            raise HarnessError(f"redis-benchmark printed no {test.upper()} row")
        return rows[test], wall, argv

    def run(self, address: str, protocol: str, seed: int) -> LoadResult:
        if self.binary is None:
            self.prepare()
        if address.startswith("unix:"):
            raise UserError("load.tool redis-benchmark: a TCP server address is needed")
        host, _, port = address.rpartition(":")
        s = self.spec
        raw: dict[str, Any] = {"tool": self.tool, "runs": []}
        if s.workload.preload:
            row, _, argv = self._run(host, port, "set", s.workload.keys * 3)
            raw["runs"].append({"phase": "preload", "argv": argv, "row": row})
        # Calibration (and warm-up): about load.warmup seconds of the first test.
        first = next(iter(self.mix))
        probe_n = 20000
        row, wall, argv = self._run(host, port, first, probe_n)
        raw["runs"].append({"phase": "warmup", "argv": argv, "row": row})
        rate = row["rps"] if row["rps"] > 0 else probe_n / max(wall, 1e-3)
        total = 0.0
        seconds = 0.0
        rows = {}
        for op, w in self.mix.items():
            n = int(rate * s.duration * w)
            row, _, argv = self._run(host, port, op, n)
            raw["runs"].append({"phase": "measure", "test": op, "n": n, "argv": argv,
                                "row": row})
            rows[op] = row
            total += n
            seconds += n / row["rps"] if row["rps"] > 0 else 0.0
        mean_ms = sum(rows[o]["avg_latency_ms"] * w for o, w in self.mix.items())
        metrics: dict[str, Any] = {"ops_per_sec": total / seconds if seconds else 0.0,
                                   "mean_us": mean_ms * 1000,
                                   "max_us": max(r["max_latency_ms"] for r in rows.values())
                                   * 1000}
        if len(rows) == 1:
            (r,) = rows.values()
            metrics.update(p50_us=r["p50_latency_ms"] * 1000, p99_us=r["p99_latency_ms"] * 1000)
        metrics.update({m: None for m in MISSING})
        raw["missing"] = [m for m, v in metrics.items() if v is None] + (
            [] if len(rows) == 1 else ["p50_us", "p99_us"])
        return LoadResult(metrics, "ok", "", raw)
