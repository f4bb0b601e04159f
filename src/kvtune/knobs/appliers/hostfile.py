"""Host files: sysctls under /proc/sys and sysfs files under /sys, resolved per kernel.

A knob may live in different places on different kernels (the CFS scheduler tunables moved
from /proc/sys/kernel to debugfs in 5.13, and EEVDF replaced some of them in 6.6).
`HostFile` takes the candidate locations with the kernel versions they exist in and uses
the first that applies; when none does, `check` says why."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtune import roots
from kvtune.knobs.appliers.base import (
    Applier,
    ApplyEnv,
    Availability,
    ExportEntry,
    HostContext,
)
from kvtune.knobs.domain import Value

if TYPE_CHECKING:
    from kvtune.host.debugfs import DebugfsFile



@dataclass(frozen=True)
class Location:
    path: str
    since: tuple[int, int] = (0, 0)
    until: tuple[int, int] | None = None  # exclusive

    def applies(self, kv: tuple[int, int]) -> bool:
        return kv >= self.since and (self.until is None or kv < self.until)


def _vs(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def _span(loc: Location) -> str:
    if loc.since == (0, 0):
        return f"before {_vs(loc.until)}" if loc.until else "on every kernel"
    if loc.until is None:
        return f"on {_vs(loc.since)}+"
    # `until` is exclusive: a knob removed in 6.6 last existed in 6.5.
    last = (loc.until[0], loc.until[1] - 1) if loc.until[1] > 0 else None
    return f"on {_vs(loc.since)} to {_vs(last)}" if last else \
        f"on {_vs(loc.since)} until {_vs(loc.until)}"


class HostFile(Applier):
    scope = "host"
    restart = False

    def __init__(self, locations: list[Location], reader: str = "plain",
                 note: str = "") -> None:
        self.locations = locations
        self.reader = reader
        self.note = note

    def where(self) -> str:
        return " | ".join(loc.path for loc in self.locations)

    def resolve(self, ctx: HostContext) -> str | None:
        for loc in self.locations:
            if loc.applies(ctx.facts.kernel_version):
                return loc.path
        return None

    def check(self, ctx: HostContext) -> Availability:
        kv = ctx.facts.kernel_version
        path = self.resolve(ctx)
        if path is None:
            spans = ", ".join(f"{loc.path} {_span(loc)}" for loc in self.locations)
            return Availability(False, f"absent on kernel {_vs(kv)} (exists as {spans})"
                                + (f"; {self.note}" if self.note else ""))
        why = _refused(ctx, path)
        if why:
            return Availability(False, why)
        unmounted = self._unmounted_debugfs(ctx, path)
        if unmounted is not None:  # probed in a private mount namespace (host/debugfs.py)
            if not unmounted.writable:
                return Availability(False, unmounted.reason)
            return Availability(True, current=self._parse(unmounted.text))
        if path.startswith(roots.DEBUGFS) and not ctx.fs.exists(roots.DEBUGFS + "/sched"):
            return Availability(False, f"{path}: debugfs is not mounted at {roots.DEBUGFS} "
                                       "(or the kernel hides it)")
        p = ctx.fs.path(path)
        if not p.exists():
            return Availability(False, f"{path} does not exist on kernel {ctx.facts.kernel}"
                                + (f"; {self.note}" if self.note else ""))
        try:
            value = self._read(ctx, path)
        except PermissionError:
            return Availability(False, f"{path}: EPERM on read (kernel lockdown)")
        except OSError as e:
            if e.errno == errno.EPERM:
                return Availability(False, f"{path}: EPERM (kernel lockdown)")
            return Availability(False, f"{path}: {e.strerror}")
        mode = p.stat().st_mode
        if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(p, os.W_OK):
            return Availability(False, f"{path} is read-only here", current=value)
        return Availability(True, current=value)

    def _read(self, ctx: HostContext, path: str) -> Value:
        why = _refused(ctx, path)
        if why:
            raise PermissionError(why)
        return self._parse(ctx.fs.read_text(path))

    def _parse(self, raw: str) -> Value:
        from kvtune.host.journal import READERS

        text = READERS[self.reader](raw)
        try:
            return int(text)
        except ValueError:
            return text

    @staticmethod
    def _unmounted_debugfs(ctx: HostContext, path: str) -> DebugfsFile | None:
        """For a debugfs file on this (real) host while debugfs is not mounted: the file as
        a private mount namespace sees it; the study mounts debugfs before applying."""
        from kvtune.host.debugfs import debugfs_file, debugfs_mounted

        debugfs = roots.DEBUGFS
        if not roots.under(path, debugfs) or str(ctx.fs.path(debugfs)) != debugfs \
                or debugfs_mounted():
            return None
        return debugfs_file(path)

    def current(self, ctx: HostContext) -> Value | None:
        path = self.resolve(ctx)
        if path is None:
            return None
        unmounted = self._unmounted_debugfs(ctx, path)
        if unmounted is not None:
            return self._parse(unmounted.text) if unmounted.readable else None
        try:
            return self._read(ctx, path)
        except OSError:
            return None

    def apply(self, value: Value, env: ApplyEnv) -> None:
        path = self.resolve(env.ctx)
        assert path is not None and env.journal is not None
        why = _refused(env.ctx, path)
        if why:
            raise PermissionError(why)
        env.journal.write(env.ctx.fs.path(path), self.format(value), self.reader)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        path = self.resolve(ctx)
        return None if path is None else ExportEntry("sysfs", path, self.format(value), True)


def _refused(ctx: HostContext, path: str) -> str | None:
    """Why this host file may not be read or written (symlinks and `..` resolved first:
    only /proc/sys and /sys, never the deny-list of kvtune.safety.hostpaths), or None."""
    from kvtune.safety.hostpaths import resolve

    try:
        resolve(ctx.fs.path(path), ctx.fs.root)
    except ValueError as e:
        return str(e)
    return None


class Sysctl(HostFile):
    """A sysctl by its dotted name, e.g. `net.core.somaxconn`."""

    def __init__(self, key: str, since: tuple[int, int] = (0, 0),
                 until: tuple[int, int] | None = None, note: str = "") -> None:
        self.key = key
        super().__init__([Location(roots.sysctl_path(key), since, until)],
                         note=note)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("sysctl", self.key, self.format(value), True)


def sched_tunable(name: str, proc_name: str | None, since_debugfs: tuple[int, int] = (5, 13),
                  until: tuple[int, int] | None = None, note: str = "") -> HostFile:
    """A scheduler tunable: /proc/sys/kernel/<proc_name> before 5.13, then
    /sys/kernel/debug/sched/<name> (until `until`, when EEVDF removed it)."""
    locations = []
    if proc_name:
        locations.append(Location(roots.sysctl_path(f"kernel.{proc_name}"), (0, 0), since_debugfs))
    locations.append(Location(f"{roots.DEBUGFS}/sched/{name}", since_debugfs, until))
    return HostFile(locations, note=note)
