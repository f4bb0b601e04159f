"""Rules between knobs, declared in the catalog (`catalog.RULES`) and checked before a trial
runs, so that invalid combinations are never measured (and never mistaken for a bad
configuration).

A rule sees the trial's configuration; a knob the study does not tune reads as its
server default (application knobs) or the host's value now (host knobs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kvtune.knobs.appliers.base import HostContext


class Values:
    """A configuration completed with defaults and host facts, for rules to read."""

    def __init__(self, config: dict[str, Any], ctx: HostContext) -> None:
        self.config = config
        self.ctx = ctx

    def get(self, name: str) -> Any:
        if name in self.config:
            return self.config[name]
        if name == "thp.enabled" and self.ctx.facts.thp is not None:
            return self.ctx.facts.thp
        from kvtune.knobs import catalog

        knob = catalog.lookup(name)
        if knob is None:
            return None
        if knob.default is not None:
            return knob.default
        return knob.applier.current(self.ctx)

    def server_cpus(self) -> int:
        """How many CPUs the server may run on: its pinning, else its cpuset, else the host."""
        from kvtune.cpulist import parse_cpus

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
    off CFS wake-up preemption, as case study 002 did); `check_rules(relax=...)` skips them."""

    name: str
    knobs: tuple[str, ...]
    broken: Callable[[Values], bool]
    message: str
    relaxable: bool = False

    def applies(self, config: dict[str, Any]) -> bool:
        return any(k in config for k in self.knobs)


def check_rules(config: dict[str, Any], ctx: HostContext,
                relax: Iterable[str] = ()) -> str | None:
    """The first rule the configuration breaks, as a sentence, or None."""
    from kvtune.knobs.catalog import RULES

    values = Values(config, ctx)
    skip = set(relax)
    for rule in RULES:
        if rule.name in skip or not rule.applies(config):
            continue
        try:
            if rule.broken(values):
                return f"{rule.message} (rule {rule.name})"
        except (TypeError, ValueError):
            continue  # a knob the rule needs is unreadable here; preflight reports that
    return None


def broken_rules(config: dict[str, Any], ctx: HostContext) -> list[str]:
    """Every rule the configuration breaks (for export and for tests)."""
    from kvtune.knobs.catalog import RULES

    values = Values(config, ctx)
    out = []
    for rule in RULES:
        if rule.applies(config):
            try:
                if rule.broken(values):
                    out.append(rule.name)
            except (TypeError, ValueError):
                pass
    return out
