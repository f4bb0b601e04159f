"""The one owner of what kvtune may write on a host: the writable roots (/proc/sys and
/sys, judged after resolving symlinks and `..`) and the deny-list within them: never one
of the files that make the kernel run a program, stop or lose the machine (CPUs or memory
offline, huge pages by any path), or drop a security setting. `write_refusal` is enforced
where every host write happens (`kvtune.host.journal.check_path`: the appliers' writes,
the cgroups, and `kvtune restore` replaying a journal file); `refusal` is what a study file
may name. Inline host knobs (sysctl/sysfs defined in the study file) are written only with
`--allow-inline-host-knobs` on the command line (`kvtune.study.inline`). The exports
judge their sysctl and sysfs entries by the same list (`export_refusal`).

Paths are judged resolved. Entries of the deny-list under /sys/class and /sys/bus name
devices through links into /sys/devices: the directories those links resolve to are
denied with them, so naming `/sys/devices/.../net/eth0/...` is refused as
`/sys/class/net/eth0/...` is.
"""

from __future__ import annotations

import functools
import glob
import os
import re
from pathlib import Path, PurePosixPath

ALLOWED_ROOTS = ("/proc/sys", "/sys")
# kvtune's own cgroups: a directory named kvtune-PID under a cgroup hierarchy.
CGROUP_ROOT = "/sys/fs/cgroup/"
KVTUNE_CGROUP = re.compile(r"^kvtune-[0-9]{1,10}$")

_RUNS = "makes the kernel run a program as root"
_LOSE = "can stop, hang or cut off the machine"
_SECURITY = "lowers a security setting"
_ONEWAY = "is a one-way switch that cannot be restored"
_TRIGGER = "is a trigger, not a setting kvtune can restore"

