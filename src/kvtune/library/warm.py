"""Warm start: a new study draws from the past studies of alike workloads
(`kvtune.library.nearest`) and says which and how near:

- **first trials**: each neighbour's confirmed recommendation, then the changes its
  ablation found to carry the gain alone, queued as the search's first trials (Optuna's
  enqueued trials; at most `MAX_QUEUED`, and at most a quarter of the trial budget). A
  value reaches a trial only when the study's own knob space holds it;
- **the noise floor's prior**: the neighbours' baseline CoV (pooled over their
  repetitions). When the prior rests on at least as many repetitions as the study's noise
  floor would take, the baseline is measured `max(repetitions, 3)` times instead, and
  as many times as without a prior when it comes out noisier than twice the prior (the
  host is not the library's). The evaluator's noise then pools the prior with the
  baseline's own repetitions;
- **the capacity bracket**: a capacity study (without its own `objective.rates` or
  `load.rate`) opens its searches at the nearest neighbour's knee at the same SLO,
  searching within a factor `BRACKET` of it, instead of a closed-loop burst.

A workload unlike anything compatible in the library (`ALIKE`), an empty, unusable or
switched-off library, or `kvtune tune --cold` starts cold and says so. What the study drew
from is its "warm_start" result (and user attribute); its own library entry names the
entries it drew from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from kvtune import present
from kvtune.documents import Confirmation
from kvtune.errors import UserError
from kvtune.library.entry import Entry
from kvtune.library.nearest import Found, context_of, neighbours
from kvtune.library.store import Library, LibraryUnavailable, open_library
from kvtune.workload.features import ALIKE, NoFeatures, describe, nearest_differences, of_spec

if TYPE_CHECKING:
    import optuna

    from kvtune.library.run_view import Run
    from kvtune.measure.evaluator import Evaluation
    from kvtune.space import Space
    from kvtune.spec import EvaluationSpec
    from kvtune.study.noise import NoiseFloor

MAX_QUEUED = 4
BRACKET = 4.0  # a warm capacity search looks within knee / 4 … knee × 4
NOISE_MIN_RUNS = 3  # a baseline with a prior is measured at least this many times
NOISE_TOO_HIGH = 2.0  # a baseline noisier than this × the prior: the prior is not used


def pooled_cov(parts: list[tuple[float, int]]) -> tuple[float, int]:
    """The CoV pooled over (CoV, repetitions) parts (their variances weighted by their
    degrees of freedom) and the repetitions it rests on."""
    dof = sum(n - 1 for c, n in parts if n >= 2 and math.isfinite(c))
    if dof <= 0:
        return math.nan, 0
    var = sum((n - 1) * c * c for c, n in parts if n >= 2 and math.isfinite(c)) / dof
    return math.sqrt(var), sum(n for c, n in parts if n >= 2 and math.isfinite(c))


class WarmStart:
    """The warm start of one `kvtune tune` run (see the module docstring). `cold`:
    `--cold`; `library`: `--library` (None: `kvtune.library.store.resolve`)."""

    def __init__(self, run: Run, cold: bool = False, library: str | None = None) -> None:
        self.run = run
        self.cold = cold
        self.flag = library
        self.record: dict[str, Any] = {"mode": "cold"}
        self.found: Found | None = None
        self.prior: tuple[float, int] | None = None  # (CoV, repetitions)
        self.knee: float | None = None
        self.fresh = False
        self._opened = False

    def say(self, text: str) -> None:
        self.run.console.print(text, highlight=False)

    def library(self) -> Library | None:
        return open_library(self.flag, self.run.spec.storage)

    # -- before the baseline ---------------------------------------------------------------

    def prepare(self, study: optuna.Study) -> None:
        """Find the neighbours and say what is drawn from them; on a resumed study, take
        back what its first run decided. Never raises for the library's sake."""
        run = self.run
        spec = run.spec
        self.fresh = not any(t.state.is_finished() for t in study.get_trials(deepcopy=False))
        if not self.fresh:
            old = run.store.last_result(spec.study, "warm_start")
            if isinstance(old, dict):
                self.record = old
                self.knee = _stored_knee(old.get("knee"), f"study {spec.study!r} in "
                                         f"{run.store.url}: the stored warm start")
            return
        try:
            self._prepare()
        except (LibraryUnavailable, NoFeatures) as e:
            self._cold(str(e))
        except Exception as e:  # the library never stops a study
            self._cold(f"the library could not be read ({type(e).__name__}: {e})")
        self.record.setdefault("library", self.flag)
        run.store.put_result(spec.study, "warm_start", self.record)
        study.set_user_attr("warm_start", {k: self.record.get(k) for k in
                                           ("mode", "why", "from")})

    def _cold(self, why: str) -> None:
        self.record = {"mode": "cold", "why": why, "from": []}
        self.say(f"[bold]Warm start[/]: none: {escape(why)}; the study starts cold")

    def _prepare(self) -> None:
        run, spec = self.run, self.run.spec
        if self.cold:
            self._cold("--cold")
            return
        lib = self.library()
        if lib is None:
            self._cold("no library (KVTUNE_LIBRARY=off)")
            return
        features, source = of_spec(spec)
        read = lib.read(target=spec.target.kind)
        ctx = context_of(spec, features, run.fingerprint)
        found = self.found = neighbours(read.entries, ctx, exclude=spec.study)
        self.record = {"mode": "cold", "library": lib.url, "features": features,
                       "workload_source": source, "from": [],
                       "not_used": found.reasons(), "invalid": len(read.invalid)}
        if read.invalid:
            rid, why = read.invalid[0]
            self.say(f"  [yellow]library:[/] {len(read.invalid)} entr"
                     f"{'y' if len(read.invalid) == 1 else 'ies'} did not validate and "
                     f"{'is' if len(read.invalid) == 1 else 'are'} ignored (first, {rid[:8]}: "
                     f"{escape(why)})")
        if not found.used:
            if found.nearest_beyond is not None:
                e, d = found.nearest_beyond
                diff = "; ".join(nearest_differences(features, e.workload))
                why = (f"the nearest compatible past study, {e.study!r} ({e.short_id}), is at "
                       f"distance {d:.2f} ({diff}), beyond {ALIKE:g}: this workload is "
                       "unlike anything in the library")
            elif read.entries:
                why = (f"none of the library's {len(read.entries)} {spec.target.kind} "
                       "entries is compatible: " + "; ".join(
                           f"{n} {w}" for w, n in found.reasons().items())[:400])
            else:
                why = f"the library {lib.url} holds no {spec.target.kind} study yet"
            self.record["why"] = why
            self.say(f"[bold]Warm start[/]: none: {escape(why)}; the study starts cold")
            return
        self.record["mode"] = "warm"
        self.record["from"] = [{"id": e.id, "study": e.study, "distance": round(d, 4)}
                               for e, d in found.used]
        n = len(found.used)
        self.say(f"[bold]Warm start[/] from {n} past stud{'y' if n == 1 else 'ies'} of "
                 f"alike workloads (distance ≤ {ALIKE:g}; this one: {escape(describe(features))}):")
        for e, d in found.used:
            what = (escape(e.recommendation.text or "recommended") if e.recommendation
                    else "the defaults held")
            self.say(f"  {e.study!r} ({e.short_id}), distance {d:.2f}: {what}")
        if found.not_used:
            self.say("  not used: " + "; ".join(f"{k} ({v})" for k, v in
                                               found.reasons().items())[:400])
        self._noise_prior(found)
        self._knee(found)

    def _noise_prior(self, found: Found) -> None:
        parts = [(e.noise.cov, e.noise.n) for e, _ in found.used if e.noise is not None]
        if not parts:
            return
        c, n = pooled_cov(parts)
        if not math.isfinite(c):
            return
        self.prior = (c, n)
        self.record["noise_prior"] = {"cov": c, "n": n}

    def _knee(self, found: Found) -> None:
        spec = self.run.spec
        cap = spec.capacity
        if cap is None:
            return
        same = [(e, d) for e, d in found.used if e.capacity is not None
                and e.capacity.slo == str(cap.slo)]
        if not same:
            self.say(f"  capacity: no neighbour measured a knee at {cap.slo}: the searches "
                     "start from a closed-loop burst")
            return
        e, _ = same[0]
        assert e.capacity is not None
        self.knee = e.capacity.knee
        self.record["knee"] = self.knee
        self.record["knee_from"] = e.id

    # -- the baseline ----------------------------------------------------------------------

    def open_bracket(self) -> None:
        """A capacity study's searches start at the neighbour's knee (see the module
        docstring); the study's own `objective.rates` or `load.rate` win."""
        run, spec = self.run, self.run.spec
        if self.knee is None or spec.capacity is None or self._opened:
            return
        self._opened = True
        obj = next(o for o in spec.objective.all if o.metric == "capacity")
        if obj.rates is not None or (spec.load is not None and spec.load.rate is not None):
            if self.fresh:
                self.say("  capacity: the study gives its own rates (objective.rates or "
                         "load.rate): the neighbour's knee is not used")
            return
        from kvtune.quantities import MAX_RATE

        lo, hi = self.knee / BRACKET, min(self.knee * BRACKET, MAX_RATE)
        if not 0 < lo < hi <= MAX_RATE:  # a knee from the library: input, like a study file
            self.say(f"  capacity: the neighbour's knee {present.figure(self.knee)} req/s "
                     "gives no range of rates: not used")
            return
        obj.rates = (lo, hi)
        driver = run.session.load_driver
        if driver is not None and hasattr(driver, "capacity"):  # built with the old rates
            setattr(driver, "capacity", spec.capacity)  # noqa: B010
        self.record["bracket"] = [lo, hi]
        if self.fresh:
            self.say(f"  capacity: the searches start at the neighbour's knee, "
                     f"{present.figure(self.knee)} req/s, within {present.figure(lo)} … "
                     f"{present.figure(hi)} req/s (no "
                     "closed-loop burst)")

    def baseline_runs(self, n: int) -> int:
        """The baseline's repetitions: fewer with a prior resting on at least `n`."""
        if not self.fresh or self.prior is None or self.prior[1] < n:
            return n
        m = max(self.run.spec.repetitions, NOISE_MIN_RUNS)
        if m < n:
            self.say(f"  noise floor: the neighbours' CoV {present.share(self.prior[0], 1)} over "
                     f"{self.prior[1]} repetitions is the prior: the baseline is measured "
                     f"{m} times instead of {n} (all {n} if it is noisier than "
                     f"{NOISE_TOO_HIGH:g}x the prior)")
            self.record["baseline_runs"] = [m, n]
        return min(m, n)

    def complete_baseline(self, e: Evaluation, full: int,
                          more: Callable[[], bool]) -> None:
        """When the baseline measured with a prior is noisier than NOISE_TOO_HIGH times
        it, measure it up to `full` repetitions (`more` adds one) and drop the prior."""
        from kvtune.stats import cov, robust_cov

        if self.prior is None or len(e.reps) >= full or e.failed:
            return
        vals = [float(r.metrics[self.run.metric]) for r in e.reps
                if r.status != "failed" and r.metrics.get(self.run.metric) is not None]
        c = robust_cov(vals)
        if not math.isfinite(c):
            c = cov(vals)
        if math.isfinite(c) and c <= NOISE_TOO_HIGH * self.prior[0]:
            return
        self.say(f"  noise floor: the baseline's CoV {present.share(c, 1)} is above "
                 f"{NOISE_TOO_HIGH:g}x "
                 f"the prior's {present.share(self.prior[0], 1)}: this host is noisier than the "
                 f"library's; "
                 f"measured {full} times, the prior is not used")
        self.record["prior_rejected"] = {"cov": c}
        self.prior = None
        while len(e.reps) < full and more():
            pass

    def pool(self, noise: NoiseFloor, metric: str, ev: EvaluationSpec) -> NoiseFloor:
        """The noise floor with the objective's CoV pooled with the prior (when kept): what
        the evaluator judges by and what the confirmation's power is said from. A baseline
        of few repetitions alone would claim too much (the robust CoV of three values can
        be near 0). The baseline's own CoV stays in the warm-start record and in the
        library entry (a prior is never pooled into the next one's)."""
        import dataclasses

        from kvtune.stats import detectable_improvement

        measured = noise.objective_cov(metric)
        if self.prior is None or not math.isfinite(measured):
            return noise
        c, total = pooled_cov([self.prior, (measured, noise.n)])
        self.record["noise_measured"] = {"cov": measured, "n": noise.n}
        self.record["noise_pooled"] = {"cov": c, "n": total}
        self.say(f"  noise floor: the baseline's CoV {present.share(measured, 1)} over {noise.n} "
                 f"repetitions pooled with the neighbours' prior: {present.share(c, 1)} over "
                 f"{total}")
        return dataclasses.replace(
            noise, cov={**noise.cov, metric: c}, robust_cov={**noise.robust_cov, metric: c},
            detectable_improvement=detectable_improvement(
                c, ev.confirm_rounds, ev.alpha, ev.confirm_top, two_sided=True, paired=True))

    # -- after the baseline ----------------------------------------------------------------

    def enqueue(self, study: optuna.Study, space: Space) -> list[dict[str, Any]]:
        """Queue the neighbours' recommendations and carriers as the first trials."""
        from kvtune.present import fmt
        from kvtune.store import config_key

        if not self.fresh or self.found is None or not self.found.used:
            return []
        if not self.run.exclusive:
            # A fleet's workers ask trials concurrently: a queued trial could be taken as
            # another worker's baseline. The neighbours are said; their trials not queued.
            self.say("  first trials: not queued in a fleet (its workers share one queue)")
            return []
        budget = self.run.spec.budget.trials
        cap = MAX_QUEUED if budget is None else min(MAX_QUEUED, max(1, budget // 4))
        seen = {config_key(space.baseline_config())}
        queued: list[dict[str, Any]] = []
        dropped: list[str] = []
        for e, _ in self.found.used:
            for what, changes in self._candidates(e):
                config, bad = fit(space, changes)
                dropped += bad
                key = config_key(config)
                if key in seen or len(queued) >= cap:
                    continue
                seen.add(key)
                study.enqueue_trial(space.fixed_params(config), skip_if_exists=True)
                queued.append({"from": e.id, "what": what,
                               "changes": {k: v for k, v in config.items()
                                           if space.baseline.get(k) != v}})
        self.record["queued"] = queued
        self.record["dropped_values"] = sorted(set(dropped))[:50]
        self.run.store.put_result(self.run.spec.study, "warm_start", self.record)
        if queued:
            self.say(f"  first trials: {len(queued)} configuration(s) from the neighbours ("
                     + "; ".join(f"{q['what']} of {q['from'][:8]}: " + (", ".join(
                         f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in q["changes"].items())
                         or "no change") for q in queued) + ")")
        elif all(e.holds for e, _ in self.found.used):
            self.say("  first trials: none (the defaults held in the neighbours)")
        if dropped:
            self.say(f"  [yellow]not queued[/] (outside this study's space): "
                     f"{escape(', '.join(sorted(set(dropped))[:8]))}")
        return queued

    @staticmethod
    def _candidates(e: Entry) -> list[tuple[str, dict[str, Any]]]:
        if e.recommendation is None:
            return []
        out = [("recommendation", dict(e.recommendation.changes))]
        if e.carriers and e.minimal and e.minimal != e.recommendation.changes:
            out.append(("carriers", dict(e.minimal)))
        return out

    # -- the end ---------------------------------------------------------------------------

    def add_entry(self, result: Confirmation) -> str | None:
        """Add the finished study to the library; its short id, or None (said why)."""
        from kvtune.library.record import entry_of

        try:
            lib = self.library()
            if lib is None:
                return None
            entry = entry_of(self.run, result, self.record.get("from") or [])
            lib.add([entry])
        except (LibraryUnavailable, NoFeatures, ValueError) as e:
            self.say(f"[yellow]library:[/] this study was not added: {escape(str(e))}")
            return None
        except Exception as e:  # the library never fails a finished study
            self.say(f"[yellow]library:[/] this study was not added ({type(e).__name__}: "
                     f"{escape(str(e))})")
            return None
        self.say(f"[bold]Library[/]: added as {entry.short_id} in {lib.url} (`kvtune library "
                 f"show {entry.short_id}`)")
        return entry.id


def fit(space: Space, changes: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The study's baseline with those of `changes` its space holds; the others named."""
    config = space.baseline_config()
    bad = []
    for k, v in changes.items():
        try:
            knob = space.knob(k)
        except KeyError:
            bad.append(f"{k} (not tuned here)")
            continue
        try:
            config[k] = knob.domain.coerce(v)
        except (ValueError, TypeError):
            bad.append(f"{k}={v!r} (outside {knob.domain.describe()})")
    return config, bad


def _stored_knee(value: Any, where: str) -> float | None:
    """A knee a resumed study stored with its warm start (input: a results database anyone
    with the file could change): None, or a finite request rate within kvload's range;
    UserError naming `where` otherwise (nothing is measured: it sets the searches' rates)."""
    from kvtune.quantities import MAX_RATE

    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0 < value <= MAX_RATE):
        raise UserError(f"{where}: its knee {str(value)[:64]!r} is not a request rate "
                        f"(0 < knee <= {MAX_RATE:g} req/s; the results database was "
                        "changed?); nothing was measured")
    return float(value)
