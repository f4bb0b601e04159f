"""Per-process scheduling of the server: the syscalls (`sched_getattr`, `sched_setattr`),
the exec shim that applies them before the server creates any thread, and the read-back.

The server's scheduling policy (SCHED_OTHER or SCHED_BATCH), its nice value and, on EEVDF
kernels >= 6.12, its per-task time slice (`sched_setattr` with `sched_runtime` for a fair
policy: the per-task form of base_slice_ns) are applied at exec by kvtune's exec shim:

    python -I -c BOOT SRC kvtune.host.sched --policy batch --nice 5 --slice-ns 3000000 -- argv...

which calls sched_setattr(0, ...) and execs the server (the PID stays the server's; threads
and children inherit the settings). After start, `verify` reads every thread back
(`sched_getattr`) and the trial fails on a mismatch. The settings live in the server's
tasks and die with it; kvtune starts a fresh server per repetition, so nothing host-wide
changes and the journal needs no entry for them. The knobs that set them are
`kvtune.knobs.appliers.sched`'s.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import functools
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvtune import roots

SCHED_OTHER, SCHED_BATCH = 0, 3
POLICIES = {"other": SCHED_OTHER, "batch": SCHED_BATCH}
POLICY_NAMES = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline"}
SLICE_KERNEL = (6, 12)  # sched_setattr's sched_runtime sets a fair task's slice from 6.12
SLICE_MIN_NS, SLICE_MAX_NS = 100_000, 100_000_000  # the kernel clamps silently to these
FEATURES = f"{roots.DEBUGFS}/sched/features"

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
    def from_launch(cls, sched: dict[str, Any]) -> ServerSched | None:
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
    """`argv` started through kvtune's exec shim, which applies `sched` and execs it
    (kvtune's own Python, checked like any program it runs: kvtune.safety.programs)."""
    from kvtune.safety import programs

    return programs.python().argv(programs.python_module(
        "kvtune.host.sched", *sched.shim_args(), "--", *argv))


def thread_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(roots.proc(pid, "task")))
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
    p = argparse.ArgumentParser(prog="python -m kvtune.host.sched")
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
    from kvtune.errors import UserError
    from kvtune.safety import programs

    try:  # the server, checked once more right before the exec
        programs.exec_checked(cmd, "kvtune schedexec")
    except UserError as e:
        print(f"kvtune schedexec: {e}", file=sys.stderr)
        return 126
    except OSError as e:
        print(f"kvtune schedexec: cannot exec {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127


def _slice_kernel() -> bool:
    from kvtune.host.facts import parse_kernel_version

    return parse_kernel_version(platform.release()) >= SLICE_KERNEL


if __name__ == "__main__":
    sys.exit(main())
