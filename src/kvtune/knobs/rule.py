"""The types of the rules between knobs (knobs/rules.py has the table and its docs): a
`Rule`, the `Values` it reads, the study's target."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvtune.cpulist import parse_cpus
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.baseline import baseline_value
from kvtune.knobs.knob import Knob

KnobLookup = Callable[[str], Knob | None]


class Values:
    """A configuration completed with baseline values, for rules to read."""

    def __init__(self, config: dict[str, Any], ctx: HostContext, lookup: KnobLookup,
                 target: str | None = None) -> None:
        self.config = config
        self.ctx = ctx
        self.lookup = lookup
        self.target = target if target is not None else study_target(config, lookup)

    def get(self, name: str) -> Any:
        if name in self.config:
            return self.config[name]
        knob = self.lookup(name)
        return None if knob is None else baseline_value(knob, self.ctx, None)

    def server_cpus(self) -> int:
        """How many CPUs the server may run on: its pinning, else its cpuset, else the host."""
        for name in ("placement.server_cpus", "placement.cpuset"):
            text = self.config.get(name)
            if text is not None:
                try:
                    return len(parse_cpus(str(text)))
                except ValueError:
                    pass
        return self.ctx.facts.cpus


@dataclass(frozen=True)
class Rule:
    """`broken(values)` says whether a configuration breaks the rule; `message` says so to a
    person. A rule applies when the configuration sets at least one of its `knobs`.
    `relaxable` rules guard a behaviour a study may want to give up on purpose (turning
    off CFS wake-up preemption, as case study 002 did); a study's `relax_rules` skips them."""

    name: str
    knobs: tuple[str, ...]
    broken: Callable[[Values], bool]
    message: str
    relaxable: bool = False
    subject: tuple[str, ...] = ()  # the rule applies when the config sets one (default: knobs)
    repairs: tuple[Callable[[Values], dict[str, Any]], ...] = ()

    def applies(self, config: dict[str, Any]) -> bool:
        """Whether `config` sets one of the rule's subject knobs."""
        return any(k in config for k in (self.subject or self.knobs))

    def applies_to(self, values: Values) -> bool:
        """`applies`, and every knob the rule reads outside the configuration belongs to
        the study's target (or to the host) and has a baseline value here."""
        if not self.applies(values.config):
            return False
        for name in self.knobs:
            if name in values.config:
                continue
            knob = values.lookup(name)
            if knob is None or knob.target not in (None, values.target):
                return False
            if values.get(name) is None:
                return False
        return True


def study_target(config: dict[str, Any], lookup: KnobLookup) -> str | None:
    """The target the configuration's target-specific knobs belong to (None: only host
    knobs, or knobs of several targets)."""
    targets = set()
    for name in config:
        knob = lookup(name)
        if knob is not None and knob.target is not None:
            targets.add(knob.target)
    return targets.pop() if len(targets) == 1 else None


def as_int(v: object) -> int:
    return int(v)  # type: ignore[call-overload]
