"""Facts about this host, recorded with every repetition so that results of different
machines or placements are never compared silently."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvtune import roots
from kvtune.host.fs import HostFS
from kvtune.quantities import is_count

THP_ENABLED = f"{roots.THP}/enabled"


@dataclass(frozen=True)
class HostFacts:
    kernel: str
    kernel_version: tuple[int, int]
    cpu_model: str
    cpus: int
    cgroup: str  # "v1", "v2" or "hybrid"
    thp: str | None
    scheduler: str  # "eevdf" (>= 6.6) or "cfs"
    virtualized: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kernel_version"] = list(self.kernel_version)
        return d


def parse_kernel_version(release: str) -> tuple[int, int]:
    parts = release.split("-")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def selected(text: str) -> str | None:
    """The selected value of a sysfs multiple-choice file, shown in brackets
    ('always [madvise] never' → 'madvise'); None when nothing is bracketed."""
    if "[" in text and "]" in text:
        return text.split("[", 1)[1].split("]", 1)[0].strip()
    return None


def thp_mode(fs: HostFS | None = None) -> str | None:
    """Transparent huge pages' `enabled` mode as the host has it now (always, madvise,
    never), or None without THP. The one place it is parsed."""
    fs = fs or HostFS()
    return selected(fs.read_text(THP_ENABLED, default=""))


def cgroup_mode(fs: HostFS) -> str:
    root = fs.path(roots.CGROUP)
    if (root / "cgroup.controllers").exists():
        return "v2"
    if (root / "unified" / "cgroup.controllers").exists() or (root / "cpu").exists():
        return "hybrid" if (root / "unified").exists() else "v1"
    return "none"


def collect(fs: HostFS | None = None) -> HostFacts:
    fs = fs or HostFS()
    release = fs.read_text(roots.sysctl_path("kernel.osrelease"),
                           default=platform.release()).strip()
    kv = parse_kernel_version(release)
    model = "unknown"
    virtualized = False
    for line in fs.read_text(f"{roots.PROC}/cpuinfo", default="").splitlines():
        if line.startswith("model name") and model == "unknown":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and " hypervisor" in line:
            virtualized = True
    thp = thp_mode(fs)
    return HostFacts(
        kernel=release,
        kernel_version=kv,
        cpu_model=model,
        cpus=os.cpu_count() or 1,
        cgroup=cgroup_mode(fs),
        thp=thp,
        scheduler="eevdf" if kv >= (6, 6) else "cfs",
        virtualized=virtualized,
    )


@lru_cache(maxsize=1)
def this_host() -> HostFacts:
    """This host's facts, collected once per process (callers must not change them)."""
    return collect()


def steal_jiffies(fs: HostFS | None = None) -> int:
    """Total steal time (USER_HZ ticks) from /proc/stat's aggregate cpu line."""
    fs = fs or HostFS()
    for line in fs.read_text(f"{roots.PROC}/stat", default="").splitlines():
        if line.startswith("cpu "):
            fields = line.split()
            return int(fields[8]) if len(fields) > 8 else 0
    return 0


def proc_status(pid: int, proc: Path = Path(roots.PROC)) -> dict[str, int]:
    """Voluntary and involuntary context switches of a process, summed over its threads
    (/proc/PID/task/*/status; the process's own status counts only its main thread)."""
    out: dict[str, int] = {}
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # a thread that just exited
        for line in text.splitlines():
            key, _, val = line.partition(":")
            if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                out[key] = out.get(key, 0) + int(val.strip())
    return out


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process in seconds (all threads), or None if it is gone."""
    try:
        fields = roots.proc(pid, "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# -- what makes measurements noisy (as `pyperf system show`), added for issue 13 ------------


def _cpu_times(fs: HostFS) -> tuple[int, int]:
    """(total, steal) jiffies from /proc/stat's aggregate line."""
    for line in fs.read_text(f"{roots.PROC}/stat", default="").splitlines():
        if line.startswith("cpu "):
            f = [int(x) for x in line.split()[1:]]
            return sum(f[:8]), (f[7] if len(f) > 7 else 0)
    return 0, 0


