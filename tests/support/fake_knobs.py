"""A fake debugfs knob for the scheduler tests: a host file under /sys/kernel/debug/sched
that says it is available and records the values it is given instead of writing them.
What is tested is the study's mount of debugfs around it (through the real Session, journal
and CLI); kept here so that a `kvtune sweep` in a process of its own can register it too."""

from __future__ import annotations

from typing import ClassVar

from kvtune import roots
from kvtune.host import debugfs
from kvtune.knobs.appliers.base import ApplyEnv, Availability, HostContext
from kvtune.knobs.appliers.hostfile import HostFile, Location
from kvtune.knobs.domain import Domain, Value
from kvtune.knobs.knob import Knob

FAKE = "test.debugfs_fake"


class FakeDebugfsKnob(HostFile):
    """A host file under /sys/kernel/debug/sched that says it is available and records
    the values it is given instead of writing them."""

    applied: ClassVar[list[Value]] = []

    def check(self, ctx: HostContext) -> Availability:
        return Availability(True, current=1)

    def current(self, ctx: HostContext) -> Value | None:
        return 1

    def apply(self, value: Value, env: ApplyEnv) -> None:
        assert env.journal is not None and debugfs.debugfs_mounted(), \
            "a debugfs knob was applied before debugfs was mounted"
        FakeDebugfsKnob.applied.append(value)


FAKE_KNOB = Knob(FAKE, Domain("int", 0, 1),
                 FakeDebugfsKnob([Location(f"{roots.DEBUGFS}/sched/kvtune_fake")]),
                 None, "a fake debugfs knob (tests)")
