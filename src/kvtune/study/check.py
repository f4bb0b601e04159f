"""`kvtune check FILE`: validate a study file and run preflight, applying nothing, and print
the plan — the knobs with their domains and availability, the host files the study would
write, the rules between its knobs, and the estimated wall time. Exit 0 when the study can
run here, 2 when it cannot (every reason listed).

    plan = make_plan("examples/case-studies/004-slab-rebalancer.yaml")
    plan.runnable, plan.problems, plan.knobs, plan.host_writes, plan.estimate
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from kvtune.errors import KvtuneError, UserError


@dataclass
class KnobPlan:
    name: str
    scope: str
    where: str
    domain: str
    baseline: Any
    available: bool
    reason: str = ""


@dataclass
class Estimate:
    repetition_s: float  # one repetition: server start, preload, warm-up, window, stop
    repetitions_min: int
    repetitions_max: int
    low_s: float
    high_s: float
    how: str


@dataclass
class Plan:
    path: str
    study: str = ""
    target: str = ""
    valid: bool = False
    knobs: list[KnobPlan] = field(default_factory=list)
    host_writes: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    estimate: Estimate | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    needs_root: str = ""  # as another user: what needs root, in one line ("" as root)

    @property
    def runnable(self) -> bool:
        return self.valid and not self.problems

    @property
    def exit_code(self) -> int:
        return 0 if self.runnable else 2

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["runnable"] = self.runnable
        return d


# Seconds a repetition spends outside the measured window: server start and readiness,
# kvload's connect, the stop and the wait for the port (measured here: 0.3–0.6 s).
OVERHEAD_S = 0.6
PRELOAD_KEYS_PER_S = 150_000  # kvload preload, pipelined sets on loopback
SEARCH_STEPS = 9  # steps of a capacity search at 3% precision, typical here (bench/capacity)


def estimate(spec: Any, n_knobs: int | None = None) -> Estimate | None:
    """Wall time of the study, from its load section, budget, repetitions and evaluation:
    the least (every trial measured `repetitions` times) and the most (intensification up
    to max_repetitions, every rerun), plus the noise floor and confirmation rounds, and the
    ablation's most (`n_knobs` changed, the study's searched knobs by default)."""
    load = spec.load
    if load is None:
        return None
    from kvtune.load.kvload import MAX_STEPS, file_duration
    from kvtune.study.ablation import max_cost_of

    preload = load.workload.keys / PRELOAD_KEYS_PER_S if load.workload.preload else 0.0
    if load.workload_file and "workload" not in load.model_fields_set:
        preload = 0.0  # the file's own keys decide; kvtune's defaults are not passed
    window = file_duration(load)
    rep = OVERHEAD_S + preload + load.warmup + window
    per_rep = f"{OVERHEAD_S:g} s start/stop, {preload:.1f} s preload, {load.warmup:g} s " \
              f"warm-up, {window:g} s window"
    if getattr(spec, "capacity", None) is not None:
        # A knee search per repetition: a closed-loop burst, then its steps, each a warm-up
        # and a window (docs/kvload.md).
        burst = min(window, 1.0) + min(load.warmup, 0.5)
        rep = OVERHEAD_S + preload + burst + SEARCH_STEPS * (load.warmup + window + 0.1)
        per_rep = (f"a capacity search: {OVERHEAD_S:g} s start/stop, {preload:.1f} s "
                   f"preload, a {burst:g} s burst, about {SEARCH_STEPS} steps of "
                   f"{load.warmup:g} s warm-up + {window:g} s window (at most {MAX_STEPS})")
    ev = spec.evaluation
    trials = spec.budget.trials or 0
    fixed = ev.noise_floor_runs + ev.confirm_rounds * (ev.confirm_top + 1 if ev.confirm_top
                                                        else 0)
    drift = (trials // ev.drift_every + 1) * spec.repetitions if ev.drift_every else 0
    lo = fixed + trials * spec.repetitions + drift
    per_trial_max = max(spec.repetitions, ev.max_repetitions if ev.intensify else 0)
    # The ablation runs only after a recommendation: none at the least, at the most every
    # knob changed and still ambiguous at its cap.
    n = len(spec.knobs) if n_knobs is None else n_knobs
    ablation = max_cost_of(n, ev) if ev.ablation and ev.confirm_top else 0
    hi = fixed + trials * (per_trial_max + ev.max_reruns) + drift + ablation
    how = (f"{rep:.1f} s per repetition ({per_rep}) × {lo}–{hi} "
           f"repetitions (noise floor {ev.noise_floor_runs}, {trials} trials × "
           f"{spec.repetitions}–{per_trial_max + ev.max_reruns}, confirmation "
           f"{fixed - ev.noise_floor_runs}, drift {drift}, ablation 0–{ablation})")
    limit = spec.budget.time
    if limit:
        how += f"; the study stops at its time budget, {limit:g} s"
    return Estimate(rep, lo, hi, rep * lo, min(rep * hi, limit) if limit else rep * hi, how)


def root_reason(spec: Any, command: str = "tune, run and sweep") -> str:
    """Why `kvtune COMMAND` of this study needs root, in one line ("" when it does not,
    or when kvtune runs as root): a target that runs a server on this host is started
    under the host lock and journal, and host knobs write kernel files."""
    import os

    from kvtune.knobs import catalog
    from kvtune.targets import target_class

    if os.geteuid() == 0 or not target_class(spec.target.kind).runs_server:
        return ""
    names = [e if isinstance(e, str) else e.name for e in spec.knobs]
    if spec.preset:  # every knob of the preset (no host context: nothing is probed)
        names += catalog.preset_names(spec.preset, cast(Any, None), available_only=False)
    inline = any(not isinstance(e, str) and e.applier is not None
                 and (e.applier.sysctl or e.applier.sysfs) for e in spec.knobs)
    host = inline or any((k := catalog.lookup(n)) is not None and k.scope in ("host", "cgroup")
                         for n in names)
    verb, it = ("need", "each starts") if " and " in command else ("needs", "it starts")
    return (f"kvtune {command} {verb} root for study {spec.study!r}: {it} "
            f"{spec.target.kind} fresh for every repetition under kvtune's host lock and "
            "journal (/run/kvtune, /var/lib/kvtune), so that `kvtune restore` can stop it "
            "after a crash" + (", and writes kernel settings (/proc/sys, /sys, cgroups)"
                               if host else "") + "; run it as root (sudo). `kvtune check`, "
            "`show`, `report` and `export` need no root")


def make_plan(path: str | Path, allow_inline_host_knobs: bool = False) -> Plan:
    """The plan of the study in `path`; nothing is applied and no server is started."""
    from kvtune.host.plan import plan_for
    from kvtune.knobs import catalog
    from kvtune.knobs.baseline import baseline_value
    from kvtune.knobs.rules import RULES
    from kvtune.measure import preflight
    from kvtune.study.loader import load_study as load
    from kvtune.targets import context_for, make_target

    plan = Plan(str(path))
    try:
        loaded = load(path, allow_inline_host_knobs)
    except UserError as e:
        plan.problems = [str(e).splitlines()[0], *e.problems]
        return plan
    spec = loaded.spec
    plan.notes += loaded.notes
    plan.valid = True
    plan.needs_root = root_reason(spec)
    plan.study, plan.target = spec.study, spec.target.kind
    try:
        target = make_target(spec.target)
        ctx = context_for(target)
    except KvtuneError as e:
        plan.problems.append(str(e))
        return plan
    on_host = target.runs_server
    plan.problems += preflight.problems(spec, loaded.knobs, ctx, on_host)
    if spec.load is not None and on_host:
        from kvtune import load as load_drivers

        try:
            load_drivers.driver_for(spec.load).prepare()
        except KvtuneError as e:
            plan.problems.append(str(e))
        if spec.load.workload_file and not Path(spec.load.workload_file).exists():
            plan.problems.append(f"load.workload_file: {spec.load.workload_file} does not "
                                 "exist")
    names = {k.name for k in loaded.knobs}
    for k in loaded.knobs:
        a = k.applier.check(ctx)
        try:
            base = baseline_value(k, ctx, spec.target.cpus)
        except (OSError, ValueError):
            base = None
        plan.knobs.append(KnobPlan(k.name, k.scope, k.applier.where(), k.domain.describe(),
                                   base, a.ok, a.reason))
        eq = catalog.equivalent(k.name, ctx)
        if eq and not a.ok:
            plan.notes.append(f"{k.name}: {eq}")
    # The one plan of host changes, which the session carries out (debugfs availability
    # is probed in a private mount namespace when it is not mounted).
    plan.host_writes = plan_for(loaded.knobs, ctx).lines()
    for r in RULES:
        others = [catalog.lookup(n) for n in r.knobs]
        if any(o is not None and o.target not in (None, spec.target.kind) for o in others):
            continue  # a rule of another server kind
        if set(r.subject or r.knobs) & names:
            plan.rules.append(f"{r.name}: {r.message}")
    plan.estimate = estimate(spec, n_knobs=sum(1 for k in plan.knobs if k.available))
    return plan


def render(plan: Plan, console: Any) -> None:
    """The plan for people. Everything but kvtune's own words is escaped for rich (a
    config line, a path or a server's answer may hold `[/bold]` or an ESC sequence)."""
    from rich.table import Table

    from kvtune.safety.text import for_markup as esc

    head = "[green]runnable[/]" if plan.runnable else "[red]NOT runnable[/]"
    console.print(f"[bold]kvtune check[/] {esc(plan.path)}: study {esc(plan.study or '?')} "
                  f"({esc(plan.target or '?')}): {head}")
    if plan.knobs:
        t = Table(title="Knobs")
        for c in ("knob", "scope", "domain", "baseline", "available", "where"):
            t.add_column(c)
        for k in plan.knobs:
            t.add_row(esc(k.name), esc(k.scope), esc(k.domain),
                      "-" if k.baseline is None else esc(k.baseline),
                      "[green]yes[/]" if k.available else f"[red]no[/]: {esc(k.reason)}",
                      esc(k.where))
        console.print(t)
    console.print("Host files the study would write (each journaled, restored after):")
    for w in plan.host_writes or ["none"]:
        console.print(f"  {esc(w)}", highlight=False)
    if plan.rules:
        console.print("Rules between its knobs:")
        for r in plan.rules:
            console.print(f"  {esc(r)}", highlight=False)
    if plan.estimate:
        e = plan.estimate
        console.print(f"Estimated wall time: {e.low_s / 60:.1f}–{e.high_s / 60:.1f} min "
                      f"({esc(e.how)})", highlight=False)
    for n in dict.fromkeys(plan.notes):
        console.print(f"[dim]note: {esc(n)}[/]", highlight=False)
    if plan.needs_root:
        console.print(f"[yellow]needs root:[/] {esc(plan.needs_root)}", highlight=False,
                      soft_wrap=True)
    for p in plan.problems:
        console.print(f"[red]problem:[/] {esc(p)}", highlight=False)


def main(path: str, as_json: bool, console: Any, allow_inline_host_knobs: bool = False) -> int:
    plan = make_plan(path, allow_inline_host_knobs)
    if as_json:
        print(json.dumps(plan.as_dict(), indent=1, default=str))
    else:
        render(plan, console)
    return plan.exit_code
