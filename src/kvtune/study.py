"""The study loop: preflight, baseline and noise floor, search, drift checks, confirmation.

    kvtune tune FILE     -> tune()
    kvtune sweep FILE    -> sweep()
    kvtune run FILE      -> run_config()
"""

from __future__ import annotations

import contextlib
import math
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import optuna
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kvtune.errors import StudyInterrupted, UserError
from kvtune.evaluator import Evaluation, Evaluator
from kvtune.host.journal import Journal
from kvtune.knobs.knob import Knob
from kvtune.knobs.rules import check_rules
from kvtune.optimizer import fixed_params, grid_configs, make_sampler, suggest
from kvtune.runner import Session
from kvtune.spec import StudySpec, load_spec, resolve_knobs
from kvtune.stats import (
    compare,
    cov,
    detectable_improvement,
    holm,
    robust_cov,
    rounds_needed,
)
from kvtune.store import Store, config_key

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass
class Loaded:
    spec: StudySpec
    knobs: list[Knob]
    path: Path


def load(path: str | Path, allow_inline_host_knobs: bool = False) -> Loaded:
    """Parse and validate a study file; inline host knobs need the command-line flag."""
    from kvtune.safety.hostpaths import check_inline_host_knobs

    spec, lines = load_spec(path)
    knobs = resolve_knobs(spec, lines, str(path))
    check_inline_host_knobs(spec, lines, allow_inline_host_knobs, str(path))
    return Loaded(spec, knobs, Path(path))


def open_store(spec: StudySpec, base: Path | None = None) -> Store:
    if spec.storage is None:  # kvtune's own default, BASE/results/STUDY.db
        (base or Path.cwd()).joinpath("results").mkdir(parents=True, exist_ok=True)
    return Store(spec.storage_url(base or Path.cwd()))


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM unwinds the study like Ctrl-C, so the journal restores the host."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise StudyInterrupted(f"stopped by signal {signal.Signals(signum).name}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except KeyboardInterrupt:
        raise StudyInterrupted("interrupted (Ctrl-C)") from None
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _host(session: Session, spec: StudySpec) -> Iterator[None]:
    """Open the journal when the study touches the host; restore everything on exit."""
    needs = spec.target.kind != "synthetic"
    if not needs:
        yield
        return
    with _signals(), Journal(study=spec.study) as journal:
        session.journal = journal
        session.setup_host()
        yield


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True)


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


