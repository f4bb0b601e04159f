"""A study as the analysis sees it: its trials from Optuna's storage, its raw repetitions
and its results (noise floor, confirmation, sweeps) from kvtune's tables."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
import sqlalchemy as sa

from kvtune.documents import Ablation, Confirmation, NoiseFloor
from kvtune.errors import UserError
from kvtune.knobs.domain import Domain
from kvtune.metrics import Direction
from kvtune.space import stored_domains
from kvtune.store import RESULTS, Store

SEARCH_KINDS = ("baseline", "trial")


@dataclass
class KnobInfo:
    name: str
    kind: str  # "float", "int" or "categorical"
    log: bool = False
    choices: tuple[Any, ...] = ()
    special: tuple[Any, ...] = ()  # values outside a numeric range (the baseline's, ...)

    @property
    def numeric(self) -> bool:
        return self.kind in ("float", "int")


@dataclass
class StudyData:
    name: str
    metric: str
    direction: Direction  # "maximize" or "minimize"
    study: optuna.Study
    trials: list[optuna.trial.FrozenTrial]
    reps: list[dict[str, Any]]
    knobs: list[KnobInfo]
    spec: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    noise_floor: NoiseFloor | None = None
    confirmation: Confirmation | None = None
    drift: list[dict[str, Any]] = field(default_factory=list)
    sweeps: dict[str, dict[str, Any]] = field(default_factory=dict)
    sweep_reps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    storage: str = ""
    ablation: Ablation | None = None
    spec_text: str | None = None  # the study file as written (studies since issue 13)
    host_noise: dict[str, Any] | None = None  # kvtune.measure.host_noise facts at the noise floor
    engine: Any = None  # the results database's SQLAlchemy engine (workers, hosts)

    @property
    def maximize(self) -> bool:
        return Direction(self.direction) is Direction.MAXIMIZE

    def better(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b

    def search_trials(self, feasible_only: bool = True) -> list[optuna.trial.FrozenTrial]:
        """Completed baseline and search trials (with a finite value)."""
        out = []
        for t in self.trials:
            if t.state != optuna.trial.TrialState.COMPLETE or t.value is None:
                continue
            if t.user_attrs.get("kind") not in SEARCH_KINDS or math.isnan(t.value):
                continue
            if feasible_only and not all(v <= 0 for v in t.user_attrs.get("violations", [0])):
                continue
            out.append(t)
        return out

    def ok_reps(self) -> list[dict[str, Any]]:
        """Repetitions that measured something (not failed), with the objective's value."""
        return [r for r in self.reps if r["status"] != "failed" and r["value"] is not None]


def _knob_info(name: str, dist: optuna.distributions.BaseDistribution) -> KnobInfo:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return KnobInfo(name, "categorical", choices=tuple(dist.choices))
    if isinstance(dist, optuna.distributions.IntDistribution):
        return KnobInfo(name, "int", log=dist.log)
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return KnobInfo(name, "float", log=dist.log)
    return KnobInfo(name, "categorical")


def _knob_from_domain(name: str, d: Domain) -> KnobInfo:
    if d.type == "bool":
        return KnobInfo(name, "categorical", choices=(False, True))
    if d.type == "categorical":
        return KnobInfo(name, "categorical", choices=tuple(d.choices))
    return KnobInfo(name, d.type, log=d.log, special=tuple(d.special))


def _knobs(attrs: dict[str, Any], trials: list[optuna.trial.FrozenTrial],
           where: str = "the stored space") -> list[KnobInfo]:
    """The study's knobs with the domains it searched (stored by the study in its attributes
    `attrs`); for a study stored before kvtune kept them, the trials' distributions."""
    domains = stored_domains(attrs.get("space"), where)
    if domains:
        return [_knob_from_domain(n, d) for n, d in domains.items()]
    knobs: dict[str, KnobInfo] = {}
    for t in trials:
        for k, d in t.distributions.items():
            if k not in knobs:
                knobs[k] = _knob_info(k, d)
    return list(knobs.values())


