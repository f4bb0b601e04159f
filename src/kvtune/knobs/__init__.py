"""Knobs: a typed domain plus an applier that says where and how a value takes effect."""

from kvtune.knobs.domain import Domain
from kvtune.knobs.knob import Availability, Knob

__all__ = ["Availability", "Domain", "Knob"]
