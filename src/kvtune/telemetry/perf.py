"""`perf stat` attached to the server process for the load window.

Counting mode (`perf stat -x, -e EVENTS -p PID -o FILE`), started before the load and stopped
with SIGINT after it, which makes perf print its totals. Software events (context switches,
CPU migrations, page faults, task clock) work everywhere perf runs; hardware events (cycles,
instructions) are often missing in VMs, where perf prints `<not supported>`: they are then
absent from the result and IPC is not computed. A missing or failing perf never fails a
repetition; the reason is recorded instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvtune.safety import programs
from kvtune.telemetry.base import Collector, ProbeContext

SOFTWARE_EVENTS = ("context-switches", "cpu-migrations", "page-faults", "task-clock")
HARDWARE_EVENTS = ("cycles", "instructions")
EVENTS = HARDWARE_EVENTS + SOFTWARE_EVENTS

# metric name for each event (task-clock is in msec)
_METRIC = {
    "cycles": "perf_cycles",
    "instructions": "perf_instructions",
    "context-switches": "perf_context_switches",
    "cpu-migrations": "perf_cpu_migrations",
    "page-faults": "perf_page_faults",
    "task-clock": "perf_task_clock_ms",
}


def find_perf() -> str | None:
    """$KVTUNE_PERF (a path, or "off" to disable), else `perf` on PATH (judged when it
    starts: kvtune.safety.programs)."""
    env = os.environ.get("KVTUNE_PERF")
    if env:
        return None if env.lower() in ("off", "0", "no", "false") else env
    return programs.which("perf")


@dataclass
class PerfResult:
    counts: dict[str, float] = field(default_factory=dict)  # event -> value
    unsupported: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    error: str | None = None

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for ev, v in self.counts.items():
            if ev in _METRIC:
                out[_METRIC[ev]] = v
        cyc, ins = self.counts.get("cycles"), self.counts.get("instructions")
        if cyc and ins is not None:
            out["perf_ipc"] = ins / cyc
        tc = self.counts.get("task-clock")
        if tc is not None and self.elapsed_s > 0:
            out["perf_cpus_utilized"] = tc / 1000.0 / self.elapsed_s
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"counts": self.counts, "unsupported": self.unsupported,
                "elapsed_s": self.elapsed_s, "error": self.error}


def parse_csv(text: str) -> tuple[dict[str, float], list[str]]:
    """Parse `perf stat -x,` output into {event: value} and the unsupported events.

    Lines look like `2509,,context-switches,698669905,100.00,3.591,K/sec` or
    `<not supported>,,cycles,0,100.00,,`. Event names may carry modifiers (`cycles:u`)."""
    counts: dict[str, float] = {}
    unsupported: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(",")
        if len(parts) < 3:
            continue
        value, event = parts[0].strip(), parts[2].strip().split(":")[0]
        if event not in EVENTS:
            continue
        if value.startswith("<"):  # <not supported> / <not counted>
            if "supported" in value:
                unsupported.append(event)
            continue
        try:
            counts[event] = float(value)
        except ValueError:
            continue
    return counts, unsupported


class PerfStat:
    """One perf stat session on one process."""

    def __init__(self, pid: int, events: tuple[str, ...] = EVENTS,
                 perf: str | None = None) -> None:
        self.pid = pid
        self.events = events
        self.perf = perf if perf is not None else find_perf()
        self._proc: programs.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._stderr: IO[bytes] | None = None
        self._t0 = 0.0
        self.result = PerfResult()

    @property
    def _out(self) -> Path:
        assert self._dir is not None
        return Path(self._dir.name) / "perf.csv"

    def start(self) -> None:
        if not self.perf:
            self.result.error = "perf not found (install linux-perf; `make setup` does)"
            return
        try:
            perf = programs.find(self.perf, "perf")
        except programs.Untrusted as e:  # never run; the repetition goes on without it
            self.result.error = str(e)
            return
        self._dir = tempfile.TemporaryDirectory(prefix="kvtune-perf-")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in _cleanup)
        args = ["stat", "-x", ",", "-e", ",".join(self.events), "-p", str(self.pid), "-o",
                str(self._out)]
        try:
            self._proc = perf.popen(args, stdout=programs.DEVNULL, stderr=self._stderr)
        except OSError as e:
            self.result.error = f"cannot run perf: {e.strerror}"
            self._cleanup()
            return
        self._t0 = time.monotonic()
        # perf needs a moment to open its counters; a load that starts before would be
        # partly missed. It writes nothing on success, so wait for the output file.
        deadline = self._t0 + 2.0
        while time.monotonic() < deadline and not self._out.exists():
            if self._proc.poll() is not None:
                break
            time.sleep(0.01)

    def stop(self, timeout: float = 5.0) -> PerfResult:
        """SIGINT perf, wait, and parse its totals. Safe to call more than once."""
        proc = self._proc
        if proc is None:
            return self.result
        self._proc = None
        self.result.elapsed_s = time.monotonic() - self._t0
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=timeout)
            except programs.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.result.error = "perf did not stop after SIGINT"
        try:
            text = self._out.read_text()
        except OSError:
            text = ""
        counts, unsupported = parse_csv(text)
        self.result.counts, self.result.unsupported = counts, unsupported
        if not counts and self.result.error is None:
            err = ""
            if self._stderr is not None:
                self._stderr.seek(0)
                err = self._stderr.read().decode(errors="replace").strip()
            self.result.error = ("perf counted nothing" + (f": {err.splitlines()[-1]}"
                                                           if err else ""))
        self._cleanup()
        return self.result

    def close(self) -> None:
        """Stop perf without reading it (used when the repetition failed)."""
        proc = self._proc
        self._proc = None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


class PerfCollector(Collector):
    """`perf_`: perf stat attached to the server process."""

    name = "perf"
    prefixes = ("perf_",)

    def __init__(self, ctx: ProbeContext) -> None:
        super().__init__(ctx)
        self.stat = PerfStat(ctx.pid)

    def start(self) -> None:
        self.stat.start()

    def stop(self) -> None:
        self.stat.stop()

    def metrics(self) -> dict[str, float]:
        return self.stat.result.metrics()

    def raw(self) -> dict[str, Any]:
        return self.stat.result.as_dict()

    def close(self) -> None:
        self.stat.close()
