"""The scheduler knobs: the server's policy, nice value and EEVDF slice (applied at exec by
the shim in `kvtune.host.sched`), and the scheduler's features in debugfs
(`kvtune.host.debugfs`).

These are the levers that still work on a kernel whose CFS tunables are gone (EEVDF, 6.6+)
or locked (debugfs under lockdown):

- SCHED_BATCH: the task never preempts another on wake-up, which is what case study 002 got
  from a large sched_wakeup_granularity_ns;
- the slice: a longer slice means fewer preemptions of the server (base_slice_ns, per task);
- nice: the server's weight against the load generator and the rest of the host.

Scheduler features (`sched.feature.<NAME>`) are offered as knobs only where
/sys/kernel/debug/sched/features can be written.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Any

from kvtune.errors import HarnessError
from kvtune.host.debugfs import FEATURES, _forget, debugfs_status, features_status
from kvtune.host.sched import _SYSCALLS, SLICE_KERNEL
from kvtune.knobs.appliers.base import Applier, ApplyEnv, Availability, ExportEntry, HostContext
from kvtune.knobs.domain import Value


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
        path = env.journal.check_allowed(Path(FEATURES))  # the deny-list, resolved path
        env.journal.record_undo("sched-feature", {"name": self.name, "on": bool(old)},
                                key=f"sched-feature:{self.name}")
        _write_feature(self.name, bool(value), path)
        _forget()
        if self.current(env.ctx) != bool(value):
            raise ValueError(f"sched feature {self.name} did not take {bool(value)}")


# A feature's name as /sys/kernel/debug/sched/features lists it (TTWU_QUEUE, NO_HRTICK is
# the name HRTICK switched off).
_FEATURE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


def _feature_text(name: str, on: bool) -> str:
    """What is written for one feature: its name, or NO_ and its name; never other text
    (an undo replays the name from a journal file)."""
    if not _FEATURE.fullmatch(name) or name.startswith("NO_"):
        raise ValueError(f"{name!r} is not a scheduler feature's name")
    return name if on else f"NO_{name}"


def _write_feature(name: str, on: bool, path: Path) -> None:
    """Write one feature to `path`, which the caller has passed through the journal's
    `check_path` (the resolved path, the deny-list)."""
    text = _feature_text(name, on)
    with open(path, "w") as f:
        f.write(text)


def _undo_feature(args: dict[str, Any]) -> str:
    from kvtune.host.journal import check_path

    _feature_text(str(args["name"]), bool(args["on"]))
    try:
        path = check_path(Path(FEATURES))
    except HarnessError as e:
        raise ValueError(str(e)) from None
    _write_feature(str(args["name"]), bool(args["on"]), path)
    _forget()
    return f"sched feature {args['name']} {'on' if args['on'] else 'off'}"


def _register_undo() -> None:
    from kvtune.host.journal import register_undo

    register_undo("sched-feature", _undo_feature)


_register_undo()

