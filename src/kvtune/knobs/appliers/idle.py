"""The idle path as knobs: what a CPU does between requests (docs/knobs.md, "The idle
path").

On a VM, and on bare metal with deep C-states, the tail latency at low and moderate load
is often not the server's but the CPU waking up. Three families reach it:

- `cpu.idle_max_latency_us`: a PM QoS CPU latency request (`/dev/cpu_dma_latency`, what
  TuneD's `force_latency` holds): idle states whose exit latency exceeds it are not
  entered. The request lasts while the file is held open, so kvtune holds it for the
  study's life; the journal records the process that holds it, and `kvtune restore` knows
  the request went with that process (nothing to write back).
- `cpu.halt_poll_*`: guest halt-polling of the `haltpoll` cpuidle driver
  (`/sys/module/haltpoll/parameters/guest_halt_poll_*`, Documentation/virt/
  guest-halt-polling.rst): a vCPU polls that long before it halts (a VM exit). Present only
  where the haltpoll driver is loaded.
- `cpu.idle_disable`: the cpuidle state named (by its name, as
  `/sys/devices/system/cpu/cpuN/cpuidle/stateK/name` says) and every deeper one disabled
  on the study's CPUs (the server's and the load's); `none` enables every state.
- `cpu.idle_governor`: the cpuidle governor, where the kernel lets it be switched.

Polling keeps a CPU busy: a vCPU that polls burns its host's time (docs/case-studies.md
measures what it costs).
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

from kvtune import roots
from kvtune.host.journal import register_undo
from kvtune.knobs.appliers.base import (
    Applier,
    ApplyEnv,
    Availability,
    ExportEntry,
    HostContext,
)
from kvtune.knobs.appliers.hostfile import HostFile, Location
from kvtune.knobs.domain import Value
from kvtune.quantities import is_count

# The kernel's "no constraint" value of the CPU latency request (PM_QOS_DEFAULT_VALUE).
NO_REQUEST = 2_000_000_000


class _Held:
    """The PM QoS request this process holds: the open file and its value."""

    fd: int | None = None
    value: int | None = None


def _release() -> None:
    if _Held.fd is not None:
        try:
            os.close(_Held.fd)
        finally:
            _Held.fd = None
            _Held.value = None


def _undo_pm_qos(args: dict[str, object]) -> str:
    """The journal's undo: the request is released when the file closes, which happens with
    the process that held it (a crash included). Called in that process, it closes it."""
    pid = args.get("pid")
    if pid == os.getpid():
        _release()
        return "PM QoS CPU latency request released"
    if isinstance(pid, int) and _holds(pid):
        raise OSError(errno.EBUSY, f"process {pid} still holds {roots.PM_QOS} open")
    return f"PM QoS CPU latency request of process {pid} released when it ended"


def _holds(pid: int) -> bool:
    """Whether process `pid` has the PM QoS file open now (its descriptors' links read,
    nothing opened): a pid reused by another process after the holder died does not."""
    fds = roots.proc(pid, "fd")
    try:
        names = os.listdir(fds)
    except FileNotFoundError:
        return False  # no such process
    except OSError:
        return roots.proc(pid).exists()  # cannot tell: as held while it lives
    for n in names:
        try:
            if os.readlink(fds / n) == roots.PM_QOS:
                return True
        except OSError:
            continue
    return False


register_undo("pm_qos", _undo_pm_qos)


class PmQosLatency(Applier):
    """A CPU latency request through /dev/cpu_dma_latency, held open for the study's life
    (module docstring). The value NO_REQUEST makes none."""

    scope = "host"
    restart = False

    def where(self) -> str:
        return f"{roots.PM_QOS} (PM QoS CPU latency request, held open)"

    def check(self, ctx: HostContext) -> Availability:
        p = ctx.fs.path(roots.PM_QOS)
        if not p.exists():
            return Availability(False, f"{roots.PM_QOS} does not exist (a kernel without "
                                       "CONFIG_CPU_IDLE's PM QoS interface)")
        try:
            current = self._read(p)
        except OSError as e:
            return Availability(False, f"{roots.PM_QOS}: {e.strerror}")
        if not os.access(p, os.W_OK):
            return Availability(False, f"{roots.PM_QOS} is not writable (needs root)",
                                current=current)
        return Availability(True, current=current)

    @staticmethod
    def _read(p: Path) -> int:
        fd = os.open(p, os.O_RDONLY)
        try:
            data = os.read(fd, 16)
        finally:
            os.close(fd)
        if len(data) >= 4 and len(data) != 11:
            return int(struct.unpack("<i", data[:4])[0])
        return int(data.decode().strip(), 16 if data[:2] == b"0x" else 10)

    def current(self, ctx: HostContext) -> Value | None:
        if _Held.value is not None:
            return _Held.value
        try:
            return self._read(ctx.fs.path(roots.PM_QOS))
        except (OSError, ValueError):
            return None

    def apply(self, value: Value, env: ApplyEnv) -> None:
        v = int(value)
        if not 0 <= v <= NO_REQUEST:
            raise ValueError(f"{v} µs is outside 0 … {NO_REQUEST}")
        _release()
        if v == NO_REQUEST:
            return
        assert env.journal is not None
        env.journal.record_undo("pm_qos", {"pid": os.getpid(), "path": roots.PM_QOS},
                                key="pm_qos")
        fd = os.open(env.ctx.fs.path(roots.PM_QOS), os.O_WRONLY)
        try:
            os.write(fd, struct.pack("<i", v))
        except OSError:
            os.close(fd)
            raise
        _Held.fd, _Held.value = fd, v

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        v = int(value)
        return None if v == NO_REQUEST else ExportEntry("pm_qos", "force_latency", str(v),
                                                        True)


def haltpoll_param(name: str, reader: str = "plain") -> HostFile:
    return HostFile([Location(f"{roots.HALTPOLL}/{name}")], reader=reader,
                    note="the haltpoll cpuidle driver is not loaded (a KVM guest with "
                         "cpuidle_haltpoll; elsewhere the cpuidle states are the knobs: "
                         "cpu.idle_disable)")


def state_names(root: Path = Path(roots.CPU_DEVICES), cpu: int = 0) -> list[str]:
    """The cpuidle states of `cpu` by name, shallowest first (state0, state1, ...)."""
    d = root / f"cpu{cpu}" / "cpuidle"
    out = []
    for k in range(64):
        try:
            out.append((d / f"state{k}" / "name").read_text().strip()[:32])
        except OSError:
            break
    return out


class CpuidleDisable(Applier):
    """Disables the named cpuidle state and every deeper one on the study's CPUs (each
    `stateK/disable` written through the journal); `none` enables them all."""

    scope = "host"
    restart = False

    def where(self) -> str:
        return f"{roots.CPU_DEVICES}/cpuN/cpuidle/stateK/disable (the study's CPUs)"

    @staticmethod
    def _cpus(ctx: HostContext) -> list[int]:
        if ctx.cpus:
            return sorted(ctx.cpus)
        return sorted(int(p.name[3:]) for p in ctx.fs.path(roots.CPU_DEVICES).glob("cpu[0-9]*")
                      if is_count(p.name[3:]) and (p / "cpuidle").is_dir())

    def check(self, ctx: HostContext) -> Availability:
        cpus = self._cpus(ctx)
        if not cpus:
            return Availability(False, "no CPU has cpuidle states here")
        names = state_names(ctx.fs.path(roots.CPU_DEVICES), cpus[0])
        if len(names) < 2:
            return Availability(False, f"CPU {cpus[0]} has {len(names)} cpuidle state(s): "
                                       "nothing to disable")
        f = ctx.fs.path(f"{roots.CPU_DEVICES}/cpu{cpus[0]}/cpuidle/state1/disable")
        if not os.access(f, os.W_OK):
            return Availability(False, f"{f} is not writable (needs root)")
        return Availability(True, current=self.current(ctx))

    def current(self, ctx: HostContext) -> Value | None:
        cpus = self._cpus(ctx)
        if not cpus:
            return None
        names = state_names(ctx.fs.path(roots.CPU_DEVICES), cpus[0])
        for k, name in enumerate(names):
            try:
                off = ctx.fs.path(
                    f"{roots.CPU_DEVICES}/cpu{cpus[0]}/cpuidle/state{k}/disable").read_text()
            except OSError:
                return None
            if off.strip() == "1":
                return name
        return "none"

    def apply(self, value: Value, env: ApplyEnv) -> None:
        assert env.journal is not None
        for cpu in self._cpus(env.ctx):
            names = state_names(env.ctx.fs.path(roots.CPU_DEVICES), cpu)
            if value != "none" and value not in names:
                raise ValueError(f"cpuidle state {value!r} does not exist on CPU {cpu} "
                                 f"(its states: {', '.join(names)})")
            cut = names.index(str(value)) if value != "none" else len(names)
            for k in range(1, len(names)):  # state0 (POLL) cannot be disabled usefully
                env.journal.write(env.ctx.fs.path(f"{roots.CPU_DEVICES}/cpu{cpu}/cpuidle/state{k}/disable"),
                                  "1" if k >= cut else "0")

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        if value == "none":
            return None
        cpus = self._cpus(ctx)
        names = state_names(ctx.fs.path(roots.CPU_DEVICES), cpus[0]) if cpus else []
        if str(value) not in names:
            return None
        k = names.index(str(value))
        # Every CPU, this state and the deeper ones (states 10 and up are deeper still).
        return ExportEntry("sysfs", f"{roots.CPU_DEVICES}/cpu*/cpuidle/state[{k}-9]*/disable",
                           "1", True)


def governors(root: Path = Path(roots.CPUIDLE)) -> tuple[str, ...]:
    try:
        return tuple((root / "available_governors").read_text().split())
    except OSError:
        return ()
