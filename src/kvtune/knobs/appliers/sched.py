"""Per-process scheduler knobs for the server, and debugfs for the scheduler's features.

The server's scheduling policy (SCHED_OTHER or SCHED_BATCH), its nice value and, on EEVDF
kernels >= 6.12, its per-task time slice (`sched_setattr` with `sched_runtime` for a fair
policy: the per-task form of base_slice_ns). These are the levers that still work on a
kernel whose CFS tunables are gone (EEVDF, 6.6+) or locked (debugfs under lockdown):

- SCHED_BATCH: the task never preempts another on wake-up, which is what case study 002 got
  from a large sched_wakeup_granularity_ns;
- the slice: a longer slice means fewer preemptions of the server (base_slice_ns, per task);
- nice: the server's weight against the load generator and the rest of the host.

They are applied at exec, before the server creates any thread, by kvtune's exec shim:

    python -m kvtune.knobs.appliers.sched --policy batch --nice 5 --slice-ns 3000000 -- argv...

which calls sched_setattr(0, ...) and execs the server (the PID stays the server's; threads
and children inherit the settings). After start, `verify` reads every thread back
(`sched_getattr`) and the trial fails on a mismatch. The settings live in the server's
tasks and die with it; kvtune starts a fresh server per repetition, so nothing host-wide
changes and the journal needs no entry for them.

debugfs: when it is not mounted, `debugfs_file` and `debugfs_status` probe it in a private
mount namespace (`unshare --mount`, nothing changes on the host) to learn whether the
scheduler's files could be read and written, so `kvtune check` and preflight say the truth
on an unmounted host. A study whose knobs live there (`knob_needs_debugfs`) mounts it
through the journal before anything is applied (`mount_debugfs_for`, called by
`Session.setup_host`; undo kind `debugfs-mount`): the end of the study unmounts it, and so
does `kvtune restore` after a crash. Scheduler features (`sched.feature.<NAME>`) are
offered as knobs only where /sys/kernel/debug/sched/features can be written; under kernel
lockdown it answers EPERM and `features_status` says so.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtune.knobs.appliers.base import Applier, ApplyEnv, Availability, ExportEntry, HostContext
from kvtune.knobs.domain import Value

if TYPE_CHECKING:
    from kvtune.host.journal import Journal
    from kvtune.knobs.knob import Knob

SCHED_OTHER, SCHED_BATCH = 0, 3
POLICIES = {"other": SCHED_OTHER, "batch": SCHED_BATCH}
POLICY_NAMES = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline"}
SLICE_KERNEL = (6, 12)  # sched_setattr's sched_runtime sets a fair task's slice from 6.12
SLICE_MIN_NS, SLICE_MAX_NS = 100_000, 100_000_000  # the kernel clamps silently to these
DEBUGFS = "/sys/kernel/debug"
FEATURES = f"{DEBUGFS}/sched/features"

_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}


class _SchedAttr(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32),
        ("sched_util_max", ctypes.c_uint32),
    ]


@dataclass(frozen=True)
class TaskSched:
    """One thread's scheduling attributes as the kernel reports them."""

    policy: int
    nice: int
    runtime_ns: int  # fair policies on >= 6.12: the effective slice


@functools.cache
def _libc() -> Any:
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib


def _nr(i: int) -> int:
    nrs = _SYSCALLS.get(platform.machine())
    if nrs is None:
        raise OSError(errno.ENOSYS, f"sched_setattr: unknown syscall number on "
                                    f"{platform.machine()}")
    return nrs[i]


def sched_getattr(tid: int) -> TaskSched:
    a = _SchedAttr()
    if _libc().syscall(_nr(1), ctypes.c_int(tid), ctypes.byref(a),
                       ctypes.c_uint(ctypes.sizeof(a)), ctypes.c_uint(0)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"sched_getattr({tid}): {os.strerror(e)}")
    return TaskSched(a.sched_policy, a.sched_nice, a.sched_runtime)


