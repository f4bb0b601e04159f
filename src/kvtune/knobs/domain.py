"""Typed domains of knob values, and their mapping onto Optuna distributions.

A domain may carry *special values* outside its range that mean something else
(0 = "auto", -1 = "unlimited"). They are searched as a categorical choice
`NAME#mode` in {"range", *specials}, and the ranged value `NAME` is only suggested when
the mode is "range" (a conditional parameter, which TPE handles natively).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, cast

import optuna

Value = int | float | str | bool
DomainType = Literal["int", "float", "categorical", "bool"]
# The types by their one-letter names, as the catalogs write them.
I: Final = "int"  # noqa: E741
F: Final = "float"
C: Final = "categorical"
B: Final = "bool"
MODE_SUFFIX = "#mode"
RANGE = "range"


@dataclass(frozen=True)
class Domain:
    type: DomainType
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Value, ...] = ()
    special: tuple[Value, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.type in ("int", "float"):
            if self.low is None or self.high is None:
                raise ValueError("a numeric domain needs low and high")
            if self.low > self.high:
                raise ValueError(f"low {self.low} is above high {self.high}")
            if self.log and self.low <= 0:
                raise ValueError("a log domain needs low > 0")
            if self.log and self.step not in (None, 1):
                raise ValueError("a log domain cannot have a step")
            if self.step is not None and self.step <= 0:
                raise ValueError("step must be positive")
        if self.type == "categorical" and not self.choices:
            raise ValueError("a categorical domain needs choices")

    # -- describing ------------------------------------------------------------------------

    def describe(self) -> str:
        if self.type == "bool":
            text = "bool"
        elif self.type == "categorical":
            text = "{" + ", ".join(str(c) for c in self.choices) + "}"
        else:
            lo, hi = _fmt(self.low), _fmt(self.high)
            text = f"[{lo}, {hi}]"
            if self.log:
                text += " log"
            if self.step not in (None, 1) or (self.type == "float" and self.step):
                text += f" step {_fmt(self.step)}"
        if self.special:
            text += " or " + ", ".join(str(s) for s in self.special)
        return text

    def with_overrides(
        self,
        low: float | None = None,
        high: float | None = None,
        step: float | None = None,
        log: bool | None = None,
        choices: tuple[Value, ...] | None = None,
    ) -> Domain:
        changes: dict[str, Any] = {}
        if low is not None:
            changes["low"] = low
        if high is not None:
            changes["high"] = high
        if step is not None:
            changes["step"] = step
        if log is not None:
            changes["log"] = log
        if choices is not None:
            changes["choices"] = tuple(choices)
        return replace(self, **changes)

    # -- values ----------------------------------------------------------------------------

    def contains(self, v: Any) -> bool:
        if v in self.special and not isinstance(v, bool):
            return True
        if self.type == "bool":
            return isinstance(v, bool)
        if self.type == "categorical":
            return v in self.choices
        if isinstance(v, bool) or not isinstance(v, int | float):
            return False
        if self.type == "int" and (not float(v).is_integer()):
            return False
        assert self.low is not None and self.high is not None
        if not self.low <= v <= self.high:
            return False
        if self.step and not self.log:
            k = (v - self.low) / self.step
            return abs(k - round(k)) < 1e-9
        return True

    def coerce(self, raw: Any) -> Value:
        """Turn a value from YAML or the command line into a value of this domain.
        Raises ValueError with a message for people when it does not fit."""
        v: Any = raw
        if isinstance(raw, str):
            v = _parse_scalar(raw, self.type)
        if self.type == "int" and isinstance(v, float) and v.is_integer():
            v = int(v)
        if self.type == "float" and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if self.type == "categorical" and v not in self.choices:
            # "1" on the command line should match a choice 1.
            for c in self.choices:
                if str(c) == str(raw):
                    v = c
        if not self.contains(v):
            raise ValueError(f"{raw!r} is outside {self.describe()}")
        return v

    # -- Optuna -----------------------------------------------------------------------------

    def suggest(self, trial: optuna.Trial, name: str) -> Value:
        if self.special:
            mode = trial.suggest_categorical(
                name + MODE_SUFFIX, [RANGE, *[str(s) for s in self.special]]
            )
            if mode != RANGE:
                return next(s for s in self.special if str(s) == mode)
        if self.type == "bool":
            return bool(trial.suggest_categorical(name, [False, True]))
        if self.type == "categorical":
            return cast(Value, trial.suggest_categorical(name, list(self.choices)))
        assert self.low is not None and self.high is not None
        if self.type == "int":
            step = int(self.step or 1)
            if self.log:
                return trial.suggest_int(name, int(self.low), int(self.high), log=True)
            return trial.suggest_int(name, int(self.low), int(self.high), step=step)
        return trial.suggest_float(name, self.low, self.high, log=self.log, step=self.step)

    def fixed_params(self, name: str, v: Value) -> dict[str, Any]:
        """The Optuna parameters that make `suggest` return `v` (for enqueued trials)."""
        params: dict[str, Any] = {}
        if self.special:
            if v in self.special and not isinstance(v, bool):
                params[name + MODE_SUFFIX] = str(v)
                return params
            params[name + MODE_SUFFIX] = RANGE
        params[name] = v
        return params

    def grid(self, points: int = 8) -> list[Value]:
        """Values for a sweep or grid search: every value when there are few, else
        `points` values spread evenly (geometrically for a log domain); specials first."""
        out: list[Value] = list(self.special)
        if self.type == "bool":
            return [*out, False, True]
        if self.type == "categorical":
            return out + list(self.choices)
        assert self.low is not None and self.high is not None
        lo, hi = self.low, self.high
        if self.type == "int":
            step = int(self.step or 1)
            count = int((hi - lo) // step) + 1
            if count <= points and not self.log:
                return out + [int(lo + i * step) for i in range(count)]
        if points < 2:
            return [*out, lo]
        vals: list[float] = []
        for i in range(points):
            f = i / (points - 1)
            x = math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo))) if self.log else (
                lo + f * (hi - lo))
            if self.step and not self.log:
                x = lo + round((x - lo) / self.step) * self.step
            vals.append(x)
        if self.type == "int":
            ints = sorted({round(x) for x in vals})
            return out + [v for v in ints if self.contains(v)]
        return out + sorted(set(vals))


def _parse_scalar(text: str, type_: DomainType) -> Any:
    t = text.strip()
    low = t.lower()
    if type_ == "bool" or low in ("true", "false", "yes", "no", "on", "off"):
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def _fmt(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def values_from_params(domain: Domain, name: str, params: dict[str, Any]) -> Value | None:
    """Read a knob's value back from a finished trial's parameters."""
    if domain.special and name + MODE_SUFFIX in params:
        mode = params[name + MODE_SUFFIX]
        if mode != RANGE:
            return next(s for s in domain.special if str(s) == mode)
    v = params.get(name)
    if v is None:
        return None
    if domain.type == "bool":
        return bool(v)
    return v
