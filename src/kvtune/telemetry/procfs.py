"""Collectors over /proc for the load window: the server process (user and system CPU
time, voluntary and involuntary context switches, page faults, threads, resident memory)
and the whole host (context switches, interrupts, the share of CPU time spent in each
state, steal included).

Each figure is a difference between a snapshot before and one after the load, except
gauges (resident memory, threads), which are read at the end.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kvtune import roots
from kvtune.host.facts import proc_status
from kvtune.telemetry.base import Collector, ProbeContext

_CPU_STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def process_figures(pid: int, root: Path = Path(roots.PROC)) -> dict[str, float]:
    """utime/stime (s), minflt/majflt, threads, rss_kb (all threads: /proc/PID/stat sums
    them) and context switches of PID summed over its threads."""
    out: dict[str, float] = {}
    tck = os.sysconf("SC_CLK_TCK")
    try:
        fields = (root / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state); see proc(5)
        out["minflt"] = float(fields[7])
        out["majflt"] = float(fields[9])
        out["utime_s"] = int(fields[11]) / tck
        out["stime_s"] = int(fields[12]) / tck
        out["threads"] = float(fields[17])
    except (OSError, IndexError, ValueError):
        return out
    try:
        for line in (root / str(pid) / "status").read_text().splitlines():
            key, _, val = line.partition(":")
            if key == "VmRSS":
                out["rss_kb"] = float(val.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    # The process's own status counts its main thread's switches only; sum the threads.
    for key, n in proc_status(pid, root).items():
        out[key] = float(n)
    return out


def system_figures(root: Path = Path(roots.PROC)) -> dict[str, float]:
    """Aggregate CPU jiffies by state, context switches and interrupts since boot."""
    out: dict[str, float] = {}
    try:
        text = (root / "stat").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            for name, v in zip(_CPU_STATES, parts[1:], strict=False):
                out["cpu_" + name] = float(v)
        elif parts[0] == "ctxt":
            out["ctxt"] = float(parts[1])
        elif parts[0] == "intr":
            out["intr"] = float(parts[1])
    return out


class ProcessCollector(Collector):
    """`proc_`: the server process from /proc/PID/stat and /proc/PID/task/*/status."""

    name = "proc"
    prefixes = ("proc_",)

    def __init__(self, ctx: ProbeContext) -> None:
        super().__init__(ctx)
        self._before: tuple[float, dict[str, float]] | None = None
        self._after: tuple[float, dict[str, float]] | None = None

    def start(self) -> None:
        self._before = (time.monotonic(), process_figures(self.ctx.pid))

    def stop(self) -> None:
        self._after = (time.monotonic(), process_figures(self.ctx.pid))

    def metrics(self) -> dict[str, float]:
        if self._before is None or self._after is None:
            return {}
        (t0, b), (t1, a) = self._before, self._after
        out: dict[str, float] = {}
        for key, name in (("utime_s", "proc_user_s"), ("stime_s", "proc_system_s"),
                          ("minflt", "proc_minor_faults"), ("majflt", "proc_major_faults"),
                          ("voluntary_ctxt_switches", "proc_voluntary_switches"),
                          ("nonvoluntary_ctxt_switches", "proc_involuntary_switches")):
            if key in a and key in b:
                out[name] = a[key] - b[key]
        if "proc_user_s" in out and "proc_system_s" in out:
            out["proc_cpu_s"] = out["proc_user_s"] + out["proc_system_s"]
            out["proc_cpu_util"] = out["proc_cpu_s"] / max(t1 - t0, 1e-9)
        for key, name in (("rss_kb", "proc_rss_kb"), ("threads", "proc_threads")):
            if key in a:
                out[name] = a[key]
        return out

    def raw(self) -> dict[str, Any]:
        if self._before is None or self._after is None:
            return {"error": "the process was not measured"}
        return {"before": self._before[1], "after": self._after[1],
                "elapsed_s": self._after[0] - self._before[0]}


class SystemCollector(Collector):
    """`sys_` and `steal`: the whole host from /proc/stat. `steal` (the share of all CPU
    time stolen by the hypervisor) is what flags a noisy repetition."""

    name = "sys"
    prefixes = ("sys_", "steal")

    def __init__(self, ctx: ProbeContext) -> None:
        super().__init__(ctx)
        self._before: tuple[float, dict[str, float]] | None = None
        self._after: tuple[float, dict[str, float]] | None = None

    def start(self) -> None:
        self._before = (time.monotonic(), system_figures())

    def stop(self) -> None:
        self._after = (time.monotonic(), system_figures())

    def metrics(self) -> dict[str, float]:
        if self._before is None or self._after is None:
            return {}
        (t0, b), (t1, a) = self._before, self._after
        out: dict[str, float] = {}
        total = sum(a.get("cpu_" + s, 0.0) - b.get("cpu_" + s, 0.0) for s in _CPU_STATES)
        if total > 0:
            for s in ("user", "system", "idle", "iowait", "softirq"):
                out[f"sys_{s}_frac"] = (a.get("cpu_" + s, 0.0) - b.get("cpu_" + s, 0.0)) / total
            out["steal"] = (a.get("cpu_steal", 0.0) - b.get("cpu_steal", 0.0)) / total
        for key in ("ctxt", "intr"):
            if key in a and key in b:
                out[f"sys_{key}_per_sec"] = (a[key] - b[key]) / max(t1 - t0, 1e-9)
        return out

    def raw(self) -> dict[str, Any]:
        if self._before is None or self._after is None:
            return {"error": "the host was not measured"}
        return {"before": self._before[1], "after": self._after[1],
                "elapsed_s": self._after[0] - self._before[0]}


CPUIDLE_ROOT = Path(roots.CPU_DEVICES)


def cpuidle_figures(root: Path = CPUIDLE_ROOT) -> dict[str, float]:
    """µs spent in each cpuidle state since boot, summed over the CPUs, by state name
    (`POLL` is polling: a vCPU that polls burns its host's time)."""
    out: dict[str, float] = {}
    for cpu in root.glob("cpu[0-9]*"):
        for st in (cpu / "cpuidle").glob("state[0-9]*"):
            try:
                name = (st / "name").read_text().strip()[:32]
                out[name] = out.get(name, 0.0) + float((st / "time").read_text())
            except (OSError, ValueError):
                continue
    return out


class CpuidleCollector(Collector):
    """`idle_`: where the CPUs idled during the load, from the cpuidle state counters:
    `idle_poll_frac` (the share of all CPU time spent polling in the POLL state, guest
    halt-polling included: time the host's CPU spent on this VM doing nothing) and
    `idle_halt_frac` (in the deeper states)."""

    name = "idle"
    prefixes = ("idle_",)

    def __init__(self, ctx: ProbeContext) -> None:
        super().__init__(ctx)
        self._before: tuple[float, dict[str, float]] | None = None
        self._after: tuple[float, dict[str, float]] | None = None

    def start(self) -> None:
        self._before = (time.monotonic(), cpuidle_figures())

    def stop(self) -> None:
        self._after = (time.monotonic(), cpuidle_figures())

    def metrics(self) -> dict[str, float]:
        if self._before is None or self._after is None or not self._after[1]:
            return {}
        (t0, b), (t1, a) = self._before, self._after
        cpus = max(len(list(CPUIDLE_ROOT.glob("cpu[0-9]*"))), 1)
        wall_us = max(t1 - t0, 1e-9) * 1e6 * cpus
        poll = a.get("POLL", 0.0) - b.get("POLL", 0.0)
        other = sum(a[k] - b.get(k, 0.0) for k in a if k != "POLL")
        return {"idle_poll_frac": poll / wall_us, "idle_halt_frac": other / wall_us}

    def raw(self) -> dict[str, Any]:
        if self._before is None or self._after is None:
            return {"error": "cpuidle was not measured"}
        return {"before": self._before[1], "after": self._after[1],
                "elapsed_s": self._after[0] - self._before[0]}