def _result_keys(store: Store, name: str) -> list[str]:
    q = sa.select(RESULTS.c.key).where(RESULTS.c.study == name).distinct()
    with store.engine.connect() as c:
        return [r[0] for r in c.execute(q)]


def _first_objective(t: optuna.trial.FrozenTrial, trial_id: int) -> optuna.trial.FrozenTrial:
    """A trial of a multi-objective study as if its first objective were its only one
    (Optuna's public constructor; `trial_id` from the storage's public lookup)."""
    if t.values is None or len(t.values) < 2:
        return t
    return optuna.trial.FrozenTrial(
        number=t.number, state=t.state, value=t.values[0], values=None,
        datetime_start=t.datetime_start, datetime_complete=t.datetime_complete,
        params=t.params, distributions=t.distributions, user_attrs=t.user_attrs,
        system_attrs=t.system_attrs, intermediate_values=t.intermediate_values,
        trial_id=trial_id)


def load(store: Store, name: str,
         spec_of: Callable[[Mapping[str, Any], str, str], dict[str, Any]] | None = None
         ) -> StudyData:
    """Study `name` of `store`. `spec_of(attrs, name, url)`: the stored study file,
    checked and normalised (`kvtune.study.stored.stored_spec`, which the screens pass: this
    package sits below `kvtune.study`); without it, the stored text as it is."""
    try:
        study = store.load_study(name)
    except KeyError:
        known = ", ".join(s for s in store.study_names() if ".sweep." not in s) or "none"
        raise UserError(f"no study named {name!r} in {store.url} (studies there: {known})") \
            from None
    trials = study.get_trials(deepcopy=False)
    if len(study.directions) > 1:
        # A Pareto study (issue 16): analysed by its first objective, the study's `metric`.
        study_id = store.storage.get_study_id_from_name(name)
        trials = [_first_objective(t, store.storage.get_trial_id_from_study_id_trial_number(
            study_id, t.number)) for t in trials]
    # The study's attributes, read (and checked, store.CheckedStorage) once: each read of
    # `study.user_attrs` is a query, a check of every attribute and a deep copy.
    attrs = study.user_attrs
    # The stored study file, checked and normalised as a study file is (a results
    # database is input) before anything here reads it.
    spec = spec_of(attrs, name, store.url) if spec_of is not None else \
        dict(attrs.get("spec") or {})
    sig = attrs.get("signature", {}) or {}
    objective = spec.get("objective")
    metric = (objective.get("metric") if isinstance(objective, dict) else None) \
        or sig.get("metric") or "value"
    data = StudyData(
        engine=store.engine, name=name, metric=metric,
        direction=Direction(study.directions[0].name.lower()), study=study,
        trials=trials, reps=store.repetitions(name),
        knobs=_knobs(attrs, trials, f"study {name!r} in {store.url}"), spec=spec,
        host=attrs.get("host", {}) or {},
        baseline=attrs.get("baseline", {}) or {},
        noise_floor=store.document(name, NoiseFloor),
        confirmation=store.document(name, Confirmation),
        drift=store.results(name, "drift"), storage=store.url,
        ablation=store.document(name, Ablation),
        spec_text=attrs.get("spec_text"),
        host_noise=None)
    from kvtune.measure.host_noise import with_study

    steal_threshold = float((spec.get("evaluation") or {}).get("steal_threshold") or 0.05)
    data.host_noise = with_study(store.last_result(name, "host_noise"), data.reps,
                                 steal_threshold)
    for key in _result_keys(store, name):
        if key.startswith("sweep:"):
            knob = key.split(":", 1)[1]
            data.sweeps[knob] = store.last_result(name, key) or {}
            data.sweep_reps[knob] = store.repetitions(f"{name}.sweep.{knob}")
    return data
