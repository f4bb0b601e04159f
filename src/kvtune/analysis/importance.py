"""Knob importance with its uncertainty, and only the ranking the trials support.

Default method, "main-effects": a least-squares fit of log(objective) on every knob's main
effect over the completed feasible baseline and search trials (a numeric knob as a
quadratic in its scaled value, so that a peak counts; a categorical knob one level per
choice but the first). A knob's importance is its type-II sum of squares (what the fit
loses without the knob, the others kept) as a share of all knobs'; its F test (Benjamini–
Hochberg over the knobs) says whether the trials show an effect at all, and a bootstrap
over trials gives each share a 95% interval. kvtune ranks only the knobs with an effect
(q < 0.05), and says "not enough trials to rank" when the fit has fewer than
MIN_RESIDUAL_DF degrees of freedom left, no knob shows an effect, or the top knob leads in
fewer than STABLE_TOP of the bootstrap resamples. Below the leader the same rule holds
between neighbours: a knob is ranked below the ones before it only when each of them beats
it in at least STABLE_TOP of the resamples; otherwise they are shown tied ("not
separable"), in `tiers`. bench/explain/ measures
how often this is right on the synthetic surface (docs/report.md).

"ped-anova" (Optuna's PED-ANOVA, the former default) and "fanova" (scikit-learn) remain
available for comparison, with the same bootstrap intervals but no significance test.

Only completed, feasible baseline and search trials count; sweeps and confirmation runs
are not samples of the search space. Parameters that are not knobs (a knob's special-value
`#mode` switch) are never shown: a trial at a special value is left out of the fit.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna

from kvtune import present
from kvtune.analysis.data import KnobInfo, StudyData
from kvtune.stats import benjamini_hochberg, f_test_p, percentile_interval

MIN_RESIDUAL_DF = 3
ALPHA = 0.05
RESAMPLES = 200
# The top knob is named only when it leads in this share of bootstrap resamples.
STABLE_TOP = 0.8
NOT_ENOUGH = "not enough trials to rank"


@dataclass
class Importance:
    method: str
    values: dict[str, float] = field(default_factory=dict)  # knob -> share, sums to 1
    n_trials: int = 0
    # The study's finished feasible search trials; those left out of the importance (a knob
    # at a special value, or with no value in its range) are `n_searched - n_trials`.
    n_searched: int = 0
    note: str = ""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # 95% bootstrap
    q_values: dict[str, float] = field(default_factory=dict)  # BH-adjusted F-test p
    ranking: list[str] = field(default_factory=list)  # knobs with an effect, largest first
    ranked: bool = False  # whether the trials support any ranking
    first: dict[str, float] = field(default_factory=dict)  # share of resamples it led
    # The ranking in tiers: knobs in one tier are not separable by the bootstrap.
    tiers: list[list[str]] = field(default_factory=list)
    # (a, b) -> share of resamples in which a's share was above b's
    above: dict[tuple[str, str], float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "values": self.values, "n_trials": self.n_trials,
                "n_searched": self.n_searched, "trials_text": self.trials_text(),
                "note": self.note,
                "intervals": {k: list(v) for k, v in self.intervals.items()},
                "q_values": self.q_values, "ranking": self.ranking, "ranked": self.ranked,
                "first": self.first, "tiers": self.tiers, "ties": self.tie_notes()}

    def trials_text(self) -> str:
        """How many trials the importance rests on, and how many it left out and why
        ("4 of 57 trials; 53 set a knob to a special value or outside its range")."""
        left = self.n_searched - self.n_trials
        if left <= 0:
            return f"{self.n_trials} trial{'' if self.n_trials == 1 else 's'}"
        return (f"{self.n_trials} of {self.n_searched} trials; {left} left out: a knob at a "
                "special value or outside its range is not a point of its range")

    def tie_notes(self) -> list[str]:
        """Why knobs share a tier, in the leader note's words."""
        out = []
        for tier in self.tiers:
            for a, b in itertools.pairwise(tier):
                out.append(f"{a} and {b} are not separable: {a} ranks above {b} in only "
                           f"{present.share(self.above.get((a, b), 0.0))} of bootstrap resamples "
                           f"of the "
                           f"{self.n_trials} trials")
        return out

    def verdict(self) -> str:
        """One line: what the trials support."""
        if not self.values:
            return self.note or NOT_ENOUGH
        if not self.ranked:
            return f"{NOT_ENOUGH}" + (f" ({self.note})" if self.note else "")
        rest = [k for k in self.values if k not in self.ranking]
        tiers = self.tiers or [[k] for k in self.ranking]
        text = "ranked by effect: " + " > ".join(
            t[0] if len(t) == 1 else "{" + ", ".join(t) + "} (not separable)" for t in tiers)
        if rest:
            text += "; no measurable effect: " + ", ".join(rest)
        return text


