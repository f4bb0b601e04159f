"""The study file: one YAML document, validated with pydantic. The schema only: it checks
shapes, bounds and the text of every value, and imports no plugin. What the registries
decide (a target kind, a load tool, their arguments) and turning `knobs:` and `preset:`
into knobs are the loader's (`kvtune.study.loader`), the only way a study file becomes a
study.

Every problem is reported at once, each with its key path and line (`knobs[2].range, line
14: ...`), as a `UserError` (exit code 2) before anything touches the host.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from kvtune import roots
from kvtune.cpulist import parse_cpus
from kvtune.durations import parse_duration
from kvtune.errors import UserError
from kvtune.metrics import OBJECTIVES, SLO_METRICS, Direction, unknown_objective
from kvtune.metrics import direction as objective_direction
from kvtune.quantities import MAX_RATE, NUMBER, RATE_FORMS, parse_rate, plain
from kvtune.safety import args as scan
from kvtune.safety import values as safe
from kvtune.safety import yamlload
from kvtune.safety.hostpaths import check_sysctl_name, check_sysfs_text
from kvtune.safety.remote import (
    LoadHost,
    check_remote_path,
    check_server_address,
    parse_load_host,
    server_address_problem,
)

__all__ = ["LineMap", "StudySpec", "line_map", "parse_cpus", "parse_data", "parse_duration",
           "where_in_file", "yaml_data"]

METRICS = OBJECTIVES  # the metrics an objective or a constraint may name (kvtune.metrics)
_NAME = r"^[a-z][a-z0-9_\-]{0,31}$"  # a registered name: target kind, load tool
_SLO = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|<)\s*(\S.{0,63}?)\s*$")
_BARE = re.compile(rf"^-?{NUMBER}$")  # a number of µs (a sign only to say it must be positive)
# "p99_us <= 500", or relative to the baseline: "ops_per_sec >= 0.98 * baseline".
# A memory bound may carry a size suffix: "memory <= 256M".
_CONSTRAINT = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*(?:(-?[0-9.eE+]+[KMGkmg]?)|"
                         r"(-?[0-9.eE+]+)\s*\*\s*baseline|(baseline))\s*$")


def _cpu_list(v: str) -> str:
    parse_cpus(v)
    return v


def _words(v: list[str]) -> list[str]:
    for i, w in enumerate(v):
        scan.word(w, i)
    return v


def _number_text(v: str) -> bool:
    """A number as YAML leaves some as text ('1e5'), which the field reads as before."""
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def _rate_text(v: Any) -> Any:
    """A rate written as on the command line ('50k', '1.5M'): kvtune.quantities' grammar;
    a number stays a number (its bounds are the field's)."""
    if isinstance(v, str) and not _number_text(v):
        try:
            return parse_rate(v)
        except ValueError:
            raise ValueError(f"{v.strip()[:40]!r} is not {RATE_FORMS} (requests/s; k and M "
                             "as on the command line)") from None
    return v


def _count_text(v: Any) -> Any:
    """A count written with k or M as a rate is ('100k', '1M'): a whole number."""
    if isinstance(v, str) and not _number_text(v):
        try:
            n = parse_rate(v)
        except ValueError:
            raise ValueError(f"{v.strip()[:40]!r} is not a count such as 10000, 100k or "
                             "1M") from None
        if n != int(n):
            raise ValueError(f"{v.strip()[:40]!r} is not a whole number")
        return int(n)
    return v


# Quantities take the command line's grammar in a study file too.
Rate = Annotated[float, BeforeValidator(_rate_text)]
Count = Annotated[int, BeforeValidator(_count_text)]

# A CPU list (kvtune.cpulist's grammar), kept as written.
CpuList = Annotated[str, AfterValidator(_cpu_list)]
# Words for an argv: each scanned (kvtune.safety.args); the target kind or the load tool
# checks them against its own allow-list in the loader.
Words = Annotated[list[str], AfterValidator(_words)]


class _Model(BaseModel):
    # Numbers are finite everywhere: .inf and .nan never reach a duration, range or seed.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TargetSpec(_Model):
    kind: str = Field(pattern=_NAME)  # a registered target kind (checked by the loader)
    binary: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)
    args: Words = Field(default_factory=list, max_length=64)  # the kind checks its own
    cpus: CpuList | None = None
    start_timeout: float = Field(default=10.0, gt=0, le=600)
    # the operator's server configuration (/etc/memcached.conf, redis.conf): the baseline
    # (study/loader.py places each setting; targets/server_config.py)
    config: str | None = Field(default=None, min_length=1, max_length=4096)
    # the synthetic target's own keys (Target.spec_keys): other kinds refuse them
    noise_cov: float = Field(default=0.1, ge=0, le=10)
    surface: str = Field(default="default", max_length=64)

    @field_validator("host")
    @classmethod
    def _address(cls, v: str) -> str:
        # loopback, or with load.host an address the load host reaches (StudySpec checks)
        return check_server_address(v)