def sched_setattr(tid: int, policy: int, nice: int, runtime_ns: int = 0) -> None:
    """For a fair policy this sets policy, nice and slice together (runtime 0 = the
    kernel's default slice), so callers pass all three."""
    a = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=policy, sched_flags=0,
                   sched_nice=nice, sched_priority=0, sched_runtime=runtime_ns)
    if _libc().syscall(_nr(0), ctypes.c_int(tid), ctypes.byref(a), ctypes.c_uint(0)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"sched_setattr(policy={policy}, nice={nice}, runtime={runtime_ns}): "
                         f"{os.strerror(e)}")


def effective_slice(requested_ns: int) -> int:
    """The slice the kernel keeps for a request (it clamps to [0.1 ms, 100 ms])."""
    return min(max(requested_ns, SLICE_MIN_NS), SLICE_MAX_NS)


# -- the launch: settings, exec shim, read-back ------------------------------------------


@dataclass(frozen=True)
class ServerSched:
    """The per-process settings for one server start (None = leave as inherited)."""

    policy: str | None = None
    nice: int | None = None
    slice_ns: int | None = None  # 0 = the kernel's default slice

    @classmethod
    def from_launch(cls, sched: dict[str, Value]) -> ServerSched | None:
        if not sched:
            return None
        return cls(None if sched.get("policy") is None else str(sched["policy"]),
                   None if sched.get("nice") is None else int(sched["nice"]),
                   None if sched.get("slice_ns") is None else int(sched["slice_ns"]))

    def shim_args(self) -> list[str]:
        out: list[str] = []
        if self.policy is not None:
            out += ["--policy", self.policy]
        if self.nice is not None:
            out += ["--nice", str(self.nice)]
        if self.slice_ns is not None:
            out += ["--slice-ns", str(self.slice_ns)]
        return out


def wrap_argv(sched: ServerSched, argv: Sequence[str]) -> list[str]:
    """`argv` started through kvtune's exec shim, which applies `sched` and execs it."""
    return [sys.executable, "-m", "kvtune.knobs.appliers.sched", *sched.shim_args(), "--",
            *argv]


def thread_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def read_back(pid: int) -> dict[int, TaskSched]:
    """Every thread of `pid` as the kernel reports it (threads that exit meanwhile are
    left out)."""
    out: dict[int, TaskSched] = {}
    for tid in thread_ids(pid):
        try:
            out[tid] = sched_getattr(tid)
        except OSError as e:
            if e.errno != errno.ESRCH:
                raise
    return out


def verify(pid: int, sched: ServerSched) -> list[str]:
    """Mismatches between `sched` and every thread of `pid`, for people ([] = all agree)."""
    want_policy = POLICIES[sched.policy] if sched.policy is not None else None
    want_slice = None
    if sched.slice_ns:
        want_slice = effective_slice(sched.slice_ns)
    problems: list[str] = []
    tasks = read_back(pid)
    if not tasks:
        return [f"no threads found under /proc/{pid}/task"]
    for tid, t in tasks.items():
        if want_policy is not None and t.policy != want_policy:
            problems.append(f"thread {tid}: policy {POLICY_NAMES.get(t.policy, t.policy)}, "
                            f"not {sched.policy}")
        if sched.nice is not None and t.nice != sched.nice:
            problems.append(f"thread {tid}: nice {t.nice}, not {sched.nice}")
        if want_slice is not None and t.runtime_ns != want_slice:
            problems.append(f"thread {tid}: slice {t.runtime_ns} ns, not {want_slice}")
    return problems


def describe(pid: int) -> dict[str, Any]:
    """The read-back of every thread, for the repetition's raw record."""
    return {str(tid): {"policy": POLICY_NAMES.get(t.policy, str(t.policy)), "nice": t.nice,
                       "slice_ns": t.runtime_ns} for tid, t in read_back(pid).items()}