# Files under /proc/sys, as host paths (a prefix ending in "/" covers a directory).
DENY_PROC: dict[str, str] = {
    "/proc/sys/kernel/core_pattern": _RUNS, "/proc/sys/kernel/modprobe": _RUNS,
    "/proc/sys/kernel/hotplug": _RUNS, "/proc/sys/kernel/poweroff_cmd": _RUNS,
    "/proc/sys/kernel/usermodehelper/": _RUNS, "/proc/sys/fs/binfmt_misc/": _RUNS,
    "/proc/sys/kernel/core_pipe_limit": _RUNS,
    "/proc/sys/kernel/sysrq": _LOSE, "/proc/sys/kernel/ctrl-alt-del": _LOSE,
    "/proc/sys/kernel/cad_pid": _LOSE, "/proc/sys/kernel/panic": _LOSE,
    "/proc/sys/kernel/panic_": _LOSE, "/proc/sys/kernel/hung_task_panic": _LOSE,
    "/proc/sys/kernel/softlockup_panic": _LOSE, "/proc/sys/kernel/hardlockup_panic": _LOSE,
    "/proc/sys/kernel/unknown_nmi_panic": _LOSE, "/proc/sys/vm/panic_on_oom": _LOSE,
    "/proc/sys/kernel/sched_rt_runtime_us": _LOSE, "/proc/sys/kernel/threads-max": _LOSE,
    "/proc/sys/fs/file-max": _LOSE, "/proc/sys/fs/nr_open": _LOSE,
    "/proc/sys/vm/max_map_count": _LOSE, "/proc/sys/kernel/pid_max": _LOSE,
    "/proc/sys/vm/min_free_kbytes": _LOSE, "/proc/sys/vm/nr_hugepages": _LOSE,
    "/proc/sys/vm/nr_hugepages_mempolicy": _LOSE, "/proc/sys/vm/nr_overcommit_hugepages": _LOSE,
    "/proc/sys/vm/unprivileged_userfaultfd": _SECURITY,
    "/proc/sys/kernel/io_uring_disabled": _SECURITY, "/proc/sys/kernel/io_uring_group": _SECURITY,
    "/proc/sys/user/": _SECURITY, "/proc/sys/kernel/sysctl_writes_strict": _SECURITY,
    "/proc/sys/net/core/bpf_jit_enable": _SECURITY, "/proc/sys/kernel/bpf_stats_enabled": _SECURITY,
    "/proc/sys/kernel/kexec_load_limit_": _ONEWAY, "/proc/sys/kernel/sched_rt_period_us": _LOSE,
    "/proc/sys/vm/overcommit_ratio": _LOSE, "/proc/sys/vm/admin_reserve_kbytes": _LOSE,
    "/proc/sys/net/ipv4/conf/": _LOSE, "/proc/sys/net/ipv6/conf/": _LOSE,
    "/proc/sys/net/ipv4/ip_forward": _SECURITY,
    "/proc/sys/kernel/modules_disabled": _ONEWAY, "/proc/sys/kernel/kexec_load_disabled": _ONEWAY,
    "/proc/sys/kernel/randomize_va_space": _SECURITY, "/proc/sys/kernel/kptr_restrict": _SECURITY,
    "/proc/sys/kernel/dmesg_restrict": _SECURITY, "/proc/sys/kernel/yama/": _SECURITY,
    "/proc/sys/kernel/unprivileged_": _SECURITY, "/proc/sys/kernel/perf_event_paranoid": _SECURITY,
    "/proc/sys/fs/suid_dumpable": _SECURITY, "/proc/sys/fs/protected_": _SECURITY,
    "/proc/sys/kernel/keys/": _SECURITY, "/proc/sys/kernel/seccomp/": _SECURITY,
    "/proc/sys/net/core/bpf_jit_harden": _SECURITY, "/proc/sys/vm/mmap_min_addr": _SECURITY,
    "/proc/sys/vm/drop_caches": _TRIGGER, "/proc/sys/vm/compact_memory": _TRIGGER,
    "/proc/sys/kernel/ns_last_pid": _TRIGGER,
    # The kernel's own record of what happened to it, and its limits on warnings and oopses.
    "/proc/sys/kernel/tainted": _SECURITY, "/proc/sys/kernel/oops_limit": _LOSE,
    "/proc/sys/kernel/warn_limit": _LOSE,
    "/proc/sys/net/ipv4/ip_unprivileged_port_start": _SECURITY,
    "/proc/sys/vm/overcommit_memory": _LOSE,
}
# Under /sys: whole trees, then file names anywhere (device removal, driver binding, ...).
DENY_SYS_TREES: dict[str, str] = {
    "/sys/power/": _LOSE, "/sys/kernel/uevent_helper": _RUNS, "/sys/kernel/kexec": _RUNS,
    "/sys/kernel/security/": _SECURITY, "/sys/kernel/config/": _LOSE,
    "/sys/kernel/tracing/": _SECURITY, "/sys/kernel/livepatch/": _RUNS,
    "/sys/firmware/": _LOSE, "/sys/fs/cgroup/": "is kvtune's own: use the placement knobs",
    "/sys/fs/bpf/": _SECURITY, "/sys/fs/selinux/": _SECURITY, "/sys/fs/pstore/": _LOSE,
    "/sys/fs/fuse/": _LOSE, "/sys/module/": "changes a kernel module's parameters",
    "/sys/devices/system/memory/": _LOSE, "/sys/bus/": _LOSE, "/sys/class/net/": _LOSE,
    "/sys/devices/system/cpu/smt/": _LOSE, "/sys/kernel/mm/hugepages/": _LOSE,
    "/sys/devices/system/cpu/hotplug/": _LOSE,
}
DENY_SYS_NAMES: dict[str, str] = {
    **dict.fromkeys(("remove", "unbind", "bind", "delete", "delete_device", "new_device",
                     "new_id", "remove_id", "driver_override", "drivers_probe", "rescan",
                     "reset", "eject", "online", "offline", "uevent", "sriov_numvfs",
                     "power_off", "shutdown", "nr_hugepages", "nr_overcommit_hugepages",
                     "free_hugepages", "demote", "demote_size"), _LOSE),
    **dict.fromkeys(("flags", "carrier", "mtu", "operstate", "tx_queue_len"), _LOSE),
}
# The links under these denied trees that lead into /sys/devices (judged by their targets).
_LINKS = {"/sys/class/net/": "/sys/class/net/*", "/sys/bus/": "/sys/bus/*/devices/*"}
_DEBUGFS = "/sys/kernel/debug/"
_DEBUGFS_OK = ("/sys/kernel/debug/sched/",)  # the scheduler tunables the catalog uses
# Module parameters the catalog tunes (the idle path: guest halt-polling), allowed inside
# the denied /sys/module/ tree; nothing else of it.
_MODULE_OK = ("/sys/module/haltpoll/parameters/guest_halt_poll_ns",
              "/sys/module/haltpoll/parameters/guest_halt_poll_grow",
              "/sys/module/haltpoll/parameters/guest_halt_poll_shrink",
              "/sys/module/haltpoll/parameters/guest_halt_poll_allow_shrink")
# The idle path's per-CPU state switches (cpu.idle_disable): inside the CPU devices that
# /sys/bus/cpu links to (denied whole: `online` would take a CPU away), only these files.
_CPUIDLE_OK = re.compile(r"^/sys/devices/system/cpu/cpu[0-9]{1,4}/cpuidle/state[0-9]{1,2}/disable$")
_SYSFS_CHARS = re.compile(r"^/sys/[A-Za-z0-9_.:@+,\-/]{1,250}$")


