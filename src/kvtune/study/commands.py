"""`kvtune sweep` (one knob at a time, the others at the baseline; or the load's rate: the
latency–throughput curve) and `kvtune run` (one configuration with repetitions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from kvtune import present
from kvtune.errors import UserError
from kvtune.host.context import on_host
from kvtune.knobs.knob import Knob
from kvtune.knobs.resolve import build_knob
from kvtune.quantities import MAX_RATE, parse_rate
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


# `kvtune sweep --knob load.rate`: not a knob of the server but the load's open-loop rate.
LOAD_RATE = "load.rate"


def parse_rates(values: list[str] | None) -> list[float]:
    """`--values` of a rate sweep: requests/s, with k and M suffixes (20k, 1.5M)."""
    if not values:
        raise UserError("--knob load.rate needs --values, e.g. --values 20k,40k,60k")
    rates = []
    for v in values:
        try:
            r = parse_rate(v)
        except ValueError as e:
            raise UserError(f"--values: {e}") from None
        if r > MAX_RATE:
            raise UserError(f"--values: {v!r} is outside kvload's open-loop rates "
                            f"(above 0, at most {present.figure(MAX_RATE)} req/s)")
        rates.append(r)
    return rates


def sweep_rate(loaded: Loaded, values: list[str] | None, repetitions: int | None,
               console: Console, base_dir: Path | None = None) -> dict[str, Any]:
    """The objective at each open-loop rate of `values`, the configuration at its baseline,
    each repetition on a fresh server: the latency–throughput curve with CIs."""
    from kvtune.load import driver_for

    spec = loaded.spec
    if spec.load is None:
        raise UserError(f"--knob load.rate: the {spec.target.kind} target has no load to "
                        "sweep")
    if spec.load.mode != "open":
        raise UserError("--knob load.rate: load.mode is closed, and a closed loop has no "
                        "rate (set load.mode: open)")
    if spec.capacity is not None:
        raise UserError("--knob load.rate: the objective is capacity, whose searches choose "
                        "their own rates (the report draws their curve); sweep the rate in "
                        "a study with a latency objective, or run `kvload --ramp`")
    rates = parse_rates(values)
    run = StudyRun(loaded, console, base_dir)
    space = run.preflight()
    config = space.baseline_config()
    n = repetitions or spec.repetitions
    run.evaluator.study = f"{spec.study}.sweep.{LOAD_RATE}"
    rows = []
    console.print(f"[bold]Sweep[/] {LOAD_RATE} over {len(rates)} rates, {n} repetitions each "
                  "(the configuration at its baseline)")
    with on_host(run.session, spec.study), progress(console) as prog:
        task = prog.add_task("sweep", total=len(rates) * n)
        for r in rates:
            # The rate as given: a workload file's rate_scale does not apply to it.
            driver = driver_for(spec.load.model_copy(update={"rate": r, "rate_scale": None}))
            driver.prepare()
            run.session.load_driver = driver
            ev = run.evaluator.evaluate(config, "sweep", None, n=n,
                                        on_rep=lambda _e: prog.advance(task))
            rows.append({"value": r, "metric": run.metric, "median": ev.value,
                         "ci": list(ev.ci), "n": len(ev.reps), "failed": ev.failed,
                         "metrics": ev.metrics, "values": ev.values,
                         "verdicts": [rep.metrics.get("verdict") for rep in ev.reps]})
    result = {"knob": LOAD_RATE, "metric": run.metric, "direction": run.direction,
              "baseline_value": spec.load.rate, "rows": rows}
    run.store.put_result(spec.study, f"sweep:{LOAD_RATE}", result)
    return result


def sweep(loaded: Loaded, knob_name: str, values: list[str] | None, repetitions: int | None,
          console: Console, base_dir: Path | None = None) -> dict[str, Any]:
    if knob_name == LOAD_RATE:
        return sweep_rate(loaded, values, repetitions, console, base_dir)
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
                                direction=run.direction.text, load_if_exists=True)
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
    with on_host(run.session, spec.study):
        profile = run.profile_host(config)
        if spec.capacity is not None:
            console.print(f"[bold]Capacity[/] at {spec.capacity.slo}: {n} search(es), each "
                          "on a fresh server")
        with progress(console) as prog:
            task = prog.add_task("run", total=n)
            ev = run.evaluator.evaluate(config, "run", None, n=n,
                                        on_rep=lambda _e: prog.advance(task))
    from kvtune.load.kvload import search_ci, search_steps
    from kvtune.measure.evaluator import pooled_capacity

    # Each repetition: its status and metrics, and a capacity search's knee, interval,
    # verdict and runs (the curve).
    reps = []
    for r in ev.reps:
        row: dict[str, Any] = {"status": r.status, "reason": r.reason, "flags": r.flags,
                               "metrics": r.metrics, "steps": search_steps(r.raw.get("load"))}
        doc = r.raw.get("load")
        if spec.capacity is not None and isinstance(doc, dict):
            ci = search_ci(doc)
            windows = doc.get("windows") or {}
            row["search"] = {
                "verdict": doc.get("verdict"), "reason": doc.get("reason"),
                "knee": doc.get("knee"), "ci": list(ci) if ci else None,
                "transient": bool(r.raw.get("transient")),
                "runs": len(doc.get("steps") or []),
                "windows": windows.get("total"),
                "dropped": sum((windows.get("dropped") or {}).values()),
                "dips": (doc.get("shape") or {}).get("dips") or [],
                "reference": doc.get("reference") or []}
        reps.append(row)
    out: dict[str, Any] = {"config": config, **jsonable(ev.summary()),
                           "repetitions": jsonable(reps)}
    if spec.capacity is not None:
        ok = [r for r in ev.reps if r.status != "failed"]
        pooled = pooled_capacity(ok) if ok else None
        for i in host_outliers(reps):
            reps[i]["search"]["host_differed"] = True
        out["capacity"] = {
            "slo": str(spec.capacity.slo), "planned": n, "searches": len(ev.reps),
            "remeasured": max(0, len(ev.reps) - n), "with_knee": len(ok),
            "value": pooled.value if pooled else None,
            "ci": list(pooled.ci) if pooled else None,
            "heterogeneity_p": pooled.heterogeneity_p if pooled else None,
            "tau": pooled.tau if pooled else None,
            "host_profile": profile}
    return jsonable(out)


def host_outliers(reps: list[dict[str, Any]]) -> list[int]:
    """The searches that ran on a host unlike the others': each search's first look at
    its reference rate (kvload's host watch) against the median of the others' at the
    same rate, when their 95% intervals are disjoint. Searches differ in their reference
    rate only when their bursts did; those are compared only with the ones at the same
    rate."""
    looks = []
    for i, r in enumerate(reps):
        s = r.get("search") or {}
        ref = (s.get("reference") or [None])[0]
        rate = next((x.get("rate") for x in r.get("steps") or []
                     if x.get("purpose") == "reference"), None)
        if ref and rate and all(isinstance(v, int | float) for v in (*ref["ci"],
                                                                   ref["latency_us"])):
            looks.append((i, rate, ref["latency_us"], ref["ci"]))
    out = []
    for i, rate, _, ci in looks:
        others = [x for x in looks if x[0] != i and abs(x[1] / rate - 1) < 0.05]
        if len(others) < 2:
            continue
        lats = sorted(x[2] for x in others)
        med = lats[len(lats) // 2]
        near = min(others, key=lambda x: abs(x[2] - med))
        if ci[0] > near[3][1] or ci[1] < near[3][0]:
            out.append(i)
    return out
