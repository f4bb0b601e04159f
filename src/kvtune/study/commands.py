"""`kvtune sweep` (one knob at a time, the others at the baseline) and `kvtune run` (one
configuration with repetitions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from kvtune.errors import UserError
from kvtune.host.context import on_host
from kvtune.knobs.knob import Knob
from kvtune.knobs.resolve import build_knob
from kvtune.spec import KnobSpec
from kvtune.study.loader import Loaded
from kvtune.study.progress import jsonable, progress
from kvtune.study.record import tell
from kvtune.study.run import StudyRun
from kvtune.targets import target_knobs


def with_knobs(loaded: Loaded, names: list[str], option: str) -> Loaded:
    """`loaded` with the knobs `names` added (from the catalog or the target's own) when the
    study does not tune them; `option` names the command-line option in errors."""
    knobs: list[Knob] = list(loaded.knobs)
    have = {k.name for k in knobs}
    kind = loaded.spec.target.kind
    for name in names:
        if name in have:
            continue
        try:
            knobs.append(build_knob(KnobSpec(name=name), kind, target_knobs(kind)))
        except ValueError as e:
            raise UserError(f"{option}: {e}") from None
        have.add(name)
    return Loaded(loaded.spec, knobs, loaded.path)


def sweep(loaded: Loaded, knob_name: str, values: list[str] | None, repetitions: int | None,
          console: Console, base_dir: Path | None = None) -> dict[str, Any]:
    spec = loaded.spec
    loaded = with_knobs(loaded, [knob_name], "--knob")
    run = StudyRun(loaded, console, base_dir)
    space = run.preflight()
    knob = space.knob(knob_name)
    try:
        vals = [knob.domain.coerce(v) for v in values] if values else knob.domain.grid(6)
    except ValueError as e:
        raise UserError(f"--values for {knob_name}: {e}") from None
    n = repetitions or spec.repetitions
    name = f"{spec.study}.sweep.{knob_name}"
    study = optuna.create_study(study_name=name, storage=run.store.storage,
                                direction=run.direction, load_if_exists=True)
    run.evaluator.study = name
    rows = []
    console.print(f"[bold]Sweep[/] {knob_name} over {len(vals)} values, {n} repetitions each")
    with on_host(run.session, spec.study), progress(console) as prog:
        task = prog.add_task("sweep", total=len(vals) * n)
        for v in vals:
            study.enqueue_trial(space.fixed_params({**space.baseline, knob_name: v}))
            trial = study.ask()
            cfg = space.suggest(trial)
            ev = run.evaluator.evaluate(cfg, "sweep", trial.number, n=n,
                                        on_rep=lambda _e: prog.advance(task))
            tell(study, trial, ev, "sweep", spec.constraints)
            rows.append({"value": v, "metric": run.metric, "median": ev.value,
                         "ci": list(ev.ci), "n": len(ev.reps), "failed": ev.failed,
                         "metrics": ev.metrics, "values": ev.values})
    result = {"knob": knob_name, "metric": run.metric, "direction": run.direction,
              "baseline_value": space.baseline.get(knob_name), "rows": rows}
    run.store.put_result(spec.study, f"sweep:{knob_name}", result)
    return result


def run_config(loaded: Loaded, overrides: dict[str, str], repetitions: int | None,
               console: Console, base_dir: Path | None = None) -> dict[str, Any]:
    spec = loaded.spec
    run = StudyRun(with_knobs(loaded, list(overrides), "--set"), console, base_dir)
    space = run.preflight()
    config = space.baseline_config()
    problems = []
    for name, raw in overrides.items():
        try:
            config[name] = space.knob(name).domain.coerce(raw)
        except ValueError as e:
            problems.append(f"--set {name}={raw}: {e}")
    if problems:
        raise UserError("bad --set value(s); nothing was applied", problems)
    n = repetitions or spec.repetitions
    run.evaluator.study = f"{spec.study}.runs"
    with on_host(run.session, spec.study), progress(console) as prog:
        task = prog.add_task("run", total=n)
        ev = run.evaluator.evaluate(config, "run", None, n=n,
                                    on_rep=lambda _e: prog.advance(task))
    from kvtune.load.kvload import search_steps

    # Each repetition: its status and metrics, and a capacity search's steps (the curve).
    reps = [{"status": r.status, "reason": r.reason, "flags": r.flags,
             "metrics": r.metrics, "steps": search_steps(r.raw.get("load"))}
            for r in ev.reps]
    return {"config": config, **jsonable(ev.summary()), "repetitions": jsonable(reps)}
