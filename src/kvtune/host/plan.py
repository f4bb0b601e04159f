"""What a study will do to the host, decided once from its knobs: the debugfs mount, the
server's cgroup and its controllers, and the kernel files its host knobs write. `kvtune
check` prints this plan; `Session.setup_host` carries it out through the journal (so every
change is restored at the end, on a signal, and by `kvtune restore` after a crash).

    plan = plan_for(space.knobs, ctx)
    plan.lines()                 # what `kvtune check` prints
    plan.carry_out(journal, ...) # the session, before anything else is applied
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtune.host.debugfs import debugfs_mounted, mount_debugfs, needs_debugfs

if TYPE_CHECKING:
    from kvtune.host.journal import Journal
    from kvtune.knobs.appliers.base import HostContext
    from kvtune.knobs.knob import Knob


@dataclass(frozen=True)
class HostWrite:
    path: str  # the kernel file, resolved for this host where the applier resolves one
    knob: str
    available: bool


@dataclass(frozen=True)
class HostPlan:
    mount_debugfs: bool  # a knob lives under debugfs and it is not mounted now
    cgroup_controllers: frozenset[str]  # the server's cgroup (none: no cgroup is made)
    writes: tuple[HostWrite, ...]

    def lines(self) -> list[str]:
        """The plan for people, one change a line (empty: the study changes nothing)."""
        out = []
        if self.mount_debugfs:
            out.append("mount debugfs at /sys/kernel/debug, not mounted now (before anything "
                       "is applied; unmounted on restore)")
        out += [f"{w.path} ({w.knob})" for w in self.writes]
        if self.cgroup_controllers:
            out.append("a cgroup for the server under /sys/fs/cgroup with the "
                       f"{', '.join(sorted(self.cgroup_controllers))} controller(s) (created "
                       "for the study, removed on restore)")
        return out

    def carry_out(self, journal: Journal, make_cgroup: Callable[[frozenset[str]], None]
                  ) -> None:
        """Mount debugfs and make the server's cgroup (`make_cgroup`), through the journal;
        the writes themselves are the appliers' (each through the journal too)."""
        if self.cgroup_controllers:
            make_cgroup(self.cgroup_controllers)
        if self.mount_debugfs:
            mount_debugfs(journal)


def knob_path(knob: Knob, ctx: HostContext) -> str:
    """The file a host knob writes on this host (its resolved path, when its applier
    resolves one per kernel, else its `where`)."""
    resolve = getattr(knob.applier, "resolve", None)
    where = resolve(ctx) if callable(resolve) else None
    return str(where or knob.applier.where())


def knob_needs_debugfs(knob: Knob, ctx: HostContext) -> bool:
    """Whether `knob` writes a file under debugfs on this host."""
    return knob.scope == "host" and needs_debugfs(knob_path(knob, ctx))


def plan_for(knobs: Sequence[Knob], ctx: HostContext) -> HostPlan:
    """The host plan of a study with `knobs` on the host of `ctx` (nothing is changed)."""
    writes = tuple(HostWrite(knob_path(k, ctx), k.name, k.applier.check(ctx).ok)
                   for k in knobs if k.scope == "host")
    debugfs = any(knob_needs_debugfs(k, ctx) for k in knobs) and not debugfs_mounted()
    controllers = frozenset(c for k in knobs if k.scope == "cgroup"
                            for c in k.applier.controllers())
    return HostPlan(debugfs, controllers, writes)
