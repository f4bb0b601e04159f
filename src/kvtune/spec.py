"""The study file: one YAML document, validated with pydantic.

Every problem is reported at once, each with its key path and line (`knobs[2].range, line
14: ...`), as a `UserError` (exit code 2) before anything touches the host.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from kvtune.cpulist import parse_cpus
from kvtune.errors import UserError
from kvtune.knobs import catalog
from kvtune.knobs.appliers.hostfile import HostFile, Location, Sysctl
from kvtune.knobs.appliers.memcached import MemcachedFlag, MemcachedOption
from kvtune.knobs.appliers.redis import RedisDirective
from kvtune.knobs.domain import Domain
from kvtune.knobs.knob import Knob
from kvtune.safety import values as safe
from kvtune.safety import yamlload
from kvtune.safety.args import check_extra_args, check_target_args
from kvtune.safety.hostpaths import check_sysctl_name, check_sysfs_text

__all__ = ["StudySpec", "load_spec", "parse_cpus", "parse_duration", "parse_spec",
           "resolve_knobs"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
METRICS = (
    "ops_per_sec", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us", "mean_us",
    "service_p99_us", "hit_ratio", "errors", "server_errors",
)
_LOWER_IS_BETTER = {"p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us", "mean_us",
                    "service_p99_us", "errors", "server_errors"}
_CONSTRAINT = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*(-?[0-9.eE+]+)\s*$")


def parse_duration(v: Any) -> float:
    """'3s', '500ms', '2m', '1h' or a number of seconds → seconds."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        if not math.isfinite(v) or abs(v) > 1e12:
            raise ValueError(f"{v} is not a finite duration")
        if v <= 0:
            raise ValueError("must be positive")
        return float(v)
    if not isinstance(v, str):
        raise ValueError(f"{v!r} is not a duration such as 10s, 500ms or 2m")
    m = _DURATION.match(v)
    if not m:
        raise ValueError(f"{v!r} is not a duration such as 10s, 500ms or 2m")
    n = float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    if n <= 0:
        raise ValueError("must be positive")
    return n


class _Model(BaseModel):
    # Numbers are finite everywhere: .inf and .nan never reach a duration, range or seed.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TargetSpec(_Model):
    kind: Literal["memcached", "redis", "synthetic"]
    binary: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    args: list[str] = Field(default_factory=list, max_length=64)
    cpus: str | None = None
    start_timeout: float = Field(default=10.0, gt=0, le=600)
    # synthetic target only
    noise_cov: float = Field(default=0.1, ge=0, le=10)
    surface: str = Field(default="default", max_length=64)

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: str | None) -> str | None:
        if v is not None:
            safe.check_cpu_list(v)
            parse_cpus(v)
        return v

    @field_validator("args")
    @classmethod
    def _args(cls, v: list[str], info: ValidationInfo) -> list[str]:
        check_target_args(str(info.data.get("kind", "")), v)
        return v

    @field_validator("host")
    @classmethod
    def _loopback(cls, v: str) -> str:
        import ipaddress

        if v == "localhost":
            return v
        try:
            ip = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not an IP address; kvtune drives servers on loopback "
                             "(127.0.0.0/8 or ::1)") from None
        if not ip.is_loopback:
            raise ValueError(f"{v} is not a loopback address; kvtune only sends load to "
                             "127.0.0.0/8 or ::1")
        return v


class WorkloadSpec(_Model):
    # kvload's argv words: typed and bounded, so no value can add a flag.
    keys: int = Field(default=10000, ge=1, le=10**10)
    key_size: Annotated[int, Field(ge=1, le=65536)] | Literal["etc"] = 16
    value_size: Annotated[int, Field(ge=1, le=1 << 30)] | Annotated[
        str, Field(pattern=r"^[0-9A-Za-z][0-9A-Za-z:.,\-]{0,255}$")] = 100
    popularity: str = Field(default="uniform", pattern=r"^[a-z]+(:[0-9.eE+\-]{1,32}){0,2}$")
    mix: str = Field(default="get:9,set:1",
                     pattern=r"^[a-z]+:[0-9.]{1,16}(,[a-z]+:[0-9.]{1,16}){0,7}$")
    mget_size: int = Field(default=10, ge=1, le=1024)
    arrival: Literal["poisson", "fixed", "etc"] = "poisson"
    preload: bool = True


