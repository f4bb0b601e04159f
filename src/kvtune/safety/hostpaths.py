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

from kvtune import roots

ALLOWED_ROOTS = (roots.PROC_SYS, roots.SYS)
# kvtune's own cgroups: a directory named kvtune-PID under a cgroup hierarchy.
CGROUP_ROOT = roots.CGROUP + "/"
KVTUNE_CGROUP = re.compile(r"^kvtune-[0-9]{1,10}$")

_RUNS = "makes the kernel run a program as root"
_LOSE = "can stop, hang or cut off the machine"
_SECURITY = "lowers a security setting"
_ONEWAY = "is a one-way switch that cannot be restored"
_TRIGGER = "is a trigger, not a setting kvtune can restore"

# Files under /proc/sys, as host paths (a prefix ending in "/" covers a directory).
_DENY_PROC: dict[str, str] = {  # relative to /proc/sys
    "kernel/core_pattern": _RUNS, "kernel/modprobe": _RUNS,
    "kernel/hotplug": _RUNS, "kernel/poweroff_cmd": _RUNS,
    "kernel/usermodehelper/": _RUNS, "fs/binfmt_misc/": _RUNS,
    "kernel/core_pipe_limit": _RUNS,
    "kernel/sysrq": _LOSE, "kernel/ctrl-alt-del": _LOSE,
    "kernel/cad_pid": _LOSE, "kernel/panic": _LOSE,
    "kernel/panic_": _LOSE, "kernel/hung_task_panic": _LOSE,
    "kernel/softlockup_panic": _LOSE, "kernel/hardlockup_panic": _LOSE,
    "kernel/unknown_nmi_panic": _LOSE, "vm/panic_on_oom": _LOSE,
    "kernel/sched_rt_runtime_us": _LOSE, "kernel/threads-max": _LOSE,
    "fs/file-max": _LOSE, "fs/nr_open": _LOSE,
    "vm/max_map_count": _LOSE, "kernel/pid_max": _LOSE,
    "vm/min_free_kbytes": _LOSE, "vm/nr_hugepages": _LOSE,
    "vm/nr_hugepages_mempolicy": _LOSE, "vm/nr_overcommit_hugepages": _LOSE,
    "vm/unprivileged_userfaultfd": _SECURITY,
    "kernel/io_uring_disabled": _SECURITY, "kernel/io_uring_group": _SECURITY,
    "user/": _SECURITY, "kernel/sysctl_writes_strict": _SECURITY,
    "net/core/bpf_jit_enable": _SECURITY, "kernel/bpf_stats_enabled": _SECURITY,
    "kernel/kexec_load_limit_": _ONEWAY, "kernel/sched_rt_period_us": _LOSE,
    "vm/overcommit_ratio": _LOSE, "vm/admin_reserve_kbytes": _LOSE,
    "net/ipv4/conf/": _LOSE, "net/ipv6/conf/": _LOSE,
    "net/ipv4/ip_forward": _SECURITY,
    "kernel/modules_disabled": _ONEWAY, "kernel/kexec_load_disabled": _ONEWAY,
    "kernel/randomize_va_space": _SECURITY, "kernel/kptr_restrict": _SECURITY,
    "kernel/dmesg_restrict": _SECURITY, "kernel/yama/": _SECURITY,
    "kernel/unprivileged_": _SECURITY, "kernel/perf_event_paranoid": _SECURITY,
    "fs/suid_dumpable": _SECURITY, "fs/protected_": _SECURITY,
    "kernel/keys/": _SECURITY, "kernel/seccomp/": _SECURITY,
    "net/core/bpf_jit_harden": _SECURITY, "vm/mmap_min_addr": _SECURITY,
    "vm/drop_caches": _TRIGGER, "vm/compact_memory": _TRIGGER,
    "kernel/ns_last_pid": _TRIGGER,
    # The kernel's own record of what happened to it, and its limits on warnings and oopses.
    "kernel/tainted": _SECURITY, "kernel/oops_limit": _LOSE,
    "kernel/warn_limit": _LOSE,
    "net/ipv4/ip_unprivileged_port_start": _SECURITY,
    "vm/overcommit_memory": _LOSE,
    # Address-space randomisation, the terminals' injection and line-discipline switches,
    # AppArmor's limits on unprivileged user namespaces.
    "vm/mmap_rnd_bits": _SECURITY, "vm/mmap_rnd_compat_bits": _SECURITY,
    "dev/tty/": _SECURITY, "kernel/apparmor_": _SECURITY,
}
DENY_PROC = {f"{roots.PROC_SYS}/{k}": why for k, why in _DENY_PROC.items()}
# Under /sys: whole trees, then file names anywhere (device removal, driver binding, ...).
_DENY_SYS_TREES: dict[str, str] = {  # relative to /sys
    "power/": _LOSE, "kernel/uevent_helper": _RUNS, "kernel/kexec": _RUNS,
    "kernel/security/": _SECURITY, "kernel/config/": _LOSE,
    "kernel/tracing/": _SECURITY, "kernel/livepatch/": _RUNS,
    "firmware/": _LOSE, "fs/cgroup/": "is kvtune's own: use the placement knobs",
    "fs/bpf/": _SECURITY, "fs/selinux/": _SECURITY, "fs/pstore/": _LOSE,
    "fs/fuse/": _LOSE, "module/": "changes a kernel module's parameters",
    "devices/system/memory/": _LOSE, "bus/": _LOSE, "class/net/": _LOSE,
    "devices/system/cpu/smt/": _LOSE, "kernel/mm/hugepages/": _LOSE,
    "devices/system/cpu/hotplug/": _LOSE,
    # Thermal zones (mode, trip points, policy): turning one off or raising a trip point
    # takes the machine's protection against overheating away.
    "class/thermal/": _LOSE,
}
DENY_SYS_TREES = {f"{roots.SYS}/{k}": why for k, why in _DENY_SYS_TREES.items()}
DENY_SYS_NAMES: dict[str, str] = {
    **dict.fromkeys(("remove", "unbind", "bind", "delete", "delete_device", "new_device",
                     "new_id", "remove_id", "driver_override", "drivers_probe", "rescan",
                     "reset", "eject", "online", "offline", "uevent", "sriov_numvfs",
                     "power_off", "shutdown", "nr_hugepages", "nr_overcommit_hugepages",
                     "free_hugepages", "demote", "demote_size",
                     "array_state", "sync_action"), _LOSE),  # md arrays: stop, resync
    **dict.fromkeys(("flags", "carrier", "mtu", "operstate", "tx_queue_len"), _LOSE),
}
# The links under these denied trees that lead into /sys/devices (judged by their targets).
_LINKS = {f"{roots.SYS}/class/net/": f"{roots.SYS}/class/net/*",
          f"{roots.SYS}/class/thermal/": f"{roots.SYS}/class/thermal/*",
          f"{roots.SYS}/bus/": f"{roots.SYS}/bus/*/devices/*"}
