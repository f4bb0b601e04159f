"""The typed, versioned documents a study stores: one frozen type per result (noise floor,
drift, confirmation with its candidates and comparisons, ablation with its choice, sweep,
host profile, host noise, warm start), with the schema version each is written at and a
reader for every older layout.

`kvtune.store` is the only place these become JSON and come back: `Store.put_result`
writes `document.stored()` (the fields and `"schema": VERSION`), and every read goes
through `read(key, raw, where)`, which upgrades an older layout to the current one
(`_UPGRADES`), validates every field's type (a stored document is input to a root process:
a field of the wrong shape is refused with a message naming the study, the result and the
field) and returns the typed document. `Store.document` hands the type to the screens that
read it by attribute (`kvtune.study.headline`, `kvtune export`); `Store.results` hands the
same upgraded document out as a mapping (`stored()`) to the screens not yet moved.

Versions (`"schema"` in the stored JSON; absent = 0, every result stored before versions):

- confirmation 1: each comparison names its statistic (`test`); a layout-0 comparison came
  from the ratio of medians with a bootstrap interval (`stats.MEDIANS_TEST`), which the
  reader says;
- ablation 2 (the ablation's own numbering since it first carried one): the smaller
  change's `choice`; layout 1 and 0 have none (nothing was chosen);
- drift 1: its comparison with the first baseline as a confirmation's;
- noise floor, sweep, host profile, host noise, warm start 1: the same fields as layout 0,
  with the version.

Unknown fields are kept (a newer kvtune may add some; `check_document` has typed them by
name), and a document of a newer version than this kvtune reads is refused by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from kvtune.errors import UserError
from kvtune.metrics import Direction
from kvtune.stats import MEDIANS_TEST

D = TypeVar("D", bound="Document")
Value = str | int | float | bool | None  # a knob's value (StrictBool first: see _Knobs)
Config = dict[str, Value]
Number = float | None


class _Doc(BaseModel):
    """Frozen, fields typed, unknown fields kept."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True,
                              protected_namespaces=(), strict=False)

    def stored(self) -> dict[str, Any]:
        """The fields as JSON values, in their stored names (what `store` writes)."""
        return self.model_dump(mode="json", by_alias=True)


class Document(_Doc):
    """A stored result: its key in the results table and its schema version."""

    KEY: ClassVar[str]
    VERSION: ClassVar[int] = 1
    schema_version: int = Field(default=0, alias="schema")
    # The host fingerprint of the run that stored it (a fleet's hosts each have theirs;
    # results stored before fingerprints were recorded count for every host).
    fingerprint: str | None = None

    def stored(self) -> dict[str, Any]:
        out = super().stored()
        out["schema"] = self.VERSION
        if out.get("fingerprint") is None:
            out.pop("fingerprint", None)
        return out


# -- comparisons --------------------------------------------------------------------------


class StoredComparison(_Doc):
    """A candidate against the baseline (`stats.Comparison.as_dict`): the improvement
    (> 0 is better in the direction) and the metric's own change, each with its interval,
    p, both arms' sizes and the statistic they come from (`test`)."""

    improvement: Number = None
    ci_low: Number = None
    ci_high: Number = None
    change: Number = None
    change_ci_low: Number = None
    change_ci_high: Number = None
    p_value: Number = None
    n_candidate: int = 0
    n_baseline: int = 0
    direction: Direction = Direction.MAXIMIZE
    test: str = MEDIANS_TEST
    ci_level: Number = None  # the interval's level (simultaneous over the candidates)
    ci_simultaneous_over: int | None = None
    df: int | None = None  # its Student t's degrees of freedom; None: not a t interval


class ChangeRecord(_Doc):
    """One metric's change as shown (`present.change_record`, `MetricChange.as_dict`):
    the figure, its interval, and the word the interval allows (`verdict`)."""

    metric: str = ""
    direction: Direction | None = None
    baseline: Number = None
    candidate: Number = None
    change: Number = None
    ci: list[Number] | None = None
    p_value: Number = None
    significant: StrictBool | None = None
    verdict: str | None = None
    text: str = ""


class ConstraintRecord(_Doc):
    constraint: str = ""
    status: Literal["satisfied", "violated", "inconclusive"] = "inconclusive"
    value: Number = None
    ci: list[Number] | None = None
    bound: Number = None
    relative: StrictBool = False
    text: str = ""