def _samples(t: optuna.trial.FrozenTrial, names: list[str]) -> bool:
    """Whether trial `t` has a value in range for every knob of `names`: a knob at a special
    value (its `#mode` parameter) is not a point of its range, and studies stored before
    kvtune kept one knob space can hold a baseline value outside its distribution."""
    for n in names:
        d = t.distributions.get(n)
        if d is None or n not in t.params:
            return False
        v = t.params[n]
        if isinstance(d, optuna.distributions.CategoricalDistribution):
            if v not in d.choices:
                return False
        elif isinstance(d, optuna.distributions.IntDistribution | optuna.distributions.
                        FloatDistribution) and not d.low <= v <= d.high:
            return False
    return True


# -- the main-effects fit ------------------------------------------------------------------


def _columns(k: KnobInfo, values: list[Any]) -> np.ndarray:
    """The design columns of one knob's main effect."""
    if k.numeric:
        x = np.array([float(v) for v in values])
        if k.log:
            x = np.log(np.maximum(x, 1e-12))
        lo, hi = float(x.min()), float(x.max())
        u = (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
        u = u - 0.5
        return np.column_stack([u, u * u - (u * u).mean()])
    levels = [c for c in k.choices if c in set(values)] or sorted(set(values), key=str)
    levels = list(dict.fromkeys(levels))
    cols = [np.array([1.0 if v == c else 0.0 for v in values]) for c in levels[1:]]
    return np.column_stack(cols) if cols else np.zeros((len(values), 0))


def _rss(x: np.ndarray, y: np.ndarray) -> float:
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ coef
    return float(r @ r)


def _fit(cols: dict[str, np.ndarray], y: np.ndarray
         ) -> tuple[dict[str, float], dict[str, float], int]:
    """Type-II sums of squares and F-test p-values per knob, and the residual df."""
    n = len(y)
    ones = np.ones((n, 1))
    full = np.column_stack([ones, *cols.values()])
    rank = int(np.linalg.matrix_rank(full))
    df_res = n - rank
    rss = _rss(full, y)
    ss: dict[str, float] = {}
    p: dict[str, float] = {}
    for k in cols:
        reduced = np.column_stack([ones, *(c for j, c in cols.items() if j != k)])
        df_k = rank - int(np.linalg.matrix_rank(reduced))
        s = max(0.0, _rss(reduced, y) - rss)
        ss[k] = s
        p[k] = f_test_p(s, df_k, rss, df_res)
    return ss, p, df_res


def _shares(ss: dict[str, float]) -> dict[str, float]:
    total = sum(ss.values())
    return {k: (v / total if total > 0 else 0.0) for k, v in ss.items()}


def _main_effects(knobs: list[KnobInfo], trials: list[optuna.trial.FrozenTrial],
                  maximize: bool) -> tuple[dict[str, float], dict[str, float], int]:
    y = np.array([float(t.value) for t in trials])  # type: ignore[arg-type]
    y = np.log(y) if (y > 0).all() else y
    cols = {k.name: _columns(k, [t.params[k.name] for t in trials]) for k in knobs}
    ss, p, df_res = _fit(cols, y)
    return _shares(ss), p, df_res


# -- Optuna's evaluators -------------------------------------------------------------------


def _slim(t: optuna.trial.FrozenTrial, names: list[str]) -> optuna.trial.FrozenTrial:
    """Trial `t` with only what Optuna's evaluators read: the knobs' params and
    distributions and the value (no attributes, no intermediate values)."""
    return optuna.trial.create_trial(
        params={n: t.params[n] for n in names},
        distributions={n: t.distributions[n] for n in names}, value=t.value)


def _optuna(method: str, names: list[str], trials: list[optuna.trial.FrozenTrial],
            maximize: bool, seed: int) -> dict[str, float]:
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(direction="maximize" if maximize else "minimize")
    finally:
        optuna.logging.set_verbosity(verbosity)
    study.add_trials(trials)
    evaluator: optuna.importance.BaseImportanceEvaluator
    if method == "fanova":
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    else:
        # PED-ANOVA compares the top quantile with all trials; with few trials the top 10%
        # holds one or no trial, so the quantile grows to keep at least two.
        q = min(0.5, max(0.1, 2.0 / len(trials)))
        evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vals = optuna.importance.get_param_importances(study, evaluator=evaluator,
                                                       params=names, normalize=False)
    return _shares({k: float(v) for k, v in vals.items()})


def _intervals(fn: Callable[[list[optuna.trial.FrozenTrial]], dict[str, float]],
               trials: list[optuna.trial.FrozenTrial], names: list[str], seed: int,
               resamples: int) -> tuple[dict[str, tuple[float, float]], dict[str, float],
                                        dict[tuple[str, str], float]]:
    """95% percentile intervals of each share over bootstrap resamples of the trials, how
    often each knob came first, and how often each knob's share was above each other's."""
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {k: [] for k in names}
    first: dict[str, int] = dict.fromkeys(names, 0)
    above: dict[tuple[str, str], int] = {(a, b): 0 for a in names for b in names if a != b}
    for _ in range(resamples):
        pick = [trials[i] for i in rng.integers(0, len(trials), len(trials))]
        if len({t.value for t in pick}) < 2:
            continue
        try:
            v = fn(pick)
        except (ValueError, RuntimeError, ZeroDivisionError, np.linalg.LinAlgError):
            continue
        for k in names:
            draws[k].append(v.get(k, 0.0))
        first[max(names, key=lambda k: v.get(k, 0.0))] += 1
        for a, b in above:
            if v.get(a, 0.0) > v.get(b, 0.0):
                above[(a, b)] += 1
    n = max(1, len(draws[names[0]]))
    out = {}
    for k, d in draws.items():
        if len(d) >= 10:
            out[k] = percentile_interval(d, 0.95)
    return out, {k: c / n for k, c in first.items()}, {k: c / n for k, c in above.items()}


def tiers(ranking: list[str], above: dict[tuple[str, str], float],
          stable: float = STABLE_TOP) -> list[list[str]]:
    """`ranking` (largest first) cut into tiers: a knob starts a new tier only when every
    knob of the current tier ranks above it in at least `stable` of the resamples."""
    out: list[list[str]] = []
    for k in ranking:
        if out and any(above.get((a, k), 0.0) < stable for a in out[-1]):
            out[-1].append(k)
        else:
            out.append([k])
    return out


def importance(data: StudyData, method: str = "main-effects", seed: int = 0,
               resamples: int = RESAMPLES) -> Importance:
    trials = data.search_trials()
    out = Importance(method, n_trials=len(trials), n_searched=len(trials))
    names = [k.name for k in data.knobs]
    if not names:
        out.note = "the study has no knobs"
        return out
    if len(names) == 1:
        out.values = {names[0]: 1.0}
        out.ranking = names[:]
        out.ranked = True
        out.note = "one knob: it carries all the importance by definition"
        return out
    if len(trials) < 4:
        out.note = f"needs at least 4 completed feasible trials (have {len(trials)})"
        return out
    if len({t.value for t in trials}) < 2:
        out.note = "every trial measured the same value"
        return out
    trials = [t for t in trials if _samples(t, names)]
    out.n_trials = len(trials)
    if method == "fanova":
        try:
            import sklearn  # noqa: F401
        except ImportError:
            out.note = "fANOVA needs scikit-learn (not installed); main effects used instead"
            method = out.method = "main-effects"
    fn: Callable[[list[optuna.trial.FrozenTrial]], dict[str, float]]
    if method == "main-effects":
        def fn(ts: list[optuna.trial.FrozenTrial]) -> dict[str, float]:
            return _main_effects(data.knobs, ts, data.maximize)[0]
    else:
        # Optuna's evaluators read a trial's params, distributions and value only: each
        # resample's study copies these few, not the stored trial's attributes (its
        # measurements: most of the time of 200 resamples went to copying them).
        trials = [_slim(t, names) for t in trials]

        def fn(ts: list[optuna.trial.FrozenTrial]) -> dict[str, float]:
            return _optuna(method, names, ts, data.maximize, seed)
    try:
        if method == "main-effects":
            vals, p, df_res = _main_effects(data.knobs, trials, data.maximize)
        else:
            vals, p, df_res = fn(trials), {}, len(trials)
    except (ValueError, RuntimeError, ZeroDivisionError, np.linalg.LinAlgError) as e:
        out.note = f"importance could not be computed: {e}"
        return out
    if sum(vals.values()) <= 0:
        out.note = "no knob separates the best trials from the rest"
        out.values = {k: 0.0 for k in names}
        return out
    out.values = {k: float(v) for k, v in sorted(vals.items(), key=lambda kv: -kv[1])}
    out.intervals, out.first, out.above = _intervals(fn, trials, names, seed, resamples)
    if method != "main-effects":
        out.note = f"{method} has no significance test: shown unranked, with intervals"
        return out
    if df_res < MIN_RESIDUAL_DF:
        out.note = (f"{len(trials)} trials leave {max(df_res, 0)} degrees of freedom after "
                    f"fitting every knob's effect; at least {MIN_RESIDUAL_DF} are needed")
        return out
    qs = benjamini_hochberg([p[k] for k in names])
    out.q_values = dict(zip(names, qs, strict=True))
    out.ranking = [k for k in out.values if out.q_values[k] < ALPHA]
    out.ranked = bool(out.ranking)
    if not out.ranked:
        out.note = f"no knob's effect stands out of the noise in {len(trials)} trials"
    elif out.first.get(out.ranking[0], 0.0) < STABLE_TOP:
        out.ranked = False
        out.note = (f"{out.ranking[0]} leads in only "
                    f"{present.share(out.first.get(out.ranking[0], 0))} "
                    f"of bootstrap resamples of the {len(trials)} trials")
    else:
        out.tiers = tiers(out.ranking, out.above)
    return out
