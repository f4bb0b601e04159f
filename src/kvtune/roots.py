"""The host's path roots, each defined once: the kernel's trees kvtune reads and writes.

Every module that names a host path builds it from these (`sysctl_path`, `proc`); the
deny-list of what may be written is `kvtune.safety.hostpaths`, judged on resolved paths.
`tests/test_architecture.py::test_path_roots_are_defined_once` fails on a host path
spelled anywhere else.
"""

from __future__ import annotations

from pathlib import Path

PROC = "/proc"
PROC_SYS = "/proc/sys"
SYS = "/sys"
DEV = "/dev"
DEBUGFS = "/sys/kernel/debug"
CGROUP = "/sys/fs/cgroup"
CGROUP_UNIFIED = "/sys/fs/cgroup/unified"  # cgroup v2 beside v1 controllers (hybrid)
CPU_DEVICES = "/sys/devices/system/cpu"
CPUIDLE = "/sys/devices/system/cpu/cpuidle"
HALTPOLL = "/sys/module/haltpoll/parameters"
MODULES = "/sys/module"
THP = "/sys/kernel/mm/transparent_hugepage"
PM_QOS = "/dev/cpu_dma_latency"  # the PM QoS CPU latency request

# Trees of the kernel's own (and the service manager's secrets): never an operator's file,
# never a store, never a trace.
KERNEL_TREES = (PROC, SYS, DEV)
# The system's own files: never an export's destination.
SYSTEM_TREES = ("/etc", "/usr", "/boot")
SPECIAL_TREES = (*KERNEL_TREES, "/run/credentials")
STORAGE_REFUSED = (*KERNEL_TREES, "/run/udev")


def sysctl_path(key: str) -> str:
    """'net.core.somaxconn' -> '/proc/sys/net/core/somaxconn'."""
    return f"{PROC_SYS}/{key.replace('.', '/')}"


def proc(pid: int | str, *parts: str, root: str | Path = PROC) -> Path:
    """/proc/PID/PARTS... ('self' for this process)."""
    return Path(root, str(pid), *parts)


def under(path: str, root: str) -> bool:
    """Whether `path` is `root` or inside it (textually: resolve it first)."""
    return path == root or path.startswith(root.rstrip("/") + "/")