# -- the confirmation ---------------------------------------------------------------------


class ConfirmedArm(_Doc):
    """The baseline as the confirmation measured it."""

    config: Config = Field(default_factory=dict)
    samples: list[Number] = Field(default_factory=list)
    metrics: dict[str, Number] = Field(default_factory=dict)


class Candidate(_Doc):
    """One confirmed candidate: its configuration, its comparison with the baseline over
    the same rounds, every shown metric's change, its constraints and its one line."""

    trial: int | None = None
    config: Config = Field(default_factory=dict)
    name: str = ""
    search_value: Number = None
    samples: list[Number] = Field(default_factory=list)
    comparison: StoredComparison | None = None
    p_adjusted: Number = None
    objective_significant: StrictBool = False
    significant: StrictBool = False
    failed: str | None = None
    metrics: dict[str, Number] = Field(default_factory=dict)
    changes: dict[str, ChangeRecord] = Field(default_factory=dict)
    constraints: list[ConstraintRecord] = Field(default_factory=list)
    tradeoffs: list[str] = Field(default_factory=list)
    text: str = ""
    # A study of several objectives: each objective's change, and those it improved.
    objectives: dict[str, ChangeRecord] = Field(default_factory=dict)
    improved: list[str] = Field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name or (f"trial {self.trial}" if self.trial is not None else "candidate")


class Objective(_Doc):
    metric: str
    direction: Direction


class Confirmation(Document):
    """The baseline and the best candidates in interleaved rounds (`study.confirm`), and
    the recommendation: the significant candidate with the largest gain, or None."""

    KEY: ClassVar[str] = "confirmation"
    VERSION: ClassVar[int] = 1
    metric: str | None = None
    direction: Direction | None = None
    alpha: Number = None
    rounds: int | None = None
    shown: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    baseline: ConfirmedArm | None = None
    candidates: list[Candidate] = Field(default_factory=list)
    recommended: Candidate | None = None
    verdict: str = ""
    # A study of several objectives: its objectives and the trials on the confirmed front.
    multi: StrictBool = False
    objectives: list[Objective] = Field(default_factory=list)
    front: list[int] = Field(default_factory=list)
    # A fleet: the worker that ran it (the others wait for it and read it).
    confirmed_by: str | None = None

    def candidate(self, trial: int) -> Candidate | None:
        return next((c for c in self.candidates if c.trial == trial), None)

    def leading(self) -> Candidate | None:
        """The candidate with the largest measured gain (the first when none has one):
        what the screens set beside the baseline when nothing is recommended."""
        def gain(c: Candidate) -> float:
            g = c.comparison.improvement if c.comparison else None
            return g if g is not None else -1e9

        return max(self.candidates, key=gain) if self.candidates else None


# -- the ablation -------------------------------------------------------------------------


class AblatedKnob(_Doc):
    """One changed knob of the recommendation, reverted (`study.ablation.analyse`)."""

    knob: str
    baseline: Value = None
    recommended: Value = None
    samples: list[Number] = Field(default_factory=list)
    median: Number = None
    rounds: int | None = None
    share: Number = None
    share_ci: list[Number] | None = None
    p_value: Number = None
    p_adjusted: Number = None
    level: Number = None
    confidence: Number = None  # the level of `share_ci` (Bonferroni over the open changes)
    stopped: str | None = None
    revert_ci: list[Number] | None = None
    effect: str | None = None
    revert: ChangeRecord | None = None
    failed: str | None = None


class LeftOut(_Doc):
    knob: str
    baseline: Value = None
    recommended: Value = None
    share: Number = None
    share_ci: list[Number] | None = None
    effect: str | None = None


class Choice(_Doc):
    """The ablation's choice between the smaller change and the whole recommendation."""

    chosen: Literal["minimal", "full"] | None = None
    changes: Config = Field(default_factory=dict)
    config: Config = Field(default_factory=dict)
    left_out: list[LeftOut] = Field(default_factory=list)
    text: str = ""
    rounds: int | None = None
    measured: StrictBool | None = None
    minimal_gain: ChangeRecord | None = None
    extra: ChangeRecord | None = None