def main(argv: Sequence[str] | None = None) -> int:
    """The exec shim: apply the settings to this process, then exec the command."""
    p = argparse.ArgumentParser(prog="python -m kvtune.knobs.appliers.sched")
    p.add_argument("--policy", choices=sorted(POLICIES))
    p.add_argument("--nice", type=int)
    p.add_argument("--slice-ns", type=int)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command to exec after --")
    try:
        cur = sched_getattr(0)
        policy = POLICIES[a.policy] if a.policy else cur.policy
        nice = cur.nice if a.nice is None else a.nice
        slice_ns = cur.runtime_ns if a.slice_ns is None else a.slice_ns
        if not _slice_kernel():
            slice_ns = 0  # before 6.12 sched_runtime means nothing for a fair policy
        sched_setattr(0, policy, nice, slice_ns)
    except OSError as e:
        print(f"kvtune schedexec: {e}", file=sys.stderr)
        return 126
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"kvtune schedexec: cannot exec {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


def _slice_kernel() -> bool:
    from kvtune.host.facts import parse_kernel_version

    return parse_kernel_version(platform.release()) >= SLICE_KERNEL


# -- appliers --------------------------------------------------------------------------


class _ServerSched(Applier):
    scope = "placement"
    restart = True
    key: str

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.sched[self.key] = value

    def _linux(self) -> Availability | None:
        if platform.system() != "Linux" or platform.machine() not in _SYSCALLS:
            return Availability(False, "sched_setattr is used through its Linux syscall "
                                       "number (x86_64 or aarch64)")
        return None


class SchedPolicy(_ServerSched):
    """The server's scheduling policy: other (SCHED_OTHER) or batch (SCHED_BATCH)."""

    key = "policy"

    def where(self) -> str:
        return "server sched_setattr policy (exec shim)"

    def check(self, ctx: HostContext) -> Availability:
        return self._linux() or Availability(True, current="other")

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("systemd", "CPUSchedulingPolicy", str(value))


class SchedNice(_ServerSched):
    """The server's nice value (-20 … 19)."""

    key = "nice"

    def where(self) -> str:
        return "server nice (exec shim)"

    def check(self, ctx: HostContext) -> Availability:
        return self._linux() or Availability(True, current=0)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("systemd", "Nice", str(int(value)))


class SchedSlice(_ServerSched):
    """The server's EEVDF slice in ns (0 = the kernel's default), kernels >= 6.12."""

    key = "slice_ns"

    def where(self) -> str:
        return "server sched_setattr sched_runtime = EEVDF slice (exec shim)"

    def check(self, ctx: HostContext) -> Availability:
        bad = self._linux()
        if bad:
            return bad
        kv = ctx.facts.kernel_version
        if kv < SLICE_KERNEL:
            return Availability(False, f"a per-task slice needs EEVDF on Linux >= 6.12 "
                                       f"(this is {kv[0]}.{kv[1]})")
        return Availability(True, current=0)


# -- debugfs and scheduler features --------------------------------------------------------


@dataclass(frozen=True)
class DebugfsStatus:
    mounted: bool
    mountable: bool
    features_readable: bool
    features_writable: bool
    features: tuple[str, ...]  # this kernel's feature names (NO_ prefix = off), when readable
    reason: str  # why features cannot be tuned, for people ("" when they can)


@dataclass(frozen=True)
class DebugfsFile:
    """One file under debugfs as kvtune could open it (mounted now, or in a probe)."""

    path: str
    readable: bool
    writable: bool
    text: str  # what it read ("" when not readable)
    reason: str  # why it cannot be written, for people ("" when it can)


def _mounted(mounts: str = "/proc/self/mounts") -> bool:
    try:
        return any(line.split()[1:3] == [DEBUGFS, "debugfs"]
                   for line in Path(mounts).read_text().splitlines() if line.strip())
    except OSError:
        return False


def debugfs_mounted() -> bool:
    """Whether debugfs is mounted at /sys/kernel/debug now."""
    return _mounted()


