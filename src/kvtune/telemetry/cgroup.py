"""`throttle_`: CFS bandwidth throttling of the server's CPU cgroup over the load window,
from its cpu.stat (v1 or v2): periods, throttled periods, throttled time, their ratio, and
the quota in percent of one CPU.

The cgroup is the one kvtune created for the server when the study has cgroup knobs (then
always measured, with or without a quota), else the CPU cgroup the server runs in when
that one has a quota (a server started under a systemd CPUQuota, say).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kvtune import roots
from kvtune.telemetry.base import Collector, ProbeContext


def cpu_cgroup_dir(pid: int, root: Path = Path(roots.PROC),
                   cgroup_root: Path = Path(roots.CGROUP)) -> Path | None:
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
            for base in (cgroup_root, cgroup_root / "unified"):  # v2, or v2 beside v1
                d = base / path.lstrip("/")
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


class ThrottleCollector(Collector):
    name = "throttle"
    prefixes = ("throttle_",)

    def __init__(self, ctx: ProbeContext) -> None:
        super().__init__(ctx)
        own = ctx.cgroup.dirs.get("cpu") if ctx.cgroup is not None else None
        self.own = own is not None
        self.dir = own if own is not None else cpu_cgroup_dir(ctx.pid)
        self.quota = quota_pct(self.dir) if self.dir is not None else None
        self.active = self.dir is not None and (self.own or self.quota is not None)
        self._before: tuple[float, dict[str, float]] | None = None
        self._after: tuple[float, dict[str, float]] | None = None

    def start(self) -> None:
        if self.active and self.dir is not None:
            self._before = (time.monotonic(), throttle_figures(self.dir))

    def stop(self) -> None:
        if self.active and self.dir is not None:
            self._after = (time.monotonic(), throttle_figures(self.dir))

    def metrics(self) -> dict[str, float]:
        if self._before is None or self._after is None:
            return {}
        b, a = self._before[1], self._after[1]
        out: dict[str, float] = {}
        if self.quota is not None:
            out["throttle_quota_pct"] = self.quota
        for key in ("nr_periods", "nr_throttled", "throttled_ms"):
            if key in a and key in b:
                out["throttle_" + key] = a[key] - b[key]
        periods = out.get("throttle_nr_periods")
        if periods:
            out["throttle_ratio"] = out.get("throttle_nr_throttled", 0.0) / periods
        return out

    def raw(self) -> dict[str, Any]:
        return {"cgroup": str(self.dir) if self.dir else None, "kvtune_cgroup": self.own,
                "quota_pct": self.quota,
                "before": self._before[1] if self._before else None,
                "after": self._after[1] if self._after else None}
