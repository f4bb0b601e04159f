"""Figures from /proc for the load window: the server process (user and system CPU time,
voluntary and involuntary context switches, page faults, threads, resident memory) and
the whole system (context switches, interrupts, and the share of CPU time spent in each
state, steal included), plus the CFS throttling of the server's cgroup when a CPU quota
is set on it.

Each figure is a difference between a snapshot before and one after the load, except
gauges (resident memory, threads), which are read at the end.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtune.host.facts import proc_status

_CPU_STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass
class ProcSnapshot:
    taken: float
    process: dict[str, float] = field(default_factory=dict)
    system: dict[str, float] = field(default_factory=dict)
    throttle: dict[str, float] = field(default_factory=dict)


def process_figures(pid: int, root: Path = Path("/proc")) -> dict[str, float]:
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


def system_figures(root: Path = Path("/proc")) -> dict[str, float]:
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


def cpu_cgroup_dir(pid: int, root: Path = Path("/proc"),
                   cgroup_root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """The directory of PID's CPU cgroup (v1 `cpu` controller, or the v2 unified one)."""
    try:
        lines = (root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        names = controllers.split(",")
        if "cpu" in names:
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                d = cgroup_root / mount / path.lstrip("/")
                if (d / "cpu.stat").exists():
                    return d
        if hier == "0" and controllers == "":
            d = cgroup_root / path.lstrip("/")
            if (d / "cpu.max").exists():
                return d
    return None


def quota_pct(d: Path) -> float | None:
    """The CPU quota of a cgroup in percent of one CPU, or None when unlimited."""
    try:
        if (d / "cpu.max").exists():  # v2: "QUOTA PERIOD" or "max PERIOD"
            parts = (d / "cpu.max").read_text().split()
            if not parts or parts[0] == "max":
                return None
            period = float(parts[1]) if len(parts) > 1 else 100000.0
            return 100.0 * float(parts[0]) / period
        q = int((d / "cpu.cfs_quota_us").read_text())
        p = int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return None if q <= 0 else 100.0 * q / p


def throttle_figures(d: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        for line in (d / "cpu.stat").read_text().splitlines():
            k, _, v = line.partition(" ")
            if k in ("nr_periods", "nr_throttled"):
                out[k] = float(v)
            elif k == "throttled_time":  # v1, ns
                out["throttled_ms"] = float(v) / 1e6
            elif k == "throttled_usec":  # v2
                out["throttled_ms"] = float(v) / 1e3
    except (OSError, ValueError):
        pass
    return out


class ProcProbe:
    """Snapshots before and after the load; `figures()` gives the differences."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cgroup = cpu_cgroup_dir(pid)
        self.quota = quota_pct(self.cgroup) if self.cgroup else None
        self.before: ProcSnapshot | None = None
        self.after: ProcSnapshot | None = None

    def snapshot(self) -> ProcSnapshot:
        import time

        return ProcSnapshot(time.monotonic(), process_figures(self.pid), system_figures(),
                            throttle_figures(self.cgroup) if self.cgroup and self.quota
                            else {})

    def start(self) -> None:
        self.before = self.snapshot()

    def stop(self) -> None:
        self.after = self.snapshot()

    def metrics(self) -> dict[str, float]:
        b, a = self.before, self.after
        if b is None or a is None:
            return {}
        out: dict[str, float] = {}
        elapsed = max(a.taken - b.taken, 1e-9)
        for key, name in (("utime_s", "proc_user_s"), ("stime_s", "proc_system_s"),
                          ("minflt", "proc_minor_faults"), ("majflt", "proc_major_faults"),
                          ("voluntary_ctxt_switches", "proc_voluntary_switches"),
                          ("nonvoluntary_ctxt_switches", "proc_involuntary_switches")):
            if key in a.process and key in b.process:
                out[name] = a.process[key] - b.process[key]
        if "proc_user_s" in out:
            out["proc_cpu_util"] = (out.get("proc_user_s", 0.0)
                                    + out.get("proc_system_s", 0.0)) / elapsed
        for key, name in (("rss_kb", "proc_rss_kb"), ("threads", "proc_threads")):
            if key in a.process:
                out[name] = a.process[key]
        total = sum(a.system.get("cpu_" + s, 0.0) - b.system.get("cpu_" + s, 0.0)
                    for s in _CPU_STATES)
        if total > 0:
            for s in ("user", "system", "idle", "iowait", "softirq", "steal"):
                out[f"sys_{s}_frac"] = (a.system.get("cpu_" + s, 0.0)
                                        - b.system.get("cpu_" + s, 0.0)) / total
        for key in ("ctxt", "intr"):
            if key in a.system and key in b.system:
                out[f"sys_{key}_per_sec"] = (a.system[key] - b.system[key]) / elapsed
        if self.quota is not None:
            out["throttle_quota_pct"] = self.quota
            for key in ("nr_periods", "nr_throttled", "throttled_ms"):
                if key in a.throttle and key in b.throttle:
                    out["throttle_" + key] = a.throttle[key] - b.throttle[key]
            periods = out.get("throttle_nr_periods")
            if periods:
                out["throttle_ratio"] = out.get("throttle_nr_throttled", 0.0) / periods
        return out

    def raw(self) -> dict[str, Any]:
        return {"cgroup": str(self.cgroup) if self.cgroup else None, "quota_pct": self.quota,
                "before": self.before.__dict__ if self.before else None,
                "after": self.after.__dict__ if self.after else None}
