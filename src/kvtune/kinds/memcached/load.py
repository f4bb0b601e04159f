"""`load.tool: memaslap` — libmemcached's memaslap (Debian's libmemcached-tools ships it as
`memcaslap`) as a peer of kvload for memcached, to cross-check what kvload measures.

It is closed-loop (each connection waits for its answers; its `--tps` throttle is not an
open-loop schedule), so a study with `load.mode: open` is refused. The workload goes into
a memaslap config file: fixed key and value sizes, the GET/SET proportions of the mix.
Its keys are its own (it writes the objects it later reads), so `workload.keys` and the
popularity do not carry over.

Metrics: ops_per_sec (its final TPS) and hit_ratio (get_misses / cmd_get). Missing: every
latency percentile, mean_us and max_us (memaslap prints latency only in its periodic
statistics as mean/min/max per period, not per run), errors, offered_rate,
client_utilization."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtune.errors import HarnessError, TrialFailed, UserError
from kvtune.load.base import METRICS, LoadDriver, LoadResult
from kvtune.safety import programs

if TYPE_CHECKING:
    from kvtune.spec import LoadSpec

CMD = {"set": 0, "get": 1}


def parse_mix(mix: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for part in mix.split(","):
        op, _, w = part.strip().partition(":")
        op = op.strip().lower()
        if op not in CMD:
            raise UserError(f"load.workload.mix: memaslap runs only get and set, not {op!r}")
        weights[op] = float(w or 1)
    total = sum(weights.values())
    if total <= 0:
        raise UserError(f"load.workload.mix {mix!r} has no weight")
    return {op: w / total for op, w in weights.items()}


def config_text(spec: LoadSpec) -> str:
    w = spec.workload
    key = w.key_size if isinstance(w.key_size, int) else 16
    mix = parse_mix(w.mix)
    return (f"key\n{key} {key} 1\nvalue\n{w.value_size} {w.value_size} 1\ncmd\n"
            + "".join(f"{CMD[op]} {p:.4f}\n" for op, p in mix.items()))


def parse_output(text: str) -> dict[str, float]:
    """memaslap's final summary: TPS, ops, run time, cmd_get, get_misses."""
    out: dict[str, float] = {}
    m = re.search(r"Run time:\s*([\d.]+)s\s+Ops:\s*(\d+)\s+TPS:\s*(\d+)", text)
    if not m:
        raise HarnessError(f"memaslap printed no summary line: {text[-300:]!r}")
    out["run_time_s"], out["ops"], out["tps"] = float(m[1]), float(m[2]), float(m[3])
    for key in ("cmd_get", "cmd_set", "get_misses"):
        k = re.search(rf"^{key}:\s*(\d+)", text, re.M)
        if k:
            out[key] = float(k[1])
    return out


class MemaslapDriver(LoadDriver):
    """Runs `memcaslap` (closed loop)."""

    tool = "memaslap"
    closed_loop = True
    # A captured model, its rate scale and a key popularity: the tool draws keys uniformly
    # and has its own workload grammar.
    ignores = ("workload_file", "rate_scale", "workload.popularity", "window", "spin_us")

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        if spec.mode == "open":
            raise UserError("load.tool memaslap is closed-loop (no open-loop rate): set "
                            "load.mode: closed, or use kvload for an open-loop study")
        if (spec.protocol or "memcache") != "memcache":
            raise UserError("load.tool memaslap speaks memcached's text protocol only")
        if not isinstance(spec.workload.value_size, int):
            raise UserError("load.tool memaslap takes a fixed value size (an integer)")
        if spec.pipeline != 1:
            raise UserError("load.tool memaslap has no pipeline setting: set load.pipeline: 1")
        parse_mix(spec.workload.mix)
        self.binary: str | None = None

    def prepare(self) -> None:
        name = "memcaslap" if programs.which("memcaslap") else "memaslap"
        if programs.which(name) is None:
            raise HarnessError("memcaslap not found: install libmemcached-tools (make setup)")
        # Only a binary kvtune may execute (kvtune.safety.programs); checked again per run.
        self.binary = programs.find(name, "load.tool memcaslap").path

    def run(self, address: str, protocol: str, seed: int) -> LoadResult:
        if self.binary is None:
            self.prepare()
        binary = str(self.binary)
        if address.startswith("unix:"):
            raise UserError("load.tool memaslap: a TCP server address is needed")
        s = self.spec
        with tempfile.TemporaryDirectory(prefix="kvtune-memaslap-") as tmp:
            cfg = Path(tmp) / "memaslap.cnf"
            cfg.write_text(config_text(s))
            argv = [binary, "-s", address, "-T", "1", "-c", str(s.connections),
                    "-t", f"{max(1, round(s.duration + s.warmup))}s", "-F", str(cfg),
                    *s.extra_args]
            if s.cpus:
                argv = ["taskset", "-c", s.cpus,
                        *programs.find(binary, "load.tool memcaslap").argv(argv[1:])]
            try:
                out = programs.run(argv, "load.tool memcaslap", capture_output=True,
                                   text=True, timeout=s.duration + s.warmup + 60)
            except programs.TimeoutExpired:
                raise TrialFailed("memaslap did not finish (server hung?)") from None
        text = out.stdout + out.stderr
        if out.returncode != 0 or "Run time:" not in text:
            raise TrialFailed(f"memaslap failed: {text.strip()[-300:]}", text[-4000:])
        got = parse_output(text)
        metrics: dict[str, Any] = dict.fromkeys(METRICS)
        metrics["ops_per_sec"] = got["tps"]
        if got.get("cmd_get"):
            metrics["hit_ratio"] = 1 - got.get("get_misses", 0.0) / got["cmd_get"]
        raw = {"tool": self.tool, "argv": argv, "config": config_text(s), "summary": got,
               "output": text[-4000:],
               "missing": [m for m, v in metrics.items() if v is None]}
        return LoadResult(metrics, "ok", "", raw)