class Ablation(Document):
    """Which of the recommendation's changes carry its gain (`study.ablation`; its SCHEMA
    text says each field), and the smaller change chosen."""

    KEY: ClassVar[str] = "ablation"
    VERSION: ClassVar[int] = 2
    metric: str | None = None
    direction: Direction | None = None
    alpha: Number = None
    measurements: int = 0
    changes: dict[str, dict[str, Value]] = Field(default_factory=dict)
    knobs: list[AblatedKnob] = Field(default_factory=list)
    carries: list[str] = Field(default_factory=list)
    hurts: list[str] = Field(default_factory=list)
    noise: list[str] = Field(default_factory=list)
    unresolved: list[str] = Field(default_factory=list)
    minimal_changes: Config = Field(default_factory=dict)
    minimal_config: Config = Field(default_factory=dict)
    shares_sum: Number = None
    gain: ChangeRecord | None = None
    choice: Choice | None = None
    text: str = ""
    skipped: str | None = None
    # What the screens say of it (each stored since the ablation first wrote it; absent
    # from a skipped one's): the recommendation it ablated, the changes below
    # `share_threshold` of the gain (`small`), its rounds (each arm's first, the most any
    # arm ran, the cap), whether its time limit ended it, and its resolution (the smallest
    # revert effect it detects with 80% power).
    recommended: str | None = None
    share_threshold: Number = None
    small: list[str] = Field(default_factory=list)
    rounds: int | None = None
    first_rounds: int | None = None
    max_rounds: int | None = None
    out_of_time: StrictBool | None = None
    resolution: Number = None

    @property
    def chosen(self) -> Choice | None:
        """The choice, when the ablation measured and made one."""
        return None if self.skipped else self.choice


# -- the rest -----------------------------------------------------------------------------


class NoiseFloor(Document):
    KEY: ClassVar[str] = "noise_floor"
    n: int = 0
    cov: dict[str, Number] = Field(default_factory=dict)  # per metric
    robust_cov: dict[str, Number] = Field(default_factory=dict)
    detectable_improvement: Number = None
    flags: list[str] = Field(default_factory=list)


class Drift(Document):
    KEY: ClassVar[str] = "drift"
    after_trial: int | None = None
    value: Number = None
    values: list[Number] = Field(default_factory=list)
    moved: StrictBool = False
    change: StoredComparison | None = None  # against the first baseline
    ci: list[Number] | None = None
    ci_kind: str | None = None
    alpha: Number = None


class Sweep(Document):
    """One knob (or the load's rate) swept (`kvtune sweep`), stored as "sweep:<knob>"."""

    KEY: ClassVar[str] = "sweep"
    knob: str = ""
    metric: str | None = None
    direction: Direction | None = None
    baseline_value: Value = None
    rows: list[dict[str, Any]] = Field(default_factory=list)


class HostProfile(Document):
    KEY: ClassVar[str] = "host_profile"


class HostNoise(Document):
    KEY: ClassVar[str] = "host_noise"
    checks: list[dict[str, Any]] = Field(default_factory=list)


class WarmStart(Document):
    KEY: ClassVar[str] = "warm_start"
    mode: str | None = None


def latest(docs: list[D], fingerprint: str | None = None) -> D | None:
    """The latest of `docs`; with `fingerprint`, the latest of that host's (documents
    stored before fingerprints were recorded count for every host)."""
    if fingerprint is not None:
        docs = [d for d in docs if d.fingerprint in (None, fingerprint)]
    return docs[-1] if docs else None


TYPES: dict[str, type[Document]] = {
    t.KEY: t for t in (Confirmation, Ablation, NoiseFloor, Drift, Sweep, HostProfile,
                       HostNoise, WarmStart)}


def type_of(key: str) -> type[Document] | None:
    """The document type stored under `key` ("sweep:<knob>" is a Sweep); None for a key
    kvtune does not type (kept as it is)."""
    return TYPES.get(key.split(":", 1)[0] if key.startswith("sweep:") else key)


# -- older layouts ------------------------------------------------------------------------


def jsonable(obj: Any) -> Any:
    """`obj` with every document in it as its stored mapping (`kvtune show --json` prints
    a study's results as they are stored, in the current layout)."""
    if isinstance(obj, _Doc):
        return obj.stored()
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