class LoadSpec(_Model):
    tool: Literal["kvload"] = "kvload"
    protocol: Literal["memcache", "meta", "resp"] | None = None
    mode: Literal["open", "closed"] = "open"
    rate: float | None = Field(default=None, gt=0, le=1e9)
    connections: int = Field(default=4, ge=1, le=10000)
    pipeline: int = Field(default=1, ge=1, le=1024)
    duration: float = 5.0
    warmup: float = 1.0
    cpus: str | None = None
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    workload_file: str | None = None
    extra_args: list[str] = Field(default_factory=list, max_length=16)

    @field_validator("duration", "warmup", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> float:
        return safe.check_duration(parse_duration(v), safe.MAX_DURATION)

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: str | None) -> str | None:
        if v is not None:
            safe.check_cpu_list(v)
            parse_cpus(v)
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        check_extra_args(v)
        return v

    @field_validator("workload_file")
    @classmethod
    def _workload_file(cls, v: str | None) -> str | None:
        if v is not None:
            from kvtune.safety.workload import check_workload_file

            check_workload_file(v)
        return v

    @model_validator(mode="after")
    def _rate(self) -> LoadSpec:
        if self.mode == "open" and self.rate is None:
            raise ValueError("open-loop load needs a rate (requests per second)")
        return self


class DomainSpec(_Model):
    type: Literal["int", "float", "categorical", "bool"]
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: list[int | float | str | bool] | None = Field(default=None, max_length=1000)
    special: list[int | float | str] | None = Field(default=None, max_length=100)


class ApplierSpec(_Model):
    """For inline knobs: exactly one of these says where the value goes."""

    memcached_flag: str | None = None
    memcached_option: str | None = None
    redis_directive: str | None = None
    sysctl: str | None = None
    sysfs: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ApplierSpec:
        given = [k for k, v in self.model_dump().items() if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of memcached_flag, memcached_option, "
                             "redis_directive, sysctl, sysfs")
        if self.sysfs is not None and not self.sysfs.startswith("/sys/"):
            raise ValueError(f"sysfs path {self.sysfs!r} must be under /sys/")
        if self.sysfs is not None:
            check_sysfs_text(self.sysfs)
        if self.sysctl is not None and not re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_\-]+)+",
                                                       self.sysctl):
            raise ValueError(f"{self.sysctl!r} is not a sysctl name such as net.core.somaxconn")
        if self.sysctl is not None:
            check_sysctl_name(self.sysctl)
        return self


class KnobSpec(_Model):
    name: str = Field(max_length=128)
    range: tuple[float, float] | None = None
    step: float | None = None
    log: bool | None = None
    choices: list[int | float | str | bool] | None = Field(default=None, max_length=1000)
    default: int | float | str | bool | None = None
    domain: DomainSpec | None = None
    applier: ApplierSpec | None = None

    @model_validator(mode="after")
    def _safe_values(self) -> KnobSpec:
        safe.check_knob_spec(self)
        return self


class ObjectiveSpec(_Model):
    metric: str = "ops_per_sec"
    direction: Literal["maximize", "minimize"] | None = None

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(f"unknown metric {v!r}; known: {', '.join(METRICS)}")
        return v

    @property
    def resolved_direction(self) -> Literal["maximize", "minimize"]:
        if self.direction:
            return self.direction
        return "minimize" if self.metric in _LOWER_IS_BETTER else "maximize"


class Constraint(BaseModel):
    metric: str
    op: str
    bound: float

    def violation(self, value: float) -> float:
        """<= 0 when satisfied (Optuna's convention), else how far off."""
        if self.op in ("<=", "<"):
            return value - self.bound
        return self.bound - value

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


def parse_constraint(text: str) -> Constraint:
    m = _CONSTRAINT.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a constraint such as 'p99_us <= 500'")
    metric, op, bound = m.groups()
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r} in {text!r}; known: {', '.join(METRICS)}")
    return Constraint(metric=metric, op=op, bound=float(bound))


class BudgetSpec(_Model):
    trials: int | None = Field(default=None, ge=1, le=1_000_000)
    time: float | None = None

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: Any) -> float | None:
        return None if v is None else safe.check_duration(parse_duration(v),
                                                          safe.MAX_BUDGET_TIME)

    @model_validator(mode="after")
    def _some(self) -> BudgetSpec:
        if self.trials is None and self.time is None:
            raise ValueError("give trials, time or both")
        return self


