"""The cgroup kvtune creates for the server (v1 controllers, or v2), removed by the journal."""

from __future__ import annotations

import os
from pathlib import Path

from kvtune import roots
from kvtune.errors import HarnessError
from kvtune.host.fs import HostFS
from kvtune.host.journal import Journal

V2_NAMES = {("cpu", "cpu.cfs_quota_us"): "cpu.max", ("cpuset", "cpuset.cpus"): "cpuset.cpus"}


class ServerCgroup:
    """One directory per controller under v1 (`/sys/fs/cgroup/cpu/kvtune-PID`), or one
    directory under v2 (`/sys/fs/cgroup[/unified]/kvtune-PID`)."""

    def __init__(self, journal: Journal, controllers: set[str], fs: HostFS | None = None,
                 mode: str = "v1") -> None:
        self.journal = journal
        self.fs = fs or HostFS()
        self.mode = mode
        self.name = f"kvtune-{os.getpid()}"
        self.dirs: dict[str, Path] = {}
        self._v2_period = "100000"
        if mode in ("v1", "hybrid"):
            for c in sorted(controllers):
                root = self.fs.path(f"{roots.CGROUP}/{c}")
                if not root.is_dir():
                    raise HarnessError(f"cgroup controller {c} is not mounted at {root}")
                self.dirs[c] = root / self.name
        else:
            root = self.fs.path(roots.CGROUP)
            if (root / "unified" / "cgroup.controllers").exists() and not (
                    root / "cgroup.controllers").exists():
                root = root / "unified"
            for c in controllers:
                self.dirs[c] = root / self.name

    def create(self) -> None:
        for c, d in self.dirs.items():
            self.journal.make_dir(d)
            if c == "cpuset" and self.mode in ("v1", "hybrid"):
                # A v1 cpuset accepts tasks only once cpus and mems are set.
                parent = d.parent
                self.journal.write(d / "cpuset.mems", (parent / "cpuset.mems").read_text().strip())
                self.journal.write(d / "cpuset.cpus", (parent / "cpuset.cpus").read_text().strip())

    def unique_dirs(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    def write(self, controller: str, filename: str, value: str) -> None:
        d = self.dirs[controller]
        if self.mode in ("v1", "hybrid"):
            self.journal.write(d / filename, value)
            return
        if filename == "cpu.cfs_period_us":
            self._v2_period = value  # folded into cpu.max with the quota
            return
        if filename == "cpu.cfs_quota_us":
            period = self._v2_period
            name, value = "cpu.max", ("max" if value == "-1" else value) + " " + period
            self.journal.write(d / name, value)
            return
        self.journal.write(d / V2_NAMES.get((controller, filename), filename), value)

    def throttling(self) -> dict[str, int]:
        """nr_periods / nr_throttled / throttled time from cpu.stat, when a cpu cgroup exists."""
        d = self.dirs.get("cpu")
        out: dict[str, int] = {}
        if d is None:
            return out
        try:
            for line in (d / "cpu.stat").read_text().splitlines():
                k, _, v = line.partition(" ")
                if k in ("nr_periods", "nr_throttled", "throttled_time", "throttled_usec"):
                    out[k] = int(v)
        except OSError:
            pass
        return out