class WorkloadSpec(_Model):
    # kvload's argv words: typed and bounded, so no value can add a flag.
    keys: Count = Field(default=10000, ge=1, le=10**10)
    key_size: Annotated[int, Field(ge=1, le=65536)] | Literal["etc"] = 16
    value_size: Annotated[int, Field(ge=1, le=1 << 30)] | Annotated[
        str, Field(pattern=r"^[0-9A-Za-z][0-9A-Za-z:.,\-]{0,255}$")] = 100
    popularity: str = Field(default="uniform", pattern=r"^[a-z]+(:[0-9.eE+\-]{1,32}){0,2}$")
    mix: str = Field(default="get:9,set:1",
                     pattern=r"^[a-z]+:[0-9.]{1,16}(,[a-z]+:[0-9.]{1,16}){0,7}$")
    mget_size: int = Field(default=10, ge=1, le=1024)
    arrival: Literal["poisson", "fixed", "etc"] = "poisson"
    preload: bool = True

    @field_validator("value_size", "popularity")
    @classmethod
    def _bounded_sizes(cls, v: Any, info: Any) -> Any:
        # Every size has a bound checked before kvload allocates (issue 29).
        from kvtune.safety.workload import size_problem

        if isinstance(v, str):
            try:
                problem = size_problem(info.field_name, v)
            except ValueError:
                problem = None  # kvload's own grammar check names a malformed one
            if problem:
                raise ValueError(problem)
        return v


