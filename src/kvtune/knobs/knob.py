"""A knob: a name in the field's own words, a typed domain, a default, and an applier."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Availability lives beside Applier; re-exported here for callers not moved yet.
from kvtune.knobs.appliers.base import Applier, Availability
from kvtune.knobs.domain import Domain, Value

__all__ = ["Availability", "Knob"]


@dataclass(frozen=True)
class Knob:
    """`default` is the server's built-in default for application knobs; for host knobs it
    is None, and the baseline uses the value the host has when the study starts."""

    name: str
    domain: Domain
    applier: Applier
    default: Value | None = None
    description: str = ""
    unit: str = ""
    tags: tuple[str, ...] = field(default=())

    @property
    def scope(self) -> str:
        return self.applier.scope

    @property
    def restart(self) -> bool:
        return self.applier.restart

    @property
    def target(self) -> str | None:
        return self.applier.target

    def as_row(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scope": self.scope,
            "where": self.applier.where(),
            "domain": self.domain.describe(),
            "default": self.default,
            "unit": self.unit,
            "restart": self.restart,
            "description": self.description,
        }