def _proc_ticks(proc: Path) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for d in proc.iterdir():
        if not is_count(d.name):
            continue
        try:
            raw = (d / "stat").read_text()
        except OSError:
            continue
        comm = raw[raw.find("(") + 1:raw.rfind(")")]
        f = raw[raw.rfind(")") + 2:].split()
        out[int(d.name)] = (comm, int(f[11]) + int(f[12]))  # utime + stime
    return out


def noise_facts(fs: HostFS | None = None, window: float = 0.5,
                ignore: tuple[int, ...] = ()) -> dict[str, Any]:
    """What makes this host's measurements noisy, as `pyperf system show` lists it: the CPU
    frequency governor and turbo, isolated and nohz_full CPUs, irqbalance, steal over
    `window` seconds, and other processes busy over that window (> 5% of a CPU; kvtune
    itself and `ignore` left out). Values that cannot be read are None."""
    import time

    opened = NoiseWindow(fs, ignore)
    time.sleep(window)
    return opened.facts(window)


class NoiseWindow:
    """`noise_facts` with its window open from now until `close`: a process that has other
    work meanwhile (a study on a target simulated in the process itself) need not sleep
    through it. The window is at least `least` seconds (`close` sleeps the rest)."""

    def __init__(self, fs: HostFS | None = None, ignore: tuple[int, ...] = ()) -> None:
        import time

        self.fs = fs or HostFS()
        self.ignore = ignore
        self.opened = time.monotonic()
        self.t0, self.s0 = _cpu_times(self.fs)
        self.p0 = _proc_ticks(self.fs.path(roots.PROC))

    def close(self, least: float = 0.5) -> dict[str, Any]:
        import time

        rest = least - (time.monotonic() - self.opened)
        if rest > 0:
            time.sleep(rest)
        return self.facts(round(time.monotonic() - self.opened, 3))

    def facts(self, window: float) -> dict[str, Any]:
        """The facts now, over the `window` seconds since the window opened."""
        fs = self.fs
        cpu = Path(roots.CPU_DEVICES)
        govs = sorted({fs.read_text(str(p), default="").strip()
                       for p in fs.path(str(cpu)).glob("cpu[0-9]*/cpufreq/scaling_governor")}
                      - {""})
        turbo: bool | None = None
        no_turbo = fs.read_text(str(cpu / "intel_pstate/no_turbo"), default="").strip()
        boost = fs.read_text(str(cpu / "cpufreq/boost"), default="").strip()
        if no_turbo in ("0", "1"):
            turbo = no_turbo == "0"
        elif boost in ("0", "1"):
            turbo = boost == "1"
        isolated = fs.read_text(str(cpu / "isolated"), default="").strip() or None
        nohz = fs.read_text(str(cpu / "nohz_full"), default="").strip()
        t0, s0, p0 = self.t0, self.s0, self.p0
        t1, s1 = _cpu_times(fs)
        p1 = _proc_ticks(fs.path(roots.PROC))
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        me = {os.getpid(), os.getppid(), *self.ignore}
        busy: list[dict[str, Any]] = []
        for pid, (comm, ticks) in p1.items():
            if pid in me or pid not in p0:
                continue
            share = (ticks - p0[pid][1]) / hz / window
            if share > 0.05:
                busy.append({"pid": pid, "comm": comm, "cpu": round(share, 3)})
        busy.sort(key=lambda b: -float(b["cpu"]))
        irqbalance = any(comm == "irqbalance" for comm, _ in p1.values())
        return {
            "governor": ",".join(govs) if govs else None,
            "turbo": turbo,
            "isolated_cpus": isolated,
            "nohz_full": nohz if nohz and nohz != "(null)" else None,
            "irqbalance": irqbalance,
            "steal": (s1 - s0) / (t1 - t0) if t1 > t0 else None,
            "busy_processes": busy[:8],
            "virtualized": this_host().virtualized,
            "window_s": window,
        }