class StudyRun:
    """One `kvtune tune` invocation (a fresh study or a resumed one)."""

    def __init__(self, loaded: Loaded, console: Console | None = None,
                 base_dir: Path | None = None) -> None:
        self.spec = loaded.spec
        self.knobs = loaded.knobs
        self.console = console or Console(stderr=True)
        self.session = Session(self.spec, self.knobs, None)
        self.session.preflight()  # before the store: a refused study leaves no file behind
        self.store = open_store(self.spec, base_dir)
        self.direction = self.spec.objective.resolved_direction
        self.metric = self.spec.objective.metric
        self.evaluator = Evaluator(self.session, self.store, self.spec.study, self.metric,
                                   self.direction, self.spec.parsed_constraints,
                                   self.spec.evaluation, self.spec.repetitions, self.spec.seed)
        self.study: optuna.Study | None = None
        self.incumbent: Evaluation | None = None
        self.baseline_eval: Evaluation | None = None

    # -- set-up ----------------------------------------------------------------------------

    def _open_study(self) -> optuna.Study:
        sampler = make_sampler(self.spec.sampler, self.spec.seed, self.spec.budget.trials,
                               len(self.spec.constraints) + 1)
        study = optuna.create_study(study_name=self.spec.study, storage=self.store.storage,
                                    direction=self.direction, sampler=sampler,
                                    load_if_exists=True)
        signature = {"knobs": [k.name + " " + k.domain.describe() for k in self.knobs],
                     "metric": self.metric, "direction": self.direction,
                     "target": self.spec.target.kind}
        old = study.user_attrs.get("signature")
        if old is None:
            study.set_user_attr("signature", signature)
            study.set_user_attr("spec", self.spec.model_dump(mode="json"))
            study.set_user_attr("host", self.session.facts.as_dict())
        elif old != signature:
            raise UserError(
                f"study {self.spec.study!r} already exists in {self.store.url} with other knobs "
                "or another objective; give the study a new name to start afresh")
        study.set_user_attr("baseline", self.session.baseline)
        return study

    def _resume(self, study: optuna.Study) -> None:
        """Trials left RUNNING by an interrupted run are failed and queued again."""
        for t in study.get_trials(deepcopy=False):
            if t.state == optuna.trial.TrialState.RUNNING:
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                self.store.put_result(self.spec.study, "requeued",
                                      {"trial": t.number, "params": t.params})
                study.enqueue_trial(t.params, skip_if_exists=False)
        best: Evaluation | None = None
        for t in study.get_trials(deepcopy=False,
                                  states=(optuna.trial.TrialState.COMPLETE,)):
            e = _evaluation_from_attrs(t, self.metric)
            if t.user_attrs.get("kind") == "baseline":
                self.baseline_eval = e
            if e.feasible and (best is None or self.evaluator.better(e.value, best.value)):
                best = e
        self.incumbent = best
        if self.baseline_eval is not None:
            nf = self.store.last_result(self.spec.study, "noise_floor")
            if nf:
                self.evaluator.noise_cov = nf.get("cov", {}).get(self.metric)

    # -- the loop --------------------------------------------------------------------------

    def run(self, confirm: bool = True) -> dict[str, Any]:
        self.session.preflight()
        self.study = study = self._open_study()
        self._resume(study)
        started = time.monotonic()
        with _host(self.session, self.spec):
            if self.baseline_eval is None:
                self._baseline(study)
            self._search(study, started)
            result: dict[str, Any] = {}
            if confirm and self.spec.evaluation.confirm_rounds > 0:
                result = self.confirm(study)
        return result

    def _done(self, study: optuna.Study, started: float) -> bool:
        b = self.spec.budget
        finished = [t for t in study.get_trials(deepcopy=False)
                    if t.state.is_finished() and t.user_attrs.get("kind") != "baseline"]
        if b.trials is not None and len(finished) >= b.trials:
            return True
        return b.time is not None and time.monotonic() - started >= b.time

    def _baseline(self, study: optuna.Study) -> None:
        ev = self.spec.evaluation
        n = max(ev.noise_floor_runs, self.spec.repetitions)
        study.enqueue_trial(fixed_params(self.knobs, self.session.baseline))
        trial = study.ask()
        config = suggest(trial, self.knobs)
        self.console.print(f"[bold]Baseline[/] (trial {trial.number}, the defaults): "
                           f"{n} repetitions to measure the noise floor")
        with _progress(self.console) as prog:
            task = prog.add_task("baseline", total=n)
            e = self.evaluator.evaluate(config, "baseline", trial.number, n=n,
                                        on_rep=lambda _e: prog.advance(task))
        self._tell(study, trial, e, "baseline")
        if e.failed:
            raise UserError(f"the baseline (defaults) failed: {e.failed}\n{e.failed_stderr}")
        noise = {m: cov([float(r.metrics[m]) for r in e.reps
                         if r.status != "failed" and r.metrics.get(m) is not None])
                 for m in ("ops_per_sec", "p50_us", "p99_us", "p999_us", self.metric)}
        robust = {m: robust_cov([float(r.metrics[m]) for r in e.reps
                                 if r.status != "failed" and r.metrics.get(m) is not None])
                  for m in noise}
        self.evaluator.noise_cov = noise.get(self.metric)
        ev = self.spec.evaluation
        # Mann–Whitney ranks ignore isolated outliers, so its power follows the robust CoV.
        c = robust.get(self.metric, math.nan)
        if math.isnan(c):
            c = noise.get(self.metric, math.nan)
        detectable = detectable_improvement(c, ev.confirm_rounds, ev.alpha, ev.confirm_top)
        self.store.put_result(self.spec.study, "noise_floor",
                              {"n": len(e.reps), "cov": noise, "robust_cov": robust,
                               "flags": e.flags, "detectable_improvement": detectable})
        self._report_noise(noise, robust, detectable)
        bad = [r for r in e.reps if r.status == "flagged"]
        if bad and len(bad) * 2 > len(e.reps):
            why = sorted({f for r in bad for f in r.flags})
            raise UserError(
                f"the baseline is {', '.join(why)} on this host: this workload measures the "
                "client (or an overloaded server), not the configuration. Change the load: "
                "use pipelining (load.pipeline), give kvload more client CPUs (load.cpus), or "
                "measure latency at a fixed open-loop rate below capacity (load.mode: open, "
                "a lower load.rate).")
        self.baseline_eval = e
        self.incumbent = e

    def _report_noise(self, noise: dict[str, float], robust: dict[str, float],
                      detectable: float) -> None:
        parts = [f"{m} CoV {v:.1%}" + (f" (robust {robust[m]:.1%})"
                                       if not math.isnan(robust.get(m, math.nan)) else "")
                 for m, v in noise.items() if not math.isnan(v)]
        self.console.print("  noise floor: " + ", ".join(dict.fromkeys(parts)))
        ev = self.spec.evaluation
        if math.isnan(detectable) or ev.confirm_rounds == 0:
            return
        want = ev.min_improvement or 0.05
        c = robust.get(self.metric, math.nan)
        c = noise.get(self.metric, math.nan) if math.isnan(c) else c
        self.console.print(
            f"  at this noise the confirmation ({ev.confirm_rounds} rounds) shows an "
            f"improvement of about {detectable:.0%} or more (80% power)")
        if detectable > 2 * want:
            need = rounds_needed(c, want, ev.alpha, ev.confirm_top)
            self.console.print(
                f"  [yellow]warning:[/] smaller real gains may end as \"no significant "
                f"improvement\"; to resolve {want:.0%}, set evaluation.confirm_rounds to about "
                f"{need} (or lengthen load.duration, or quiet the host)")

    def _search(self, study: optuna.Study, started: float) -> None:
        b = self.spec.budget
        if self.spec.sampler == "grid":
            done = {config_key(t.user_attrs.get("config", {})) for t in study.trials}
            for c in grid_configs(self.knobs, self.session.baseline):
                if config_key(c) not in done:
                    study.enqueue_trial(fixed_params(self.knobs, c), skip_if_exists=True)
        total = b.trials or 0
        finished = sum(1 for t in study.get_trials(deepcopy=False)
                       if t.state.is_finished() and t.user_attrs.get("kind") != "baseline")
        since_drift = 0
        with _progress(self.console) as prog:
            task = prog.add_task("trials", total=total or None, completed=finished)
            while not self._done(study, started):
                trial = study.ask()
                config = suggest(trial, self.knobs)
                # Rules between knobs are checked before a trial runs, never discovered.
                violation = check_rules(config, self.session.ctx,
                                        relax=self.spec.relax_rules)
                if violation:
                    e = Evaluation(config, failed=violation)
                else:
                    e = self.evaluator.evaluate(config, "trial", trial.number,
                                                incumbent=self.incumbent)
                self._tell(study, trial, e, "trial")
                prog.advance(task)
                self._print_trial(trial.number, e)
                if e.feasible and self.incumbent is not None and self.evaluator.better(
                        e.value, self.incumbent.value):
                    self.incumbent = e
                since_drift += 1
                if self.spec.evaluation.drift_every and since_drift >= \
                        self.spec.evaluation.drift_every and not self._done(study, started):
                    self.drift_check(trial.number)
                    since_drift = 0
        if self.spec.evaluation.drift_every:
            self.drift_check(None)

    def _print_trial(self, number: int, e: Evaluation) -> None:
        if e.failed:
            self.console.print(f"  trial {number}: [red]failed[/] {e.failed}")
            return
        lo, hi = e.ci
        ci = f" [{_fmt(lo)}, {_fmt(hi)}]" if not math.isnan(lo) else ""
        note = " (stopped early)" if e.stopped_early else ""
        note += "" if e.feasible else " [yellow]infeasible[/]"
        note += f" flags: {', '.join(e.flags)}" if e.flags else ""
        params = ", ".join(f"{k.split('.', 1)[-1]}={_fmt(v)}" for k, v in e.config.items())
        self.console.print(f"  trial {number}: {self.metric} {_fmt(e.value)}{ci} "
                           f"n={len(e.reps)}{note}  {params}")

    def _tell(self, study: optuna.Study, trial: optuna.Trial, e: Evaluation, kind: str) -> None:
        trial.set_user_attr("kind", kind)
        trial.set_user_attr("config", e.config)
        trial.set_user_attr("eval", _jsonable(e.summary()))
        violations = e.violations or [0.0] * (len(self.spec.constraints) + 1)
        trial.set_user_attr("violations", violations)
        names = [*self.spec.constraints, "not saturated"]
        for name, v in zip(names, violations, strict=False):
            trial.set_constraint(name, v)
        if e.failed:
            trial.set_user_attr("failed", e.failed)
            trial.set_user_attr("stderr", e.failed_stderr[-2000:])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        study.tell(trial, e.value)

    # -- drift -----------------------------------------------------------------------------

    def drift_check(self, after_trial: int | None) -> dict[str, Any] | None:
        if self.baseline_eval is None:
            return None
        self.console.print("  re-measuring the baseline (drift check)")
        ev = self.spec.evaluation
        e = self.evaluator.evaluate(self.session.baseline, "drift", after_trial,
                                    n=max(self.spec.repetitions, 5))
        if e.failed:
            return None
        c = compare(e.values, self.baseline_eval.values, self.direction, seed=self.spec.seed,
                    two_sided=True)
        # Bonferroni over the study's planned checks, so a drift-free host rarely alarms;
        # small samples make bootstrap CIs too narrow, so a move needs the rank test too.
        checks = 1 + (self.spec.budget.trials or 30) // max(ev.drift_every, 1)
        moved = not (c.ci_low <= 0 <= c.ci_high) and c.p_value < ev.alpha / checks
        rec = {"after_trial": after_trial, "value": e.value, "ci": list(e.ci),
               "values": e.values, "change": c.as_dict(), "moved": moved,
               "alpha": ev.alpha / checks}
        self.store.put_result(self.spec.study, "drift", rec)
        if moved:
            ch, lo, hi = c.change()
            self.console.print(f"  [yellow]drift:[/] the baseline's {self.metric} moved by "
                               f"{ch:+.1%} (95% CI {lo:+.1%} … {hi:+.1%}); trials are "
                               "compared with the nearest baseline measurement")
        return rec

    # -- confirmation ----------------------------------------------------------------------

    def confirm(self, study: optuna.Study) -> dict[str, Any]:
        """Re-run the top candidates and the baseline interleaved (A B C A B C ...), then
        recommend the best candidate whose improvement is significant — or say that none
        is."""
        ev = self.spec.evaluation
        base_cfg = self.session.baseline
        seen = {config_key(base_cfg)}
        cands: list[dict[str, Any]] = []
        ranked = sorted(
            (t for t in study.get_trials(deepcopy=False,
                                          states=(optuna.trial.TrialState.COMPLETE,))
             if t.user_attrs.get("kind") == "trial"
             and all(v <= 0 for v in t.user_attrs.get("violations", [0.0]))),
            key=lambda t: float(t.value or 0) if self.direction == "minimize"
            else -float(t.value or 0))
        for t in ranked:
            cfg = t.user_attrs["config"]
            if config_key(cfg) in seen:
                continue
            seen.add(config_key(cfg))
            cands.append({"trial": t.number, "config": cfg, "search_value": t.value})
            if len(cands) >= ev.confirm_top:
                break
        if not cands:
            result: dict[str, Any] = {
                "recommended": None, "candidates": [],
                "verdict": "no feasible candidate better than the baseline was found"}
            self.store.put_result(self.spec.study, "confirmation", result)
            return result
        arms = [{"name": "baseline", "config": base_cfg}] + [
            {"name": f"trial {c['trial']}", "config": c["config"]} for c in cands]
        samples: dict[str, list[float]] = {a["name"]: [] for a in arms}
        metrics: dict[str, list[dict[str, Any]]] = {a["name"]: [] for a in arms}
        failures: dict[str, str] = {}
        rng = random.Random(self.spec.seed)
        self.console.print(f"[bold]Confirmation[/]: baseline and {len(cands)} candidate(s), "
                           f"{ev.confirm_rounds} interleaved rounds")
        with _progress(self.console) as prog:
            task = prog.add_task("confirm", total=ev.confirm_rounds * len(arms))
            for _ in range(ev.confirm_rounds):
                order = arms[:]
                rng.shuffle(order)
                for a in order:
                    prog.advance(task)
                    if a["name"] in failures:
                        continue
                    rep = self.evaluator.run_one(a["config"], "confirm", None)
                    if rep.status == "failed":
                        failures[a["name"]] = rep.reason
                        continue
                    v = rep.metrics.get(self.metric)
                    if v is not None:
                        samples[a["name"]].append(float(v))
                        metrics[a["name"]].append(rep.metrics)
        comps = []
        for c in cands:
            name = f"trial {c['trial']}"
            comp = compare(samples[name], samples["baseline"], self.direction,
                           seed=self.spec.seed)
            comps.append((c, name, comp))
        adjusted = holm([comp.p_value for _, _, comp in comps])
        out_c = []
        best = None
        for (c, name, comp), p_adj in zip(comps, adjusted, strict=True):
            ok = (name not in failures and p_adj < ev.alpha
                  and comp.ci_low > ev.min_improvement)
            row = {**c, "name": name, "samples": samples[name], "comparison": comp.as_dict(),
                   "p_adjusted": p_adj, "significant": ok, "failed": failures.get(name),
                   "metrics": _median_metrics(metrics[name])}
            out_c.append(row)
            if ok and (best is None or comp.improvement > best["comparison"]["improvement"]):
                best = row
        result = {
            "metric": self.metric, "direction": self.direction, "alpha": ev.alpha,
            "rounds": ev.confirm_rounds, "baseline": {"config": base_cfg,
                                                      "samples": samples["baseline"],
                                                      "metrics": _median_metrics(
                                                          metrics["baseline"])},
            "candidates": out_c, "recommended": best,
            "verdict": (f"{best['name']} changes {self.metric} by "
                        f"{best['comparison']['change']:+.1%} (95% CI "
                        f"{best['comparison']['change_ci_low']:+.1%} … "
                        f"{best['comparison']['change_ci_high']:+.1%}), a significant "
                        f"improvement (Holm-adjusted p={best['p_adjusted']:.3g})"
                        if best else "no significant improvement found"),
        }
        self.store.put_result(self.spec.study, "confirmation", result)
        return result


