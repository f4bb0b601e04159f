"""cgroup files of the cgroup kvtune creates for the server (and removes after the study):
CPU quota and period, cpuset; plus the server's CPU affinity.

Values are given in v1 terms and translated for v2 by `host.cgroup.ServerCgroup`
(`cpu.cfs_quota_us` → `cpu.max`)."""

from __future__ import annotations

import os

from kvtune import roots
from kvtune.knobs.appliers.base import (
    Applier,
    ApplyEnv,
    Availability,
    ExportEntry,
    HostContext,
)
from kvtune.knobs.domain import Value
from kvtune.safety import programs

PERIOD_KNOB = "placement.cpu_period_us"
DEFAULT_PERIOD_US = 100_000


def host_cpus() -> list[int]:
    """The CPUs kvtune may place the server on: its own affinity (a cpuset it runs in)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def cpu_list_choices(cpus: list[int]) -> tuple[str, ...]:
    """CPU lists worth searching on a host with `cpus`: each single CPU, then each run of
    consecutive CPUs starting at the first (0-1, 0-2, ...), then all of them."""
    if not cpus:
        return ("0",)
    out: list[str] = [str(c) for c in cpus]
    for hi in range(1, len(cpus)):
        if cpus[hi] - cpus[0] == hi:
            out.append(f"{cpus[0]}-{cpus[hi]}")
    whole = ",".join(str(c) for c in cpus)
    if not any(len(_parse(x)) == len(cpus) for x in out):
        out.append(whole)
    return tuple(dict.fromkeys(out))


def _parse(text: str) -> list[int]:
    from kvtune.cpulist import parse_cpus

    return parse_cpus(text)


def _cpu_controller(ctx: HostContext) -> Availability:
    if ctx.facts.cgroup in ("v1", "hybrid") and ctx.fs.exists(
            f"{roots.CGROUP}/cpu/cpu.cfs_quota_us"):
        return Availability(True)
    if ctx.facts.cgroup == "v2" and "cpu" in ctx.fs.read_text(
            f"{roots.CGROUP}/cgroup.subtree_control", default="").split():
        return Availability(True)
    return Availability(False, "no cgroup cpu controller with CFS bandwidth is mounted "
                               "(v1 /sys/fs/cgroup/cpu, or cpu in the v2 subtree_control)")


class CpuQuota(Applier):
    """The server's CPU quota in percent of one CPU (200 = two CPUs' worth); -1 = none.
    The period is `placement.cpu_period_us` when the study tunes it, else 100 ms."""

    scope = "cgroup"
    restart = False

    def controllers(self) -> tuple[str, ...]:
        return ("cpu",)

    def __init__(self, period_us: int = DEFAULT_PERIOD_US) -> None:
        self.period_us = period_us

    def where(self) -> str:
        return "cgroup cpu.cfs_quota_us (v1) / cpu.max (v2)"

    def check(self, ctx: HostContext) -> Availability:
        return _cpu_controller(ctx)

    def quota_us(self, pct: int, period_us: int) -> int:
        # The kernel refuses quotas under 1 ms.
        return -1 if pct < 0 else max(1000, period_us * pct // 100)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        period = int(env.launch.params.get(PERIOD_KNOB, self.period_us))
        env.launch.cgroup_files[("cpu", "cpu.cfs_period_us")] = str(period)
        env.launch.cgroup_files[("cpu", "cpu.cfs_quota_us")] = str(
            self.quota_us(int(value), period))

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("systemd", "CPUQuota", "" if int(value) < 0 else f"{int(value)}%")


class CpuPeriod(Applier):
    """The CFS bandwidth period of the server's cgroup (1 ms … 1 s). The quota follows it,
    so `placement.cpu_quota_pct` keeps meaning the same share of CPU."""

    scope = "cgroup"
    restart = False

    def controllers(self) -> tuple[str, ...]:
        return ("cpu",)

    def where(self) -> str:
        return "cgroup cpu.cfs_period_us (v1)"

    def check(self, ctx: HostContext) -> Availability:
        if ctx.facts.cgroup == "v2":
            return Availability(False, "on cgroup v2 the period is part of cpu.max, and "
                                       "kvtune's v2 cgroup writer fixes it at 100000 µs")
        return _cpu_controller(ctx)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.cgroup_files[("cpu", "cpu.cfs_period_us")] = str(int(value))

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("systemd", "CPUQuotaPeriodSec", f"{int(value) / 1000:g}ms")


def _cpus_check(ctx: HostContext) -> Availability:
    # `current` is for people (`kvtune knobs`); the study's baseline placement is its own
    # target.cpus, which the runner decides.
    return Availability(True, current=cpu_list_text(host_cpus()))


def cpu_list_text(cpus: list[int]) -> str:
    """[0, 1, 2, 5] → '0-2,5'."""
    parts: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


class CpusetCpus(Applier):
    """The server's cpuset, as a CPU list ("0", "0-1")."""

    scope = "cgroup"
    restart = False

    def controllers(self) -> tuple[str, ...]:
        return ("cpuset",)

    def where(self) -> str:
        return "cgroup cpuset.cpus"

    def check(self, ctx: HostContext) -> Availability:
        if ctx.fs.exists(f"{roots.CGROUP}/cpuset/cpuset.cpus") or "cpuset" in ctx.fs.read_text(
                f"{roots.CGROUP}/cgroup.subtree_control", default="").split():
            return _cpus_check(ctx)
        return Availability(False, "no cgroup cpuset controller is mounted")

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.cgroup_files[("cpuset", "cpuset.cpus")] = str(value)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("systemd", "AllowedCPUs", _systemd_cpus(value))


class ServerCpus(Applier):
    """The CPUs the server process is pinned to (sched_setaffinity via taskset)."""

    scope = "placement"
    restart = True

    def where(self) -> str:
        return "server CPU affinity (taskset)"

    def check(self, ctx: HostContext) -> Availability:
        taskset, why = programs.lookup("taskset")
        if taskset is None:
            return Availability(False, f"{why} (util-linux's taskset pins the server)")
        return _cpus_check(ctx)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.server_cpus = str(value)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("systemd", "CPUAffinity", _systemd_cpus(value))


def _systemd_cpus(value: Value) -> str:
    # systemd takes CPU lists with ranges separated by spaces ("0-1 3").
    return str(value).replace(",", " ")
