"""A library entry: what one finished study learned, as the library keeps it.

Entries are untrusted input (a colleague's export, a shared database): every field is
typed and bounded, read with pydantic, and nothing in an entry is ever executed or used
as a path. A configuration value is a scalar, and only reaches a study after the study's
own knob space accepts it (`kvtune.library.warm`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kvtune.workload.features import FEATURES

SCHEMA = "kvtune/library/1"
MAX_ENTRY_BYTES = 256 * 1024  # one entry's JSON
MAX_KNOBS = 200

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]
# Text of an entry is one line without control characters: it is shown, and a value may
# reach an exported file (where the knob catalog checks it again: kvtune.export).
_LINE = r"^[^\x00-\x1f\x7f-\x9f]*$"
Text = Annotated[str, Field(max_length=2000, pattern=_LINE)]
Scalar = bool | int | float | Annotated[str, Field(max_length=256, pattern=_LINE)]
Line = Annotated[str, Field(max_length=200, pattern=_LINE)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class Host(_Model):
    """Where the study measured: the host fingerprint's fields (kvtune.host.fingerprint)."""

    cpu_model: Line = ""
    cpus: int = Field(ge=1, le=65536)
    kernel: Line = ""
    server_cpus: Line | None = None
    load_cpus: Line | None = None
    fingerprint: str = Field(default="", max_length=64, pattern=_LINE)
    name: str | None = Field(default=None, max_length=128, pattern=_LINE)  # for people


class Objective(_Model):
    metric: Name
    direction: Literal["maximize", "minimize"]
    slo: str | None = Field(default=None, max_length=64, pattern=_LINE)


class Recommendation(_Model):
    """The confirmed recommendation: the knobs it changes from the baseline, the
    objective's change with its interval (relative: +0.12 is +12%)."""

    changes: dict[Name, Scalar] = Field(max_length=MAX_KNOBS)
    change: float | None = None
    ci: tuple[float, float] | None = None
    text: Text = ""


class Noise(_Model):
    """The baseline's noise floor: the objective's CoV over `n` repetitions."""

    cov: float = Field(ge=0, le=10)
    n: int = Field(ge=2, le=100_000)


class CurvePoint(_Model):
    rate: float = Field(ge=0, le=1e9)
    latency_us: float | None = Field(default=None, ge=0, le=1e9)
    outcome: str = Field(default="", max_length=32, pattern=_LINE)


class Capacity(_Model):
    """A capacity study's knees: the baseline's and the recommendation's (req/s, with
    their intervals), and one search's curve."""

    slo: str = Field(max_length=64, pattern=_LINE)
    knee: float = Field(gt=0, le=1e9)
    ci: tuple[float, float] | None = None
    recommended_knee: float | None = Field(default=None, gt=0, le=1e9)
    curve: list[CurvePoint] = Field(default_factory=list, max_length=200)


class Search(_Model):
    trials: int = Field(default=0, ge=0, le=1_000_000)
    best_trial: int | None = Field(default=None, ge=0, le=1_000_000)
    seconds: float | None = Field(default=None, ge=0)


class WarmFrom(_Model):
    """A past entry a study drew from, and how near it was."""

    id: Name
    distance: float = Field(ge=0)


class Entry(_Model):
    """One finished study."""

    schema_: Literal["kvtune/library/1"] = Field(default="kvtune/library/1", alias="schema")
    id: str = Field(pattern=r"^[0-9a-f]{16,32}$")
    created: float = Field(ge=0)
    kvtune_version: str = Field(max_length=32, pattern=r"^[0-9A-Za-z.+\-]+$")
    study: Name
    target: Name
    target_version: str | None = Field(default=None, max_length=32,
                                       pattern=r"^[0-9A-Za-z.+\-]*$")
    host: Host
    objective: Objective
    workload: dict[str, float] = Field(max_length=len(FEATURES))
    workload_source: Text = ""
    knobs: list[Name] = Field(default_factory=list, max_length=MAX_KNOBS)
    baseline: dict[Name, Scalar] = Field(default_factory=dict, max_length=MAX_KNOBS)
    recommendation: Recommendation | None = None  # None: the defaults hold
    verdict: Text = ""
    carriers: list[Name] = Field(default_factory=list, max_length=MAX_KNOBS)
    minimal: dict[Name, Scalar] = Field(default_factory=dict, max_length=MAX_KNOBS)
    noise: Noise | None = None
    capacity: Capacity | None = None
    search: Search = Field(default_factory=Search)
    warm_start: list[WarmFrom] = Field(default_factory=list, max_length=16)

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True,
                              populate_by_name=True)

    @field_validator("workload")
    @classmethod
    def _features(cls, v: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(v) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown workload feature(s) {', '.join(unknown)[:200]}")
        if not all(math.isfinite(x) and abs(x) < 1e6 for x in v.values()):
            raise ValueError("a workload feature is not a finite number")
        if not v:
            raise ValueError("no workload feature")
        return v

    @property
    def short_id(self) -> str:
        return self.id[:8]

    @property
    def holds(self) -> bool:
        """True when the study found that the defaults hold (no confirmed change)."""
        return self.recommendation is None

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def parse(data: Any) -> Entry:
    """An entry from its JSON document. Raises ValueError naming the first problems."""
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise ValueError("an entry is a JSON object")
    try:
        return Entry.model_validate(data)
    except ValidationError as e:
        probs = []
        for err in e.errors()[:3]:
            loc = ".".join(str(p) for p in err["loc"])
            probs.append(f"{loc or '(entry)'}: {err['msg'].removeprefix('Value error, ')}")
        raise ValueError("; ".join(probs)) from None
