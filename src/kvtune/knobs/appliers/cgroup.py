"""cgroup files of the cgroup kvtune creates for the server: CPU quota and cpuset.

Values are given in v1 terms and translated for v2 (`cpu.cfs_quota_us` → `cpu.max`)."""

from __future__ import annotations

from kvtune.knobs.appliers.base import Applier, ApplyEnv, HostContext
from kvtune.knobs.domain import Value
from kvtune.knobs.knob import Availability


class CpuQuota(Applier):
    """The server's CPU quota in percent of one CPU (200 = two CPUs' worth); -1 = none."""

    scope = "cgroup"
    restart = False

    def __init__(self, period_us: int = 100_000) -> None:
        self.period_us = period_us

    def where(self) -> str:
        return "cgroup cpu.cfs_quota_us (v1) / cpu.max (v2)"

    def check(self, ctx: HostContext) -> Availability:
        if ctx.facts.cgroup in ("v1", "hybrid") and ctx.fs.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
            return Availability(True)
        if ctx.facts.cgroup == "v2" and "cpu" in ctx.fs.read_text(
                "/sys/fs/cgroup/cgroup.subtree_control", default=""):
            return Availability(True)
        return Availability(False, "no cgroup cpu controller with CFS bandwidth is mounted")

    def apply(self, value: Value, env: ApplyEnv) -> None:
        pct = int(value)  # type: ignore[arg-type]
        quota = -1 if pct < 0 else max(1000, self.period_us * pct // 100)
        env.launch.cgroup_files[("cpu", "cpu.cfs_period_us")] = str(self.period_us)
        env.launch.cgroup_files[("cpu", "cpu.cfs_quota_us")] = str(quota)


class CpusetCpus(Applier):
    """The server's cpuset, as a CPU list ("0", "0-1")."""

    scope = "cgroup"
    restart = False

    def where(self) -> str:
        return "cgroup cpuset.cpus"

    def check(self, ctx: HostContext) -> Availability:
        if ctx.fs.exists("/sys/fs/cgroup/cpuset/cpuset.cpus") or "cpuset" in ctx.fs.read_text(
                "/sys/fs/cgroup/cgroup.subtree_control", default=""):
            return Availability(True)
        return Availability(False, "no cgroup cpuset controller is mounted")

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.cgroup_files[("cpuset", "cpuset.cpus")] = str(value)


class ServerCpus(Applier):
    """The CPUs the server process is pinned to (sched_setaffinity via taskset)."""

    scope = "placement"
    restart = True

    def where(self) -> str:
        return "server CPU affinity"

    def check(self, ctx: HostContext) -> Availability:
        return Availability(True)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.server_cpus = str(value)
