"""The baseline rule, in one place: a knob's value at the study's baseline is its default
(application knobs: the server's built-in default), else the host's value now (host knobs),
else, for a placement or cgroup knob with neither, the study's own placement."""

from __future__ import annotations

import os

from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.domain import Value
from kvtune.knobs.knob import Knob

# The quota's default (-1, unlimited) is its baseline; other placement knobs have none.
_PLACED_SCOPES = ("cgroup", "placement")


def baseline_value(knob: Knob, ctx: HostContext, server_cpus: str | None) -> Value | None:
    """`knob`'s baseline value, or None when it has no default and cannot be read here.
    `server_cpus` is the study's `target.cpus` (None: every CPU of the host)."""
    if knob.default is not None:
        return knob.default
    v = knob.applier.current(ctx)
    if v is None and knob.scope in _PLACED_SCOPES:
        v = server_cpus or f"0-{(os.cpu_count() or 1) - 1}"
    return v
