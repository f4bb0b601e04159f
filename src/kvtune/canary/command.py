"""`kvtune canary`: its inputs checked before anything is read from a server (one line,
exit 2, nothing started), the canary verified (`kvtune verify`, when the study is named),
the session run (session.py) with a line per look, its record and its HTML page written.

Exit codes: 0 promote (or an A/A pair that agrees), 1 roll back, inconclusive, a canary not
verified or an A/A pair that differs, 2 bad input, 3 a rollback that did not take."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvtune.canary import session as ses
from kvtune.canary import verdict as vd
from kvtune.canary import watch
from kvtune.durations import parse_duration
from kvtune.errors import UserError

if TYPE_CHECKING:
    from kvtune.export.base import Recommendation


@dataclass(frozen=True)
class Options:
    kind: str
    canaries: list[str]
    controls: list[str]
    goal: str | None
    guardrails: list[str]
    interval: str
    max_time: str
    warmup: int
    alpha: float
    aa: bool
    study: str | None
    storage: str | None
    export_dir: Path | None
    rollback_on_breach: bool
    json_out: Path | None
    report: Path | None
    probe_rate: float | None = None
    # the study's own rules (its `canary:` section), used when the command line gives none
    study_rules: tuple[str | None, list[str]] | None = None


def _duration(text: str, what: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise UserError(f"{what} {text!r}: {e}") from None


def plan_from(o: Options) -> ses.Plan:
    """The session's plan, every input checked (UserError, one line)."""
    reader = watch.reader_of(o.kind)
    if not o.canaries or not o.controls:
        raise UserError("--canary and --control: give at least one of each (HOST:PORT on "
                        "this host)")
    if len(o.canaries) != len(o.controls):
        raise UserError(f"--canary and --control pair up: {len(o.canaries)} canaries and "
                        f"{len(o.controls)} controls")
    canaries = [watch.parse_server(t, "canary") for t in o.canaries]
    controls = [watch.parse_server(t, "control") for t in o.controls]
    ports = [s.port for s in canaries + controls]
    if len(set(ports)) != len(ports):
        raise UserError("--canary/--control: a server is named twice (" + ", ".join(
            f"127.0.0.1:{p}" for p in sorted({p for p in ports if ports.count(p) > 1}))
            + ")")
    interval = _duration(o.interval, "--interval")
    max_time = _duration(o.max_time, "--max-time")
    if not 0.05 <= interval <= 3600:
        raise UserError(f"--interval {o.interval}: between 50ms and 1h")
    if max_time < interval * 2:
        raise UserError(f"--max-time {o.max_time}: at least two intervals ({o.interval})")
    if not 0 < o.alpha < 0.5:
        raise UserError(f"--alpha {o.alpha}: a level between 0 and 0.5")
    if not 0 <= o.warmup <= 1000:
        raise UserError(f"--warmup {o.warmup}: looks to discard, 0 to 1000")
    if o.probe_rate is not None and not 1 <= o.probe_rate <= 10000:
        raise UserError(f"--probe-rate {o.probe_rate:g}: requests/s per server, 1 to 10000 "
                        "(a probe is a small share of the traffic)")
    metrics = watch.metrics_for(reader, probe=o.probe_rate is not None)
    if o.study_rules is not None and o.goal is None and not o.guardrails:
        goal, guards = o.study_rules
        rules = vd.rules_for(guards, goal, metrics, reader.latency,
                             (f"{o.study}: canary.goal", f"{o.study}: canary.guardrails"))
    else:
        rules = vd.rules_for(o.guardrails, o.goal, metrics, reader.latency)
    rollback = None
    if o.rollback_on_breach and o.aa:
        raise UserError("--rollback-on-breach with --aa: an A/A session changes nothing to "
                        "roll back")
    if o.rollback_on_breach and o.export_dir is None:
        raise UserError("--rollback-on-breach needs --export DIR (the directory `kvtune "
                        "export` wrote): kvtune rolls back with the export's own rollback "
                        "file, never a hand-made command")
    if o.export_dir is not None:
        rollback = ses.rollback_from_export(o.export_dir, o.kind, reader)
    for p, what in ((o.json_out, "-o"), (o.report, "--report")):
        if p is not None and not p.parent.is_dir():
            raise UserError(f"{what} {p}: {p.parent} is not a directory")
    return ses.Plan(o.kind, canaries, controls, rules, interval_s=interval,
                    max_time_s=max_time, warmup_looks=o.warmup, alpha=o.alpha,
                    aa=o.aa, rollback=rollback, rollback_on_breach=o.rollback_on_breach,
                    probe_rate=o.probe_rate)


def recommendation(study_url: tuple[str, str]) -> Recommendation:
    """The study's recommendation, as `kvtune verify` reads it."""
    from kvtune import export as ex
    from kvtune.store import results_store

    name, url = study_url
    return ex.recommendation(results_store(url), name, verb="verify")


def study_rules(rec: Recommendation) -> tuple[str | None, list[str]] | None:
    """The goal and guardrails of the study's `canary:` section, None without one."""
    section = rec.spec.get("canary")
    if not isinstance(section, dict):
        return None
    goal = section.get("goal")
    return (str(goal) if goal else None,
            [str(g) for g in section.get("guardrails") or []])


def verify_canaries(plan: ses.Plan, study: str, rec: Recommendation) -> tuple[bool, list[str]]:
    """`kvtune verify` of the study's recommendation on each canary (by its port): whether
    every check holds, and the lines."""
    from kvtune.verify import verify

    if rec.target != plan.kind:
        raise UserError(f"--study {study}: its target is {rec.target}, not --kind {plan.kind}")
    ok, lines = True, []
    for s in plan.canaries:
        checks, notes = verify(rec, None, False, s.port)
        lines += [f"{s.address}: {n}" for n in notes]
        lines += [f"{s.address}: {c.line()}" for c in checks]
        ok &= bool(checks) and all(c.ok for c in checks)
    return ok, lines