def _why(err: str, op: str, probed: bool) -> str:
    if err == "EPERM":
        err = "EPERM (kernel lockdown restricts debugfs)"
    return f"{err} on {op}" + (" (probed with debugfs mounted in a private mount namespace)"
                               if probed else "")


# Opens each file under a directory as kvtune would (read, then O_WRONLY without writing),
# in whichever mount namespace it runs; prints {path: [readable, writable, text, error]}.
_PROBE = r"""
import errno, json, os, stat, sys
out = {}
for d, _, names in os.walk(sys.argv[1]):
    for n in names:
        p = os.path.join(d, n); r = w = False; text = ""; why = ""
        try:
            with open(p) as f:
                text = f.read(65536)
            r = True
            if not os.stat(p).st_mode & 0o222:
                why = "read-only"
            else:
                os.close(os.open(p, os.O_WRONLY)); w = True
        except OSError as e:
            why = "EPERM" if e.errno == errno.EPERM else (e.strerror or str(e))
        out[p] = [r, w, text, why]
print(json.dumps(out))
"""


def _probe_here(root: str) -> dict[str, list[Any]]:
    out = subprocess.run([sys.executable, "-c", _PROBE, root], capture_output=True,
                         text=True, timeout=10, check=True)
    data: dict[str, list[Any]] = json.loads(out.stdout)
    return data


@functools.cache
def _namespace_probe() -> tuple[bool, dict[str, list[Any]], str]:
    """(mountable, files under sched/ as opened with debugfs mounted in a private mount
    namespace, why not mountable). The host's mounts do not change."""
    try:
        known = "debugfs" in Path("/proc/filesystems").read_text()
    except OSError:
        known = False
    if not known:
        return False, {}, "this kernel has no debugfs (not in /proc/filesystems)"
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if os.geteuid() != 0 or not unshare or not mount:
        return False, {}, (f"debugfs is not mounted at {DEBUGFS}, and probing it needs root "
                           "and unshare/mount (util-linux)")
    cmd = [unshare, "--mount", "--propagation", "private", "sh", "-c",
           f'{mount} -t debugfs none {DEBUGFS} && exec "$0" -c "$1" {DEBUGFS}/sched',
           sys.executable, _PROBE]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, {}, f"debugfs probe failed: {e}"
    if out.returncode != 0:
        return False, {}, f"mounting debugfs failed: {out.stderr.strip()[-200:]}"
    try:
        return True, json.loads(out.stdout), ""
    except ValueError:
        return True, {}, f"debugfs probe: unreadable answer {out.stdout[:80]!r}"


def debugfs_file(path: str) -> DebugfsFile:
    """`path` (under /sys/kernel/debug) as kvtune can open it: directly when debugfs is
    mounted, else as probed in a private mount namespace (cached until kvtune mounts or
    unmounts debugfs)."""
    if _mounted():
        try:
            files = _probe_here(str(Path(path).parent))
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            return DebugfsFile(path, False, False, "", f"{path}: probe failed: {e}")
        probed = False
    else:
        mountable, files, why = _namespace_probe()
        if not mountable:
            return DebugfsFile(path, False, False, "", why)
        probed = True
    if path not in files:
        return DebugfsFile(path, False, False, "", f"{path} does not exist"
                           + (" (probed with debugfs mounted in a private mount namespace)"
                              if probed else ""))
    r, w, text, err = files[path]
    reason = "" if w else f"{path}: {_why(err, 'write' if r else 'read', probed)}"
    return DebugfsFile(path, bool(r), bool(w), str(text), reason)


@functools.cache
def debugfs_status() -> DebugfsStatus:
    """Whether the scheduler's features can be tuned here. When debugfs is not mounted,
    the probe runs in a private mount namespace, so the host's mounts do not change."""
    mounted = _mounted()
    mountable = mounted or _namespace_probe()[0]
    f = debugfs_file(FEATURES)
    return DebugfsStatus(mounted, mountable, f.readable, f.writable, tuple(f.text.split()),
                         f.reason)