def _comparison_0(c: Any) -> Any:
    """A layout-0 comparison: without its statistic's name it came from the ratio of
    medians with a bootstrap interval (kvtune before the paired statistic); the oldest
    have only the improvement (a gain), from which the metric's own change is derived."""
    if not isinstance(c, Mapping):
        return c
    out = dict(c)
    out.setdefault("test", MEDIANS_TEST)
    nums = [v for k in ("improvement", "ci_low", "ci_high")
            if isinstance(v := out.get(k), int | float) and not isinstance(v, bool)]
    if out.get("change") is None and len(nums) == 3:
        try:
            d = Direction(out.get("direction", "maximize"))
        except ValueError:
            return out  # refused by the type (direction) when validated
        from kvtune.stats import Comparison

        ch, lo, hi = Comparison(float(nums[0]), float(nums[1]), float(nums[2]), 1.0, 0, 0,
                                d).change()
        out.update(change=ch, change_ci_low=lo, change_ci_high=hi)
    return out


def _drift_0(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "change": _comparison_0(doc.get("change"))}


def _confirmation_0(doc: dict[str, Any]) -> dict[str, Any]:
    """Layout 0 → 1: each comparison as `_comparison_0` reads it."""
    named = _comparison_0

    def row(r: Any) -> Any:
        if isinstance(r, Mapping) and isinstance(r.get("comparison"), Mapping):
            return {**r, "comparison": named(r["comparison"])}
        return r

    out = dict(doc)
    if isinstance(out.get("candidates"), list):
        out["candidates"] = [row(r) for r in out["candidates"]]
    out["recommended"] = row(out.get("recommended"))
    return out


def _same(doc: dict[str, Any]) -> dict[str, Any]:
    return doc


# Per type, per older version: the function that lifts a document of that version by one.
_UPGRADES: dict[str, dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "confirmation": {0: _confirmation_0},
    "drift": {0: _drift_0},
    "ablation": {0: _same, 1: _same},  # no choice before 2 (its default: None)
}


def upgrade(kind: type[Document], doc: dict[str, Any], where: str) -> dict[str, Any]:
    """`doc` lifted from its stored version to `kind.VERSION`; UserError for a version this
    kvtune cannot read (newer, or not a whole number)."""
    version = doc.get("schema", 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise UserError(f"{where}: the stored field schema is {version!r}, not a schema "
                        "version (the results database was changed?); nothing was written")
    if version > kind.VERSION:
        raise UserError(f"{where}: stored at schema version {version} by a newer kvtune "
                        f"(this one reads {kind.KEY} up to version {kind.VERSION}); upgrade "
                        "kvtune to read it; nothing was written")
    steps = _UPGRADES.get(kind.KEY, {})
    while version < kind.VERSION:
        doc = steps.get(version, _same)(doc)
        version += 1
    return {**doc, "schema": kind.VERSION}


def read(key: str, raw: Any, where: str) -> Any:
    """The stored result `raw` under `key` as its typed document (upgraded from an older
    layout); UserError naming `where` and the field when a field has the wrong shape. A
    key kvtune does not type is returned as it is."""
    kind = type_of(key)
    if kind is None:
        return raw
    if not isinstance(raw, dict):
        raise UserError(f"{where}: the stored document is not a mapping (the results "
                        "database was changed?); nothing was written")
    try:
        return kind.model_validate(upgrade(kind, raw, where))
    except ValidationError as e:
        err = e.errors()[0]
        # A union's members are named in the location ("config.k.str"): the field is the
        # path up to them, and no single member's complaint is the reason.
        path = [str(p) for p in err["loc"]]
        cut = next((i for i, p in enumerate(path) if p in _TAGS or "[" in p), len(path))
        field = ".".join(path[:cut]) or "(the document)"
        why = _why(err) if cut == len(path) else \
            f"is {_shown(err.get('input'))}: not of its type"
        raise UserError(f"{where}: the stored field {field} {why} (the results "
                        "database was changed?); nothing was written") from None


def build(key: str, data: Any, where: str = "a result being stored") -> Any:
    """A result about to be stored, typed: a document as it is, a mapping validated as
    its key's document (a phase that still builds a mapping)."""
    if isinstance(data, Document):
        return data
    return read(key, data if not isinstance(data, dict) else
                {"schema": (type_of(key) or Document).VERSION, **data}, where)


_TAGS = frozenset({"str", "int", "float", "bool", "none", "dict", "list"})


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _why(err: Mapping[str, Any]) -> str:
    return f"is {_shown(err.get('input'))}: {str(err.get('msg', 'not of its type')).lower()}"