def _median_metrics(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    from kvtune.stats import centre

    keys = {k for r in rows for k, v in r.items() if isinstance(v, int | float)
            and not isinstance(v, bool)}
    return {k: centre([float(r[k]) for r in rows if isinstance(r.get(k), int | float)])
            for k in sorted(keys)}


def _jsonable(obj: Any) -> Any:
    import json

    from kvtune.store import dumps

    return json.loads(dumps(obj))


def _evaluation_from_attrs(t: optuna.trial.FrozenTrial, metric: str) -> Evaluation:
    s = t.user_attrs.get("eval", {})
    e = Evaluation(t.user_attrs.get("config", {}))
    e._metric = metric
    e.value = float(t.value) if t.value is not None else math.nan
    ci = s.get("ci") or [None, None]
    e.ci = (ci[0] if ci[0] is not None else math.nan, ci[1] if ci[1] is not None else math.nan)
    e.metrics = s.get("metrics", {})
    e.violations = t.user_attrs.get("violations", [0.0])
    return e


# -- sweep and run ---------------------------------------------------------------------------


def sweep(loaded: Loaded, knob_name: str, values: list[str] | None, repetitions: int | None,
          console: Console, base_dir: Path | None = None) -> dict[str, Any]:
    spec = loaded.spec
    knob = next((k for k in loaded.knobs if k.name == knob_name), None)
    if knob is None:
        from kvtune.spec import KnobSpec, _build_knob

        try:
            knob = _build_knob(KnobSpec(name=knob_name), spec.target.kind)
        except ValueError as e:
            raise UserError(f"--knob: {e}") from None
        loaded = Loaded(spec, [*loaded.knobs, knob], loaded.path)
    try:
        vals = [knob.domain.coerce(v) for v in values] if values else knob.domain.grid(6)
    except ValueError as e:
        raise UserError(f"--values for {knob_name}: {e}") from None
    n = repetitions or spec.repetitions
    run = StudyRun(loaded, console, base_dir)
    run.session.preflight()
    name = f"{spec.study}.sweep.{knob_name}"
    study = optuna.create_study(study_name=name, storage=run.store.storage,
                                direction=run.direction, load_if_exists=True)
    run.evaluator.study = name
    rows = []
    console.print(f"[bold]Sweep[/] {knob_name} over {len(vals)} values, {n} repetitions each")
    with _host(run.session, spec), _progress(console) as prog:
        task = prog.add_task("sweep", total=len(vals) * n)
        for v in vals:
            config = dict(run.session.baseline)
            config[knob_name] = v
            study.enqueue_trial(fixed_params(loaded.knobs, config))
            trial = study.ask()
            cfg = suggest(trial, loaded.knobs)
            ev = run.evaluator.evaluate(cfg, "sweep", trial.number, n=n,
                                        on_rep=lambda _e: prog.advance(task))
            run._tell(study, trial, ev, "sweep")
            rows.append({"value": v, "metric": run.metric, "median": ev.value,
                         "ci": list(ev.ci), "n": len(ev.reps), "failed": ev.failed,
                         "metrics": ev.metrics, "values": ev.values})
    result = {"knob": knob_name, "metric": run.metric, "direction": run.direction,
              "baseline_value": run.session.baseline.get(knob_name), "rows": rows}
    run.store.put_result(spec.study, f"sweep:{knob_name}", result)
    return result


def run_config(loaded: Loaded, overrides: dict[str, str], repetitions: int | None,
               console: Console, base_dir: Path | None = None) -> dict[str, Any]:
    spec = loaded.spec
    by_name = {k.name: k for k in loaded.knobs}
    knobs = list(loaded.knobs)
    for name in overrides:
        if name not in by_name:
            from kvtune.spec import KnobSpec, _build_knob

            try:
                k = _build_knob(KnobSpec(name=name), spec.target.kind)
            except ValueError as e:
                raise UserError(f"--set {name}: {e}") from None
            knobs.append(k)
            by_name[name] = k
    run = StudyRun(Loaded(spec, knobs, loaded.path), console, base_dir)
    run.session.preflight()
    config = dict(run.session.baseline)
    problems = []
    for name, raw in overrides.items():
        try:
            config[name] = by_name[name].domain.coerce(raw)
        except ValueError as e:
            problems.append(f"--set {name}={raw}: {e}")
    if problems:
        raise UserError("bad --set value(s); nothing was applied", problems)
    n = repetitions or spec.repetitions
    run.evaluator.study = f"{spec.study}.runs"
    with _host(run.session, spec), _progress(console) as prog:
        task = prog.add_task("run", total=n)
        ev = run.evaluator.evaluate(config, "run", None, n=n,
                                    on_rep=lambda _e: prog.advance(task))
    return {"config": config, **_jsonable(ev.summary())}