_DEBUGFS = roots.DEBUGFS + "/"
_DEBUGFS_OK = (f"{roots.DEBUGFS}/sched/",)  # the scheduler tunables the catalog uses
# Module parameters the catalog tunes (the idle path: guest halt-polling), allowed inside
# the denied /sys/module/ tree; nothing else of it.
_MODULE_OK = tuple(f"{roots.HALTPOLL}/guest_halt_poll_{name}"
                   for name in ("ns", "grow", "shrink", "allow_shrink"))
# The idle path's per-CPU state switches (cpu.idle_disable): inside the CPU devices that
# /sys/bus/cpu links to (denied whole: `online` would take a CPU away), only these files.
_CPUIDLE_OK = re.compile(
    "^" + re.escape(roots.CPU_DEVICES) + r"/cpu[0-9]{1,4}/cpuidle/state[0-9]{1,2}/disable$")
_SYSFS_CHARS = re.compile(
    "^" + re.escape(roots.SYS) + r"/[A-Za-z0-9_.:@+,\-/]{1,250}$")


def refusal(host_path: str) -> str | None:
    """Why kvtune never writes this (resolved, absolute) host path, or None."""
    p = host_path
    if not any(p == r or p.startswith(r + "/") for r in ALLOWED_ROOTS):
        return "is outside /proc/sys and /sys"
    if roots.under(p, roots.PROC_SYS):
        for prefix, why in DENY_PROC.items():
            if p == prefix or (prefix.endswith(("/", "_")) and p.startswith(prefix)):
                return why
        return None
    if p in _MODULE_OK or _CPUIDLE_OK.fullmatch(p):
        return None
    for prefix, why in DENY_SYS_TREES.items():
        if p == prefix.rstrip("/") or p.startswith(prefix):
            return why
    if p.startswith(f"{roots.SYS}/devices/"):
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
            if real.startswith(f"{roots.SYS}/devices/"):
                out[real.rstrip("/") + "/"] = why
    return out


def export_refusal(family: str, key: str) -> str | None:
    """Why an export must not carry this sysctl or sysfs entry (the deny-list, judged on
    the resolved path as for a host write), or None; None for other families."""
    if family == "sysctl":
        path = roots.sysctl_path(key)
    elif family == "sysfs":
        path = key
    else:
        return None
    if not any(roots.under(path, r) for r in ALLOWED_ROOTS) or "/../" in path + "/":
        return "is outside /proc/sys and /sys"
    lexical = refusal(path)
    return lexical or refusal(os.path.realpath(path))


def write_refusal(host_path: str) -> str | None:
    """Why kvtune never writes this resolved host path, or None: the deny-list
    (`refusal`), except inside kvtune's own cgroups (`/sys/fs/cgroup/.../kvtune-PID/...`,
    which it creates, writes and removes)."""
    if host_path.startswith(CGROUP_ROOT):
        parts = host_path[len(CGROUP_ROOT):].split("/")
        if any(KVTUNE_CGROUP.fullmatch(p) for p in parts):
            return None
        return "is a cgroup file outside kvtune's own cgroups (kvtune-PID)"
    return refusal(host_path)


def check_sysfs_text(path: str) -> None:
    """A study file's sysfs path, lexically (ValueError): absolute, under /sys, no `.` or
    `..` components, no doubled or trailing slash, plain characters, not denied."""
    if not _SYSFS_CHARS.fullmatch(path):
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
    path = roots.sysctl_path(name)
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