class EvaluationSpec(_Model):
    """How measurements are turned into values the optimizer can trust."""

    statistic: Literal["median", "mean"] = "median"
    noise_floor_runs: int = Field(default=5, ge=0, le=1000)
    max_reruns: int = Field(default=2, ge=0, le=100)
    steal_threshold: float = Field(default=0.05, ge=0, le=1)
    intensify: bool = True
    max_repetitions: int = Field(default=6, ge=1, le=1000)
    early_stop: bool = True
    drift_every: int = Field(default=10, ge=0, le=1_000_000)
    confirm_top: int = Field(default=3, ge=0, le=100)
    confirm_rounds: int = Field(default=5, ge=0, le=1000)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_improvement: float = Field(default=0.0, ge=0, le=100)


class StudySpec(_Model):
    study: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    target: TargetSpec
    load: LoadSpec | None = None
    # A knob entry is a name or a mapping; the discriminator keeps pydantic from reporting
    # a spurious "Input should be a valid string" beside every bad mapping.
    knobs: list[Annotated[Annotated[str, Tag("str")] | Annotated[KnobSpec, Tag("KnobSpec")],
                          Discriminator(lambda v: "str" if isinstance(v, str) else "KnobSpec")]
                ] = Field(default_factory=list, max_length=500)
    preset: str | None = None
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    constraints: list[str] = Field(default_factory=list, max_length=100)
    budget: BudgetSpec = Field(default_factory=lambda: BudgetSpec(trials=20))
    repetitions: int = Field(default=3, ge=1, le=100)
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    relax_rules: list[str] = Field(default_factory=list, max_length=100)
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    seed: int = Field(default=0, ge=0, lt=2**32)  # what numpy and Optuna's samplers take
    storage: str | None = None

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        if v is not None:
            from kvtune.safety.storage import check_url

            check_url(v)
        return v

    @field_serializer("storage")
    def _masked(self, v: str | None) -> str | None:
        from kvtune.safety.storage import mask

        return None if v is None else mask(v)

    @field_validator("relax_rules")
    @classmethod
    def _relax(cls, v: list[str]) -> list[str]:
        from kvtune.knobs.catalog import RULES

        names = {r.name for r in RULES}
        for name in v:
            if name not in names:
                raise ValueError(f"unknown rule {name!r}; known: {', '.join(sorted(names))}")
        return v

    @field_validator("constraints")
    @classmethod
    def _constraints(cls, v: list[str]) -> list[str]:
        for c in v:
            parse_constraint(c)
        return v

    @model_validator(mode="after")
    def _load_needed(self) -> StudySpec:
        if self.target.kind != "synthetic" and self.load is None:
            raise ValueError("a memcached or redis target needs a load section")
        if self.preset and self.preset not in catalog.PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; known: "
                             f"{', '.join(catalog.PRESETS)}")
        return self

    @property
    def parsed_constraints(self) -> list[Constraint]:
        return [parse_constraint(c) for c in self.constraints]

    def storage_url(self, base: Path) -> str:
        if self.storage:
            return self.storage
        return f"sqlite:///{(base / 'results' / f'{self.study}.db').as_posix()}"


# -- loading with line numbers -------------------------------------------------------------


def _line_map(text: str) -> dict[tuple[Any, ...], int]:
    """Key path → 1-based line of each node in a YAML document."""
    lines: dict[tuple[Any, ...], int] = {}
    try:
        root = yamlload.compose(text)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node | None, path: tuple[Any, ...]) -> None:
        if node is None:
            return
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                lines[(*path, key)] = k.start_mark.line + 1
                walk(v, (*path, key))
                lines[(*path, key)] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    walk(root, ())
    return lines


