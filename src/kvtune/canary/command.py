"""`kvtune canary`: its inputs checked before anything is read from a server (one line,
exit 2, nothing started), the canary verified (`kvtune verify`, when the study is named),
the session run (session.py) with a line per look, its record and its HTML page written.

Exit codes: 0 promote (or an A/A pair that agrees), 1 roll back, inconclusive, a canary not
verified or an A/A pair that differs, 2 bad input, 3 a rollback that did not take."""

from __future__ import annotations

import dataclasses
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
    # the change from the operator's own config files instead of a study's export
    config_file: Path | None = None  # what the canary runs
    current_config: Path | None = None  # what the control runs, the rollback


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
    if o.current_config is not None and o.config_file is None:
        raise UserError("--current-config needs --config FILE (the canary's config file, the "
                        "change)")
    if o.config_file is not None and (o.export_dir is not None or o.study is not None):
        raise UserError("--config with --export or --study: the change comes from one "
                        "source, the operator's config file or a study's export")
    if o.config_file is not None and o.aa:
        raise UserError("--config with --aa: an A/A pair runs one configuration; there is "
                        "no change to check")
    if o.rollback_on_breach and o.config_file is not None and o.current_config is None:
        raise UserError("--rollback-on-breach with --config needs --current-config FILE "
                        "(the configuration the control runs): the canary goes back to it")
    if o.rollback_on_breach and o.export_dir is None and o.config_file is None:
        raise UserError("--rollback-on-breach needs --export DIR (the directory `kvtune "
                        "export` wrote) or --config and --current-config: kvtune rolls "
                        "back with the change's own rollback file, never a hand-made "
                        "command")
    change = None
    if o.config_file is not None:
        change = config_change(o.config_file, o.current_config, o.kind, reader)
        if o.current_config is not None:
            rollback = config_rollback(change, reader)
    if o.export_dir is not None:
        rollback = ses.rollback_from_export(o.export_dir, o.kind, reader)
    for p, what in ((o.json_out, "-o"), (o.report, "--report")):
        if p is not None and not p.parent.is_dir():
            raise UserError(f"{what} {p}: {p.parent} is not a directory")
    return ses.Plan(o.kind, canaries, controls, rules, interval_s=interval,
                    max_time_s=max_time, warmup_looks=o.warmup, alpha=o.alpha,
                    aa=o.aa, rollback=rollback, rollback_on_breach=o.rollback_on_breach,
                    probe_rate=o.probe_rate, change=change)


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


def _read_config(path: Path, what: str) -> str:
    from kvtune.targets.server_config import read_text

    try:  # judged before it is opened: a regular file outside /proc, /sys, /dev, bounded
        text = read_text(path)
    except ValueError as e:
        raise UserError(f"{what}: {e}") from None
    if any(ord(ch) < 32 and ch not in "\t\n\r" for ch in text):
        raise UserError(f"{what} {path}: not a text config file (control characters)")
    return text


def config_change(config: Path, current: Path | None, kind: str, reader: watch.Reader
                  ) -> ses.Change:
    """The change the operator's config file makes: each setting it gives differently from
    the current config file (every setting it gives, without one), the instance's own port,
    address and files left out (UserError when it changes nothing)."""
    new = _read_config(config, "--config")
    old = _read_config(current, "--current-config") if current is not None else ""
    try:
        settings = reader.changes(new, old)
    except ValueError as e:
        raise UserError(f"--config {config}: {e}") from None
    if not settings:
        raise UserError(f"--config {config}: " + (
            f"sets nothing differently from --current-config {current}" if current else
            f"sets no {kind} setting"))
    return ses.Change(config, current, settings)


def config_rollback(change: ses.Change, reader: watch.Reader) -> ses.Rollback:
    """The rollback of a config-file change: each changed setting to the current file's
    value (UserError when the current file leaves one to the default, or the kind cannot
    set it live)."""
    assert change.current is not None
    unset = [n for n, (_, b) in change.settings.items() if b is None]
    if unset:
        raise UserError(f"--current-config {change.current}: does not set "
                        f"{', '.join(unset)}, which --config changes; write its value there "
                        "so the rollback can put it back")
    new = "\n".join(f"{n} {a}" for n, (a, _) in change.settings.items())
    back = "\n".join(f"{n} {b}" for n, (_, b) in change.settings.items())
    try:
        settings = reader.rollback_settings(new, back)
    except UserError as e:
        raise UserError(f"--config {change.file}: {e}") from None
    return ses.Rollback(change.file, change.current, settings)


def check_settings(plan: ses.Plan, reader: watch.Reader, expected: dict[str, str],
                   source: str) -> tuple[bool, list[str]]:
    """Each canary's settings read back from the server (`kvtune verify`'s live read-back:
    CONFIG GET, memcached's stats settings) against `expected`; one line each, as verify
    words them. A setting the server does not report is a line that says so, and fails."""
    ok, lines = True, []
    for s in plan.canaries:
        conn = s.connect()
        try:
            found = reader.settings(conn, list(expected))
        except (OSError, ConnectionError, ValueError) as e:
            raise UserError(f"{s.address}: cannot read its settings: {e}") from None
        finally:
            s.close()
        for name, want in expected.items():
            got = found.get(name)
            same = got is not None and reader.same(want, got)
            ok &= same
            lines.append(f"{s.address}: {'ok     ' if same else 'DIFFERS'} {plan.kind} {name}: "
                         f"{source} {want}, " + (f"found {got}" if got is not None else
                                                 "not reported by the server (not checked "
                                                 "live)"))
    return ok, lines


def verify_rollback(plan: ses.Plan, reader: watch.Reader, rec: Recommendation | None
                    ) -> tuple[bool, list[str]]:
    """After a rollback: is the old configuration back on every canary? With the study,
    `kvtune verify` of its baseline (the configuration the export's rollback file puts back)
    on each canary's port, for the settings the rollback changed; with the operator's files,
    each changed setting read back against --current-config."""
    rb = plan.rollback
    assert rb is not None
    from kvtune import kind_registry as kinds

    if rec is None or plan.change is not None:
        expected = {n: b for n, (_, b) in plan.change.settings.items() if b is not None} \
            if plan.change is not None else dict(rb.settings)
        return check_settings(plan, reader, expected, f"in {rb.rollback_file.name}")
    if kinds.get(plan.kind).argv_checks is not None:
        # verify reads this kind's options from its command line, which a live rollback
        # leaves as it was until the restart with the rollback file: read them back live
        ok, lines = check_settings(plan, reader, dict(rb.settings),
                                   f"in {rb.rollback_file.name}")
        return ok, [*lines, f"({plan.kind}: kvtune verify reads the command line, which "
                            "shows the change until a restart with the rollback file; the "
                            "settings above are the server's own)"]
    from kvtune.verify import verify

    old = {k: v for k, v in rec.baseline.items() if rec.changed(k) and k in rec.config}
    back = dataclasses.replace(rec, config={**rec.config, **old}, baseline=dict(rec.config))
    ok, lines = True, []
    for s in plan.canaries:
        checks, _ = verify(back, None, False, s.port)
        mine = [c for c in checks if any(c.what.endswith(f" {n}") for n in rb.settings)]
        lines += [f"{s.address}: " + c.line().replace(": recommended ", ": old configuration ",
                                                     1) for c in mine]
        ok &= bool(mine) and all(c.ok for c in mine)
    return ok, lines
