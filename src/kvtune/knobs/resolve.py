"""From the study file's `knobs:` and `preset:` to the study's `Knob`s: catalog names with
their overrides (or `fixed`), inline knobs (`type`, its domain keys and `applier`), a
preset's knobs with the preset's ranges, and the knobs a target contributes itself
(`extra_knobs`, the synthetic target's).

Every problem is reported at once, each with its key path and line, as a `UserError`."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from typing import Any

from kvtune.errors import UserError
from kvtune.host.facts import this_host
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import Applier, HostContext
from kvtune.knobs.appliers.hostfile import HostFile, Location, Sysctl
from kvtune.knobs.domain import Domain
from kvtune.knobs.knob import Knob
from kvtune.knobs.rules import RULE_NAMES
from kvtune.safety import values as safe
from kvtune.spec import KnobSpec, StudySpec, where_in_file

__all__ = ["build_knob", "inline_appliers", "resolve_knobs"]


def inline_appliers() -> dict[str, Callable[[str], Applier]]:
    """The study file's `applier:` keys (spec.ApplierSpec) → the applier they build: the
    host's (sysctl, sysfs) and each server kind's (kinds/<kind>/__init__.py, `inline`)."""
    from kvtune import kind_registry as kinds

    out: dict[str, Callable[[str], Applier]] = {
        "sysctl": Sysctl, "sysfs": lambda path: HostFile([Location(path)])}
    for kind in kinds.every():
        for key, where in kind.inline.items():
            out[key] = kinds.load(where)
    return out


def resolve_knobs(spec: StudySpec, lines: dict[tuple[Any, ...], int] | None = None,
                  name: str = "<study>", extra_knobs: Mapping[str, Knob] | None = None,
                  *, ctx: HostContext | None = None) -> list[Knob]:
    """The study's knobs from the catalog (with overrides), from `extra_knobs` (a target's
    own), or defined inline; a preset's knobs come first, with the preset's ranges (of a
    host-dependent preset, those available on the host of `ctx`; without `ctx`, this host's
    facts). Unknown names, bad overrides, knobs of another target, an unknown preset and
    unknown `relax_rules` are reported together."""
    lines = lines or {}
    problems: list[str] = []
    for i, rule in enumerate(spec.relax_rules):
        if rule not in RULE_NAMES:
            problems.append(f"{where_in_file(('relax_rules', i), lines)}: unknown rule "
                            f"{rule!r}; known: {', '.join(sorted(RULE_NAMES))}")
    entries: list[str | KnobSpec] = list(spec.knobs)
    if spec.preset and spec.preset not in catalog.PRESET_NAMES:
        problems.append(f"{where_in_file(('preset',), lines)}: unknown preset "
                        f"{spec.preset!r}; known: {', '.join(catalog.PRESET_NAMES)}")
    elif spec.preset:
        named = {e if isinstance(e, str) else e.name for e in entries}
        in_preset = catalog.preset_names(spec.preset, ctx or HostContext(this_host()))
        entries = [*(n for n in in_preset if n not in named), *entries]
    out: list[Knob] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        idx = i - (len(entries) - len(spec.knobs))
        where = where_in_file(("knobs", idx), lines) if idx >= 0 else f"preset {spec.preset}"
        ks = KnobSpec(name=entry) if isinstance(entry, str) else entry
        if ks.name in seen:
            problems.append(f"{where}: knob {ks.name!r} is listed twice")
            continue
        seen.add(ks.name)
        try:
            knob = build_knob(ks, spec.target.kind, extra_knobs)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if idx < 0 and spec.preset:
            knob = catalog.apply_preset(spec.preset, knob)
        own = extra_knobs is not None and ks.name in extra_knobs
        if not own and knob.target not in (None, spec.target.kind):
            if idx < 0:
                continue  # presets span targets; keep what fits
            problems.append(f"{where}: knob {ks.name!r} is a {knob.target} knob but the "
                            f"target is {spec.target.kind}")
            continue
        out.append(knob)
    if problems:
        raise UserError(f"{name}: {len(problems)} problem(s) with knobs", problems)
    return out


def build_knob(ks: KnobSpec, target_kind: str,
               extra_knobs: Mapping[str, Knob] | None = None) -> Knob:
    """One knob from its study-file entry: a catalog knob (or one of `extra_knobs`) with the
    entry's overrides, or an inline knob. Raises ValueError saying what is wrong."""
    base = catalog.lookup(ks.name)
    if base is None and ks.applier is None:
        base = (extra_knobs or {}).get(ks.name)
        if base is None:
            known = [*catalog.CATALOG, *(extra_knobs or {})]
            close = difflib.get_close_matches(ks.name, known, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else (
                "; `kvtune knobs` lists the catalog, or define it inline with type and applier")
            raise ValueError(f"unknown knob {ks.name!r}{hint}")
    if base is None:
        assert ks.applier is not None and ks.type is not None  # spec.KnobSpec checks
        low, high = ks.range if ks.range is not None else (None, None)
        if ks.fixed is not None and ks.type in ("int", "float"):
            low = high = float(ks.fixed)
        try:
            domain = Domain(ks.type, low, high, ks.step, bool(ks.log),
                            tuple(ks.choices or ([ks.fixed] if ks.fixed is not None
                                                 and ks.type == "categorical" else ())),
                            tuple(ks.special or ()))
        except ValueError as e:
            raise ValueError(f"inline knob {ks.name!r}: {e}") from None
        # spec.ApplierSpec guarantees exactly one key is set.
        key, arg = next((k, v) for k, v in ks.applier.model_dump().items() if v is not None)
        default = ks.fixed if ks.fixed is not None else ks.default
        return Knob(ks.name, domain, inline_appliers()[key](str(arg)),
                    None if default is None else domain.coerce(default), "inline knob")
    if ks.applier is not None:
        raise ValueError(f"{ks.name!r} is in the catalog; override it with range, step, log, "
                         "choices or fixed instead of an applier")
    domain = base.domain
    try:
        if ks.fixed is not None:
            domain = _pinned(domain, domain.coerce(ks.fixed))
        if ks.range is not None:
            if domain.type not in ("int", "float"):
                raise ValueError(f"{ks.name!r} is {domain.type}; range applies to numbers")
            domain = domain.with_overrides(low=ks.range[0], high=ks.range[1])
        if ks.step is not None or ks.log is not None:
            domain = domain.with_overrides(step=ks.step, log=ks.log)
        if ks.choices is not None:
            if domain.type != "categorical":
                raise ValueError(f"{ks.name!r} is {domain.type}; choices apply to categorical")
            domain = domain.with_overrides(choices=tuple(ks.choices))
        domain = Domain(domain.type, domain.low, domain.high, domain.step, domain.log,
                        domain.choices, domain.special)
        safe.check_override(ks, base.domain, domain)
    except ValueError as e:
        raise ValueError(f"{ks.name}: {e}") from None
    default = base.default
    if ks.fixed is not None or ks.default is not None:
        default = domain.coerce(ks.fixed if ks.fixed is not None else ks.default)
    return dataclasses.replace(base, domain=domain, default=default)


def _pinned(domain: Domain, v: Any) -> Domain:
    """`domain` narrowed to the one value `v` (`fixed:`); ValueError when it lies outside."""
    if not domain.contains(v):
        raise ValueError(f"fixed value {v!r} is outside the catalog's {domain.describe()}")
    if domain.type in ("int", "float"):
        if v in domain.special:
            return Domain("categorical", choices=(v,))
        return Domain(domain.type, float(v), float(v), None, False)
    return Domain("categorical", choices=(v,))