class LoadSpec(_Model):
    _workload_doc: dict[str, Any] | None = PrivateAttr(default=None)

    tool: str = Field(default="kvload", pattern=_NAME)  # a registered load driver (loader)
    protocol: Literal["memcache", "meta", "resp"] | None = None
    mode: Literal["open", "closed"] = "open"
    rate: Rate | None = Field(default=None, gt=0, le=1e9)
    # Multiplies the rates of the workload file (a captured model at 2x: 2), kvload's
    # --rate-scale.
    rate_scale: float | None = Field(default=None, gt=0, le=1000)
    connections: int = Field(default=4, ge=1, le=10000)
    pipeline: int = Field(default=1, ge=1, le=1024)
    duration: float = 5.0
    warmup: float = 1.0
    # kvload's --window: each run's measured window is also judged in windows this long
    # (a capacity search decides a rate by them; default about 250 ms).
    window: float | None = None
    # kvload's --spin-us: busy-poll when the next send is this close (µs). Unset: 1000 in
    # open loop on pinned load CPUs (they are the load's alone), else 0. A client that
    # halts between sends pays the VM's wake-up on every one: late sends, late reads,
    # and more CPU per request (docs/kvload.md).
    spin_us: int | None = Field(default=None, ge=0, le=100_000)
    cpus: CpuList | None = None
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    workload_file: str | None = None
    extra_args: Words = Field(default_factory=list, max_length=16)  # the tool checks its own
    # The load generator on its own host (docs/fleet.md): ssh://user@host[:port], and the
    # tool's binary there (else found on its PATH or copied to a per-version path).
    host: str | None = None
    remote_binary: str | None = None

    @field_validator("host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        if v is not None:
            parse_load_host(v)
        return v

    @field_validator("remote_binary")
    @classmethod
    def _remote_binary(cls, v: str | None) -> str | None:
        return None if v is None else check_remote_path(v)

    @property
    def effective_spin_us(self) -> int:
        """`spin_us`, or its default: 1000 µs in open loop on pinned load CPUs, else 0."""
        if self.spin_us is not None:
            return self.spin_us
        return 1000 if self.mode == "open" and self.cpus else 0

    @property
    def load_host(self) -> LoadHost | None:
        """`host` parsed, or None when the load runs on this host."""
        return None if self.host is None else parse_load_host(self.host)

    @field_validator("window", mode="before")
    @classmethod
    def _window(cls, v: Any) -> float | None:
        if v is None:
            return None
        w = parse_duration(v)
        if not 0.05 <= w <= 60:
            raise ValueError("a window is between 50ms and 60s")
        return w

    @field_validator("duration", "warmup", mode="before")
    @classmethod
    def _dur(cls, v: Any, info: ValidationInfo) -> float:
        # warmup 0: no warm-up, the window starts with the first request (case 004)
        return safe.check_duration(parse_duration(v, zero=info.field_name == "warmup"),
                                   safe.MAX_DURATION)

    @field_validator("workload_file")
    @classmethod
    def _workload_file(cls, v: str | None) -> str | None:
        # A path relative to the study file; the loader resolves and reads it.
        if v is not None and (not v or any(c in v for c in "\x00\n\r") or len(v) > 4096):
            raise ValueError("not a file name")
        return v

    def workload_document(self) -> dict[str, Any] | None:
        """The workload file, parsed and checked once (`safety.workload`): the loader reads
        it (`set_workload_document`); a load built another way reads it here, on first use.
        None without a file; ValueError for a file kvload may not read."""
        if self.workload_file is None:
            return None
        if self._workload_doc is None:
            from kvtune.safety.workload import check_workload_file

            self._workload_doc = check_workload_file(self.workload_file)
        return self._workload_doc

    def set_workload_document(self, path: str, doc: dict[str, Any]) -> None:
        """The workload file resolved (`path`) and its checked document (the loader's)."""
        self.workload_file = path
        self._workload_doc = doc

    @model_validator(mode="after")
    def _rate(self) -> LoadSpec:
        if self.window is not None and self.window > self.duration:
            raise ValueError(f"load.window {self.window:g}s is longer than load.duration "
                             f"{self.duration:g}s: a run is cut into windows")
        if self.remote_binary is not None and self.host is None:
            raise ValueError("load.remote_binary is a path on the load host: it needs load.host")
        return self


def inline_keys() -> list[str]:
    """The keys of an inline knob's `applier:`: each server kind's, then the host's."""
    from kvtune import kind_registry as kinds

    return [*(key for k in kinds.every() for key in k.inline), "sysctl", "sysfs"]


class ApplierSpec(_Model):
    """For inline knobs: exactly one key says where the value goes: `sysctl`, `sysfs`, or a
    server kind's own (kinds/<kind>/__init__.py, `inline`: memcached_flag, ...)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    sysctl: str | None = None
    sysfs: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        if isinstance(data, dict):
            keys = inline_keys()
            for k in data:
                if k not in keys:  # never echoed: an unknown word of an untrusted file
                    raise ValueError("an unknown applier key: give exactly one of "
                                     + ", ".join(keys))
                if data[k] is not None and not isinstance(data[k], str):
                    raise ValueError(f"{k}: give its name as text")
        return data

    @model_validator(mode="after")
    def _one(self) -> ApplierSpec:
        given = [k for k, v in self.model_dump().items() if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of " + ", ".join(inline_keys()))
        if self.sysfs is not None and not self.sysfs.startswith(roots.SYS + "/"):
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
    """A `knobs:` entry. One vocabulary for catalog knobs and inline ones: `range`, `step`,
    `log`, `choices` narrow a catalog knob or define an inline knob's domain (with its
    `type` and `applier`), `default` sets the baseline, `fixed` pins the knob to one value
    (the baseline and every trial)."""

    name: str = Field(max_length=128)
    type: Literal["int", "float", "categorical", "bool"] | None = None  # inline knobs
    range: tuple[float, float] | None = None
    step: float | None = None
    log: bool | None = None
    choices: list[int | float | str | bool] | None = Field(default=None, max_length=1000)
    special: list[int | float | str] | None = Field(default=None, max_length=100)
    default: int | float | str | bool | None = None
    fixed: int | float | str | bool | None = None
    applier: ApplierSpec | None = None

    @model_validator(mode="after")
    def _safe_values(self) -> KnobSpec:
        if self.fixed is not None and (self.range is not None or self.choices is not None
                                       or self.default is not None):
            raise ValueError(f"{self.name}: fixed pins the knob; give no range, choices or "
                             "default with it")
        if self.applier is None and (self.type is not None or self.special is not None):
            raise ValueError(f"{self.name}: type and special define an inline knob (with an "
                             "applier); a catalog knob has its own")
        if self.applier is not None and self.type is None:
            raise ValueError(f"inline knob {self.name!r} needs a type (int, float, "
                             "categorical or bool)")
        safe.check_knob_numbers(self)
        return self


class Slo(BaseModel):
    """A latency SLO, `metric op bound` in µs: what a capacity search keeps."""

    metric: str
    op: str
    bound_us: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {plain(self.bound_us, 3)}"

    def kvload(self) -> str:
        """The SLO in kvload's `--search` grammar (docs/kvload.md)."""
        return f"{SLO_METRICS[self.metric]}{self.op}{plain(self.bound_us, 3)}us"


