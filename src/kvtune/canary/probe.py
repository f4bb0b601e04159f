"""The canary's optional probe (`kvtune canary --probe-rate R`): for a server without latency
figures of its own (memcached), kvload at a small fixed rate against each server, one run
per look, on keys of its own: 1,000 keys of 48 zero-padded decimal digits (kvload's keys
are decimal indices; 48-digit ones are not a live application's), 100-byte values, get:9,
set:1, one connection. Its p99 per interval is the figure `probe_p99`; its requests are part
of the servers' own counters on both sides alike, and the session states its share of each
server's requests."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from kvtune import targets
from kvtune.canary.watch import Server
from kvtune.errors import HarnessError
from kvtune.safety import programs

KEYS, KEY_SIZE, VALUE = 1000, 48, 100


class Probe:
    """One kvload run per server per look; `collect` waits for the runs started by the
    previous `start` and gives each server's p99 (µs), None when a run failed."""

    def __init__(self, kind: str, rate: float, interval_s: float) -> None:
        from kvtune.load.kvload import find_kvload

        self.protocol = targets.target_class(kind).protocol
        self.rate = rate
        # each run ends before the next look (its schedule, preload and JSON within it)
        self.duration_ms = max(int(interval_s * 1000 * 0.8) - 50, 50)
        self.kvload = programs.find(find_kvload(), "kvload")
        self.running: list[Any] = []

    def argv(self, server: Server, seed: int) -> list[str]:
        return ["--server", server.address, "--protocol", self.protocol, "--rate",
                str(int(self.rate)), "--duration", f"{self.duration_ms}ms", "--warmup", "0s",
                "--keys", str(KEYS), "--key-size", str(KEY_SIZE), "--value-size", str(VALUE),
                "--mix", "get:9,set:1", "--connections", "1", "--seed", str(seed),
                "--json", "-"]

    def start(self, servers: list[Server], look: int) -> None:
        try:
            self.running = [self.kvload.popen(self.argv(s, look), stdout=-1, stderr=-1,
                                              text=True, cwd="/") for s in servers]
        except OSError as e:
            raise HarnessError(f"the probe's kvload did not start: {e}") from None

    def collect(self) -> list[float | None]:
        out: list[float | None] = []
        for p in self.running:
            try:
                stdout, _ = p.communicate(timeout=self.duration_ms / 1000 + 5)
                doc = json.loads(stdout) if p.returncode == 0 else {}
            except programs.TimeoutExpired:
                p.kill()
                p.communicate()
                doc = {}
            except (ValueError, OSError):
                doc = {}
            corr = ((doc.get("latency") or {}).get("total") or {}).get("corrected") or {}
            v = corr.get("p99_us")
            out.append(float(v) if isinstance(v, int | float) and v > 0 else None)
        self.running = []
        return out

    def stop(self) -> None:
        for p in self.running:
            with contextlib.suppress(OSError):
                p.kill()
            with contextlib.suppress(OSError):
                p.wait()
        self.running = []