def _forget() -> None:
    """Forget what was probed (debugfs was mounted or unmounted)."""
    debugfs_status.cache_clear()
    _namespace_probe.cache_clear()


def features_status() -> tuple[bool, str]:
    """(available, reason) for the scheduler-feature knobs."""
    st = debugfs_status()
    return st.features_writable, st.reason


def _umount(args: dict[str, Any]) -> str:
    path = str(args["path"])
    if not _mounted():
        return f"{path} already unmounted"
    out = subprocess.run(["umount", path], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise OSError(errno.EBUSY, f"umount {path}: {out.stderr.strip()}")
    _forget()
    return f"debugfs unmounted from {path}"


def mount_debugfs(journal: Journal) -> bool:
    """Mount debugfs for the study when it is not mounted, journaled (unmounted on
    restore). Returns True when it mounted it."""
    if _mounted():
        return False
    journal.record_undo("debugfs-mount", {"path": DEBUGFS}, key="debugfs-mount")
    out = subprocess.run(["mount", "-t", "debugfs", "none", DEBUGFS], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise OSError(errno.EPERM, f"mount debugfs: {out.stderr.strip()}")
    _forget()
    return True


def needs_debugfs(where: str) -> bool:
    return DEBUGFS in where


def knob_needs_debugfs(knob: Knob, ctx: HostContext) -> bool:
    """Whether `knob` writes a file under debugfs on this host (its resolved path, when its
    applier resolves one per kernel, else its `where`)."""
    if knob.scope != "host":
        return False
    resolve = getattr(knob.applier, "resolve", None)
    where = resolve(ctx) if callable(resolve) else None
    return needs_debugfs(str(where or knob.applier.where()))


def mount_debugfs_for(knobs: Sequence[Knob], ctx: HostContext, journal: Journal) -> bool:
    """The study's part in debugfs: mount it through the journal before anything is applied
    when one of `knobs` lives there and it is not mounted (unmounted on restore, also by
    `kvtune restore` after a crash). Returns True when it mounted it."""
    if any(knob_needs_debugfs(k, ctx) for k in knobs):
        return mount_debugfs(journal)
    return False


class SchedFeature(Applier):
    """One scheduler feature (on/off) in /sys/kernel/debug/sched/features."""

    scope = "host"
    restart = False

    def __init__(self, name: str) -> None:
        self.name = name

    def where(self) -> str:
        return f"{FEATURES} ({self.name})"

    def check(self, ctx: HostContext) -> Availability:
        ok, reason = features_status()
        if not ok:
            return Availability(False, reason)
        return Availability(True, current=self.current(ctx))

    def current(self, ctx: HostContext) -> Value | None:
        names = debugfs_status().features
        if self.name in names:
            return True
        if f"NO_{self.name}" in names:
            return False
        return None

    def apply(self, value: Value, env: ApplyEnv) -> None:
        if env.journal is None:
            raise ValueError("scheduler features are written through the journal")
        old = self.current(env.ctx)
        env.journal.record_undo("sched-feature", {"name": self.name, "on": bool(old)},
                                key=f"sched-feature:{self.name}")
        _write_feature(self.name, bool(value))
        _forget()
        if self.current(env.ctx) != bool(value):
            raise ValueError(f"sched feature {self.name} did not take {bool(value)}")


def _write_feature(name: str, on: bool) -> None:
    with open(FEATURES, "w") as f:
        f.write(name if on else f"NO_{name}")


def _undo_feature(args: dict[str, Any]) -> str:
    _write_feature(str(args["name"]), bool(args["on"]))
    _forget()
    return f"sched feature {args['name']} {'on' if args['on'] else 'off'}"


def _register_undo() -> None:
    from kvtune.host.journal import register_undo

    register_undo("debugfs-mount", _umount)
    register_undo("sched-feature", _undo_feature)


_register_undo()


if __name__ == "__main__":
    sys.exit(main())
