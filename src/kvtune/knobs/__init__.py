"""Knobs: a typed domain plus an applier that says where and how a value takes effect."""

from kvtune.knobs.appliers.base import Availability
from kvtune.knobs.domain import Domain
from kvtune.knobs.knob import Knob

__all__ = ["Availability", "Domain", "Knob"]