def refusal(host_path: str) -> str | None:
    """Why kvtune never writes this (resolved, absolute) host path, or None."""
    p = host_path
    if not any(p == r or p.startswith(r + "/") for r in ALLOWED_ROOTS):
        return "is outside /proc/sys and /sys"
    if p.startswith("/proc/"):
        for prefix, why in DENY_PROC.items():
            if p == prefix or (prefix.endswith(("/", "_")) and p.startswith(prefix)):
                return why
        return None
    if p in _MODULE_OK or _CPUIDLE_OK.match(p):
        return None
    for prefix, why in DENY_SYS_TREES.items():
        if p == prefix.rstrip("/") or p.startswith(prefix):
            return why
    if p.startswith("/sys/devices/"):
        for target, why in linked_targets().items():
            if p == target.rstrip("/") or p.startswith(target):
                return why
    if p.startswith(_DEBUGFS) and not p.startswith(_DEBUGFS_OK):
        return "is debugfs outside the scheduler tunables"
    name = PurePosixPath(p).name
    if name in DENY_SYS_NAMES:
        return DENY_SYS_NAMES[name]
    if "/power/" in p or "/sysrq" in p:
        return _LOSE
    return None


@functools.cache
def linked_targets() -> dict[str, str]:
    """The /sys/devices directories (ending in "/") that denied trees under /sys/class and
    /sys/bus link to, each with the tree's reason (read once per process)."""
    out: dict[str, str] = {}
    for tree, pattern in _LINKS.items():
        why = DENY_SYS_TREES[tree]
        for link in glob.glob(pattern):
            real = os.path.realpath(link)
            if real.startswith("/sys/devices/"):
                out[real.rstrip("/") + "/"] = why
    return out


def export_refusal(family: str, key: str) -> str | None:
    """Why an export must not carry this sysctl or sysfs entry (the deny-list, judged on
    the resolved path as for a host write), or None; None for other families."""
    if family == "sysctl":
        path = "/proc/sys/" + key.replace(".", "/")
    elif family == "sysfs":
        path = key
    else:
        return None
    if not path.startswith(("/proc/sys/", "/sys/")) or "/../" in path + "/":
        return "is outside /proc/sys and /sys"
    lexical = refusal(path)
    return lexical or refusal(os.path.realpath(path))


def write_refusal(host_path: str) -> str | None:
    """Why kvtune never writes this resolved host path, or None: the deny-list
    (`refusal`), except inside kvtune's own cgroups (`/sys/fs/cgroup/.../kvtune-PID/...`,
    which it creates, writes and removes)."""
    if host_path.startswith(CGROUP_ROOT):
        parts = host_path[len(CGROUP_ROOT):].split("/")
        if any(KVTUNE_CGROUP.match(p) for p in parts):
            return None
        return "is a cgroup file outside kvtune's own cgroups (kvtune-PID)"
    return refusal(host_path)


def check_sysfs_text(path: str) -> None:
    """A study file's sysfs path, lexically (ValueError): absolute, under /sys, no `.` or
    `..` components, no doubled or trailing slash, plain characters, not denied."""
    if not _SYSFS_CHARS.match(path):
        raise ValueError(f"sysfs path {path!r} must be under /sys/ and plain (letters, digits "
                         "and _ . : @ + , - /)")
    parts = path.split("/")[1:]
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"sysfs path {path!r} must be a plain absolute path (no '.', '..' "
                         "or '//')")
    why = refusal(path)
    if why:
        raise ValueError(f"sysfs path {path} is refused: writing it {why}")


def check_sysctl_name(name: str) -> None:
    path = "/proc/sys/" + name.replace(".", "/")
    why = refusal(path)
    if why:
        raise ValueError(f"sysctl {name} is refused: writing it {why}")


def resolve(path: Path, root: Path = Path("/")) -> str:
    """The resolved host path of `path` (a path under the HostFS `root`), refused with
    OSError-free ValueError when it leaves /proc/sys and /sys or is on the deny-list."""
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    rel = os.path.relpath(real, base)
    if rel.startswith(".."):
        raise ValueError(f"{path} resolves to {real}, outside the host tree")
    host = "/" + rel if rel != "." else "/"
    why = refusal(host)
    if why:
        shown = f"{path} (resolved to {host})" if host != str(path) else str(path)
        raise ValueError(f"{shown}: refused: writing it {why}")
    return host