def _where(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> str:
    # pydantic adds union-member names ("str", "KnobSpec") into loc; drop what isn't a key.
    path = tuple(p for p in loc if isinstance(p, int) or p in _keys_of(lines))
    text = ""
    for p in path:
        text += f"[{p}]" if isinstance(p, int) else (("." if text else "") + str(p))
    line = None
    probe = path
    while probe and line is None:
        line = lines.get(probe)
        probe = probe[:-1]
    return f"{text or '(top level)'}" + (f", line {line}" if line else "")


def _keys_of(lines: dict[tuple[Any, ...], int]) -> set[Any]:
    return {p for path in lines for p in path if not isinstance(p, int)}


def load_spec(path: str | Path) -> tuple[StudySpec, dict[tuple[Any, ...], int]]:
    p = Path(path)
    text = yamlload.read_study_file(p)
    return parse_spec(text, str(p))


def parse_spec(text: str, name: str = "<study>") -> tuple[StudySpec, dict[tuple[Any, ...], int]]:
    try:
        data = yamlload.load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        raise UserError(f"{name}{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{name}: a study file is a YAML mapping with study, target, load, "
                        "knobs, objective ... (see examples/)")
    lines = _line_map(text)
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif err["type"] == "missing" and loc and isinstance(loc[-1], str):
                msg = f"required key {loc[-1]!r} is missing"
                loc = loc[:-1]
            elif err["type"] == "missing":
                msg = "required key is missing"
            problems.append(f"{_where(loc, lines)}: {msg}")
        # A knob entry fails both union members; keep one message per location.
        problems = list(dict.fromkeys(problems))
        raise UserError(f"{name}: {len(problems)} problem(s) in the study file",
                        problems) from None
    return spec, lines


def resolve_knobs(spec: StudySpec, lines: dict[tuple[Any, ...], int] | None = None,
                  name: str = "<study>") -> list[Knob]:
    """The study's knobs from the catalog (with overrides) or defined inline.
    Unknown names, bad overrides and knobs of another target are reported together."""
    lines = lines or {}
    problems: list[str] = []
    out: list[Knob] = []
    entries: list[str | KnobSpec] = list(spec.knobs)
    if spec.preset:
        named = {e if isinstance(e, str) else e.name for e in entries}
        entries = [*(n for n in catalog.PRESETS[spec.preset] if n not in named), *entries]
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        idx = i - (len(entries) - len(spec.knobs))
        where = _where(("knobs", idx), lines) if idx >= 0 else f"preset {spec.preset}"
        ks = KnobSpec(name=entry) if isinstance(entry, str) else entry
        if ks.name in seen:
            problems.append(f"{where}: knob {ks.name!r} is listed twice")
            continue
        seen.add(ks.name)
        try:
            knob = _build_knob(ks, spec.target.kind)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        if idx < 0 and spec.preset:
            # A preset carries its own ranges (the A-Tune study's, for memcached-app).
            import dataclasses

            preset_domain = catalog.PRESET_DOMAINS.get(spec.preset, {}).get(ks.name)
            if preset_domain is not None:
                knob = dataclasses.replace(knob, domain=preset_domain)
        if spec.target.kind != "synthetic" and knob.target not in (None, spec.target.kind):
            if idx < 0:
                continue  # presets span targets; keep what fits
            problems.append(f"{where}: knob {ks.name!r} is a {knob.target} knob but the "
                            f"target is {spec.target.kind}")
            continue
        out.append(knob)
    if problems:
        raise UserError(f"{name}: {len(problems)} problem(s) with knobs", problems)
    return out


def _build_knob(ks: KnobSpec, target_kind: str) -> Knob:
    import dataclasses

    base = catalog.lookup(ks.name)
    if base is None and ks.applier is None:
        if target_kind == "synthetic":
            from kvtune.targets.synthetic import synthetic_knob

            k = synthetic_knob(ks.name)
            if k is not None:
                base = k
        if base is None:
            import difflib

            close = difflib.get_close_matches(ks.name, list(catalog.CATALOG), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else (
                "; `kvtune knobs` lists the catalog, or define it inline with domain and applier")
            raise ValueError(f"unknown knob {ks.name!r}{hint}")
    if base is None:
        assert ks.applier is not None
        if ks.domain is None:
            raise ValueError(f"inline knob {ks.name!r} needs a domain")
        d = ks.domain
        domain = Domain(d.type, d.low, d.high, d.step, d.log, tuple(d.choices or ()),
                        tuple(d.special or ()))
        a = ks.applier
        if a.memcached_flag:
            applier: Any = MemcachedFlag(a.memcached_flag)
        elif a.memcached_option:
            applier = MemcachedOption(a.memcached_option)
        elif a.redis_directive:
            applier = RedisDirective(a.redis_directive)
        elif a.sysctl:
            applier = Sysctl(a.sysctl)
        else:
            applier = HostFile([Location(str(a.sysfs))])
        base = Knob(ks.name, domain, applier, ks.default, "inline knob")
    elif ks.domain is not None or ks.applier is not None:
        raise ValueError(f"{ks.name!r} is in the catalog; override it with range, step, log or "
                         "choices instead of domain/applier")
    domain = base.domain
    try:
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
    if ks.default is not None:
        default = domain.coerce(ks.default)
    return dataclasses.replace(base, domain=domain, default=default)
