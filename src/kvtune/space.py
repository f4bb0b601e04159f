"""The knob space of a study after preflight: one frozen value.

Preflight reads each knob's baseline value (its default, else the host's current value,
else the study's placement) and, when a study narrows a knob's range past its baseline,
widens the knob's domain so the baseline stays measurable: the value becomes a special
value of a numeric domain (searched beside the range) or a choice of a categorical one.
The resulting `Space` is what the search, the sweep, `kvtune run`, the analysis and the
export all use; it is stored with the study (`Space.as_json`) so that a finished study is
read back with the same domains.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kvtune.errors import UserError
from kvtune.knobs.baseline import baseline_value
from kvtune.knobs.domain import Domain, Value

if TYPE_CHECKING:
    import optuna

    from kvtune.knobs.appliers.base import HostContext
    from kvtune.knobs.knob import Knob

Config = dict[str, Value]


GRID_POINTS = 4  # values per numeric knob in the grid sampler's grid


@dataclass(frozen=True)
class Space:
    """The study's knobs with their final domains, and the baseline configuration (every
    knob's value in trial 0). Every baseline value lies in its knob's domain."""

    knobs: tuple[Knob, ...]
    baseline: Mapping[str, Value]

    def __post_init__(self) -> None:
        object.__setattr__(self, "baseline", MappingProxyType(dict(self.baseline)))

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def baseline_config(self) -> Config:
        """A fresh, mutable copy of the baseline configuration."""
        return dict(self.baseline)

    def check(self, config: Mapping[str, Any], where: str) -> None:
        """`config` (one read back from a results database, a library, a fleet's peers:
        input) holds every knob of the space, each value in its knob's domain, and nothing
        else; UserError (exit 2) naming `where` and each misfit otherwise. Only such a
        value reaches a server's argv, a `-o` list or a kernel file."""
        if not isinstance(config, Mapping):
            raise UserError(f"{where}: the configuration is not a mapping of knobs to values")
        bad = [f"{k.name}: missing" for k in self.knobs if k.name not in config]
        bad += [f"{k.name}={config[k.name]!r} is outside {k.domain.describe()}"
                for k in self.knobs if k.name in config
                and not k.domain.contains(config[k.name])]
        known = set(self.names)
        bad += [f"{str(name)[:64]!r}: not a knob of this study" for name in config
                if name not in known]
        if bad:
            raise UserError(f"{where}: the configuration does not fit the study's knob space "
                            "(nothing of it was applied or started)", bad)

    # -- Optuna ----------------------------------------------------------------------------

    def suggest(self, trial: optuna.Trial) -> Config:
        return {k.name: k.domain.suggest(trial, k.name) for k in self.knobs}

    def fixed_params(self, config: Mapping[str, Value]) -> dict[str, Any]:
        """The Optuna parameters that make `suggest` return `config` (enqueued trials)."""
        params: dict[str, Any] = {}
        for k in self.knobs:
            params.update(k.domain.fixed_params(k.name, config[k.name]))
        return params

    def grid(self, points: int = GRID_POINTS) -> list[Config]:
        """Every combination of each knob's grid values (the grid sampler's configs)."""
        import itertools

        axes = [[(k.name, v) for v in k.domain.grid(points)] for k in self.knobs]
        return [{**self.baseline, **dict(combo)} for combo in itertools.product(*axes)]

    # -- storing ---------------------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        return {"domains": {k.name: domain_json(k.domain) for k in self.knobs},
                "baseline": dict(self.baseline)}


def domain_json(d: Domain) -> dict[str, Any]:
    return {f.name: (list(v) if isinstance(v, tuple) else v)
            for f in dataclasses.fields(d) if (v := getattr(d, f.name)) is not None}


def domain_from_json(data: Mapping[str, Any]) -> Domain:
    return Domain(data["type"], data.get("low"), data.get("high"), data.get("step"),
                  bool(data.get("log", False)), tuple(data.get("choices") or ()),
                  tuple(data.get("special") or ()))


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | bool) or (
        isinstance(v, int | float) and math.isfinite(v))


def stored_domain(name: str, data: Any, where: str) -> Domain:
    """One knob's domain as a results database stored it (input): a known type, finite
    bounds, scalar choices and special values; UserError naming the knob otherwise."""
    def bad(why: str) -> UserError:
        return UserError(f"{where}: the stored domain of knob {str(name)[:64]!r} {why} (the "
                         "results database was changed?); nothing was written")

    if not isinstance(data, Mapping):
        raise bad("is not a mapping")
    if data.get("type") not in ("int", "float", "categorical", "bool"):
        raise bad("has no known type (int, float, categorical, bool)")
    for key in ("low", "high", "step"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                              or not math.isfinite(v)):
            raise bad(f"has a {key} that is not a finite number")
    for key in ("choices", "special"):
        v = data.get(key)
        if v is not None and (not isinstance(v, list | tuple) or len(v) > 10_000
                              or not all(_scalar(x) for x in v)):
            raise bad(f"has {key} that are not a list of plain values")
    try:
        return domain_from_json(data)
    except (TypeError, ValueError) as e:
        raise bad(f"is not a domain: {e}") from None


def stored_domains(data: Mapping[str, Any] | None, where: str = "the stored space"
                   ) -> dict[str, Domain]:
    """The domains of a stored space (`Space.as_json`), by knob name, each checked
    (`stored_domain`); empty when absent."""
    if not data:
        return {}
    if not isinstance(data, Mapping) or not isinstance(data.get("domains") or {}, Mapping):
        raise UserError(f"{where}: the stored space is not a mapping of knobs to domains "
                        "(the results database was changed?); nothing was written")
    return {name: stored_domain(name, d, where)
            for name, d in (data.get("domains") or {}).items()}


# -- building ------------------------------------------------------------------------------


def fit_baseline(knob: Knob, value: Value) -> Knob:
    """`knob` with a domain that contains `value`: unchanged when it already does, else the
    value added as a choice (categorical) or a special value (numbers). Raises UserError when
    the value cannot fit (e.g. a string for a numeric knob)."""
    d = knob.domain
    if d.contains(value):
        return knob
    wider = dataclasses.replace(d, choices=(*d.choices, value)) if d.type == "categorical" \
        else dataclasses.replace(d, special=(*d.special, value))
    if not wider.contains(value):
        raise UserError(f"knob {knob.name}: the baseline value {value!r} does not fit "
                        f"{d.describe()}")
    return dataclasses.replace(knob, domain=wider)


def build_space(knobs: Iterable[Knob], ctx: HostContext, server_cpus: str | None) -> Space:
    """The study's space: each knob's baseline value, with the domain widened to hold it."""
    out: list[Knob] = []
    baseline: Config = {}
    for k in knobs:
        v = baseline_value(k, ctx, server_cpus)
        if v is None:
            raise UserError(f"knob {k.name}: cannot read its current value for the baseline")
        if isinstance(v, int) and k.domain.type == "bool":
            v = bool(v)
        k = fit_baseline(k, v)
        out.append(k)
        baseline[k.name] = v
    return Space(tuple(out), baseline)
