"""Values for the structure they land in, and numbers a study file may hold.

- Inline knobs: a server kind's flag, option or directive must be on the target's
  allow-list (its applier's `check_inline`, kinds/<kind>/appliers.py), and every value the
  knob can take (choices, specials, default, fixed value, range ends) must match that
  setting's value pattern, so no value can add an argv word, an option or a config line.
  Inline sysctl/sysfs values are short printable text.
- Catalog knobs: an override may narrow the catalog's range or choices, never widen them.
- CPU lists and numbers are bounded: no list of 4 billion CPUs, no infinite durations.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kvtune.knobs.domain import Domain


class KnobSpec(Protocol):
    """What these checks read of a study file's knob entry (kvtune.spec.KnobSpec): the
    schema imports this module, so this module names only the fields it reads."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str | None: ...
    @property
    def range(self) -> tuple[float, float] | None: ...
    @property
    def step(self) -> float | None: ...
    @property
    def choices(self) -> Any: ...
    @property
    def special(self) -> Any: ...
    @property
    def default(self) -> Any: ...
    @property
    def fixed(self) -> Any: ...
    @property
    def applier(self) -> Any: ...

MAX_MAGNITUDE = 2.0 ** 64  # the largest value any knob file or flag takes
MAX_DURATION = 24 * 3600.0  # load.duration, load.warmup
MAX_BUDGET_TIME = 30 * 24 * 3600.0  # budget.time
_HOST_VALUE = re.compile(r"^[\x20-\x7e]{0,256}$")


def check_number(v: Any, what: str = "value") -> None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{what}: {v} is not a finite number")
    if abs(v) > MAX_MAGNITUDE:
        raise ValueError(f"{what}: {v} is out of range (at most 2**64 in magnitude)")


def check_duration(seconds: float, limit: float) -> float:
    if not math.isfinite(seconds):
        raise ValueError(f"{seconds} is not a finite duration")
    if seconds > limit:
        raise ValueError(f"{seconds:g}s is longer than the limit of {limit:g}s")
    return seconds


# -- inline knobs ----------------------------------------------------------------------------


def _candidates(ks: KnobSpec) -> list[Any]:
    out: list[Any] = [*(ks.choices or []), *(ks.special or []), ks.default, ks.fixed,
                      ks.step]
    if ks.range is not None:
        out += list(ks.range)
    return [v for v in out if v is not None]


def fmt_value(v: Any, yes_no: bool = False) -> str:
    """A value as the server reads it: a bool as 1/0, or yes/no (`yes_no`)."""
    if isinstance(v, bool):
        return ("yes" if v else "no") if yes_no else ("1" if v else "0")
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


_fmt = fmt_value


def check_knob_numbers(ks: KnobSpec) -> None:
    """Every number of a knob entry finite and bounded. Raises ValueError."""
    for v in _candidates(ks):
        check_number(v, ks.name)


def check_inline_values(ks: KnobSpec, target_kind: str, target: Any) -> None:
    """An inline knob's applier on its target's allow-list and every value it can take safe
    for where it lands: a server kind's applier key (kinds/<kind>/__init__.py, `inline`)
    checks its own (its class's `check_inline`, against the study's `target` class); sysctl
    and sysfs values are short printable text. Raises ValueError."""
    a = ks.applier
    if a is None:
        return
    is_bool = ks.type == "bool"
    values = [v for v in _candidates(ks) if not (is_bool and isinstance(v, bool))]
    if ks.step is not None:
        values = [v for v in values if v is not ks.step]
    key, arg = next((k, v) for k, v in a.model_dump().items() if v is not None)
    if key not in ("sysctl", "sysfs"):
        from kvtune import kind_registry as kinds

        owner = next((k for k in kinds.every() if key in k.inline), None)
        if owner is None:
            raise ValueError(f"{key}: not an applier kvtune knows")
        if owner.name != target_kind:
            raise ValueError(f"{key} {arg}: the target is not {owner.name}")
        applier = kinds.load(owner.inline[key])
        applier.check_inline(str(arg), ks.name, values, is_bool, target)
        return
    for v in values:
        if isinstance(v, str) and not _HOST_VALUE.fullmatch(v):
            raise ValueError(f"{ks.name}: {v!r} is not a value for a kernel file "
                             "(printable text, at most 256 characters)")


def check_bare(pattern: str | None, is_bool: bool, what: str) -> None:
    """A flag that takes no value needs a bool domain, and one that takes a value not."""
    if pattern is None and not is_bool:
        raise ValueError(f"{what} takes no value: give the knob a bool domain")
    if pattern is not None and is_bool:
        raise ValueError(f"{what} takes a value: a bool domain would leave it without one")


# -- catalog bounds --------------------------------------------------------------------------


def check_override(ks: KnobSpec, base: Domain, new: Domain) -> None:
    """A catalog knob's override may narrow its domain, never widen it (inline knobs,
    which have an applier, define their own). Raises ValueError."""
    if ks.applier is not None or ks.fixed is not None:  # a fixed value is checked in range
        return
    if new.type in ("int", "float") and base.low is not None and base.high is not None:
        assert new.low is not None and new.high is not None
        if new.low < base.low or new.high > base.high:
            raise ValueError(f"range [{_fmt(new.low)}, {_fmt(new.high)}] widens the catalog's "
                             f"{base.describe()}; an override may only narrow it (define an "
                             "inline knob with a domain and an applier to go beyond)")
        if base.step and not base.log and new.step != base.step:
            k = (new.step or 0) / base.step
            if not new.step or abs(k - round(k)) > 1e-9 or \
                    (not base.contains(new.low) and new.low not in base.special):
                raise ValueError(f"step {new.step} does not fit the catalog's step "
                                 f"{_fmt(base.step)} from {_fmt(base.low)}")
    if new.type == "categorical":
        extra = [c for c in new.choices if c not in base.choices]
        if extra:
            raise ValueError(f"choices {', '.join(map(repr, extra))} are not among the "
                             f"catalog's {base.describe()}; an override may only narrow them")