def parse_slo(text: str) -> Slo:
    """`p99_us <= 200` (µs; `200us`, `0.2ms` or any duration too). ValueError naming what
    is wrong."""
    m = _SLO.match(text)
    if not m:
        raise ValueError(f"{text!r} is not an SLO such as 'p99_us <= 200'")
    metric, op, bound = m.groups()
    if metric not in SLO_METRICS:
        raise ValueError(f"an SLO bounds a latency: {metric!r} is not one of "
                         f"{', '.join(SLO_METRICS)}")
    # The bound is a duration in the one grammar (kvtune.durations), a bare number being
    # the metric's own unit, µs.
    try:
        value = float(bound) if _BARE.match(bound) else round(parse_duration(bound) * 1e9) / 1e3
    except ValueError:
        raise ValueError(f"{text!r} is not an SLO such as 'p99_us <= 200': {bound!r} is "
                         "neither a number of µs nor a duration such as 200us or 2ms") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r}: the bound must be a positive number of µs")
    if value > 60e6:
        raise ValueError(f"{text!r}: a bound above 60 s is not a latency SLO")
    if value < 1:
        raise ValueError(f"{text!r}: a bound below 1 µs is below what kvload measures")
    return Slo(metric=metric, op=op, bound_us=value)


class ObjectiveSpec(_Model):
    """The objective: one metric (`objective: p99_us` or `{metric: p99_us}`), or several
    (`objective: [p99_us, ops_per_sec]`: a Pareto study; `metric` is then the first and
    `also` the others, as the loader builds it). A metric's direction is its own
    (kvtune.metrics); a `direction` that contradicts it is an error."""

    metric: str = "ops_per_sec"
    direction: Literal["maximize", "minimize"] | None = None
    also: list[ObjectiveSpec] = Field(default_factory=list)
    # metric: capacity — the latency SLO its knee search keeps ("p99_us <= 200"), the rate
    # range it searches (req/s; default: from a short closed-loop burst), its precision.
    # Parsed once, here: what travels is the Slo (its text is `str(slo)`, as stored).
    slo: Slo | None = None
    rates: tuple[Rate, Rate] | None = None
    precision: float = Field(default=0.02, ge=0.005, le=0.25)

    @field_validator("slo", mode="before")
    @classmethod
    def _slo(cls, v: Any) -> Any:
        if isinstance(v, str):
            if len(v) > 64:
                raise ValueError("an SLO is at most 64 characters")
            return parse_slo(v)
        if v is not None and not isinstance(v, Slo):
            raise ValueError("an SLO is text such as 'p99_us <= 200'")
        return v

    @field_serializer("slo")
    def _slo_text(self, v: Slo | None) -> str | None:
        return None if v is None else str(v)

    @field_validator("rates")
    @classmethod
    def _rates(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None:
            lo, hi = v
            if not 0 < lo < hi:
                raise ValueError(f"rates [{lo:g}, {hi:g}] is not a range of request rates "
                                 "(0 < low < high)")
            if hi > MAX_RATE:
                raise ValueError(f"rates: {hi:g} req/s is above kvload's limit of "
                                 f"{MAX_RATE:g}")
        return v

    @model_validator(mode="after")
    def _capacity(self) -> ObjectiveSpec:
        if self.metric == "capacity" and self.slo is None:
            raise ValueError("metric capacity needs an slo, e.g. slo: \"p99_us <= 200\"")
        if self.metric != "capacity" and (self.slo is not None or self.rates is not None):
            raise ValueError("slo and rates belong to metric: capacity")
        return self

    @model_validator(mode="before")
    @classmethod
    def _short(cls, v: Any) -> Any:
        if isinstance(v, str):
            return {"metric": v}
        if isinstance(v, list):
            if not v:
                raise ValueError("give at least one objective metric")
            for i, x in enumerate(v):
                if not isinstance(x, str | dict):
                    raise ValueError(f"objective[{i}]: {x!r} is not a metric name or a "
                                     "{metric, direction} mapping")
            first = {"metric": v[0]} if isinstance(v[0], str) else dict(v[0])
            rest = [{"metric": x} if isinstance(x, str) else x for x in v[1:]]
            also = first.get("also", [])
            if not isinstance(also, list):
                raise ValueError("objective.also must be a list of metrics")
            return {**first, "also": [*also, *rest]}
        return v

    @model_validator(mode="after")
    def _distinct(self) -> ObjectiveSpec:
        names = [o.metric for o in self.all]
        if len(set(names)) != len(names):
            raise ValueError(f"an objective metric is given twice: {', '.join(names)}")
        if any(o.also for o in self.also):
            raise ValueError("nested objectives: list them all at one level")
        return self

    @property
    def all(self) -> list[ObjectiveSpec]:
        """Every objective, the first (`metric`) first."""
        return [self, *self.also]

    @property
    def multi(self) -> bool:
        return bool(self.also)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(unknown_objective(v))
        return v

    @field_validator("direction")
    @classmethod
    def _direction(cls, v: str | None, info: ValidationInfo) -> str | None:
        metric = info.data.get("metric")
        if v is not None and metric in METRICS and v != objective_direction(metric):
            raise ValueError(f"direction {v} contradicts {metric}, which kvtune "
                             f"{objective_direction(metric)}s: leave direction out")
        return v

    @property
    def resolved_direction(self) -> Direction:
        return objective_direction(self.metric)


class Constraint(BaseModel):
    """`metric op bound`; with `relative`, the bound is a factor of the baseline's value
    (`ops_per_sec >= 0.98 * baseline`), known once the baseline is measured (`resolve`)."""

    metric: str
    op: str
    bound: float
    relative: bool = False
    baseline: float | None = None  # the baseline's value of `metric`, for a relative one

    def resolve(self, baseline_metrics: Mapping[str, Any]) -> Constraint:
        """This constraint against a measured baseline (its median of `metric`)."""
        v = baseline_metrics.get(self.metric)
        if not self.relative or not isinstance(v, int | float) or v != v:
            return self
        return self.model_copy(update={"baseline": float(v)})

    @property
    def absolute_bound(self) -> float | None:
        if not self.relative:
            return self.bound
        return None if self.baseline is None else self.bound * self.baseline

    def violation(self, value: float) -> float:
        """<= 0 when satisfied (Optuna's convention), else how far off (relative to the
        bound for a relative constraint). A relative constraint not resolved against a
        baseline yet is not judged (0)."""
        bound = self.absolute_bound
        if bound is None:
            return 0.0
        off = value - bound if self.op in ("<=", "<") else bound - value
        return off / abs(bound) if self.relative and bound else off

    def __str__(self) -> str:
        if self.relative:
            return f"{self.metric} {self.op} {self.bound:g} * baseline"
        if self.metric == "memory" and self.bound == int(self.bound):
            return f"{self.metric} {self.op} {int(self.bound)}"
        return f"{self.metric} {self.op} {self.bound:g}"


@dataclass(frozen=True)
class CapacitySearch:
    """A capacity repetition: the highest open-loop rate whose latency keeps `slo`,
    searched within `rates` (None: from a closed-loop burst) to `precision`."""

    slo: Slo
    rates: tuple[float, float] | None
    precision: float


def parse_constraint(text: str) -> Constraint:
    m = _CONSTRAINT.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a constraint such as 'p99_us <= 500' or "
                         "'ops_per_sec >= 0.98 * baseline'")
    metric, op, bound, factor, alone = m.groups()
    if metric not in METRICS:
        raise ValueError(f"{unknown_objective(metric)} (in {text!r})")
    if bound is not None and bound[-1] in "KMGkmg":
        if metric != "memory":
            raise ValueError(f"{text!r}: a size suffix (K, M, G) is for memory")
        from kvtune.quantities import parse_size

        try:
            return Constraint(metric=metric, op=op, bound=float(parse_size(bound)))
        except ValueError as e:
            raise ValueError(f"{text!r}: {e}") from None
    try:
        number = float(bound) if bound is not None else 1.0 if alone else float(factor)
    except ValueError:
        raise ValueError(f"{text!r}: {bound or factor!r} is not a number") from None
    if not math.isfinite(number):  # '1e999' or 400 digits: no trial could ever meet it
        raise ValueError(f"{text!r}: {(bound or factor or '')[:40]!r} is beyond any number")
    return Constraint(metric=metric, op=op, bound=number, relative=bound is None)


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
    # At least 1 each: a study that never confirms could never recommend (skip the
    # confirmation with `kvtune tune --no-confirm` instead).
    confirm_top: int = Field(default=3, ge=1, le=100)
    confirm_rounds: int = Field(default=5, ge=1, le=1000)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    min_improvement: float = Field(default=0.0, ge=0, le=100)
    # After the confirmation, measure the recommendation with each changed knob reverted
    # (kvtune.study.ablation): confirm_rounds rounds of every arm, then more rounds only for
    # the changes still open, as many as the measured noise needs to resolve a share of
    # ablation_share of the gain (ablation_effect, relative, when there is no gain to
    # share), at most ablation_max_rounds rounds per arm
    # (at most confirm_rounds: one fixed look, as before).
    ablation: bool = True
    ablation_effect: float = Field(default=0.05, gt=0, le=10)
    ablation_max_rounds: int = Field(default=30, ge=0, le=1000)
    # A change whose share of the gain is shown below this (its whole interval) does not
    # carry it: its test stops, and the minimal configuration leaves it out.
    ablation_share: float = Field(default=0.10, gt=0, lt=1)
    # The ablation's time budget (seconds; None: none): its first look always runs, and
    # no later look starts that would take the whole ablation past it.
    ablation_time: float | None = None

    @field_validator("ablation_time", mode="before")
    @classmethod
    def _ablation_time(cls, v: Any) -> float | None:
        return None if v is None else safe.check_duration(parse_duration(v),
                                                          safe.MAX_BUDGET_TIME)


class CanarySpec(_Model):
    """`canary:` the rules `kvtune canary --study` judges the canary by when the command line
    gives none (docs/production.md): a goal ("cpu_per_request better") and guardrails ("p99
    not worse than +5%"); their grammar and metrics are checked by `kvtune canary`."""

    goal: str | None = Field(default=None, min_length=1, max_length=200)
    guardrails: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=20)


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
    sampler: Literal["tpe", "random", "grid", "nsga2"] = "tpe"  # nsga2: Pareto studies
    seed: int = Field(default=0, ge=0, lt=2**32)  # what numpy and Optuna's samplers take
    # Fleet workers on hosts with other fingerprints: refused ("identical"), or each host
    # fingerprint with its own baseline and confirmation ("heterogeneous"; docs/fleet.md).
    hosts: Literal["identical", "heterogeneous"] = "identical"
    storage: str | None = None
    canary: CanarySpec | None = None  # the rules of `kvtune canary --study`

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

    @field_validator("constraints")
    @classmethod
    def _constraints(cls, v: list[str]) -> list[str]:
        for c in v:
            parse_constraint(c)
        return v

    @model_validator(mode="after")
    def _rate(self) -> StudySpec:
        load = self.load
        if load is None:
            return self
        capacity = any(o.metric == "capacity" for o in self.objective.all)
        if capacity and load.mode != "open":
            _raise_at(("load", "mode"), load.mode,
                      "objective capacity is a search over open-loop rates: load.mode must be "
                      "open (a closed loop has no rate to search)")
        # A workload file may give the rate (top-level or per phase); kvload says when not.
        # A capacity search chooses its rates.
        if load.mode == "open" and load.rate is None and not load.workload_file \
                and not capacity:
            _raise_at(("load",), None, "open-loop load needs a rate (requests per second)")
        rates = next((o.rates for o in self.objective.all if o.metric == "capacity"), None)
        if capacity and rates and load.rate is not None \
                and not rates[0] <= load.rate <= rates[1]:
            _raise_at(("load", "rate"), load.rate,
                      f"with objective capacity load.rate is the search's first rate: "
                      f"{load.rate:g} is outside objective.rates [{rates[0]:g}, {rates[1]:g}]")
        return self

    @model_validator(mode="after")
    def _memory(self) -> StudySpec:
        """`memory` (an objective or a constraint) is read from a server kind with a memory
        model (kinds/<kind>/mrc.py)."""
        from kvtune import kind_registry as kinds

        named = [o.metric for o in self.objective.all] + [
            c.metric for c in self.parsed_constraints]
        if "memory" not in named:
            return self
        k = kinds.find(self.target.kind)
        if k is None or not k.mrc:
            have = [n for n in kinds.names() if kinds.get(n).mrc]
            where = ("objective",) if "memory" in [o.metric for o in self.objective.all] \
                else ("constraints",)
            _raise_at(where, "memory", f"memory is the memory setting of a server kind "
                      f"({', '.join(have)}), not of target.kind {self.target.kind}")
        return self

    @property
    def capacity(self) -> CapacitySearch | None:
        """What each repetition's capacity search keeps and searches (None when no
        objective is capacity)."""
        o = next((o for o in self.objective.all if o.metric == "capacity"), None)
        if o is None or o.slo is None:
            return None
        return CapacitySearch(o.slo, o.rates, o.precision)

    @model_validator(mode="after")
    def _network_rule(self) -> StudySpec:
        """Traffic goes only to loopback or to the hosts the study names (safety/remote.py)."""
        problem = server_address_problem(self.target.host,
                                         self.load.load_host if self.load else None)
        if problem:  # reported at target.host (a plain ValueError would be at the top level)
            _raise_at(("target", "host"), self.target.host, problem)
        return self

    @property
    def parsed_constraints(self) -> list[Constraint]:
        return [parse_constraint(c) for c in self.constraints]

    def storage_url(self, base: Path) -> str:
        if self.storage:
            return self.storage
        return f"sqlite:///{(base / 'results' / f'{self.study}.db').as_posix()}"


def _raise_at(loc: tuple[str, ...], value: Any, problem: str) -> None:
    """A model validator's problem reported at `loc` (a plain ValueError would be reported
    at the model's own level)."""
    from pydantic_core import InitErrorDetails, PydanticCustomError

    raise ValidationError.from_exception_data("StudySpec", [InitErrorDetails(
        type=PydanticCustomError("value_error", "{problem}", {"problem": problem}),
        loc=loc, input=value)])


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


class LineMap(dict[tuple[Any, ...], int]):
    """A line map whose keys may have been given on the command line instead (`given`:
    key path -> the option, e.g. ("objective",) -> "--capacity"): a problem there is shown
    at the option, not at a line of the file."""

    def __init__(self, lines: dict[tuple[Any, ...], int],
                 given: dict[tuple[Any, ...], str]) -> None:
        super().__init__(lines)
        self.given = dict(given)


def where_in_file(loc: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> str:
    """`knobs[2].range, line 14` for a key path, from `parse_spec`'s line map;
    `objective.slo (--capacity)` for a key a command-line option set (`LineMap`)."""
    given = getattr(lines, "given", {})
    # pydantic adds union-member names ("str", "KnobSpec") into loc; drop what isn't a key.
    keys = _keys_of(lines) | {k for path in given for k in path}
    path = tuple(p for p in loc if isinstance(p, int) or p in keys)
    text = ""
    for p in path:
        text += f"[{p}]" if isinstance(p, int) else (("." if text else "") + str(p))
    option = next((given[path[:n]] for n in range(len(path), 0, -1) if path[:n] in given),
                  None)
    if option is not None:
        return f"{text} ({option})"
    line = None
    probe = path
    while probe and line is None:
        line = lines.get(probe)
        probe = probe[:-1]
    return f"{text or '(top level)'}" + (f", line {line}" if line else "")


def _keys_of(lines: dict[tuple[Any, ...], int]) -> set[Any]:
    return {p for path in lines for p in path if not isinstance(p, int)}


def yaml_data(text: str, name: str = "<study>") -> dict[str, Any]:
    """The study file's YAML document (a mapping), within the limits of safety/yamlload."""
    try:
        data = yamlload.load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        problem = str(getattr(e, "problem", e))
        if "nesting depth" in problem:  # PyYAML >= 6.0.3's scanner stops before kvtune's
            problem = f"nested more than {yamlload.MAX_DEPTH} levels deep"
        raise UserError(f"{name}{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"{name}: a study file is a YAML mapping with study, target, load, "
                        "knobs, objective ... (see examples/)")
    return data


def line_map(text: str) -> dict[tuple[Any, ...], int]:
    """Key path → 1-based line of each node in a YAML document."""
    return _line_map(text)


def parse_data(data: dict[str, Any], name: str, lines: dict[tuple[Any, ...], int],
               problems: list[str] | None = None) -> StudySpec:
    """Validate a study file's document; every problem (with `problems` found before)
    raised at once as a UserError naming its key and line."""
    problems = list(problems or [])
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as e:
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
            problems.append(f"{where_in_file(loc, lines)}: {msg}")
    if problems:
        # A knob entry fails both union members; keep one message per location.
        problems = list(dict.fromkeys(problems))
        raise UserError(f"{name}: {len(problems)} problem(s) in the study file",
                        problems) from None
    return spec
